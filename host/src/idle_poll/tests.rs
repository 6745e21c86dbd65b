use super::*;

/// The spinner's CPU time so far (`schedstat`'s first field, in nanoseconds).
fn cpu_ns(tid: i32) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).unwrap();
    text.split_whitespace().next().unwrap().parse().unwrap()
}

/// The spinner's scheduling policy (`stat`'s 41st field; 5 is SCHED_IDLE) and name.
fn policy_and_name(tid: i32) -> (u32, String) {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
    let (name, rest) = stat.split_once(" (").unwrap().1.rsplit_once(") ").unwrap();
    // `rest` starts at the 3rd field (state); the policy is the 41st.
    (rest.split_whitespace().nth(38).unwrap().parse().unwrap(), name.to_owned())
}

/// A poller whose spinner runs at the test's own rank: at idle priority a busy test
/// machine could leave it no CPU to show its spinning with.
fn started(window: Duration) -> (IdlePoll, i32) {
    started_at(window, Priority::Nice(0))
}

fn started_at(window: Duration, priority: Priority) -> (IdlePoll, i32) {
    let poll = IdlePoll::start(window, priority).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while poll.tid() == 0 {
        assert!(Instant::now() < deadline, "the spinner never started");
        std::thread::sleep(Duration::from_millis(1));
    }
    let tid = poll.tid();
    (poll, tid)
}

/// What spinning looks like from outside: CPU time the spinner spent over `wait`.
fn spent_over(tid: i32, wait: Duration) -> Duration {
    let before = cpu_ns(tid);
    std::thread::sleep(wait);
    Duration::from_nanos(cpu_ns(tid) - before)
}

#[test]
fn a_park_keeps_the_core_busy_for_the_window_then_the_spinner_sleeps_until_the_next() {
    let window = Duration::from_millis(60);
    let (poll, tid) = started(window);
    // Before any park it sleeps.
    let idle = spent_over(tid, Duration::from_millis(100));
    assert!(idle < Duration::from_millis(5), "spun {idle:?} with no park");
    for round in 0..2 {
        let start = cpu_ns(tid);
        poll.parked();
        // It spins through the window (this test's thread sleeps meanwhile, so the
        // spinner is not short of a core unless the machine is)...
        std::thread::sleep(window + Duration::from_millis(100));
        let spun = Duration::from_nanos(cpu_ns(tid) - start);
        assert!(spun >= window / 3, "round {round}: a park was followed by {spun:?} of spinning");
        assert!(spun < window * 3, "round {round}: spun {spun:?}, past the {window:?} window");
        // ...and sleeps once it has passed: the next park wakes it again.
        let after = spent_over(tid, Duration::from_millis(100));
        assert!(after < Duration::from_millis(5), "round {round}: spun {after:?} after its window");
    }
}

#[test]
fn parks_closer_than_the_window_keep_it_spinning_and_it_follows_the_parking_cpu() {
    let window = Duration::from_millis(40);
    let (poll, tid) = started(window);
    let start = cpu_ns(tid);
    let began = Instant::now();
    // A park every 10 ms for 200 ms: never a window without one.
    while began.elapsed() < Duration::from_millis(200) {
        poll.parked();
        std::thread::sleep(Duration::from_millis(10));
    }
    let spun = Duration::from_nanos(cpu_ns(tid) - start);
    assert!(spun >= Duration::from_millis(100), "spun only {spun:?} of 200 ms of parks");
    // It runs where the last park was.
    poll.parked();
    let here = poll.0.cpu.load(SeqCst);
    std::thread::sleep(Duration::from_millis(5));
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
    let last_cpu: i32 = stat.rsplit_once(") ").unwrap().1.split_whitespace().nth(36).unwrap().parse().unwrap();
    assert_eq!(last_cpu, here, "the spinner keeps the parking worker's core awake");
}

#[test]
fn the_host_spinner_runs_at_idle_priority_under_its_own_name() {
    let (_poll, tid) = started_at(Duration::from_millis(1), Priority::Idle);
    assert_eq!(policy_and_name(tid), (5, "wasmop-poll".to_owned()));
}

#[test]
fn the_host_poller_is_off_until_started_and_a_zero_window_starts_nothing() {
    parked(); // no poller: nothing to do, nothing to panic
    start(Duration::ZERO).unwrap();
    assert!(HOST.get().is_none());
}
