//! Status counts and the in-place rolling update against the SDK's fake cluster.

mod common;

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

#[test]
fn status_counts_follow_pods() {
    let fake = FakeCluster::new();
    setup(&fake, json!({}), 3);
    let s = reconcile(&fake);
    assert_eq!(
        (s["matchedPods"].as_i64(), s["updatedPods"].as_i64(), s["readyPods"].as_i64()),
        (Some(3), Some(3), Some(0))
    );
    kubelet(&fake, "p0");
    kubelet(&fake, "p1");
    let s = reconcile(&fake);
    assert_eq!((s["readyPods"].as_i64(), s["updatedReadyPods"].as_i64()), (Some(2), Some(2)));
    fake.take_writes();
    reconcile(&fake);
    assert!(fake.take_writes().is_empty(), "no write when the status is unchanged");
}

#[test]
fn rolling_update_respects_max_unavailable_and_partition() {
    let fake = FakeCluster::new();
    setup(&fake, json!({"partition": 1}), 4);
    all_ready(&fake, 4);
    change_image(&fake, "busybox:1.37");
    for round in 0..6 {
        reconcile(&fake);
        let restarting: Vec<String> = fake
            .objects_of(&pod_kind())
            .iter()
            .filter(|p| p["spec"]["containers"][0]["image"] != p["status"]["containerStatuses"][0]["image"])
            .map(|p| p["metadata"]["name"].as_str().unwrap().to_owned())
            .collect();
        assert!(restarting.len() <= 1, "round {round}: more than maxUnavailable=1 restarting: {restarting:?}");
        for p in restarting {
            kubelet(&fake, &p);
        }
    }
    let images = sidecar_images(&fake);
    assert_eq!(images.iter().filter(|i| *i == "busybox:1.37").count(), 3, "partition 1 keeps one old: {images:?}");
    let s = reconcile(&fake);
    assert_eq!((s["matchedPods"].as_i64(), s["updatedPods"].as_i64()), (Some(4), Some(3)));
}

/// A large rollout goes in steps that each end well inside the host's deadline, with one
/// Event per step (not one per Pod, which would flood the call's Event budget).
#[test]
fn a_large_rollout_goes_in_steps_of_bounded_work_with_one_event_each() {
    let fake = FakeCluster::new();
    setup(&fake, json!({"maxUnavailable": "100%"}), 250);
    all_ready(&fake, 250);
    change_image(&fake, "busybox:1.37");
    let new = |fake: &FakeCluster| sidecar_images(fake).iter().filter(|i| *i == "busybox:1.37").count();
    let req = Request { object: ss_key(), current: fake.object(&ss_key()), settings: String::new() };
    let action = SidecarSetController::reconcile(&Context::new(&fake), &req).unwrap();
    // 200 writes a step: a Pod's first in-place update is two (the Pod, its condition).
    assert_eq!(new(&fake), 100, "one step makes at most 200 writes");
    assert_eq!(action.requeue_after, Some(std::time::Duration::from_secs(1)), "and asks for the next");
    let events: Vec<String> =
        fake.events().into_iter().filter(|e| e.reason == "SidecarUpdated").map(|e| e.message).collect();
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(
        events[0].starts_with("updated sidecar images of 100 Pods: demo/") && events[0].ends_with("and 90 more"),
        "{}",
        events[0]
    );
    let step = |fake: &FakeCluster| {
        let req = Request { object: ss_key(), current: fake.object(&ss_key()), settings: String::new() };
        SidecarSetController::reconcile(&Context::new(fake), &req).unwrap().requeue_after
    };
    assert_eq!((step(&fake), new(&fake)), (Some(std::time::Duration::from_secs(1)), 200));
    assert_eq!((step(&fake), new(&fake)), (None, 250), "the rest, and done");
    // The next rollout finds every condition already set: one write per Pod (once the
    // kubelet runs the last update: a Pod mid-update waits, as in Kruise).
    all_ready(&fake, 250);
    change_image(&fake, "busybox:1.38");
    step(&fake);
    let newer = sidecar_images(&fake).iter().filter(|i| *i == "busybox:1.38").count();
    assert_eq!(newer, 200);
}

