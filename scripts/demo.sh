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
kubectl wait --for=condition=Established crd/memcacheds.cache.example.com --timeout=30s >/dev/null

say "Starting the wasmop host with plugins from $demo/plugins"
mkdir -p "$demo/plugins"
cp target/plugins/memcached.wasm "$demo/plugins/"
pkill -f "$target/debug/wasmop run" 2>/dev/null || true
nohup "$target/debug/wasmop" run --plugins-dir "$demo/plugins" >"$demo/host.log" 2>&1 &
echo "host pid $! (log: $demo/host.log)"
"$target/debug/wasmop" inspect "$demo/plugins/memcached.wasm" | sed -n '/^manifest:/,/^sha256:/p' | head -20

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

say "Scaling to 1"
show kubectl patch memcached memcached-sample --type merge -p '{"spec":{"size":1}}'
wait_ready 1
show kubectl get memcached memcached-sample
show kubectl get deployment,pods -l app.kubernetes.io/instance=memcached-sample
show kubectl describe memcached memcached-sample | sed -n '/^Events:/,$p'

say "Done. The cluster and the host keep running."
echo "  export KUBECONFIG=$KUBECONFIG   # then use kubectl"
echo "  tail -f $demo/host.log          # the host's log"
echo "  make demo-down                  # stop the host and the control plane"
