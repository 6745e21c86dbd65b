//! The controller: SidecarSet status counts, and in-place rolling update of sidecar
//! images.
//!
//! A Pod counts as *matched* when it carries this SidecarSet's sidecars (its hash
//! annotation names the SidecarSet), *updated* when that hash is the current one, and
//! *ready* when Running with condition Ready. While updating, a Pod whose sidecars do
//! not yet run what its spec says (`inplace`: by imageID, as Kruise) is still
//! restarting; an updated Pod that is restarting or not Ready counts against
//! `maxUnavailable`.
//!
//! A rollout counts as Kruise's `calculateUpgradeCount`: the Pods *waiting* (not
//! updated, in the update selector, same hash-without-image) are put in Kruise's
//! order (`order`: not-Ready first, then priority and scatter rules); the partition keeps the last of them old; of the rest, not-Ready Pods are
//! updated freely and Ready ones while updated-but-unavailable Pods stay under
//! maxUnavailable. A percentage over 100 % or too large to parse means all Pods.
//!
//! As Kruise's `updatePodSidecarAndHash`, an in-place update applies patchPodMetadata
//! again and marks the Pod's `SidecarSetUpgradable` condition (`upgradable`, written
//! just before the update);
//! waiting Pods whose sidecars changed beyond their images are marked not upgradable
//! and left alone, with one `NotUpgradablePods` Event when some are newly found.

use crate::defaults::{HASH, HASH_WITHOUT_IMAGE, NOT_UPDATE, accepted_hashes, current_hashes};
use crate::inject::{pod_hash, set_pod_hash};
use crate::pod_state::{active, consistent, labels_of, mid_update, ready, restarting};
use crate::types::{SidecarSet, SidecarSetStatus};
use crate::{hot, inplace, order, pods, revision, scope, upgradable};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use wasmop_sdk::{
    Action, ClusterExt, Context, ListParams, Manifest, Mapping, ObjectRef, ReconcileError, Reconciler, Request, Verb,
};

pub struct SidecarSetController;

impl Reconciler for SidecarSetController {
    fn manifest(_settings: &str) -> Result<Manifest, String> {
        Ok(Manifest::new::<SidecarSet>("sidecarset", env!("CARGO_PKG_VERSION"))
            .cluster_scoped()
            // A Pod's change reconciles only the sets whose selector picks it (before
            // or after the change), as Kruise's Pod handler enqueues: not every set.
            .watches::<Pod>(Mapping::Selector(vec!["spec".into(), "selector".into()]))
            .allow::<SidecarSet>(&[Verb::UpdateStatus])
            .allow::<Pod>(&[Verb::Update, Verb::UpdateStatus])
            .allow::<Namespace>(&[Verb::Get, Verb::List])
            // The revision history (`revision`), in the revision namespace.
            .owns::<ControllerRevision>()
            .allow::<ControllerRevision>(&[Verb::Get, Verb::List, Verb::Create, Verb::Update, Verb::Delete]))
    }

