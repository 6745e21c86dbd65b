// A hostile script plugin: each ConfigMap labelled `hostile: "true"` names an attack in
// `data.mode`. The e2e test (tests/tests/script_hostile.rs) checks each is contained
// exactly as a compiled plugin's is (tests/plugins/hostile).
const CONFIGMAP = { apiVersion: "v1", kind: "ConfigMap" };

export function manifest(settings) {
  return {
    name: "hostile-js",
    version: "0.1.0",
    primary: CONFIGMAP,
    namespaces: settings && settings.namespace ? [settings.namespace] : [],
  };
}

export function reconcile({ object, current }) {
  if (!current || !current.data) return null;
  const ns = object.namespace;
  switch (current.data.mode) {
    case "loop":
      for (;;) {}
    case "grab": {
      // Native string building, so the cap is reached before the deadline (a loop of
      // interpreted pushes is throttled as runaway compute first).
      const hoard = [];
      for (;;) hoard.push(("x" + hoard.length).repeat(1 << 23));
    }
    case "secrets": {
      const tried = [
        ["get", () => cluster.get({ apiVersion: "v1", kind: "Secret", namespace: ns, name: "db-password" })],
        ["list", () => cluster.list({ apiVersion: "v1", kind: "Secret" })],
        ["create", () => cluster.create({ apiVersion: "v1", kind: "Secret", metadata: { name: "planted", namespace: ns } })],
        ["delete", () => cluster.delete({ ...CONFIGMAP, namespace: ns, name: object.name })],
      ].map(([verb, f]) => {
        try {
          f();
          return `${verb}=allowed`;
        } catch (e) {
          return `${verb}=${e instanceof ClusterError ? e.reason : e}`;
        }
      });
      throw new ReconcileError(tried.join(" "), { retry: false });
    }
    case "escape": {
      const names = ["require", "process", "fetch", "XMLHttpRequest", "Deno", "Bun", "setTimeout", "importScripts"];
      const found = names.filter((n) => typeof globalThis[n] !== "undefined");
      // The SDK's globals cannot be replaced under the next plugin's feet either.
      try {
        globalThis.cluster = null;
      } catch (e) {}
      found.push(...(cluster === null ? ["cluster replaced"] : []));
      events.normal(object, "Reachable", found.length ? found.join(", ") : "none");
      return null;
    }
    case "throw":
      throw new TypeError("thrown on purpose");
    default:
      return null;
  }
}
