//! The admission handlers against the SDK's fake cluster.

use serde_json::{Value, json};
use sidecarset::webhooks::{DEFAULT, INJECT, VALIDATE};
use sidecarset::{SidecarSet, SidecarSetWebhooks};
use wasmop_sdk::fake::FakeCluster;
use wasmop_sdk::{AdmissionRequest, AdmissionResponse, Context, Operation, Webhooks};

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

#[test]
fn defaults_fill_kruise_defaults_and_hashes() {
    let fake = FakeCluster::new();
    let o = store(&fake, sidecarset("s", two_sidecars()));
    assert_eq!(o["spec"]["updateStrategy"]["type"], "RollingUpdate");
    assert_eq!(o["spec"]["updateStrategy"]["maxUnavailable"], 1);
    assert_eq!(o["spec"]["updateStrategy"]["partition"], 0);
    assert_eq!(o["spec"]["containers"][0]["podInjectPolicy"], "BeforeAppContainer");
    assert_eq!(o["spec"]["containers"][0]["shareVolumePolicy"]["type"], "disabled");
    assert_eq!(o["spec"]["containers"][0]["imagePullPolicy"], "IfNotPresent");
    assert_eq!(o["spec"]["containers"][0]["terminationMessagePolicy"], "File");
    assert_eq!(o["metadata"]["annotations"]["kruise.io/sidecarset-hash"].as_str().unwrap().len(), 64);
    assert!(o["metadata"]["annotations"]["kruise.io/sidecarset-hash-without-image"].is_string());
}

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

/// The JSONPatch's paths: what the apiserver is asked to replace.
fn patched(r: &AdmissionResponse) -> Vec<String> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD.decode(r.patch.as_ref().expect("a patch")).unwrap();
    let ops: Vec<Value> = serde_json::from_slice(&bytes).unwrap();
    ops.iter().map(|o| o["path"].as_str().unwrap().to_owned()).collect()
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

fn denial(fake: &FakeCluster, obj: Value, old: Option<Value>) -> String {
    let op = if old.is_some() { Operation::Update } else { Operation::Create };
    let obj = review(fake, DEFAULT, op, None, obj.clone(), None).object.unwrap_or(obj);
    let r = review(fake, VALIDATE, op, None, obj, old);
    assert!(!r.allowed, "expected a denial");
    r.status.unwrap().message
}

/// The validation cases both this test and the e2e conformance test run: each a JSON
/// Patch of one base SidecarSet, denied with a message or admitted.
const CASES: &str = include_str!("data/validation-cases.json");

/// (what, SidecarSet, Some(message) when denied).
fn validation_cases() -> Vec<(String, Value, Option<String>)> {
    let doc: Value = serde_json::from_str(CASES).unwrap();
    let mut out = Vec::new();
    for (list, denied) in [("denied", true), ("allowed", false)] {
        for c in doc[list].as_array().unwrap() {
            let mut obj = doc["base"].clone();
            let patch: json_patch::Patch = serde_json::from_value(c["patch"].clone()).unwrap();
            json_patch::patch(&mut obj, &patch).unwrap();
            let what = c["why"].as_str().map_or_else(|| c["patch"].to_string(), str::to_owned);
            out.push((what, obj, denied.then(|| c["message"].as_str().unwrap().to_owned())));
        }
    }
    out
}

#[test]
fn validation_names_the_field_and_the_rule_and_accepts_what_kruise_accepts() {
    let fake = FakeCluster::new();
    for (what, obj, want) in validation_cases() {
        match want {
            Some(want) => {
                let msg = denial(&fake, obj, None);
                assert!(msg.contains(&want), "{what}: want {want:?} in {msg:?}");
            }
            None => {
                let obj = review(&fake, DEFAULT, Operation::Create, None, obj, None).object.unwrap();
                let r = review(&fake, VALIDATE, Operation::Create, None, obj, None);
                assert!(r.allowed, "{what}: refused with {:?}", r.status.map(|s| s.message));
            }
        }
    }
}

#[test]
fn an_unknown_selector_operator_stored_before_validation_selects_no_pod() {
    // As Kruise, whose selector then does not parse: never the Pods without the label.
    let fake = FakeCluster::new();
    let mut spec = two_sidecars();
    spec["selector"] = json!({"matchExpressions": [{"key": "app", "operator": "Equals", "values": ["web"]}]});
    let o = review(&fake, DEFAULT, Operation::Create, None, sidecarset("bad", spec), None).object.unwrap();
    fake.seed(o).unwrap();
    for labels in [json!({"app": "web"}), json!({"app": "db"}), json!({})] {
        let r = review(&fake, INJECT, Operation::Create, Some("default"), pod(labels.clone()), None);
        assert!(r.allowed && r.patch.is_none(), "a Pod labelled {labels} was injected");
    }
}

