//! The selector mapping: a watched object's change reconciles only the primaries whose
//! label selector (at the path the plugin declared) matches its labels, before or
//! after the change.
//!
//! Why: with `all-primaries` every Pod event reconciles every SidecarSet, S × P
//! reconciles for S sets and P Pod events; Kruise and controller-runtime enqueue only
//! the sets whose selector matches. Why before or after: a Pod relabelled out of a
//! set's selection is news to that set too (its matched count drops), as Kruise's
//! handler compares the old and new Pod; the watch only says the new state, so the
//! labels last seen of each watched object are kept here.
//!
//! Guarantees: never fewer primaries than the selectors say. A primary whose selector
//! cannot be read (missing, or not a valid LabelSelector: an unknown operator, say) is
//! reconciled on every change, as with `all-primaries`: the plugin, not the host,
//! decides what such a primary means. Caveat: only labels are matched; a primary's
//! other conditions (a namespace selector, say) are the plugin's to check.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Selector, SelectorExt};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use wasmop_sdk::ObjectRef;

pub type Labels = BTreeMap<String, String>;

/// What a controller keeps for its selector mappings.
#[derive(Default)]
pub struct Selecting {
    labels: SeenLabels,
    parsed: Parsed,
}

/// The labels last seen of each watched object under a selector mapping.
#[derive(Default)]
pub struct SeenLabels(HashMap<ObjectRef, Labels>);

impl SeenLabels {
    /// Records `oref`'s labels now (none once deleted) and returns those it had before.
    pub fn update(&mut self, oref: &ObjectRef, now: Option<&Labels>) -> Option<Labels> {
        match now {
            Some(l) => self.0.insert(oref.clone(), l.clone()),
            None => self.0.remove(oref),
        }
    }

    /// After a re-list: forgets the objects in scope that it did not list again (gone
    /// while the watch was down), returning each with its last labels.
    pub fn forget_unseen(
        &mut self,
        in_scope: impl Fn(&ObjectRef) -> bool,
        listed: &HashSet<ObjectRef>,
    ) -> Vec<(ObjectRef, Labels)> {
        let gone: Vec<ObjectRef> = self.0.keys().filter(|k| in_scope(k) && !listed.contains(*k)).cloned().collect();
        gone.into_iter().filter_map(|k| self.0.remove(&k).map(|l| (k, l))).collect()
    }
}

/// The selector of `primary` (its JSON) at `path`; None when it has no readable one.
fn selector(primary: &Value, path: &[String]) -> Option<Selector> {
    let at = path.iter().try_fold(primary, |v, k| v.get(k))?;
    let selector: LabelSelector = serde_json::from_value(at.clone()).ok()?;
    Selector::try_from(selector).ok()
}

/// The primaries' selectors, parsed once per version of each primary: the cache holds
/// each version as one `Arc`, so a pointer still equal is a primary unchanged. Why: a
/// Pod event is matched against every primary, and parsing each selector again per
/// event would cost the controller more than the match.
#[derive(Default)]
pub struct Parsed(HashMap<ObjectRef, (Arc<Value>, Option<Selector>)>);

impl Parsed {
    /// The primaries among `candidates` concerned by a change from labels `before` to
    /// `after` (either may be absent: a new or a deleted object). Forgets the selectors
    /// of primaries not among `candidates`.
    pub fn concerned<'a>(
        &mut self,
        candidates: impl IntoIterator<Item = (&'a ObjectRef, &'a Arc<Value>)>,
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
        out
    }
}

impl Selecting {
    /// `oref` changed and is now labelled `now` (its last labels when `deleted`):
    /// queues the primaries whose selector at `path` selects it as labelled before or
    /// after.
    pub(super) fn changed(
        &mut self,
        m: &wasmop_sdk::Manifest,
        cache: &crate::gateway::ObjectCache,
        queue: &super::queue::Queue<ObjectRef>,
        path: &[String],
        oref: &ObjectRef,
        (now, deleted): (&Labels, bool),
    ) {
        let before = self.labels.update(oref, (!deleted).then_some(now));
        self.enqueue(m, cache, queue, path, oref, (before.as_ref(), Some(now)));
    }

    /// A re-list of the objects `in_scope` ended, having listed `listed`: those gone
    /// meanwhile were news to the primaries that selected them.
    pub(super) fn relisted(
        &mut self,
        m: &wasmop_sdk::Manifest,
        cache: &crate::gateway::ObjectCache,
        queue: &super::queue::Queue<ObjectRef>,
        path: &[String],
        in_scope: impl Fn(&ObjectRef) -> bool,
        listed: &HashSet<ObjectRef>,
    ) {
        for (oref, before) in self.labels.forget_unseen(in_scope, listed) {
            self.enqueue(m, cache, queue, path, &oref, (Some(&before), None));
        }
    }

