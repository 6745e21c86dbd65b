//! HotUpgrade sidecars on the SDK's fake cluster, following Kruise's unit tests
//! (`sidecarset_hotupgrade_test.go` of the Pod webhook and the controller) and its e2e
//! spec "sidecarSet upgrade hot sidecar container image".

mod common;

use common::{admit, kubelet, pod_kind};
use serde_json::{Value, json};
use sidecarset::webhooks::{DEFAULT, INJECT, VALIDATE};
use sidecarset::{SidecarSet, SidecarSetController, SidecarSetWebhooks};
use wasmop_sdk::fake::FakeCluster;
use wasmop_sdk::{AdmissionRequest, Context, KindRef, ObjectRef, Operation, Reconciler, Request, Webhooks};

const WORKING: &str = "kruise.io/sidecarset-working-hotupgrade-container";

fn ss_key() -> ObjectRef {
    ObjectRef::new(&KindRef::of::<SidecarSet>(), None, "mesh")
}

fn hot_set(image: &str) -> Value {
    json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": "mesh"},
           "spec": {"selector": {"matchLabels": {"app": "web"}},
                    "containers": [{"name": "envoy", "image": image,
                                    "upgradeStrategy": {"upgradeType": "HotUpgrade", "hotUpgradeEmptyImage": "empty:1"}}]}})
}

fn setup(fake: &FakeCluster) {
    fake.seed(admit(fake, DEFAULT, None, hot_set("envoy:1"))).unwrap();
    let p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p0", "namespace": "demo", "labels": {"app": "web"}},
                   "spec": {"containers": [{"name": "app", "image": "nginx"}]}});
    fake.seed(admit(fake, INJECT, Some("demo"), p)).unwrap();
}

fn pod(fake: &FakeCluster) -> Value {
    fake.object(&ObjectRef::new(&pod_kind(), Some("demo"), "p0")).unwrap()
}

fn reconcile(fake: &FakeCluster) -> Value {
    let req = Request { object: ss_key(), current: fake.object(&ss_key()), settings: String::new() };
    SidecarSetController::reconcile(&Context::new(fake), &req).expect("reconcile");
    fake.object(&ss_key()).unwrap()["status"].clone()
}

/// (container, image) of the Pod's spec, and the annotations of the pair.
fn state(fake: &FakeCluster) -> (Vec<(String, String)>, Value) {
    let p = pod(fake);
    let cs = p["spec"]["containers"].as_array().unwrap().iter();
    let images =
        cs.map(|c| (c["name"].as_str().unwrap().to_owned(), c["image"].as_str().unwrap().to_owned())).collect();
    let a = &p["metadata"]["annotations"];
    let keys = [
        "version.sidecarset.kruise.io/envoy-1",
        "versionalt.sidecarset.kruise.io/envoy-1",
        "version.sidecarset.kruise.io/envoy-2",
        "versionalt.sidecarset.kruise.io/envoy-2",
        WORKING,
    ];
    (images, json!(keys.map(|k| a[k].clone())))
}

fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect()
}

/// Sets the sidecar's image; the set's resourceVersion after that.
fn change_image(fake: &FakeCluster, image: &str) -> String {
    let mut ss = fake.object(&ss_key()).unwrap();
    ss["spec"]["containers"][0]["image"] = json!(image);
    let ss = admit(fake, DEFAULT, None, ss);
    fake.edit(&ss_key(), |o| *o = ss).unwrap();
    fake.object(&ss_key()).unwrap()["metadata"]["resourceVersion"].as_str().unwrap().to_owned()
}

fn counts(s: &Value) -> [i64; 4] {
    ["matchedPods", "updatedPods", "readyPods", "updatedReadyPods"].map(|k| s[k].as_i64().unwrap_or(-1))
}

