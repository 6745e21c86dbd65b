# shellcheck shell=bash
# Sourced by scripts/demo.sh: a new version of the Memcached plugin's code, hot-reloaded
# from its ConfigMap, then a broken version, rejected while the previous one serves on.

label=app.kubernetes.io/version
deployment_version() { kubectl -n "$ns" get deployment memcached-sample -o jsonpath="{.metadata.labels.app\.kubernetes\.io/version}"; }
version_is() { [ "$(deployment_version)" = "$1" ]; }

say "New plugin code: Memcached v2, applied to the running host (no restart)"
note "v2 is plugins/memcached built with --features v2 ($P/memcached-v2.wasm): the same"
note "plugin and permissions, plus one behaviour: it labels each Deployment with the memcached"
note "version (image tag) it runs, $label. v1 sets no such label:"
show kubectl -n "$ns" get deployment memcached-sample -L "$label"
mkdir -p "$DEMO_DIR/v2"
run "cp $P/memcached-v2.wasm $D/v2/memcached.wasm    # the key, and so the plugin's name, comes from the file name"
mark=$(host_lines)
run "wasmop pack $D/v2/memcached.wasm --name memcached --namespace $sys --settings memcached=$D/memcached.settings.yaml | kubectl apply --server-side -f -"
wait_for 60 "v2 loaded" host_log_since "$mark" "plugin loaded plugin=memcached version=[^ ]*+v2"
note "host log: $(last_loaded memcached)"
note "a new version re-reconciles every object: v2 labels the Deployment v1 created"
image=$(kubectl -n "$ns" get deployment memcached-sample -o jsonpath='{.spec.template.spec.containers[0].image}')
wait_for 30 "v2's label on the Deployment" version_is "${image##*:}"
show kubectl -n "$ns" get deployment memcached-sample -L "$label"
printf '$ curl -s http://%s/plugins   # what serves: name, version, sha256, origin\n' "$metrics_addr"
curl -s "http://$metrics_addr/plugins" | python3 -c '
import json, sys
for p in json.load(sys.stdin):
    name, version, sha, origin = p["name"], p["version"], p["sha256"][:12], p["origin"]
    print(f"{name:<11} {version:<9} {sha}  {origin}")'

say "A broken version: rejected with a PluginRejected Event, and v2 keeps serving"
mkdir -p "$DEMO_DIR/broken"
run "head -c 4096 $P/memcached-v2.wasm >$D/broken/memcached.wasm    # a truncated upload"
mark=$(host_lines)
run "wasmop pack $D/broken/memcached.wasm --name memcached --namespace $sys --settings memcached=$D/memcached.settings.yaml | kubectl apply --server-side -f -"
rejected() { # a PluginRejected Event on the ConfigMap saying that the previous version serves on
  kubectl -n "$sys" get events --field-selector reason=PluginRejected,involvedObject.name=memcached \
    -o jsonpath='{range .items[*]}{.message}{"\n"}{end}' | grep -q "keeps serving"
}
wait_for 60 "the PluginRejected Event" rejected
show kubectl -n "$sys" get events --field-selector reason=PluginRejected,involvedObject.name=memcached \
  -o custom-columns='TYPE:.type,REASON:.reason,OBJECT:.involvedObject.kind,NAME:.involvedObject.name,MESSAGE:.message'
note "the serving code is still v2: a change to the Memcached is reconciled by it"
show kubectl -n "$ns" patch memcached memcached-sample --type merge -p '{"spec":{"image":"docker.io/library/memcached:1.6.39-alpine"}}'
wait_for 60 "the new image, labelled by v2" version_is 1.6.39-alpine
show kubectl -n "$ns" get deployment memcached-sample \
  -o custom-columns="NAME:.metadata.name,IMAGE:.spec.template.spec.containers[0].image,VERSION:.metadata.labels.app\.kubernetes\.io/version"
if host_log_since "$mark" "plugin loaded plugin=memcached"; then
  echo "the host loaded the broken version" >&2
  exit 1
fi

say "Putting v2 back into the ConfigMap (what a restarted host would load)"
run "wasmop pack $D/v2/memcached.wasm --name memcached --namespace $sys --settings memcached=$D/memcached.settings.yaml | kubectl apply --server-side -f -"
