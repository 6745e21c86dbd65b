//! Revision history and `injectionStrategy.revision` on the SDK's fake cluster,
//! following Kruise's e2e specs "sidecarSet history revision checker", "... history
//! revision data checker", "sidecarSet InjectionStrategy.Revision checker" and
//! "sidecarSet inject pod sidecar during canary upgrades", and its validating webhook's
//! `validateSidecarSetInjectionStrategy`. The data and names are checked against
//! vectors made by Kruise's and Kubernetes' own Go code (`testdata/kruise-hash`,
//! `revisions` mode).

mod common;

use common::{admit, kubelet, pod_kind};
use serde_json::{Value, json};
use sidecarset::revision::{self, CUSTOM_VERSION_LABEL};
use sidecarset::webhooks::{DEFAULT, INJECT, VALIDATE};
use sidecarset::{SidecarSet, SidecarSetController, SidecarSetSpec, SidecarSetWebhooks};
use wasmop_sdk::fake::FakeCluster;
use wasmop_sdk::{AdmissionRequest, Context, KindRef, ObjectRef, Operation, Reconciler, Request, Webhooks};

const NS: &str = "kruise-system";

fn ss_key() -> ObjectRef {
    ObjectRef::new(&KindRef::of::<SidecarSet>(), None, "mesh")
}

fn rev_kind() -> KindRef {
    KindRef::new("apps/v1", "ControllerRevision")
}

fn set(image: &str) -> Value {
    json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": "mesh"},
           "spec": {"selector": {"matchLabels": {"app": "web"}},
                    "containers": [{"name": "envoy", "image": image}]}})
}

fn reconcile(fake: &FakeCluster) -> Value {
    let req = Request { object: ss_key(), current: fake.object(&ss_key()), settings: String::new() };
    SidecarSetController::reconcile(&Context::new(fake), &req).expect("reconcile");
    fake.object(&ss_key()).unwrap()["status"].clone()
}

/// Changes the stored set through the defaulting webhook, then reconciles.
fn update(fake: &FakeCluster, f: impl FnOnce(&mut Value)) -> Value {
    let mut ss = fake.object(&ss_key()).unwrap();
    f(&mut ss);
    let ss = admit(fake, DEFAULT, None, ss);
    fake.edit(&ss_key(), |o| *o = ss).unwrap();
    reconcile(fake)
}

/// The set's revisions, oldest first: (name, number).
fn revisions(fake: &FakeCluster) -> Vec<(String, i64)> {
    let mut r: Vec<(String, i64)> = fake
        .objects_of(&rev_kind())
        .iter()
        .map(|r| (r["metadata"]["name"].as_str().unwrap().to_owned(), r["revision"].as_i64().unwrap()))
        .collect();
    r.sort_by_key(|(_, n)| *n);
    r
}

fn new_pod(fake: &FakeCluster, name: &str, labels: Value, uid: &str) -> Value {
    let p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "demo", "labels": labels},
                   "spec": {"containers": [{"name": "app", "image": "nginx"}]}});
    let req = AdmissionRequest {
        uid: uid.into(),
        operation: Operation::Create,
        namespace: Some("demo".into()),
        object: Some(p.clone()),
        ..Default::default()
    };
    let resp = SidecarSetWebhooks::review(&Context::new(fake), INJECT, "", &req);
    let p = resp.apply(&p).unwrap_or_else(|e| panic!("{e}: {resp:?}"));
    fake.seed(p.clone()).unwrap();
    p
}

fn sidecar_image(p: &Value) -> String {
    p["spec"]["containers"][0]["image"].as_str().unwrap().to_owned()
}

fn pod_revision(p: &Value) -> String {
    let hash: Value =
        serde_json::from_str(p["metadata"]["annotations"]["kruise.io/sidecarset-hash"].as_str().unwrap()).unwrap();
    hash["mesh"]["controllerRevision"].as_str().unwrap_or_default().to_owned()
}

