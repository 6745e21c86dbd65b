//! Frees a big instance's memory off the async runtime's threads.
//!
//! Why: dropping a Store unmaps its linear memories (or, in the pooling allocator of
//! optimized code, decommits them: the same page work), and unmapping 120 MiB that a
//! guest touched takes the kernel 12–16 ms here (BENCHMARKS.md, issue 18, fourth part:
//! `mmap`, touch every page, `close`). On a runtime thread that is 12–16 ms in which no
//! other call, review or watch event is served: one hostile plugin whose calls fill
//! their memory and fault stalls every healthy plugin's reviews once per call.
//!
//! Flow: a call's Store lives in a [`Freed`] with the call's host-wide slot; when it is
//! dropped (the call ended, was timed out, or faulted) and holds more than [`BIG`] of
//! the memory budget, the Store goes to a blocking thread to be freed there (or, on a
//! niced aside thread, is freed in place). The
//! instance and its memories go first (`Store::into_data`), then its budget charge
//! (in the Store's data) and the slot: the budget does not count the memory as free,
//! nor the instance pool the instance's place, before they are. (A plain drop of a
//! Store drops its data, and with it the charge, before its memories.)
//!
//! Caveats: on a host confined to one core the blocking thread still competes for that
//! core, but as a thread the kernel preempts at its next tick rather than a task that
//! holds a runtime thread to the end (a call that went aside frees in place on its
//! niced thread, `aside`); outside a runtime (unit tests) the drop is inline.

use std::ops::{Deref, DerefMut};
use tokio::sync::OwnedSemaphorePermit;
use wasmtime::Store;

use super::host::HostState;

/// What a Store may hold of the budget and still be dropped in place: about 2 ms of
/// unmapping if the 120 MiB figure scales with size (not measured at 16 MiB).
const BIG: usize = 16 << 20;

/// A call's Store and host-wide slot, freed on a blocking thread when the Store holds
/// more than [`BIG`].
pub(super) struct Freed(Option<Store<HostState>>, Option<OwnedSemaphorePermit>);

impl Freed {
    pub(super) fn new(store: Store<HostState>, slot: OwnedSemaphorePermit) -> Self {
        Freed(Some(store), Some(slot))
    }

    /// The Store itself, to be kept (parked as a warm instance) rather than dropped;
    /// the slot is given back.
    pub(super) fn keep(mut self) -> Store<HostState> {
        self.0.take().expect("a Freed holds its Store until dropped or kept")
    }
}

impl Deref for Freed {
    type Target = Store<HostState>;
    fn deref(&self) -> &Store<HostState> {
        self.0.as_ref().expect("a Freed holds its Store until dropped or kept")
    }
}

impl DerefMut for Freed {
    fn deref_mut(&mut self) -> &mut Store<HostState> {
        self.0.as_mut().expect("a Freed holds its Store until dropped or kept")
    }
}

impl Drop for Freed {
    fn drop(&mut self) {
        let (Some(store), slot) = (self.0.take(), self.1.take()) else { return };
        let big = store.data().limits.charge.bytes() > BIG;
        let free = move || {
            drop(store.into_data());
            drop(slot);
        };
        // On an aside thread the free is niced already: done in place (`aside`).
        match tokio::runtime::Handle::try_current() {
            Ok(rt) if big && !super::aside::on_aside_thread() => drop(rt.spawn_blocking(move || {
                let _named = crate::thread_name::Named::now(c"wasmop-free");
                free()
            })),
            _ => free(),
        }
    }
}
