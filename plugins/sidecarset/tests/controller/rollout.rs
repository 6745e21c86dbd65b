//! The in-place rolling update: its steps, its counts and order as Kruise's, and Pods
//! injected by Kruise or an older plugin.

use super::*;

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
    let vectors: Vec<Value> = serde_json::from_str(include_str!("../data/kruise-hashes.json")).unwrap();
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
