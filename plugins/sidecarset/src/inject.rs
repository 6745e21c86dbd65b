//! Sidecar injection into a new Pod.
//!
//! Works on the Pod's JSON rather than a typed Pod: fields this plugin does not know
//! (a newer Kubernetes) survive untouched, so the JSONPatch holds only the injection.

use crate::defaults::{AFTER_APP, HASH, HASH_WITHOUT_IMAGE, INJECTED_LIST, IS_INJECTED, current_hashes};
use crate::names::split_subscript;
use crate::types::{SidecarContainer, SidecarSet, TransferEnvVar};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

/// The array `key` of the Pod's spec, moved out, and whether the Pod had that field.
fn take_spec(pod: &mut Value, key: &str) -> (Vec<Value>, bool) {
    match pod["spec"].as_object_mut().and_then(|s| s.remove(key)) {
        Some(Value::Array(a)) => (a, true),
        had => (Vec::new(), had.is_some()),
    }
}

/// `v` as an array, moved out of it (no copy); empty when it is none.
fn take_array(v: &mut Value) -> Vec<Value> {
    match v.take() {
        Value::Array(a) => a,
        _ => Vec::new(),
    }
}

/// The container a transferEnv entry copies from: named by the Pod's label or
/// annotation when `sourceContainerNameFrom` says so, else `sourceContainerName`. As
/// Kruise's `ExtractContainerNameFromFieldPath`: another field path, or a Pod without
/// that key, copies nothing.
fn source_name<'a>(t: &'a TransferEnvVar, labels: &'a Value, annotations: &'a Value) -> Option<&'a str> {
    let Some(path) = t.source_container_name_from.as_ref().and_then(|f| f.field_ref.as_ref()) else {
        return t.source_container_name.as_deref();
    };
    let (field, key) = split_subscript(&path.field_path)?;
    match field {
        "metadata.labels" => labels[key].as_str(),
        "metadata.annotations" => annotations[key].as_str(),
        _ => None,
    }
}

/// The sidecar as it goes into the Pod: IS_INJECTED, transferred env (per entry, in
/// name order, none that the sidecar already sets: Kruise's order), then what it shares
/// from the app containers (`share`).
fn sidecar(sc: &SidecarContainer, app: &[Value], labels: &Value, annotations: &Value) -> Value {
    let mut c = serde_json::to_value(&sc.container).unwrap_or_default();
    let mut env: Vec<Value> = take_array(&mut c["env"]).into_iter().filter(|e| e["name"] != IS_INJECTED).collect();
    env.push(json!({"name": IS_INJECTED, "value": "true"}));
    for t in &sc.transfer_env {
        let Some(src) = source_name(t, labels, annotations) else { continue };
        let Some(from) = app.iter().find(|c| c["name"] == src) else { continue };
        let wanted: BTreeSet<&str> = t.env_name.iter().chain(&t.env_names).map(String::as_str).collect();
        for n in wanted {
            let found = from["env"].as_array().into_iter().flatten().find(|e| e["name"] == n);
            if let Some(e) = found
                && !env.iter().any(|x| x["name"] == n)
            {
                env.push(e.clone());
            }
        }
    }
    c["env"] = Value::Array(env);
    crate::share::share(&mut c, sc, app);
    c
}

/// Puts `sidecars` (each with whether it goes after the app) around `app`. A sidecar
/// whose name a container of the Pod already has replaces that container where it
/// stands, so the Pod's own order is kept (Kruise's `MergeSidecarContainers`).
fn place(mut app: Vec<Value>, sidecars: Vec<(bool, Value)>) -> Vec<Value> {
    let (mut before, mut after) = (Vec::new(), Vec::new());
    for (goes_after, v) in sidecars {
        match app.iter_mut().find(|c| c["name"] == v["name"]) {
            Some(same) => *same = v,
            None if goes_after => after.push(v),
            None => before.push(v),
        }
    }
    before.into_iter().chain(app).chain(after).collect()
}