#[test]
fn update_rules_and_conflicts_between_sidecarsets() {
    let fake = FakeCluster::new();
    let stored = store(&fake, sidecarset("s", two_sidecars()));
    let mut renamed = stored.clone();
    renamed["spec"]["containers"][1]["name"] = json!("later");
    assert!(denial(&fake, renamed, Some(stored.clone())).contains("cannot be added or renamed"));
    let mut image = stored.clone();
    image["spec"]["containers"][0]["image"] = json!("busybox:1.37");
    let r = review(&fake, VALIDATE, Operation::Update, None, image, Some(stored));
    assert!(r.allowed, "changing an image is an update, not a rename");

    let clash = sidecarset(
        "other",
        json!({"selector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]},
                                             "containers": [{"name": "before", "image": "x:1"}]}),
    );
    assert!(denial(&fake, clash, None).contains("also injected by SidecarSet \"s\""));
    let disjoint = sidecarset(
        "db",
        json!({"selector": {"matchLabels": {"app": "db"}},
                                            "containers": [{"name": "before", "image": "x:1"}]}),
    );
    let o = review(&fake, DEFAULT, Operation::Create, None, disjoint, None).object.unwrap();
    assert!(review(&fake, VALIDATE, Operation::Create, None, o, None).allowed, "disjoint selectors may reuse names");
    let _: SidecarSet =
        serde_json::from_value(fake.objects_of(&wasmop_sdk::KindRef::of::<SidecarSet>())[0].clone()).unwrap();
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
fn conflicts_between_overlapping_sidecarsets_as_kruise_checks_them() {
    let fake = FakeCluster::new();
    let mut base = two_sidecars();
    base["patchPodMetadata"] = json!([{"annotations": {"ow": "1"}, "patchPolicy": "Overwrite"},
                                      {"annotations": {"mp": "{}"}, "patchPolicy": "MergePatchJson"}]);
    store(&fake, sidecarset("s", base));
    let other = |extra: Value| {
        let mut spec = json!({"selector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]},
                              "containers": [{"name": "mine", "image": "x:1"}]});
        for (k, v) in extra.as_object().unwrap() {
            spec[k] = v.clone();
        }
        sidecarset("other", spec)
    };
    let allowed = |obj: Value| {
        let o = review(&fake, DEFAULT, Operation::Create, None, obj, None).object.unwrap();
        let r = review(&fake, VALIDATE, Operation::Create, None, o, None);
        assert!(r.allowed, "{:?}", r.status);
    };
    // An init container may share a name that the other set uses as a container.
    allowed(other(json!({"initContainers": [{"name": "before", "image": "x:1"}]})));
    // A volume of the same name: the same definition is fine, another is not.
    allowed(other(json!({"volumes": [{"name": "logs", "emptyDir": {}}]})));
    let msg = denial(&fake, other(json!({"volumes": [{"name": "logs", "hostPath": {"path": "/l"}}]})), None);
    assert!(msg.contains("spec.volumes: volume \"logs\" is defined differently by SidecarSet \"s\""), "{msg}");
    // Patched annotations: a conflict when either set overwrites the key.
    let patch =
        |k: &str, policy: &str| other(json!({"patchPodMetadata": [{"annotations": {k: "{}"}, "patchPolicy": policy}]}));
    let msg = denial(&fake, patch("ow", "MergePatchJson"), None);
    assert!(msg.contains("spec.patchPodMetadata: annotation \"ow\" is also patched by SidecarSet \"s\""), "{msg}");
    assert!(denial(&fake, patch("mp", "Overwrite"), None).contains("annotation \"mp\""));
    allowed(patch("mp", "MergePatchJson"));
    allowed(patch("ow", "Retain"));
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

fn canary(name: &str, base: &str, spec: Value) -> Value {
    let mut o = sidecarset(name, spec);
    o["metadata"]["annotations"] =
        json!({"apps.kruise.io/sidecarset-canary": "true", "apps.kruise.io/sidecarset-base": base});
    o
}

#[test]
fn a_canary_sidecarset_replaces_its_base_and_is_validated_as_kruise() {
    let fake = FakeCluster::new();
    store(&fake, sidecarset("base", two_sidecars()));
    // The canary reuses the base's container names, selects fewer Pods, is NotUpdate.
    let mut spec = two_sidecars();
    spec["selector"] = json!({"matchLabels": {"app": "web", "track": "canary"}});
    spec["containers"][0]["image"] = json!("busybox:1.37");
    spec["updateStrategy"] = json!({"type": "NotUpdate"});
    let c = review(&fake, DEFAULT, Operation::Create, None, canary("try", "base", spec.clone()), None).object.unwrap();
    let r = review(&fake, VALIDATE, Operation::Create, None, c.clone(), None);
    assert!(r.allowed, "{:?}", r.status);
    fake.seed(c.clone()).unwrap();

    let inject = |labels: Value| {
        let p = pod(labels);
        let r = review(&fake, INJECT, Operation::Create, Some("default"), p.clone(), None);
        r.apply(&p).unwrap()
    };
    let p = inject(json!({"app": "web", "track": "canary"}));
    assert_eq!(p["metadata"]["annotations"]["kruise.io/sidecarset-injected-list"], "try", "the canary, not the base");
    assert_eq!(p["spec"]["containers"][0]["image"], "busybox:1.37");
    let p = inject(json!({"app": "web"}));
    assert_eq!(p["metadata"]["annotations"]["kruise.io/sidecarset-injected-list"], "base");

    let f = "metadata.annotations[apps.kruise.io/sidecarset-base]";
    for (obj, old, want) in [
        (canary("self", "self", spec.clone()), None, format!("{f}: the base SidecarSet cannot be the canary itself")),
        (canary("x", "missing", spec.clone()), None, format!("{f}: base SidecarSet \"missing\" not found")),
        (canary("x", "try", spec.clone()), None, format!("{f}: base SidecarSet \"try\" is itself a canary")),
        (canary("x", "base", two_sidecars()), None, "spec.updateStrategy.type: a canary SidecarSet".to_owned()),
        (canary("try", "other", spec.clone()), Some(c.clone()), format!("{f}: immutable (was \"base\")")),
    ] {
        let msg = denial(&fake, obj, old);
        assert!(msg.contains(&want), "{want:?} not in {msg:?}");
    }
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
