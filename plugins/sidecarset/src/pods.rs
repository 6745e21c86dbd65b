//! The Pods a reconcile reads: each parsed as a view of what the controller looks at,
//! and read whole only when one is to be written.
//!
//! Why: every reconcile of a set lists every Pod it selects, and building each whole
//! Pod as a JSON tree was most of what the plugin computes per reconcile (at 2,000
//! small Pods, about 30 ms of 46 ms in wasm; `reconcile_objects` in the host's
//! examples). On the local control plane, 2,000 Pods: each reconcile's wall time
//! 129–141 ms instead of 245 ms, peak RSS 98 MiB instead of 133 (BENCHMARKS.md,
//! issues 19, 23, 25). The view skips, without building them, the parts of a Pod the
//! controller never reads: its volumes, tolerations, scheduling and security
//! settings, of each container all but its name, image and env, and of the status all
//! but the phase, conditions and what each container status says of image and
//! readiness.
//!
//! What the controller reads (and the view keeps): metadata whole; of the spec,
//! `containers[].{name, image, env}` and `nodeName`; of the status, `phase`,
//! `conditions[].{type, status, lastTransitionTime}` and
//! `containerStatuses[].{name, image, imageID, ready, restartCount}`. A reader of
//! another field must add it here (the view's test lists them).
//!
//! Writing: a view would drop every field it skips, so a Pod to be written is read
//! whole first ([`whole`], answered from the host's watch cache). When the Pod changed
//! since the list (another resourceVersion), it is left for the reconcile its change
//! brings: what was decided on the view may no longer hold.

use serde::Deserialize;
use serde_json::{Map, Value};
use wasmop_sdk::{ClusterExt, Context, Error, KindRef, ListParams, ObjectRef};

/// The Pods `params` select, as views (JSON values of the kept fields).
pub fn list(ctx: &Context<'_>, params: &ListParams) -> Result<Vec<Value>, Error> {
    Ok(ctx.list_as::<View>(&KindRef::new("v1", "Pod"), params)?.into_iter().map(View::into_value).collect())
}

/// The whole Pod `view` was read from, or None when it changed since (or is gone).
pub fn whole(ctx: &Context<'_>, view: &Value) -> Result<Option<Value>, Error> {
    let Some(at) = ObjectRef::of_json(view) else { return Ok(None) };
    let pod = match ctx.get(&at) {
        Ok(p) => p,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(e),
    };
    let version = |p: &Value| p["metadata"]["resourceVersion"].clone();
    Ok((version(&pod) == version(view)).then_some(pod))
}

#[derive(Deserialize)]
struct View {
    #[serde(rename = "apiVersion", default)]
    api_version: Value,
    #[serde(default)]
    kind: Value,
    #[serde(default)]
    metadata: Value,
    #[serde(default)]
    spec: Spec,
    #[serde(default)]
    status: Status,
}

#[derive(Deserialize, Default)]
struct Status {
    #[serde(default)]
    phase: Value,
    #[serde(default)]
    conditions: Option<Vec<Condition>>,
    #[serde(rename = "containerStatuses", default)]
    container_statuses: Option<Vec<ContainerStatus>>,
}

#[derive(Deserialize)]
struct Condition {
    #[serde(rename = "type", default)]
    type_: Value,
    #[serde(default)]
    status: Value,
    #[serde(rename = "lastTransitionTime", default)]
    last_transition_time: Value,
}

#[derive(Deserialize)]
struct ContainerStatus {
    #[serde(default)]
    name: Value,
    #[serde(default)]
    image: Value,
    #[serde(rename = "imageID", default)]
    image_id: Value,
    #[serde(default)]
    ready: Value,
    #[serde(rename = "restartCount", default)]
    restart_count: Value,
}

#[derive(Deserialize, Default)]
struct Spec {
    #[serde(default)]
    containers: Vec<Container>,
    #[serde(rename = "nodeName", default)]
    node_name: Value,
}

#[derive(Deserialize)]
struct Container {
    #[serde(default)]
    name: Value,
    #[serde(default)]
    image: Value,
    #[serde(default)]
    env: Value,
}