/// The sidecars of `list` (the set's init containers when `init`) for a Pod, each with
/// whether it goes after the app (without a policy: init containers after the Pod's
/// own, containers before, Kruise's defaults).
/// `targets`: the containers a resourcesPolicy reads (`resources::candidates`).
fn sidecars(
    list: &[SidecarContainer],
    pod: &Value,
    labels: &Value,
    init: bool,
    targets: &[&Value],
) -> Result<Vec<(bool, Value)>, String> {
    let goes_after = |c: &SidecarContainer| c.pod_inject_policy.as_deref().map_or(init, |p| p == AFTER_APP);
    let app = pod["spec"]["containers"].as_array().map_or(&[][..], Vec::as_slice);
    let annotations = &pod["metadata"]["annotations"];
    let mut out = Vec::new();
    for c in list {
        let mut v = sidecar(c, app, labels, annotations);
        if let Some(p) = &c.resources_policy {
            v["resources"] = crate::resources::compute(p, targets)
                .map_err(|e| format!("container {}: resourcesPolicy: {e}", c.container.name))?;
        }
        // A hot-upgraded sidecar goes in as its pair (`hot`).
        let native = !init || c.container.restart_policy.as_deref() == Some("Always");
        out.extend(crate::hot::expand(v, c, native).into_iter().map(|v| (goes_after(c), v)));
    }
    Ok(out)
}

fn annotation_map(pod: &Value, key: &str) -> BTreeMap<String, Value> {
    pod["metadata"]["annotations"][key].as_str().and_then(|s| serde_json::from_str(s).ok()).unwrap_or_default()
}

/// Injects every SidecarSet in `sets` (the ones that select this Pod, not paused, in
/// name order) into `pod`, whose labels are `labels` (`pod` may hold only the parts
/// injection changes). Returns the fields it changed, of [`FIELDS`] (none: nothing was
/// to be injected), and an error when a set's patchPodMetadata cannot apply to this Pod
/// (the Pod is then refused, as by Kruise).
pub fn inject(pod: &mut Value, labels: &Value, sets: &[&SidecarSet]) -> Result<Vec<&'static str>, String> {
    if sets.is_empty() {
        return Ok(Vec::new());
    }
    // Every set's sidecars are built while the Pod is as it came (transferEnv and
    // shared mounts read its containers and metadata).
    let targets = crate::resources::candidates(pod, sets);
    let build = |ss: &SidecarSet| {
        let name = ss.metadata.name.as_deref().unwrap_or("");
        let cs = sidecars(&ss.spec.containers, pod, labels, false, &targets);
        let is = sidecars(&ss.spec.init_containers, pod, labels, true, &targets);
        let named = |e: String| format!("SidecarSet {name}: {e}");
        Ok::<_, String>((cs.map_err(named)?, is.map_err(named)?))
    };
    let built = sets.iter().map(|ss| build(ss)).collect::<Result<Vec<_>, _>>()?;
    // Moved out of the Pod, not copied: each goes back in at the end (the optional ones
    // only if the Pod had them or something was added).
    let containers = take_array(&mut pod["spec"]["containers"]);
    let (inits, had_inits) = take_spec(pod, "initContainers");
    let (mut volumes, had_volumes) = take_spec(pod, "volumes");
    let (mut secrets, had_secrets) = take_spec(pod, "imagePullSecrets");
    // As Kruise's mergeSidecarSecrets: each name once, the Pod's own duplicates too.
    let mut seen = BTreeSet::new();
    let (own_volumes, own_secrets) = (volumes.len(), secrets.len());
    secrets.retain(|s| seen.insert(s["name"].to_string()));
    let mut secrets_changed = secrets.len() != own_secrets;
    let mut hash = annotation_map(pod, HASH);
    let mut hash_wo = annotation_map(pod, HASH_WITHOUT_IMAGE);
    // Sorted, as Kruise writes it.
    let mut injected: BTreeSet<String> = pod["metadata"]["annotations"][INJECTED_LIST]
        .as_str()
        .map(|s| s.split(',').filter(|x| !x.is_empty()).map(str::to_owned).collect())
        .unwrap_or_default();
    let mut annotations = match pod["metadata"]["annotations"].take() {
        Value::Object(m) => m,
        _ => serde_json::Map::new(),
    };

    // Every set's sidecars are placed in one pass, as Kruise merges them: the sets'
    // before-app containers, in set order, ahead of the app's; init containers sorted
    // by name across sets (a stable sort, so one set's order holds among equals).
    let (mut all_cs, mut all_is) = (Vec::new(), Vec::new());
    for (ss, (cs, is)) in sets.iter().zip(built) {
        let name = ss.metadata.name.clone().unwrap_or_default();
        // As Kruise: the containers and the native-sidecar init containers (restartPolicy
        // Always: the only init containers an in-place update may touch), sorted, by
        // their names in the set (a hot-upgraded pair is listed once).
        let native = |c: &&SidecarContainer| c.container.restart_policy.as_deref() == Some("Always");
        let list: BTreeSet<&str> = ss
            .spec
            .containers
            .iter()
            .chain(ss.spec.init_containers.iter().filter(native))
            .map(|c| c.container.name.as_str())
            .collect();
        // Volumes a sidecar mounts or uses as a block device.
        let mounted: Vec<String> = cs
            .iter()
            .chain(&is)
            .flat_map(|(_, v)| {
                let mounts = v["volumeMounts"].as_array().into_iter().flatten();
                mounts.chain(v["volumeDevices"].as_array().into_iter().flatten())
            })
            .filter_map(|m| m["name"].as_str().map(str::to_owned))
            .collect();
        all_cs.extend(cs);
        all_is.extend(is);
        for v in &ss.spec.volumes {
            let taken = volumes.iter().any(|x| x["name"] == v.name());
            if mounted.iter().any(|m| m == v.name()) && !taken {
                volumes.push(serde_json::to_value(v).unwrap_or_default());
            }
        }
        for s in &ss.spec.image_pull_secrets {
            let v = serde_json::to_value(s).unwrap_or_default();
            if !secrets.contains(&v) {
                secrets.push(v);
                secrets_changed = true;
            }
        }
        crate::hot::annotate(&mut annotations, ss);
        crate::patch::apply(&mut annotations, &ss.spec.patch_pod_metadata)
            .map_err(|e| format!("SidecarSet {name}: spec.patchPodMetadata: {e}"))?;
        let (h, w) = current_hashes(ss);
        let mut entry = json!({"hash": h, "sidecarSetName": name, "sidecarList": list});
        // As Kruise: the revision this version is kept as, when known.
        if let Some(r) = ss.status.as_ref().and_then(|s| s.latest_revision.as_deref()).filter(|r| !r.is_empty()) {
            entry["controllerRevision"] = json!(r);
        }
        hash.insert(name.clone(), entry);
        hash_wo.insert(name.clone(), json!({"hash": w, "sidecarSetName": name, "sidecarList": list}));
        injected.insert(name);
    }
    all_is.sort_by(|a, b| a.1["name"].as_str().cmp(&b.1["name"].as_str()));
    // In FIELDS' order. Volumes are only ever added; the annotations always change (the
    // sets' hashes).
    let changed = [true, !all_cs.is_empty(), !all_is.is_empty(), volumes.len() != own_volumes, secrets_changed];
    let changed = FIELDS.into_iter().zip(changed).filter_map(|(f, c)| c.then_some(f)).collect();
    let containers = place(containers, all_cs);
    let inits = place(inits, all_is);
    annotations.insert(HASH.into(), json!(serde_json::to_string(&hash).unwrap_or_default()));
    annotations.insert(HASH_WITHOUT_IMAGE.into(), json!(serde_json::to_string(&hash_wo).unwrap_or_default()));
    annotations.insert(INJECTED_LIST.into(), json!(injected.into_iter().collect::<Vec<_>>().join(",")));

    pod["metadata"]["annotations"] = Value::Object(annotations);
    pod["spec"]["containers"] = Value::Array(containers);
    for (key, list, had) in [
        ("initContainers", inits, had_inits),
        ("volumes", volumes, had_volumes),
        ("imagePullSecrets", secrets, had_secrets),
    ] {
        if had || !list.is_empty() {
            pod["spec"][key] = Value::Array(list);
        }
    }
    Ok(changed)
}

