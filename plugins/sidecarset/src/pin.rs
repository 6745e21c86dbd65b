//! Which version of a SidecarSet a new Pod gets: `injectionStrategy.revision` pins new
//! Pods to an earlier version kept in the set's history (`revision`), by name or by
//! custom version, always (policy `Always`) or outside the update selector and by a
//! percentage partition's chance (`Partial`), as Kruise's Pod webhook
//! (`getSuitableRevisionSidecarSet`) and `HistoryControl.GetHistorySidecarSet` do.
//! Revisions are read only from the revision namespace, so one written anywhere else
//! is never injected (SECURITY.md).

use crate::defaults::{HASH, HASH_WITHOUT_IMAGE};
use crate::revision::{CUSTOM_VERSION_LABEL, list};
use crate::types::{SidecarSet, SidecarSetInjectRevision};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::Value;
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
        return match ctx.get_opt::<ControllerRevision>(Some(ns), name) {
            Ok(Some(r)) => Ok(r),
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
/// pull secrets and patches from the revision, the hashes it had then, and the
/// revision's name as its latest.
pub fn restore(ss: &SidecarSet, rev: &ControllerRevision) -> SidecarSet {
    let mut old = ss.clone();
    let spec = rev.data.as_ref().map(|d| d.0["spec"].clone()).unwrap_or_default();
    fn field<T: serde::de::DeserializeOwned + Default>(spec: &Value, key: &str) -> T {
        serde_json::from_value(spec[key].clone()).unwrap_or_default()
    }
    old.spec.containers = field(&spec, "containers");
    old.spec.init_containers = field(&spec, "initContainers");
    old.spec.volumes = field(&spec, "volumes");
    old.spec.image_pull_secrets = field(&spec, "imagePullSecrets");
    old.spec.patch_pod_metadata = field(&spec, "patchPodMetadata");
    let kept: BTreeMap<String, String> = rev.metadata.annotations.clone().unwrap_or_default();
    let annotations = old.metadata.annotations.get_or_insert_default();
    for key in [HASH, HASH_WITHOUT_IMAGE] {
        // Missing from the revision: computed again from the restored spec.
        match kept.get(key).filter(|h| !h.is_empty()) {
            Some(h) => annotations.insert(key.into(), h.clone()),
            None => annotations.remove(key),
        };
    }
    old.status.get_or_insert_default().latest_revision = rev.metadata.name.clone();
    old
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
    let old = restore(ss, &find(ctx, ss, ns, info)?);
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
    let pct: f64 =
        p.replace('%', "").parse::<i64>().map_err(|_| format!("updateStrategy.partition {p:?} is not a percentage"))?
            as f64
            / 100.0;
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
