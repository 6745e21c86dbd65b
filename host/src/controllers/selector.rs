//! The selector mapping: a watched object's change reconciles only the primaries whose
//! label selector (at the path the plugin declared) matches its labels, before or
//! after the change.
//!
//! Why: with `all-primaries` every Pod event reconciles every SidecarSet, S × P
//! reconciles for S sets and P Pod events; Kruise and controller-runtime enqueue only
//! the sets whose selector matches. Why before or after: a Pod relabelled out of a
//! set's selection is news to that set too (its matched count drops), as Kruise's
//! handler compares the old and new Pod; the watch only says the new state, so the
//! labels before are those of the cache's entry the change replaces.
//!
//! Guarantees: never fewer primaries than the selectors say. A primary whose selector
//! cannot be read (missing, or not a valid LabelSelector: an unknown operator, say) is
//! reconciled on every change, as with `all-primaries`: the plugin, not the host,
//! decides what such a primary means. Caveat: only labels are matched; a primary's
//! other conditions (a namespace selector, say) are the plugin's to check.

use crate::gateway::{Cached, Labels, ObjectCache};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Selector, SelectorExt};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use wasmop_sdk::ObjectRef;

/// What a controller keeps for its selector mappings: the primaries' selectors, parsed.
/// The labels a watched object had before a change come from the watched kind's cache
/// (the entry the change replaces), so nothing else is kept per watched object.
#[derive(Default)]
pub struct Selecting {
    parsed: Parsed,
}

/// The selector of `primary` at `path`; None when it has no readable one.
fn selector(primary: &Cached, path: &[String]) -> Option<Selector> {
    let primary: Value = serde_json::from_str(&primary.text).ok()?;
    let at = path.iter().try_fold(&primary, |v, k| v.get(k))?;
    let selector: LabelSelector = serde_json::from_value(at.clone()).ok()?;
    Selector::try_from(selector).ok()
}

/// The primaries' selectors, parsed once per version of each primary: the cache holds
/// each version as one `Arc`, so a pointer still equal is a primary unchanged. Why: a
/// Pod event is matched against every primary, and parsing each selector again per
/// event would cost the controller more than the match.
#[derive(Default)]
pub struct Parsed(HashMap<ObjectRef, (Arc<Cached>, Option<Selector>)>);

impl Parsed {
    /// The primaries among `candidates` (every primary that `in_scope` accepts)
    /// concerned by a change from labels `before` to `after` (either may be absent: a
    /// new or a deleted object). Forgets the selectors of primaries in scope but not
    /// among `candidates` (gone); keeps those out of scope (another namespace's, for
    /// namespaced primaries), so events alternating between namespaces parse nothing
    /// again.
    pub fn concerned<'a>(
        &mut self,
        candidates: impl IntoIterator<Item = (&'a ObjectRef, &'a Arc<Cached>)>,
        in_scope: impl Fn(&ObjectRef) -> bool,
        path: &[String],
        before: Option<&Labels>,
        after: Option<&Labels>,
    ) -> Vec<ObjectRef> {
        let empty = Labels::new();
        let mut states: Vec<&Labels> = [before, after].into_iter().flatten().collect();
        if states.is_empty() {
            states.push(&empty);
        }
        let mut old = std::mem::take(&mut self.0);
        let mut out = Vec::new();
        for (k, v) in candidates {
            let parsed = match old.remove(k) {
                Some((seen, s)) if Arc::ptr_eq(&seen, v) => (seen, s),
                _ => (v.clone(), selector(v, path)),
            };
            // No readable selector: reconciled on every change.
            if parsed.1.as_ref().is_none_or(|s| states.iter().any(|l| s.matches(l))) {
                out.push(k.clone());
            }
            self.0.insert(k.clone(), parsed);
        }
        old.retain(|k, _| !in_scope(k));
        self.0.extend(old);
        out
    }
}

