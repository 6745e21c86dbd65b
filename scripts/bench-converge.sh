#!/usr/bin/env bash
# N Memcached CRs created at once → seconds until every one has its Deployment, its Pod
# and Available=True in status; with the host's CPU seconds, peak RSS and reconciles (a
# reconcile of either kind costs about the same, so the count explains most CPU swings),
# then the requests the operator sent to the apiserver per Memcached, by verb and
# resource, from the control plane's audit log (scripts/audit-requests.py).
# Usage: scripts/bench-converge.sh [N] [wasm|js|native] (default 200, wasm). Needs `make
# plugins`; starts (or reuses) the local control plane and an optimized build of the host (WASMOP_BENCH_PROFILE, as in scripts/benchlib.py).
# `native` runs the same reconcile code compiled natively under a plain kube-rs
# Controller (host/examples/memcached_native.rs): the baseline. `js` runs the same
# operator as a script plugin (plugins/memcached-js) on the host's JavaScript engine.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
n=${1:-200}
mode=${2:-wasm}
target=${CARGO_TARGET_DIR:-$root/target}
# An explicit KUBECONFIG (make e2e's own control plane) is used as it is.
if [ -z "${KUBECONFIG:-}" ]; then
  export KUBECONFIG=$root/target/cluster/kubeconfig
  tests/cluster/up >/dev/null
fi
# The profile `cargo bench` uses (one build for all benchmarks); `make bench-smoke` sets
# dev to reuse the tests' debug build (see scripts/benchlib.py).
profile=${WASMOP_BENCH_PROFILE:-bench}
out=$target/$([ "$profile" = dev ] && echo debug || echo release)
# WASMOP_BENCH_HOST (below): a host built elsewhere, so nothing is built here for it.
[ -n "${WASMOP_BENCH_HOST:-}" ] || cargo build -q --workspace --bins --profile "$profile"
if [ "$mode" = native ]; then cargo build -q --workspace --profile "$profile" --example memcached_native; fi
# WASMOP_BENCH_HOST: another host binary to measure (A/B runs of two builds), as in benchlib.py.
wasmop=${WASMOP_BENCH_HOST:-$out/wasmop}
kubectl apply -f deploy/crds/memcached.yaml >/dev/null
# The fake node holds 2,000 Pods (tests/cluster/launcher.go); a larger run raises it,
# with room for whatever else runs there.
pods=$(kubectl get node kwok-node-0 -o jsonpath='{.status.allocatable.pods}' 2>/dev/null || true)
pods=${pods:-2000}
# A quantity: the apiserver writes 2000 as 2k.
case $pods in *k) pods=$((${pods%k} * 1000)) ;; esac
if [ "$n" -gt $((pods - 500)) ]; then
  want=$((n + 1000))
  kubectl patch node kwok-node-0 --subresource=status --type=merge \
    -p "{\"status\":{\"capacity\":{\"pods\":\"$want\"},\"allocatable\":{\"pods\":\"$want\"}}}" >/dev/null
fi
scripts/wait-crd.sh memcacheds.cache.example.com
# A namespace of its own per run: CRs of an earlier run may still be held by finalizers.
ns=bench-converge-$$
kubectl create namespace $ns >/dev/null
work=$(mktemp -d)
mkdir -p "$work/plugins"
# WASMOP_BENCH_PLUGIN: another build of the plugin (an A/B run against an older host).
plugin=memcached; file=memcached.wasm
if [ "$mode" = js ]; then
  plugin=memcached-js; file=memcached-js.js
  # The engine `make engines` built, whichever host binary runs.
  export WASMOP_JS_ENGINE=${WASMOP_JS_ENGINE:-$root/target/plugins/wasmop-js-engine.wasm}
fi
cp "${WASMOP_BENCH_PLUGIN:-target/plugins/$file}" "$work/plugins/$file"
echo "namespace: $ns" >"$work/plugins/$plugin.settings.yaml"
if [ "$mode" = native ]; then
  "$out/examples/memcached_native" $ns >"$work/host.log" 2>&1 &
