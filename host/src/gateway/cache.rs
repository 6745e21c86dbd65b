//! Reads answered from a plugin's watch caches, the way controller-runtime's client
//! reads from informers: its primary kind and every kind it owns or watches.
//!
//! Flow: a controller fills one [`KindCache`] per watched kind from its watch streams
//! and publishes them together, as one [`PluginCache`] under the plugin's name, once
//! every watch has synced; it withdraws them when it stops (or this replica loses
//! leadership, or the apiserver refuses one of its watches). A [`super::Gateway`] built
//! with [`Caches::get`] answers `get` and `list` of those kinds from memory when it
//! can, and asks the apiserver otherwise (a field selector, a namespace not watched, a
//! kind not watched, or the plugin's `get-live` / `list-live`).
//!
//! Identity: a cache is one plugin's, filled by that plugin's own watches, which the
//! host makes impersonating the plugin's ServiceAccount; no cache is shared between
//! plugins. So a cached read can only answer what the plugin's identity could list
//! itself, and the gateway's check runs before the cache is asked. Why not one cache
//! per kind shared by plugins (fewer watches): it would have to re-check every read
//! against each plugin's RBAC, which the host cannot see; per-plugin watches let the
//! apiserver decide, at the cost of a watch per plugin and kind.
//!
//! Read-your-writes, for the object a reconcile is of: when the reconcile updates it
//! (or its status) and the cache still holds it at the resourceVersion that write
//! carried, the apiserver's answer replaces it at once ([`KindCache::advance`]), so
//! the next reconcile of that object reads what the last one wrote even before the
//! write's watch event arrives. Why it is safe without comparing resourceVersions
//! (which are opaque): a write carrying `from` succeeded, so the answer is the state
//! that directly follows `from`; a cache still at `from` has seen nothing newer, and
//! every later event replaces the answer as it would have replaced `from`. Why only
//! that object: at 1,000 Memcacheds, 1.19 status updates per Memcached were refused
//! for a stale primary (a reconcile queued by a Pod or Deployment event before its
//! previous status came back), each a failed reconcile and a retry (BENCHMARKS.md,
//! issue 22); and an owned or watched object advanced this way would hide a label
//! change from the selector mapping, which compares an event's labels with the
//! cache's.
//!
//! Caveat: other cached reads may lag the plugin's own writes by one watch event, as
//! in controller-runtime; updates still carry resourceVersion, so a stale read ends in
//! a `conflict` (or, for a create after a stale "not found", `already-exists`), never
//! in a lost write.

use super::{Error, KindRef, ListParams, ObjectRef};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use wasmop_sdk::helpers::LabelSelector;

/// An object's labels.
pub type Labels = BTreeMap<String, String>;

/// One object as a cache keeps it: the JSON text a plugin reads, and the parts the host
/// reads itself (labels, to answer selector lists and map watched objects to primaries;
/// the uid, for Events; the resourceVersion, to tell states apart).
///
/// Why text and not a `serde_json::Value`: text is what crosses into the plugin, so a
/// read is a copy, not a serialization, and a list is its objects' texts joined; and
/// text takes less memory than the same object as a tree of values (peak RSS at 1,000
/// Memcacheds, 3,000 objects cached: 72 MiB against 95; BENCHMARKS.md, issue 22). The
/// host parses an object's text again only where it needs more than these parts: a
/// primary's label selector, once per version of it. Watches build it as objects
/// arrive (`controllers::watches`).
#[derive(Debug, PartialEq)]
pub struct Cached {
    pub text: Box<str>,
    pub labels: Labels,
    pub uid: Option<Box<str>>,
    pub resource_version: Option<Box<str>>,
}

