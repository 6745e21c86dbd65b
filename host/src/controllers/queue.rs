//! A work queue with the guarantees controller-runtime's gives: a key is never handed to
//! two workers at once; a key added while it is being worked on runs once more after;
//! adding a key already waiting does nothing; delayed adds keep only the earliest time.
//!
//! One more, of our own: a key may *cool down* after a run (`done` with a cooldown).
//! Added while cooling, it runs once when the cooldown ends, however often it was
//! added meanwhile. Why: controller-runtime re-runs a key the moment it is done if an
//! event came meanwhile, which is cheap when a reconcile reads an informer cache in
//! Go; a plugin's reconcile that counts thousands of objects computes for tens of ms,
//! and while a Deployment creates 2,000 Pods their events would have it run back to
//! back, a core's worth for minutes. The controller sets a cooldown in proportion to
//! the run that just ended, so cheap reconciles are not slowed (see `pace.rs`).
//!
//! Delayed adds share one timer per queue: a heap of due times, drained by a single
//! task that sleeps until the earliest and is woken when an earlier one arrives. Why
//! not a task per delayed add: a plugin requeueing many objects (or one object very
//! often) would leave a sleeping task behind for every answer, none ever cancelled.
//! The timer task ends when the queue is closed or dropped, so none outlives it.

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

struct Inner<K> {
    pending: VecDeque<K>,
    queued: HashSet<K>,
    active: HashSet<K>,
    dirty: HashSet<K>,
    /// Keys cooling down after a run: the earliest their next run may start.
    cooling: HashMap<K, Instant>,
    /// `cooling`'s size at which ended cooldowns are swept out.
    cooling_sweep: usize,
    /// The one live schedule of each delayed key: (due, seq of its heap entry).
    scheduled: HashMap<K, (Instant, u64)>,
    /// Due times, earliest first; an entry whose seq is no longer its key's is stale
    /// (superseded by an earlier schedule) and skipped when it comes up.
    timers: BinaryHeap<Reverse<Due<K>>>,
    seq: u64,
    timer: Option<tokio::task::JoinHandle<()>>,
    closed: bool,
}

struct Due<K> {
    at: Instant,
    seq: u64,
    key: K,
}

impl<K> PartialEq for Due<K> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl<K> Eq for Due<K> {}
impl<K> PartialOrd for Due<K> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<K> Ord for Due<K> {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

pub struct Queue<K> {
    /// Itself, so that any method may start the timer task (which holds it weakly).
    me: Weak<Queue<K>>,
    inner: Mutex<Inner<K>>,
    notify: Notify,
    /// Wakes the timer task: an earlier due time arrived.
    wake: Arc<Notify>,
}

impl<K: Eq + Hash + Clone + Send + 'static> Queue<K> {
    pub fn new() -> Arc<Self> {
        Arc::new_cyclic(|me| Queue {
            me: me.clone(),
            inner: Mutex::new(Inner {
                pending: VecDeque::new(),
                queued: HashSet::new(),
                active: HashSet::new(),
                dirty: HashSet::new(),
                cooling: HashMap::new(),
                cooling_sweep: 64,
                scheduled: HashMap::new(),
                timers: BinaryHeap::new(),
                seq: 0,
                timer: None,
                closed: false,
            }),
            notify: Notify::new(),
            wake: Arc::new(Notify::new()),
        })
    }

    pub fn add(&self, key: K) {
        let mut q = self.inner.lock().unwrap();
        if self.enqueue(&mut q, key, Instant::now()) {
            drop(q);
            self.notify.notify_one();
        }
    }

    /// true: `key` became pending (a worker should be woken). A key cooling down is
    /// scheduled for the end of its cooldown instead.
    fn enqueue(&self, q: &mut Inner<K>, key: K, now: Instant) -> bool {
        if q.closed {
            return false;
        }
        if q.active.contains(&key) {
            q.dirty.insert(key);
            return false;
        }
        match q.cooling.get(&key) {
            Some(&until) if until > now => {
                self.schedule(q, key, until);
                return false;
            }
            Some(_) => {
                q.cooling.remove(&key);
            }
            None => {}
        }
        if q.queued.insert(key.clone()) {
            q.pending.push_back(key);
            true
        } else {
            false
        }
    }

    /// Adds `key` after `delay`, unless it is already scheduled sooner.
    pub fn add_after(&self, key: K, delay: Duration) {
        let mut q = self.inner.lock().unwrap();
        if !q.closed {
            self.schedule(&mut q, key, Instant::now() + delay);
        }
    }

