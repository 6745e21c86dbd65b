//! Reloads compiled ahead: a new version of a webhook plugin (one that serves admission
//! handlers) whose current version already runs optimized (Cranelift) code is compiled
//! by Cranelift before it serves, at idle priority (`SCHED_IDLE`: only the CPU that
//! reconciles and reviews leave), while the current version keeps serving.
//!
//! Why: tiering (baseline code at once, Cranelift's a few seconds later, see
//! `compiling`) is right for a first load, where nothing serves until the plugin
//! does. On a reload it made the new version serve code about half as fast as the old
//! one for seconds, and then compile at full priority beside it: a SidecarSet
//! injection webhook at 5,000 reviews/s on one core fell 1.2–1.9 s behind during a
//! reload (BENCHMARKS.md, issue 23). Compiled ahead, the switch is from fast code to
//! fast code. Why only webhook plugins: a review sits in the apiserver's request path,
//! a reconcile does not; a reconcile-only plugin serves its new code within a second,
//! as on a first load, and runs slower for the seconds until its tier-up.
//!
//! Why idle priority, not a nice value: a CPU-bound thread at any nice value takes its
//! share of a busy core in whole scheduler ticks (4 ms at HZ=250), and a review that
//! arrives while the reviews' thread is over its own share waits for the tick. At nice
//! 10 a traced reload at 5,000 reviews/s showed ~85 such gaps of 4–9.5 ms per 10 s run
//! (`scripts/admission-stall-causes.py`); a controlled test (`scripts/poisson-beside.py`:
//! Poisson-arriving work at 53 % of a core beside a busy loop) put p99 at 3.5 ms beside
//! nice 10, 0.75 ms beside nice 19 and 0.55 ms beside idle priority, as with nothing
//! beside it. At that load the loop got the same 47 % of the core in every class: idle
//! priority costs the compile nothing while the core has room.
//!
//! Why only reloads: a first load's compile at low priority starved for minutes on a
//! busy machine (`compiling`); here something serves while it waits, and after
//! [`AHEAD_TIME`] it is given up on and the version loads on baseline code as a first
//! load does, tiering up at the host's priority, so a busy machine delays the new
//! version by at most that. Caveat: a 1 MB plugin's compile (3.4 s of a core) needs a
//! quarter of the core within [`AHEAD_TIME`], so on a core kept busier than about 75 %
//! it may be given up on, more often than at nice 10, which also took a tenth of the
//! core whenever others saturated it (through a reconcile burst, say).
//!
//! Idle priority was tried once before, on a day this machine ran reviews at 80 % of
//! the core beside a reconcile burst: 3 of 6 reloads missed [`AHEAD_TIME`], and as the
//! compile given up on kept the tier-up turn, each version served baseline code
//! (reviews seconds behind) until that compile ended. Now it lets the turn go; the miss
//! itself is the caveat above. Dropped for good: a yield before each function (since
//! Linux 6.6 a yield forfeits the rest of a time slice), the kernel's longest time
//! slice, and a sleep after each millisecond of the compile's CPU (BENCHMARKS.md).
//!
//! Caveat: a thread that needs a lock the idle thread holds (an allocator arena they
//! share) waits until the idle thread runs again: at once when the waiter was the
//! core's only busy thread, later when other threads keep the core busy. The trim after
//! the compile runs once its thread has ended, for that reason.
//!
//! Caveat: wasmtime cannot cancel a compile, so one given up on runs on to its end on
//! its thread (its code then goes to the compiled-code cache, if the host keeps one).
//! It gives up the tier-up turn when given up on, so the version's own tier-up does not
//! wait for it; until it ends no other reload is compiled ahead, so there is at most one
//! such compile and its memory.

