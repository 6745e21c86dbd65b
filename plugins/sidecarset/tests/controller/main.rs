//! The controller against the SDK's fake cluster: status counts and conditions
//! (`status`), the in-place rolling update (`rollout`), and the helpers both use.

#[path = "../common/mod.rs"]
mod common;
mod rollout;
mod status;

use common::{admit, kubelet, pod_kind};
use serde_json::{Value, json};
use sidecarset::webhooks::{DEFAULT, INJECT};
use sidecarset::{SidecarSet, SidecarSetController};
use wasmop_sdk::fake::FakeCluster;
use wasmop_sdk::{Context, KindRef, ObjectRef, Reconciler, Request};

fn ss_key() -> ObjectRef {
    ObjectRef::new(&KindRef::of::<SidecarSet>(), None, "s")
}

fn setup(fake: &FakeCluster, strategy: Value, pods: usize) {
    let ss = json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": "s"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "updateStrategy": strategy,
                 "containers": [{"name": "log", "image": "busybox:1.36"}]}});
    fake.seed(admit(fake, DEFAULT, None, ss)).unwrap();
    for i in 0..pods {
        let p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("p{i}"), "namespace": "demo", "labels": {"app": "web"}},
                       "spec": {"containers": [{"name": "app", "image": "nginx"}]}});
        let p = admit(fake, INJECT, Some("demo"), p);
        fake.seed(p).unwrap();
    }
}

/// The kubelet's report for Pods p0 .. p{n-1}.
fn all_ready(fake: &FakeCluster, n: usize) {
    for i in 0..n {
        kubelet(fake, &format!("p{i}"));
    }
}

fn reconcile(fake: &FakeCluster) -> Value {
    let req = Request { object: ss_key(), current: fake.object(&ss_key()), settings: String::new() };
    SidecarSetController::reconcile(&Context::new(fake), &req).expect("reconcile");
    fake.object(&ss_key()).unwrap()["status"].clone()
}

fn sidecar_images(fake: &FakeCluster) -> Vec<String> {
    let mut v: Vec<String> = fake
        .objects_of(&pod_kind())
        .iter()
        .map(|p| p["spec"]["containers"][0]["image"].as_str().unwrap().to_owned())
        .collect();
    v.sort();
    v
}

fn change_image(fake: &FakeCluster, image: &str) {
    let mut ss = fake.object(&ss_key()).unwrap();
    ss["spec"]["containers"][0]["image"] = json!(image);
    let ss = admit(fake, DEFAULT, None, ss);
    fake.edit(&ss_key(), |o| *o = ss).unwrap();
}

fn phase(fake: &FakeCluster, name: &str, phase: &str) {
    fake.edit(&ObjectRef::new(&pod_kind(), Some("demo"), name), |p| p["status"]["phase"] = json!(phase)).unwrap();
}

fn new_images(fake: &FakeCluster) -> usize {
    sidecar_images(fake).iter().filter(|i| *i == "busybox:1.37").count()
}

fn condition(fake: &FakeCluster, name: &str) -> Value {
    let p = fake.object(&ObjectRef::new(&pod_kind(), Some("demo"), name)).unwrap();
    p["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "SidecarSetUpgradable")
        .cloned()
        .unwrap_or(Value::Null)
}

/// The image each Pod's sidecar has, by Pod name.
fn image_of(fake: &FakeCluster, name: &str) -> String {
    let p = fake.object(&ObjectRef::new(&pod_kind(), Some("demo"), name)).unwrap();
    p["spec"]["containers"][0]["image"].as_str().unwrap().to_owned()
}

/// What a real kubelet reports: the runtime's own name for the image and a new
/// imageID once the container restarted.
fn runtime_kubelet(fake: &FakeCluster, name: &str, id: &str) {
    fake.edit(&ObjectRef::new(&pod_kind(), Some("demo"), name), |p| {
        let statuses: Vec<Value> = p["spec"]["containers"].as_array().unwrap().iter()
            .map(|c| json!({"name": c["name"], "image": format!("docker.io/library/{}", c["image"].as_str().unwrap()),
                            "imageID": format!("containerd://sha256:{id}-{}", c["name"].as_str().unwrap()), "ready": true}))
            .collect();
        // Conditions the kubelet does not own (SidecarSetUpgradable) stay, as they do.
        let mut conditions: Vec<Value> = p["status"]["conditions"].as_array().into_iter().flatten()
            .filter(|c| c["type"] != "Ready").cloned().collect();
        conditions.push(json!({"type": "Ready", "status": "True"}));
        p["status"] = json!({"phase": "Running", "conditions": conditions, "containerStatuses": statuses});
    })
    .unwrap();
}
