//! Which version of a SidecarSet a new Pod gets: `injectionStrategy.revision` pins new
//! Pods to an earlier version kept in the set's history (`revision`), by name or by
//! custom version, always (policy `Always`) or outside the update selector and by a
//! percentage partition's chance (`Partial`), as Kruise's Pod webhook
//! (`getSuitableRevisionSidecarSet`) and `HistoryControl.GetHistorySidecarSet` do.
//! Revisions are read only from the revision namespace, so one written anywhere else
//! is never injected (SECURITY.md).

use crate::defaults::{HASH, HASH_WITHOUT_IMAGE, hashes};
use crate::revision::{CUSTOM_VERSION_LABEL, NAME_LABEL, list, owned_by};
use crate::types::{SidecarSet, SidecarSetInjectRevision, SidecarSetSpec};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::BTreeMap;
use wasmop_sdk::{ClusterExt, Context};

/// The revision `info` names (Kruise's `getControllerRevision`): by name, or the newest
/// of the set's revisions with that custom version.
pub fn find(
    ctx: &Context<'_>,
    ss: &SidecarSet,
    ns: &str,
    info: &SidecarSetInjectRevision,
) -> Result<ControllerRevision, String> {
    if let Some(name) = &info.revision_name {
        let set = ss.metadata.name.as_deref().unwrap_or_default();
        return match ctx.get_opt::<ControllerRevision>(Some(ns), name) {
            // Stricter than Kruise, which takes any revision of that name: a set pins
            // only its own versions (another set's would bring containers and
            // patches this set was never admitted with).
            Ok(Some(r))
                if r.metadata.labels.as_ref().and_then(|l| l.get(NAME_LABEL)).map(String::as_str) == Some(set)
                    && owned_by(&r, ss) =>
            {
                Ok(r)
            }
            Ok(Some(_)) => Err(format!("ControllerRevision {ns}/{name} is not a revision of SidecarSet {set}")),
            Ok(None) => Err(format!("ControllerRevision {ns}/{name} not found")),
            Err(e) => Err(format!("cannot read ControllerRevision {ns}/{name}: {e}")),
        };
    }
    let Some(version) = &info.custom_version else {
        return Err("revisionName and customVersion cannot be empty simultaneously".into());
    };
    let revs = list(ctx, ss, ns).map_err(|e| format!("cannot list ControllerRevisions in {ns}: {e}"))?;
    revs.into_iter()
        .rev()
        .find(|r| r.metadata.labels.as_ref().and_then(|l| l.get(CUSTOM_VERSION_LABEL)) == Some(version))
        .ok_or_else(|| format!("no ControllerRevision in {ns} of this SidecarSet has customVersion {version:?}"))
}

/// The set as it was at `rev` (Kruise's `GetHistorySidecarSet`): its sidecars, volumes,
/// pull secrets and patches from the revision, the hashes it had then (each one missing
/// from the revision computed from the restored spec), and the revision's name as its
/// latest. A revision whose data does not read as a SidecarSet's is an error, as in
/// Kruise (never a set with no sidecars).
pub fn restore(ss: &SidecarSet, rev: &ControllerRevision) -> Result<SidecarSet, String> {
    let name = rev.metadata.name.as_deref().unwrap_or_default();
    let mut spec = rev.data.as_ref().map(|d| d.0["spec"].clone()).unwrap_or_default();
    let Some(fields) = spec.as_object_mut() else {
        return Err(format!("ControllerRevision {name}: data.spec is not an object"));
    };
    fields.remove("$patch");
    fields.retain(|_, v| !v.is_null());
    let restored: SidecarSetSpec =
        serde_json::from_value(spec).map_err(|e| format!("ControllerRevision {name}: data.spec: {e}"))?;
    let mut old = ss.clone();
    old.spec.containers = restored.containers;
    old.spec.init_containers = restored.init_containers;
    old.spec.volumes = restored.volumes;
    old.spec.image_pull_secrets = restored.image_pull_secrets;
    old.spec.patch_pod_metadata = restored.patch_pod_metadata;
    // The revision keeps the set's hashes of that version; computed only when missing
    // (this runs for every Pod admitted to a pinned set).
    let kept = |key: &str| rev.metadata.annotations.as_ref()?.get(key).filter(|h| !h.is_empty()).cloned();
    let (hash, without_image) = match (kept(HASH), kept(HASH_WITHOUT_IMAGE)) {
        (Some(h), Some(w)) => (h, w),
        (h, w) => {
            let computed = hashes(&old.spec);
            (h.unwrap_or(computed.0), w.unwrap_or(computed.1))
        }
    };
    let annotations = old.metadata.annotations.get_or_insert_default();
    annotations.insert(HASH.into(), hash);
    annotations.insert(HASH_WITHOUT_IMAGE.into(), without_image);
    old.status.get_or_insert_default().latest_revision = Some(name.to_owned());
    Ok(old)
}

/// Which version of `ss` a new Pod with `labels` gets (Kruise's
/// `getSuitableRevisionSidecarSet` on create): None for the latest. With Policy
/// Partial, a Pod the update selector picks gets the old version with the chance a
/// percentage partition gives (Kruise's `selectRevisionRandomly`), drawn from the
/// admission request's `uid`, which is random per request.
pub fn for_new_pod(
    ctx: &Context<'_>,
    ss: &SidecarSet,
    ns: &str,
    labels: &BTreeMap<String, String>,
    uid: &str,
) -> Result<Option<SidecarSet>, String> {
    let Some(info) = ss
        .spec
        .injection_strategy
        .revision
        .as_ref()
        .filter(|i| i.revision_name.is_some() || i.custom_version.is_some())
    else {
        return Ok(None);
    };
    let old = restore(ss, &find(ctx, ss, ns, info)?)?;
    let s = &ss.spec.update_strategy;
    if s.paused || info.policy.as_deref() != Some(PARTIAL) {
        return Ok(Some(old));
    }
    if let Some(sel) = &s.selector
        && !crate::scope::matches(sel, labels)
    {
        return Ok(Some(old));
    }
    let Some(IntOrString::String(p)) = &s.partition else { return Ok(None) };
    // Kruise's ParsePercentageAsFloat64; validation admitted it, and one over 100 %
    // (however large) means every Pod.
    let digits = p.strip_suffix('%').filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()));
    let Some(pct) = digits.map(|d| d.parse::<f64>().unwrap_or(f64::MAX) / 100.0) else {
        return Err(format!("updateStrategy.partition {p:?} is not a percentage"));
    };
    Ok((chance(uid) <= pct).then_some(old))
}

pub const ALWAYS: &str = "Always";
pub const PARTIAL: &str = "Partial";

/// A number in [0, 1) drawn from `seed`'s FNV-1a hash.
fn chance(seed: &str) -> f64 {
    let mut h: u32 = 0x811c_9dc5;
    for b in seed.bytes() {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    f64::from(h) / (f64::from(u32::MAX) + 1.0)
}
