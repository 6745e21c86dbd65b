//! Reads of a plugin's primary kind answered from its controller's watch cache, the
//! way controller-runtime's client reads from informers.
//!
//! Flow: a controller publishes its primaries' cache under the plugin's name once its
//! watches have synced, and withdraws it when it stops (or this replica loses
//! leadership); a [`super::Gateway`] built with [`Caches::get`] answers `get` and
//! `list` of that kind from memory when it can, and asks the apiserver otherwise.
//!
//! Identity: a cache is one plugin's, filled by that plugin's own watches, which the
//! host makes impersonating the plugin's ServiceAccount; no cache is shared between
//! plugins. So a cached read can only answer what the plugin's identity could list
//! itself, and the gateway's check runs before the cache is asked. Why not one cache
//! per kind shared by plugins (fewer watches): it would have to re-check every read
//! against each plugin's RBAC, which the host cannot see; per-plugin watches let the
//! apiserver decide, at the cost of a watch per plugin and kind.
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
    /// Whom the watches that fill it acted as: it serves only a plugin acting as the same.
    pub identity: Option<super::Identity>,
    /// None: all namespaces (or a cluster-scoped kind).
    pub namespaces: Option<Vec<String>>,
    pub objects: ObjectCache,
    /// The last list answered as text (see [`PrimaryCache::list_text`]).
    text: Mutex<Option<ListText>>,
}

/// A list's JSON text, with the params and the very objects it was written from.
struct ListText {
    params: ListParams,
    objects: Vec<Arc<Value>>,
    text: String,
}

impl PrimaryCache {
    pub fn new(
        kind: KindRef,
        identity: Option<super::Identity>,
        namespaces: Option<Vec<String>>,
        objects: ObjectCache,
    ) -> Self {
        PrimaryCache { kind, identity, namespaces, objects, text: Mutex::default() }
    }

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

    /// [`PrimaryCache::list`] as the JSON text of an array. The text written for the
    /// last list is handed out again while the same list would hold the very same
    /// objects: the cache replaces an object's `Arc` whenever the object changes, and
    /// the memo keeps the old ones alive, so equal pointers mean equal content.
    ///
    /// Why: an admission webhook lists the same few objects (SidecarSets, policies) on
    /// every review, and writing them out was the host's largest JSON job per review.
    pub fn list_text(&self, kind: &KindRef, p: &ListParams) -> Option<Result<String, Error>> {
        let items = match self.list(kind, p)? {
            Ok(items) => items,
            Err(e) => return Some(Err(e)),
        };
        let mut memo = self.text.lock().unwrap();
        if let Some(m) = memo.as_ref().filter(|m| {
            m.params == *p
                && m.objects.len() == items.len()
                && m.objects.iter().zip(&items).all(|(a, b)| Arc::ptr_eq(a, b))
        }) {
            return Some(Ok(m.text.clone()));
        }
        let text = super::list_text(&items);
        if let Ok(text) = &text {
            *memo = Some(ListText { params: p.clone(), objects: items, text: text.clone() });
        }
        Some(text)
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

    /// `plugin`'s cache, if it was filled acting as `identity`: after a plugin's
    /// identity changed, its old controller's cache (still draining) serves nobody.
    pub fn get(&self, plugin: &str, identity: Option<&super::Identity>) -> Option<Arc<PrimaryCache>> {
        self.0.read().unwrap().get(plugin).filter(|c| c.identity.as_ref() == identity).cloned()
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
        let c = PrimaryCache::new(kind.clone(), None, Some(vec!["a".into()]), objects.clone());
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

        // As text: the same until an object changes or the params do.
        let text = |sel: Option<&str>| c.list_text(&kind, &p(Some("a"), sel)).unwrap().unwrap();
        let first = text(None);
        assert_eq!(serde_json::from_str::<Value>(&first).unwrap()[0]["metadata"]["uid"], "u-1");
        assert_eq!(text(None), first);
        assert_eq!(text(Some("k=w")), "[]", "other params, other answer");
        objects.lock().unwrap().insert(a.clone(), Arc::new(json!({"metadata": {"name": "x", "uid": "u-2"}})));
        assert_eq!(serde_json::from_str::<Value>(&text(None)).unwrap()[0]["metadata"]["uid"], "u-2", "changed object");
        objects.lock().unwrap().remove(&a);
        assert_eq!(text(None), "[]", "deleted object");
        assert!(c.list_text(&kind, &p(None, None)).is_none());
    }
}
