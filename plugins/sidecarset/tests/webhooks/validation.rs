//! `default-sidecarset` and `validate-sidecarset`: Kruise's defaults, and what Kruise
//! refuses, with the field named.

use super::*;

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
