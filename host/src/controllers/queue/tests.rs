use super::*;

#[tokio::test]
async fn dedupes_and_serializes_a_key() {
    let q = Queue::new();
    q.add("a");
    q.add("a");
    q.add("b");
    assert_eq!(q.depth(), 2);
    let k = q.next().await.unwrap();
    assert_eq!(k, "a");
    // Added while active: not handed out again until done.
    q.add("a");
    assert_eq!(q.next().await.unwrap(), "b");
    assert_eq!(q.depth(), 0);
    q.done(&"a", Duration::ZERO);
    assert_eq!(q.next().await.unwrap(), "a");
}

// Real time, short delays: only the order of events is asserted, and a slow machine
// only stretches the sleeps (a superseded schedule would fire well inside the last).
#[tokio::test]
async fn add_after_keeps_the_earliest() {
    let q = Queue::new();
    q.add_after("a", Duration::from_millis(400));
    q.add_after("a", Duration::from_millis(20));
    q.add_after("a", Duration::from_millis(200));
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert_eq!(q.depth(), 1);
    assert_eq!(q.next().await.unwrap(), "a");
    q.done(&"a", Duration::ZERO);
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(q.depth(), 0, "later schedules were superseded");
}

// Order, not speed: the timer moves due keys to pending in due order, so keys due
// at 50 ms come out before a sentinel due at 100 ms however late the timer runs,
// and nothing comes out again after the last superseded schedule (950 ms) passed.
#[tokio::test]
async fn many_delayed_adds_share_one_timer_and_fire_once_at_the_earliest() {
    let tasks = || tokio::runtime::Handle::current().metrics().num_alive_tasks();
    let before = tasks();
    let q: Arc<Queue<u32>> = Queue::new();
    for k in 0..1000u32 {
        // Even keys: each schedule earlier than the last (every one supersedes);
        // odd keys: each later (the first stands).
        for j in 0..10u64 {
            let step = if k % 2 == 0 { 9 - j } else { j };
            q.add_after(k, Duration::from_millis(50 + 100 * step));
        }
    }
    q.add_after(u32::MAX, Duration::from_millis(100));
    assert!(tasks() <= before + 1, "one timer task for the queue, not one per delayed add");
    assert!(q.inner.lock().unwrap().timers.len() <= 2 * 1001 + 64, "state in proportion to the keys");

    let mut out = Vec::new();
    while out.len() < 1001 {
        let k = q.next().await.unwrap();
        q.done(&k, Duration::ZERO);
        out.push(k);
    }
    assert_eq!(out.last(), Some(&u32::MAX), "every key fired at its earliest schedule, before the sentinel");
    assert_eq!(out.iter().collect::<HashSet<_>>().len(), 1001, "each key once");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(q.depth(), 0, "superseded schedules never fire");
    assert!(q.inner.lock().unwrap().timers.is_empty());
    q.close();
    // An aborted task is released the next time the runtime gets to it.
    for _ in 0..100 {
        if tasks() == before {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(tasks(), before, "the timer ends with the queue");
}

// Order, not speed: "b", due at 100 ms, comes out before "a", whose cooldown ends
// at 300 ms, however late the timer runs.
#[tokio::test]
async fn a_key_added_while_cooling_runs_once_when_the_cooldown_ends() {
    let q = Queue::new();
    q.add("a");
    assert_eq!(q.next().await.unwrap(), "a");
    q.add("a");
    q.done(&"a", Duration::from_millis(300));
    for _ in 0..100 {
        q.add("a");
    }
    assert_eq!(q.depth(), 0, "added while cooling, it waits");
    q.add_after("b", Duration::from_millis(100));
    assert_eq!(q.next().await.unwrap(), "b");
    q.done(&"b", Duration::ZERO);
    assert_eq!(q.next().await.unwrap(), "a");
    q.done(&"a", Duration::ZERO);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(q.depth(), 0, "once, however often it was added");
    // A cooldown that ended holds nothing back.
    q.add("c");
    assert_eq!(q.next().await.unwrap(), "c");
    q.done(&"c", Duration::from_millis(20));
    tokio::time::sleep(Duration::from_millis(60)).await;
    q.add("c");
    assert_eq!(q.depth(), 1);
}

#[test]
fn ended_cooldowns_are_swept() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    rt.block_on(async {
        let q: Arc<Queue<u32>> = Queue::new();
        for k in 0..10_000u32 {
            q.add(k);
            assert_eq!(q.next().await, Some(k));
            q.done(&k, Duration::from_nanos(1));
        }
        assert!(q.inner.lock().unwrap().cooling.len() < 100, "entries in proportion to the keys cooling");
    });
}

#[tokio::test]
async fn close_wakes_workers() {
    let q: Arc<Queue<&str>> = Queue::new();
    let q2 = q.clone();
    let w = tokio::spawn(async move { q2.next().await });
    tokio::task::yield_now().await;
    q.close();
    assert_eq!(w.await.unwrap(), None);
}
