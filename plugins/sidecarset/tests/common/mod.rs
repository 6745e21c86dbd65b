//! What the controller tests share: admission through the plugin's own webhooks, and a
//! stand-in for the kubelet on the SDK's fake cluster.

use serde_json::{Value, json};
use sidecarset::SidecarSetWebhooks;
use wasmop_sdk::fake::FakeCluster;
use wasmop_sdk::{AdmissionRequest, Context, KindRef, ObjectRef, Operation, Webhooks};

pub fn pod_kind() -> KindRef {
    KindRef::new("v1", "Pod")
}

/// `obj` as the plugin's `handler` admits it on create (patch applied).
pub fn admit(fake: &FakeCluster, handler: &str, ns: Option<&str>, obj: Value) -> Value {
    let req = AdmissionRequest {
        operation: Operation::Create,
        namespace: ns.map(Into::into),
        object: Some(obj.clone()),
        ..Default::default()
    };
    SidecarSetWebhooks::review(&Context::new(fake), handler, "", &req).apply(&obj).unwrap()
}

/// What the kubelet reports once Pod `demo/name` runs its spec: Running, Ready, every
/// container ready with the spec's image. Conditions the kubelet does not own
/// (SidecarSetUpgradable) stay, as they do.
pub fn kubelet(fake: &FakeCluster, name: &str) {
    fake.edit(&ObjectRef::new(&pod_kind(), Some("demo"), name), |p| {
        let statuses: Vec<Value> = p["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| json!({"name": c["name"], "image": c["image"], "ready": true}))
            .collect();
        let mut conditions: Vec<Value> = p["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| c["type"] != "Ready")
            .cloned()
            .collect();
        conditions.push(json!({"type": "Ready", "status": "True"}));
        p["status"] = json!({"phase": "Running", "conditions": conditions, "containerStatuses": statuses});
    })
    .unwrap();
}
