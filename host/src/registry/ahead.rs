//! Reloads compiled ahead: a new version of a webhook plugin (one that serves admission
//! handlers) whose current version already runs optimized (Cranelift) code is compiled
//! by Cranelift before it serves, at a lower CPU priority than reconciles and reviews,
//! while the current version keeps serving.
//!
//! Why: tiering (baseline code at once, Cranelift's a few seconds later, see
//! `compiling`) is right for a first load, where nothing serves until the plugin
//! does. On a reload it made the new version serve code about half as fast as the old
//! one for seconds, and then compile at full priority beside it: a SidecarSet
//! injection webhook at 5,000 reviews/s on one core fell 1.2–1.9 s behind during a
//! reload (BENCHMARKS.md, issue 23). Compiled ahead, the switch is from fast code to
//! fast code, and the compile takes only the CPU that reviews leave. Why only webhook
//! plugins: a review sits in the apiserver's request path, a reconcile does not; a
//! reconcile-only plugin serves its new code within a second, as on a first load, and
//! runs slower for the seconds until its tier-up.
//!
//! Why only reloads are niced: a niced compile of a first load starved for minutes on
//! a busy machine (`compiling`); here something serves while it waits, and after
//! [`AHEAD_TIME`] the version loads on baseline code as before (tiering up later), so
//! a busy machine delays the new version by at most that.
//!
//! Caveat: at nice 10 the compile takes its tenth of a busy core in whole scheduler
//! ticks (4 ms at HZ=250): a review that arrives meanwhile waits for the tick, and a
//! traced reload at 5,000 reviews/s showed ~85 such gaps of 4–9.5 ms per 10 s run
//! (`scripts/admission-stall-causes.py`, BENCHMARKS.md, issue 23). Four fixes were
//! measured and dropped: `SCHED_IDLE` and a yield before each function (Cranelift's
//! incremental-cache hook) both starved the compile past [`AHEAD_TIME`] (baseline
//! code, reviews seconds behind; since Linux 6.6 a yield forfeits the rest of a time
//! slice); the kernel's longest time slice (`sched_attr.sched_runtime`) changed
//! nothing, since reviews that use more than their share are not eligible to preempt;
//! and a sleep after each millisecond of the compile's CPU time (a per-thread timer)
//! made a nice-0 thread's wake-ups later, not earlier, beside a one-thread compile that
//! on its own delayed them by under 0.1 ms at the 99th percentile (BENCHMARKS.md).
//!
//! Caveat: wasmtime cannot cancel a compile, so one past [`AHEAD_TIME`] runs on to its
//! end on its thread, holding the tier-up turn (its code then goes to the compiled-code
//! cache, if the host keeps one, where the version's own tier-up finds it).

use super::Registry;
use super::compiling::{AHEAD_NICE, at_low_priority};
use crate::runtime::{Compiled, RuntimeError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a reload waits for its optimized compile (its turn included) before it
/// loads on baseline code instead. Why 15 s: Cranelift compiles a 1 MB plugin in
/// 1.3–3 s here, about ten times that on a core already busy at nice 0, so this is
/// past any compile on a machine that still has some CPU to spare, and an author sees
/// the new version within it on one that has none.
pub const AHEAD_TIME: Duration = Duration::from_secs(15);

impl Registry {
    /// The Cranelift code for a reload, or None if it took longer than
    /// [`AHEAD_TIME`] (the caller then compiles as for a first load). Shares the
    /// tier-up turn, so at most one Cranelift compile runs at a time.
    pub(super) async fn compile_ahead(
        &self,
        digest: [u8; 32],
        bytes: &Arc<[u8]>,
    ) -> Result<Option<Compiled>, RuntimeError> {
        let started = Instant::now();
        let (rt, b, queue) = (self.runtime.clone(), bytes.clone(), self.optimizing.clone());
        let compile = async move {
            let turn = queue.acquire_owned().await.map_err(|_| RuntimeError::Closed)?;
            at_low_priority("wasmop-ahead", AHEAD_NICE, move || {
                let _turn = turn;
                let c = rt.compile_optimizing(&b);
                crate::trim::release();
                c
            })
            .await?
        };
        match tokio::time::timeout(AHEAD_TIME, compile).await {
            Ok(Ok(c)) => {
                tracing::info!(
                    sha256 = %hex::encode(digest), ms = started.elapsed().as_millis() as u64, ahead = true,
                    "plugin code optimized"
                );
                Ok(Some(c))
            }
            Ok(Err(e)) => Err(e),
            Err(_) => {
                tracing::warn!(
                    sha256 = %hex::encode(digest),
                    "optimized compile of a reload not done within {AHEAD_TIME:?}: loading baseline code first"
                );
                Ok(None)
            }
        }
    }
}
