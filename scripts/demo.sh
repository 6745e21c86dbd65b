#!/usr/bin/env bash
# make demo: the wasmop host running both shipped plugins, shown with plain kubectl:
#   Memcached (create, scale, status, Events), SidecarSet (webhooks served by the host,
#   sidecars injected, status counts, an in-place sidecar update), then new plugin code
#   hot-reloaded and a broken version rejected while the previous one keeps serving.
# On the local control plane (default) or the cluster in KUBECONFIG (DEMO_CLUSTER=existing).
# Everything it creates is recorded in $DEMO_DIR/created; scripts/demo-down.sh removes
# exactly that. Settings: scripts/demo-lib.sh.
set -euo pipefail
# shellcheck source=scripts/demo-lib.sh
source "$(dirname "$0")/demo-lib.sh"
mkdir -p "$DEMO_DIR"

on_exit() {
  local status=$?
  [ $status -eq 0 ] && return
  echo
  echo "The demo failed (exit $status). What it created so far is recorded in $D/created;"
  echo "make demo-down (or scripts/demo-down.sh) removes it."
  if [ -s "$DEMO_DIR/host.log" ]; then
    echo "Last lines of the host's log ($D/host.log):"
    tail -15 "$DEMO_DIR/host.log"
  fi
}
trap on_exit EXIT

if [ -f "$state_file" ] && grep -qv '^cluster ' "$state_file"; then
  say "Removing what the previous demo created first"
  scripts/demo-down.sh --keep-cluster
fi

case $DEMO_CLUSTER in
local)
  export KUBECONFIG=$cluster_state/kubeconfig
  if grep -qx "cluster $cluster_state" "$state_file" 2>/dev/null; then
    say "The local control plane (started by an earlier demo)"
  elif [ -f "$KUBECONFIG" ] && kubectl get --raw=/readyz >/dev/null 2>&1; then
    say "Reusing the running local control plane (not the demo's: make demo-down leaves it running)"
  else
    say "Starting the local control plane (etcd, kube-apiserver, controller-manager, scheduler, kwok)"
    record "cluster $cluster_state"
  fi
  run "tests/cluster/up $(rel "$cluster_state") >/dev/null"
  show kubectl get nodes
  ;;
existing)
  export KUBECONFIG=${KUBECONFIG:-$HOME/.kube/config}
  say "Using the cluster in KUBECONFIG: no control plane is started"
  kubectl get namespaces >/dev/null || { echo "cannot reach the cluster in KUBECONFIG=$KUBECONFIG" >&2; exit 1; }
  if [ -n "$(kubectl -n "$sys" get configmaps -l wasmop.io/plugin=true -o name 2>/dev/null)" ]; then
    echo "Namespace $sys already holds plugin ConfigMaps: a wasmop host there would load the" >&2
    echo "demo's plugins too. Run the demo with DEMO_SYSTEM_NAMESPACE=<a namespace of its own>." >&2
    exit 1
  fi
  note "context $(kubectl config current-context), server $(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')"
  note "The demo installs there only what it needs, each object recorded in $D/created"
  note "(make demo-down removes exactly those; what already exists is left as it is):"
  note "- namespaces $ns (the demo's objects) and $sys (the plugins'), if absent"
  note "- the CRDs memcacheds.cache.example.com and sidecarsets.apps.kruise.io, if absent"
  note "- per plugin (memcached, sidecarset): a ServiceAccount and least-privilege RBAC from"
  note "  \`wasmop rbac\`, and a ConfigMap carrying the plugin"
  note "- webhook configurations $ns: Pods only in namespace $ns, SidecarSets only when"
  note "  labelled wasmop.io/demo=$ns; served by the host on this machine, which the"
  note "  apiserver must reach at https://$DEMO_WEBHOOK_HOST (set DEMO_WEBHOOK_HOST otherwise)"
  note "- in $ns: a Memcached, a Deployment of 2 nginx Pods; the SidecarSet $ns-log-agent"
  ;;
*)
  echo "DEMO_CLUSTER must be local or existing, not $DEMO_CLUSTER" >&2
  exit 1
  ;;
