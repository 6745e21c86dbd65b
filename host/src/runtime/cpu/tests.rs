//! The lane's rules, each against a hand-driven meter: short first, long and heavy
//! calls in turns, faulting work paced.

use super::*;

/// What "at once" allows on a loaded machine: well under a [`PACE`] wait.
const AT_ONCE: Duration = Duration::from_millis(30);

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
            let t = thread_cpu();
            while thread_cpu() - t < LONG * 2 {
                std::hint::spin_loop();
            }
            assert!(m.spent() >= LONG * 2, "the current poll counts");
            // Long now; its own poll does not make the host busy, so on a quiet
            // host its turn is just a yield.
            let t = tokio::time::Instant::now();
            cpu.pace(&m).expect("long: yields").await;
            assert!(t.elapsed() < AT_ONCE, "long on a quiet host: computes on ({:?})", t.elapsed());
            assert_eq!(cpu.polling.load(Relaxed), 0);
            assert!(m.long.load(Relaxed));
        },
        meter.clone(),
    )
    .await;
    assert!(meter.spent() >= LONG * 2);
}

#[tokio::test]
async fn a_poll_held_up_off_the_cpu_is_not_thread_time() {
    // A healthy review's poll that blocks on a lock an aside thread holds, or that the
    // kernel preempts: 30 ms by the wall clock, next to nothing computed.
    let cpu = Cpu::new();
    let meter = Meter::new(&cpu, "healthy".into());
    let m = meter.clone();
    let c = cpu.clone();
    Metered::new(
        async move {
            std::thread::sleep(LONG * 3);
            assert!(m.spent() < LONG, "blocked, not computing: {:?}", m.spent());
            assert!(c.pace(&m).is_none(), "still short: it computes on, in place");
            assert!(!m.goes_aside());
        },
        meter.clone(),
    )
    .await;
    assert!(meter.spent() < LONG, "{:?}", meter.spent());
    // Its plugin's mean stays far from heavy, so its next review starts at once.
    for _ in 0..8 {
        cpu.ended(&"healthy/review".into(), meter.spent(), false);
    }
    let busy = Meter::new(&cpu, "other".into());
    busy.begin();
    let t = tokio::time::Instant::now();
    cpu.admit("healthy/review", &Meter::new(&cpu, "healthy".into())).await;
    assert!(t.elapsed() < AT_ONCE, "{:?}", t.elapsed());
    busy.end();
}

#[test]
fn thread_time_read_on_another_thread_leaves_out_the_poll_under_way() {
    // The caller reads a moved call's time when it timed out, while a step of it may
    // still run on an aside thread: this thread's clock says nothing of that poll.
    let cpu = Cpu::new();
    let meter = Meter::new(&cpu, "p".into());
    let t = thread_cpu();
    while thread_cpu() - t < LONG * 2 {
        std::hint::spin_loop();
    }
    let m = meter.clone();
    std::thread::spawn(move || m.begin()).join().unwrap();
    assert!(meter.spent() < LONG, "{:?}", meter.spent());
}

#[tokio::test]
async fn a_heavy_plugins_calls_wait_before_they_start_while_short_ones_are_busy() {
    let cpu = Cpu::new();
    let short = Meter::new(&cpu, "healthy".into());
    short.begin();
    // Never called yet, or calls of a fraction of a millisecond: not heavy.
    let t = tokio::time::Instant::now();
    cpu.admit("greedy", &Meter::new(&cpu, "greedy".into())).await;
    for _ in 0..20 {
        cpu.ended(&"greedy".into(), Duration::from_micros(200), false);
    }
    cpu.admit("greedy", &Meter::new(&cpu, "greedy".into())).await;
    assert!(t.elapsed() < AT_ONCE, "{:?}", t.elapsed());
    // Calls of 20 ms each: heavy after a few, and waits its turn.
    for _ in 0..4 {
        cpu.ended(&"greedy".into(), LONG * 2, false);
    }
    let t = tokio::time::Instant::now();
    cpu.admit("greedy", &Meter::new(&cpu, "greedy".into())).await;
    assert!(t.elapsed() >= PACE, "{:?}", t.elapsed());
    // On a quiet host it starts at once, its own polls (as in `call.rs`, inside
    // its metered future) not counted as a short call's.
    short.end();
    tokio::time::sleep(QUIET * 2).await;
    let t = tokio::time::Instant::now();
    let meter = Meter::new(&cpu, "greedy".into());
    let (c, m) = (cpu.clone(), meter.clone());
    Metered::new(async move { c.admit("greedy", &m).await }, meter).await;
    assert!(t.elapsed() < AT_ONCE, "{:?}", t.elapsed());
    assert_eq!(cpu.polling.load(Relaxed), 0);
    drop(short);
}

