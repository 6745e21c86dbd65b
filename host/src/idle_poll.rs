//! Keeps the core the host's runtime worker sleeps on awake for a moment after it
//! parks, so that the next request finds the core running rather than halted: idle
//! polling from user space, similar in aim to the guest kernel's halt polling and to
//! Seastar's `--idle-poll-time-us`.
//!
//! Why: on a virtual machine whose guest halt polling is off (this project's Firecracker
//! machines boot with `haltpoll.guest_halt_poll_ns=0`), a core with nothing to run
//! halts, and a request for it then first waits for the hypervisor to run the core
//! again. An admin of a cluster often cannot change the nodes' setting; the host can
//! keep its own core from halting while requests flow. What it buys on this project's
//! machine is measured in BENCHMARKS.md (issue 23, `WASMOP_IDLE_POLL_US`).
//!
//! Flow: the host's runtime calls [`parked`] as one of its workers is about to sleep
//! (tokio's `on_thread_park`); it notes the time and the worker's CPU. One thread,
//! `wasmop-poll`, at idle priority (`SCHED_IDLE`), then moves to that CPU and spins
//! until the window has passed since the last park; then it goes back to the process's
//! CPUs and sleeps until a park finds it asleep. A worker woken by a request preempts
//! it at once: Linux preempts a running idle-policy thread for a waking normal one of
//! the same cgroup (with the default `preempt=none` or `full`; under `preempt=lazy`
//! only at the next tick, and there this must stay off).
//!
//! Guarantees: the spinner holds no lock and shares none with the host (it sleeps with
//! `std::thread::park`), so a worker never waits for it; it spins only at idle
//! priority (where the kernel refuses that, it ends instead) and only on the CPU it
//! could move to (where the kernel refuses the move, it ends too).
//!
//! Cost: CPU, a window's worth at most after each park. A host whose runtime wakes a few
//! times a second (Lease renewals, probes, watch events) spins that many windows; one
//! whose requests come closer together than the window keeps the core busy in their
//! gaps. To the kubelet, HPA and metrics that is the Pod's CPU use.
//!
//! Caveats: off unless asked for (`--idle-poll-us`). Under a CPU quota (a container's
//! CPU limit) the spin counts against the quota like any work, and a throttled cgroup
//! stalls all its threads until the next period: turn it on only for a host with whole
//! cores of its own (a Guaranteed Pod with integer CPUs, or no CPU limit). It follows
//! one CPU, the last worker's to park, so it suits a host with one runtime worker
//! (`TOKIO_WORKER_THREADS=1`); with more, the core it keeps awake is not always the
//! one the next request wakes. The host's other threads at idle priority (the ahead
//! compile, `--long-call-nice idle`, `--reconcile-nice idle`) share that core's spare
//! time with it half and half, and niced ones lose 3 parts in their weight plus 3 (a
//! few percent). A core that only spins never looks idle to the kernel, so it pulls
//! waiting work from busier cores only at the periodic balance. It cannot keep the
//! hypervisor from lending the core out: that is steal time, not a halt.

use crate::runtime::Priority;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The host's idle poller, once `run` has started it; [`parked`] does nothing before.
static HOST: OnceLock<IdlePoll> = OnceLock::new();

/// Starts the host's idle poller with `window` (nothing for a zero window). Once per
/// process: a later call changes nothing.
pub fn start(window: Duration) -> std::io::Result<()> {
    static STARTING: Mutex<()> = Mutex::new(());
    let _one_at_a_time = STARTING.lock().unwrap();
    if window.is_zero() || HOST.get().is_some() {
        return Ok(());
    }
    let _ = HOST.set(IdlePoll::start(window, Priority::Idle)?);
    Ok(())
}

/// For the host's runtime (`on_thread_park`): a worker is about to sleep.
pub fn parked() {
    if let Some(poll) = HOST.get() {
        poll.parked();
    }
}

/// A spinning thread and what it follows; dropping it ends the thread.
pub struct IdlePoll(Arc<Shared>);

struct Shared {
    window_ns: u64,
    since: Instant,
    /// When the last worker parked, in nanoseconds since `since`.
    last: AtomicU64,
    /// The CPU it parked on (-1: not known).
    cpu: AtomicI32,
    /// The spinner sleeps (set by it, cleared by the park that wakes it).
    asleep: AtomicBool,
    stop: AtomicBool,
    spinner: OnceLock<std::thread::Thread>,
    /// The spinner's thread id once it spins at its rank (for tests and `top -H`).
    tid: AtomicI32,
}

impl IdlePoll {
    /// Starts the spinner at `priority` (the host's: idle), asleep until the first
    /// [`IdlePoll::parked`].
    pub fn start(window: Duration, priority: Priority) -> std::io::Result<IdlePoll> {
        let shared = Arc::new(Shared {
            window_ns: u64::try_from(window.as_nanos()).unwrap_or(u64::MAX),
            since: Instant::now(),
            last: AtomicU64::new(0),
            cpu: AtomicI32::new(-1),
            asleep: AtomicBool::new(true),
            stop: AtomicBool::new(false),
            spinner: OnceLock::new(),
            tid: AtomicI32::new(0),
        });
        let spinner = shared.clone();
        std::thread::Builder::new().name("wasmop-poll".into()).spawn(move || spinner.run(priority))?;
        Ok(IdlePoll(shared))
    }

