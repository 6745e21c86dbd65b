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
//! Flow: every call is metered (`Metered` times each poll of its future: guest
//! compute, instantiation and the host's own work for it, never its waits). At each
//! epoch tick a long call yields once and then checks whether short calls were polled
//! within the last [`QUIET`]; if not, it runs on (an idle or long-only host runs long
//! calls at full speed). If so, it queues for the host's one *long lane* and, holding it, waits for
//! a quiet moment for at most [`PACE`] before it computes its next tick. So while
//! short calls keep the threads busy, long calls together get at most about one tick
//! per [`PACE`] (~10 % of a thread), whichever plugins they belong to and however
//! many there are.
//!
//! Caveats: the host's work outside plugin calls (TLS, parsing a review) is not
//! metered, so the gaps between a healthy plugin's reviews can look quiet; a long
//! call keeps the memory it holds while it waits; the deadline still ends it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

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
/// The longest a long call waits in the lane for a quiet moment before it computes
/// one more tick anyway: long work keeps about a tick per PACE however busy the host.
const PACE: Duration = Duration::from_millis(90);

/// The host-wide state: short calls' activity and the long lane.
pub(super) struct Cpu {
    base: Instant,
    /// Short calls inside a poll right now (other runtime threads).
    polling: AtomicUsize,
    /// When a short call's poll last ended, in ns since `base`.
    last: AtomicU64,
    lane: tokio::sync::Mutex<()>,
    /// Per work (a plugin and a kind of call): the running mean of its calls' thread
    /// time, in seconds. Keyed by the plugins that ran, as the runtime's slots are.
    means: std::sync::Mutex<std::collections::HashMap<Arc<str>, f64>>,
}

impl Cpu {
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Cpu {
            base: Instant::now(),
            polling: AtomicUsize::new(0),
            last: AtomicU64::new(0),
            lane: tokio::sync::Mutex::new(()),
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

    /// Waits before a call of `work` starts, if that work is heavy and short calls
    /// are busy: its turn in the lane, as a long call's at a tick.
    pub(super) async fn admit(&self, work: &str) {
        let heavy = self.means.lock().unwrap().get(work).is_some_and(|m| *m >= HEAVY.as_secs_f64());
        if heavy {
            self.turn_if_busy().await;
        }
    }

    /// Yields once, so that short calls the last slice held up can run; if any did
    /// (or one is still running), takes a turn in the lane. Why yield first: on one
    /// thread, a call that just computed for a tick kept every short call from being
    /// polled, so the host looks quiet from where that call stands.
    async fn turn_if_busy(&self) {
        tokio::task::yield_now().await;
        if !self.quiet() {
            self.turn().await;
        }
    }

    /// A call of `work` ended having spent `spent` on a thread.
    pub(super) fn ended(&self, work: &Arc<str>, spent: Duration) {
        let mut means = self.means.lock().unwrap();
        let m = means.entry(work.clone()).or_insert(0.0);
        *m += (spent.as_secs_f64() - *m) * MEAN_WEIGHT;
    }

    /// One turn in the lane: first in line, then until a quiet moment or [`PACE`].
    async fn turn(&self) {
        let _turn = self.lane.lock().await;
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
            // Its own poll, under way, no longer counts as a short call's.
            if meter.counted.swap(false, Relaxed) {
                self.polling.fetch_sub(1, Relaxed);
            }
            crate::metrics::METRICS
                .long_calls
                .get_or_create(&crate::metrics::labels(&[("plugin", &meter.plugin)]))
                .inc();
        }
        let cpu = self.clone();
        Some(Box::pin(async move { cpu.turn_if_busy().await }))
    }
}

/// One call's thread time so far, shared by its future's wrapper and its epoch callback.
pub(super) struct Meter {
    plugin: Arc<str>,
    cpu: Arc<Cpu>,
    /// Thread time of the polls that have ended, in ns.
    spent: AtomicU64,
    /// When the current poll began (ns since `cpu.base`), 0 between polls.
    poll: AtomicU64,
    long: AtomicBool,
    /// Whether the current poll is counted in `cpu.polling` (it began short).
    counted: AtomicBool,
}

impl Meter {
    pub(super) fn new(cpu: &Arc<Cpu>, plugin: Arc<str>) -> Arc<Self> {
        Arc::new(Meter {
            plugin,
            cpu: cpu.clone(),
            spent: AtomicU64::new(0),
            poll: AtomicU64::new(0),
            long: AtomicBool::new(false),
            counted: AtomicBool::new(false),
        })
    }

    /// Thread time so far, the current poll included.
    pub(super) fn spent(&self) -> Duration {
        let poll = match self.poll.load(Relaxed) {
            0 => 0,
            start => self.cpu.now().saturating_sub(start),
        };
        Duration::from_nanos(self.spent.load(Relaxed) + poll)
    }

    fn begin(&self) {
        // 0 means "between polls", so a poll that begins at `base` itself starts at 1.
        self.poll.store(self.cpu.now().max(1), Relaxed);
        if !self.long.load(Relaxed) {
            self.counted.store(true, Relaxed);
            self.cpu.polling.fetch_add(1, Relaxed);
        }
    }