#[test]
fn revision_data_and_names_are_the_bytes_kruise_writes() {
    let specs: Vec<SidecarSetSpec> = serde_json::from_str(include_str!("data/kruise-revision-specs.json")).unwrap();
    let want: Vec<Value> = serde_json::from_str(include_str!("data/kruise-revisions.json")).unwrap();
    assert_eq!(specs.len(), want.len());
    for (spec, want) in specs.iter().zip(&want) {
        let data = revision::data(spec);
        assert_eq!(data, want["data"].as_str().unwrap());
        assert_eq!(revision::hash(&data, 0), want["hash"].as_str().unwrap());
        assert_eq!(revision::hash(&data, 1), want["hash1"].as_str().unwrap());
    }
}

#[test]
fn the_first_reconcile_records_revision_1_and_pods_name_it() {
    let fake = FakeCluster::new();
    fake.seed(admit(&fake, DEFAULT, None, set("envoy:1"))).unwrap();
    let status = reconcile(&fake);
    let revs = fake.objects_of(&rev_kind());
    assert_eq!(revs.len(), 1);
    let r = &revs[0];
    let name = r["metadata"]["name"].as_str().unwrap();
    assert_eq!(status["latestRevision"], name);
    assert_eq!(status["collisionCount"], 0);
    assert_eq!(r["metadata"]["namespace"], NS);
    assert_eq!(r["revision"], 1);
    assert_eq!(r["metadata"]["labels"]["kruise.io/sidecarset-name"], "mesh");
    let hash = name.strip_prefix("mesh-").unwrap();
    assert_eq!(r["metadata"]["labels"]["controller.kubernetes.io/hash"], hash);
    assert_eq!(r["metadata"]["ownerReferences"][0]["kind"], "SidecarSet");
    assert_eq!(r["metadata"]["ownerReferences"][0]["controller"], true);
    // The set's hashes go along, so the version can be restored with them.
    let ss = fake.object(&ss_key()).unwrap();
    let key = "kruise.io/sidecarset-hash";
    assert_eq!(r["metadata"]["annotations"][key], ss["metadata"]["annotations"][key]);
    for k in ["volumes", "containers", "initContainers", "imagePullSecrets", "patchPodMetadata"] {
        assert!(r["data"]["spec"].get(k).is_some(), "{k} is recorded");
    }
    let p = new_pod(&fake, "p0", json!({"app": "web"}), "u0");
    assert_eq!(pod_revision(&p), name);
    // Nothing changed: no second revision, no write (the first counts the new Pod).
    reconcile(&fake);
    fake.take_writes();
    reconcile(&fake);
    assert_eq!(fake.take_writes(), vec![]);
    assert_eq!(fake.objects_of(&rev_kind()).len(), 1);
}

#[test]
fn fifteen_versions_keep_the_last_ten_and_going_back_renumbers() {
    let fake = FakeCluster::new();
    let mut s = set("envoy:1");
    s["spec"]["imagePullSecrets"] = json!([{"name": "secret-1"}]);
    fake.seed(admit(&fake, DEFAULT, None, s)).unwrap();
    reconcile(&fake);
    for i in 2..=15 {
        update(&fake, |s| s["spec"]["imagePullSecrets"] = json!([{"name": format!("secret-{i}")}]));
    }
    let numbers: Vec<i64> = revisions(&fake).into_iter().map(|(_, n)| n).collect();
    assert_eq!(numbers, (6..=15).collect::<Vec<_>>());
    let twelve = revisions(&fake)[6].0.clone();
    let status = update(&fake, |s| s["spec"]["imagePullSecrets"] = json!([{"name": "secret-12"}]));
    let now = revisions(&fake);
    assert_eq!(now.iter().map(|(_, n)| *n).collect::<Vec<_>>(), [6, 7, 8, 9, 10, 11, 13, 14, 15, 16]);
    assert_eq!(now.last().unwrap().0, twelve, "the old revision is reused, not copied");
    assert_eq!(status["latestRevision"], twelve.as_str());
}