use super::Registry;
use super::compiling::at_low_priority;
use crate::runtime::{Compiled, RuntimeError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a reload waits for its optimized compile (its turn included) before it
/// loads on baseline code instead. Why 15 s: Cranelift compiles a 1 MB plugin in
/// 1.3–3.4 s here, so this is past any compile on a machine that leaves a quarter of
/// a core, and an author sees the new version within it on one that has none.
pub const AHEAD_TIME: Duration = Duration::from_secs(15);

/// How a reload's compile ranks (see the module docs).
pub const AHEAD_PRIORITY: crate::runtime::Priority = crate::runtime::Priority::Idle;

impl Registry {
    /// The Cranelift code for a reload, or None if it took longer than
    /// [`AHEAD_TIME`] or an earlier one given up on still runs (the caller then
    /// compiles as for a first load). Shares the tier-up turn while it counts, so at
    /// most one Cranelift compile runs at a time beside the one given up on.
    pub(super) async fn compile_ahead(
        &self,
        digest: [u8; 32],
        line: &str,
        bytes: &Arc<[u8]>,
    ) -> Result<Option<Compiled>, RuntimeError> {
        let (rt, b, line) = (self.runtime.clone(), bytes.clone(), line.to_owned());
        self.ahead_of_time(digest, move || rt.compile_optimizing(&line, &b)).await
    }

    /// [`Registry::compile_ahead`] with the compile itself given.
    async fn ahead_of_time(
        &self,
        digest: [u8; 32],
        compile: impl FnOnce() -> Result<Compiled, RuntimeError> + Send + 'static,
    ) -> Result<Option<Compiled>, RuntimeError> {
        let sha256 = hex::encode(digest);
        let Ok(running) = self.ahead.clone().try_acquire_owned() else {
            tracing::info!(sha256 = %sha256, "an earlier reload's optimized compile still runs: loading baseline code first");
            return Ok(None);
        };
        let started = Instant::now();
        let queue = self.optimizing.clone();
        // The tier-up turn, where both the compile (when it ends) and this waiter (when
        // it gives up) can let it go.
        let turn = Arc::new(Mutex::new(None));
        let held = turn.clone();
        let compile = async move {
            *held.lock().unwrap() = Some(queue.acquire_owned().await.map_err(|_| RuntimeError::Closed)?);
            at_low_priority("wasmop-ahead", AHEAD_PRIORITY, move || {
                let c = compile();
                drop(held.lock().unwrap().take());
                drop(running);
                c
            })
            .await?
        };
        let outcome = tokio::time::timeout(AHEAD_TIME, compile).await;
        drop(turn.lock().unwrap().take());
        match outcome {
            Ok(Ok(c)) => {
                // Trimmed here, once the compile thread has ended: a trim locks each of
                // the allocator's arenas in turn, and an idle thread preempted while it
                // holds one would keep the trim waiting.
                let _ = tokio::task::spawn_blocking(crate::trim::release).await;
                tracing::info!(
                    sha256 = %sha256,
                    ms = started.elapsed().as_millis() as u64,
                    ahead = true,
                    "plugin code optimized"
                );
                Ok(Some(c))
            }
            Ok(Err(e)) => Err(e),
            Err(_) => {
                tracing::warn!(
                    sha256 = %sha256,
                    "optimized compile of a reload not done within {AHEAD_TIME:?}: loading baseline code first"
                );
                Ok(None)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{Runtime, RuntimeConfig};
    use std::sync::mpsc;

    fn registry() -> Arc<Registry> {
        Registry::new(Arc::new(Runtime::new(RuntimeConfig::default()).unwrap()))
    }

    #[tokio::test(start_paused = true)]
    async fn a_compile_given_up_on_lets_the_tier_up_turn_go_and_no_second_one_starts_beside_it() {
        let registry = registry();
        let (release, blocked) = mpsc::channel::<()>();
        let (tx, policy) = mpsc::channel();
        // A compile that outlasts AHEAD_TIME (the clock is paused: it jumps to the deadline).
        let first = registry
            .ahead_of_time([1; 32], move || {
                let _ = tx.send(crate::runtime::own_policy());
                let _ = blocked.recv();
                Err(RuntimeError::Compile("released".into()))
            })
            .await;
        assert!(matches!(first, Ok(None)), "given up on: baseline code first");
        assert_eq!(policy.recv().unwrap(), libc::SCHED_IDLE, "it ran at idle priority");
        assert!(registry.optimizing.clone().try_acquire_owned().is_ok(), "the tier-up turn is free at once");
        // While it runs on, the next reload is not compiled ahead: its compile never starts.
        let second = registry.ahead_of_time([2; 32], || panic!("a second compile ahead started")).await;
        assert!(matches!(second, Ok(None)));
        // Once it ends, reloads are compiled ahead again (on a running clock: a paused one
        // would jump past the deadline before the thread answers).
        tokio::time::resume();
        release.send(()).unwrap();
        while registry.ahead.available_permits() == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
        let third = registry.ahead_of_time([3; 32], || Err(RuntimeError::Compile("ran".into()))).await;
        let third = third.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(third.contains("ran"), "the third compile ran: {third}");
    }
}