    fn end(&self) {
        let now = self.cpu.now();
        let start = self.poll.swap(0, Relaxed);
        self.spent.fetch_add(now.saturating_sub(start), Relaxed);
        if self.counted.swap(false, Relaxed) {
            self.cpu.polling.fetch_sub(1, Relaxed);
            self.cpu.last.fetch_max(now, Relaxed);
        }
    }
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
        let r = this.inner.poll(cx);
        this.meter.end();
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_call_turns_long_after_its_thread_time_not_its_wall_time() {
        let cpu = Cpu::new();
        let meter = Meter::new(&cpu, "p".into());
        let m = meter.clone();
        Metered::new(
            async move {
                // Waiting is not thread time.
                tokio::time::sleep(LONG * 3).await;
                assert!(m.spent() < LONG, "{:?}", m.spent());
                assert!(cpu.pace(&m).is_none(), "short: computes on");
                let t = Instant::now();
                while t.elapsed() < LONG * 2 {
                    std::hint::spin_loop();
                }
                assert!(m.spent() >= LONG * 2, "the current poll counts");
                // Long now; its own poll does not make the host busy, so on a quiet
                // host its turn is just a yield.
                let t = tokio::time::Instant::now();
                cpu.pace(&m).expect("long: yields").await;
                assert!(t.elapsed() < QUIET * 5, "long on a quiet host: computes on ({:?})", t.elapsed());
                assert_eq!(cpu.polling.load(Relaxed), 0);
                assert!(m.long.load(Relaxed));
            },
            meter.clone(),
        )
        .await;
        assert!(meter.spent() >= LONG * 2);
    }

    #[tokio::test]
    async fn a_heavy_plugins_calls_wait_before_they_start_while_short_ones_are_busy() {
        let cpu = Cpu::new();
        let short = Meter::new(&cpu, "healthy".into());
        short.begin();
        // Never called yet, or calls of a fraction of a millisecond: not heavy.
        let t = tokio::time::Instant::now();
        cpu.admit("greedy").await;
        for _ in 0..20 {
            cpu.ended(&"greedy".into(), Duration::from_micros(200));
        }
        cpu.admit("greedy").await;
        assert!(t.elapsed() < QUIET * 5, "{:?}", t.elapsed());
        // Calls of 20 ms each: heavy after a few, and waits its turn.
        for _ in 0..4 {
            cpu.ended(&"greedy".into(), LONG * 2);
        }
        let t = tokio::time::Instant::now();
        cpu.admit("greedy").await;
        assert!(t.elapsed() >= PACE, "{:?}", t.elapsed());
        // On a quiet host it starts at once.
        short.end();
        tokio::time::sleep(QUIET * 2).await;
        let t = tokio::time::Instant::now();
        cpu.admit("greedy").await;
        assert!(t.elapsed() < QUIET * 5, "{:?}", t.elapsed());
        drop(short);
    }

    #[tokio::test]
    async fn heavy_reconciles_do_not_make_the_same_plugins_reviews_wait() {
        let cpu = Cpu::new();
        let short = Meter::new(&cpu, "other".into());
        short.begin();
        for _ in 0..8 {
            cpu.ended(&"sidecarset/reconcile".into(), LONG * 4);
            cpu.ended(&"sidecarset/review".into(), Duration::from_micros(200));
        }
        let t = tokio::time::Instant::now();
        cpu.admit("sidecarset/review").await;
        assert!(t.elapsed() < QUIET * 5, "a quick review starts at once: {:?}", t.elapsed());
        let t = tokio::time::Instant::now();
        cpu.admit("sidecarset/reconcile").await;
        assert!(t.elapsed() >= PACE, "the heavy reconcile waits its turn: {:?}", t.elapsed());
        drop(short);
    }

    #[tokio::test]
    async fn long_calls_wait_while_short_ones_are_busy() {
        let cpu = Cpu::new();
        let long = Meter::new(&cpu, "greedy".into());
        long.long.store(true, Relaxed);
        let short = Meter::new(&cpu, "healthy".into());
        // A short call is inside a poll (on another thread): the long one waits.
        short.begin();
        let wait = cpu.pace(&long).expect("short work is busy: the long call waits");
        let ends = {
            let short = short.clone();
            tokio::spawn(async move {
                tokio::time::sleep(PACE / 3).await;
                short.end();
            })
        };
        let t = tokio::time::Instant::now();
        wait.await;
        let waited = t.elapsed();
        assert!(waited >= PACE / 3 - QUIET, "held back while the short call runs: {waited:?}");
        assert!(waited < PACE, "a quiet moment ends the wait early: {waited:?}");
        ends.await.unwrap();
        // A short call that never stops holds it back for PACE, not forever.
        short.begin();
        let t = tokio::time::Instant::now();
        cpu.pace(&long).expect("busy").await;
        let waited = t.elapsed();
        assert!(waited >= PACE && waited < PACE * 3, "one tick per PACE however busy: {waited:?}");
        short.end();
        tokio::time::sleep(QUIET * 3).await;
        let t = tokio::time::Instant::now();
        cpu.pace(&long).expect("long: yields").await;
        assert!(t.elapsed() < QUIET * 5, "quiet again: {:?}", t.elapsed());
    }
}
