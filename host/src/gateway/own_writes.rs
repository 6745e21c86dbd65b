//! A reconcile's own writes to the object it reconciles, so that the watch event each
//! one brings back is not taken for news (for plugins that ask: the WIT `own-writes`).
//!
//! Why: every status a reconcile writes comes back as a watch event on its primary; a
//! controller that queues it runs one more reconcile, which reads back what it just
//! wrote and does nothing. At 1,000 Memcacheds, skipping them saved 18 % of the
//! reconciles and 21 % of the host's CPU (BENCHMARKS.md, issue 22). An echo that
//! arrives before its write's answer has been recorded is reconciled, as before (how
//! often that happens is not measured yet). Kubernetes' own controllers avoid such
//! work with "expectations"; controller-runtime leaves it to predicates that drop every
//! status-only change, which would also drop changes made by others (a kubelet's, an
//! admin's `kubectl edit --subresource=status`).
//!
//! Flow: a reconcile of K gets a gateway that records the resourceVersion the apiserver
//! answered for each `update` or `update-status` of K itself. When K's watch delivers K
//! at one of those resourceVersions, the controller updates its cache but queues
//! nothing, and forgets that resourceVersion.
//!
//! Guarantee: no change is missed. A resourceVersion names one state of one object, so
//! an event at a recorded one carries exactly what the reconcile's own write produced,
//! and that reconcile received it as the write's answer. Any other change of K, by
//! anyone, a later write of its own included, has another resourceVersion and queues
//! K. Writes to other objects (even other primaries) are not recorded: their own
//! reconciles have not seen them. A deletion is always news.
//!
//! Caveat: the reconcile that wrote may still be running when the echo arrives, and
//! the echo no longer makes it run again afterwards; that is the point, and is why a
//! plugin must opt in (see the WIT for who should not).

use super::ObjectRef;
use std::collections::HashMap;
use std::sync::Mutex;

/// How many writes are remembered per object. Why a few: a reconcile writes its
/// primary at most two or three times (a finalizer, a status); an echo that never
/// comes (a no-op update keeps its resourceVersion and sends no event) must not make
/// the list grow.
const PER_OBJECT: usize = 4;

/// The resourceVersions that reconciles of each primary answered their own writes with.
#[derive(Default)]
pub struct OwnWrites(Mutex<HashMap<ObjectRef, Vec<String>>>);

impl OwnWrites {
    /// A reconcile of `key` wrote `key` and the apiserver answered with `rv`.
    pub fn record(&self, key: &ObjectRef, rv: &str) {
        let mut m = self.0.lock().unwrap();
        let seen = m.entry(key.clone()).or_default();
        if seen.len() == PER_OBJECT {
            seen.remove(0);
        }
        seen.push(rv.to_owned());
    }

    /// Whether a watch event of primary `key` (at `rv`; `deleted` when it is gone) is
    /// news, that is, must reconcile it: all but its own reconciles' writes coming back.
    /// A deletion is always news, and forgets what was recorded of `key`.
    pub fn is_news(&self, key: &ObjectRef, rv: Option<&str>, deleted: bool) -> bool {
        if deleted {
            self.forget(key);
            return true;
        }
        !rv.is_some_and(|rv| self.is_echo(key, rv))
    }

    /// Whether `key` at `rv` is one of its own reconciles' writes coming back (each is
    /// recognised once).
    fn is_echo(&self, key: &ObjectRef, rv: &str) -> bool {
        let mut m = self.0.lock().unwrap();
        let Some(seen) = m.get_mut(key) else { return false };
        let Some(i) = seen.iter().position(|r| r == rv) else { return false };
        seen.remove(i);
        if seen.is_empty() {
            m.remove(key);
        }
        true
    }

    /// `key` is gone: nothing of it will come back.
    fn forget(&self, key: &ObjectRef) {
        self.0.lock().unwrap().remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmop_sdk::KindRef;

    fn key(name: &str) -> ObjectRef {
        ObjectRef::new(&KindRef::new("cache.example.com/v1alpha1", "Memcached"), Some("a"), name)
    }

    #[test]
    fn only_a_recorded_write_of_that_object_is_an_echo_and_only_once() {
        let own = OwnWrites::default();
        own.record(&key("m"), "10");
        own.record(&key("m"), "11");
        assert!(!own.is_echo(&key("m"), "12"), "someone else's change is news");
        assert!(!own.is_echo(&key("n"), "10"), "another object's change is news");
        assert!(own.is_echo(&key("m"), "11"));
        assert!(!own.is_echo(&key("m"), "11"), "the same state seen again (a re-list) is news");
        assert!(own.is_echo(&key("m"), "10"), "echoes may arrive in any order");
        own.record(&key("m"), "13");
        own.forget(&key("m"));
        assert!(!own.is_echo(&key("m"), "13"), "forgotten once deleted");
    }

    #[test]
    fn an_event_is_news_unless_it_echoes_an_own_write_and_a_deletion_always_is() {
        let own = OwnWrites::default();
        own.record(&key("m"), "10");
        assert!(own.is_news(&key("m"), Some("9"), false), "an older or other state");
        assert!(own.is_news(&key("m"), None, false), "no resourceVersion: nothing to tell it by");
        assert!(!own.is_news(&key("m"), Some("10"), false), "its own write coming back");
        own.record(&key("m"), "11");
        assert!(own.is_news(&key("m"), Some("11"), true), "deleted at its own write's state");
        assert!(own.is_news(&key("m"), Some("11"), false), "forgotten with the deletion");
    }

    #[test]
    fn writes_whose_echo_never_comes_do_not_pile_up() {
        let own = OwnWrites::default();
        for rv in 0..100 {
            own.record(&key("m"), &rv.to_string());
        }
        assert_eq!(own.0.lock().unwrap()[&key("m")].len(), PER_OBJECT);
        assert!(own.is_echo(&key("m"), "99"));
        assert!(!own.is_echo(&key("m"), "0"));
    }

    #[tokio::test]
    async fn a_gateway_records_its_writes_of_the_reconciled_object_and_of_nothing_else() {
        use crate::gateway::{Gateway, MemoryBackend, Permissions, Verb};
        use serde_json::{Value, json};
        use std::sync::Arc;
        let cm = KindRef::new("v1", "ConfigMap");
        let mut p = Permissions::default();
        p.allow(&cm, &[Verb::Create, Verb::Update, Verb::UpdateStatus]);
        let own = Arc::new(OwnWrites::default());
        let me = ObjectRef::new(&cm, Some("d"), "a");
        let g = Gateway::new("t", Arc::new(p), Arc::new(MemoryBackend::default()))
            .reconciling(me.clone(), Some(own.clone()));
        let object =
            |name: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "d"}});
        let rv = |v: &Value| v["metadata"]["resourceVersion"].as_str().unwrap().to_owned();
        let created = g.create(object("a")).await.unwrap();
        let other = g.create(object("b")).await.unwrap();
        let updated = g.update(created.clone()).await.unwrap();
        let status = g.update_status(updated.clone()).await.unwrap();
        let other_updated = g.update(other).await.unwrap();
        assert!(own.is_echo(&me, &rv(&updated)));
        assert!(own.is_echo(&me, &rv(&status)));
        assert!(!own.is_echo(&me, &rv(&created)), "a create is not recorded");
        let b = ObjectRef::new(&cm, Some("d"), "b");
        assert!(!own.is_echo(&b, &rv(&other_updated)), "another object's write is news to its own reconciles");
    }
}
