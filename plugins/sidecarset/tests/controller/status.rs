//! Status counts, the `SidecarSetUpgradable` condition, and what a NotUpdate or
//! paused set leaves alone.

use super::*;

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
