//! Warm instances for admission reviews: an instance that answered a review cleanly
//! is parked and serves the next review of the same plugin version, instead of a fresh
//! instance per review.
//!
//! Why only reviews: a webhook sits in the apiserver's request path for every object
//! it matches, so its per-call cost is the cluster's write latency; a fresh instance
//! (instantiation, and the page faults of a new linear memory) was about a third of the
//! host's CPU per SidecarSet injection (BENCHMARKS.md, fifth pass). Reconciles run off
//! the request path and keep a fresh instance per call.
//!
//! Guarantees: a parked instance serves only the plugin it was made for (plugins loaded
//! from the same bytes share compiled code, never instances), the same code (a tier-up
//! or a new version parks anew), the same settings and the same limits; it is parked
//! only after a call
//! that returned normally (a trap, a timeout or a host error drops it, as before); it
//! is replaced after `Limits::reviews_per_instance` reviews, which bounds what a leak
//! in the plugin can accumulate; an instance that grew past an eighth of its plugin's
//! share of the memory budget is dropped instead of parked, and a call that finds no
//! room in the budget drops its plugin's idle instances first (see `budget`). Per-call budgets (logs, Events, output, deadline,
//! fuel) start afresh on every call. Caveat: the plugin's own memory persists between
//! the reviews one instance serves, as in any long-running webhook server; a plugin
//! ConfigMap annotated `wasmop.io/reviews-per-instance: "1"` gets a fresh instance
//! per review.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use wasmtime::Store;
use wasmtime::component::Instance;

use super::Limits;
use super::host::HostState;
use super::tiers::Code;

/// Idle instances kept per compiled plugin (shared by the plugins loaded from the same
/// bytes). Why 4: reviews rarely wait inside a call, so a busy webhook on a few cores
/// has about that many in flight.
const PER_PLUGIN: usize = 4;

/// Idle instances the whole host keeps, and so the pool slots set aside for them. Why
/// 16: each holds the linear memory its reviews touched and a slot of the pooling
/// allocator, so a host serving many webhook plugins keeps only the busiest warm.
pub(super) const HOST_WIDE: usize = 16;

/// An instance between two reviews.
pub(super) struct Warm {
    pub code: Arc<Code>,
    pub store: Store<HostState>,
    pub instance: Instance,
    pub settings: String,
    pub limits: Limits,
    /// Reviews served so far.
    pub served: u32,
}

/// A plugin version's idle instances. Cheap to clone; clones share the instances, and
/// they go when the last clone of the plugin version does.
#[derive(Clone, Default)]
pub(super) struct Idle(Arc<Mutex<Vec<Parked>>>);

/// A parked instance, counted in the host-wide total while it lives.
struct Parked {
    warm: Option<Warm>,
    count: Arc<AtomicUsize>,
}

impl Drop for Parked {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Idle {
    /// The most recently parked instance fit to serve a call of `plugin` running `code`
    /// under `settings` and `limits`. Instances of other code (after a tier-up) are
    /// dropped on the way.
    pub fn take(&self, plugin: &str, code: &Arc<Code>, settings: &str, limits: &Limits) -> Option<Warm> {
        let mut idle = self.0.lock().unwrap();
        idle.retain(|p| p.warm.as_ref().is_some_and(|w| Arc::ptr_eq(&w.code, code)));
        let fits = |w: &Warm| &*w.store.data().plugin == plugin && w.settings == settings && w.limits == *limits;
        let i = idle.iter().rposition(|p| p.warm.as_ref().is_some_and(fits))?;
        idle.remove(i).warm.take()
    }

    /// Drops `plugin`'s idle instances (not those of other plugins loaded from the
    /// same bytes), giving their memory back to the budget.
    pub fn clear(&self, plugin: &str) {
        self.0.lock().unwrap().retain(|p| p.warm.as_ref().is_some_and(|w| &*w.store.data().plugin != plugin));
    }

    /// Parks `warm` for the next call, unless it has served its share or the host-wide
    /// `count` is full. Past the per-version cap the least recently parked instance
    /// goes: it may be one nothing asks for any more (its plugin's settings changed).
    pub fn park(&self, warm: Warm, count: &Arc<AtomicUsize>) {
        if warm.served >= warm.limits.reviews_per_instance {
            return;
        }
        let mut idle = self.0.lock().unwrap();
        if idle.len() >= PER_PLUGIN {
            idle.remove(0);
        }
        if count.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n < HOST_WIDE).then_some(n + 1)).is_err() {
            return;
        }
        idle.push(Parked { warm: Some(warm), count: count.clone() });
    }
}
