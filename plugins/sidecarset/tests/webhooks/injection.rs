//! `inject-pod`: what a Pod gets from the SidecarSets that select it, as Kruise injects.

use super::*;

#[test]
fn injects_before_and_after_the_app_with_everything_it_needs() {
    let fake = FakeCluster::new();
    store(&fake, sidecarset("s", two_sidecars()));
    let original = pod(json!({"app": "web"}));
    let r = review(&fake, INJECT, Operation::Create, Some("default"), original.clone(), None);
    assert!(r.allowed && r.patch.is_some(), "mutated");
    let p = r.apply(&original).unwrap();
    assert_eq!(names(&p["spec"]["containers"]), ["before", "app", "after"]);
    let before = &p["spec"]["containers"][0];
    assert!(before["env"].as_array().unwrap().contains(&json!({"name": "IS_INJECTED", "value": "true"})));
    assert!(before["env"].as_array().unwrap().contains(&json!({"name": "TZ", "value": "UTC"})), "transferEnv");
    let after = &p["spec"]["containers"][2];
    assert_eq!(after["volumeMounts"][0]["name"], "data", "shareVolumePolicy enabled mounts the app's volumes");
    assert_eq!(names(&p["spec"]["volumes"]), ["data", "logs"], "only referenced volumes; the Pod's own `data` wins");
    assert_eq!(p["spec"]["volumes"][0]["hostPath"]["path"], "/d");
    assert_eq!(p["spec"]["imagePullSecrets"].as_array().unwrap().len(), 1, "no duplicate pull secret");
    // A Pod that lists a secret twice gets it once, as from Kruise.
    let mut twice = original.clone();
    twice["spec"]["imagePullSecrets"] = json!([{"name": "own"}, {"name": "own"}, {"name": "regcred"}]);
    let r = review(&fake, INJECT, Operation::Create, Some("default"), twice.clone(), None);
    assert_eq!(r.apply(&twice).unwrap()["spec"]["imagePullSecrets"], json!([{"name": "own"}, {"name": "regcred"}]));
    let a = &p["metadata"]["annotations"];
    assert_eq!(a["team"], "infra");
    assert_eq!(a["kruise.io/sidecarset-injected-list"], "s");
    let h: Value = serde_json::from_str(a["kruise.io/sidecarset-hash"].as_str().unwrap()).unwrap();
    assert_eq!(h["s"]["sidecarList"], json!(["after", "before"]), "sorted, as Kruise's");

    let r = review(&fake, INJECT, Operation::Create, Some("default"), pod(json!({"app": "db"})), None);
    assert!(r.allowed && r.patch.is_none() && r.object.is_none(), "a Pod the selector does not match is untouched");
}

#[test]
fn the_patch_replaces_only_the_fields_injection_changed() {
    let fake = FakeCluster::new();
    store(&fake, sidecarset("s", two_sidecars()));
    // The set adds a volume (`logs`), and its pull secret is one the Pod has already.
    let original = pod(json!({"app": "web"}));
    let r = review(&fake, INJECT, Operation::Create, Some("default"), original.clone(), None);
    assert_eq!(patched(&r), ["/metadata/annotations", "/spec/containers", "/spec/volumes"]);
    // No new volume: the Pod's own volumes are not sent back.
    let mut has_logs = original.clone();
    has_logs["spec"]["volumes"].as_array_mut().unwrap().push(json!({"name": "logs", "emptyDir": {}}));
    let r = review(&fake, INJECT, Operation::Create, Some("default"), has_logs.clone(), None);
    assert_eq!(patched(&r), ["/metadata/annotations", "/spec/containers"]);
    assert_eq!(r.apply(&has_logs).unwrap()["spec"]["volumes"], has_logs["spec"]["volumes"]);
    // A duplicate pull secret dropped is a change, even when nothing is added.
    let mut twice = has_logs.clone();
    twice["spec"]["imagePullSecrets"] = json!([{"name": "regcred"}, {"name": "regcred"}]);
    let r = review(&fake, INJECT, Operation::Create, Some("default"), twice, None);
    assert_eq!(patched(&r), ["/metadata/annotations", "/spec/containers", "/spec/imagePullSecrets"]);
}