#[test]
fn not_update_and_paused_leave_pods_alone() {
    for strategy in [json!({"type": "NotUpdate"}), json!({"paused": true})] {
        let fake = FakeCluster::new();
        setup(&fake, strategy, 2);
        kubelet(&fake, "p0");
        kubelet(&fake, "p1");
        change_image(&fake, "busybox:1.37");
        reconcile(&fake);
        assert_eq!(sidecar_images(&fake), ["busybox:1.36", "busybox:1.36"]);
    }
}

/// Kruise's e2e spec "inject pod sidecar with canary sidecarSet": a NotUpdate set's
/// ready counts are taken when the set changes or Pods come or go, not when a Pod
/// becomes ready (Kruise's Pod event handler skips NotUpdate sets on Pod updates).
#[test]
fn a_not_update_set_counts_readiness_when_pods_come_and_go_as_kruise() {
    let fake = FakeCluster::new();
    setup(&fake, json!({"type": "NotUpdate"}), 2);
    let counts = |s: &Value| {
        ["matchedPods", "updatedPods", "readyPods", "updatedReadyPods"].map(|k| s[k].as_i64().unwrap_or(-1))
    };
    assert_eq!(counts(&reconcile(&fake)), [2, 2, 0, 0], "counted as the Pods were created");
    all_ready(&fake, 2);
    assert_eq!(counts(&reconcile(&fake)), [2, 2, 0, 0], "readiness alone does not recount");
    // A Pod more: counted afresh, readiness included.
    let p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p2", "namespace": "demo", "labels": {"app": "web"}},
                   "spec": {"containers": [{"name": "app", "image": "nginx"}]}});
    fake.seed(admit(&fake, INJECT, Some("demo"), p)).unwrap();
    assert_eq!(counts(&reconcile(&fake)), [3, 3, 2, 2]);
    // So does a change of the set.
    kubelet(&fake, "p2");
    change_image(&fake, "busybox:1.37");
    assert_eq!(counts(&reconcile(&fake)), [3, 0, 3, 0]);

    // A set that rolls keeps counting readiness as it changes.
    let fake = FakeCluster::new();
    setup(&fake, json!({}), 2);
    reconcile(&fake);
    all_ready(&fake, 2);
    assert_eq!(counts(&reconcile(&fake)), [2, 2, 2, 2]);
}

fn phase(fake: &FakeCluster, name: &str, phase: &str) {
    fake.edit(&ObjectRef::new(&pod_kind(), Some("demo"), name), |p| p["status"]["phase"] = json!(phase)).unwrap();
}

fn new_images(fake: &FakeCluster) -> usize {
    sidecar_images(fake).iter().filter(|i| *i == "busybox:1.37").count()
}

