//! Long and heavy plugin calls move to threads of their own that the kernel ranks
//! below the host's.
//!
//! Why: on the host's runtime threads a long call computes in epoch slices (10 ms,
//! `cpu`'s lane decides whose), and a review that arrives as a slice begins waits for
//! all of it: the p99 of a healthy webhook beside a plugin that fills 120 MiB per call
//! was 17–75 ms (BENCHMARKS.md, issue 18, fifth part). The kernel can do finer: a
//! thread at a higher nice value (`--long-call-nice`, 19) yields to the runtime thread
//! when it wakes for a review (at the next scheduler tick at the latest), and while
//! reviews keep a core busy it gets the share its nice value gives (1.5 % at nice 19, a
//! tenth at 10), wherever its time goes: guest compute, the page faults of memory it
//! touches, and freeing that memory (`freeing` frees in place on an aside thread). At
//! idle priority (`--long-call-nice idle`) it is preempted the instant a review wakes
//! the host and gets only the CPU the host's own threads leave; not the default, see
//! the caveats.
//!
//! Flow: a call's future is polled where it began. Once `cpu` marks it to go aside
//! (its work is heavy or faulting when it is admitted, it has computed for `LONG`, or
//! its memory has grown by `BIG_GROWTH`, at which grow the limiter yields),
//! the rest of it is spawned at its next yield on the aside runtime (as many worker
//! threads as the host's own, all at the configured priority), and the caller awaits
//! it there, with the runtime it began on (the host's, or the reconcile threads') still
//! the current one for what the call spawns or times. The lane still applies on the aside threads: while short calls are busy,
//! long ones together get about a tick per `PACE`, and the kernel preempts that tick.
//!
//! Guarantees: the caller keeps the deadline; when it drops the call (deadline passed,
//! request gone) the moved part is aborted and dropped on the aside runtime, which
//! frees its instance there. A call on an idle host runs as fast aside as in place:
//! a thread of low priority gets every cycle nobody else wants.
//!
//! Caveats:
//! - The lane and the priority compound: while short calls keep every core busy, long
//!   calls get a tick per `PACE` and, within it, what the priority leaves: at nice 19
//!   well under 1 % of a core (at 10 about 1 %), where the lane alone gave about 10 %;
//!   at idle next to nothing (the kernel's idle weight, 3 against a busy thread's 1024).
//!   A long reconcile of 0.4 s then misses its 30 s deadline while webhooks saturate
//!   the host's cores; `--long-call-nice 0` keeps only the lane. On a host that is not
//!   saturated, both give way at once.
//! - Why not idle priority by default: under issue 18's attacks it gave the review
//!   thread ~0.4 s more of an 11 s closed-loop run and a median p99 of 3.55 ms against
//!   3.84, but one of twelve attack phases held reviews for up to 109 ms, against at
//!   most 22 ms in six at nice 10 (BENCHMARKS.md, issue 18, 2026-12-07). Its cause is
//!   not known; a candidate: an aside thread unmapping a big instance holds the
//!   process's memory map, and at idle it may wait long for the core with that lock
//!   held. At nice 19 two of 27 attack phases held reviews (104 and 47.6 ms), against
//!   none of 11 at nice 10 the same hour; in the traced one the thread that serves
//!   reviews itself was busy faulting in, filling and unmapping fresh memory: most
//!   likely a big plugin call run in place rather than aside (BENCHMARKS.md, issue
//!   18, 2026-12-07 18:37Z). Two paths could allow that (found by reading the code;
//!   the trace had no call stacks), both closed since: a flood's calls that timed out
//!   waiting counted as calls that computed nothing, so the plugin's mean looked
//!   light and its next calls started in place; and a call was judged by thread time
//!   alone, so it filled memory for up to two ticks before it moved. Now such calls
//!   leave the mean alone, and a call goes aside at the grow that brings its growth
//!   to `cpu::BIG_GROWTH`, before it touches what that grow added. Nice 19 is the
//!   default for the share it gives reviews (`config::ASIDE_PRIORITY`);
//!   `--long-call-nice 10` trades some of it back. Idle also yields to every thread on
//!   the core, not only the host's: where the host shares the CPU with other busy
//!   processes, long calls wait for those too.
//! - A moved call's slots, memory charge and instance are given back only when an
//!   aside thread next runs after its deadline, which on a saturated core is what
//!   its priority leaves it; the caller has its Timeout already.
//! - A poll's time is the thread's CPU time (`cpu`): on an aside thread, time the kernel
//!   gave to others is not the call's, so a heavy plugin's mean is what it computed,
//!   however stretched by the low priority.
//! - An aside thread preempted while holding a lock that the host's threads take (a
//!   watch cache's, the warm instances') holds them up too; those sections are short
//!   copies, except freeing a big instance, whose unmapping briefly holds the process's
//!   memory map.
//! - A thread's priority cannot be raised back without privileges, so the aside
//!   threads serve nothing else; a process already at the nice value or above sees no
//!   difference (at idle it still does).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use super::cpu::Meter;
use super::niced::Priority;

