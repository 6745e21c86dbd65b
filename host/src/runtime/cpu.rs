//! Who gets the thread: short calls first; long ones take turns while short ones are
//! busy.
//!
//! Why: the epoch makes every call yield each tick, so a call that computes for long
//! gets one tick per turn of the async runtime's queue. Fifty concurrent reviews that
//! each fill 120 MiB then get fifty ticks for every few reviews a healthy plugin
//! answers in a fraction of a millisecond, and the healthy plugin's throughput falls
//! to a few percent. A scheduler that lets short jobs through first is the classic
//! answer (a multilevel feedback queue): a call is *short* until it has spent
//! [`LONG`] on a runtime thread, then *long* for the rest of its life.
//!
//! A call is judged by its plugin too: one that answers each review in 5 ms is no
//! short job either, however short each call, and fifty connections of them crowd out
//! a healthy plugin as surely. So each plugin keeps a running mean of its calls'
//! thread time, one per kind of call (its reviews apart from its reconciles: the
//! *work* `call.rs` names, so a plugin whose reconciles count thousands of Pods still
//! answers its quick reviews as short jobs); heavy work (mean over [`HEAVY`]) has
//! each new call take its turn in the lane before it starts, as a long call does at
//! each tick.
//!
//! Work whose calls keep faulting (trapping or running out of time) is paced harder:
//! each new call waits for its turn in the lane and then [`PACE`] before it starts,
//! however quiet the host, so such work starts at most ~11 calls a second host-wide.
//! Why: such calls fail fast (fifty concurrent reviews each refused at the
//! memory budget a millisecond in), so by thread time they pass for short jobs and
//! took the thread call for call from a healthy plugin; their work is wasted anyway.
//! A heavy plugin's useful work is not held back on a quiet host.
//!
//! Flow: every call is metered (`Metered` times each poll of its future: guest
//! compute, instantiation and the host's own work for it, never its waits). At each
//! epoch tick a long call yields once and then checks whether short calls were polled
//! within the last [`QUIET`]; if not, it runs on (an idle or long-only host runs long
//! calls at full speed). If so, it queues for the host's one *long lane* (`lane`: the
//! plugins waiting take turns) and, holding it, waits for a quiet moment for at most
//! [`PACE`] before it computes its next tick. So while short calls keep the threads
//! busy, long calls together get at most about one tick per [`PACE`] (~10 % of a
//! thread), however many there are, and each plugin waiting its share of those.
//!
//! Thread time is the polling thread's CPU clock, not the wall clock. Why: a healthy
//! review's poll that waited on a lock (the process's memory map, while an aside
//! thread unmaps a hostile call's 120 MiB) or was preempted for 10 ms counted as 10 ms
//! of compute, and the review went long: aside, and into the lane behind a flood's
//! turns, for seconds (BENCHMARKS.md, issue 18). One such poll also moved its plugin's
//! mean by an eighth of it, towards heavy. The CPU clock counts what the call ran,
//! page faults of the memory it touches included, and a wait of any kind not at all.
//!
//! Where: a call this module finds long, whose work is heavy or faulting when it is
//! admitted, or whose memory has grown by [`BIG_GROWTH`] (the limiter yields at that
//! grow), finishes on the aside threads (`aside`), which the kernel ranks below the
//! host's: the lane still decides when it computes, and the kernel preempts that tick
//! when a review wakes the host.
//!
//! Caveats: the host's work outside plugin calls (TLS, parsing a review) is not
//! metered, so the gaps between a healthy plugin's reviews can look quiet; a long
//! call keeps the memory it holds while it waits; the deadline still ends it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use super::lane::Lane;

