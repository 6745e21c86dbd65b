//! The admission handlers against the SDK's fake cluster: injecting into Pods
//! (`injection`), defaulting and validating SidecarSets (`validation`), and the
//! helpers both use.

use serde_json::{Value, json};
use sidecarset::webhooks::{DEFAULT, INJECT, VALIDATE};
use sidecarset::{SidecarSet, SidecarSetWebhooks};
use wasmop_sdk::fake::FakeCluster;
use wasmop_sdk::{AdmissionRequest, AdmissionResponse, Context, Operation, Webhooks};

mod injection;
mod validation;

/// The validation cases both `validation` and the e2e conformance test run: each a JSON
/// Patch of one base SidecarSet, denied with a message or admitted (its base serves
/// `two_sidecars` too).
const CASES: &str = include_str!("../data/validation-cases.json");

fn sidecarset(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": name}, "spec": spec})
}

fn review(
    fake: &FakeCluster,
    handler: &str,
    op: Operation,
    ns: Option<&str>,
    obj: Value,
    old: Option<Value>,
) -> AdmissionResponse {
    let req = AdmissionRequest {
        uid: "u".into(),
        operation: op,
        namespace: ns.map(Into::into),
        object: Some(obj),
        old_object: old,
        ..Default::default()
    };
    // As the host hands it over: JSON text (`inject-pod` parses only the Pod's parts).
    let text = serde_json::to_string(&req).unwrap();
    SidecarSetWebhooks::review_text(&Context::new(fake), handler, ADMIN_ALLOWS_ANY_ANNOTATION, &text).unwrap()
}

/// Settings under which any annotation may be patched (the other tests are not about
/// the whitelist; `patch_pod_metadata_needs_the_admins_whitelist` is).
const ADMIN_ALLOWS_ANY_ANNOTATION: &str =
    r#"patchPodMetadataWhiteList: {"rules": [{"allowedAnnotationKeyExprs": [".*"]}]}"#;

/// Defaults a SidecarSet as the mutating webhook would, and stores it.
fn store(fake: &FakeCluster, obj: Value) -> Value {
    let r = review(fake, DEFAULT, Operation::Create, None, obj, None);
    let o = r.object.expect("defaulted");
    fake.seed(o.clone()).unwrap();
    o
}

/// The base of the validation cases: two sidecars, volumes, a pull secret, a patch.
fn two_sidecars() -> Value {
    serde_json::from_str::<Value>(CASES).unwrap()["base"]["spec"].clone()
}

fn pod(labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "p-", "labels": labels},
           "spec": {"containers": [{"name": "app", "image": "nginx", "env": [{"name": "TZ", "value": "UTC"}],
                                    "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                    "volumes": [{"name": "data", "hostPath": {"path": "/d"}}],
                    "imagePullSecrets": [{"name": "regcred"}]}})
}

fn names(list: &Value) -> Vec<&str> {
    list.as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect()
}

/// The JSONPatch's paths: what the apiserver is asked to replace.
fn patched(r: &AdmissionResponse) -> Vec<String> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD.decode(r.patch.as_ref().expect("a patch")).unwrap();
    let ops: Vec<Value> = serde_json::from_slice(&bytes).unwrap();
    ops.iter().map(|o| o["path"].as_str().unwrap().to_owned()).collect()
}

fn denial(fake: &FakeCluster, obj: Value, old: Option<Value>) -> String {
    let op = if old.is_some() { Operation::Update } else { Operation::Create };
    let obj = review(fake, DEFAULT, op, None, obj.clone(), None).object.unwrap_or(obj);
    let r = review(fake, VALIDATE, op, None, obj, old);
    assert!(!r.allowed, "expected a denial");
    r.status.unwrap().message
}

fn canary(name: &str, base: &str, spec: Value) -> Value {
    let mut o = sidecarset(name, spec);
    o["metadata"]["annotations"] =
        json!({"apps.kruise.io/sidecarset-canary": "true", "apps.kruise.io/sidecarset-base": base});
    o
}