    /// Schedules `key` at `at` unless it is scheduled sooner; starts or wakes the timer.
    fn schedule(&self, q: &mut Inner<K>, key: K, at: Instant) {
        if q.scheduled.get(&key).is_some_and(|(t, _)| *t <= at) {
            return;
        }
        let earliest = q.timers.peek().is_none_or(|Reverse(d)| at < d.at);
        q.seq += 1;
        let seq = q.seq;
        q.scheduled.insert(key.clone(), (at, seq));
        q.timers.push(Reverse(Due { at, seq, key }));
        // Superseded entries stay in the heap until they come up; rebuilding when they
        // outnumber the live ones keeps its size in proportion to the keys.
        if q.timers.len() > 2 * q.scheduled.len() + 64 {
            let live = q.scheduled.iter().map(|(k, &(at, seq))| Reverse(Due { at, seq, key: k.clone() }));
            q.timers = live.collect();
        }
        if q.timer.is_none() {
            q.timer = Some(tokio::spawn(timer(self.me.clone(), self.wake.clone())));
        } else if earliest {
            self.wake.notify_one();
        }
    }

    /// Moves every key now due to pending; the next due time, if any.
    fn fire(&self, now: Instant) -> Option<Instant> {
        let mut guard = self.inner.lock().unwrap();
        let q = &mut *guard;
        let mut woke = 0;
        while let Some(Reverse(d)) = q.timers.peek() {
            if d.at > now {
                break;
            }
            let Reverse(d) = q.timers.pop().unwrap();
            if q.scheduled.get(&d.key).is_some_and(|(_, seq)| *seq == d.seq) {
                q.scheduled.remove(&d.key);
                woke += usize::from(self.enqueue(q, d.key, now));
            }
        }
        let next = q.timers.peek().map(|Reverse(d)| d.at);
        drop(guard);
        for _ in 0..woke {
            self.notify.notify_one();
        }
        next
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

    /// Marks `key` finished; re-queues it if it was added meanwhile. With a nonzero
    /// `cooldown` it runs again no sooner than that from now, however often it is added.
    pub fn done(&self, key: &K, cooldown: Duration) {
        let now = Instant::now();
        let mut guard = self.inner.lock().unwrap();
        let q = &mut *guard;
        q.active.remove(key);
        if !cooldown.is_zero() {
            q.cooling.insert(key.clone(), now + cooldown);
            // Keys that never come back (deleted objects) leave their entries behind;
            // sweeping when the map doubles keeps it in proportion to the keys cooling.
            if q.cooling.len() > q.cooling_sweep {
                q.cooling.retain(|_, until| *until > now);
                q.cooling_sweep = 2 * q.cooling.len() + 64;
            }
        }
        if q.dirty.remove(key) && self.enqueue(q, key.clone(), now) {
            drop(guard);
            self.notify.notify_one();
        }
    }

    /// Stops handing out work; workers see None and exit, and the timer ends.
    pub fn close(&self) {
        let mut q = self.inner.lock().unwrap();
        q.closed = true;
        q.scheduled.clear();
        q.timers.clear();
        if let Some(t) = q.timer.take() {
            t.abort();
        }
        drop(q);
        self.notify.notify_waiters();
    }

    /// Keys waiting (not counting those being worked on or scheduled for later).
    pub fn depth(&self) -> usize {
        self.inner.lock().unwrap().pending.len()
    }
}

impl<K> Drop for Queue<K> {
    fn drop(&mut self) {
        if let Some(t) = self.inner.get_mut().map(|q| q.timer.take()).ok().flatten() {
            t.abort();
        }
    }
}

/// The queue's one timer: sleeps until the earliest due time (or until woken by an
/// earlier one), then moves what is due to pending. Holds the queue only weakly, so
/// dropping the queue ends it too.
async fn timer<K: Eq + Hash + Clone + Send + 'static>(queue: Weak<Queue<K>>, wake: Arc<Notify>) {
    loop {
        let next = match queue.upgrade() {
            Some(q) => q.fire(Instant::now()),
            None => return,
        };
        match next {
            Some(at) => {
                tokio::select! {
                    _ = tokio::time::sleep_until(at) => {}
                    _ = wake.notified() => {}
                }
            }
            None => wake.notified().await,
        }
    }
}

#[cfg(test)]
mod tests;
