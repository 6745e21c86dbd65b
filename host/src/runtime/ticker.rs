//! The epoch ticker: advances every engine's epoch once a tick while a plugin call
//! runs, and sleeps while none does.
//!
//! Why: the epoch is what makes running wasm yield (so deadlines fire and calls take
//! turns); with no call running nothing reads it, and a thread waking every 10 ms was
//! most of an idle host's CPU (`scripts/bench-idle.py`).
//!
//! Guarantees: from the moment a [`Running`] guard exists until it drops, the epoch
//! advances at least once a tick (the first time one tick after the ticker woke), so
//! a call's deadline and yields work exactly as with a ticker that never sleeps.
//! Caveat: the guard must be held across the whole time guest code may run; wasm run
//! without one never yields.
//!
//! Cost: a call wakes the thread only if it waits for one. Between two ticks the
//! thread is asleep for the tick, not waiting, and sees a new call when it wakes; so a
//! webhook's reviews, one after another, make no system call here (a condvar's
//! notify is a futex call whether anyone waits or not: one per review before).

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

#[derive(Default)]
struct State {
    running: usize,
    stopped: bool,
    /// The thread waits on `wake` (not asleep for a tick): only then must a call wake it.
    waiting: bool,
    /// How many times a call woke the thread.
    #[cfg(test)]
    woken: usize,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

/// Owns the ticker thread; dropping it ends the thread.
pub(super) struct Ticker(Arc<Shared>);

/// A handle that starts calls on a ticker, for a call that owns what it needs.
#[derive(Clone)]
pub(super) struct Ticks(Arc<Shared>);

/// One running call: the ticker keeps ticking while any exists.
pub(super) struct Running(Arc<Shared>);

impl Ticker {
    /// Starts the thread; `tick` advances every engine's epoch by one.
    pub(super) fn start(every: Duration, tick: impl Fn() + Send + 'static) -> std::io::Result<Ticker> {
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        std::thread::Builder::new().name("wasmop-epoch".into()).spawn(move || {
            loop {
                {
                    let mut st = s.state.lock().unwrap();
                    while st.running == 0 && !st.stopped {
                        st.waiting = true;
                        st = s.wake.wait(st).unwrap();
                        st.waiting = false;
                    }
                    if st.stopped {
                        return;
                    }
                }
                std::thread::sleep(every);
                tick();
            }
        })?;
        Ok(Ticker(shared))
    }

    /// A handle for calls that own what they need (`call`).
    pub(super) fn ticks(&self) -> Ticks {
        Ticks(self.0.clone())
    }
}

impl Ticks {
    /// Held while guest code may run.
    pub(super) fn running(&self) -> Running {
        let mut st = self.0.state.lock().unwrap();
        st.running += 1;
        // Woken once: later calls before the thread runs need not call again.
        let wake = std::mem::take(&mut st.waiting);
        #[cfg(test)]
        {
            st.woken += usize::from(wake);
        }
        // Notified after the lock is released: the thread, woken on this core, would
        // otherwise run only to wait for the lock, and be woken once more for it.
        drop(st);
        if wake {
            self.0.wake.notify_one();
        }
        Running(self.0.clone())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.state.lock().unwrap().running -= 1;
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.0.state.lock().unwrap().stopped = true;
        self.0.wake.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn counting() -> (Ticker, Arc<AtomicUsize>) {
        let n = Arc::new(AtomicUsize::new(0));
        let c = n.clone();
        let t = Ticker::start(Duration::from_millis(2), move || {
            c.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
        (t, n)
    }

    #[test]
    fn ticks_while_a_call_runs_and_not_otherwise() {
        let (ticker, ticks) = counting();
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(ticks.load(Ordering::SeqCst), 0, "no call ran, yet the epoch advanced");
        let call = ticker.ticks().running();
        std::thread::sleep(Duration::from_millis(50));
        let during = ticks.load(Ordering::SeqCst);
        assert!(during >= 3, "a running call saw {during} ticks in 50 ms at a 2 ms tick");
        drop(call);
        std::thread::sleep(Duration::from_millis(10));
        let after = ticks.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(ticks.load(Ordering::SeqCst), after, "the ticker kept ticking after the last call ended");
    }

    #[test]
    fn calls_one_after_another_wake_the_thread_once() {
        let (ticker, ticks) = counting();
        std::thread::sleep(Duration::from_millis(20));
        // Reviews back to back, as a busy webhook's: 1 ms each, 0.1 ms apart.
        let started = std::time::Instant::now();
        while started.elapsed() < Duration::from_millis(60) {
            let call = ticker.ticks().running();
            std::thread::sleep(Duration::from_millis(1));
            drop(call);
            std::thread::sleep(Duration::from_micros(100));
        }
        let woken = ticker.0.state.lock().unwrap().woken;
        let ticked = ticks.load(Ordering::SeqCst);
        assert!(ticked >= 3, "calls ran for 60 ms at a 2 ms tick, yet the epoch advanced {ticked} times");
        // The thread waits only when it finds no call at the end of a tick: at most
        // once a tick, not once a call (~55 calls here).
        assert!(woken <= ticked + 1, "{woken} wake-ups for {ticked} ticks");
    }

    #[test]
    fn ticks_until_the_last_of_overlapping_calls_ends() {
        let (ticker, ticks) = counting();
        let a = ticker.ticks().running();
        let b = ticker.ticks().running();
        drop(a);
        let before = ticks.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(50));
        assert!(ticks.load(Ordering::SeqCst) > before, "one call still runs, yet the ticker slept");
        drop(b);
    }
}
