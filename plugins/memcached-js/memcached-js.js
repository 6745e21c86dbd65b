// The operator-sdk Memcached operator as a wasmop script plugin: the Rust plugin in
// plugins/memcached, line for line, in JavaScript. Deploy it as the key
// `memcached-js.js` of a plugin ConfigMap (or a file in --plugins-dir); the host runs
// it on its JavaScript engine with the same limits and permissions as a compiled
// plugin. Types: guest-sdk/js/wasmop.d.ts.
//
// Settings (all optional): `namespace: a, b` (the namespaces to watch; default all),
// `defaultImage: IMAGE` (for Memcacheds without spec.image).

const VERSION = "0.1.0";
const FINALIZER = "cache.example.com/finalizer";
const INSTANCE_LABEL = "app.kubernetes.io/instance";
const DEFAULT_IMAGE = "docker.io/library/memcached:1.6.38-alpine";
const MEMCACHED = { apiVersion: "cache.example.com/v1alpha1", kind: "Memcached" };
const DEPLOYMENT = { apiVersion: "apps/v1", kind: "Deployment" };
const POD = { apiVersion: "v1", kind: "Pod" };

function namespaces(settings) {
  const ns = settings && settings.namespace;
  if (Array.isArray(ns)) return ns;
  return typeof ns === "string" ? ns.split(",").map((s) => s.trim()).filter((s) => s) : [];
}

/** @param {any} settings @returns {import("wasmop").Manifest} */
export function manifest(settings) {
  return {
    name: "memcached-js",
    version: VERSION,
    primary: MEMCACHED,
    namespaces: namespaces(settings),
    owns: [DEPLOYMENT],
    watches: [{ kind: POD, mapping: { label: INSTANCE_LABEL } }],
    permissions: [
      { kind: MEMCACHED, verbs: ["update", "updateStatus"] },
      { kind: DEPLOYMENT, verbs: ["create", "update"] },
    ],
    // Each reconcile takes every step it can, so its own status write is no news.
    skipOwnWrites: true,
  };
}

/** @param {import("wasmop").Request} request */
export function reconcile(request) {
  let mc = request.current;
  if (mc === null) return null;
  const me = request.object;
  const name = me.name;

  const finalizers = mc.metadata.finalizers || [];
  if (mc.metadata.deletionTimestamp) {
    if (finalizers.includes(FINALIZER)) {
      mc.metadata.finalizers = finalizers.filter((f) => f !== FINALIZER);
      events.normal(me, "Deleting", "Memcached is being deleted; its Deployment goes with it");
      cluster.update(mc);
    }
    return null;
  }
  if (!finalizers.includes(FINALIZER)) {
    mc.metadata.finalizers = [...finalizers, FINALIZER];
    mc = cluster.update(mc);
  }

  const settings = request.settings || {};
  const desired = deploymentFor(mc, settings.defaultImage || DEFAULT_IMAGE);
  const size = mc.spec.size;
  let deployment = cluster.find({ ...DEPLOYMENT, namespace: mc.metadata.namespace, name });
  if (deployment === null) {
    deployment = cluster.create(desired);
    events.normal(me, "Created", `Created Deployment ${name} with ${size} replicas`);
  } else {
    const owned = (deployment.metadata.ownerReferences || []).some(
      (r) => r.controller === true && r.uid === mc.metadata.uid,
    );
    if (!owned) {
      const msg = `Deployment ${name} exists and is not owned by this Memcached`;
      events.warning(me, "NameTaken", msg);
      throw new ReconcileError(msg, { retry: false });
    }
    const before = deployment.spec.replicas ?? 1;
    if (converge(deployment, desired)) {
      deployment = cluster.update(deployment);
      if (before !== size) {
        events.normal(me, "Scaled", `Scaled Deployment ${name} from ${before} to ${size} replicas`);
      }
    }
  }

  const pods = cluster.list(POD, { namespace: mc.metadata.namespace, labelSelector: `${INSTANCE_LABEL}=${name}` });
  const nodes = pods
    .filter((p) => !p.metadata.deletionTimestamp)
    .map((p) => p.metadata.name)
    .sort();

  const st = deployment.status || {};
  const ready = st.readyReplicas || 0;
  const updated = st.updatedReplicas || 0;
  const failure = (st.conditions || []).find((c) => c.type === "ReplicaFailure" && c.status === "True");
  const generation = mc.metadata.generation;
  const old = mc.status || {};
  const status = {
    nodes,
    readyReplicas: ready,
    conditions: (old.conditions || []).map((c) => ({ ...c })),
    observedGeneration: generation,
  };
  const settled = ready === size && updated === size && nodes.length === size;
  const available = size === 0 ? true : ready >= 1 && ready === size;
  setCondition(status.conditions, "Available", available, available ? "Ready" : "Scaling", `${ready}/${size} Pods ready`, generation);
  setCondition(
    status.conditions,
    "Progressing",
    !settled,
    settled ? "Settled" : "Reconciling",
    `${nodes.length} Pods, ${updated} up to date, ${ready} ready, want ${size}`,
    generation,
  );
  setCondition(
    status.conditions,
    "Degraded",
    failure !== undefined,
    failure ? "ReplicaFailure" : "AsExpected",
    failure ? failure.message || "" : "no failures",
    generation,
  );
  const changed =
    JSON.stringify(status.nodes) !== JSON.stringify(old.nodes || []) ||
    status.readyReplicas !== (old.readyReplicas || 0) ||
    status.observedGeneration !== old.observedGeneration ||
    !conditionsEquivalent(status.conditions, old.conditions || []);
  if (changed) {
    mc.status = status;
    cluster.updateStatus(mc);
  }
  // No polling: every change that moves the status is an event on the Deployment or a Pod.
  return null;
}