/// Kruise's counting (`calculateUpgradeCount`): the partition rounds up, maxUnavailable
/// 0 updates no Ready Pod, and only updated Pods that are not available count against
/// maxUnavailable.
#[test]
fn rollout_counts_as_kruise_does() {
    // maxUnavailable 0: Ready Pods stay; a Pod that is not Ready anyway is updated.
    let fake = FakeCluster::new();
    setup(&fake, json!({"maxUnavailable": 0}), 3);
    kubelet(&fake, "p0");
    kubelet(&fake, "p1");
    change_image(&fake, "busybox:1.37");
    reconcile(&fake);
    reconcile(&fake);
    let p2 = fake.object(&ObjectRef::new(&pod_kind(), Some("demo"), "p2")).unwrap();
    assert_eq!(p2["spec"]["containers"][0]["image"], "busybox:1.37", "the Pod that was not Ready is updated");
    assert_eq!(new_images(&fake), 1, "no Ready Pod is updated with maxUnavailable 0");

    // Partitions as Kruise >= 1.8's CalculatePartitionReplicas: a percentage rounds up
    // (50 % of 3 keeps 2 old), one below "100%" that reaches every Pod keeps all but
    // one, "100%" and anything above keep all, a percentage too large for any integer
    // too (where Kruise's conversion overflows).
    for (partition, kept) in [
        (json!("50%"), 2),
        (json!("10%"), 1),
        (json!("0%"), 0),
        (json!("99%"), 2),
        (json!("100%"), 3),
        (json!("150%"), 3),
        (json!("99999999999999999999999%"), 3),
        (json!(1), 1),
        (json!(7), 3),
    ] {
        let fake = FakeCluster::new();
        setup(&fake, json!({"partition": partition, "maxUnavailable": "100%"}), 3);
        all_ready(&fake, 3);
        change_image(&fake, "busybox:1.37");
        reconcile(&fake);
        reconcile(&fake);
        assert_eq!(3 - new_images(&fake), kept, "partition {partition} of 3 Pods");
    }

    // The partition counts among the Pods waiting for the new version, not all: a Pod
    // whose sidecars changed otherwise (it cannot be updated in place) is not one.
    let fake = FakeCluster::new();
    setup(&fake, json!({"partition": 2, "maxUnavailable": "100%"}), 4);
    all_ready(&fake, 4);
    fake.edit(&ObjectRef::new(&pod_kind(), Some("demo"), "p0"), |p| {
        p["metadata"]["annotations"]["kruise.io/sidecarset-hash-without-image"] =
            json!({"s": {"hash": "other"}}).to_string().into();
    })
    .unwrap();
    change_image(&fake, "busybox:1.37");
    reconcile(&fake);
    assert_eq!(new_images(&fake), 1, "3 waiting, 2 kept: {:?}", sidecar_images(&fake));

    // A Pod that is unavailable and not yet updated does not use up maxUnavailable.
    let fake = FakeCluster::new();
    setup(&fake, json!({}), 3);
    kubelet(&fake, "p0");
    kubelet(&fake, "p1");
    change_image(&fake, "busybox:1.37");
    reconcile(&fake);
    // p2 (not Ready) and one Ready Pod: maxUnavailable 1 counts only the Ready one.
    assert_eq!(new_images(&fake), 2, "{:?}", sidecar_images(&fake));
}

#[test]
fn finished_pods_are_neither_counted_nor_updated() {
    let fake = FakeCluster::new();
    setup(&fake, json!({"maxUnavailable": "100%"}), 3);
    all_ready(&fake, 3);
    phase(&fake, "p1", "Succeeded");
    phase(&fake, "p2", "Failed");
    let s = reconcile(&fake);
    assert_eq!(s["matchedPods"].as_i64(), Some(1), "{s}");
    change_image(&fake, "busybox:1.37");
    reconcile(&fake);
    let p0 = fake.object(&ObjectRef::new(&pod_kind(), Some("demo"), "p0")).unwrap();
    assert_eq!(p0["spec"]["containers"][0]["image"], "busybox:1.37");
    assert_eq!(new_images(&fake), 1, "the finished Pods keep their spec");
}

#[test]
fn pods_missing_a_container_of_the_set_are_not_counted() {
    // As Kruise's IsPodConsistentWithSidecarSet: once the set gains a container its
    // Pods were injected without, they are neither matched nor rolled (an in-place
    // update cannot add a container); new Pods get both and count again.
    let fake = FakeCluster::new();
    setup(&fake, json!({"maxUnavailable": "100%"}), 2);
    all_ready(&fake, 2);
    assert_eq!(reconcile(&fake)["matchedPods"].as_i64(), Some(2));
    let mut ss = fake.object(&ss_key()).unwrap();
    ss["spec"]["containers"].as_array_mut().unwrap().push(json!({"name": "audit", "image": "busybox:1.36"}));
    let ss = admit(&fake, DEFAULT, None, ss);
    fake.edit(&ss_key(), |o| *o = ss).unwrap();
    let s = reconcile(&fake);
    assert_eq!(s["matchedPods"].as_i64(), Some(0), "{s}");
    let p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p9", "namespace": "demo", "labels": {"app": "web"}},
                   "spec": {"containers": [{"name": "app", "image": "nginx"}]}});
    fake.seed(admit(&fake, INJECT, Some("demo"), p)).unwrap();
    let s = reconcile(&fake);
    assert_eq!((s["matchedPods"].as_i64(), s["updatedPods"].as_i64()), (Some(1), Some(1)), "{s}");
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

