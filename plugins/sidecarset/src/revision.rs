//! Kruise's revision history of a SidecarSet: each version of its sidecars is kept as a
//! ControllerRevision, so new Pods can be given an earlier one (`pin`:
//! `injectionStrategy.revision`, for example the stable sidecar during a canary).
//!
//! As Kruise's `registerLatestRevision` and `HistoryControl` (checked against its code):
//! - the revisions live in one namespace the cluster admin owns (`kruise-system`
//!   unless the settings say otherwise, `settings::revision_namespace`), labelled
//!   `kruise.io/sidecarset-name`, controlled by the set (the garbage collector removes
//!   them with it);
//! - a revision's data is the set's `volumes`, `containers`, `initContainers`,
//!   `imagePullSecrets` and `patchPodMetadata` under a `$patch: replace`, as Go writes
//!   it (typed fields, then every key sorted); its name is the set's name and the FNV-32
//!   hash of those bytes and the collision count, Kubernetes' `HashControllerRevision`;
//! - a change gets the next number; going back to an earlier version renumbers that
//!   revision rather than writing a copy; a name taken by other data counts a collision
//!   (`status.collisionCount`) and hashes again;
//! - the latest revision carries the set's custom version (v1beta1's
//!   `spec.customVersion`, v1alpha1's label) as its label;
//! - beyond `revisionHistoryLimit` (10, at least 1) the oldest go, except ones a Pod or
//!   `injectionStrategy.revision` still names.
//!
//! Not byte for byte: data is sent as JSON the SDK writes, which leaves `<`, `>` and `&`
//! unescaped where Go escapes them (the name's hash is over Go's bytes either way), and
//! volumes are written as stored, not through Go's Volume type.

use crate::defaults::HASH;
use crate::go_layout::SIDECARCONTAINER;
use crate::gojson::{self, Kind};
use crate::types::{SidecarContainer, SidecarSet, SidecarSetSpec};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use wasmop_sdk::helpers::controller_ref;
use wasmop_sdk::{ClusterExt, Context, Error, KindRef, ListParams, ObjectRef, ReconcileError, Request};

pub const NAME_LABEL: &str = "kruise.io/sidecarset-name";
pub const CUSTOM_VERSION_LABEL: &str = "apps.kruise.io/sidecarset-custom-version";
const HASH_LABEL: &str = "controller.kubernetes.io/hash";

/// The set's custom version: v1beta1's field, else v1alpha1's label.
pub fn custom_version(ss: &SidecarSet) -> Option<&str> {
    ss.spec
        .custom_version
        .as_deref()
        .filter(|v| !v.is_empty())
        .or_else(|| ss.metadata.labels.as_ref().and_then(|l| l.get(CUSTOM_VERSION_LABEL)).map(String::as_str))
}

/// Kruise's revision data for `spec`, as the bytes Go writes (Kruise's `getPatch`).
pub fn data(spec: &SidecarSetSpec) -> String {
    const ITEM: Kind = Kind::Struct(SIDECARCONTAINER);
    let typed = |cs: &[SidecarContainer]| -> Value {
        if cs.is_empty() {
            return Value::Null;
        }
        let mut text = String::new();
        gojson::encode(&mut text, Kind::List(&ITEM), &serde_json::to_value(cs).unwrap_or_default());
        serde_json::from_str(&text).unwrap_or_default()
    };
    let list = |v: Value| if v.as_array().is_some_and(Vec::is_empty) { Value::Null } else { v };
    let spec = json!({
        "$patch": "replace",
        "containers": typed(&spec.containers),
        "initContainers": typed(&spec.init_containers),
        "volumes": list(serde_json::to_value(&spec.volumes).unwrap_or_default()),
        "imagePullSecrets": list(serde_json::to_value(&spec.image_pull_secrets).unwrap_or_default()),
        "patchPodMetadata": list(serde_json::to_value(&spec.patch_pod_metadata).unwrap_or_default()),
    });
    let mut out = String::new();
    go_sorted(&mut out, &json!({ "spec": spec }));
    out
}