#[test]
fn sidecars_of_several_sets_are_merged_as_kruise_does() {
    // Kruise merges every matching set's sidecars in one pass: the sets' before-app
    // containers (set order) ahead of the app's, and the init containers sorted by
    // name across sets after the Pod's own. Placing set by set gave `b1, a1, app`.
    let fake = FakeCluster::new();
    let set = |c: &str, i: &str| {
        json!({"selector": {"matchLabels": {"app": "web"}},
               "containers": [{"name": c, "image": "busybox:1.36"}],
               "initContainers": [{"name": i, "image": "busybox:1.36"}]})
    };
    let mut a = set("a1", "z-init");
    // A volume the sidecar uses only as a block device goes in too (without it the
    // apiserver refuses the Pod: volumeDevices[0].name: Not found).
    a["containers"][0]["volumeDevices"] = json!([{"name": "blk", "devicePath": "/dev/blk"}]);
    a["volumes"] = json!([{"name": "blk", "persistentVolumeClaim": {"claimName": "c"}}]);
    store(&fake, sidecarset("a", a));
    let mut b = set("b1", "m-init");
    b["initContainers"][0]["restartPolicy"] = json!("Always");
    b["updateStrategy"] = json!({"type": "NotUpdate"});
    store(&fake, sidecarset("b", b));
    let mut original = pod(json!({"app": "web"}));
    original["spec"]["initContainers"] = json!([{"name": "own-init", "image": "busybox:1.36"}]);
    original["metadata"]["annotations"] = json!({"kruise.io/sidecarset-injected-list": "zz"});
    let r = review(&fake, INJECT, Operation::Create, Some("default"), original.clone(), None);
    let p = r.apply(&original).unwrap();
    assert_eq!(names(&p["spec"]["containers"]), ["a1", "b1", "app"]);
    assert_eq!(names(&p["spec"]["initContainers"]), ["own-init", "m-init", "z-init"]);
    assert_eq!(names(&p["spec"]["volumes"]), ["data", "blk"]);
    let a = &p["metadata"]["annotations"];
    assert_eq!(a["kruise.io/sidecarset-injected-list"], "a,b,zz", "sorted, as Kruise writes it");
    // sidecarList names the containers and native-sidecar init containers only.
    let h: Value = serde_json::from_str(a["kruise.io/sidecarset-hash"].as_str().unwrap()).unwrap();
    assert_eq!((&h["a"]["sidecarList"], &h["b"]["sidecarList"]), (&json!(["a1"]), &json!(["b1", "m-init"])));
}

#[test]
fn namespace_scope_and_pause_are_respected() {
    let fake = FakeCluster::new();
    let mut spec = two_sidecars();
    spec["namespace"] = json!("prod");
    store(&fake, sidecarset("scoped", spec));
    let r = review(&fake, INJECT, Operation::Create, Some("dev"), pod(json!({"app": "web"})), None);
    assert!(r.patch.is_none(), "out of the SidecarSet's namespace");
    let r = review(&fake, INJECT, Operation::Create, Some("prod"), pod(json!({"app": "web"})), None);
    assert!(r.patch.is_some());

    // `namespace: ""` is no limit, as in Kruise (it used to select no namespace).
    let fake = FakeCluster::new();
    let mut spec = two_sidecars();
    spec["namespace"] = json!("");
    store(&fake, sidecarset("everywhere", spec));
    let r = review(&fake, INJECT, Operation::Create, Some("dev"), pod(json!({"app": "web"})), None);
    assert!(r.patch.is_some(), "namespace \"\" selects every namespace");

    let fake = FakeCluster::new();
    let mut spec = two_sidecars();
    spec["injectionStrategy"] = json!({"paused": true});
    store(&fake, sidecarset("paused", spec));
    let r = review(&fake, INJECT, Operation::Create, Some("prod"), pod(json!({"app": "web"})), None);
    assert!(r.patch.is_none(), "paused injection");
}

#[test]
fn a_pod_container_named_like_a_sidecar_is_replaced_where_it_stands() {
    // Kruise keeps the order of the Pod's own containers: the sidecar takes the place of
    // the same-named one, and only the other sidecars go before or after the app.
    let fake = FakeCluster::new();
    store(&fake, sidecarset("s", two_sidecars()));
    let mut original = pod(json!({"app": "web"}));
    original["spec"]["containers"] = json!([
        {"name": "app", "image": "nginx"},
        {"name": "before", "image": "old-proxy:0.1"},
        {"name": "tail", "image": "busybox"}
    ]);
    let r = review(&fake, INJECT, Operation::Create, Some("default"), original.clone(), None);
    let p = r.apply(&original).unwrap();
    assert_eq!(names(&p["spec"]["containers"]), ["app", "before", "tail", "after"]);
    assert_eq!(p["spec"]["containers"][1]["image"], "busybox:1.36", "the sidecar replaced the Pod's own container");
}

