//! Reads of a plugin's primary kind answered from its controller's watch cache, the
//! way controller-runtime's client reads from informers.
//!
//! Flow: a controller publishes its primaries' cache under the plugin's name once its
//! watches have synced, and withdraws it when it stops (or this replica loses
//! leadership); a [`super::Gateway`] built with [`Caches::get`] answers `get` and
//! `list` of that kind from memory when it can, and asks the apiserver otherwise.
//!
//! Caveat: cached reads may lag the plugin's own writes by one watch event (no
//! read-your-writes), exactly as in controller-runtime; updates still carry
//! resourceVersion, so a stale read ends in a `conflict`, never in a lost write.

use super::{Error, KindRef, ListParams, ObjectRef};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use wasmop_sdk::helpers::LabelSelector;

/// The objects a controller watches, by reference.
pub type ObjectCache = Arc<Mutex<HashMap<ObjectRef, Arc<Value>>>>;

/// One plugin's synced primaries.
pub struct PrimaryCache {
    pub kind: KindRef,
    /// None: all namespaces (or a cluster-scoped kind).
    pub namespaces: Option<Vec<String>>,
    pub objects: ObjectCache,
}

impl PrimaryCache {
    fn covers(&self, namespace: Option<&str>) -> bool {
        match (&self.namespaces, namespace) {
            (None, _) => true,
            (Some(list), Some(ns)) => list.iter().any(|n| n == ns),
            (Some(_), None) => false,
        }
    }

    /// Some(answer) when the cache can answer a get of `r`.
    pub fn get(&self, r: &ObjectRef) -> Option<Result<Value, Error>> {
        if r.kind_ref() != self.kind || !self.covers(r.namespace.as_deref()) {
            return None;
        }
        Some(match self.objects.lock().unwrap().get(r) {
            Some(v) => Ok((**v).clone()),
            None => Err(Error::NotFound(format!("{r} not found"))),
        })
    }

    /// The uid of `r` when the cache holds it: what an Event needs to be found by
    /// `kubectl describe`, without a GET per Event.
    pub fn uid(&self, r: &ObjectRef) -> Option<String> {
        if r.kind_ref() != self.kind || !self.covers(r.namespace.as_deref()) {
            return None;
        }
        let objects = self.objects.lock().unwrap();
        objects.get(r)?.pointer("/metadata/uid")?.as_str().map(str::to_owned)
    }

    /// Some(answer) when the cache can answer this list.
    pub fn list(&self, kind: &KindRef, p: &ListParams) -> Option<Result<Vec<Arc<Value>>, Error>> {
        if *kind != self.kind || p.field_selector.is_some() || !self.covers(p.namespace.as_deref()) {
            return None;
        }
        let selector = match p.label_selector.as_deref().map(LabelSelector::parse).transpose() {
            Ok(s) => s,
            Err(e) => return Some(Err(Error::Invalid(e))),
        };
        let objects = self.objects.lock().unwrap();
        let mut out: Vec<(&ObjectRef, &Arc<Value>)> = objects
            .iter()
            .filter(|(k, _)| p.namespace.is_none() || k.namespace == p.namespace)
            .filter(|(_, v)| selector.as_ref().is_none_or(|s| s.matches_json(v.pointer("/metadata/labels"))))
            .collect();
        out.sort_by(|a, b| a.0.cmp(b.0));
        Some(Ok(out.into_iter().map(|(_, v)| v.clone()).collect()))
    }
}

/// Published caches, by plugin name.
#[derive(Default)]
pub struct Caches(RwLock<HashMap<String, Arc<PrimaryCache>>>);

impl Caches {
    pub fn publish(&self, plugin: &str, cache: Arc<PrimaryCache>) {
        self.0.write().unwrap().insert(plugin.to_owned(), cache);
    }

    /// Withdraws `plugin`'s cache, if it is still `cache` (a newer controller may
    /// have published its own).
    pub fn withdraw(&self, plugin: &str, cache: &Arc<PrimaryCache>) {
        let mut m = self.0.write().unwrap();
        if m.get(plugin).is_some_and(|c| Arc::ptr_eq(c, cache)) {
            m.remove(plugin);
        }
    }

    pub fn get(&self, plugin: &str) -> Option<Arc<PrimaryCache>> {
        self.0.read().unwrap().get(plugin).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn answers_only_what_it_covers() {
        let kind = KindRef::new("v1", "ConfigMap");
        let objects: ObjectCache = Arc::default();
        let a = ObjectRef::new(&kind, Some("a"), "x");
        objects
            .lock()
            .unwrap()
            .insert(a.clone(), Arc::new(json!({"metadata": {"name": "x", "uid": "u-1", "labels": {"k": "v"}}})));
        let c = PrimaryCache { kind: kind.clone(), namespaces: Some(vec!["a".into()]), objects };
        assert!(c.get(&a).unwrap().is_ok());
        assert!(matches!(c.get(&ObjectRef::new(&kind, Some("a"), "y")), Some(Err(Error::NotFound(_)))));
        assert!(c.get(&ObjectRef::new(&kind, Some("b"), "x")).is_none(), "namespace not watched: ask the apiserver");
        assert!(c.get(&ObjectRef::new(&KindRef::new("v1", "Secret"), Some("a"), "x")).is_none());
        // Events on a cached object find its uid without a GET.
        assert_eq!(c.uid(&a).as_deref(), Some("u-1"));
        assert_eq!(c.uid(&ObjectRef::new(&kind, Some("a"), "y")), None);
        assert_eq!(c.uid(&ObjectRef::new(&kind, Some("b"), "x")), None);
        let p = |ns: Option<&str>, sel: Option<&str>| ListParams {
            namespace: ns.map(Into::into),
            label_selector: sel.map(Into::into),
            field_selector: None,
        };
        assert_eq!(c.list(&kind, &p(Some("a"), Some("k=v"))).unwrap().unwrap().len(), 1);
        assert_eq!(c.list(&kind, &p(Some("a"), Some("k=w"))).unwrap().unwrap().len(), 0);
        assert!(c.list(&kind, &p(None, None)).is_none(), "all namespaces, but only `a` is watched");
    }
}