impl Selecting {
    /// A watched object changed from labels `before` (None: it is new, or it is gone
    /// and only its last labels are known) to `after`: queues the primaries whose
    /// selector at `path` selects it as labelled before or after.
    pub(super) fn changed(
        &mut self,
        m: &wasmop_sdk::Manifest,
        cache: &ObjectCache,
        queue: &super::queue::Queue<ObjectRef>,
        path: &[String],
        oref: &ObjectRef,
        (before, after): (Option<&Labels>, Option<&Labels>),
    ) {
        // The candidates are taken out of the lock first and matched after it is let go:
        // a primary that changed has its selector parsed here, and reviews read this
        // cache while a reconcile thread (niced) may be preempted mid-match.
        let in_scope = |k: &ObjectRef| !m.namespaced || k.namespace == oref.namespace;
        let candidates: Vec<(ObjectRef, Arc<Cached>)> = {
            let c = cache.lock().unwrap();
            c.iter().filter(|(k, _)| in_scope(k)).map(|(k, v)| (k.clone(), v.clone())).collect()
        };
        let keys = self.parsed.concerned(candidates.iter().map(|(k, v)| (k, v)), in_scope, path, before, after);
        keys.into_iter().for_each(|k| queue.add(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(kv: &[(&str, &str)]) -> Labels {
        kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn sets() -> Vec<(ObjectRef, Arc<Cached>)> {
        let set = |name: &str, selector: serde_json::Value| {
            (
                ObjectRef {
                    api_version: "apps.kruise.io/v1alpha1".into(),
                    kind: "SidecarSet".into(),
                    namespace: None,
                    name: name.into(),
                },
                Arc::new(Cached::of(&json!({"metadata": {"name": name}, "spec": {"selector": selector}}))),
            )
        };
        vec![
            set("web", json!({"matchLabels": {"app": "web"}})),
            set("db", json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["db", "cache"]}]})),
            set("everything", json!({})),
            set("not-web", json!({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]})),
            set("garbled", json!({"matchExpressions": [{"key": "app", "operator": "Equals", "values": ["x"]}]})),
        ]
    }

    fn names(v: Vec<ObjectRef>) -> Vec<String> {
        let mut n: Vec<String> = v.into_iter().map(|r| r.name).collect();
        n.sort();
        n
    }

    fn path() -> Vec<String> {
        vec!["spec".into(), "selector".into()]
    }

    #[test]
    fn a_change_reconciles_the_primaries_that_select_the_object_and_those_it_cannot_read() {
        let sets = sets();
        let web = labels(&[("app", "web")]);
        let got = Parsed::default().concerned(sets.iter().map(|(k, v)| (k, v)), |_| true, &path(), None, Some(&web));
        assert_eq!(names(got), ["everything", "garbled", "web"]);
        let cache = labels(&[("app", "cache")]);
        let got = Parsed::default().concerned(sets.iter().map(|(k, v)| (k, v)), |_| true, &path(), None, Some(&cache));
        assert_eq!(names(got), ["db", "everything", "garbled", "not-web"]);
    }

    #[test]
    fn a_relabelled_object_concerns_the_sets_it_left_as_well_as_those_it_joined() {
        let sets = sets();
        let (web, db) = (labels(&[("app", "web")]), labels(&[("app", "db")]));
        let got =
            Parsed::default().concerned(sets.iter().map(|(k, v)| (k, v)), |_| true, &path(), Some(&web), Some(&db));
        assert_eq!(names(got), ["db", "everything", "garbled", "not-web", "web"]);
    }

    #[test]
    fn a_primary_changed_since_its_selector_was_parsed_is_matched_by_its_new_selector() {
        let mut sets = sets();
        let mut parsed = Parsed::default();
        let db = labels(&[("app", "db")]);
        let got = parsed.concerned(sets.iter().map(|(k, v)| (k, v)), |_| true, &path(), None, Some(&db));
        assert!(!names(got).contains(&"web".to_owned()));
        sets[0].1 = Arc::new(Cached::of(&json!({"spec": {"selector": {"matchLabels": {"app": "db"}}}})));
        let got = parsed.concerned(sets.iter().map(|(k, v)| (k, v)), |_| true, &path(), None, Some(&db));
        assert!(names(got).contains(&"web".to_owned()), "web's old selector was reused after it changed");
    }

    /// Namespaced primaries: an event matches only its own namespace's, and the selectors
    /// parsed for another namespace stay parsed; a primary gone from the event's own
    /// namespace is forgotten.
    #[test]
    fn selectors_of_other_namespaces_stay_parsed_and_gone_primaries_are_forgotten() {
        let primary = |ns: &str, name: &str| {
            let k =
                ObjectRef { api_version: "v1".into(), kind: "X".into(), namespace: Some(ns.into()), name: name.into() };
            let v = Arc::new(Cached::of(&json!({"spec": {"selector": {"matchLabels": {"app": "web"}}}})));
            (k, v)
        };
        let (a1, a2, b1) = (primary("a", "one"), primary("a", "two"), primary("b", "one"));
        let web = labels(&[("app", "web")]);
        let in_ns = |ns: &'static str| move |k: &ObjectRef| k.namespace.as_deref() == Some(ns);
        let mut parsed = Parsed::default();
        let both = [(&a1.0, &a1.1), (&a2.0, &a2.1)];
        assert_eq!(names(parsed.concerned(both, in_ns("a"), &path(), None, Some(&web))), ["one", "two"]);
        assert_eq!(names(parsed.concerned([(&b1.0, &b1.1)], in_ns("b"), &path(), None, Some(&web))), ["one"]);
        assert!(parsed.0.contains_key(&a1.0) && parsed.0.contains_key(&a2.0), "namespace a's selectors were dropped");
        // a2 is gone: the next event in a forgets it and keeps b's.
        assert_eq!(names(parsed.concerned([(&a1.0, &a1.1)], in_ns("a"), &path(), None, Some(&web))), ["one"]);
        let kept: Vec<&ObjectRef> = parsed.0.keys().collect();
        assert_eq!(kept.len(), 2, "{kept:?}");
        assert!(parsed.0.contains_key(&a1.0) && parsed.0.contains_key(&b1.0));
    }

    #[test]
    fn a_primary_without_a_selector_at_the_path_is_reconciled_on_every_change() {
        let k = ObjectRef { api_version: "v1".into(), kind: "X".into(), namespace: None, name: "bare".into() };
        let v = Arc::new(Cached::of(&json!({"spec": {}})));
        let got = Parsed::default().concerned([(&k, &v)], |_| true, &path(), None, Some(&labels(&[("app", "web")])));
        assert_eq!(names(got), ["bare"]);
    }
}
