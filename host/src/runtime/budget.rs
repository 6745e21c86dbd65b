//! The host-wide budget of plugin memory: what every live instance's linear memories
//! add up to — reconciles, admission reviews and parked warm instances alike — stays
//! under one figure, and one plugin may hold at most its share of it.
//!
//! Why: each instance is capped on its own (`Limits::memory_bytes`), but nothing bounded
//! their sum. Four workers per plugin, sixteen reviews per plugin and sixteen parked
//! instances, each allowed 128 MiB, add up to far more than the host's container limit:
//! a few plugins that allocate all they may would get the host OOM-killed, and with
//! `failurePolicy: Fail` its webhooks would block Pod creation cluster-wide.
//!
//! Flow: every instance's limiter holds a [`Charge`]. Growing a memory asks the budget
//! for the difference first; a grow that would take the plugin past its share, or the
//! host past the total, is refused, so the guest traps with a `budget` fault naming
//! both figures — the plugin that asked pays, nobody else. Before a call instantiates,
//! it takes [`ENTRY_ROOM`] for its first grows, waiting (inside its own deadline) until
//! its plugin and the host have that much free; taking it under the budget's lock means
//! waiters woken together cannot all start on the same free bytes. A call that cannot
//! get it by its deadline fails with the same fault. Dropping an instance gives its
//! bytes back and wakes the waiters.
//!
//! Guarantees: the sum of charged bytes never exceeds the total, nor one plugin's the
//! share. Caveats: the budget counts linear memories only; code, stacks and tables are
//! bounded by the instance slots instead, and the host's own heap (caches, requests)
//! by the room left between the budget and the container limit (see OPERATIONS.md).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What a call needs free before it instantiates: a Rust component's initial memory is
/// about 1 MiB (17 pages plus its data), so 2 MiB lets it start and make its first
/// allocations.
pub const ENTRY_ROOM: usize = 2 << 20;

/// See the module docs. Cheap to share (`Arc`).
#[derive(Debug)]
pub struct MemoryBudget {
    total: usize,
    share: usize,
    used: Mutex<Used>,
    freed: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct Used {
    total: usize,
    by_plugin: HashMap<Arc<str>, usize>,
}

impl MemoryBudget {
    /// `total` bytes host-wide; one plugin at most `share` of them.
    pub fn new(total: usize, share: usize) -> Arc<Self> {
        Arc::new(MemoryBudget {
            total,
            share: share.clamp(ENTRY_ROOM.min(total), total),
            used: Default::default(),
            freed: Default::default(),
        })
    }

    /// No bound: what tools that run one plugin at a time use (`wasmop reconcile`).
    pub fn unbounded() -> Arc<Self> {
        Self::new(usize::MAX, usize::MAX)
    }

    pub fn total(&self) -> usize {
        self.total
    }

    /// The most one plugin may hold at once.
    pub fn share(&self) -> usize {
        self.share
    }

    /// Bytes charged now, host-wide.
    pub fn used(&self) -> usize {
        self.used.lock().unwrap().total
    }

    /// Bytes charged now to `plugin`.
    pub fn used_by(&self, plugin: &str) -> usize {
        self.used.lock().unwrap().by_plugin.get(plugin).copied().unwrap_or(0)
    }

    /// A charge for a new instance of `plugin` holding `room` bytes for its first
    /// grows, once `plugin` and the host both have that much free. Cancel-safe: the
    /// caller bounds it with its deadline.
    pub async fn reserve(self: &Arc<Self>, plugin: Arc<str>, room: usize) -> Charge {
        loop {
            let freed = self.freed.notified();
            if self.take(&plugin, room).is_ok() {
                return Charge { budget: self.clone(), plugin, held: room, used: 0 };
            }
            freed.await;
        }
    }

    /// Whether `plugin` and the host both have `room` bytes free now.
    pub fn has_room(&self, plugin: &str, room: usize) -> bool {
        let u = self.used.lock().unwrap();
        let mine = u.by_plugin.get(plugin).copied().unwrap_or(0);
        u.total.saturating_add(room) <= self.total && mine.saturating_add(room) <= self.share
    }

    fn take(&self, plugin: &Arc<str>, bytes: usize) -> Result<(), String> {
        let mut u = self.used.lock().unwrap();
        let mine = u.by_plugin.get(plugin).copied().unwrap_or(0);
        if mine.saturating_add(bytes) > self.share {
            return Err(format!(
                "host memory budget: plugin {plugin} would hold {} MiB, above its share of {} MiB",
                mib(mine.saturating_add(bytes)),
                mib(self.share)
            ));
        }
        if u.total.saturating_add(bytes) > self.total {
            return Err(format!(
                "host memory budget: all plugins would hold {} MiB, above the host's budget of {} MiB \
                 (plugin {plugin} holds {} MiB)",
                mib(u.total.saturating_add(bytes)),
                mib(self.total),
                mib(mine)
            ));
        }
        u.total += bytes;
        *u.by_plugin.entry(plugin.clone()).or_insert(0) += bytes;
        crate::metrics::METRICS.memory_budget_used.set(u.total as i64);
        Ok(())
    }