    fn reconcile(ctx: &Context<'_>, req: &Request) -> Result<Action, ReconcileError> {
        let Some(ss) = req.current_as::<SidecarSet>()? else { return Ok(Action::done()) };
        let name = ss.metadata.name.clone().unwrap_or_default();
        let Some(selector) = ss.spec.selector.as_ref().filter(|s| !scope::is_empty(s)) else {
            return Err(ReconcileError::permanent("spec.selector is empty; nothing is selected"));
        };
        let Some(query) = scope::to_query(selector) else {
            return Err(ReconcileError::permanent("spec.selector has an invalid operator; nothing is selected"));
        };
        let mut params = ListParams { label_selector: Some(query), ..Default::default() };
        params.namespace = scope::namespace(&ss.spec).map(str::to_owned);
        // Views of the Pods, not whole Pods (`pods`): a Pod to write is read whole.
        let pods = pods::list(ctx, &params)?;
        let ns_labels: BTreeMap<String, BTreeMap<String, String>> = if ss.spec.namespace_selector.is_some() {
            ctx.list_of::<Namespace>(&ListParams::default())?
                .into_iter()
                .map(|n| (n.metadata.name.unwrap_or_default(), n.metadata.labels.unwrap_or_default()))
                .collect()
        } else {
            BTreeMap::new()
        };
        let empty = BTreeMap::new();
        let (hash, _) = current_hashes(&ss);
        // A Pod is at this version if it carries any hash of it: Kruise's, this
        // plugin's legacy one, or the set's annotation (`defaults::accepted_hashes`).
        let (hashes, hashes_wo) = accepted_hashes(&ss);
        let matched: Vec<&Value> = pods
            .iter()
            .filter(|p| {
                let ns = p["metadata"]["namespace"].as_str().unwrap_or("");
                scope::selects(&ss.spec, ns, ns_labels.get(ns).unwrap_or(&empty), &labels_of(p))
                    && pod_hash(p, HASH, &name).is_some()
                    && active(p)
                    && consistent(p, &ss)
            })
            .collect();
        let updated = |p: &Value| pod_hash(p, HASH, &name).is_some_and(|h| hashes.contains(&h));
        // As Kruise's calculateStatus: Ready, its sidecars running what the spec says,
        // and no hot upgrade half done.
        let available = |p: &Value| ready(p) && !restarting(p, &ss) && !hot::upgrading(p, &ss);
        // Each matched Pod's (Pod, updated, available), worked out once: both parse
        // annotations, and every reconcile counts every matched Pod.
        let facts: Vec<(&Value, bool, bool)> = matched.iter().map(|p| (*p, updated(p), available(p))).collect();
        // Kruise records the version before it counts (its status names the revision).
        let (latest_revision, collision_count) = revision::record(ctx, req, &ss, &matched)?;
        let mut status = SidecarSetStatus {
            observed_generation: ss.metadata.generation,
            latest_revision: latest_revision.clone(),
            collision_count,
            matched_pods: matched.len() as i32,
            updated_pods: facts.iter().filter(|f| f.1).count() as i32,
            ready_pods: facts.iter().filter(|f| f.2).count() as i32,
            updated_ready_pods: facts.iter().filter(|f| f.1 && f.2).count() as i32,
        };
        keep_not_update_ready_counts(&ss, &mut status);
        if ss.status.as_ref() != Some(&status) {
            let mut next = ss.clone();
            next.status = Some(status);
            match ctx.update_status_obj(&next) {
                // Deleted since the host read it: nothing left to count or roll.
                Err(e) if e.is_not_found() => return Ok(Action::done()),
                Err(e) => return Err(e.into()),
                Ok(_) => {}
            }
        }

        let s = &ss.spec.update_strategy;
        if s.type_.as_deref() == Some(NOT_UPDATE) || s.paused {
            return Ok(Action::done());
        }
        // A hot upgrade finishes before anything else moves (Kruise's order).
        if flip_finished(ctx, req, &ss, &matched)? {
            return Ok(Action::done());
        }
        let total = matched.len() as i32;
        let max_unavailable =
            s.max_unavailable.as_ref().map_or(1, |v| scaled(v, total, true).clamp(0, i64::from(total)));
        // Only Pods already updated and not (yet) available again count against
        // maxUnavailable, so 0 updates no Ready Pod, and a Pod that was unavailable
        // anyway costs nothing.
        let mut unavailable = facts.iter().filter(|f| f.1 && !f.2).count() as i64;
        // Pods waiting for this version (not updated, picked by the update selector);
        // of those, the ones whose sidecars changed beyond their images cannot be
        // updated in place (Kruise's IsSidecarSetUpgradable) and are only marked so.
        let (candidates, stuck): (Vec<&Value>, Vec<&Value>) = facts
            .iter()
            .filter(|f| !f.1)
            .map(|f| f.0)
            .filter(|p| s.selector.as_ref().is_none_or(|sel| scope::matches(sel, &labels_of(p))))
            .partition(|p| pod_hash(p, HASH_WITHOUT_IMAGE, &name).is_some_and(|h| hashes_wo.contains(&h)));
        let now = upgradable::now();
        let mut writes = 0;
        let mut marked_stuck = 0;
        for p in &stuck {
            if writes == WRITES_PER_RECONCILE {
                break;
            }
            let Some(p) = pods::whole(ctx, p)? else { continue };
            if upgradable::mark(ctx, &p, &name, false, &now)?.is_some() {
                writes += 1;
                marked_stuck += 1;
            }
        }
        if marked_stuck > 0 {
            let msg = format!(
                "in-place update found {marked_stuck} Pod(s) whose sidecars changed beyond their images; they keep the old sidecars until recreated"
            );
            ctx.event(&req.object, "NotUpgradablePods", &msg);
        }
        // Not-ready Pods first (updating them costs no availability), then Kruise's
        // order, priority and scatter rules (`order`).
        // As Kruise's IsSidecarSetUpgradable: a Pod with a sidecar still restarting from
        // the last update waits for it.
        let mut candidates: Vec<&Value> = candidates.into_iter().filter(|p| !mid_update(p, &ss)).collect();
        order::sort(&mut candidates, &matched, s);
        // As Kruise's calculateUpgradeCount: the partition is how many of the Pods
        // waiting for this version keep the old one, the last in that order.
        candidates.truncate(candidates.len().saturating_sub(partition(s.partition.as_ref(), total)));
        let mut done: Vec<String> = Vec::new();
        let mut more = false;
        for p in candidates {
            let costs_availability = ready(p);
            if costs_availability && unavailable >= max_unavailable {
                break;
            }
            if writes >= WRITES_PER_RECONCILE {
                more = true;
                break;
            }
            let whole = match pods::whole(ctx, p) {
                Ok(Some(w)) => w,
                // Changed since the list: its event brings another reconcile.
                Ok(None) => continue,
                Err(e) => {
                    report(ctx, req, &done);
                    return Err(e.into());
                }
            };
            if costs_availability {
                unavailable += 1;
            }
            // The condition first (Kruise writes it after, with a patch): the spec
            // update then starts from the Pod as written, and the kubelet's status
            // report that the update sets off cannot conflict with it.
            let written = match upgradable::mark(ctx, &whole, &name, true, &now) {
                Ok(w) => w,
                Err(e) => {
                    report(ctx, req, &done);
                    return Err(e.into());
                }
            };
            writes += usize::from(written.is_some());
            let mut pod = written.unwrap_or(whole);
            let changed = set_images(&mut pod, &ss, &name);
            inplace::record(&mut pod, &name, &hash, &changed, &now);
            set_pod_hash(&mut pod, HASH, &name, &hash, latest_revision.as_deref());
            // As Kruise's updatePodSidecarAndHash: patchPodMetadata applies again.
            if let Some(a) = pod["metadata"]["annotations"].as_object_mut() {
                crate::patch::apply(a, &ss.spec.patch_pod_metadata)
                    .map_err(|e| ReconcileError::permanent(format!("spec.patchPodMetadata: {e}")))?;
            }
            // What was updated before a failure is still reported.
            if let Err(e) = ctx.update(&pod) {
                report(ctx, req, &done);
                return Err(e.into());
            }
            writes += 1;
            let who = ObjectRef::of_json(&pod).unwrap_or_else(|| req.object.clone());
            done.push(format!("{}/{}", who.namespace.unwrap_or_default(), who.name));
        }
        report(ctx, req, &done);
        // The rest in the next reconcile (the updated Pods' events bring one anyway).
        Ok(if more { Action::requeue(std::time::Duration::from_secs(1)) } else { Action::done() })
    }
}