#[test]
fn a_revision_a_pod_still_names_outlives_the_history_limit() {
    let fake = FakeCluster::new();
    let mut s = set("envoy:1");
    s["spec"]["revisionHistoryLimit"] = json!(1);
    s["spec"]["updateStrategy"] = json!({"type": "NotUpdate"});
    fake.seed(admit(&fake, DEFAULT, None, s)).unwrap();
    reconcile(&fake);
    let first = revisions(&fake)[0].0.clone();
    new_pod(&fake, "p0", json!({"app": "web"}), "u0");
    update(&fake, |s| s["spec"]["containers"][0]["image"] = json!("envoy:2"));
    update(&fake, |s| s["spec"]["containers"][0]["image"] = json!("envoy:3"));
    let names: Vec<String> = revisions(&fake).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert_eq!(names[0], first, "p0 runs the first version");
}

#[test]
fn each_revision_keeps_its_patch_pod_metadata() {
    let fake = FakeCluster::new();
    let mut s = set("envoy:1");
    s["spec"]["patchPodMetadata"] =
        json!([{"patchPolicy": "Retain", "annotations": {"sidecarset.kruise.io/test": "version-1"}}]);
    fake.seed(admit(&fake, DEFAULT, None, s)).unwrap();
    reconcile(&fake);
    update(&fake, |s| {
        s["spec"]["patchPodMetadata"][0]["annotations"]["sidecarset.kruise.io/test"] = json!("version-2")
    });
    let mut revs = fake.objects_of(&rev_kind());
    revs.sort_by_key(|r| r["revision"].as_i64());
    let versions: Vec<&Value> = revs
        .iter()
        .map(|r| &r["data"]["spec"]["patchPodMetadata"][0]["annotations"]["sidecarset.kruise.io/test"])
        .collect();
    assert_eq!(versions, [&json!("version-1"), &json!("version-2")]);
}

/// Six versions `nginx:<tag>` labelled with custom versions 0..5, rollout paused.
fn six_versions(fake: &FakeCluster) -> Vec<String> {
    let tags = ["latest", "1.21.1", "1.21", "1.20.1", "1.20", "1.19.10"];
    let mut s = set(&format!("nginx:{}", tags[0]));
    s["metadata"]["labels"] = json!({CUSTOM_VERSION_LABEL: "0"});
    s["spec"]["updateStrategy"] = json!({"paused": true});
    fake.seed(admit(fake, DEFAULT, None, s)).unwrap();
    reconcile(fake);
    for (i, tag) in tags.iter().enumerate().skip(1) {
        update(fake, |s| {
            s["spec"]["containers"][0]["image"] = json!(format!("nginx:{tag}"));
            s["metadata"]["labels"][CUSTOM_VERSION_LABEL] = json!(i.to_string());
        });
    }
    let revs = revisions(fake);
    assert_eq!(revs.len(), 6);
    revs.into_iter().map(|(n, _)| n).collect()
}

#[test]
fn a_pinned_custom_version_is_injected_and_rolled_forward_once_unpaused() {
    let fake = FakeCluster::new();
    let names = six_versions(&fake);
    update(&fake, |s| s["spec"]["injectionStrategy"] = json!({"revision": {"customVersion": "3", "policy": "Always"}}));
    let p = new_pod(&fake, "p0", json!({"app": "web"}), "u0");
    assert_eq!(sidecar_image(&p), "nginx:1.20.1");
    assert_eq!(pod_revision(&p), names[3]);

    kubelet(&fake, "p0");
    update(&fake, |s| s["spec"]["updateStrategy"]["paused"] = json!(false));
    kubelet(&fake, "p0");
    let status = reconcile(&fake);
    let p = fake.object(&ObjectRef::new(&pod_kind(), Some("demo"), "p0")).unwrap();
    assert_eq!(sidecar_image(&p), "nginx:1.19.10");
    assert_eq!(pod_revision(&p), names[5]);
    assert_eq!([&status["matchedPods"], &status["updatedPods"], &status["readyPods"]], [1, 1, 1]);
}

