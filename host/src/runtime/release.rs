//! Where a finished call's instance goes: a big one is dropped off the async runtime's
//! threads.
//!
//! Why: dropping a Store gives its linear memory back to the kernel (munmap for the
//! baseline tier, the pooling allocator's reset for the optimized one), and the kernel
//! frees every page the guest touched: milliseconds for a memory of a hundred MiB. On
//! the thread that runs reviews, every review queued behind that drop waits for it;
//! under a flood of calls that each fill 120 MiB (`scripts/bench-abuse.py`, `grab`),
//! such drops were the healthy plugin's tail.
//!
//! Flow: every call holds its Store in an [`Owned`]; when it goes (the call ended,
//! failed, trapped or timed out) a Store holding more than [`OFF_THREAD`] of the memory
//! budget is moved to a blocking thread and dropped there; smaller ones, the common
//! case, are dropped in place, where a thread hop would cost more than the drop.
//! Guarantees: the budget's bytes come back when the drop is done, wherever it runs,
//! so a waiting call is woken by the real release, never before it. Caveat: the
//! blocking thread shares the host's cores; the kernel time-slices it with the runtime
//! threads instead of the runtime thread stalling for the whole drop.

use std::ops::{Deref, DerefMut};
use wasmtime::Store;

use super::host::HostState;

/// Budget bytes above which a Store is dropped on a blocking thread. Why 16 MiB: a
/// healthy review's instance holds 1–3 MiB (dropped in place in a few µs, less than a
/// thread hop); a reconcile over thousands of objects holds tens of MiB.
const OFF_THREAD: usize = 16 << 20;

/// A call's Store, dropped off the runtime's threads when it is big (see the module).
pub(super) struct Owned(Option<Store<HostState>>);

impl Owned {
    pub fn new(store: Store<HostState>) -> Self {
        Owned(Some(store))
    }

    /// The Store itself, to be parked for the next review (see `warm`).
    pub fn into_inner(mut self) -> Store<HostState> {
        self.0.take().expect("an Owned holds its Store until it is dropped")
    }
}

impl Deref for Owned {
    type Target = Store<HostState>;
    fn deref(&self) -> &Self::Target {
        self.0.as_ref().expect("an Owned holds its Store until it is dropped")
    }
}

impl DerefMut for Owned {
    fn deref_mut(&mut self) -> &mut Self::Target {
        self.0.as_mut().expect("an Owned holds its Store until it is dropped")
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        let Some(store) = self.0.take() else { return };
        if store.data().limits.charge.bytes() <= OFF_THREAD {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            // If the runtime is shutting down the closure, and the Store with it, is
            // dropped right here instead: the same as without this module.
            Ok(rt) => drop(rt.spawn_blocking(move || drop(store))),
            Err(_) => drop(store),
        }
    }
}