    /// A worker is about to sleep: keep its core awake for the window from now.
    pub fn parked(&self) {
        let s = &self.0;
        s.last.store(s.now(), SeqCst);
        // SAFETY: sched_getcpu takes no arguments and only reads the calling thread's CPU.
        s.cpu.store(unsafe { libc::sched_getcpu() }, SeqCst);
        // Only a park that finds the spinner asleep pays for waking it.
        if s.asleep.load(SeqCst) && s.asleep.swap(false, SeqCst) {
            s.wake();
        }
    }

    /// The spinner's thread id (0 until it runs at its rank).
    pub fn tid(&self) -> i32 {
        self.0.tid.load(SeqCst)
    }
}

impl Drop for IdlePoll {
    fn drop(&mut self) {
        self.0.stop.store(true, SeqCst);
        self.0.wake();
    }
}

impl Shared {
    fn now(&self) -> u64 {
        self.since.elapsed().as_nanos() as u64
    }

    fn within_window(&self) -> bool {
        self.now().saturating_sub(self.last.load(SeqCst)) < self.window_ns
    }

    /// After clearing `asleep` (or setting `stop`): the spinner either is known here
    /// or has yet to look at them (see `run`).
    fn wake(&self) {
        std::sync::atomic::fence(SeqCst);
        if let Some(t) = self.spinner.get() {
            t.unpark();
        }
    }

    fn run(&self, priority: Priority) {
        // Known before `asleep` is first read: a park either finds this thread to wake
        // or is seen by that read (the fences order the two sides).
        let _ = self.spinner.set(std::thread::current());
        std::sync::atomic::fence(SeqCst);
        priority.lower_own();
        if priority == Priority::Idle && !at_idle_priority() {
            tracing::warn!("the idle poller cannot run at idle priority here; idle polling is off");
            return;
        }
        let Some(home) = Affinity::own() else {
            tracing::warn!("the idle poller cannot read its CPUs; idle polling is off");
            return;
        };
        // SAFETY: gettid takes no arguments.
        self.tid.store(unsafe { libc::gettid() }, SeqCst);
        let mut on = -1;
        while !self.stop.load(SeqCst) {
            // `park` may return early; `asleep` says whether a park has come.
            while self.asleep.load(SeqCst) && !self.stop.load(SeqCst) {
                std::thread::park();
            }
            loop {
                let cpu = self.cpu.load(SeqCst);
                if cpu != on {
                    if !Affinity::one(cpu).is_some_and(|a| a.apply()) {
                        tracing::warn!(cpu, "the idle poller cannot move to a worker's CPU; idle polling is off");
                        return;
                    }
                    on = cpu;
                }
                if self.stop.load(SeqCst) {
                    return;
                }
                if !self.within_window() {
                    // Asleep first, then look again: a park in between either is seen
                    // here or finds `asleep` set and wakes us (both use SeqCst).
                    self.asleep.store(true, SeqCst);
                    if !self.within_window() || !self.asleep.swap(false, SeqCst) {
                        break;
                    }
                }
                for _ in 0..64 {
                    std::hint::spin_loop();
                }
            }
            // Asleep on the process's CPUs: the wake-up that a park sends then lands
            // where the kernel finds room (by the waker, as a rule), not on a CPU that
            // may have halted since.
            home.apply();
            on = -1;
        }
    }
}

/// Whether the calling thread runs at idle priority (`SCHED_IDLE`).
fn at_idle_priority() -> bool {
    // SAFETY: pid 0 is the calling thread; the call only reads its policy.
    unsafe { libc::sched_getscheduler(0) == libc::SCHED_IDLE }
}

/// A set of CPUs a thread may run on.
struct Affinity(libc::cpu_set_t);

impl Affinity {
    /// The calling thread's CPUs.
    fn own() -> Option<Affinity> {
        // SAFETY: a zeroed cpu_set_t is a valid empty set; the pointer and size describe
        // it for the call; pid 0 is the calling thread.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            (libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0).then_some(Affinity(set))
        }
    }

    /// Only `cpu` (None for a CPU this set type cannot name).
    fn one(cpu: i32) -> Option<Affinity> {
        let cpu = usize::try_from(cpu).ok().filter(|&c| c < libc::CPU_SETSIZE as usize)?;
        // SAFETY: a zeroed cpu_set_t is a valid empty set, and `cpu` is below CPU_SETSIZE.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            Some(Affinity(set))
        }
    }

    /// Moves the calling thread onto these CPUs; false if the kernel refuses (a CPU
    /// outside the process's cpuset, say).
    fn apply(&self) -> bool {
        // SAFETY: the pointer and size describe `self.0` for the call; pid 0 is the
        // calling thread.
        unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &self.0) == 0 }
    }
}

#[cfg(test)]
mod tests;