#[test]
fn transfer_env_reads_the_source_container_from_a_pod_label_or_annotation() {
    // Kruise's sourceContainerNameFrom.fieldRef: the Pod names its main container.
    let fake = FakeCluster::new();
    let from = |path: &str| json!({"fieldRef": {"apiVersion": "v1", "fieldPath": path}});
    let spec = json!({
        "selector": {"matchLabels": {"app": "web"}},
        "containers": [
            {"name": "by-label", "image": "busybox:1.36",
             "transferEnv": [{"sourceContainerName": "ignored", "sourceContainerNameFrom": from("metadata.labels['main']"),
                              "envNames": ["TZ", "LANG"]}]},
            {"name": "by-annotation", "image": "busybox:1.36",
             "transferEnv": [{"sourceContainerNameFrom": from("metadata.annotations['example.com/main']"), "envName": "TZ"}]},
            {"name": "by-missing-key", "image": "busybox:1.36",
             "transferEnv": [{"sourceContainerNameFrom": from("metadata.labels['absent']"), "envName": "TZ"}]}
        ]
    });
    store(&fake, sidecarset("s", spec));
    let mut original = pod(json!({"app": "web", "main": "app"}));
    original["metadata"]["annotations"] = json!({"example.com/main": "app"});
    original["spec"]["containers"][0]["env"] = json!([{"name": "TZ", "value": "UTC"}, {"name": "LANG", "value": "C"}]);
    original["spec"]["containers"]
        .as_array_mut()
        .unwrap()
        .insert(0, json!({"name": "ignored", "image": "nginx", "env": [{"name": "TZ", "value": "wrong"}]}));
    let r = review(&fake, INJECT, Operation::Create, Some("default"), original.clone(), None);
    let p = r.apply(&original).unwrap();
    let env = |name: &str| {
        let c = p["spec"]["containers"].as_array().unwrap().iter().find(|c| c["name"] == name).unwrap();
        c["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| format!("{}={}", e["name"].as_str().unwrap(), e["value"].as_str().unwrap()))
            .collect::<Vec<_>>()
    };
    // Per entry in name order, after IS_INJECTED, as Kruise appends them.
    assert_eq!(env("by-label"), ["IS_INJECTED=true", "LANG=C", "TZ=UTC"]);
    assert_eq!(env("by-annotation"), ["IS_INJECTED=true", "TZ=UTC"]);
    assert_eq!(env("by-missing-key"), ["IS_INJECTED=true"], "a Pod without the key copies nothing");

    let fake = FakeCluster::new();
    let bad = |path: &str, version: Value| {
        let mut s = two_sidecars();
        s["containers"][0]["transferEnv"] = json!([{"sourceContainerNameFrom": {"fieldRef": {"apiVersion": version, "fieldPath": path}}, "envName": "TZ"}]);
        sidecarset("s", s)
    };
    // A missing apiVersion is defaulted to v1 before validation, as by Kruise's
    // defaulting (its validator's own "required" is unreachable through the webhooks).
    let defaulted = review(&fake, DEFAULT, Operation::Create, None, bad("metadata.labels['a']", json!(null)), None);
    let obj = defaulted.object.unwrap();
    assert_eq!(
        obj["spec"]["containers"][0]["transferEnv"][0]["sourceContainerNameFrom"]["fieldRef"]["apiVersion"],
        "v1"
    );
    let f = "spec.containers[0].transferEnv[0].sourceContainerNameFrom.fieldRef";
    for (obj, want) in [
        (bad("metadata.labels['a']", json!("v2")), format!("{f}.apiVersion: unsupported pod version")),
        (bad("spec.nodeName", json!("v1")), format!("{f}.fieldPath: unsupported value")),
        (bad("metadata.name['x']", json!("v1")), format!("{f}.fieldPath: metadata.name does not support a subscript")),
        (bad("metadata.labels['bad key']", json!("v1")), format!("{f}.fieldPath: invalid label key")),
    ] {
        let msg = denial(&fake, obj, None);
        assert!(msg.contains(&want), "{want:?} not in {msg:?}");
    }
    let r = review(
        &fake,
        VALIDATE,
        Operation::Create,
        None,
        bad("metadata.annotations['Example.com/Main']", json!("v1")),
        None,
    );
    assert!(r.allowed, "an annotation key is checked lower-cased, as in Kruise: {:?}", r.status);
}

#[test]
fn shared_volumes_bring_their_subpath_env_and_devices_as_kruise() {
    let fake = FakeCluster::new();
    let spec = json!({
        "selector": {"matchLabels": {"app": "web"}},
        "containers": [{"name": "log", "image": "busybox:1.36",
                        "volumeMounts": [{"name": "own", "mountPath": "/own"}],
                        "shareVolumePolicy": {"type": "enabled"},
                        "shareVolumeDevicePolicy": {"type": "enabled"}}],
        "volumes": [{"name": "own", "emptyDir": {}}]
    });
    store(&fake, sidecarset("s", spec));
    let mut original = pod(json!({"app": "web"}));
    original["spec"]["containers"][0]["env"] =
        json!([{"name": "POD_NAME", "value": "p"}, {"name": "TZ", "value": "UTC"}]);
    original["spec"]["containers"][0]["volumeMounts"] = json!([
        {"name": "data", "mountPath": "/data", "subPathExpr": "logs/$(POD_NAME)"},
        {"name": "data", "mountPath": "/data-again"},
        {"name": "data", "mountPath": "/own"}
    ]);
    original["spec"]["containers"][0]["volumeDevices"] = json!([{"name": "blk", "devicePath": "/dev/blk"}]);
    // A container that is itself an injected sidecar shares nothing.
    original["spec"]["containers"].as_array_mut().unwrap().push(json!({
        "name": "other-sidecar", "image": "x", "env": [{"name": "IS_INJECTED", "value": "true"}],
        "volumeMounts": [{"name": "data", "mountPath": "/theirs"}]}));
    let r = review(&fake, INJECT, Operation::Create, Some("default"), original.clone(), None);
    let p = r.apply(&original).unwrap();
    let log = &p["spec"]["containers"][0];
    let paths: Vec<&str> =
        log["volumeMounts"].as_array().unwrap().iter().map(|m| m["mountPath"].as_str().unwrap()).collect();
    // By path only: the same volume at another path is shared, the sidecar's /own wins.
    assert_eq!(paths, ["/own", "/data", "/data-again"]);
    assert_eq!(
        log["env"],
        json!([{"name": "IS_INJECTED", "value": "true"}, {"name": "POD_NAME", "value": "p"}]),
        "the subPathExpr's env only"
    );
    assert_eq!(log["volumeDevices"], json!([{"name": "blk", "devicePath": "/dev/blk"}]));
}

/// Kruise's e2e "filter Kruise sidecars": a sidecar sized from the Pod's own
/// containers (resourcesPolicy), not from another set's sidecars nor plain init
/// containers; a Pod without a target container is refused with the reason.
#[test]
fn resources_policy_sizes_a_sidecar_from_the_app_containers_only() {
    let fake = FakeCluster::new();
    let res = |l: (&str, &str), r: (&str, &str)| json!({"limits": {"cpu": l.0, "memory": l.1}, "requests": {"cpu": r.0, "memory": r.1}});
    store(
        &fake,
        sidecarset(
            "other",
            json!({"selector": {"matchLabels": {"app": "web"}}, "updateStrategy": {"type": "NotUpdate"},
                   "initContainers": [{"name": "kruise-init-sidecar", "image": "busybox:1.36", "restartPolicy": "Always",
                                       "resources": res(("300m", "300Mi"), ("150m", "150Mi"))}],
                   "containers": [{"name": "kruise-sidecar", "image": "busybox:1.36",
                                   "resources": res(("400m", "400Mi"), ("200m", "200Mi"))}]}),
        ),
    );
    let policy = json!({"targetContainersMode": "sum",
        "resourcesExpr": {"limits": {"cpu": "cpu*50%", "memory": "memory*50%"},
                          "requests": {"cpu": "cpu*40%", "memory": "memory*40%"}}});
    let stored = store(
        &fake,
        sidecarset(
            "sized",
            json!({"selector": {"matchLabels": {"app": "web"}},
                   "containers": [{"name": "policy-sidecar", "image": "busybox:1.36", "resourcesPolicy": policy}]}),
        ),
    );
    assert_eq!(stored["spec"]["containers"][0]["resourcesPolicy"]["targetContainersNameRegex"], ".*", "defaulted");
    let original = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"app": "web"}},
        "spec": {"initContainers": [{"name": "plain-init", "image": "busybox", "resources": res(("100m", "100Mi"), ("50m", "50Mi"))}],
                 "containers": [{"name": "app1", "image": "nginx", "resources": res(("200m", "200Mi"), ("100m", "100Mi"))}]}});
    let r = review(&fake, INJECT, Operation::Create, Some("default"), original.clone(), None);
    let p = r.apply(&original).unwrap();
    let sidecar = p["spec"]["containers"].as_array().unwrap().iter().find(|c| c["name"] == "policy-sidecar").unwrap();
    assert_eq!(sidecar["resources"], res(("100m", "100Mi"), ("40m", "40Mi")));

    let mut narrow =
        fake.object(&wasmop_sdk::ObjectRef::new(&wasmop_sdk::KindRef::of::<SidecarSet>(), None, "sized")).unwrap();
    narrow["spec"]["containers"][0]["resourcesPolicy"]["targetContainersNameRegex"] = json!("^db$");
    fake.edit(&wasmop_sdk::ObjectRef::new(&wasmop_sdk::KindRef::of::<SidecarSet>(), None, "sized"), |o| *o = narrow)
        .unwrap();
    let r = review(&fake, INJECT, Operation::Create, Some("default"), original, None);
    let msg = r.status.map(|s| s.message).unwrap_or_default();
    assert!(!r.allowed, "refused");
    assert!(
        msg.contains("SidecarSet sized: container policy-sidecar: resourcesPolicy: no containers match the regex pattern \"^db$\""),
        "{msg}"
    );
}

