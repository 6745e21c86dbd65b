//! A work queue with the guarantees controller-runtime's gives: a key is never handed to
//! two workers at once; a key added while it is being worked on runs once more after;
//! adding a key already waiting does nothing; delayed adds keep only the earliest time.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

struct Inner<K> {
    pending: VecDeque<K>,
    queued: HashSet<K>,
    active: HashSet<K>,
    dirty: HashSet<K>,
    scheduled: HashMap<K, Instant>,
    closed: bool,
}

pub struct Queue<K> {
    inner: Mutex<Inner<K>>,
    notify: Notify,
}

impl<K: Eq + Hash + Clone + Send + 'static> Queue<K> {
    pub fn new() -> Arc<Self> {
        Arc::new(Queue {
            inner: Mutex::new(Inner {
                pending: VecDeque::new(),
                queued: HashSet::new(),
                active: HashSet::new(),
                dirty: HashSet::new(),
                scheduled: HashMap::new(),
                closed: false,
            }),
            notify: Notify::new(),
        })
    }

    pub fn add(&self, key: K) {
        let mut q = self.inner.lock().unwrap();
        if q.closed {
            return;
        }
        if q.active.contains(&key) {
            q.dirty.insert(key);
        } else if q.queued.insert(key.clone()) {
            q.pending.push_back(key);
            drop(q);
            self.notify.notify_one();
        }
    }

    /// Adds `key` after `delay`, unless it is already scheduled sooner.
    pub fn add_after(self: &Arc<Self>, key: K, delay: Duration) {
        let at = Instant::now() + delay;
        {
            let mut q = self.inner.lock().unwrap();
            if q.closed || q.scheduled.get(&key).is_some_and(|t| *t <= at) {
                return;
            }
            q.scheduled.insert(key.clone(), at);
        }
        let this = Arc::downgrade(self);
        tokio::spawn(async move {
            tokio::time::sleep_until(at).await;
            let Some(q) = this.upgrade() else { return };
            let due = {
                let mut inner = q.inner.lock().unwrap();
                match inner.scheduled.get(&key) {
                    Some(t) if *t == at => {
                        inner.scheduled.remove(&key);
                        true
                    }
                    _ => false,
                }
            };
            if due {
                q.add(key);
            }
        });
    }

    /// The next key to work on; None once the queue is closed and drained of waiters.
    pub async fn next(&self) -> Option<K> {
        loop {
            let notified = self.notify.notified();
            {
                let mut q = self.inner.lock().unwrap();
                if q.closed {
                    return None;
                }
                if let Some(k) = q.pending.pop_front() {
                    q.queued.remove(&k);
                    q.active.insert(k.clone());
                    if !q.pending.is_empty() {
                        self.notify.notify_one();
                    }
                    return Some(k);
                }
            }
            notified.await;
        }
    }

    /// Marks `key` finished; re-queues it if it was added meanwhile.
    pub fn done(&self, key: &K) {
        let mut q = self.inner.lock().unwrap();
        q.active.remove(key);
        if q.dirty.remove(key) && q.queued.insert(key.clone()) {
            q.pending.push_back(key.clone());
            drop(q);
            self.notify.notify_one();
        }
    }

    /// Stops handing out work; workers see None and exit.
    pub fn close(&self) {
        self.inner.lock().unwrap().closed = true;
        self.notify.notify_waiters();
    }

    /// Keys waiting (not counting those being worked on or scheduled for later).
    pub fn depth(&self) -> usize {
        self.inner.lock().unwrap().pending.len()
    }
}

#[cfg(test)]
mod tests {
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
        q.done(&"a");
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
        q.done(&"a");
        tokio::time::sleep(Duration::from_millis(800)).await;
        assert_eq!(q.depth(), 0, "later schedules were superseded");
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
}