function labels(name) {
  return { "app.kubernetes.io/name": "memcached", [INSTANCE_LABEL]: name, "app.kubernetes.io/managed-by": "wasmop" };
}

function deploymentFor(mc, defaultImage) {
  const name = mc.metadata.name;
  const l = labels(name);
  const selector = { "app.kubernetes.io/name": "memcached", [INSTANCE_LABEL]: name };
  return {
    apiVersion: "apps/v1",
    kind: "Deployment",
    metadata: {
      name,
      namespace: mc.metadata.namespace,
      labels: l,
      ownerReferences: [
        { apiVersion: MEMCACHED.apiVersion, kind: MEMCACHED.kind, name, uid: mc.metadata.uid, controller: true, blockOwnerDeletion: true },
      ],
    },
    spec: {
      replicas: mc.spec.size,
      selector: { matchLabels: selector },
      template: {
        metadata: { labels: l },
        spec: {
          securityContext: { runAsNonRoot: true, runAsUser: 1001, seccompProfile: { type: "RuntimeDefault" } },
          containers: [
            {
              name: "memcached",
              image: mc.spec.image || defaultImage,
              imagePullPolicy: "IfNotPresent",
              args: ["-m=64", "-o", "modern", "-v"],
              ports: [{ containerPort: mc.spec.containerPort ?? 11211, name: "memcached", protocol: "TCP" }],
              securityContext: {
                runAsNonRoot: true,
                allowPrivilegeEscalation: false,
                readOnlyRootFilesystem: true,
                capabilities: { drop: ["ALL"] },
              },
            },
          ],
        },
      },
    },
  };
}

// Brings the fields this operator owns (replicas, image, args, port) to `desired`;
// true when anything changed. Fields others set are kept.
function converge(d, desired) {
  let changed = false;
  const want = desired.spec;
  if (d.spec.replicas !== want.replicas) {
    d.spec.replicas = want.replicas;
    changed = true;
  }
  const wantC = want.template.spec.containers[0];
  const pod = (d.spec.template.spec ||= {});
  const c = (pod.containers || []).find((c) => c.name === wantC.name);
  if (!c) {
    pod.containers = [wantC];
    return true;
  }
  if (c.image !== wantC.image) {
    c.image = wantC.image;
    changed = true;
  }
  if (JSON.stringify(c.args) !== JSON.stringify(wantC.args)) {
    c.args = wantC.args;
    changed = true;
  }
  const port = (c) => (c.ports && c.ports.length ? c.ports[0].containerPort : undefined);
  if (port(c) !== port(wantC)) {
    c.ports = wantC.ports;
    changed = true;
  }
  return changed;
}

// The current time, second precision (as the apiserver stores it).
function now() {
  return new Date().toISOString().replace(/\.\d+Z$/, "Z");
}

function setCondition(conditions, type, status, reason, message, observedGeneration) {
  const s = status ? "True" : "False";
  const c = conditions.find((c) => c.type === type);
  if (c) {
    if (c.status !== s) {
      c.status = s;
      c.lastTransitionTime = now();
    }
    Object.assign(c, { reason, message, observedGeneration });
  } else {
    conditions.push({ type, status: s, reason, message, observedGeneration, lastTransitionTime: now() });
  }
}

function conditionsEquivalent(a, b) {
  return (
    a.length === b.length &&
    a.every((x) => {
      const y = b.find((y) => y.type === x.type);
      return y && x.status === y.status && x.reason === y.reason && x.message === y.message && x.observedGeneration === y.observedGeneration;
    })
  );
}

// Admission: a Memcached without spec.size gets 3, as operator-sdk's current sample's
// defaulting webhook does; an image tagged `latest` (or not at all) is refused, naming
// the field: which memcached runs would change under the Deployment's feet.
export function handlers(settings) {
  return [
    { name: "default-memcached", mutating: true, kinds: [MEMCACHED], operations: ["CREATE", "UPDATE"] },
    { name: "validate-memcached", mutating: false, kinds: [MEMCACHED], operations: ["CREATE", "UPDATE"] },
  ];
}

export function review(handler, settings, request) {
  const mc = request.object;
  if (handler === "default-memcached") {
    if (mc.spec && mc.spec.size !== undefined && mc.spec.size !== null) return { allowed: true };
    return { allowed: true, object: { ...mc, spec: { ...(mc.spec || {}), size: 3 } } };
  }
  const image = mc.spec && mc.spec.image;
  if (typeof image === "string") {
    const last = image.split("/").pop().split("@")[0];
    const tag = last.includes(":") ? last.split(":").pop() : "";
    if (!image.includes("@") && (tag === "" || tag === "latest")) {
      const message = `spec.image: Invalid value: "${image}": name a version tag (not latest) or a digest`;
      return { allowed: false, status: { code: 422, reason: "Invalid", message } };
    }
  }
  return { allowed: true };
}