/// `v` as Go's `json.Marshal` writes a decoded `map[string]interface{}`: keys sorted,
/// strings HTML-escaped.
fn go_sorted(out: &mut String, v: &Value) {
    match v {
        Value::String(s) => gojson::string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                go_sorted(out, item);
            }
            out.push(']');
        }
        // serde_json's map is ordered by key, as Go sorts them.
        Value::Object(m) => {
            out.push('{');
            for (i, (k, item)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                gojson::string(out, k);
                out.push(':');
                go_sorted(out, item);
            }
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// Kubernetes' `HashControllerRevision`: FNV-1 (32 bit) over the data and the
/// collision count, printed in decimal and `SafeEncodeString`d.
pub fn hash(data: &str, collisions: i32) -> String {
    let mut h: u32 = 0x811c_9dc5;
    for b in data.bytes().chain(collisions.to_string().into_bytes()) {
        h = h.wrapping_mul(0x0100_0193) ^ u32::from(b);
    }
    gojson::safe_encode(&h.to_string())
}

/// Kubernetes' `ControllerRevisionName`.
fn revision_name(set: &str, hash: &str) -> String {
    let prefix = if set.len() > 223 { &set[..223] } else { set };
    format!("{prefix}-{hash}")
}

/// A new revision of `ss` (Kruise's `NewRevision`), numbered `number`, with its data
/// `text` (from [`data`]).
fn new_revision(ss: &SidecarSet, text: &str, ns: &str, number: i64, collisions: i32) -> ControllerRevision {
    let name = ss.metadata.name.clone().unwrap_or_default();
    let h = hash(text, collisions);
    let mut labels = ss.metadata.labels.clone().unwrap_or_default();
    labels.insert(HASH_LABEL.into(), h.clone());
    labels.insert(NAME_LABEL.into(), name.clone());
    // Kruise 1.9 reads v1alpha1's label as v1beta1's field (its conversion moves it).
    if let Some(v) = custom_version(ss) {
        labels.insert(CUSTOM_VERSION_LABEL.into(), v.into());
    }
    ControllerRevision {
        metadata: ObjectMeta {
            name: Some(revision_name(&name, &h)),
            namespace: Some(ns.into()),
            labels: Some(labels),
            annotations: Some(ss.metadata.annotations.clone().unwrap_or_default()),
            owner_references: controller_ref(ss).map(|r| vec![r]),
            ..Default::default()
        },
        data: Some(RawExtension(serde_json::from_str(text).unwrap_or_default())),
        revision: number,
    }
}

fn same_data(a: &ControllerRevision, b: &ControllerRevision) -> bool {
    a.data == b.data
}

/// True when `rev` is controlled by `ss` or by nothing (Kubernetes'
/// `ListControllerRevisions` keeps those).
pub fn owned_by(rev: &ControllerRevision, ss: &SidecarSet) -> bool {
    let uid = ss.metadata.uid.as_deref().unwrap_or_default();
    let controller = rev.metadata.owner_references.iter().flatten().find(|o| o.controller == Some(true));
    controller.is_none_or(|o| o.uid == uid)
}

/// The set's revisions, oldest first (Kubernetes' `SortControllerRevisions`): those
/// labelled with its name and controlled by it or by nothing.
pub fn list(ctx: &Context<'_>, ss: &SidecarSet, ns: &str) -> Result<Vec<ControllerRevision>, Error> {
    let name = ss.metadata.name.as_deref().unwrap_or_default();
    let mut revs: Vec<ControllerRevision> =
        ctx.list_of(&ListParams::namespace(ns).labels(&format!("{NAME_LABEL}={name}")))?;
    revs.retain(|r| owned_by(r, ss));
    revs.sort_by(|a, b| {
        (a.revision, &a.metadata.creation_timestamp, &a.metadata.name).cmp(&(
            b.revision,
            &b.metadata.creation_timestamp,
            &b.metadata.name,
        ))
    });
    Ok(revs)
}

/// The set's latest ControllerRevision and collision count ([`register`]). As Kruise:
/// without a recorded revision nothing is counted or rolled (the reconcile fails, with
/// a warning Event saying why, and is retried), so no Pod is written naming a revision
/// that is not its version. A set being deleted gets no new revision (its owner is
/// going).
pub fn record(
    ctx: &Context<'_>,
    req: &Request,
    ss: &SidecarSet,
    pods: &[&Value],
) -> Result<(Option<String>, Option<i32>), ReconcileError> {
    if ss.metadata.deletion_timestamp.is_some() {
        let old = ss.status.clone().unwrap_or_default();
        return Ok((old.latest_revision, old.collision_count));
    }
    let name = ss.metadata.name.as_deref().unwrap_or_default();
    let ns = crate::settings::revision_namespace(&req.settings);
    let in_use = || pods.iter().filter_map(|p| of_pod(p, name)).collect();
    match register(ctx, ss, ns, in_use) {
        Ok((r, c)) => Ok((Some(r), Some(c))),
        Err(e) if e.is_conflict() => Err(e.into()),
        Err(e) => {
            let msg = format!("cannot record the ControllerRevision in namespace {ns}: {e}");
            ctx.warning(&req.object, "RevisionNotRecorded", &msg);
            Err(ReconcileError::retry(msg))
        }
    }
}

/// Records the set's current version (Kruise's `registerLatestRevision`): returns the
/// latest revision's name and the collision count. `in_use` gives the revisions Pods
/// still name (kept beyond the history limit); asked only when some are over it.
pub fn register(
    ctx: &Context<'_>,
    ss: &SidecarSet,
    ns: &str,
    in_use: impl FnOnce() -> BTreeSet<String>,
) -> Result<(String, i32), Error> {
    let mut revs = list(ctx, ss, ns)?;
    let mut collisions = ss.status.as_ref().and_then(|s| s.collision_count).unwrap_or(0);
    let next = revs.last().map_or(1, |r| r.revision + 1);
    let text = data(&ss.spec);
    let wanted = new_revision(ss, &text, ns, next, collisions);
    let equal = revs.iter().rposition(|r| same_data(r, &wanted));
    let mut latest = match equal {
        // Unchanged.
        Some(i) if i == revs.len() - 1 => revs[i].clone(),
        // Back to an earlier version: it becomes the newest.
        Some(i) => {
            let mut r = revs.remove(i);
            r.revision = next;
            let r = ctx.update_obj(&r)?;
            revs.push(r.clone());
            r
        }
        None => {
            let r = create(ctx, ss, &text, wanted, &mut collisions)?;
            revs.push(r.clone());
            r
        }
    };
    if let Some(v) = custom_version(ss)
        && latest.metadata.labels.as_ref().and_then(|l| l.get(CUSTOM_VERSION_LABEL)).map(String::as_str) != Some(v)
    {
        latest.metadata.labels.get_or_insert_default().insert(CUSTOM_VERSION_LABEL.into(), v.into());
        latest = ctx.update_obj(&latest)?;
        if let Some(last) = revs.last_mut() {
            *last = latest.clone();
        }
    }
    // As Kruise: a revision that could not be deleted now is tried again next time;
    // the latest is recorded either way.
    if let Err(e) = truncate(ctx, ss, &revs, in_use) {
        ctx.info("cannot delete an old ControllerRevision", &[("error", &e.to_string())]);
    }
    Ok((latest.metadata.name.unwrap_or_default(), collisions))
}

/// Kruise's `CreateControllerRevision`: a name already taken by the same data is that
/// revision (a cache that had not seen it yet); by other data, a collision. `text` is
/// the revision's data as [`data`] wrote it.
fn create(
    ctx: &Context<'_>,
    ss: &SidecarSet,
    text: &str,
    mut rev: ControllerRevision,
    collisions: &mut i32,
) -> Result<ControllerRevision, Error> {
    let name = ss.metadata.name.as_deref().unwrap_or_default();
    for _ in 0..100 {
        rev.metadata.name = Some(revision_name(name, &hash(text, *collisions)));
        match ctx.create_obj(&rev) {
            Err(Error::AlreadyExists(_)) => {
                // Read live: the cache may not hold it yet.
                let at = ObjectRef::new(
                    &KindRef::of::<ControllerRevision>(),
                    rev.metadata.namespace.as_deref(),
                    rev.metadata.name.as_deref().unwrap_or_default(),
                );
                let taken: ControllerRevision =
                    serde_json::from_value(ctx.get_live(&at)?).map_err(|e| Error::Internal(e.to_string()))?;
                // Another owner's (a set of the same name deleted and created again,
                // before the garbage collector ran) is not ours: a collision.
                if same_data(&taken, &rev) && owned_by(&taken, ss) {
                    return Ok(taken);
                }
                *collisions += 1;
            }
            other => return other,
        }
    }
    Err(Error::Invalid(format!("no free ControllerRevision name for SidecarSet {name} after 100 collisions")))
}

/// Kruise's `truncateHistory`: the oldest revisions beyond the limit that nothing
/// names, never the latest.
fn truncate(
    ctx: &Context<'_>,
    ss: &SidecarSet,
    revs: &[ControllerRevision],
    in_use: impl FnOnce() -> BTreeSet<String>,
) -> Result<(), Error> {
    let limit = ss.spec.revision_history_limit.unwrap_or(10).max(1) as usize;
    let Some(mut excess) = revs.len().checked_sub(limit).filter(|n| *n > 0) else { return Ok(()) };
    let mut active = in_use();
    if let Some(info) = &ss.spec.injection_strategy.revision {
        active.extend(info.revision_name.clone());
        if let Some(v) = &info.custom_version {
            let labelled = revs
                .iter()
                .rev()
                .find(|r| r.metadata.labels.as_ref().and_then(|l| l.get(CUSTOM_VERSION_LABEL)) == Some(v));
            active.extend(labelled.and_then(|r| r.metadata.name.clone()));
        }
    }
    for r in &revs[..revs.len() - 1] {
        if excess == 0 {
            break;
        }
        let name = r.metadata.name.as_deref().unwrap_or_default();
        if active.contains(name) {
            continue;
        }
        match ctx.delete_obj::<ControllerRevision>(r.metadata.namespace.as_deref(), name) {
            Ok(()) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
        excess -= 1;
    }
    Ok(())
}

/// The revision a Pod's hash annotation names for set `name` (`controllerRevision`).
pub fn of_pod(pod: &Value, name: &str) -> Option<String> {
    let text = pod["metadata"]["annotations"][HASH].as_str()?;
    let map: Value = serde_json::from_str(text).ok()?;
    map[name]["controllerRevision"].as_str().filter(|r| !r.is_empty()).map(str::to_owned)
}
