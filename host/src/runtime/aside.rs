//! Long and heavy plugin calls move to threads of their own that the kernel ranks
//! below the host's.
//!
//! Why: on the host's runtime threads a long call computes in epoch slices (10 ms,
//! `cpu`'s lane decides whose), and a review that arrives as a slice begins waits for
//! all of it: the p99 of a healthy webhook beside a plugin that fills 120 MiB per call
//! was 17–75 ms (BENCHMARKS.md, issue 18, fifth part). The kernel can do finer: a
//! thread at a higher nice value is preempted when the runtime thread wakes for a
//! review, and while reviews keep a core busy it gets the share its nice value gives
//! (a tenth at nice 10, 1.5 % at 19), wherever its time goes: guest compute, the page
//! faults of memory it touches, and freeing that memory (`freeing` frees in place on
//! an aside thread).
//!
//! Flow: a call's future is polled where it began. Once `cpu` marks it to go aside
//! (its work is heavy or faulting when it is admitted, or it has computed for `LONG`),
//! the rest of it is spawned at its next yield on the aside runtime (as many worker
//! threads as the host's own, all at the configured nice value), and the caller awaits
//! it there, with the host's runtime still the current one for what the call spawns or
//! times. The lane still applies on the aside threads: while short calls are busy,
//! long ones together get about a tick per `PACE`, and the kernel preempts that tick.
//!
//! Guarantees: the caller keeps the deadline; when it drops the call (deadline passed,
//! request gone) the moved part is aborted and dropped on the aside runtime, which
//! frees its instance there. A call on an idle host runs as fast aside as in place:
//! a niced thread gets every cycle nobody else wants.
//! Caveats: a thread's priority cannot be raised back without privileges, so the
//! aside threads serve nothing else. A moved call's instance is freed only when an
//! aside thread next runs, which on a saturated core is its niced share.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use super::cpu::Meter;

/// A call's future, boxed so that it can move between runtimes mid-way.
pub(super) type Moveable<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// The aside runtime. Dropping it lets its threads end on their own, so that a host
/// (or a test) that drops its `Runtime` inside async code does not block there.
pub(super) struct Aside(Option<tokio::runtime::Runtime>);

impl Aside {
    /// Starts `threads` worker threads (and blocking threads) at `nice`.
    pub(super) fn start(threads: usize, nice: i32) -> std::io::Result<Aside> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name("wasmop-aside")
            .on_thread_start(move || {
                lower_own_priority(nice);
                ASIDE.set(true);
            })
            .enable_all()
            .build()?;
        Ok(Aside(Some(rt)))
    }

    /// `f` polled in place until its meter says it goes aside, then on the aside runtime.
    /// Called on the host's runtime, whose handle the moved part keeps (see [`Entered`]).
    pub(super) fn run<T: Send + 'static>(&self, f: Moveable<T>, meter: Arc<Meter>) -> Moving<T> {
        let handle = self.0.as_ref().expect("the aside runtime lives as long as its Aside").handle().clone();
        let home = tokio::runtime::Handle::try_current().ok();
        Moving { state: State::Here(f), meter, handle, home }
    }
}

impl Drop for Aside {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
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
    handle: tokio::runtime::Handle,
    /// The runtime the call began on.
    home: Option<tokio::runtime::Handle>,
}

/// A moved call's future, polled with the runtime it began on as the current one.
/// Why: what a host call spawns (the cluster client's new connections are tasks) and the
/// timers it sets belong to the host's runtime, not to niced threads that would serve
/// other plugins' requests on a pooled connection at the aside threads' share.
struct Entered<T> {
    inner: Moveable<T>,
    home: Option<tokio::runtime::Handle>,
}

impl<T> Future for Entered<T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let this = &mut *self;
        let _home = this.home.as_ref().map(|h| h.enter());
        this.inner.as_mut().poll(cx)
    }
}

impl<T: Send + 'static> Future for Moving<T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let this = &mut *self;
        if let State::Here(f) = &mut this.state {
            if let Poll::Ready(r) = f.as_mut().poll(cx) {
                this.state = State::Done;
                return Poll::Ready(r);
            }
            if !this.meter.goes_aside() {
                return Poll::Pending;
            }
            let State::Here(inner) = std::mem::replace(&mut this.state, State::Done) else { unreachable!() };
            this.state = State::Aside(this.handle.spawn(Entered { inner, home: this.home.clone() }));
        }
        match &mut this.state {
            State::Aside(h) => match Pin::new(h).poll(cx) {
                Poll::Ready(Ok(r)) => {
                    this.state = State::Done;
                    Poll::Ready(r)
                }
                // The call panicked on the aside thread: as it would have in place.
                Poll::Ready(Err(e)) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                // Cancelled: only by this future's own drop, or by the aside runtime
                // shutting down with the host.
                Poll::Ready(Err(_)) => Poll::Pending,
                Poll::Pending => Poll::Pending,
            },
            _ => panic!("a Moving polled after it completed"),
        }
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

/// Whether the calling thread is an aside thread: work it does is already niced.
pub(super) fn on_aside_thread() -> bool {
    ASIDE.get()
}

/// Lowers the calling thread's priority to `nice` (never raises it).
pub(crate) fn lower_own_priority(nice: i32) {
    // SAFETY: gettid and setpriority take no pointers; on Linux a thread id names that
    // one thread for PRIO_PROCESS, so only this thread's priority changes.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        if libc::getpriority(libc::PRIO_PROCESS, tid) < nice {
            libc::setpriority(libc::PRIO_PROCESS, tid, nice);
        }
    }
}

#[cfg(test)]
mod tests;
