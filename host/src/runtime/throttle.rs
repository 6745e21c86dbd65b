//! Runaway compute: the epoch callback that, once a call has computed for its
//! allowance, holds it to about a tenth of a thread until its deadline.
//!
//! What counts is the guest's own compute, measured in the thread CPU time it used
//! between being resumed after one tick and reaching the next, when it made no host
//! call in between. A reconcile that makes thousands of host calls (each one an
//! apiserver round trip) is never held back, nor one that computes over the many
//! objects it read ([`allowance`]); a loop that calls nothing is.
//!
//! Why CPU time and not wall time: a call that moved to the niced aside threads
//! (`aside`) on a busy machine is descheduled for most of each tick. Counted by the
//! wall clock, such gaps had to be thrown away (they were not all compute), and a
//! loop spinning for a second on a busy two-core CI machine was never found out
//! (CI, 2026-12-05). The thread's own clock counts what it ran and nothing else.
//!
//! Caveats: a loop that makes a host call every tick is not counted, and one that
//! reads much data earns time to spin; its deadline still ends it, and while other
//! calls are busy it takes turns (`Cpu::pace`). A segment that resumed on one thread
//! and ticked on another (it cannot, short of a host call, but the runtime does not
//! promise it) is not counted either.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use super::cpu::{Cpu, Meter, thread_cpu, thread_key};
use super::host::HostState;

/// Guest compute a call may do at full speed before any data: a healthy review or
/// reconcile of a few objects computes for well under that; only runaway code gets
/// here.
const FULL_SPEED: Duration = Duration::from_millis(100);
/// And per MiB handed to and from the guest (the call's object or review, and what
/// its host calls read, sent and got back): work on data grows with the data, which a
/// reconcile parses, filters, sorts and rewrites. Measured: a SidecarSet reconcile
/// over 2,000 Pods with nothing to update takes 0.28–0.45 s in all; at 100 ms flat
/// such reconciles were held to a tenth of a thread, and a 2,000-Pod rollout took
/// 227 s instead of 45–53 s (BENCHMARKS.md, issue 26, last part).
const FULL_SPEED_PER_MIB: Duration = Duration::from_millis(100);
/// What a runaway call sleeps per tick after that: it keeps at most ~10 % of a thread
/// until its deadline, so spinning plugins cannot starve healthy ones of CPU.
const THROTTLE_SLEEP: Duration = Duration::from_millis(90);

/// Compute at full speed for a call that was handed `bytes` (see `HostState::exchanged`).
fn allowance(bytes: u64) -> Duration {
    FULL_SPEED + FULL_SPEED_PER_MIB.mul_f64(bytes as f64 / (1 << 20) as f64)
}