/// Thread time after which a call is long. Why 10 ms: a healthy review or converged
/// reconcile computes for well under that (SidecarSet's `inject-pod`: ~0.2 ms), and
/// one epoch tick is the finest the host can act on anyway.
pub(super) const LONG: Duration = Duration::from_millis(10);
/// How long without a short call's poll counts as quiet: shorter than a healthy
/// review, longer than the gap between two reviews on a busy connection.
const QUIET: Duration = Duration::from_millis(1);
/// A plugin whose calls take this much thread time on average is heavy. Why 5 ms:
/// half a tick, well above a healthy review's (even in a debug build) and below what
/// one call that fills tens of MiB takes.
const HEAVY: Duration = Duration::from_millis(5);
/// The weight of each new call in a plugin's running mean: the last ~8 calls count.
const MEAN_WEIGHT: f64 = 1.0 / 8.0;
/// The share of faulted calls above which a work's calls are paced (see the module docs).
const FAULTING: f64 = 0.5;
/// The longest a long call waits in the lane for a quiet moment before it computes
/// one more tick anyway: long work keeps about a tick per PACE however busy the host.
const PACE: Duration = Duration::from_millis(90);
/// How much a call may grow its instance's memory before it goes aside, at that grow
/// and before it touches what that grow added. Why: touching fresh memory is page faults and
/// zeroing that the epoch cannot interrupt (one `memory.fill` is one instruction), and
/// a call judged by thread time alone computed up to two ticks in place first; the
/// likeliest reading of a 48 ms hold of reviews is new calls of a plugin that fills
/// 120 MiB each, run in place (BENCHMARKS.md, issue 18). The shipped plugins' memories
/// start at about 1 MiB. Caveats: the first 8 MiB are still touched in place, a warm
/// instance may refill what it holds without growing, and creation counts as growth,
/// so an ordinary plugin's fresh-instance call that grows 8 MiB goes aside too.
pub(super) const BIG_GROWTH: usize = 8 << 20;

/// The host-wide state: short calls' activity and the long lane.
pub(super) struct Cpu {
    base: Instant,
    /// Short calls inside a poll right now (other runtime threads).
    polling: AtomicUsize,
    /// When a short call's poll last ended, in ns since `base`.
    last: AtomicU64,
    lane: Arc<Lane>,
    /// Per work (a plugin and a kind of call): the running means of its calls. Keyed by
    /// the plugins that ran, as the runtime's slots are.
    means: std::sync::Mutex<std::collections::HashMap<Arc<str>, Mean>>,
}

/// Running means of one work's calls: thread time in seconds, and the share that
/// faulted (0 to 1).
#[derive(Clone, Copy, Default)]
struct Mean {
    thread: f64,
    faults: f64,
}