impl View {
    fn into_value(self) -> Value {
        let containers =
            self.spec.containers.into_iter().map(|c| object([("name", c.name), ("image", c.image), ("env", c.env)]));
        let mut spec = Map::new();
        spec.insert("containers".into(), Value::Array(containers.collect()));
        put(&mut spec, "nodeName", self.spec.node_name);
        let mut status = Map::new();
        put(&mut status, "phase", self.status.phase);
        if let Some(cs) = self.status.conditions {
            let cs = cs.into_iter().map(|c| {
                object([("type", c.type_), ("status", c.status), ("lastTransitionTime", c.last_transition_time)])
            });
            status.insert("conditions".into(), Value::Array(cs.collect()));
        }
        if let Some(ss) = self.status.container_statuses {
            let ss = ss.into_iter().map(|s| {
                object([
                    ("name", s.name),
                    ("image", s.image),
                    ("imageID", s.image_id),
                    ("ready", s.ready),
                    ("restartCount", s.restart_count),
                ])
            });
            status.insert("containerStatuses".into(), Value::Array(ss.collect()));
        }
        let mut pod = Map::new();
        put(&mut pod, "apiVersion", self.api_version);
        put(&mut pod, "kind", self.kind);
        put(&mut pod, "metadata", self.metadata);
        pod.insert("spec".into(), Value::Object(spec));
        if !status.is_empty() {
            pod.insert("status".into(), Value::Object(status));
        }
        Value::Object(pod)
    }
}

fn object<const N: usize>(fields: [(&str, Value); N]) -> Value {
    let mut m = Map::new();
    for (k, v) in fields {
        put(&mut m, k, v);
    }
    Value::Object(m)
}

/// Absent stays absent (a view answers `is_null` as the Pod does).
fn put(m: &mut Map<String, Value>, key: &str, v: Value) {
    if !v.is_null() {
        m.insert(key.into(), v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use wasmop_sdk::fake::FakeCluster;

    #[test]
    fn a_view_keeps_what_the_controller_reads_and_a_write_starts_from_the_whole_pod() {
        let fake = FakeCluster::new();
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "n", "labels": {"app": "web"}, "annotations": {"a": "1"}},
            "spec": {"nodeName": "node-1", "volumes": [{"name": "v", "emptyDir": {}}],
                     "containers": [{"name": "c", "image": "i:1", "env": [{"name": "E", "value": "1"}],
                                     "volumeMounts": [{"name": "v", "mountPath": "/v"}]}]},
            "status": {"phase": "Running", "podIP": "10.0.0.1",
                "conditions": [{"type": "Ready", "status": "True", "lastProbeTime": null,
                                "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                "containerStatuses": [{"name": "c", "image": "i:1", "imageID": "sha256:1", "ready": true,
                                       "restartCount": 0, "started": true, "state": {"running": {}}}]}});
        let stored = fake.seed(pod).unwrap();
        let ctx = Context::new(&fake);
        let views = list(&ctx, &ListParams::default()).unwrap();
        let v = &views[0];
        assert_eq!(v["metadata"], stored["metadata"]);
        assert_eq!(
            v["status"],
            json!({"phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            "containerStatuses": [{"name": "c", "image": "i:1", "imageID": "sha256:1", "ready": true, "restartCount": 0}]})
        );
        assert_eq!(
            v["spec"],
            json!({"nodeName": "node-1",
            "containers": [{"name": "c", "image": "i:1", "env": [{"name": "E", "value": "1"}]}]})
        );
        assert_eq!(whole(&ctx, v).unwrap(), Some(stored.clone()), "written from the whole Pod");

        // Changed since the list: left for the reconcile its change brings.
        let at = ObjectRef::of_json(&stored).unwrap();
        fake.edit(&at, |p| p["metadata"]["labels"]["x"] = json!("y")).unwrap();
        assert!(whole(&ctx, v).unwrap().is_none(), "a Pod changed since the list is not written from the view");
        wasmop_sdk::Cluster::delete(&fake, &at).unwrap();
        assert!(whole(&ctx, v).unwrap().is_none(), "nor one deleted since");
    }
}