#[test]
fn a_hot_upgrade_sidecar_is_injected_as_a_pair_with_its_versions() {
    let fake = FakeCluster::new();
    setup(&fake);
    let (images, annotations) = state(&fake);
    // Kruise's default for containers is BeforeAppContainer.
    assert_eq!(images, pairs(&[("envoy-1", "envoy:1"), ("envoy-2", "empty:1"), ("app", "nginx")]));
    assert_eq!(annotations, json!(["1", "0", "0", "1", r#"{"envoy":"envoy-1"}"#]));
    let p = pod(&fake);
    let env = &p["spec"]["containers"][1]["env"];
    assert_eq!(env[1]["name"], "SIDECARSET_VERSION");
    assert_eq!(
        env[1]["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.annotations['version.sidecarset.kruise.io/envoy-2']"
    );
    assert_eq!(
        env[2]["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.annotations['versionalt.sidecarset.kruise.io/envoy-2']"
    );
    // The set's sidecar is listed once, by its name in the set.
    let hash: Value =
        serde_json::from_str(p["metadata"]["annotations"]["kruise.io/sidecarset-hash"].as_str().unwrap()).unwrap();
    assert_eq!(hash["mesh"]["sidecarList"], json!(["envoy"]));
    kubelet(&fake, "p0");
    assert_eq!(counts(&reconcile(&fake)), [1, 1, 1, 1], "the pair counts as one matched, ready Pod");
}

#[test]
fn an_update_goes_to_the_idle_container_and_the_old_one_is_emptied_once_the_new_runs() {
    let fake = FakeCluster::new();
    setup(&fake);
    kubelet(&fake, "p0");
    reconcile(&fake);

    let v = change_image(&fake, "envoy:2");
    reconcile(&fake);
    let (images, annotations) = state(&fake);
    assert_eq!(images, pairs(&[("envoy-1", "envoy:1"), ("envoy-2", "envoy:2"), ("app", "nginx")]));
    // envoy-2 works now, at the set's resourceVersion; its alternate is envoy-1's.
    assert_eq!(annotations, json!(["1", v, v, "1", r#"{"envoy":"envoy-2"}"#]));
    // Updated, not ready: the old container still runs and envoy-2 has not started.
    assert_eq!(counts(&reconcile(&fake)), [1, 1, 0, 0]);
    assert_eq!(state(&fake).0[0].1, "envoy:1", "nothing is emptied before the new one runs");

    kubelet(&fake, "p0");
    reconcile(&fake);
    let (images, annotations) = state(&fake);
    assert_eq!(images, pairs(&[("envoy-1", "empty:1"), ("envoy-2", "envoy:2"), ("app", "nginx")]));
    assert_eq!(annotations, json!(["0", v, v, "0", r#"{"envoy":"envoy-2"}"#]));
    assert!(fake.events().iter().any(|e| e.reason == "ResetContainerSucceed"), "{:?}", fake.events());
    kubelet(&fake, "p0");
    assert_eq!(counts(&reconcile(&fake)), [1, 1, 1, 1]);

    // And back, as Kruise's e2e spec does: the new image goes to envoy-1 this time.
    let v = change_image(&fake, "envoy:1");
    reconcile(&fake);
    kubelet(&fake, "p0");
    reconcile(&fake);
    kubelet(&fake, "p0");
    let (images, annotations) = state(&fake);
    assert_eq!(images, pairs(&[("envoy-1", "envoy:1"), ("envoy-2", "empty:1"), ("app", "nginx")]));
    assert_eq!(annotations, json!([v, "0", "0", v, r#"{"envoy":"envoy-1"}"#]));
    assert_eq!(counts(&reconcile(&fake)), [1, 1, 1, 1]);
}

#[test]
fn a_change_beyond_the_image_does_not_touch_the_pair() {
    let fake = FakeCluster::new();
    setup(&fake);
    kubelet(&fake, "p0");
    let mut ss = fake.object(&ss_key()).unwrap();
    ss["spec"]["containers"][0]["env"] = json!([{"name": "MODE", "value": "new"}]);
    let ss = admit(&fake, DEFAULT, None, ss);
    fake.edit(&ss_key(), |o| *o = ss).unwrap();
    let before = state(&fake);
    assert_eq!(counts(&reconcile(&fake)), [1, 0, 1, 0]);
    assert_eq!(state(&fake), before);
}

fn validate(fake: &FakeCluster, obj: Value, old: Option<Value>) -> Result<(), String> {
    let req = AdmissionRequest {
        operation: if old.is_some() { Operation::Update } else { Operation::Create },
        object: Some(admit(fake, DEFAULT, None, obj)),
        old_object: old,
        ..Default::default()
    };
    let r = SidecarSetWebhooks::review(&Context::new(fake), VALIDATE, "", &req);
    if r.allowed { Ok(()) } else { Err(r.status.map(|s| s.message).unwrap_or_default()) }
}

#[test]
fn validation_of_hot_upgrade_sidecars() {
    let fake = FakeCluster::new();
    assert_eq!(validate(&fake, hot_set("envoy:1"), None), Ok(()));
    let mut no_empty = hot_set("envoy:1");
    no_empty["spec"]["containers"][0]["upgradeStrategy"] = json!({"upgradeType": "HotUpgrade"});
    let e = validate(&fake, no_empty, None).unwrap_err();
    assert!(e.contains("spec.containers[0].upgradeStrategy.hotUpgradeEmptyImage: required"), "{e}");
    let mut clash = hot_set("envoy:1");
    clash["spec"]["containers"].as_array_mut().unwrap().push(json!({"name": "envoy-2", "image": "x:1"}));
    let e = validate(&fake, clash, None).unwrap_err();
    assert!(e.contains("spec.containers[1].name: \"envoy-2\" is used by another container"), "{e}");
    let mut long = hot_set("envoy:1");
    long["spec"]["containers"][0]["name"] = json!("e".repeat(62));
    let e = validate(&fake, long, None).unwrap_err();
    assert!(e.contains("HotUpgrade runs it as") && e.contains("at most 63 characters"), "{e}");
    // Kruise's validateSidecarContainerConflict: upgradeType is immutable.
    let cold = admit(&fake, DEFAULT, None, {
        let mut s = hot_set("envoy:1");
        s["spec"]["containers"][0]["upgradeStrategy"] = json!({});
        s
    });
    let e = validate(&fake, hot_set("envoy:2"), Some(cold.clone())).unwrap_err();
    assert!(
        e.contains("spec.containers[0].upgradeStrategy.upgradeType: container envoy upgradeType is immutable"),
        "{e}"
    );
    assert_eq!(validate(&fake, cold.clone(), Some(cold)), Ok(()));
}
