//! Pause points inside a Cranelift compile: before each function it compiles, the
//! compiling thread offers its core to any thread that is waiting for it.
//!
//! Why: a compile is one long run of CPU work with no blocking call in it, so once the
//! scheduler has picked it, it keeps the core until the next scheduler tick (4 ms at
//! HZ=250) even at nice 10: a review that wakes meanwhile is not allowed to preempt
//! a thread whose time slice the kernel still protects. On one core serving 5,000
//! reviews/s, a reload's compile made 85 stalls of 4–9.5 ms per 10 s run
//! (BENCHMARKS.md, issue 23). A compile that yields between functions holds the core
//! for at most one function at a time when someone waits, and loses nothing when nobody
//! does: `sched_yield` with no other runnable thread on the core returns at once. Its
//! share of a busy core is still set by its nice value, since a yield moves its place
//! in the queue, not the CPU time it is owed.
//!
//! How: wasmtime has no per-function hook, but Cranelift's incremental-compilation
//! cache asks its store for each function before compiling it. [`PausePoints`] is
//! such a store that keeps nothing: every ask yields and misses.
//!
//! Cost: to ask, Cranelift hashes each function, and it serializes each result to
//! offer it back; `host/examples/compile_time.rs` measures what that adds (BENCHMARKS.md).
//!
//! Caveat: Winch, the baseline compiler, asks no cache, so a baseline compile still runs
//! in whole ticks; it is short (about a fifth of Cranelift's) and reloads of webhook
//! plugins are compiled by Cranelift (`registry::ahead`).

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};

use wasmtime::CacheStore;

/// See the module docs. Counts its pause points, for tests and for the curious.
#[derive(Debug, Default)]
pub struct PausePoints {
    taken: AtomicU64,
}

impl PausePoints {
    /// How many functions have asked so far.
    #[cfg(test)]
    pub fn taken(&self) -> u64 {
        self.taken.load(Ordering::Relaxed)
    }
}

impl CacheStore for PausePoints {
    fn get(&self, _key: &[u8]) -> Option<Cow<'_, [u8]>> {
        self.taken.fetch_add(1, Ordering::Relaxed);
        std::thread::yield_now();
        None
    }

    fn insert(&self, _key: &[u8], _value: Vec<u8>) -> bool {
        // Keeping compiled functions would make a reload of a barely changed plugin
        // compile faster, but costs memory per plugin that nothing bounds yet.
        false
    }
}
