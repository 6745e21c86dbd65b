//! HotUpgrade, as Kruise does it: a sidecar that must not stop while it is upgraded
//! (a proxy holding connections) runs as a pair of containers.
//!
//! Flow (Kruise's `injectHotUpgradeContainers`, `UpgradeSidecarContainer`,
//! `flipHotUpgradingContainers`):
//! - Injection puts `<name>-1` with the sidecar's image and `<name>-2` with
//!   `hotUpgradeEmptyImage` (the same command and probes, doing no work) into the Pod,
//!   and records `<name>-1` as the working container in
//!   `kruise.io/sidecarset-working-hotupgrade-container` (JSON, sidecar → container).
//! - An update puts the new image into the empty one of the pair, which becomes the
//!   working one; the old one keeps running meanwhile.
//! - Once the Pod runs the new one (and is ready, the empty containers aside), the
//!   controller *flips* the old one to the empty image.
//!
//! The pair hands over through two env vars each container reads from Pod
//! annotations: `SIDECARSET_VERSION` (`version.sidecarset.kruise.io/<container>`) and
//! `SIDECARSET_VERSION_ALT` (`versionalt.sidecarset.kruise.io/<container>`): "1"/"0" at
//! injection, the SidecarSet's resourceVersion once a container is upgraded, "0" once
//! flipped, so a sidecar's PostStart hook can tell whether it is the newer of the two.
//!
//! Caveat (Kruise's too): a plain (non-native) init container with HotUpgrade is
//! injected as one container; only containers and native-sidecar init containers pair.

use crate::inplace;
use crate::types::{SidecarContainer, SidecarSet};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};

pub const HOT_UPGRADE: &str = "HotUpgrade";
pub const WORKING: &str = "kruise.io/sidecarset-working-hotupgrade-container";
const VERSION_ENV: &str = "SIDECARSET_VERSION";
const VERSION_ALT_ENV: &str = "SIDECARSET_VERSION_ALT";

pub fn is_hot(sc: &SidecarContainer) -> bool {
    sc.upgrade_strategy.as_ref().and_then(|u| u.upgrade_type.as_deref()) == Some(HOT_UPGRADE)
}

fn empty_image(sc: &SidecarContainer) -> &str {
    sc.upgrade_strategy.as_ref().and_then(|u| u.hot_upgrade_empty_image.as_deref()).unwrap_or("")
}

/// `<name>-1`, `<name>-2`.
pub fn pair_names(name: &str) -> (String, String) {
    (format!("{name}-1"), format!("{name}-2"))
}

fn version_key(container: &str) -> String {
    format!("version.sidecarset.kruise.io/{container}")
}

fn alt_key(container: &str) -> String {
    format!("versionalt.sidecarset.kruise.io/{container}")
}

/// The names a set's sidecars have in a Pod (Kruise's `GetSidecarContainersInPod`):
/// both of a pair.
pub fn names_in_pod(ss: &SidecarSet) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for sc in &ss.spec.containers {
        if is_hot(sc) {
            let (a, b) = pair_names(&sc.container.name);
            names.extend([a, b]);
        } else {
            names.insert(sc.container.name.clone());
        }
    }
    names
}

fn working_map(annotations: &Value) -> BTreeMap<String, String> {
    annotations[WORKING].as_str().and_then(|s| serde_json::from_str(s).ok()).unwrap_or_default()
}

/// (working, other) container of sidecar `name` in the Pod, as its annotation says
/// (Kruise's `GetPodHotUpgradeContainers`: without an entry, `-2` is the working one).
pub fn working(pod: &Value, name: &str) -> (String, String) {
    let (a, b) = pair_names(name);
    if working_map(&pod["metadata"]["annotations"]).get(name) == Some(&a) { (a, b) } else { (b, a) }
}

/// The containers a hot-upgraded sidecar goes into a Pod as: `c` (built for this Pod)
/// as `-1` and, with the empty image, `-2`; each with the version env vars. Anything
/// else: `c` alone. `native`: a container, or an init container that keeps running.
pub fn expand(c: Value, sc: &SidecarContainer, native: bool) -> Vec<Value> {
    if !is_hot(sc) || !native {
        return vec![c];
    }
    let (a, b) = pair_names(&sc.container.name);
    let mut first = c;
    let mut second = first.clone();
    first["name"] = json!(a);
    second["name"] = json!(b);
    second["image"] = json!(empty_image(sc));
    for (c, n) in [(&mut first, &a), (&mut second, &b)] {
        let mut env = match c["env"].take() {
            Value::Array(e) => e,
            _ => Vec::new(),
        };
        for (var, key) in [(VERSION_ENV, version_key(n)), (VERSION_ALT_ENV, alt_key(n))] {
            let path = format!("metadata.annotations['{key}']");
            env.push(json!({"name": var, "valueFrom": {"fieldRef": {"fieldPath": path}}}));
        }
        c["env"] = Value::Array(env);
    }
    vec![first, second]
}

/// The annotations injection writes for `ss`'s hot-upgraded sidecars: each pair's
/// versions ("1"/"0"), and `-1` as the working container (kept for other sidecars).
pub fn annotate(annotations: &mut Map<String, Value>, ss: &SidecarSet) {
    let native = ss.spec.init_containers.iter().filter(|c| c.container.restart_policy.as_deref() == Some("Always"));
    let hot: Vec<&SidecarContainer> = ss.spec.containers.iter().chain(native).filter(|c| is_hot(c)).collect();
    if hot.is_empty() {
        return;
    }
    let mut work = working_map(&Value::Object(annotations.clone()));
    for sc in hot {
        let (a, b) = pair_names(&sc.container.name);
        for (key, v) in [(version_key(&a), "1"), (alt_key(&a), "0"), (version_key(&b), "0"), (alt_key(&b), "1")] {
            annotations.insert(key, json!(v));
        }
        work.insert(sc.container.name.clone(), a);
    }
    annotations.insert(WORKING.into(), json!(serde_json::to_string(&work).unwrap_or_default()));
}