/// Writes (Pod updates, and Pod condition writes) one reconcile makes at most; the rest
/// wait for the next. A Pod's first in-place update is two writes (its
/// `SidecarSetUpgradable` condition, then the Pod), later ones one. Why: each is a request, and a
/// reconcile must end well inside the host's deadline (30 s by default) even when the
/// apiserver is slow: 200 at 50 ms each is 10 s. A rollout of 2,000 Pods in one
/// reconcile ran past it and was retried with backoff.
const WRITES_PER_RECONCILE: usize = 200;

/// One Event for the Pods a reconcile updated (one per Pod flooded the Event budget
/// of a call, 100, at a 500-Pod rollout, and cost a request each).
fn report(ctx: &Context<'_>, req: &Request, done: &[String]) {
    let message = match done {
        [] => return,
        [one] => format!("updated sidecar images of Pod {one}"),
        many if many.len() <= 10 => format!("updated sidecar images of {} Pods: {}", many.len(), many.join(", ")),
        many => format!(
            "updated sidecar images of {} Pods: {} and {} more",
            many.len(),
            many[..10].join(", "),
            many.len() - 10
        ),
    };
    ctx.event(&req.object, "SidecarUpdated", &message);
}

/// An int, or a percentage of `total` rounded up or down (Kubernetes'
/// `GetScaledValueFromIntOrPercent`), not clamped. A percentage over 100 is valid (as in
/// Kruise) and counts as all of `total`, even one too large for any integer (where
/// Kruise is undefined: its float-to-int conversion overflows, to 0 on amd64 for a
/// partition, and its maxUnavailable parse fails, reading 0). A string that is not a
/// percentage (refused by the webhook) counts as 0, as in Kruise.
fn scaled(v: &IntOrString, total: i32, round_up: bool) -> i64 {
    match v {
        IntOrString::Int(i) => i64::from(*i),
        IntOrString::String(s) => {
            let Some(digits) = s.strip_suffix('%').filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
            else {
                return 0;
            };
            // Anything over 100 % is all of them; capping keeps the product in range.
            let pct = digits.parse::<i64>().unwrap_or(i64::MAX).min(1_000);
            let up = if round_up { 99 } else { 0 };
            (i64::from(total) * pct + up) / 100
        }
    }
}

