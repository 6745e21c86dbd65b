//! What a Pod's state says to the SidecarSet controller: whether it counts (active,
//! carrying every container of the set), is ready, or has a sidecar still restarting
//! into what its spec says. Read from the Pod as the watch cache holds it (JSON), as
//! Kruise's predicates of the same names read it.

use crate::types::SidecarSet;
use crate::{hot, inplace};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// A Pod that still runs or will (Kruise's `IsPodActive`): not being deleted, and not
/// Succeeded or Failed, which a SidecarSet neither counts nor updates.
pub(crate) fn active(p: &Value) -> bool {
    p["metadata"]["deletionTimestamp"].is_null()
        && !matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
}

/// A Pod's labels (borrowed from the Pod, not cloned as a JSON tree first).
pub(crate) fn labels_of(p: &Value) -> BTreeMap<String, String> {
    let labels = p["metadata"]["labels"].as_object().into_iter().flatten();
    labels.filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))).collect()
}

/// A Pod that has every container of the set (Kruise's `IsPodConsistentWithSidecarSet`):
/// one whose sidecar was since removed, or a set that gained a container after the Pod
/// was injected, is neither counted nor rolled, since an in-place update cannot add a
/// container.
pub(crate) fn consistent(p: &Value, ss: &SidecarSet) -> bool {
    let has = |n: &str| p["spec"]["containers"].as_array().is_some_and(|cs| cs.iter().any(|c| c["name"] == n));
    ss.spec.containers.iter().all(|c| if hot::is_hot(c) { hot::has_pair(p, c) } else { has(&c.container.name) })
}

pub(crate) fn ready(p: &Value) -> bool {
    p["status"]["phase"] == "Running"
        && p["status"]["conditions"]
            .as_array()
            .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
}

/// A sidecar of `ss` (both of a hot-upgraded pair) not yet running what the Pod's
/// spec says (`inplace`).
pub(crate) fn restarting(p: &Value, ss: &SidecarSet) -> bool {
    let names = hot::names_in_pod(ss);
    !inplace::consistent(p, ss.metadata.name.as_deref().unwrap_or(""), &names.iter().map(String::as_str).collect())
}

/// A sidecar that reports ready while it does not yet run what the spec says: an
/// update is under way (Kruise's `IsSidecarSetUpgradable` "not consistent").
pub(crate) fn mid_update(p: &Value, ss: &SidecarSet) -> bool {
    let set = ss.metadata.name.as_deref().unwrap_or("");
    let statuses = p["status"]["containerStatuses"].as_array().into_iter().flatten();
    let ready: Vec<&str> = statuses.filter(|s| s["ready"] == true).filter_map(|s| s["name"].as_str()).collect();
    hot::names_in_pod(ss)
        .iter()
        .any(|n| ready.contains(&n.as_str()) && !inplace::consistent(p, set, &BTreeSet::from([n.as_str()])))
}
