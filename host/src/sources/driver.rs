//! Feeds source events into the registry and reports what it refuses.

use super::{SourceEvent, bytes};
use crate::gateway::{Backend, EventType, Identities};
use crate::health::Health;
use crate::metrics::{METRICS, labels};
use crate::registry::{Place, PluginSpec, Registry};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// How often a version waiting for its ServiceAccount is tried again: the plugin starts
/// soon after a cluster admin applies its RBAC, without anyone touching its ConfigMap.
const IDENTITY_RETRY: Duration = Duration::from_secs(10);
/// The longest an identity check may hold up the other plugins' loads and removals.
const IDENTITY_CHECK: Duration = Duration::from_secs(10);

/// Applies every event to `registry` until the sources close. A rejected version is
/// logged and, when it came from a cluster object, reported as a Warning Event
/// `PluginRejected` on that object; the previous version keeps serving either way.
///
/// With [`Identities::ServiceAccounts`], a version is admitted only once the host may
/// act as its ServiceAccount (see [`crate::gateway::verify_identity`]); until then it
/// waits, reported once and tried again every [`IDENTITY_RETRY`]. With
/// [`Identities::Host`], plugins act as the host.
pub async fn drive(
    registry: Arc<Registry>,
    mut rx: mpsc::Receiver<SourceEvent>,
    events: Option<Arc<dyn Backend>>,
    identities: Identities,
    health: Arc<Health>,
) {
    let mut waiting: Vec<Box<PluginSpec>> = Vec::new();
    let mut retry = tokio::time::interval_at(tokio::time::Instant::now() + IDENTITY_RETRY, IDENTITY_RETRY);
    retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let ev = tokio::select! {
            ev = rx.recv() => match ev {
                Some(ev) => ev,
                None => break,
            },
            _ = retry.tick(), if !waiting.is_empty() => {
                for spec in std::mem::take(&mut waiting) {
                    match admit(&registry, &spec, &identities).await {
                        Ok(()) => {}
                        Err(("identity", _)) => waiting.push(spec),
                        Err((kind, reason)) => report(&registry, &spec, kind, &reason, events.as_deref()).await,
                    }
                }
                continue;
            }
        };
        match ev {
            SourceEvent::Upsert(spec) => {
                // A newer version replaces one still waiting.
                waiting.retain(|w| !same(w, &spec.name, spec.place()));
                if let Err((kind, reason)) = admit(&registry, &spec, &identities).await {
                    report(&registry, &spec, kind, &reason, events.as_deref()).await;
                    if kind == "identity" {
                        waiting.push(spec);
                    }
                }
            }
            SourceEvent::Reject { spec, kind, reason } => {
                waiting.retain(|w| !same(w, &spec.name, spec.place()));
                report(&registry, &spec, kind, &reason, events.as_deref()).await
            }
            SourceEvent::Remove { name, origin, origin_object } => {
                waiting.retain(|w| !same(w, &name, Place::of(&origin, origin_object.as_ref())));
                registry.remove(&name, &origin, origin_object.as_ref());
            }
            SourceEvent::Synced => health.source_synced(),
        }
    }
}

/// Whether `w` is a version of plugin `name` from `from`: the registry's own rule of
/// which place a name belongs to.
fn same(w: &PluginSpec, name: &str, from: Place<'_>) -> bool {
    w.name == name && w.place() == from
}

/// Checks the version's identity, decodes its bytes and applies it: Err(kind, reason).
async fn admit(registry: &Registry, spec: &PluginSpec, identities: &Identities) -> Result<(), (&'static str, String)> {
    let mut spec = spec.clone();
    match (identities, &spec.identity) {
        (Identities::Host, _) => spec.identity = None,
        (Identities::ServiceAccounts(kube), Some(id)) => {
            let check = crate::gateway::verify_identity(kube.client(), &spec.name, id);
            match tokio::time::timeout(IDENTITY_CHECK, check).await {
                Ok(r) => r.map_err(|e| ("identity", e))?,
                Err(_) => return Err(("identity", format!("the apiserver did not answer within {IDENTITY_CHECK:?}"))),
            }
        }
        (Identities::ServiceAccounts(_), None) => {
            return Err(("identity", "the plugin has no ServiceAccount to act as".to_owned()));
        }
    }
    spec.bytes = bytes::decode(&spec.bytes).map_err(|e| ("decode", e.to_string()))?.into();
    registry.apply(spec).await.map(|_| ()).map_err(|e| (e.kind(), e.to_string()))
}

async fn report(registry: &Registry, spec: &PluginSpec, kind: &str, reason: &str, events: Option<&dyn Backend>) {
    let serving = registry.get(&spec.name).map(|p| p.sha256.clone());
    let previous = match &serving {
        Some(sha) => format!("the previous version (sha256 {}) keeps serving", &sha[..12]),
        None => "no version of it is serving".to_owned(),
    };
    METRICS.plugin_rejections.get_or_create(&labels(&[("plugin", &spec.name), ("reason", kind)])).inc();
    tracing::error!(plugin = %spec.name, origin = %spec.origin, reason = kind, "plugin version rejected: {reason}; {previous}");
    if let (Some(events), Some(obj)) = (events, &spec.origin_object) {
        let msg = format!(
            "{}: rejected ({kind}): {reason}; {previous}",
            spec.origin.rsplit('#').next().unwrap_or(&spec.name)
        );
        events.record_event("host", obj, None, EventType::Warning, "PluginRejected", &msg).await;
    }
}
