#!/usr/bin/env bash
# make demo: a local control plane, the wasmop host with the Memcached plugin, and a
# Memcached converging and scaling — shown with plain kubectl.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
target=${CARGO_TARGET_DIR:-$root/target}
state=$root/target/cluster
demo=$root/target/demo
export KUBECONFIG=$state/kubeconfig

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
show() { printf '$ %s\n' "$*"; "$@"; }

say "Starting the local control plane (etcd, kube-apiserver, controller-manager, scheduler, kwok)"
tests/cluster/up "$state" >/dev/null
show kubectl get nodes

say "Installing the Memcached CRD"
show kubectl apply -f deploy/crds/memcached.yaml
scripts/wait-crd.sh memcacheds.cache.example.com

say "Starting the wasmop host; it loads plugins from ConfigMaps in wasmop-system"
mkdir -p "$demo"
kubectl create namespace wasmop-system --dry-run=client -o yaml | kubectl apply -f - >/dev/null
pkill -f "$target/debug/wasmop run" 2>/dev/null || true
nohup "$target/debug/wasmop" run --plugins-configmaps --plugins-namespace wasmop-system \
  --metrics-bind-address 127.0.0.1:0 >"$demo/host.log" 2>&1 &
echo "host pid $! (log: $demo/host.log)"

say "A cluster admin lets the plugin run as itself: its ServiceAccount and least-privilege RBAC"
echo "$ wasmop rbac target/plugins/memcached.wasm --namespace wasmop-system | kubectl apply -f -"
"$target/debug/wasmop" rbac target/plugins/memcached.wasm --namespace wasmop-system | kubectl apply -f -

say "Deploying the Memcached plugin: wasmop pack | kubectl apply (no restart)"
echo "$ wasmop pack target/plugins/memcached.wasm --name plugins --namespace wasmop-system | kubectl apply --server-side -f -"
"$target/debug/wasmop" pack target/plugins/memcached.wasm --name plugins --namespace wasmop-system \
  | kubectl apply --server-side -f -
until grep -q "watches synced plugin=memcached" "$demo/host.log"; do sleep 0.2; done
grep "plugin loaded" "$demo/host.log" | tail -1 | sed 's/^.*INFO //'

say "Creating a Memcached of size 3"
show kubectl apply -f deploy/samples/memcached.yaml
wait_ready() {
  for _ in $(seq 1 120); do
    ready=$(kubectl get memcached memcached-sample -o jsonpath='{.status.readyReplicas}' 2>/dev/null || true)
    nodes=$(kubectl get memcached memcached-sample -o jsonpath='{.status.nodes}' 2>/dev/null | tr -cd ',' | wc -c)
    [ "${ready:-0}" = "$1" ] && [ "$((nodes + 1))" = "$1" ] && return 0
    sleep 0.5
  done
  echo "did not converge; host log:"; tail -20 "$demo/host.log"; return 1
}
wait_ready 3
show kubectl get memcached memcached-sample
show kubectl get deployment,pods -l app.kubernetes.io/instance=memcached-sample
show kubectl get memcached memcached-sample -o jsonpath='{.status.nodes}{"\n"}'

say "Every request for the plugin was made as its own ServiceAccount (the apiserver's audit log, by verb)"
python3 - "$state/audit.log" <<'PY'
import collections, json, sys
me = "system:serviceaccount:wasmop-system:memcached"
seen = collections.Counter()
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e.get("impersonatedUser", {}).get("username") == me and "objectRef" in e:
        seen[(e["user"]["username"], e["verb"], e["objectRef"]["resource"])] += 1
print(f"{'made by':<8} {'acting as':<46} {'verb':<7} {'resource':<12} count")
for (by, verb, res), n in sorted(seen.items()):
    print(f"{by:<8} {me:<46} {verb:<7} {res:<12} {n}")
PY

say "Scaling to 1"
show kubectl patch memcached memcached-sample --type merge -p '{"spec":{"size":1}}'
wait_ready 1
show kubectl get memcached memcached-sample
show kubectl get deployment,pods -l app.kubernetes.io/instance=memcached-sample
show kubectl describe memcached memcached-sample | sed -n '/^Events:/,$p'

say "Hot reload: a new version of the plugin's settings (defaultImage), applied to the running host"
printf 'defaultImage: docker.io/library/memcached:1.6.39-alpine\n' >"$demo/memcached.settings.yaml"
echo "$ wasmop pack target/plugins/memcached.wasm --settings memcached=$demo/memcached.settings.yaml ... | kubectl apply --server-side -f -"
"$target/debug/wasmop" pack target/plugins/memcached.wasm --name plugins --namespace wasmop-system \
  --settings "memcached=$demo/memcached.settings.yaml" | kubectl apply --server-side -f -
for _ in $(seq 1 100); do
  img=$(kubectl get deployment memcached-sample -o jsonpath='{.spec.template.spec.containers[0].image}')
  [ "$img" = "docker.io/library/memcached:1.6.39-alpine" ] && break
  sleep 0.2
done
grep "plugin loaded" "$demo/host.log" | tail -1 | sed 's/^.*INFO //'
show kubectl get deployment memcached-sample -o custom-columns=NAME:.metadata.name,IMAGE:.spec.template.spec.containers[0].image,READY:.status.readyReplicas

say "Done. The cluster and the host keep running."
echo "  export KUBECONFIG=$KUBECONFIG   # then use kubectl"
echo "  tail -f $demo/host.log          # the host's log"
echo "  make demo-down                  # stop the host and the control plane"