    fn enqueue(
        &mut self,
        m: &wasmop_sdk::Manifest,
        cache: &crate::gateway::ObjectCache,
        queue: &super::queue::Queue<ObjectRef>,
        path: &[String],
        oref: &ObjectRef,
        (before, after): (Option<&Labels>, Option<&Labels>),
    ) {
        let keys = {
            let c = cache.lock().unwrap();
            let candidates = c.iter().filter(|(k, _)| !m.namespaced || k.namespace == oref.namespace);
            self.parsed.concerned(candidates, path, before, after)
        };
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

    fn sets() -> Vec<(ObjectRef, Arc<Value>)> {
        let set = |name: &str, selector: serde_json::Value| {
            (
                ObjectRef {
                    api_version: "apps.kruise.io/v1alpha1".into(),
                    kind: "SidecarSet".into(),
                    namespace: None,
                    name: name.into(),
                },
                Arc::new(json!({"metadata": {"name": name}, "spec": {"selector": selector}})),
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
        let got = Parsed::default().concerned(sets.iter().map(|(k, v)| (k, v)), &path(), None, Some(&web));
        assert_eq!(names(got), ["everything", "garbled", "web"]);
        let cache = labels(&[("app", "cache")]);
        let got = Parsed::default().concerned(sets.iter().map(|(k, v)| (k, v)), &path(), None, Some(&cache));
        assert_eq!(names(got), ["db", "everything", "garbled", "not-web"]);
    }

    #[test]
    fn a_relabelled_object_concerns_the_sets_it_left_as_well_as_those_it_joined() {
        let sets = sets();
        let (web, db) = (labels(&[("app", "web")]), labels(&[("app", "db")]));
        let got = Parsed::default().concerned(sets.iter().map(|(k, v)| (k, v)), &path(), Some(&web), Some(&db));
        assert_eq!(names(got), ["db", "everything", "garbled", "not-web", "web"]);
    }

    #[test]
    fn a_primary_changed_since_its_selector_was_parsed_is_matched_by_its_new_selector() {
        let mut sets = sets();
        let mut parsed = Parsed::default();
        let db = labels(&[("app", "db")]);
        let got = parsed.concerned(sets.iter().map(|(k, v)| (k, v)), &path(), None, Some(&db));
        assert!(!names(got).contains(&"web".to_owned()));
        sets[0].1 = Arc::new(json!({"spec": {"selector": {"matchLabels": {"app": "db"}}}}));
        let got = parsed.concerned(sets.iter().map(|(k, v)| (k, v)), &path(), None, Some(&db));
        assert!(names(got).contains(&"web".to_owned()), "web's old selector was reused after it changed");
    }

    #[test]
    fn a_primary_without_a_selector_at_the_path_is_reconciled_on_every_change() {
        let k = ObjectRef { api_version: "v1".into(), kind: "X".into(), namespace: None, name: "bare".into() };
        let v = Arc::new(json!({"spec": {}}));
        let got = Parsed::default().concerned([(&k, &v)], &path(), None, Some(&labels(&[("app", "web")])));
        assert_eq!(names(got), ["bare"]);
    }

    #[test]
    fn labels_are_remembered_until_the_object_is_deleted() {
        let mut seen = SeenLabels::default();
        let k =
            ObjectRef { api_version: "v1".into(), kind: "Pod".into(), namespace: Some("a".into()), name: "p".into() };
        assert_eq!(seen.update(&k, Some(&labels(&[("app", "web")]))), None);
        assert_eq!(seen.update(&k, Some(&labels(&[("app", "db")]))), Some(labels(&[("app", "web")])));
        assert_eq!(seen.update(&k, None), Some(labels(&[("app", "db")])));
        assert_eq!(seen.update(&k, None), None);
    }

    #[test]
    fn a_relist_forgets_what_it_no_longer_lists_and_says_its_last_labels() {
        let mut seen = SeenLabels::default();
        let pod = |ns: &str, n: &str| ObjectRef {
            api_version: "v1".into(),
            kind: "Pod".into(),
            namespace: Some(ns.into()),
            name: n.into(),
        };
        seen.update(&pod("a", "kept"), Some(&labels(&[("app", "web")])));
        seen.update(&pod("a", "gone"), Some(&labels(&[("app", "db")])));
        seen.update(&pod("b", "elsewhere"), Some(&labels(&[("app", "db")])));
        let listed: HashSet<ObjectRef> = [pod("a", "kept")].into();
        let gone = seen.forget_unseen(|k| k.namespace.as_deref() == Some("a"), &listed);
        assert_eq!(gone, vec![(pod("a", "gone"), labels(&[("app", "db")]))]);
        assert!(
            seen.forget_unseen(|_| true, &listed).iter().any(|(k, _)| k.name == "elsewhere"),
            "another scope's object was forgotten"
        );
    }
}