fn container<'a>(pod: &'a Value, name: &str) -> Option<&'a Value> {
    pod["spec"]["containers"].as_array()?.iter().find(|c| c["name"] == name)
}

fn image<'a>(pod: &'a Value, name: &str) -> &'a str {
    container(pod, name).and_then(|c| c["image"].as_str()).unwrap_or("")
}

fn set_annotation(pod: &mut Value, key: String, v: &str) {
    if !pod["metadata"]["annotations"].is_object() {
        pod["metadata"]["annotations"] = json!({});
    }
    pod["metadata"]["annotations"][key] = json!(v);
}

/// Whether the Pod has this sidecar as a pair recorded in its annotation (Kruise's
/// `IsPodConsistentWithSidecarSet` for a hot-upgraded sidecar).
pub fn has_pair(pod: &Value, sc: &SidecarContainer) -> bool {
    let (a, b) = pair_names(&sc.container.name);
    working_map(&pod["metadata"]["annotations"]).contains_key(&sc.container.name)
        && container(pod, &a).is_some()
        && container(pod, &b).is_some()
}

/// Puts `sc`'s image into the Pod for a hot-upgraded sidecar (Kruise's
/// `findContainerToHotUpgrade` and the annotations of `updatePodSidecarContainer`):
/// into the one of the pair with the empty image, else the one not running ready,
/// else the one not working. Returns the container changed, or None when the other
/// one already runs that image. `version`: the SidecarSet's resourceVersion.
pub fn upgrade(pod: &mut Value, sc: &SidecarContainer, set: &str, version: &str) -> Option<String> {
    let name = &sc.container.name;
    let (a, b) = pair_names(name);
    let empty = empty_image(sc);
    let ready = |n: &str| {
        let statuses = pod["status"]["containerStatuses"].as_array().into_iter().flatten();
        let up = statuses.into_iter().any(|s| s["name"] == n && s["ready"] == true);
        up && inplace::consistent(pod, set, &BTreeSet::from([n]))
    };
    let (to, other) = if image(pod, &a) == empty {
        (a, b)
    } else if image(pod, &b) == empty {
        (b, a)
    } else {
        match (ready(&a), ready(&b)) {
            (true, false) => (b, a),
            (false, true) => (a, b),
            _ => {
                let (work, older) = working(pod, name);
                (older, work)
            }
        }
    };
    let new_image = sc.container.image.as_deref().unwrap_or("");
    if image(pod, &other) == new_image {
        return None;
    }
    let c = pod["spec"]["containers"].as_array_mut()?.iter_mut().find(|c| c["name"] == to.as_str())?;
    c["image"] = json!(new_image);
    let mut work = working_map(&pod["metadata"]["annotations"]);
    work.insert(name.clone(), to.clone());
    let other_version = pod["metadata"]["annotations"][version_key(&other)].as_str().unwrap_or("").to_owned();
    set_annotation(pod, WORKING.into(), &serde_json::to_string(&work).unwrap_or_default());
    set_annotation(pod, version_key(&to), version);
    set_annotation(pod, alt_key(&to), &other_version);
    set_annotation(pod, alt_key(&other), version);
    Some(to)
}

/// Whether a hot upgrade of this Pod waits to be finished: the not-working container
/// of some pair does not have the empty image (Kruise's `isPodSidecarInHotUpgrading`;
/// until then the Pod does not count as ready, as in Kruise's `IsPodReady`).
pub fn upgrading(pod: &Value, ss: &SidecarSet) -> bool {
    ss.spec.containers.iter().filter(|c| is_hot(c)).any(|sc| {
        let (_, other) = working(pod, &sc.container.name);
        image(pod, &other) != empty_image(sc)
    })
}

/// The not-working container of each pair (where the empty image belongs).
pub fn idle(pod: &Value, ss: &SidecarSet) -> BTreeSet<String> {
    ss.spec.containers.iter().filter(|c| is_hot(c)).map(|sc| working(pod, &sc.container.name).1).collect()
}

/// Whether every container but the idle ones reports ready, or the Pod is Ready
/// (Kruise's `isHotUpgradingReady`).
pub fn ready_to_flip(pod: &Value, ss: &SidecarSet, pod_ready: bool) -> bool {
    if pod_ready {
        return true;
    }
    let idle = idle(pod, ss);
    let statuses = pod["status"]["containerStatuses"].as_array().into_iter().flatten();
    statuses.filter(|s| s["name"].as_str().is_none_or(|n| !idle.contains(n))).all(|s| s["ready"] == true)
}

/// Sets the idle container of each pair to the empty image, with its version "0" and
/// the working one's alternate "0"; returns the containers changed.
pub fn flip(pod: &mut Value, ss: &SidecarSet) -> Vec<String> {
    let mut changed = Vec::new();
    for sc in ss.spec.containers.iter().filter(|c| is_hot(c)) {
        let (work, other) = working(pod, &sc.container.name);
        let empty = empty_image(sc);
        let Some(c) =
            pod["spec"]["containers"].as_array_mut().and_then(|cs| cs.iter_mut().find(|c| c["name"] == other.as_str()))
        else {
            continue;
        };
        if c["image"] == empty {
            continue;
        }
        c["image"] = json!(empty);
        set_annotation(pod, version_key(&other), "0");
        set_annotation(pod, alt_key(&work), "0");
        changed.push(other);
    }
    changed
}