/// A call's future, boxed so that it can move between runtimes mid-way.
pub(super) type Moveable<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// The aside runtime, started on the first call that moves (a host whose calls are all
/// short and small never starts its threads). Dropping the last
/// handle lets its threads end on their own, so that a host (or a test) that drops its
/// `Runtime` inside async code does not block there.
#[derive(Clone)]
pub(super) struct Aside(Arc<Lazy>);

struct Lazy {
    threads: usize,
    priority: Priority,
    /// None once starting failed: calls then finish in place.
    rt: std::sync::OnceLock<Option<tokio::runtime::Runtime>>,
}

impl Aside {
    /// `threads` worker threads (and blocking threads) at `priority`, once needed.
    pub(super) fn new(threads: usize, priority: Priority) -> Aside {
        Aside(Arc::new(Lazy { threads: threads.max(1), priority, rt: Default::default() }))
    }

    fn handle(&self) -> Option<tokio::runtime::Handle> {
        let rt = self.0.rt.get_or_init(|| {
            let priority = self.0.priority;
            let built = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(self.0.threads)
                .thread_name("wasmop-aside")
                .on_thread_start(move || {
                    priority.lower_own();
                    ASIDE.set(true);
                })
                .enable_all()
                .build();
            built.inspect_err(|e| tracing::warn!("cannot start the aside threads, long calls stay in place: {e}")).ok()
        });
        rt.as_ref().map(|rt| rt.handle().clone())
    }

    /// `f` polled in place until its meter says it goes aside, then on the aside runtime;
    /// None if the aside runtime dropped it (it shuts down with the host). Called on
    /// the runtime the call began on, whose handle the moved part keeps (see [`Entered`]).
    pub(super) fn run<T: Send + 'static>(&self, f: Moveable<T>, meter: Arc<Meter>) -> Moving<T> {
        let home = tokio::runtime::Handle::try_current().ok();
        Moving { state: State::Here(f), meter, aside: self.clone(), home }
    }
}

impl Drop for Lazy {
    fn drop(&mut self) {
        if let Some(Some(rt)) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

enum State<T> {
    Here(Moveable<T>),
    Aside(tokio::task::JoinHandle<T>),
    Done,
}

/// A call that moves aside once its meter says so (see the module docs).
pub(super) struct Moving<T> {
    state: State<T>,
    meter: Arc<Meter>,
    aside: Aside,
    /// The runtime the call began on.
    home: Option<tokio::runtime::Handle>,
}

/// A moved call's future, polled (and dropped) with the runtime it began on as the
/// current one. Why: what a host call spawns (the cluster client's new connections are
/// tasks, and so is what its pool starts when a connection is dropped) and the timers
/// it sets belong to the runtime the call began on, not to low-priority threads that would serve other
/// plugins' requests on a pooled connection at the aside threads' share.
struct Entered<T> {
    inner: Option<Moveable<T>>,
    home: Option<tokio::runtime::Handle>,
}

impl<T> Future for Entered<T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let this = &mut *self;
        let _home = this.home.as_ref().map(|h| h.enter());
        this.inner.as_mut().expect("an Entered is not polled after it is dropped").as_mut().poll(cx)
    }
}

impl<T> Drop for Entered<T> {
    fn drop(&mut self) {
        let _home = self.home.as_ref().map(|h| h.enter());
        drop(self.inner.take());
    }
}

impl<T: Send + 'static> Future for Moving<T> {
    type Output = Option<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let this = &mut *self;
        if let State::Here(f) = &mut this.state {
            if let Poll::Ready(r) = f.as_mut().poll(cx) {
                this.state = State::Done;
                return Poll::Ready(Some(r));
            }
            if !this.meter.goes_aside() {
                return Poll::Pending;
            }
            let Some(handle) = this.aside.handle() else { return Poll::Pending };
            let State::Here(inner) = std::mem::replace(&mut this.state, State::Done) else { unreachable!() };
            this.state = State::Aside(handle.spawn(Entered { inner: Some(inner), home: this.home.clone() }));
        }
        let State::Aside(h) = &mut this.state else { panic!("a Moving polled after it completed") };
        let r = match std::task::ready!(Pin::new(h).poll(cx)) {
            Ok(r) => Some(r),
            // The call panicked on the aside thread: as it would have in place.
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            // Cancelled: only by the aside runtime shutting down (this future's own
            // drop aborts it too, but nothing polls it after that).
            Err(_) => None,
        };
        this.state = State::Done;
        Poll::Ready(r)
    }
}

impl<T> Drop for Moving<T> {
    fn drop(&mut self) {
        if let State::Aside(h) = &self.state {
            h.abort();
        }
    }
}

thread_local! {
    /// Whether this thread is one of the aside runtime's.
    static ASIDE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the calling thread is an aside thread: work it does is already at low priority.
pub(super) fn on_aside_thread() -> bool {
    ASIDE.get()
}

#[cfg(test)]
mod tests;