impl Cpu {
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Cpu {
            base: Instant::now(),
            polling: AtomicUsize::new(0),
            last: AtomicU64::new(0),
            lane: Default::default(),
            means: Default::default(),
        })
    }

    fn now(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64
    }

    /// Whether no short call is being polled or was within [`QUIET`].
    fn quiet(&self) -> bool {
        self.polling.load(Relaxed) == 0 && self.now().saturating_sub(self.last.load(Relaxed)) >= QUIET.as_nanos() as u64
    }

    /// Waits before a call of `work` (metered by `meter`) starts, if that work is heavy
    /// and short calls are busy: its turn in the lane, as a long call's at a tick.
    /// While it waits its own polls are not a short call's: otherwise the host never
    /// looks quiet from where it stands, and it would wait [`PACE`] on an idle host.
    /// Faulting work instead waits its paced turn (see the module docs).
    pub(super) async fn admit(&self, work: &str, meter: &Meter) {
        let m = self.means.lock().unwrap().get(work).copied().unwrap_or_default();
        let faulting = m.faults >= FAULTING;
        if !faulting && m.thread < HEAVY.as_secs_f64() {
            return;
        }
        // Both wait below, and the call moves to the aside threads at that wait (`aside`).
        meter.aside.store(true, Relaxed);
        meter.waiting(true);
        if faulting {
            // The long calls' lane: faulting and long work together keep a tick per PACE.
            let _turn = self.lane.turn(&meter.plugin).await;
            tokio::time::sleep(PACE).await;
        } else {
            self.turn_if_busy(&meter.plugin).await;
        }
        meter.waiting(false);
    }

    /// Yields once, so that short calls the last slice held up can run; if any did
    /// (or one is still running), takes a turn in the lane. Why yield first: on one
    /// thread, a call that just computed for a tick kept every short call from being
    /// polled, so the host looks quiet from where that call stands.
    async fn turn_if_busy(&self, plugin: &Arc<str>) {
        tokio::task::yield_now().await;
        if !self.quiet() {
            self.turn(plugin).await;
        }
    }

    /// A call of `work` that ran ended having spent `spent` on a thread; `faulted` if
    /// it trapped or ran out of time. Six faults in a row make the work faulting; one
    /// among clean calls moves its share by an eighth, not past [`FAULTING`].
    pub(super) fn ended(&self, work: &Arc<str>, spent: Duration, faulted: bool) {
        let mut means = self.means.lock().unwrap();
        let m = means.entry(work.clone()).or_default();
        m.thread += (spent.as_secs_f64() - m.thread) * MEAN_WEIGHT;
        m.faults += (if faulted { 1.0 } else { 0.0 } - m.faults) * MEAN_WEIGHT;
    }

    /// A call of `work` ran out of time before it ran (waiting to be admitted or for
    /// its slots): a
    /// fault, its wait wasted, but no word on what its calls compute. Why apart from
    /// [`Cpu::ended`]: counted as a call that spent nothing, a flood's calls that timed
    /// out queueing pulled a plugin that fills 120 MiB per call under [`HEAVY`], and its
    /// next calls started in place (BENCHMARKS.md, issue 18).
    pub(super) fn timed_out_waiting(&self, work: &Arc<str>) {
        let mut means = self.means.lock().unwrap();
        let m = means.entry(work.clone()).or_default();
        m.faults += (1.0 - m.faults) * MEAN_WEIGHT;
    }

    /// One turn in the lane (`lane`: the plugins waiting take turns), then until a
    /// quiet moment or [`PACE`].
    async fn turn(&self, plugin: &Arc<str>) {
        let _turn = self.lane.turn(plugin).await;
        let until = tokio::time::Instant::now() + PACE;
        while !self.quiet() && tokio::time::Instant::now() < until {
            tokio::time::sleep(QUIET).await;
        }
    }

    /// What the epoch callback of a call metered by `meter` does at a tick: None to
    /// compute on, or a wait to yield on (the long lane, see the module docs).
    pub(super) fn pace(self: &Arc<Self>, meter: &Meter) -> Option<std::pin::Pin<Box<dyn Future<Output = ()> + Send>>> {
        if !meter.long.load(Relaxed) {
            if meter.spent() < LONG {
                return None;
            }
            meter.long.store(true, Relaxed);
            // It moves to the aside threads at the yield this returns (`aside`).
            meter.aside.store(true, Relaxed);
            // Its own poll, under way, no longer counts as a short call's.
            if meter.counted.swap(false, Relaxed) {
                self.polling.fetch_sub(1, Relaxed);
            }
            crate::metrics::METRICS
                .long_calls
                .get_or_create(&crate::metrics::labels(&[("plugin", &meter.plugin)]))
                .inc();
        }
        let (cpu, plugin) = (self.clone(), meter.plugin.clone());
        Some(Box::pin(async move { cpu.turn_if_busy(&plugin).await }))
    }
}

/// One call's thread time so far, shared by its future's wrapper and its epoch callback.
pub(super) struct Meter {
    plugin: Arc<str>,
    cpu: Arc<Cpu>,
    /// Thread time of the polls that have ended, in ns.
    spent: AtomicU64,
    /// The polling thread's CPU clock when the current poll began (ns, plus one so that
    /// it is never 0), 0 between polls.
    poll: AtomicU64,
    /// Which thread polls now ([`thread_key`]): another thread's CPU clock says nothing
    /// of this poll.
    poller: AtomicUsize,
    long: AtomicBool,
    /// Whether it waits to be admitted (`Cpu::admit`): its polls meanwhile are not counted.
    waiting: AtomicBool,
    /// Whether the current poll is counted in `cpu.polling` (it began short).
    counted: AtomicBool,
    /// Whether the call is to run on the aside threads from its next yield on.
    aside: AtomicBool,
    /// Bytes its instance's memories grew by during the call.
    grown: AtomicUsize,
}