    fn give_back(&self, plugin: &str, bytes: usize) {
        if bytes == 0 {
            return;
        }
        {
            let mut u = self.used.lock().unwrap();
            u.total = u.total.saturating_sub(bytes);
            crate::metrics::METRICS.memory_budget_used.set(u.total as i64);
            if let Some(n) = u.by_plugin.get_mut(plugin) {
                *n = n.saturating_sub(bytes);
                if *n == 0 {
                    u.by_plugin.remove(plugin);
                }
            }
        }
        self.freed.notify_waiters();
    }
}

fn mib(bytes: usize) -> usize {
    bytes.div_ceil(1 << 20)
}

/// What one instance holds of the budget (`held`, of which its memories use `used`);
/// given back when it is dropped (with its Store).
#[derive(Debug)]
pub struct Charge {
    budget: Arc<MemoryBudget>,
    plugin: Arc<str>,
    held: usize,
    used: usize,
}

impl Charge {
    /// `bytes` more for this instance's memories: from what it holds unused, then from
    /// the budget; or says whose limit refused them.
    pub fn grow(&mut self, bytes: usize) -> Result<(), String> {
        let more = bytes.saturating_sub(self.held - self.used);
        self.budget.take(&self.plugin, more)?;
        self.held += more;
        self.used += bytes;
        Ok(())
    }

    /// Bytes this instance holds of the budget.
    pub fn bytes(&self) -> usize {
        self.held
    }

    /// The most a parked instance may keep: an instance that grew past an eighth of its
    /// plugin's share goes instead of being parked, so idle instances cannot sit on
    /// the budget that busy ones need (a real webhook's instance stays within a few MiB).
    pub fn parkable(&self) -> bool {
        self.held <= self.budget.share / 8
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.give_back(&self.plugin, self.held);
    }
}

/// How long a call waited for room, for its fault message.
pub fn waited(d: Duration) -> String {
    format!("no room in the host memory budget within the call's deadline of {d:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plugin_is_held_to_its_share_and_the_host_to_its_total() {
        let b = MemoryBudget::new(100 << 20, 40 << 20);
        let charge = |p: &str| Charge { budget: b.clone(), plugin: p.into(), held: 0, used: 0 };
        let mut a1 = charge("a");
        let mut a2 = charge("a");
        a1.grow(30 << 20).unwrap();
        let e = a2.grow(20 << 20).unwrap_err();
        assert!(e.contains("plugin a would hold 50 MiB, above its share of 40 MiB"), "{e}");
        assert_eq!(b.used_by("a"), 30 << 20, "a refused grow takes nothing");
        let mut c = charge("c");
        let mut d = charge("d");
        c.grow(40 << 20).unwrap();
        let e = d.grow(40 << 20).unwrap_err();
        assert!(e.contains("above the host's budget of 100 MiB"), "{e}");
        drop(a1);
        d.grow(40 << 20).unwrap();
        assert_eq!(b.used(), 80 << 20);
        drop((a2, c, d));
        assert_eq!(b.used(), 0, "every byte is given back");
    }

    #[tokio::test]
    async fn waiting_calls_start_when_memory_is_given_back_and_never_share_the_same_room() {
        let b = MemoryBudget::new(10 << 20, 10 << 20);
        let mut big = b.reserve("p".into(), ENTRY_ROOM).await;
        big.grow(9 << 20).unwrap();
        assert!(!b.has_room("p", ENTRY_ROOM));
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let b = b.clone();
                tokio::spawn(async move { b.reserve("p".into(), 4 << 20).await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(waiters.iter().all(|w| !w.is_finished()), "still waiting while the memory is held");
        drop(big);
        tokio::time::sleep(Duration::from_millis(50)).await;
        // 10 MiB free: two of the three fit, the third waits on.
        assert_eq!(waiters.iter().filter(|w| w.is_finished()).count(), 2);
        assert_eq!(b.used(), 8 << 20);
        // The room taken serves the instance's first grows.
        let (done, waiting): (Vec<_>, Vec<_>) = waiters.into_iter().partition(|w| w.is_finished());
        let mut started = Vec::new();
        for w in done {
            started.push(w.await.unwrap());
        }
        started[0].grow(3 << 20).unwrap();
        assert_eq!(b.used(), 8 << 20, "within its reserved room");
        waiting.iter().for_each(|w| w.abort());
    }

    #[test]
    fn large_idle_instances_are_not_parked() {
        let b = MemoryBudget::new(512 << 20, 128 << 20);
        let mut c = Charge { budget: b.clone(), plugin: "p".into(), held: 0, used: 0 };
        c.grow(8 << 20).unwrap();
        assert!(c.parkable());
        c.grow(100 << 20).unwrap();
        assert!(!c.parkable());
    }
}