type Wait = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The epoch callback of one call: yield to the async runtime on every tick (taking
/// turns while short calls are busy, see `Cpu::pace`); once the call has computed for
/// its [`allowance`], also sleep [`THROTTLE_SLEEP`].
pub(super) fn throttle(
    plugin: Arc<str>,
    cpu: Arc<Cpu>,
    meter: Arc<Meter>,
) -> impl FnMut(wasmtime::StoreContextMut<'_, HostState>) -> wasmtime::Result<wasmtime::UpdateDeadline> + Send + Sync + 'static
{
    let mut compute = Compute::new();
    let mut throttled = false;
    move |store| {
        let (made, exchanged) = (store.data().host_calls, store.data().exchanged);
        let computed = compute.tick(made);
        if computed < allowance(exchanged) {
            let wait: Wait = match cpu.pace(&meter) {
                Some(turn) => turn,
                None => Box::pin(YieldOnce(false)),
            };
            return Ok(wasmtime::UpdateDeadline::YieldCustom(1, compute.resume_after(wait)));
        }
        if !throttled {
            throttled = true;
            tracing::debug!(plugin = %plugin, ?computed, exchanged, "plugin call throttled: runaway compute");
            let l = crate::metrics::labels(&[("plugin", &plugin)]);
            crate::metrics::METRICS.throttled.get_or_create(&l).inc();
        }
        Ok(wasmtime::UpdateDeadline::YieldCustom(1, Box::pin(tokio::time::sleep(THROTTLE_SLEEP))))
    }
}

/// Where and when a call was resumed: its thread and that thread's CPU clock.
#[derive(Clone, Copy)]
struct Mark {
    thread: usize,
    cpu: Duration,
}

impl Mark {
    fn here() -> Self {
        Mark { thread: thread_key(), cpu: thread_cpu() }
    }
}

/// A call's own compute so far: the thread CPU time of each stretch from a resume to
/// the next tick with no host call in it.
struct Compute {
    resumed: Arc<Mutex<Option<Mark>>>,
    calls: u64,
    total: Duration,
}

impl Compute {
    /// Marked here: the call starts computing on this thread.
    fn new() -> Self {
        Compute { resumed: Arc::new(Mutex::new(Some(Mark::here()))), calls: 0, total: Duration::ZERO }
    }

    /// At a tick, with `calls` host calls made so far: the compute in all.
    fn tick(&mut self, calls: u64) -> Duration {
        let now = Mark::here();
        if let Some(from) = self.resumed.lock().unwrap().take()
            && from.thread == now.thread
            && calls == self.calls
        {
            self.total += now.cpu.saturating_sub(from.cpu);
        }
        self.calls = calls;
        self.total
    }

    /// `wait`, then a mark on the thread that resumes the call: what runs on that
    /// thread meanwhile (other tasks) is not the call's.
    fn resume_after(&self, wait: Wait) -> Wait {
        let resumed = self.resumed.clone();
        Box::pin(async move {
            wait.await;
            *resumed.lock().unwrap() = Some(Mark::here());
        })
    }
}

/// Pending once, then ready: what wasmtime's own `Yield` does, so a call not held back
/// lets the runtime's other tasks run at each tick.
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Computes until this thread has run for `d`, however busy the machine.
    fn spin(d: Duration) {
        let t = thread_cpu();
        while thread_cpu() - t < d {
            std::hint::spin_loop();
        }
    }

    #[test]
    fn compute_counts_what_the_thread_ran_and_not_its_waits() {
        let mut c = Compute::new();
        spin(Duration::from_millis(30));
        let first = c.tick(0);
        assert!(first >= Duration::from_millis(30), "30 ms of spinning counted {first:?}");
        // A stretch that slept: off the CPU, so it adds (next to) nothing.
        *c.resumed.lock().unwrap() = Some(Mark::here());
        std::thread::sleep(Duration::from_millis(30));
        let slept = c.tick(0) - first;
        assert!(slept < Duration::from_millis(5), "30 ms asleep counted {slept:?}");
    }

    #[test]
    fn a_stretch_with_a_host_call_or_without_a_resume_mark_is_not_compute() {
        let mut c = Compute::new();
        spin(Duration::from_millis(20));
        assert_eq!(c.tick(1), Duration::ZERO, "a host call was made in the stretch");
        // No resume mark (the wait has not finished): nothing to count from.
        spin(Duration::from_millis(20));
        assert_eq!(c.tick(1), Duration::ZERO);
    }

    #[test]
    fn a_stretch_resumed_on_another_thread_is_not_counted() {
        let mut c = Compute::new();
        let resumed = c.resumed.clone();
        std::thread::spawn(move || {
            spin(Duration::from_millis(20));
            *resumed.lock().unwrap() = Some(Mark::here());
        })
        .join()
        .unwrap();
        assert_eq!(c.tick(0), Duration::ZERO);
    }

    #[tokio::test]
    async fn the_resume_mark_is_set_when_the_wait_ends() {
        let c = Compute::new();
        c.resumed.lock().unwrap().take();
        let wait = c.resume_after(Box::pin(YieldOnce(false)));
        assert!(c.resumed.lock().unwrap().is_none());
        wait.await;
        assert!(c.resumed.lock().unwrap().is_some());
    }
}