esac
# demo-down talks to the same cluster whatever KUBECONFIG says then.
{ grep -v '^kubeconfig ' "$state_file" 2>/dev/null || true; } >"$state_file.new"
{ echo "kubeconfig $KUBECONFIG"; cat "$state_file.new"; } >"$state_file"
rm -f "$state_file.new"
# Pods run on kwok's simulated nodes (the local control plane's): no kubelet restarts a
# container after an in-place image change, so the demo plays that part.
kwok=$(kubectl get nodes -o jsonpath='{.items[*].metadata.annotations.kwok\.x-k8s\.io/node}')

say "Namespaces and CRDs"
kubectl create namespace "$sys" --dry-run=client -o yaml >"$DEMO_DIR/namespaces.yaml"
echo --- >>"$DEMO_DIR/namespaces.yaml"
kubectl create namespace "$ns" --dry-run=client -o yaml >>"$DEMO_DIR/namespaces.yaml"
install "$DEMO_DIR/namespaces.yaml"
install deploy/crds/memcached.yaml --server-side
install deploy/crds/sidecarset.yaml --server-side
scripts/wait-crd.sh memcacheds.cache.example.com
scripts/wait-crd.sh sidecarsets.apps.kruise.io

say "Starting the wasmop host on this machine: plugins from ConfigMaps in $sys, admission webhooks over HTTPS"
host_args=(run --plugins-configmaps --plugins-namespace "$sys" --metrics-bind-address 127.0.0.1:0
  --webhooks --webhook-bind-address "$DEMO_WEBHOOK_HOST:0" --webhook-configurations "$ns")
[ "$DEMO_WEBHOOK_HOST" = 127.0.0.1 ] || host_args+=(--webhook-cert-names "$DEMO_WEBHOOK_HOST")
printf '$ wasmop %s >%s 2>&1 &\n' "${host_args[*]}" "$D/host.log"
nohup "$wasmop_bin" "${host_args[@]}" </dev/null >"$DEMO_DIR/host.log" 2>&1 &
host_pid=$!
record "pid $host_pid $(start_time $host_pid) $wasmop_bin"
wait_for 30 "the host's webhook server" grep -q "serving admission webhooks" "$DEMO_DIR/host.log"
webhook_addr=$(grep -m1 "serving admission webhooks" "$DEMO_DIR/host.log" | sed 's/.*addr=\([^ ]*\).*/\1/')
metrics_addr=$(grep -m1 "serving /metrics" "$DEMO_DIR/host.log" | sed 's/.*addr=\([^ ]*\).*/\1/')
note "host pid $host_pid; webhooks on https://$webhook_addr; /metrics, /plugins on http://$metrics_addr"

# host_log_since N PATTERN: whether the host logged PATTERN after its first N lines.
host_log_since() { tail -n +"$(($1 + 1))" "$DEMO_DIR/host.log" | grep -q -- "$2"; }
host_lines() { wc -l <"$DEMO_DIR/host.log"; }
last_loaded() { grep "plugin loaded plugin=$1 " "$DEMO_DIR/host.log" | tail -1 | sed 's/^.*INFO //; s/ origin=.*//'; }

say "A cluster admin lets the Memcached plugin run as itself: its ServiceAccount and least-privilege RBAC"
# Settings: watch only the demo's namespace (so its RBAC is namespaced, too).
printf 'namespace: %s\n' "$ns" >"$DEMO_DIR/memcached.settings.yaml"
run "cat $D/memcached.settings.yaml"
run "wasmop rbac $P/memcached.wasm --namespace $sys --settings $D/memcached.settings.yaml >$D/memcached-rbac.yaml"
install "$DEMO_DIR/memcached-rbac.yaml"

say "Deploying the Memcached plugin: wasmop pack, kubectl apply (the running host loads it)"
run "wasmop pack $P/memcached.wasm --name memcached --namespace $sys --settings memcached=$D/memcached.settings.yaml >$D/memcached-plugin.yaml"
mark=$(host_lines)
# Server-side: a plugin is too big for the client-side last-applied annotation.
install "$DEMO_DIR/memcached-plugin.yaml" --server-side
wait_for 60 "the Memcached plugin's watches" host_log_since "$mark" "watches synced plugin=memcached"
note "host log: $(last_loaded memcached)"

