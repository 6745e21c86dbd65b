# shellcheck shell=bash
# Sourced by scripts/demo.sh (which has started the host with --webhooks): the SidecarSet
# plugin, OpenKruise's SidecarSet as a wasmop plugin. Its admission webhooks, served by
# the host, default and validate SidecarSets and inject sidecars into new Pods; its
# controller counts the Pods and rolls a sidecar image change into them in place.

ss=$ns-log-agent
ssk() { kubectl get sidecarset "$ss" "$@"; }

say "A cluster admin lets the SidecarSet plugin run as itself, then it is deployed like Memcached"
printf 'revisionNamespace: %s\n' "$sys" >"$DEMO_DIR/sidecarset.settings.yaml"
note "its settings keep each SidecarSet version (a ControllerRevision) in $sys, not Kruise's kruise-system:"
run "cat $D/sidecarset.settings.yaml"
run "wasmop rbac $P/sidecarset.wasm --namespace $sys --settings $D/sidecarset.settings.yaml >$D/sidecarset-rbac.yaml"
install "$DEMO_DIR/sidecarset-rbac.yaml"
run "wasmop pack $P/sidecarset.wasm --name sidecarset --namespace $sys --settings sidecarset=$D/sidecarset.settings.yaml >$D/sidecarset-plugin.yaml"
mark=$(host_lines)
install "$DEMO_DIR/sidecarset-plugin.yaml" --server-side
wait_for 60 "the SidecarSet plugin's watches" host_log_since "$mark" "watches synced plugin=sidecarset"
note "host log: $(last_loaded sidecarset)"

