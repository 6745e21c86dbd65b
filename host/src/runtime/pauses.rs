//! Pauses in long background work: while a [`Pauses`] guard lives, its thread sleeps
//! for an instant after each [`PAUSE_EVERY`] of CPU time it runs, so a thread waiting
//! for its core gets it within about that.
//!
//! Why: a compile is one long run of CPU work with no blocking call in it. Once the
//! scheduler has picked it, it keeps the core until the next scheduler tick (4 ms at
//! HZ=250) even at nice 10: a review that wakes meanwhile may not preempt a thread whose
//! time slice the kernel still protects. On one core serving 5,000 reviews/s, a
//! reload's compile made 85 stalls of 4–9.5 ms per 10 s run (BENCHMARKS.md, issue 23).
//! A thread that sleeps every millisecond holds the core for at most about that.
//!
//! Why a sleep and not `sched_yield`: since Linux 6.6 a yield forfeits the rest of the
//! thread's time slice, so yielding often starves a niced compile (tried: a yield before
//! each function Cranelift compiles, through its incremental-cache hook, made every
//! reload's compile miss `AHEAD_TIME` under load). A sleeping thread keeps what it is
//! owed, so its share of a busy core is still set by its nice value.
//!
//! How: a POSIX timer on the monotonic clock (an hrtimer, not tick-bound as CPU-time
//! timers are) signals this one thread (`SIGEV_THREAD_ID`) every [`LOOK_EVERY`]; the
//! handler sleeps (`nanosleep` is async-signal-safe) if the thread has run for
//! [`PAUSE_EVERY`] since it last did. Why CPU time: a thread that waited for the core
//! has not held it, and a first build that paused by wall time paused each time it
//! got the core back, starving the compile past `AHEAD_TIME`. Interrupted system calls
//! restart (`SA_RESTART`).
//!
//! Cost: on an idle core, four timer signals and one sleep of the kernel's timer slack
//! (50 µs by default) per millisecond of work, about 5 % of its speed; figures in
//! BENCHMARKS.md (`host/examples/compile_time.rs`).
//!
//! Caveat: the signal (`SIGRTMIN + 7`) is the host's; the handler stays installed for
//! the life of the process, so a signal still pending when a guard drops is harmless.

use std::cell::Cell;
use std::sync::Once;
use std::time::Duration;

/// How often a paused thread offers its core. Why 1 ms: a quarter of the 4 ms a tick
/// gave; the timer and the sleep cost about 5 % of a thread that nobody waits for.
pub const PAUSE_EVERY: Duration = Duration::from_millis(1);

/// How often the timer looks: a run of [`PAUSE_EVERY`] then holds the core at most
/// this much longer.
pub const LOOK_EVERY: Duration = Duration::from_micros(250);

thread_local! {
    /// Pauses this thread has taken (the handler counts them; a const thread-local
    /// needs no allocation, so the handler may touch it).
    static TAKEN: Cell<u64> = const { Cell::new(0) };
    /// This thread's CPU time at its last pause.
    static SINCE: Cell<u64> = const { Cell::new(0) };
}
static INSTALL: Once = Once::new();

fn signal() -> libc::c_int {
    libc::SIGRTMIN() + 7
}

/// This thread's CPU time, in ns (clock_gettime is async-signal-safe).
fn cpu_ns() -> u64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime fills the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

extern "C" fn pause(_: libc::c_int) {
    // Only a thread that has run for PAUSE_EVERY since its last pause pauses: the
    // timer counts wall time, and a thread that waited for the core meanwhile has not
    // held it (pausing it then would starve it on a busy core).
    if cpu_ns().saturating_sub(SINCE.get()) < PAUSE_EVERY.as_nanos() as u64 {
        return;
    }
    // SAFETY: errno is this thread's; nanosleep is async-signal-safe and is given a
    // valid timespec; errno is put back as the interrupted code left it.
    unsafe {
        let errno = *libc::__errno_location();
        let nap = libc::timespec { tv_sec: 0, tv_nsec: 1_000 };
        libc::nanosleep(&nap, std::ptr::null_mut());
        *libc::__errno_location() = errno;
    }
    TAKEN.set(TAKEN.get() + 1);
    SINCE.set(cpu_ns());
}

/// See the module docs. Not `Send`: its timer signals the thread that made it.
pub struct Pauses {
    timer: libc::timer_t,
}

impl Pauses {
    /// Pauses the calling thread after each [`PAUSE_EVERY`] of CPU time, looking every
    /// `period` of wall time, until the guard drops; None if the timer cannot be made
    /// (the work then runs without pauses, as before).
    pub fn every(period: Duration) -> Option<Pauses> {
        SINCE.set(cpu_ns());
        INSTALL.call_once(|| {
            // SAFETY: a zeroed sigaction is valid; the handler only sleeps and counts.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = pause as *const () as libc::sighandler_t;
                sa.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut sa.sa_mask);
                if libc::sigaction(signal(), &sa, std::ptr::null_mut()) != 0 {
                    tracing::warn!("cannot install the pause handler: {}", std::io::Error::last_os_error());
                }
            }
        });
        // SAFETY: sev and its is plain data; the timer signals this thread only.
        unsafe {
            let mut sev: libc::sigevent = std::mem::zeroed();
            sev.sigev_notify = libc::SIGEV_THREAD_ID;
            sev.sigev_signo = signal();
            sev.sigev_notify_thread_id = libc::syscall(libc::SYS_gettid) as libc::c_int;
            let mut timer: libc::timer_t = std::ptr::null_mut();
            if libc::timer_create(libc::CLOCK_MONOTONIC, &mut sev, &mut timer) != 0 {
                tracing::warn!("cannot pause background work: {}", std::io::Error::last_os_error());
                return None;
            }
            let p = libc::timespec { tv_sec: period.as_secs() as _, tv_nsec: period.subsec_nanos() as _ };
            let its = libc::itimerspec { it_interval: p, it_value: p };
            libc::timer_settime(timer, 0, &its, std::ptr::null_mut());
            Some(Pauses { timer })
        }
    }

    /// Pauses the calling thread has taken so far.
    pub fn taken() -> u64 {
        TAKEN.get()
    }
}

impl Drop for Pauses {
    fn drop(&mut self) {
        // SAFETY: the timer was made by `every` and is deleted once.
        unsafe { libc::timer_delete(self.timer) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// Voluntary context switches of the calling thread.
    fn gave_way() -> i64 {
        // SAFETY: getrusage fills the struct it is given.
        unsafe {
            let mut u: libc::rusage = std::mem::zeroed();
            libc::getrusage(libc::RUSAGE_THREAD, &mut u);
            u.ru_nvcsw
        }
    }

    fn spin(d: Duration) {
        let t = Instant::now();
        while t.elapsed() < d {
            std::hint::spin_loop();
        }
    }

    #[test]
    fn a_busy_thread_gives_way_every_period_while_the_guard_lives_and_not_after() {
        std::thread::spawn(|| {
            let (taken, switched) = (Pauses::taken(), gave_way());
            let guard = Pauses::every(LOOK_EVERY).expect("a timer");
            spin(Duration::from_millis(100));
            drop(guard);
            let (during, switches) = (Pauses::taken() - taken, gave_way() - switched);
            // About 100 (a pause per ms of CPU); a busy test machine takes some.
            assert!(during >= 20, "{during} pauses in 100 ms");
            assert!(switches >= 20, "{switches} times the core was offered");
            spin(Duration::from_millis(20));
            assert!(Pauses::taken() - taken <= during + 1, "no pauses once the guard is gone");
        })
        .join()
        .unwrap();
    }
}
