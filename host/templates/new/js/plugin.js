// {{name}}: a wasmop script plugin. It reconciles ConfigMaps: one annotated
// `{{name}}.example.com/copy-to: OTHER` gets a copy named OTHER, owned by it, that
// follows its data. Types: wasmop.d.ts (beside this file).
//
// Test it without a cluster:  make test
// Deploy it:                  make deploy NAMESPACE=wasmop-system

const CONFIGMAP = { apiVersion: "v1", kind: "ConfigMap" };
const COPY_TO = "{{name}}.example.com/copy-to";

/** @param {any} settings the settings document, parsed; null when empty */
export function manifest(settings) {
  return {
    name: "{{name}}",
    version: "0.1.0",
    primary: CONFIGMAP,
    namespaces: settings && settings.namespaces ? settings.namespaces : [],
    owns: [CONFIGMAP],
    permissions: [{ kind: CONFIGMAP, verbs: ["create", "update"] }],
  };
}

/** @param {Request} request @returns {Action | null} */
export function reconcile(request) {
  const cm = request.current;
  const target = cm && (cm.metadata.annotations || {})[COPY_TO];
  if (!target || cm.metadata.deletionTimestamp) return null; // the copy goes by garbage collection
  const ns = cm.metadata.namespace;
  const owner = { apiVersion: "v1", kind: "ConfigMap", name: cm.metadata.name, uid: cm.metadata.uid, controller: true };
  const copy = cluster.find({ ...CONFIGMAP, namespace: ns, name: target });
  if (copy === null) {
    cluster.create({ ...CONFIGMAP, metadata: { name: target, namespace: ns, ownerReferences: [owner] }, data: cm.data || {} });
    events.normal(request.object, "Copied", `Copied to ConfigMap ${target}`);
  } else if (!(copy.metadata.ownerReferences || []).some((r) => r.uid === cm.metadata.uid)) {
    events.warning(request.object, "NameTaken", `ConfigMap ${target} exists and is not a copy of this one`);
    throw new ReconcileError(`ConfigMap ${target} is not ours`, { retry: false });
  } else if (JSON.stringify(copy.data || {}) !== JSON.stringify(cm.data || {})) {
    copy.data = cm.data || {};
    cluster.update(copy);
    events.normal(request.object, "Updated", `Updated ConfigMap ${target}`);
  }
  return null;
}
