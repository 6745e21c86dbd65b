//! Connections still in their TLS handshake: at most a fixed number at once; one more
//! closes the oldest of them.
//!
//! Why evict the oldest rather than refuse the newest: a client that opens connections
//! and never sends a ClientHello would otherwise hold every handshake place until its
//! handshake timeout, and for as long as it keeps reconnecting no new client (an
//! apiserver opening one more keep-alive connection) could get in at all. With
//! eviction a new connection always starts its handshake, and keeps its place until as
//! many newer connections have arrived as there are places: at the loopback flood of
//! `scripts/bench-abuse.py` (500 reconnecting sockets, ~1,000 connections a second)
//! that is ~60 ms, some twenty times what an apiserver's handshake takes on a LAN. A
//! flood faster than that still locks new clients out; the NetworkPolicy in `deploy/`
//! (only the apiserver may connect) is what stops it at the source.
//!
//! Connections already past their handshake are never touched: they are the ones
//! being served.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

/// The handshakes under way, oldest first.
pub(super) struct Handshakes {
    max: usize,
    next: AtomicU64,
    under_way: Mutex<VecDeque<(u64, Arc<Notify>)>>,
}

/// One connection's place among the handshakes; gives it up when dropped.
pub(super) struct Place {
    id: u64,
    evicted: Arc<Notify>,
    all: Arc<Handshakes>,
}

impl Handshakes {
    pub(super) fn new(max: usize) -> Arc<Self> {
        Arc::new(Handshakes { max: max.max(1), next: AtomicU64::new(0), under_way: Mutex::default() })
    }

    /// A place for a new connection's handshake; when every place is taken, the oldest
    /// handshake is told to give up its own (returns whether one was).
    pub(super) fn begin(self: &Arc<Self>) -> (Place, bool) {
        let id = self.next.fetch_add(1, Relaxed);
        let evicted = Arc::new(Notify::new());
        let mut q = self.under_way.lock().unwrap();
        let oldest = if q.len() >= self.max { q.pop_front() } else { None };
        q.push_back((id, evicted.clone()));
        drop(q);
        let was = oldest.is_some();
        if let Some((_, n)) = oldest {
            // A stored permit: the oldest hears it even if it is not yet waiting.
            n.notify_one();
        }
        (Place { id, evicted, all: self.clone() }, was)
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.under_way.lock().unwrap().len()
    }
}

impl Place {
    /// Resolves when a newer connection has taken this one's place.
    pub(super) async fn evicted(&self) {
        self.evicted.notified().await
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut q = self.all.under_way.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = q.iter().position(|(id, _)| *id == self.id) {
            q.remove(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_new_handshake_evicts_the_oldest_once_every_place_is_taken() {
        let h = Handshakes::new(2);
        let (first, e1) = h.begin();
        let (second, e2) = h.begin();
        assert!(!e1 && !e2);
        let (third, e3) = h.begin();
        assert!(e3, "the third took a place");
        assert_eq!(h.len(), 2);
        tokio::time::timeout(Duration::from_secs(1), first.evicted()).await.expect("the oldest is told to go");
        let quiet = |p: &Place| {
            let n = p.evicted.clone();
            async move { tokio::time::timeout(Duration::from_millis(50), n.notified()).await.is_err() }
        };
        assert!(quiet(&second).await && quiet(&third).await, "only the oldest goes");
        // A handshake that ends gives its place back: no eviction for the next one.
        drop(second);
        let (_fourth, e4) = h.begin();
        assert!(!e4);
        assert_eq!(h.len(), 2);
        drop(first);
        assert_eq!(h.len(), 2, "an evicted place was already given up");
    }
}