/// How many of the Pods waiting for the new version keep the old one (Kruise >= 1.8's
/// `CalculatePartitionReplicas`): a percentage rounds up, so any partition above 0 %
/// keeps at least one Pod, but one below "100%" that rounds to every Pod keeps all but
/// one, so such a rollout still moves; clamped to [0, total].
fn partition(v: Option<&IntOrString>, total: i32) -> usize {
    let Some(v) = v else { return 0 };
    let mut keep = scaled(v, total, true);
    if total > 1 && keep == i64::from(total) && matches!(v, IntOrString::String(s) if s != "100%") {
        keep -= 1;
    }
    keep.clamp(0, i64::from(total)) as usize
}

/// Sets the images of this SidecarSet's containers in the Pod's spec (for a
/// hot-upgraded sidecar, into the idle one of its pair: `hot::upgrade`); the names of
/// the containers whose image changed.
fn set_images(pod: &mut Value, ss: &SidecarSet, set: &str) -> Vec<String> {
    let version = ss.metadata.resource_version.as_deref().unwrap_or("");
    let mut changed = Vec::new();
    for sc in &ss.spec.containers {
        if hot::is_hot(sc) {
            changed.extend(hot::upgrade(pod, sc, set, version));
            continue;
        }
        let Some(c) = pod["spec"]["containers"]
            .as_array_mut()
            .and_then(|cs| cs.iter_mut().find(|c| c["name"] == sc.container.name.as_str()))
        else {
            continue;
        };
        let image = serde_json::json!(sc.container.image);
        if c["image"] != image {
            changed.push(sc.container.name.clone());
            c["image"] = image;
        }
    }
    changed
}

/// Kruise's step 5: Pods whose hot upgrade runs (the new container consistent, the
/// Pod ready but for the idle containers) get the old one of each pair set to the
/// empty image. True when some Pod was written: the rollout goes on after their
/// events, as in Kruise.
fn flip_finished(
    ctx: &Context<'_>,
    req: &Request,
    ss: &SidecarSet,
    matched: &[&Value],
) -> Result<bool, ReconcileError> {
    if !ss.spec.containers.iter().any(hot::is_hot) {
        return Ok(false);
    }
    let set = ss.metadata.name.as_deref().unwrap_or("");
    let (hash, _) = current_hashes(ss);
    let now = upgradable::now();
    let mut done = Vec::new();
    for p in matched {
        if done.len() == WRITES_PER_RECONCILE {
            break;
        }
        let idle = hot::idle(p, ss);
        let all = hot::names_in_pod(ss);
        let running: BTreeSet<&str> = all.iter().filter(|n| !idle.contains(*n)).map(String::as_str).collect();
        if !hot::upgrading(p, ss) || !inplace::consistent(p, set, &running) || !hot::ready_to_flip(p, ss, ready(p)) {
            continue;
        }
        let Some(mut pod) = pods::whole(ctx, p)? else { continue };
        let changed = hot::flip(&mut pod, ss);
        inplace::record(&mut pod, set, &hash, &changed, &now);
        ctx.update(&pod)?;
        let who = ObjectRef::of_json(&pod).unwrap_or_else(|| req.object.clone());
        done.push(format!("{}/{}", who.namespace.unwrap_or_default(), who.name));
    }
    if !done.is_empty() {
        let msg = format!(
            "reset the idle sidecar of a hot upgrade to the empty image in {} Pod(s): {}",
            done.len(),
            done.join(", ")
        );
        ctx.event(&req.object, "ResetContainerSucceed", &msg);
    }
    Ok(!done.is_empty())
}

/// A NotUpdate set's ready counts, as Kruise shows them: its Pod event handler skips
/// NotUpdate sets when a Pod changes (`updatePod` in `sidecarset_pod_event_handler.go`),
/// so their counts are taken when the set changes or a Pod is created, not when a Pod
/// becomes ready, and Kruise's e2e spec "inject pod sidecar with canary sidecarSet"
/// asserts exactly that (ready 0 beside matched 2). Here the same: while the set's
/// generation and its numbers of matched and updated Pods stay as last counted, the
/// ready counts stay as last written; matched and updated counts are always current.
/// Such a set never takes a Pod down, so nothing here waits on its ready counts.
fn keep_not_update_ready_counts(ss: &SidecarSet, status: &mut SidecarSetStatus) {
    if ss.spec.update_strategy.type_.as_deref() != Some(NOT_UPDATE) {
        return;
    }
    let Some(last) = ss.status.as_ref() else { return };
    let same = |l: &SidecarSetStatus| (l.observed_generation, l.matched_pods, l.updated_pods);
    if same(last) == same(status) {
        status.ready_pods = last.ready_pods;
        status.updated_ready_pods = last.updated_ready_pods;
    }
}