impl Cached {
    /// The cache's form of `object`, an answer of the apiserver (watches build theirs
    /// from the typed objects they decode, `controllers::watches`).
    pub fn of(object: &serde_json::Value) -> Self {
        let meta = object.get("metadata");
        let labels = meta
            .and_then(|m| m.get("labels"))
            .and_then(|l| l.as_object())
            .map(|l| l.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))).collect())
            .unwrap_or_default();
        let field = |f: &str| meta.and_then(|m| m.get(f)).and_then(|u| u.as_str()).map(Into::into);
        Cached {
            text: object.to_string().into(),
            labels,
            uid: field("uid"),
            resource_version: field("resourceVersion"),
        }
    }
}

/// The objects a controller watches, by reference. An object's `Arc` is replaced
/// whenever the object changes, so an `Arc` still equal is an object unchanged.
pub type ObjectCache = Arc<Mutex<HashMap<ObjectRef, Arc<Cached>>>>;

/// The objects of one kind a plugin watches, as its watch last saw them.
pub struct KindCache {
    pub kind: KindRef,
    /// None: all namespaces (or a cluster-scoped kind).
    pub namespaces: Option<Vec<String>>,
    pub objects: ObjectCache,
}

impl KindCache {
    pub fn new(kind: KindRef, namespaces: Option<Vec<String>>, objects: ObjectCache) -> Self {
        KindCache { kind, namespaces, objects }
    }

    fn covers(&self, namespace: Option<&str>) -> bool {
        match (&self.namespaces, namespace) {
            (None, _) => true,
            (Some(list), Some(ns)) => list.iter().any(|n| n == ns),
            (Some(_), None) => false,
        }
    }

    /// Some(answer, as JSON text) when the cache can answer a get of `r`.
    pub fn get(&self, r: &ObjectRef) -> Option<Result<String, Error>> {
        if r.kind_ref() != self.kind || !self.covers(r.namespace.as_deref()) {
            return None;
        }
        Some(match self.objects.lock().unwrap().get(r) {
            Some(c) => Ok(c.text.to_string()),
            None => Err(Error::NotFound(format!("{r} not found"))),
        })
    }

    /// Read-your-writes (see the module's doc): `r` was written from its state at
    /// resourceVersion `from` and the apiserver answered `written`. If the cache still
    /// holds `r` at `from`, it holds `written` from now on; otherwise (a newer event
    /// came first, or `r` is gone or not cached) nothing changes. Whether it changed.
    pub fn advance(&self, r: &ObjectRef, from: &str, written: &serde_json::Value) -> bool {
        if r.kind_ref() != self.kind || !self.covers(r.namespace.as_deref()) {
            return false;
        }
        // Written out before the lock: the watch's events wait on it.
        let next = Cached::of(written);
        if next.resource_version.is_none() {
            return false;
        }
        let mut objects = self.objects.lock().unwrap();
        let Some(entry) = objects.get_mut(r) else { return false };
        if entry.resource_version.as_deref() != Some(from) {
            return false;
        }
        *entry = Arc::new(next);
        true
    }

    /// The uid of `r` when the cache holds it: what an Event needs to be found by
    /// `kubectl describe`, without a GET per Event.
    pub fn uid(&self, r: &ObjectRef) -> Option<String> {
        if r.kind_ref() != self.kind || !self.covers(r.namespace.as_deref()) {
            return None;
        }
        self.objects.lock().unwrap().get(r)?.uid.as_deref().map(str::to_owned)
    }