/// Kruise denies patchPodMetadata until the cluster admin whitelists the keys; the
/// list is the plugin's setting, in Kruise's JSON, with rules per SidecarSet label.
#[test]
fn patch_pod_metadata_needs_the_admins_whitelist() {
    let fake = FakeCluster::new();
    let set = |labels: Value, key: &str| {
        let mut s = sidecarset("s", two_sidecars());
        s["metadata"]["labels"] = labels;
        s["spec"]["patchPodMetadata"] = json!([{"annotations": {key: "x"}}]);
        review(&fake, DEFAULT, Operation::Create, None, s, None).object.unwrap()
    };
    let check = |settings: &str, obj: Value| {
        let req =
            AdmissionRequest { uid: "u".into(), operation: Operation::Create, object: Some(obj), ..Default::default() };
        let r = SidecarSetWebhooks::review(&Context::new(&fake), VALIDATE, settings, &req);
        if r.allowed { Ok(()) } else { Err(r.status.unwrap().message) }
    };
    let e = check("", set(json!({}), "team")).unwrap_err();
    assert!(
        e.contains("spec.patchPodMetadata: no annotation may be patched") && e.contains("patchPodMetadataWhiteList"),
        "{e}"
    );
    assert_eq!(check("patchPodMetadataDefaultsAllowed: true", set(json!({}), "team")), Ok(()), "Kruise's feature gate");
    let rules = r#"patchPodMetadataWhiteList: '{"rules": [{"selector": {"matchLabels": {"owner": "infra"}}, "allowedAnnotationKeyExprs": ["^oom-score$", "^infra\\."]}]}'"#;
    assert_eq!(check(rules, set(json!({"owner": "infra"}), "oom-score")), Ok(()));
    assert_eq!(check(rules, set(json!({"owner": "infra"}), "infra.io/level")), Ok(()));
    let e = check(rules, set(json!({"owner": "infra"}), "apparmor")).unwrap_err();
    assert!(e.contains("annotation \"apparmor\" is not allowed by patchPodMetadataWhiteList"), "{e}");
    let e = check(rules, set(json!({"owner": "web"}), "oom-score")).unwrap_err();
    assert!(e.contains("no rule of patchPodMetadataWhiteList selects it"), "{e}");
    let e = check("patchPodMetadataWhiteList: {rules", set(json!({}), "team")).unwrap_err();
    assert!(e.contains("is not Kruise's whitelist JSON"), "{e}");
}
