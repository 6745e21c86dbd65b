//! Threads the kernel ranks below the host's own, for work that must take only the CPU
//! that reconciles and reviews leave: a thread (compiles of reloads and loops, the
//! plugin sources' runtime) or a small runtime on one (TLS handshakes). The `aside`
//! runtime's workers lower their own priority with the same call.
//!
//! Why a thread of its own each time: on Linux a nice value belongs to a thread, and
//! raising it back needs privileges the host does not have, so a niced thread serves
//! only niced work and a pool thread is never niced.
//!
//! A thread can also run at idle priority (`SCHED_IDLE`, [`Priority::Idle`]): it runs only
//! when nothing else on its core wants to, and a waking thread of the host preempts it
//! at once. Why beside nice values: a CPU-bound thread at any nice value takes its share
//! of a busy core in whole scheduler ticks, and a thread that wakes while over its own
//! share waits for the tick (the figures are in `registry::ahead`, its one user, and
//! BENCHMARKS.md, issue 23: `scripts/poisson-beside.py`). The price: on a core others
//! keep saturated an idle thread gets next to nothing, so only work that has a fallback
//! runs there.
//!
//! Caveat: a process already at the nice value or above sees no difference.

use std::future::Future;
use std::thread::JoinHandle;

/// How a thread of the host's ranks below its review and reconcile threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Priority {
    /// At this nice value (0-19): its share of a busy core by weight (a tenth at 10,
    /// 1.5 % at 19), taken in whole scheduler ticks. 0 is the host's own rank.
    Nice(i32),
    /// At idle priority (`SCHED_IDLE`): what the core's other threads leave, and
    /// preempted the instant one of them wakes.
    Idle,
}

impl Priority {
    /// Lowers the calling thread to this rank (never raises it). Idle priority where
    /// the kernel refuses it falls back to nice 19.
    pub(crate) fn lower_own(self) {
        match self {
            Priority::Nice(nice) => lower_own_priority(nice),
            Priority::Idle => {
                lower_own_priority(19);
                let param = libc::sched_param { sched_priority: 0 };
                // SAFETY: `param` outlives the call; pid 0 is the calling thread, and an
                // unprivileged thread may always lower its own policy to SCHED_IDLE.
                if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } != 0 {
                    tracing::debug!("cannot run at idle priority: {}", std::io::Error::last_os_error());
                }
            }
        }
    }
}

/// As a flag takes it: `idle`, or a nice value from 0 to 19.
impl std::str::FromStr for Priority {
    type Err = String;

    fn from_str(s: &str) -> Result<Priority, String> {
        if s == "idle" {
            return Ok(Priority::Idle);
        }
        match s.parse::<i32>() {
            Ok(n) if (0..=19).contains(&n) => Ok(Priority::Nice(n)),
            _ => Err(format!("{s:?} is neither `idle` nor a nice value from 0 to 19")),
        }
    }
}

impl std::fmt::Display for Priority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Priority::Nice(n) => write!(f, "{n}"),
            Priority::Idle => f.write_str("idle"),
        }
    }
}

/// Runs `f` on a new thread named `name` ranked `priority` (never above the caller's).
/// Thread names over 15 bytes are cut by the kernel: keep them short.
pub(crate) fn thread<T: Send + 'static>(
    name: &str,
    priority: Priority,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<JoinHandle<T>> {
    std::thread::Builder::new().name(name.into()).spawn(move || {
        priority.lower_own();
        f()
    })
}

/// A current-thread tokio runtime on a thread of its own at nice `nice`, serving what
/// is spawned on it until this value is dropped (tasks still pending are dropped on it).
pub(crate) struct NicedRuntime {
    handle: tokio::runtime::Handle,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl NicedRuntime {
    pub(crate) fn start(name: &str, priority: Priority) -> std::io::Result<NicedRuntime> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let handle = rt.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        thread(name, priority, move || {
            rt.block_on(async move {
                let _ = stopped.await;
            })
        })?;
        Ok(NicedRuntime { handle, _stop: stop })
    }

    /// Runs `f` on the niced thread, detached.
    pub(crate) fn spawn(&self, f: impl Future<Output = ()> + Send + 'static) {
        drop(self.handle.spawn(f));
    }
}

/// Lowers the calling thread's priority to `nice` (never raises it).
fn lower_own_priority(nice: i32) {
    if own_priority() < nice {
        // SAFETY: gettid and setpriority take no pointers; on Linux a thread id names
        // that one thread for PRIO_PROCESS, so only this thread's priority changes.
        unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::syscall(libc::SYS_gettid) as libc::id_t, nice) };
    }
}

/// The calling thread's scheduling policy (`libc::SCHED_OTHER`, `SCHED_IDLE`, ...).
#[cfg(test)]
pub(crate) fn own_policy() -> i32 {
    // SAFETY: no pointers; pid 0 is the calling thread.
    unsafe { libc::sched_getscheduler(0) }
}

/// The calling thread's nice value.
pub(crate) fn own_priority() -> i32 {
    // SAFETY: no pointers; the calling thread's own priority (see `lower_own_priority`).
    unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::syscall(libc::SYS_gettid) as libc::id_t) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_niced_runtime_runs_named_and_niced_and_ends_when_dropped() {
        let before = own_priority();
        let rt = NicedRuntime::start("wasmop-test", Priority::Nice(7)).unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel();
        rt.spawn(async move {
            let name = std::thread::current().name().map(str::to_owned);
            // SAFETY: gettid takes no arguments.
            let tid = unsafe { libc::syscall(libc::SYS_gettid) };
            let _ = tx.send((name, own_priority(), tid));
        });
        let (name, nice, tid) = rx.await.unwrap();
        assert_eq!(name.as_deref(), Some("wasmop-test"));
        assert_eq!(nice, before.max(7));
        assert_eq!(own_priority(), before, "the caller's priority is left alone");
        drop(rt);
        let task = format!("/proc/self/task/{tid}");
        let gone = (0..200).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            !std::path::Path::new(&task).exists()
        });
        assert!(gone, "the niced thread ends once its runtime is dropped");
    }

    #[test]
    fn an_idle_thread_runs_at_idle_priority_and_returns_its_result() {
        let t =
            thread("wasmop-test", Priority::Idle, || (own_policy(), std::thread::current().name().map(str::to_owned)));
        let (policy, name) = t.unwrap().join().unwrap();
        assert_eq!(policy, libc::SCHED_IDLE);
        assert_eq!(name.as_deref(), Some("wasmop-test"));
        assert_eq!(own_policy(), libc::SCHED_OTHER, "the caller's policy is left alone");
    }

    #[test]
    fn a_niced_thread_returns_its_result() {
        let t = thread("wasmop-test", Priority::Nice(3), || {
            (own_priority(), std::thread::current().name().map(str::to_owned))
        });
        let (nice, name) = t.unwrap().join().unwrap();
        assert_eq!(nice, own_priority().max(3));
        assert_eq!(name.as_deref(), Some("wasmop-test"));
    }

    #[test]
    fn a_priority_reads_as_a_flag_gives_it() {
        assert_eq!("idle".parse(), Ok(Priority::Idle));
        assert_eq!("10".parse(), Ok(Priority::Nice(10)));
        assert_eq!("0".parse(), Ok(Priority::Nice(0)));
        for bad in ["20", "-1", "low", ""] {
            let e = bad.parse::<Priority>().unwrap_err();
            assert!(e.contains("neither `idle` nor a nice value from 0 to 19"), "{bad}: {e}");
        }
        for p in [Priority::Idle, Priority::Nice(19)] {
            assert_eq!(p.to_string().parse(), Ok(p));
        }
    }
}