    /// Some(answer) when the cache can answer this list: the JSON text of an array of
    /// the objects selected, ordered by reference (as a list from the apiserver is, by
    /// name). Where several reads of one list must agree, `Arc`s of the same objects
    /// give the same text byte for byte (the SDK's `list_shared` relies on it).
    pub fn list_text(&self, kind: &KindRef, p: &ListParams) -> Option<Result<String, Error>> {
        if *kind != self.kind || p.field_selector.is_some() || !self.covers(p.namespace.as_deref()) {
            return None;
        }
        let selector = match p.label_selector.as_deref().map(LabelSelector::parse).transpose() {
            Ok(s) => s,
            Err(e) => return Some(Err(Error::Invalid(e))),
        };
        let out: Vec<Arc<Cached>> = {
            let objects = self.objects.lock().unwrap();
            let mut out: Vec<(&ObjectRef, &Arc<Cached>)> = objects
                .iter()
                .filter(|(k, _)| p.namespace.is_none() || k.namespace == p.namespace)
                .filter(|(_, c)| selector.as_ref().is_none_or(|s| s.matches(&c.labels)))
                .collect();
            out.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.into_iter().map(|(_, c)| c.clone()).collect()
        };
        // The text is joined after the lock is let go: a plugin call may be preempted
        // here (on a niced aside thread) while the watch that feeds this cache waits.
        let mut text = String::with_capacity(2 + out.iter().map(|c| c.text.len() + 1).sum::<usize>());
        text.push('[');
        for (i, c) in out.iter().enumerate() {
            if i > 0 {
                text.push(',');
            }
            text.push_str(&c.text);
        }
        text.push(']');
        Some(Ok(text))
    }
}

/// One plugin's synced caches: its primary kind's and those of the kinds it owns or
/// watches.
pub struct PluginCache {
    /// Whom the watches that fill it acted as: it serves only a plugin acting as the same.
    pub identity: Option<super::Identity>,
    kinds: Vec<KindCache>,
}

impl PluginCache {
    pub fn new(identity: Option<super::Identity>, kinds: Vec<KindCache>) -> Self {
        PluginCache { identity, kinds }
    }

    /// The cache that holds `kind` in `namespace`, if any. A kind watched twice (owned
    /// and watched) has two caches of the same objects; either answers.
    fn of(&self, kind: &KindRef, namespace: Option<&str>) -> Option<&KindCache> {
        self.kinds.iter().find(|c| c.kind == *kind && c.covers(namespace))
    }

    /// Some(answer) when a cache can answer a get of `r`.
    pub fn get(&self, r: &ObjectRef) -> Option<Result<String, Error>> {
        self.of(&r.kind_ref(), r.namespace.as_deref())?.get(r)
    }

    /// The uid of `r` when a cache holds it (see [`KindCache::uid`]).
    pub fn uid(&self, r: &ObjectRef) -> Option<String> {
        self.of(&r.kind_ref(), r.namespace.as_deref())?.uid(r)
    }

    /// Read-your-writes for `r` (see [`KindCache::advance`]).
    pub fn advance(&self, r: &ObjectRef, from: &str, written: &serde_json::Value) -> bool {
        self.of(&r.kind_ref(), r.namespace.as_deref()).is_some_and(|c| c.advance(r, from, written))
    }

    /// Some(answer) when a cache can answer this list (see [`KindCache::list_text`]).
    pub fn list_text(&self, kind: &KindRef, p: &ListParams) -> Option<Result<String, Error>> {
        self.of(kind, p.namespace.as_deref())?.list_text(kind, p)
    }
}

/// Published caches, by plugin name.
#[derive(Default)]
pub struct Caches(RwLock<HashMap<String, Arc<PluginCache>>>);

impl Caches {
    pub fn publish(&self, plugin: &str, cache: Arc<PluginCache>) {
        self.0.write().unwrap().insert(plugin.to_owned(), cache);
    }

    /// Withdraws `plugin`'s cache, if it is still `cache` (a newer controller may
    /// have published its own).
    pub fn withdraw(&self, plugin: &str, cache: &Arc<PluginCache>) {
        let mut m = self.0.write().unwrap();
        if m.get(plugin).is_some_and(|c| Arc::ptr_eq(c, cache)) {
            m.remove(plugin);
        }
    }

    /// `plugin`'s cache, if it was filled acting as `identity`: after a plugin's
    /// identity changed, its old controller's cache (still draining) serves nobody.
    pub fn get(&self, plugin: &str, identity: Option<&super::Identity>) -> Option<Arc<PluginCache>> {
        self.0.read().unwrap().get(plugin).filter(|c| c.identity.as_ref() == identity).cloned()
    }
}
