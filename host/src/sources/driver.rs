//! Feeds source events into the registry and reports what it refuses.

use super::{SourceEvent, bytes};
use crate::gateway::{Backend, EventType};
use crate::health::Health;
use crate::metrics::{METRICS, labels};
use crate::registry::{PluginSpec, Registry};
use std::sync::Arc;
use tokio::sync::mpsc;

/// Applies every event to `registry` until the sources close. A rejected version is
/// logged and, when it came from a cluster object, reported as a Warning Event
/// `PluginRejected` on that object; the previous version keeps serving either way.
pub async fn drive(
    registry: Arc<Registry>,
    mut rx: mpsc::Receiver<SourceEvent>,
    events: Option<Arc<dyn Backend>>,
    health: Arc<Health>,
) {
    while let Some(ev) = rx.recv().await {
        match ev {
            SourceEvent::Upsert(mut spec) => {
                let result = match bytes::decode(&spec.bytes) {
                    Ok(decoded) => {
                        spec.bytes = decoded.into();
                        registry.apply((*spec).clone()).await.map(|_| ()).map_err(|e| (e.kind(), e.to_string()))
                    }
                    Err(e) => Err(("decode", e.to_string())),
                };
                if let Err((kind, reason)) = result {
                    report(&registry, &spec, kind, &reason, events.as_deref()).await;
                }
            }
            SourceEvent::Reject { spec, kind, reason } => {
                report(&registry, &spec, kind, &reason, events.as_deref()).await
            }
            SourceEvent::Remove { name } => {
                registry.remove(&name);
            }
            SourceEvent::Synced => health.source_synced(),
        }
    }
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