#[test]
fn partial_pins_pods_outside_the_update_selector_and_draws_the_rest_by_partition() {
    let fake = FakeCluster::new();
    let mut s = set("nginx:1.20.1");
    s["metadata"]["labels"] = json!({CUSTOM_VERSION_LABEL: "0"});
    fake.seed(admit(&fake, DEFAULT, None, s)).unwrap();
    reconcile(&fake);
    update(&fake, |s| {
        s["spec"]["containers"][0]["image"] = json!("nginx:1.21.1");
        s["spec"]["updateStrategy"]["selector"] = json!({"matchLabels": {"version": "canary"}});
        s["spec"]["injectionStrategy"] = json!({"revision": {"customVersion": "0", "policy": "Partial"}});
        s["metadata"]["labels"][CUSTOM_VERSION_LABEL] = json!("1");
    });
    let stable = new_pod(&fake, "s0", json!({"app": "web", "version": "stable"}), "u1");
    assert_eq!(sidecar_image(&stable), "nginx:1.20.1", "outside the update selector: the pinned version");
    let canary = new_pod(&fake, "c0", json!({"app": "web", "version": "canary"}), "u2");
    assert_eq!(sidecar_image(&canary), "nginx:1.21.1", "an int partition (the default 0): the latest");

    // A percentage partition is the chance of the pinned version.
    update(&fake, |s| s["spec"]["updateStrategy"]["partition"] = json!("50%"));
    let images: Vec<String> = (0..40)
        .map(|i| {
            sidecar_image(&new_pod(
                &fake,
                &format!("c{}", i + 1),
                json!({"app": "web", "version": "canary"}),
                &format!("uid-{i}"),
            ))
        })
        .collect();
    let old = images.iter().filter(|i| *i == "nginx:1.20.1").count();
    assert!((8..=32).contains(&old), "{old} of 40 pinned at 50 %");
    for (partition, want) in
        [("0%", "nginx:1.21.1"), ("100%", "nginx:1.20.1"), ("99999999999999999999%", "nginx:1.20.1")]
    {
        update(&fake, |s| s["spec"]["updateStrategy"]["partition"] = json!(partition));
        for i in 0..5 {
            let p = new_pod(
                &fake,
                &format!("{partition}-{i}"),
                json!({"app": "web", "version": "canary"}),
                &format!("{partition}{i}"),
            );
            assert_eq!(sidecar_image(&p), want, "partition {partition}");
        }
    }
}

fn validate(fake: &FakeCluster, ss: Value) -> Result<(), String> {
    let ss = admit(fake, DEFAULT, None, ss);
    let req = AdmissionRequest { operation: Operation::Create, object: Some(ss), ..Default::default() };
    let resp = SidecarSetWebhooks::review(&Context::new(fake), VALIDATE, "", &req);
    if resp.allowed { Ok(()) } else { Err(resp.status.map(|s| s.message).unwrap_or_default()) }
}

#[test]
fn the_revision_to_inject_must_be_named_exist_be_the_sets_own_and_have_a_known_policy() {
    let fake = FakeCluster::new();
    let names = six_versions(&fake);
    let other = |r: Value| {
        let mut s = set("nginx:1");
        s["metadata"]["name"] = json!("other");
        s["spec"]["selector"] = json!({"matchLabels": {"app": "other"}});
        s["spec"]["injectionStrategy"] = json!({"revision": r});
        s
    };
    let mesh = |r: Value| {
        let mut s = fake.object(&ss_key()).unwrap();
        s["spec"]["injectionStrategy"] = json!({"revision": r});
        s
    };
    let err = validate(&fake, other(json!({"policy": "Always"}))).unwrap_err();
    assert!(err.contains("revisionName and customVersion cannot be empty simultaneously"), "{err}");
    let err = validate(&fake, other(json!({"revisionName": "nope"}))).unwrap_err();
    assert!(err.contains("spec.injectionStrategy.revision") && err.contains("not found"), "{err}");
    // Stricter than Kruise: another set's version would bring what this set was never
    // admitted with.
    let err = validate(&fake, other(json!({"revisionName": names[2]}))).unwrap_err();
    assert!(err.contains("is not a revision of SidecarSet other"), "{err}");
    let err = validate(&fake, other(json!({"customVersion": "3"}))).unwrap_err();
    assert!(err.contains("customVersion"), "{err}");
    validate(&fake, mesh(json!({"revisionName": names[2]}))).unwrap();
    let err = validate(&fake, mesh(json!({"revisionName": names[2], "policy": "Sometimes"}))).unwrap_err();
    assert!(err.contains("spec.injectionStrategy.revision.policy"), "{err}");
}

