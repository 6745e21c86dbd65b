use super::*;

/// One test at a time: each has a spinner of its own pinned where its parks were, and
/// two at once would take each other's CPU time on a small machine.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// The spinner's CPU time so far (`schedstat`'s first field, in nanoseconds).
fn cpu_ns(tid: i32) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).unwrap();
    text.split_whitespace().next().unwrap().parse().unwrap()
}

/// A field of the spinner's `stat`, counted from 1 as in proc(5) (3 and on).
fn stat_field(tid: i32, field: usize) -> String {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
    stat.rsplit_once(") ").unwrap().1.split_whitespace().nth(field - 3).unwrap().to_owned()
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

/// CPU time the spinner spent over `wait`.
fn spent_over(tid: i32, wait: Duration) -> Duration {
    let before = cpu_ns(tid);
    std::thread::sleep(wait);
    Duration::from_nanos(cpu_ns(tid) - before)
}

#[test]
fn a_park_keeps_the_core_busy_for_the_window_then_the_spinner_sleeps_until_the_next() {
    let _serial = serial();
    let window = Duration::from_millis(60);
    let (poll, tid) = started(window);
    // Before any park it sleeps.
    let idle = spent_over(tid, Duration::from_millis(100));
    assert!(idle < Duration::from_millis(5), "spun {idle:?} with no park");
    for round in 0..2 {
        let start = cpu_ns(tid);
        poll.parked();
        // It spins through the window (this thread sleeps meanwhile)...
        std::thread::sleep(window + Duration::from_millis(100));
        let spun = Duration::from_nanos(cpu_ns(tid) - start);
        assert!(spun >= window / 4, "round {round}: a park was followed by only {spun:?} of spinning");
        // CPU time cannot pass wall time, and the spin ends with its window.
        assert!(spun < window * 2, "round {round}: spun {spun:?}, past the {window:?} window");
        // ...and sleeps once it has passed: the next park wakes it again.
        let after = spent_over(tid, Duration::from_millis(100));
        assert!(after < Duration::from_millis(5), "round {round}: spun {after:?} after its window");
    }
}

#[test]
fn parks_closer_than_the_window_keep_it_spinning_on_the_parking_cpu() {
    let _serial = serial();
    let window = Duration::from_millis(100);
    let (poll, tid) = started(window);
    let start = cpu_ns(tid);
    let began = Instant::now();
    // A park every 10 ms or so for 300 ms: never a window without one.
    while began.elapsed() < Duration::from_millis(300) {
        poll.parked();
        std::thread::sleep(Duration::from_millis(10));
    }
    let spun = Duration::from_nanos(cpu_ns(tid) - start);
    assert!(spun >= Duration::from_millis(75), "spun only {spun:?} of 300 ms of parks");
    // It runs where the last park was (the spinner has to run to move there: give it time).
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        poll.parked();
        let parked_on = poll.0.cpu.load(SeqCst).to_string();
        std::thread::sleep(Duration::from_millis(20));
        if stat_field(tid, 39) == parked_on {
            break;
        }
        assert!(Instant::now() < deadline, "the spinner never ran on the parking CPU {parked_on}");
    }
}

#[test]
fn the_host_spinner_runs_at_idle_priority_under_its_own_name_and_ends_when_dropped() {
    let _serial = serial();
    let (poll, tid) = started_at(Duration::from_millis(1), Priority::Idle);
    assert_eq!(stat_field(tid, 41), "5", "SCHED_IDLE");
    let name = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).unwrap();
    assert_eq!(name.trim_end(), "wasmop-poll");
    poll.parked();
    drop(poll);
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::path::Path::new(&format!("/proc/self/task/{tid}")).exists() {
        assert!(Instant::now() < deadline, "the spinner outlived its poller");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn the_host_poller_is_off_until_started_and_a_zero_window_starts_nothing() {
    parked(); // no poller: nothing to do, nothing to panic
    start(Duration::ZERO).unwrap();
    assert!(HOST.get().is_none());
}
