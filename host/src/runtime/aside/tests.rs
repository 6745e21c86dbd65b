//! Moving calls aside: where each part of a call runs, and what dropping it does.

use super::*;
use crate::runtime::cpu::{Cpu, Metered};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::time::{Duration, Instant};

const NICE: i32 = 10;

use super::super::niced::own_priority as own_nice;

/// Computes for `d` of the thread's CPU time, which is what the meter counts: by the
/// wall clock, a spin preempted on a busy machine left the call short.
fn spin(d: Duration) {
    let t = crate::runtime::cpu::thread_cpu();
    while crate::runtime::cpu::thread_cpu() - t < d {
        std::hint::spin_loop();
    }
}

/// The nice value and thread name a part of a call ran with.
fn here() -> (i32, String) {
    (own_nice(), std::thread::current().name().unwrap_or_default().to_owned())
}

/// A host's CPU state, its aside threads (at nice `NICE`), and one call's meter.
fn fresh() -> (Arc<Cpu>, Aside, Arc<Meter>) {
    fresh_at(Priority::Nice(NICE))
}

/// As `fresh`, with the aside threads at `priority`.
fn fresh_at(priority: Priority) -> (Arc<Cpu>, Aside, Arc<Meter>) {
    let cpu = Cpu::new();
    let meter = Meter::new(&cpu, "p".into());
    (cpu, Aside::new(1, priority), meter)
}

/// Inside a call: computes until it is long, then takes its turn, where it moves.
async fn turn_long(cpu: &Arc<Cpu>, meter: &Meter) {
    spin(super::super::cpu::LONG * 2);
    cpu.pace(meter).expect("long: yields").await;
}

#[tokio::test]
async fn a_call_that_turns_long_finishes_on_a_niced_aside_thread() {
    let (cpu, aside, meter) = fresh();
    let (m, c) = (meter.clone(), cpu.clone());
    let call = Box::pin(Metered::new(
        async move {
            let before = here();
            turn_long(&c, &m).await;
            (before, here())
        },
        meter.clone(),
    ));
    let (before, after) = aside.run(call, meter).await.unwrap();
    assert_eq!(before, here(), "a call starts where it was called");
    assert_eq!(after.1, "wasmop-aside", "a long call finishes aside");
    assert!(after.0 >= NICE, "niced: {after:?}");
    assert_eq!(own_nice(), before.0, "the caller's thread keeps its priority");
}

#[tokio::test]
async fn at_idle_priority_a_long_call_finishes_on_an_idle_thread() {
    let (cpu, aside, meter) = fresh_at(Priority::Idle);
    let (m, c) = (meter.clone(), cpu.clone());
    let call = Box::pin(Metered::new(
        async move {
            turn_long(&c, &m).await;
            (super::super::niced::own_policy(), here())
        },
        meter.clone(),
    ));
    let (policy, (nice, name)) = aside.run(call, meter).await.unwrap();
    assert_eq!((policy, name.as_str()), (libc::SCHED_IDLE, "wasmop-aside"), "a long call finishes aside, at idle");
    assert_eq!(nice, 19, "and at nice 19 beneath it, where the kernel refuses idle");
    assert_eq!(super::super::niced::own_policy(), libc::SCHED_OTHER, "the caller's thread keeps its policy");
}

#[tokio::test]
async fn a_short_call_runs_in_place_to_the_end() {
    let (_cpu, aside, meter) = fresh();
    let call = Box::pin(Metered::new(
        async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            here()
        },
        meter.clone(),
    ));
    assert_eq!(aside.run(call, meter).await, Some(here()), "waiting is not computing: it stays");
    assert!(aside.0.rt.get().is_none(), "no call moved, so no aside thread was started");
}

#[tokio::test]
async fn a_heavy_works_next_call_moves_aside_before_it_computes() {
    let cpu = Cpu::new();
    let aside = Aside::new(1, Priority::Nice(NICE));
    let work: Arc<str> = "p/review".into();
    for _ in 0..16 {
        cpu.ended(&work, Duration::from_millis(40), false);
    }
    let meter = Meter::new(&cpu, "p".into());
    let (m, c, w) = (meter.clone(), cpu.clone(), work.clone());
    let call = Box::pin(Metered::new(
        async move {
            c.admit(&w, &m).await;
            here()
        },
        meter.clone(),
    ));
    let (nice, name) = aside.run(call, meter).await.unwrap();
    assert!(nice >= NICE && name == "wasmop-aside", "heavy work computes aside from its first instruction");
}

#[tokio::test]
async fn dropping_a_moved_call_stops_and_drops_it_on_the_aside_thread() {
    struct Dropped(Arc<AtomicBool>);
    impl Drop for Dropped {
        fn drop(&mut self) {
            assert!(own_nice() >= NICE, "dropped where it ran");
            self.0.store(true, SeqCst);
        }
    }
    let (cpu, aside, meter) = fresh();
    let (dropped, steps) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
    let (m, c, d, s) = (meter.clone(), cpu.clone(), dropped.clone(), steps.clone());
    let call = Box::pin(Metered::new(
        async move {
            let _held = Dropped(d);
            turn_long(&c, &m).await;
            loop {
                s.fetch_add(1, SeqCst);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        },
        meter.clone(),
    ));
    // What the deadline does to a call: drops it.
    let r = tokio::time::timeout(Duration::from_millis(100), aside.run(call, meter)).await;
    assert!(r.is_err());
    let t = Instant::now();
    while !dropped.load(SeqCst) {
        assert!(t.elapsed() < Duration::from_secs(5), "the moved call was never dropped");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let after = steps.load(SeqCst);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(steps.load(SeqCst), after, "the moved call went on after it was dropped");
}

#[tokio::test]
async fn a_panic_aside_reaches_the_caller_as_a_panic() {
    let (cpu, aside, meter) = fresh();
    let (m, c) = (meter.clone(), cpu.clone());
    let call: Moveable<()> = Box::pin(Metered::new(
        async move {
            turn_long(&c, &m).await;
            panic!("on purpose");
        },
        meter.clone(),
    ));
    let r = tokio::spawn(aside.run(call, meter)).await;
    assert!(r.unwrap_err().is_panic());
}

#[tokio::test]
async fn what_a_moved_call_spawns_runs_on_the_callers_runtime() {
    let (cpu, aside, meter) = fresh();
    let (m, c) = (meter.clone(), cpu.clone());
    let call = Box::pin(Metered::new(
        async move {
            turn_long(&c, &m).await;
            // As the cluster client does with a new connection.
            let spawned = tokio::spawn(async { here() }).await.unwrap();
            (here(), spawned)
        },
        meter.clone(),
    ));
    let (moved, spawned) = aside.run(call, meter).await.unwrap();
    assert_eq!(moved.1, "wasmop-aside", "the call itself moved aside");
    assert_eq!(spawned, here(), "its spawned task serves from the host's runtime, not at the aside threads' share");
}