impl Meter {
    pub(super) fn new(cpu: &Arc<Cpu>, plugin: Arc<str>) -> Arc<Self> {
        Arc::new(Meter {
            plugin,
            cpu: cpu.clone(),
            spent: AtomicU64::new(0),
            poll: AtomicU64::new(0),
            poller: AtomicUsize::new(0),
            long: AtomicBool::new(false),
            waiting: AtomicBool::new(false),
            counted: AtomicBool::new(false),
            aside: AtomicBool::new(false),
            grown: AtomicUsize::new(0),
        })
    }

    /// The call's instance grew its memory by `bytes`. True if that sent the call aside
    /// ([`BIG_GROWTH`] or more in all): the caller yields at once, so that it moves before
    /// the memory is touched. A call already aside stays where it is.
    pub(super) fn grew(&self, bytes: usize) -> bool {
        let grown = self.grown.fetch_add(bytes, Relaxed).saturating_add(bytes);
        grown >= BIG_GROWTH && !self.aside.swap(true, Relaxed)
    }

    /// Whether the call is long, its work heavy or faulting, or its memory grew big: it
    /// runs on the aside threads from its next yield on (see `aside`).
    pub(super) fn goes_aside(&self) -> bool {
        self.aside.load(Relaxed)
    }

    /// Starts or ends a wait to be admitted; a poll under way stops counting.
    fn waiting(&self, on: bool) {
        self.waiting.store(on, Relaxed);
        if on && self.counted.swap(false, Relaxed) {
            self.cpu.polling.fetch_sub(1, Relaxed);
        }
    }

    /// Thread time so far, the current poll included when called on the thread that
    /// polls it (the epoch callback is). Read elsewhere (the caller, when a call that
    /// moved aside timed out while a step of it still runs there), polls that ended.
    pub(super) fn spent(&self) -> Duration {
        let poll = match self.poll.load(Relaxed) {
            0 => 0,
            _ if self.poller.load(Relaxed) != thread_key() => 0,
            start => thread_cpu_ns().saturating_sub(start - 1),
        };
        Duration::from_nanos(self.spent.load(Relaxed) + poll)
    }

    fn begin(&self) {
        self.poller.store(thread_key(), Relaxed);
        self.poll.store(thread_cpu_ns() + 1, Relaxed);
        if !self.long.load(Relaxed) && !self.waiting.load(Relaxed) {
            self.counted.store(true, Relaxed);
            self.cpu.polling.fetch_add(1, Relaxed);
        }
    }

    fn end(&self) {
        let start = self.poll.swap(0, Relaxed);
        self.spent.fetch_add(thread_cpu_ns().saturating_sub(start.saturating_sub(1)), Relaxed);
        if self.counted.swap(false, Relaxed) {
            self.cpu.polling.fetch_sub(1, Relaxed);
            self.cpu.last.fetch_max(self.cpu.now(), Relaxed);
        }
    }
}

/// CPU time the calling thread has used: what it ran, never the time it waited for a
/// lock or the kernel gave another thread.
pub(super) fn thread_cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid pointer to a timespec; CLOCK_THREAD_CPUTIME_ID exists on Linux
    // and cannot fail for the calling thread.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn thread_cpu_ns() -> u64 {
    thread_cpu().as_nanos() as u64
}

/// A number unique to the calling thread while it lives: the address of a thread-local.
pub(super) fn thread_key() -> usize {
    thread_local!(static KEY: u8 = const { 0 });
    KEY.with(|k| k as *const u8 as usize)
}

pin_project_lite::pin_project! {
    /// A call's future, timed poll by poll into its [`Meter`].
    pub(super) struct Metered<F> {
        #[pin]
        inner: F,
        meter: Arc<Meter>,
    }
}

impl<F> Metered<F> {
    pub(super) fn new(inner: F, meter: Arc<Meter>) -> Self {
        Metered { inner, meter }
    }
}

impl<F: Future> Future for Metered<F> {
    type Output = F::Output;

    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<F::Output> {
        let this = self.project();
        this.meter.begin();
        // Ended even if the poll panics (a panic aside reaches the caller): a poll left
        // counted as a short call's would keep the host from ever looking quiet.
        struct End<'a>(&'a Meter);
        impl Drop for End<'_> {
            fn drop(&mut self) {
                self.0.end();
            }
        }
        let _end = End(this.meter);
        this.inner.poll(cx)
    }
}

#[cfg(test)]
mod tests;