say "Webhook configurations for its handlers, pointing at the host; the host writes its CA into them"
port=${webhook_addr##*:}
run "wasmop webhook-config --name $ns --url https://$DEMO_WEBHOOK_HOST:$port --allowed-namespaces $ns $P/sidecarset.wasm >$D/webhooks.yaml"
note "--allowed-namespaces: only Pods in $ns are sent to the host, so the demo cannot block"
note "Pods anywhere else. SidecarSets are cluster-scoped, which no namespaceSelector narrows:"
note "an objectSelector limits those webhooks to SidecarSets labelled wasmop.io/demo=$ns:"
printf '$ kubectl create --dry-run=client -o json -f %s | python3 -c ... >%s   # adds it\n' "$D/webhooks.yaml" "$D/webhooks.json"
kubectl create --dry-run=client -o json -f "$DEMO_DIR/webhooks.yaml" | python3 -c "$py_objects"'
doc = {"apiVersion": "v1", "kind": "List", "items": objects(sys.stdin.read())}
for c in doc["items"]:
    for w in c["webhooks"]:
        if any("sidecarsets" in r["resources"] for r in w["rules"]):
            w["objectSelector"] = {"matchLabels": {"wasmop.io/demo": sys.argv[1]}}
json.dump(doc, sys.stdout, indent=1)' "$ns" >"$DEMO_DIR/webhooks.json"
install "$DEMO_DIR/webhooks.json"
ca_injected() { # every webhook of both configurations has a caBundle
  local kind bundles
  for kind in mutatingwebhookconfiguration validatingwebhookconfiguration; do
    bundles=$(kubectl get "$kind" "$ns" -o jsonpath='{range .webhooks[*]}[{.clientConfig.caBundle}]{end}')
    [ -n "$bundles" ] && [[ $bundles != *"[]"* ]] || return 1
  done
}
wait_for 30 "the host's CA in the webhook configurations" ca_injected
show kubectl get mutatingwebhookconfiguration,validatingwebhookconfiguration "$ns" \
  -o custom-columns='KIND:.kind,NAME:.metadata.name,WEBHOOKS:.webhooks[*].name'
note "caBundle: $(kubectl get mutatingwebhookconfiguration "$ns" -o jsonpath='{.webhooks[0].clientConfig.caBundle}' | head -c 24)... (the host's CA)"

say "A SidecarSet (deploy/samples/sidecarset.yaml, for Pods labelled app=nginx in $ns)"
cat >"$DEMO_DIR/sidecarset.yaml" <<EOF
apiVersion: apps.kruise.io/v1alpha1
kind: SidecarSet
metadata:
  name: $ss
  labels:
    wasmop.io/demo: $ns
spec:
  namespace: $ns
  selector:
    matchLabels:
      app: nginx
  updateStrategy:
    type: RollingUpdate
    maxUnavailable: 1
  containers:
  - name: log-agent
    image: docker.io/library/busybox:1.36
    command: ["sh", "-c", "tail -F /var/log/app/*.log"]
    podInjectPolicy: AfterAppContainer
    volumeMounts:
    - name: app-logs
      mountPath: /var/log/app
  volumes:
  - name: app-logs
    emptyDir: {}
EOF
run "cat $D/sidecarset.yaml"
install "$DEMO_DIR/sidecarset.yaml"
note "defaulted by the plugin's mutating webhook: updateStrategy $(ssk -o jsonpath='{.spec.updateStrategy}')," \
  "imagePullPolicy $(ssk -o jsonpath='{.spec.containers[0].imagePullPolicy}')," \
  "hash annotation $(ssk -o jsonpath='{.metadata.annotations.kruise\.io/sidecarset-hash}' | head -c 12)..."

say "A Deployment of 2 nginx Pods: the webhook injects the sidecar as each Pod is created"
cat >"$DEMO_DIR/web.yaml" <<EOF
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: $ns
spec:
  replicas: 2
  selector:
    matchLabels:
      app: nginx
  template:
    metadata:
      labels:
        app: nginx
    spec:
      containers:
      - name: nginx
        image: docker.io/library/nginx:1.27
EOF
install "$DEMO_DIR/web.yaml"
sidecar() { # the sidecar's image in each web Pod: in the spec, and running (status)
  kubectl -n "$ns" get pods -l app=nginx -o custom-columns='POD:.metadata.name,CONTAINERS:.spec.containers[*].name,SIDECAR IMAGE:.spec.containers[?(@.name=="log-agent")].image,RUNNING:.status.containerStatuses[?(@.name=="log-agent")].image,READY:.status.containerStatuses[*].ready'
}
counts() { # MATCHED UPDATED READY
  [ "$(ssk -o jsonpath='{.status.matchedPods} {.status.updatedPods} {.status.readyPods}')" = "$*" ]
}
wait_for 90 "2 Pods with the sidecar, counted by the SidecarSet" counts 2 2 2
printf '$ kubectl -n %s get pods -l app=nginx -o custom-columns=...\n' "$ns"
sidecar
show kubectl get sidecarset "$ss"

say "A new sidecar image: the controller updates the Pods in place, one at a time (maxUnavailable 1)"
before=$(kubectl -n "$ns" get pods -l app=nginx -o jsonpath='{.items[*].metadata.uid}')
show kubectl patch sidecarset "$ss" --type=json \
  -p='[{"op": "replace", "path": "/spec/containers/0/image", "value": "docker.io/library/busybox:1.37"}]'
if [ -n "$kwok" ]; then
  note "kwok runs no containers: the demo does what a kubelet does after an in-place image"
  note "change, restarting the container and reporting the new image in the Pod's status"
fi
rolled() { # every web Pod runs the new sidecar image; on kwok, report what a kubelet would
  local pod spec running i all=0
  while read -r pod spec running i; do
    [ "$spec" = "$running" ] && [ "$spec" = docker.io/library/busybox:1.37 ] && continue
    all=1
    if [ -n "$kwok" ] && [ "$spec" != "$running" ]; then
      run "kubectl -n $ns patch pod $pod --subresource=status --type=json -p='[{\"op\": \"replace\", \"path\": \"/status/containerStatuses/$i/image\", \"value\": \"$spec\"}]' >/dev/null"
    fi
  done < <(kubectl -n "$ns" get pods -l app=nginx -o json | python3 -c '
import json, sys
for p in json.load(sys.stdin)["items"]:
    spec = next(c["image"] for c in p["spec"]["containers"] if c["name"] == "log-agent")
    st = p["status"].get("containerStatuses") or []
    i, running = next(((i, c["image"]) for i, c in enumerate(st) if c["name"] == "log-agent"), (0, "-"))
    print(p["metadata"]["name"], spec, running, i)')
  [ $all -eq 0 ] && counts 2 2 2
}
deadline=$((SECONDS + 120))
until rolled; do
  [ $SECONDS -lt $deadline ] || { echo "timed out after 120s waiting for both Pods on the new sidecar image" >&2; exit 1; }
  sleep 0.3
done
printf '$ kubectl -n %s get pods -l app=nginx -o custom-columns=...\n' "$ns"
sidecar
after=$(kubectl -n "$ns" get pods -l app=nginx -o jsonpath='{.items[*].metadata.uid}')
[ "$before" = "$after" ] && note "the same two Pods (same uids) as before the change: updated in place, not replaced"
show kubectl get sidecarset "$ss"
show kubectl get events -A --field-selector "involvedObject.kind=SidecarSet,involvedObject.name=$ss" \
  -o custom-columns='REASON:.reason,MESSAGE:.message'