#[test]
fn the_upgradable_condition_and_patched_metadata_follow_kruise() {
    let fake = FakeCluster::new();
    setup(&fake, json!({"maxUnavailable": "100%"}), 2);
    all_ready(&fake, 2);
    // An Overwrite patch changed with the image: the in-place update writes it again.
    let mut ss = fake.object(&ss_key()).unwrap();
    ss["spec"]["containers"][0]["image"] = json!("busybox:1.37");
    ss["spec"]["patchPodMetadata"] = json!([{"annotations": {"sidecar/version": "1.37"}, "patchPolicy": "Overwrite"}]);
    let ss = admit(&fake, DEFAULT, None, ss);
    fake.edit(&ss_key(), |o| *o = ss).unwrap();
    assert!(condition(&fake, "p0").is_null(), "injection sets no condition");
    reconcile(&fake);
    let p0 = fake.object(&ObjectRef::new(&pod_kind(), Some("demo"), "p0")).unwrap();
    assert_eq!(p0["metadata"]["annotations"]["sidecar/version"], "1.37");
    let c = condition(&fake, "p0");
    assert_eq!(
        (&c["status"], &c["reason"], &c["message"]),
        (&json!("True"), &json!("AllSidecarsetUpgradable"), &json!(r#"{"s":true}"#))
    );

    // A change beyond the image cannot be rolled in place: the Pods say so, once.
    let mut ss = fake.object(&ss_key()).unwrap();
    ss["spec"]["containers"][0]["env"] = json!([{"name": "MODE", "value": "new"}]);
    let ss = admit(&fake, DEFAULT, None, ss);
    fake.edit(&ss_key(), |o| *o = ss).unwrap();
    reconcile(&fake);
    let c = condition(&fake, "p1");
    assert_eq!(
        (&c["status"], &c["reason"], &c["message"]),
        (&json!("False"), &json!("UpdateImmutableField"), &json!(r#"{"s":false}"#))
    );
    let stuck = |fake: &FakeCluster| fake.events().into_iter().filter(|e| e.reason == "NotUpgradablePods").count();
    assert_eq!(stuck(&fake), 1);
    reconcile(&fake);
    assert_eq!(stuck(&fake), 1, "marked already: no new write, no new Event");
    let p1 = fake.object(&ObjectRef::new(&pod_kind(), Some("demo"), "p1")).unwrap();
    assert!(!p1["spec"]["containers"][0]["env"].to_string().contains("MODE"), "nothing rolled");
}

/// The image each Pod's sidecar has, by Pod name.
fn image_of(fake: &FakeCluster, name: &str) -> String {
    let p = fake.object(&ObjectRef::new(&pod_kind(), Some("demo"), name)).unwrap();
    p["spec"]["containers"][0]["image"].as_str().unwrap().to_owned()
}

#[test]
fn priority_and_scatter_choose_which_pods_go_first() {
    // Weights: the Pod labelled tier=canary is updated first, though it sorts last by
    // name; with partition 1 the Pod left old is the last in priority order.
    let fake = FakeCluster::new();
    let strategy = json!({"maxUnavailable": 1, "partition": 1, "priorityStrategy": {"weightPriority": [
        {"weight": 50, "matchSelector": {"matchLabels": {"tier": "canary"}}},
        {"weight": 10, "matchSelector": {"matchLabels": {"tier": "web"}}}]}});
    setup(&fake, strategy, 3);
    for (name, tier) in [("p0", "other"), ("p1", "web"), ("p2", "canary")] {
        fake.edit(&ObjectRef::new(&pod_kind(), Some("demo"), name), |p| p["metadata"]["labels"]["tier"] = json!(tier))
            .unwrap();
    }
    all_ready(&fake, 3);
    change_image(&fake, "busybox:1.37");
    reconcile(&fake);
    assert_eq!(image_of(&fake, "p2"), "busybox:1.37", "the heaviest Pod first");
    assert_eq!(image_of(&fake, "p1"), "busybox:1.36");
    kubelet(&fake, "p2");
    reconcile(&fake);
    all_ready(&fake, 3);
    reconcile(&fake);
    assert_eq!(image_of(&fake, "p1"), "busybox:1.37");
    assert_eq!(image_of(&fake, "p0"), "busybox:1.36", "the partition keeps the lightest Pod old");

    // Scatter: zone=a on p0, p1 and p2 of six Pods; a batch of three takes one of them
    // and two others (Kruise's order p0, p3, p4, p1, p5, p2), where name order would
    // have updated the whole zone at once.
    let fake = FakeCluster::new();
    setup(&fake, json!({"maxUnavailable": 3, "scatterStrategy": [{"key": "zone", "value": "a"}]}), 6);
    for name in ["p0", "p1", "p2"] {
        fake.edit(&ObjectRef::new(&pod_kind(), Some("demo"), name), |p| p["metadata"]["labels"]["zone"] = json!("a"))
            .unwrap();
    }
    all_ready(&fake, 6);
    change_image(&fake, "busybox:1.37");
    reconcile(&fake);
    let updated: Vec<&str> =
        ["p0", "p1", "p2", "p3", "p4", "p5"].into_iter().filter(|n| image_of(&fake, n) == "busybox:1.37").collect();
    assert_eq!(updated, ["p0", "p3", "p4"]);
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

#[test]
fn a_rollout_does_not_stall_when_the_runtime_names_images_its_own_way() {
    let fake = FakeCluster::new();
    setup(&fake, json!({"maxUnavailable": 1}), 2);
    for p in ["p0", "p1"] {
        runtime_kubelet(&fake, p, "old");
    }
    change_image(&fake, "busybox:1.37");
    reconcile(&fake);
    assert_eq!(new_images(&fake), 1);
    let p0 = fake.object(&ObjectRef::new(&pod_kind(), Some("demo"), "p0")).unwrap();
    let state: Value = serde_json::from_str(
        p0["metadata"]["annotations"]["kruise.io/sidecarset-inplace-update-state"].as_str().unwrap(),
    )
    .unwrap();
    assert_eq!(state["s"]["lastContainerStatuses"]["log"]["imageID"], "containerd://sha256:old-log", "Kruise's record");
    reconcile(&fake);
    assert_eq!(new_images(&fake), 1, "p0 still runs the old image: maxUnavailable holds p1");
    runtime_kubelet(&fake, "p0", "new");
    reconcile(&fake);
    assert_eq!(
        new_images(&fake),
        2,
        "p0 restarted (new imageID) though its status names docker.io/library/busybox:1.37"
    );
}

/// Issue 19: Pods injected by Kruise (its hash format and annotation layout), or by
/// this plugin before it wrote Kruise's hashes, are recognised and rolled in place.
#[test]
fn pods_injected_by_kruise_or_an_older_plugin_are_rolled() {
    let fake = FakeCluster::new();
    setup(&fake, json!({"maxUnavailable": 3}), 0);
    // The same YAML, defaulted here, hashes as Kruise hashed it (the vectors' case 0,
    // made by Kruise's code from a Kruise-defaulted spec).
    let vectors: Vec<Value> = serde_json::from_str(include_str!("data/kruise-hashes.json")).unwrap();
    let ss = fake.object(&ss_key()).unwrap();
    assert_eq!(ss["metadata"]["annotations"]["kruise.io/sidecarset-hash"], vectors[0]["hash"]);
    assert_eq!(
        ss["metadata"]["annotations"]["kruise.io/sidecarset-hash-without-image"],
        vectors[0]["hashWithoutImage"]
    );

    let spec: sidecarset::SidecarSetSpec = serde_json::from_value(ss["spec"].clone()).unwrap();
    let (legacy, legacy_wo) = sidecarset::defaults::legacy_hashes(&spec);
    let entry = |h: &Value| {
        json!({"s": {"updateTimestamp": "2026-01-01T00:00:00Z", "hash": h, "sidecarSetName": "s",
                                         "sidecarList": ["log"], "controllerRevision": "s-5d4b8c"}})
        .to_string()
    };
    for (name, h, w) in [
        ("kruise", vectors[0]["hash"].clone(), vectors[0]["hashWithoutImage"].clone()),
        ("legacy", json!(legacy), json!(legacy_wo)),
    ] {
        let p = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "demo", "labels": {"app": "web"},
                         "annotations": {"kruise.io/sidecarset-hash": entry(&h), "kruise.io/sidecarset-hash-without-image": entry(&w),
                                         "kruise.io/sidecarset-injected-list": "s"}},
            "spec": {"containers": [{"name": "log", "image": "busybox:1.36"}, {"name": "app", "image": "nginx"}]}});
        fake.seed(p).unwrap();
        kubelet(&fake, name);
    }
    let status = reconcile(&fake);
    assert_eq!(
        (status["matchedPods"].as_i64(), status["updatedPods"].as_i64()),
        (Some(2), Some(2)),
        "both at the current version"
    );
    change_image(&fake, "busybox:1.37");
    reconcile(&fake);
    for name in ["kruise", "legacy"] {
        assert_eq!(image_of(&fake, name), "busybox:1.37", "{name}: updatable in place (same hash without image)");
    }
}

/// Review finding: a Pod the older plugin injected carries hashes of the spec as that
/// plugin defaulted it — without the probe and fieldRef defaults added since. After
/// the set is defaulted again (any update goes through the webhook), the Pod must
/// still be updatable in place.
#[test]
fn pods_injected_before_the_new_defaults_stay_updatable() {
    let fake = FakeCluster::new();
    let container = json!({"name": "log", "image": "busybox:1.36",
        "env": [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        "readinessProbe": {"httpGet": {"port": 8080}}});
    let ss = json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": "s"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "containers": [container.clone()]}});
    fake.seed(admit(&fake, DEFAULT, None, ss)).unwrap();
    // The spec as the older plugin stored it: its own defaults only.
    let mut old = container;
    old["imagePullPolicy"] = json!("IfNotPresent");
    old["terminationMessagePath"] = json!("/dev/termination-log");
    old["terminationMessagePolicy"] = json!("File");
    old["podInjectPolicy"] = json!("BeforeAppContainer");
    old["shareVolumePolicy"] = json!({"type": "disabled"});
    let old_spec: sidecarset::SidecarSetSpec = serde_json::from_value(json!({"containers": [old]})).unwrap();
    let (h, w) = sidecarset::defaults::legacy_hashes(&old_spec);
    let entry = |h: &str| json!({"s": {"hash": h, "sidecarSetName": "s", "sidecarList": ["log"]}}).to_string();
    let p = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "older", "namespace": "demo", "labels": {"app": "web"},
                     "annotations": {"kruise.io/sidecarset-hash": entry(&h), "kruise.io/sidecarset-hash-without-image": entry(&w),
                                     "kruise.io/sidecarset-injected-list": "s"}},
        "spec": {"containers": [{"name": "log", "image": "busybox:1.36"}, {"name": "app", "image": "nginx"}]}});
    fake.seed(p).unwrap();
    kubelet(&fake, "older");
    assert_eq!(reconcile(&fake)["updatedPods"], 1, "current before the image change");
    change_image(&fake, "busybox:1.37");
    reconcile(&fake);
    assert_eq!(image_of(&fake, "older"), "busybox:1.37");
}

#[test]
fn a_set_deleted_since_the_host_read_it_ends_the_reconcile_quietly() {
    use wasmop_sdk::Cluster;
    let fake = FakeCluster::new();
    setup(&fake, json!({}), 1);
    let stale = fake.object(&ss_key());
    fake.delete(&ss_key()).unwrap();
    // The host's copy still has it; its status write finds it gone.
    let req = Request { object: ss_key(), current: stale, settings: String::new() };
    let done = SidecarSetController::reconcile(&Context::new(&fake), &req);
    assert_eq!(done, Ok(wasmop_sdk::Action::done()));
}