#[test]
fn a_revision_whose_data_does_not_read_is_refused_not_injected_empty() {
    let fake = FakeCluster::new();
    let names = six_versions(&fake);
    let at = ObjectRef::new(&rev_kind(), Some(NS), &names[1]);
    fake.edit(&at, |r| r["data"]["spec"]["containers"] = json!("not a list")).unwrap();
    let mut s = fake.object(&ss_key()).unwrap();
    s["spec"]["injectionStrategy"] = json!({"revision": {"revisionName": names[1]}});
    let err = validate(&fake, s.clone()).unwrap_err();
    assert!(err.contains("data.spec"), "{err}");
    // Stored anyway (before the revision broke, say): new Pods are refused, not
    // admitted without their sidecars.
    fake.edit(&ss_key(), |o| *o = admit(&fake, DEFAULT, None, s)).unwrap();
    let p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "demo", "labels": {"app": "web"}},
                   "spec": {"containers": [{"name": "app", "image": "nginx"}]}});
    let req = AdmissionRequest {
        operation: Operation::Create,
        namespace: Some("demo".into()),
        object: Some(p),
        ..Default::default()
    };
    let r = SidecarSetWebhooks::review(&Context::new(&fake), INJECT, "", &req);
    assert!(!r.allowed, "{r:?}");
}

#[test]
fn without_a_recorded_revision_nothing_is_rolled() {
    // Kruise's order: the revision first; a Pod never names a revision that is not its
    // version.
    let fake = FakeCluster::new();
    fake.seed(admit(&fake, DEFAULT, None, set("envoy:1"))).unwrap();
    reconcile(&fake);
    new_pod(&fake, "p0", json!({"app": "web"}), "u0");
    kubelet(&fake, "p0");
    reconcile(&fake);
    let mut ss = fake.object(&ss_key()).unwrap();
    ss["spec"]["containers"][0]["image"] = json!("envoy:2");
    let ss = admit(&fake, DEFAULT, None, ss);
    fake.edit(&ss_key(), |o| *o = ss).unwrap();
    // Every name the new version could take is held by other data (100 collisions).
    let spec: SidecarSet = serde_json::from_value(fake.object(&ss_key()).unwrap()).unwrap();
    let text = revision::data(&spec.spec);
    for c in 0..100 {
        let name = format!("mesh-{}", revision::hash(&text, c));
        fake.seed(json!({"apiVersion": "apps/v1", "kind": "ControllerRevision",
                         "metadata": {"name": name, "namespace": NS}, "revision": 1, "data": {"other": c}}))
            .unwrap();
    }
    let req = Request { object: ss_key(), current: fake.object(&ss_key()), settings: String::new() };
    let err = SidecarSetController::reconcile(&Context::new(&fake), &req).unwrap_err();
    assert!(format!("{err:?}").contains("after 100 collisions"), "{err:?}");
    let p = fake.object(&ObjectRef::new(&pod_kind(), Some("demo"), "p0")).unwrap();
    assert_eq!(sidecar_image(&p), "envoy:1", "nothing rolled");
    assert!(fake.events().iter().any(|e| e.reason == "RevisionNotRecorded"), "{:?}", fake.events());
}

#[test]
fn a_new_custom_version_alone_relabels_the_latest_revision() {
    let fake = FakeCluster::new();
    let mut s = set("envoy:1");
    s["metadata"]["labels"] = json!({CUSTOM_VERSION_LABEL: "a"});
    fake.seed(admit(&fake, DEFAULT, None, s)).unwrap();
    reconcile(&fake);
    // v1beta1's field wins over v1alpha1's label, as Kruise's conversion reads them.
    update(&fake, |s| s["spec"]["customVersion"] = json!("b"));
    let revs = fake.objects_of(&rev_kind());
    assert_eq!(revs.len(), 1, "the sidecars did not change");
    assert_eq!(revs[0]["metadata"]["labels"][CUSTOM_VERSION_LABEL], "b");
}