#[tokio::test]
async fn a_plugin_whose_calls_keep_faulting_is_paced_even_on_a_quiet_host_one_fault_is_not() {
    let cpu = Cpu::new();
    let quick = Duration::from_micros(300);
    let admit = async |work: &str| {
        let t = tokio::time::Instant::now();
        cpu.admit(work, &Meter::new(&cpu, work.into())).await;
        t.elapsed()
    };
    // One trap among quick, clean reviews: starts at once.
    for faulted in [false, false, true, false, false] {
        cpu.ended(&"flaky/review".into(), quick, faulted);
    }
    let waited = admit("flaky/review").await;
    assert!(waited < AT_ONCE, "one fault: starts at once ({waited:?})");
    // Reviews that each fail 0.3 ms in, at the memory budget: paced after six,
    // though nothing else runs.
    for _ in 0..5 {
        cpu.ended(&"grabby/review".into(), quick, true);
    }
    let waited = admit("grabby/review").await;
    assert!(waited < AT_ONCE, "five faults: not yet ({waited:?})");
    cpu.ended(&"grabby/review".into(), quick, true);
    let waited = admit("grabby/review").await;
    assert!(waited >= PACE, "faulting work is paced: {waited:?}");
    // Its faults are its own: the same plugin's reconciles start at once.
    cpu.ended(&"grabby/reconcile".into(), quick, false);
    let waited = admit("grabby/reconcile").await;
    assert!(waited < AT_ONCE, "{waited:?}");
}

#[test]
fn calls_that_never_ran_leave_what_a_plugins_calls_compute() {
    // A plugin that fills 120 MiB per call: heavy.
    let cpu = Cpu::new();
    let work: Arc<str> = "grabby/review".into();
    for _ in 0..16 {
        cpu.ended(&work, LONG * 4, false);
    }
    // Then a flood of its calls time out queueing for slots: faults, each of them, but
    // they computed nothing, which says nothing of what its calls compute.
    for _ in 0..64 {
        cpu.timed_out_waiting(&work);
    }
    let m = cpu.means.lock().unwrap()[&work];
    assert!(m.thread >= HEAVY.as_secs_f64(), "still heavy: {} s", m.thread);
    assert!(m.faults >= FAULTING, "and faulting: {}", m.faults);
}

#[tokio::test]
async fn heavy_reconciles_do_not_make_the_same_plugins_reviews_wait() {
    let cpu = Cpu::new();
    let short = Meter::new(&cpu, "other".into());
    short.begin();
    for _ in 0..8 {
        cpu.ended(&"sidecarset/reconcile".into(), LONG * 4, false);
        cpu.ended(&"sidecarset/review".into(), Duration::from_micros(200), false);
    }
    let t = tokio::time::Instant::now();
    cpu.admit("sidecarset/review", &Meter::new(&cpu, "sidecarset/review".into())).await;
    assert!(t.elapsed() < AT_ONCE, "a quick review starts at once: {:?}", t.elapsed());
    let t = tokio::time::Instant::now();
    cpu.admit("sidecarset/reconcile", &Meter::new(&cpu, "sidecarset/reconcile".into())).await;
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
    assert!(t.elapsed() < AT_ONCE, "quiet again: {:?}", t.elapsed());
}

#[tokio::test]
async fn a_flood_of_faulting_calls_holds_another_plugins_long_call_for_one_turn_not_all_of_theirs() {
    let cpu = Cpu::new();
    for _ in 0..8 {
        cpu.ended(&"flood/review".into(), Duration::from_micros(300), true);
    }
    // Twenty of the flood's calls wait for their paced turns, ~PACE each.
    let flood: Vec<_> = (0..20)
        .map(|_| {
            let cpu = cpu.clone();
            tokio::spawn(async move { cpu.admit("flood/review", &Meter::new(&cpu, "flood".into())).await })
        })
        .collect();
    tokio::time::sleep(QUIET * 5).await;
    // A short call keeps the host busy, and a healthy plugin's call has gone long.
    let short = Meter::new(&cpu, "other".into());
    short.begin();
    let long = Meter::new(&cpu, "healthy".into());
    long.long.store(true, Relaxed);
    let t = tokio::time::Instant::now();
    cpu.pace(&long).expect("busy: it takes a turn").await;
    let waited = t.elapsed();
    // The flood's turn under way, then its own (which waits out PACE while busy).
    assert!(waited < PACE * 4, "first come, first served would be 20 turns of the flood's: {waited:?}");
    assert!(flood.iter().any(|f| !f.is_finished()), "the flood still waits its turns");
    short.end();
    flood.iter().for_each(|f| f.abort());
}