/// Every field [`inject`] may write, as JSON pointers (and, with the Pod's labels, all
/// it reads): annotations, containers, init containers, volumes, image pull secrets.
pub const FIELDS: [&str; 5] =
    ["/metadata/annotations", "/spec/containers", "/spec/initContainers", "/spec/volumes", "/spec/imagePullSecrets"];

/// The hash this Pod carries for SidecarSet `name` (from `key`, HASH or HASH_WITHOUT_IMAGE).
pub fn pod_hash(pod: &Value, key: &str, name: &str) -> Option<String> {
    annotation_map(pod, key).get(name).and_then(|e| e["hash"].as_str()).map(str::to_owned)
}

/// Sets the hash this Pod carries for SidecarSet `name`, and the ControllerRevision
/// that version is kept as.
pub fn set_pod_hash(pod: &mut Value, key: &str, name: &str, hash: &str, revision: Option<&str>) {
    let mut m = annotation_map(pod, key);
    if let Some(e) = m.get_mut(name) {
        e["hash"] = json!(hash);
        // As Kruise rewrites the whole entry: a revision named before is not kept.
        match (revision.filter(|r| !r.is_empty()), e.as_object_mut()) {
            (Some(r), _) => e["controllerRevision"] = json!(r),
            (None, Some(m)) => drop(m.remove("controllerRevision")),
            (None, None) => {}
        }
    }
    pod["metadata"]["annotations"][key] = json!(serde_json::to_string(&m).unwrap_or_default());
}