else
  # As deployed: the plugin acts as its own ServiceAccount, granted by `wasmop rbac`.
  "$wasmop" rbac "$work/plugins/$file" --namespace default \
    --settings "$work/plugins/$plugin.settings.yaml" | kubectl apply -f - >/dev/null
  "$wasmop" run --plugins-dir "$work/plugins" --plugins-dir-service-account-namespace default \
    --metrics-bind-address 127.0.0.1:0 >"$work/host.log" 2>&1 &
fi
host=$!
# Delete the CRs while the host still runs (it removes their finalizers), then the rest.
cleanup() {
  kubectl delete memcached --all -n $ns --wait=true --timeout=120s >/dev/null 2>&1 || true
  kill $host 2>/dev/null || true
  kubectl delete namespace $ns --wait=false >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
until grep -q "controller started" "$work/host.log"; do sleep 0.1; done
# The host compiles the plugin once per version (tiered: Winch, then Cranelift in the
# background); that is not reconcile work, so the CPU count starts after it.
if [ "$mode" = wasm ]; then
  for _ in $(seq 1 600); do grep -q "plugin code optimized" "$work/host.log" && break; sleep 0.1; done
fi
for i in $(seq 1 "$n"); do
  printf -- "---\napiVersion: cache.example.com/v1alpha1\nkind: Memcached\nmetadata: {name: m%04d, namespace: %s}\nspec: {size: 1}\n" "$i" "$ns"
done >"$work/crs.yaml"
cpu() { awk '{print $14 + $15}' "/proc/$host/stat"; }
audit=$(dirname "$KUBECONFIG")/audit.log
size() { stat -c %s "$audit" 2>/dev/null || echo 0; }
cpu0=$(cpu)
a0=$(size)
t0=$(date +%s.%N)
kubectl apply -f "$work/crs.yaml" >/dev/null
# Each poll lists every Memcached: above 2,000 a poll every 0.2 s would cost the machine
# more than the operator does.
poll=0.2; [ "$n" -gt 2000 ] && poll=2
while true; do
  ready=$(kubectl get memcached -n $ns -o jsonpath='{range .items[*]}{.status.readyReplicas}{.status.conditions[?(@.type=="Available")].status}{"\n"}{end}' | grep -c '^1True$' || true)
  [ "$ready" -ge "$n" ] && break
  sleep "$poll"
done
t1=$(date +%s.%N)
cpu1=$(cpu)
a1=$(size)
# Reconciles so far: the host's own metric; the baseline prints its count on SIGUSR1.
reconciles() {
  if [ "$mode" = native ]; then
    kill -USR1 $host
    for _ in $(seq 1 50); do grep -q '^reconciles ' "$work/host.log" && break; sleep 0.1; done
    grep '^reconciles ' "$work/host.log" | tail -1 | cut -d' ' -f2
  else
    addr=$(grep -o 'addr=[0-9.:]*' "$work/host.log" | head -1 | cut -d= -f2)
    curl -s "http://$addr/metrics" | awk '/^wasmop_reconciles_total/ {s += $2} END {print s}'
  fi
}
count=$(reconciles)
hz=$(getconf CLK_TCK)
deps=$(kubectl get deployments -n $ns --no-headers | wc -l)
rss=$(awk '/VmHWM/ {print $2}' "/proc/$host/status")
label="wasm plugin in the host"; [ "$mode" = native ] && label="native kube-rs Controller, same code"
[ "$mode" = js ] && label="JavaScript script plugin in the host"
printf "| %d Memcacheds ($label) | %.1f s | %.2f s | %d MiB | %d | %d |\n" "$n" "$(echo "$t1 - $t0" | bc)" "$(echo "($cpu1 - $cpu0) / $hz" | bc -l)" "$((rss / 1024))" "$deps" "$count"
# The apiserver's side: what the operator asked of it while converging (audit log).
if [ -f "$audit" ]; then
  printf "\n| %s: N | requests per Memcached | by verb and resource, per Memcached |\n|---|---|---|\n" "$label"
  python3 scripts/audit-requests.py "$audit" "$a0" "$a1" "$ns" "$n"
fi