say "Creating a Memcached of size 3 (deploy/samples/memcached.yaml, in namespace $ns)"
sed "s/namespace: default/namespace: $ns/" deploy/samples/memcached.yaml >"$DEMO_DIR/memcached.yaml"
install "$DEMO_DIR/memcached.yaml"
mc() { kubectl -n "$ns" "$@"; }
converged() { # SIZE: ready replicas and status.nodes both at SIZE
  local ready nodes
  ready=$(mc get memcached memcached-sample -o jsonpath='{.status.readyReplicas}')
  nodes=$(mc get memcached memcached-sample -o jsonpath='{.status.nodes}' | tr -cd ',' | wc -c)
  [ "${ready:-0}" = "$1" ] && [ "$((nodes + 1))" = "$1" ]
}
wait_for 90 "Memcached of size 3 ready" converged 3
show kubectl -n "$ns" get memcached memcached-sample
show kubectl -n "$ns" get deployment,pods -l app.kubernetes.io/instance=memcached-sample
show kubectl -n "$ns" get memcached memcached-sample -o jsonpath='{.status.nodes}{"\n"}'

if [ "$DEMO_CLUSTER" = local ]; then
  say "Every request for the plugin was made as its own ServiceAccount (the apiserver's audit log, by verb)"
  python3 - "$cluster_state/audit.log" "system:serviceaccount:$sys:memcached" <<'PY'
import collections, json, sys
me = sys.argv[2]
seen = collections.Counter()
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e.get("impersonatedUser", {}).get("username") == me and "objectRef" in e:
        seen[(e["user"]["username"], e["verb"], e["objectRef"]["resource"])] += 1
print(f"{'made by':<8} {'acting as':<46} {'verb':<7} {'resource':<12} count")
for (by, verb, res), n in sorted(seen.items()):
    print(f"{by:<8} {me:<46} {verb:<7} {res:<12} {n}")
PY
fi

say "Scaling to 1"
show kubectl -n "$ns" patch memcached memcached-sample --type merge -p '{"spec":{"size":1}}'
wait_for 90 "Memcached scaled to 1" converged 1
show kubectl -n "$ns" get memcached memcached-sample
show kubectl -n "$ns" get deployment,pods -l app.kubernetes.io/instance=memcached-sample
show kubectl -n "$ns" get memcached memcached-sample \
  -o jsonpath='{range .status.conditions[*]}{.type}={.status} ({.reason}: {.message}){"\n"}{end}'
run "kubectl -n $ns describe memcached memcached-sample | sed -n '/^Events:/,\$p'"

# shellcheck source=scripts/demo-sidecarset.sh
source scripts/demo-sidecarset.sh
# shellcheck source=scripts/demo-reload.sh
source scripts/demo-reload.sh

say "Done. The host keeps running$([ "$DEMO_CLUSTER" = local ] && echo ", and so does the control plane")."
echo "What the demo created, which make demo-down removes ($D/created):"
sed -n 's/^object \([^ ]*\) - \(.*\)/  \1 \2/p; s/^object \([^ ]*\) \([^ ]*\) \(.*\)/  \1 \2\/\3/p' "$state_file"
sed -n 's/^subject \([^ ]*\) [^ ]* \([^ ]*\) \([^ ]*\) .*/  \3 among the subjects of \1 \2/p' "$state_file"
sed -n 's/^pid \([0-9]*\) .*/  the host, pid \1/p; s/^cluster \(.*\)/  the local control plane in \1/p' "$state_file"
echo
down="make demo-down"
[ "$DEMO_DIR" = "$root/target/demo" ] || down="make demo-down DEMO_DIR=$DEMO_DIR"
echo "  export KUBECONFIG=$KUBECONFIG    # then use kubectl"
echo "  tail -f $D/host.log    # the host's log"
echo "  $down    # remove all of the above"
