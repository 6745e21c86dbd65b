//! One reconcile worker of a plugin's controller: takes keys from the queue, calls the
//! plugin's current version for each, and requeues per the answer.
//!
//! Flow: a key from [`Queue::next`] → the plugin acting as its own identity through a
//! [`Gateway`] (cached reads, own writes recorded) → the runtime's reconcile → metrics,
//! and then one of: requeue after `requeue-after` (never below the host's minimum), a
//! backoff on a retryable error or a fault (with a Warning Event on the object), or
//! nothing.
//!
//! Guarantees: a key is marked done only after its reconcile ended, with the cool-down
//! `pace` gives it, so one key never runs twice at once. Caveat: a conflict on a stale
//! resourceVersion is routine with cached reads, so it retries without a Warning Event.

use super::backoff::Backoff;
use super::controller::Shared;
use super::queue::Queue;
use crate::gateway::{Backend, EventType, Gateway, ObjectRef, OwnWrites};
use crate::metrics::{METRICS, labels};
use crate::registry::Handle;
use std::sync::{Arc, Mutex};
use std::time::Instant;

type Cache = crate::gateway::ObjectCache;

pub(super) struct Worker {
    pub(super) handle: Handle,
    pub(super) shared: Arc<Shared>,
    pub(super) queue: Arc<Queue<ObjectRef>>,
    pub(super) cache: Cache,
    pub(super) backoff: Arc<Mutex<Backoff<ObjectRef>>>,
    /// Where reconciles record their writes to their primary (see [`OwnWrites`]).
    pub(super) own: Option<Arc<OwnWrites>>,
}

impl Worker {
    pub(super) async fn run(self) {
        while let Some(key) = self.queue.next().await {
            let plugin = self.handle.load().name.clone();
            METRICS.queue_depth.get_or_create(&labels(&[("plugin", &plugin)])).set(self.queue.depth() as i64);
            let started = Instant::now();
            let acted = self.reconcile(&key).await;
            self.queue.done(&key, super::pace::cooldown(started.elapsed(), acted, self.shared.reconcile_share));
        }
    }

    /// Reconciles `key`; true if the reconcile changed objects other than `key` (a step
    /// whose successor should not wait, see [`super::pace`]).
    async fn reconcile(&self, key: &ObjectRef) -> bool {
        let plugin = self.handle.load_full();
        let current = self.cache.lock().unwrap().get(key).cloned();
        let current_text = current.as_ref().map(|c| &*c.text);
        let backend: Arc<dyn Backend> = match self.shared.kube.for_identity(plugin.identity.as_ref()) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(plugin = %plugin.name, object = %key, "cannot act as the plugin: {e}");
                let delay = self.backoff.lock().unwrap().fail(key);
                self.queue.add_after(key.clone(), delay);
                return false;
            }
        };
        let gateway = Gateway::new(&plugin.name, plugin.permissions.clone(), backend)
            .with_cache(self.shared.caches.get(&plugin.name, plugin.identity.as_ref()))
            .reconciling(key.clone(), self.own.clone());
        let started = Instant::now();
        let result = self
            .shared
            .runtime
            .reconcile(&plugin.compiled, gateway.clone(), key, current_text, &plugin.settings, &plugin.limits)
            .await;
        let elapsed = started.elapsed();
        let p = plugin.name.as_str();
        METRICS.reconcile_seconds.get_or_create(&labels(&[("plugin", p)])).observe(elapsed.as_secs_f64());
        // A retryable failure straight after a write refused for a stale
        // resourceVersion: routine with cached reads, so no Warning Event and no warning.
        let conflict = matches!(&result, Ok(Err(e)) if e.retry && gateway.ended_in_conflict());
        let outcome = match &result {
            Ok(Ok(_)) => "ok",
            Ok(Err(_)) if conflict => "conflict",
            Ok(Err(_)) => "error",
            Err(_) => "fault",
        };
        METRICS.reconciles.get_or_create(&labels(&[("plugin", p), ("result", outcome)])).inc();
        match result {
            Ok(Ok(action)) => {
                self.backoff.lock().unwrap().reset(key);
                tracing::debug!(plugin = %plugin.name, object = %key, ?elapsed, requeue = ?action.requeue_after, "reconciled");
                if let Some(asked) = action.requeue_after {
                    let after = asked.max(self.shared.min_requeue);
                    if after > asked {
                        tracing::debug!(plugin = p, object = %key, ?asked, ?after, "requeue-after below the minimum");
                    }
                    self.queue.add_after(key.clone(), after);
                }
            }
            Ok(Err(e)) => {
                let message = crate::gateway::truncate(&e.message, 4096);
                if conflict {
                    tracing::info!(plugin = %plugin.name, object = %key, "reconcile hit a conflict, retrying: {message}");
                } else {
                    tracing::warn!(plugin = %plugin.name, object = %key, retry = e.retry, "reconcile failed: {message}");
                }
                if current.is_some() && !conflict {
                    gateway.report(key, EventType::Warning, "ReconcileFailed", &e.message).await;
                }
                if e.retry {
                    METRICS.retries.get_or_create(&labels(&[("plugin", p)])).inc();
                    let delay = self.backoff.lock().unwrap().fail(key);
                    self.queue.add_after(key.clone(), delay);
                } else {
                    self.backoff.lock().unwrap().reset(key);
                }
            }
            Err(fault) => {
                tracing::error!(plugin = %plugin.name, object = %key, fault = fault.kind(), "plugin fault: {fault}");
                METRICS.faults.get_or_create(&labels(&[("plugin", p), ("kind", fault.kind())])).inc();
                METRICS.retries.get_or_create(&labels(&[("plugin", p)])).inc();
                if current.is_some() {
                    let msg = format!("plugin {} faulted ({}): {fault}", plugin.name, fault.kind());
                    gateway.report(key, EventType::Warning, "PluginFault", &msg).await;
                }
                let delay = self.backoff.lock().unwrap().fail(key);
                self.queue.add_after(key.clone(), delay);
            }
        }
        gateway.changed_others()
    }
}
