//! Keeps the core the host's runtime just ran on awake for a moment after the runtime
//! goes idle, so that the next request finds it running rather than halted: idle
//! polling, as Seastar's reactor does (`--idle-poll-time-us`), done from user space.
//!
//! Why: on a virtual machine whose guest halt polling is off (this project's Firecracker
//! machines boot with `haltpoll.guest_halt_poll_ns=0`), a core with nothing to run
//! halts, and waking a halted core is the hypervisor's job: tens of microseconds
//! usually, a few milliseconds now and then, when the hypervisor has lent the core out.
//! A webhook's tail is made of such moments: with the machine's halt polling at 200 µs
//! the quiet 5,000 reviews/s rows met issue 23's goal and without it they did not
//! (BENCHMARKS.md, issue 23). An admin of a cluster often cannot change the nodes'
//! setting; the host can keep its own core from halting while requests flow.
//!
//! Flow: the host's runtime calls [`parked`] as each of its workers is about to sleep
//! (tokio's `on_thread_park`); it notes the time and the worker's CPU. One thread,
//! `wasmop-poll`, at idle priority (`SCHED_IDLE`), then spins on that CPU until the
//! window has passed since the last park, and sleeps until the next park after that.
//! A worker woken by a request preempts it at once: the kernel always preempts an
//! idle-policy thread for a waking normal one.
//!
//! Cost: CPU only while requests come. After each park the spin lasts at most the
//! window, so an idle host spins not at all, a host with a request a second spins a
//! window's worth a second, and one whose requests come closer together than the
//! window keeps the core busy in their gaps (reported as the host's CPU; the spin
//! never delays work of the host's, which preempts it).
//!
//! Caveats: off unless asked for (`--idle-poll-us`). Under a CPU quota (a container's
//! CPU limit) the spin counts against the quota like any work, and a throttled cgroup
//! stalls all its threads until the next period, so turn it on only for a host with
//! whole cores of its own (a Guaranteed Pod, or no CPU limit). It follows one CPU, the
//! last worker's to park: a host with several workers keeps only that one core awake.

use crate::runtime::Priority;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The host's idle poller, once `run` has started it; [`parked`] does nothing before.
static HOST: OnceLock<IdlePoll> = OnceLock::new();

/// Starts the host's idle poller with `window` (nothing for a zero window). Once per
/// process: a second call changes nothing.
pub fn start(window: Duration) -> std::io::Result<()> {
    if window.is_zero() || HOST.get().is_some() {
        return Ok(());
    }
    let poll = IdlePoll::start(window, Priority::Idle)?;
    let _ = HOST.set(poll);
    Ok(())
}

/// For the host's runtime (`on_thread_park`): a worker is about to sleep.
pub fn parked() {
    if let Some(poll) = HOST.get() {
        poll.parked();
    }
}

/// A spinning thread and what it follows.
#[derive(Clone)]
pub struct IdlePoll(Arc<Shared>);

struct Shared {
    window: Duration,
    since: Instant,
    /// When the last worker parked, in nanoseconds since `since`.
    last: AtomicU64,
    /// The CPU it parked on (-1: not known).
    cpu: AtomicI32,
    /// The spinner sleeps (set by it, cleared by the park that wakes it).
    asleep: AtomicBool,
    lock: Mutex<()>,
    wake: Condvar,
    /// The spinner's thread id, for tests and for `top -H`.
    tid: AtomicI32,
}

impl IdlePoll {
    /// Starts the spinner at `priority` (the host's: idle), asleep until the first
    /// [`IdlePoll::parked`].
    pub fn start(window: Duration, priority: Priority) -> std::io::Result<IdlePoll> {
        let shared = Arc::new(Shared {
            window,
            since: Instant::now(),
            last: AtomicU64::new(0),
            cpu: AtomicI32::new(-1),
            asleep: AtomicBool::new(true),
            lock: Mutex::new(()),
            wake: Condvar::new(),
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
            let _held = s.lock.lock().unwrap();
            s.wake.notify_one();
        }
    }

    /// The spinner's thread id (0 until it has started).
    pub fn tid(&self) -> i32 {
        self.0.tid.load(SeqCst)
    }
}

impl Shared {
    fn now(&self) -> u64 {
        self.since.elapsed().as_nanos() as u64
    }

    fn within_window(&self) -> bool {
        self.now().saturating_sub(self.last.load(SeqCst)) < self.window.as_nanos() as u64
    }

    fn run(&self, priority: Priority) {
        priority.lower_own();
        // SAFETY: gettid takes no arguments.
        self.tid.store(unsafe { libc::gettid() }, SeqCst);
        let mut on = -1;
        loop {
            {
                let mut held = self.lock.lock().unwrap();
                while self.asleep.load(SeqCst) {
                    held = self.wake.wait(held).unwrap();
                }
            }
            loop {
                let cpu = self.cpu.load(SeqCst);
                if cpu != on && cpu >= 0 {
                    pin_to(cpu);
                    on = cpu;
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
        }
    }
}

/// Moves the calling thread onto `cpu` (left where it is if the kernel refuses: a CPU
/// outside the process's set, say).
fn pin_to(cpu: i32) {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET writes within it for any cpu
    // below CPU_SETSIZE (checked); pid 0 is the calling thread.
    unsafe {
        if cpu as usize >= libc::CPU_SETSIZE as usize {
            return;
        }
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

#[cfg(test)]
mod tests;
