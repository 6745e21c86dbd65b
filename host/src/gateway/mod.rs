//! The gateway: the only place that touches the cluster on a plugin's behalf.
//!
//! A [`Gateway`] is one plugin's view of the cluster. Every call, and every Event the
//! plugin records, is first checked against that plugin's [`Permissions`]; a denied
//! call returns `forbidden` to the plugin, is logged and counted, and never reaches the
//! [`Backend`]. Backends are the real apiserver ([`KubeBackend`], acting as the
//! plugin's [`Identity`]) or an in-memory cluster ([`MemoryBackend`]) for offline runs.
//! Nothing here knows about wasm.

mod cache;
#[cfg(test)]
mod cache_tests;
mod error;
mod events;
#[cfg(test)]
mod gateway_tests;
mod identity;
mod kube_backend;
mod memory;
mod own_writes;
mod permissions;

pub use cache::{Cached, Caches, KindCache, Labels, ObjectCache, PluginCache};
pub use error::from_kube;
pub use identity::{APPROVED_PLUGIN, Identities, Identity, verify as verify_identity};
pub use kube_backend::KubeBackend;
pub use memory::MemoryBackend;
pub use own_writes::OwnWrites;
pub use permissions::{Permissions, Reach};
/// `s` cut to at most `max` bytes on a character boundary: plugin text (messages, log
/// lines) is untrusted and may be of any size.
pub fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Longest Event message written (events.k8s.io's own limit for `note` is 1 KiB).
pub const MAX_EVENT_MESSAGE: usize = 1024;

pub use wasmop_sdk::{Error, EventType, KindRef, ListParams, LogLevel, ObjectRef, Verb};

use crate::metrics::{METRICS, labels};
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Event reasons only the host writes: a plugin's Event with one of them is refused,
/// so `kubectl describe` can trust them.
pub const HOST_REASONS: &[&str] = &["PluginRejected", "PluginFault", "ReconcileFailed"];

/// Where a read may be answered from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Read {
    /// The plugin's watch caches when they hold the kind (one watch event behind at
    /// worst), else the apiserver: the contract's `get` and `list`.
    Cached,
    /// Always the apiserver: the contract's `get-live` and `list-live`.
    Live,
}

/// Cluster access with no permission checks; see [`Gateway`] for the checked view.
#[async_trait::async_trait]
pub trait Backend: Send + Sync {
    /// This cluster as `identity` sees it (None: as the host).
    fn acting_as(self: Arc<Self>, identity: Option<&Identity>) -> Result<Arc<dyn Backend>, Error>;

    /// Whether `kind` is namespaced. The default (offline backends) takes every kind
    /// as namespaced.
    async fn namespaced(&self, _kind: &KindRef) -> Result<bool, Error> {
        Ok(true)
    }
    async fn get(&self, object: &ObjectRef) -> Result<Value, Error>;
    async fn list(&self, kind: &KindRef, params: &ListParams) -> Result<Vec<Value>, Error>;
    async fn create(&self, object: Value) -> Result<Value, Error>;
    async fn update(&self, object: Value) -> Result<Value, Error>;
    async fn update_status(&self, object: Value) -> Result<Value, Error>;
    async fn delete(&self, object: &ObjectRef) -> Result<(), Error>;
    /// Records an Event; failures are the backend's to log, never the plugin's problem.
    /// `uid`: the regarded object's, when the caller knows it (else the backend looks).
    async fn record_event(
        &self,
        reporter: &str,
        regarding: &ObjectRef,
        uid: Option<String>,
        event_type: EventType,
        reason: &str,
        message: &str,
    );
}

/// One plugin's permission-checked view of a [`Backend`].
#[derive(Clone)]
pub struct Gateway {
    plugin: Arc<str>,
    permissions: Arc<Permissions>,
    backend: Arc<dyn Backend>,
    denied: Arc<AtomicU64>,
    /// Whether the last cluster call ended in `conflict` (see [`Gateway::ended_in_conflict`]).
    conflict: Arc<AtomicBool>,
    /// Whether a write to an object other than the reconciled one was accepted (see
    /// [`Gateway::changed_others`]).
    changed_others: Arc<AtomicBool>,
    cache: Option<Arc<PluginCache>>,
    /// The object this gateway's reconcile is of (see [`Gateway::reconciling`]).
    reconciled: Option<ObjectRef>,
    own: Option<Arc<OwnWrites>>,
}

impl Gateway {
    pub fn new(plugin: &str, permissions: Arc<Permissions>, backend: Arc<dyn Backend>) -> Self {
        Gateway {
            plugin: plugin.into(),
            permissions,
            backend,
            denied: Arc::default(),
            conflict: Arc::default(),
            changed_others: Arc::default(),
            cache: None,
            reconciled: None,
            own: None,
        }
    }

    /// This gateway serves a reconcile of `key`. Each update (or status update) of
    /// `key` that the apiserver accepts then advances the cache's `key` to the answer
    /// (read-your-writes, see [`KindCache::advance`]), and, when `own` is given (the
    /// plugin skips its own writes), its resourceVersion is recorded there (see
    /// [`OwnWrites`]).
    pub fn reconciling(mut self, key: ObjectRef, own: Option<Arc<OwnWrites>>) -> Self {
        self.reconciled = Some(key);
        self.own = own;
        self
    }

    /// `written` is the apiserver's answer to a write of `r` that carried resourceVersion
    /// `from`: news for the cache and `own` when `r` is the reconciled object.
    fn own_write(&self, r: &ObjectRef, from: Option<&str>, written: &Result<Value, Error>) {
        let (Some(key), Ok(v)) = (&self.reconciled, written) else { return };
        if key != r {
            return;
        }
        if let (Some(cache), Some(from)) = (&self.cache, from) {
            cache.advance(key, from, v);
        }
        if let (Some(own), Some(rv)) = (&self.own, resource_version(v)) {
            own.record(key, &rv);
        }
    }

    /// Answers reads of the kinds the plugin watches from `cache` where it can.
    pub fn with_cache(mut self, cache: Option<Arc<PluginCache>>) -> Self {
        self.cache = cache;
        self
    }

    pub fn plugin(&self) -> &str {
        &self.plugin
    }

    /// How many calls this gateway has refused.
    pub fn denied_calls(&self) -> u64 {
        self.denied.load(Ordering::Relaxed)
    }

    /// Whether the last cluster call through this gateway (or a clone) was refused for
    /// a stale read: an update with `conflict`, or a create with `already-exists` (the
    /// cache did not hold the object yet). The controller tells a reconcile that failed
    /// right after one from a real failure: it is retried, but it is routine under
    /// watch caches and gets no Warning Event.
    pub fn ended_in_conflict(&self) -> bool {
        self.conflict.load(Ordering::Relaxed)
    }

    /// Whether a reconcile through this gateway (or a clone) changed an object other
    /// than the one reconciled: an accepted create, update, status update or delete.
    /// The controller lets a reconcile that only looked (and wrote at most its own
    /// object) cool down before the next, and runs the next at once after one that
    /// took a step of a rollout (see `controllers::pace`).
    pub fn changed_others(&self) -> bool {
        self.changed_others.load(Ordering::Relaxed)
    }

    /// Notes an accepted write of `r` for [`Gateway::changed_others`].
    fn wrote<T>(&self, r: &ObjectRef, written: &Result<T, Error>) {
        if written.is_ok() && self.reconciled.as_ref() != Some(r) {
            self.changed_others.store(true, Ordering::Relaxed);
        }
    }

    /// The authority check every path goes through. The kind's scope is looked up
    /// (discovery, cached) only for a plugin limited to namespaces: there a
    /// cluster-scoped kind is out of reach whatever namespace the plugin named.
    pub async fn check(&self, kind: &KindRef, verb: Verb, namespace: Option<&str>) -> Result<(), Error> {
        let namespaced = if self.permissions.limited_to_namespaces() && self.permissions.allows(kind, verb) {
            self.backend.namespaced(kind).await?
        } else {
            true
        };
        self.permissions
            .check(kind, verb, Reach::of(namespaced, namespace))
            .inspect_err(|e| self.refused(verb, kind, namespace, e))
    }

    fn refused(&self, verb: Verb, kind: &KindRef, namespace: Option<&str>, e: &Error) {
        self.denied.fetch_add(1, Ordering::Relaxed);
        self.conflict.store(false, Ordering::Relaxed);
        METRICS.denied_calls.get_or_create(&labels(&[("plugin", &self.plugin), ("verb", verb.as_str())])).inc();
        tracing::warn!(plugin = %self.plugin, verb = verb.as_str(), %kind, namespace, "denied: {}", e.message());
    }

    fn counted<T>(&self, verb: Verb, r: Result<T, Error>) -> Result<T, Error> {
        let result = match &r {
            Ok(_) => "ok",
            Err(e) => e.code(),
        };
        let stale = matches!((verb, &r), (_, Err(Error::Conflict(_))) | (Verb::Create, Err(Error::AlreadyExists(_))));
        self.conflict.store(stale, Ordering::Relaxed);
        METRICS
            .host_calls
            .get_or_create(&labels(&[("plugin", &self.plugin), ("verb", verb.as_str()), ("result", result)]))
            .inc();
        r
    }

    /// One object as JSON text (what a plugin gets): from the watch cache when it holds
    /// the kind there (see [`Read`]), else from the backend.
    pub async fn get(&self, object: &ObjectRef, read: Read) -> Result<String, Error> {
        self.check(&object.kind_ref(), Verb::Get, object.namespace.as_deref()).await?;
        if let Some(r) = self.cached(read).and_then(|c| c.get(object)) {
            return self.counted(Verb::Get, r);
        }
        self.counted(Verb::Get, self.backend.get(object).await.map(|v| v.to_string()))
    }

    /// The objects of `kind` that `params` select, as the JSON text of an array (what a
    /// plugin gets): from the watch cache when it covers the list (see
    /// [`KindCache::list_text`]); else from the backend.
    pub async fn list(&self, kind: &KindRef, params: &ListParams, read: Read) -> Result<String, Error> {
        self.check(kind, Verb::List, params.namespace.as_deref()).await?;
        if let Some(r) = self.cached(read).and_then(|c| c.list_text(kind, params)) {
            return self.counted(Verb::List, r);
        }
        let r = self.backend.list(kind, params).await.and_then(|items| list_text(&items));
        self.counted(Verb::List, r)
    }

    fn cached(&self, read: Read) -> Option<&PluginCache> {
        self.cache.as_deref().filter(|_| read == Read::Cached)
    }

    pub async fn create(&self, object: Value) -> Result<Value, Error> {
        let r = create_ref(&object)?;
        self.check(&r.kind_ref(), Verb::Create, r.namespace.as_deref()).await?;
        let written = self.backend.create(object).await;
        self.wrote(&r, &written);
        self.counted(Verb::Create, written)
    }

    pub async fn update(&self, object: Value) -> Result<Value, Error> {
        let r = object_ref(&object)?;
        self.check(&r.kind_ref(), Verb::Update, r.namespace.as_deref()).await?;
        let from = resource_version(&object);
        let written = self.backend.update(object).await;
        self.own_write(&r, from.as_deref(), &written);
        self.wrote(&r, &written);
        self.counted(Verb::Update, written)
    }

    pub async fn update_status(&self, object: Value) -> Result<Value, Error> {
        let r = object_ref(&object)?;
        self.check(&r.kind_ref(), Verb::UpdateStatus, r.namespace.as_deref()).await?;
        let from = resource_version(&object);
        let written = self.backend.update_status(object).await;
        self.own_write(&r, from.as_deref(), &written);
        self.wrote(&r, &written);
        self.counted(Verb::UpdateStatus, written)
    }

    pub async fn delete(&self, object: &ObjectRef) -> Result<(), Error> {
        self.check(&object.kind_ref(), Verb::Delete, object.namespace.as_deref()).await?;
        let gone = self.backend.delete(object).await;
        self.wrote(object, &gone);
        self.counted(Verb::Delete, gone)
    }

    /// An Event the plugin records. It goes through the same check as a `get` of the
    /// object it describes (an Event names the object and carries its uid, so
    /// describing is reading), and may not use a reason only the host writes
    /// ([`HOST_REASONS`]). A refused Event is logged and counted, like a refused call;
    /// Events return nothing to the plugin.
    pub async fn record_event(&self, regarding: &ObjectRef, event_type: EventType, reason: &str, message: &str) {
        if let Err(why) = plugin_reason(reason) {
            let e = Error::Forbidden(format!(
                "plugin may not record an Event with reason {:?}: {why}",
                truncate(reason, 64)
            ));
            self.refused(Verb::Create, &KindRef::new("v1", "Event"), regarding.namespace.as_deref(), &e);
            return;
        }
        let kind = regarding.kind_ref();
        if self.check(&kind, Verb::Get, regarding.namespace.as_deref()).await.is_err() {
            return;
        }
        self.report(regarding, event_type, reason, message).await
    }

    /// An Event the host writes about the plugin's work (a failed reconcile, a fault),
    /// with the plugin's identity: unchecked, for reasons of the host's choosing.
    pub async fn report(&self, regarding: &ObjectRef, event_type: EventType, reason: &str, message: &str) {
        let (reason, message) = (truncate(reason, 128), truncate(message, MAX_EVENT_MESSAGE));
        let uid = self.cache.as_ref().and_then(|c| c.uid(regarding));
        self.backend.record_event(&self.plugin, regarding, uid, event_type, reason, message).await
    }
}

/// Whether a plugin may use `reason`: an UpperCamelCase word (Kubernetes' convention,
/// and no look-alikes of the host's reasons by case, spaces or invisible characters),
/// not one of [`HOST_REASONS`].
fn plugin_reason(reason: &str) -> Result<(), &'static str> {
    let word = reason.len() <= 128
        && reason.starts_with(|c: char| c.is_ascii_alphabetic())
        && reason.bytes().all(|b| b.is_ascii_alphanumeric());
    if !word {
        return Err("a reason is one word of letters and digits");
    }
    if HOST_REASONS.iter().any(|r| r.eq_ignore_ascii_case(reason)) {
        return Err("the host's own");
    }
    Ok(())
}

/// The reference a create names: like [`object_ref`], but `metadata.generateName`
/// may stand for the name (the apiserver picks one).
pub fn create_ref(object: &Value) -> Result<ObjectRef, Error> {
    let str_at = |p: &str| object.pointer(p).and_then(Value::as_str);
    if str_at("/metadata/name").is_none()
        && let (Some(prefix), Some(api_version), Some(kind)) =
            (str_at("/metadata/generateName"), str_at("/apiVersion"), str_at("/kind"))
    {
        return Ok(ObjectRef::new(&KindRef::new(api_version, kind), str_at("/metadata/namespace"), prefix));
    }
    object_ref(object)
}

/// The reference of an object a plugin passed in, or `invalid` naming what is missing.
pub fn object_ref(object: &Value) -> Result<ObjectRef, Error> {
    if !object.is_object() {
        return Err(Error::Invalid("expected a JSON object".into()));
    }
    ObjectRef::of_json(object).ok_or_else(|| {
        let missing: Vec<&str> =
            [("apiVersion", "/apiVersion"), ("kind", "/kind"), ("metadata.name", "/metadata/name")]
                .into_iter()
                .filter(|(_, p)| object.pointer(p).and_then(Value::as_str).is_none())
                .map(|(n, _)| n)
                .collect();
        Error::Invalid(format!("object is missing {}", missing.join(", ")))
    })
}

/// A list as the JSON text of an array, as plugins get it (from the cache or the backend).
/// The resourceVersion a write carries (its precondition), if any.
fn resource_version(object: &Value) -> Option<String> {
    object.pointer("/metadata/resourceVersion").and_then(Value::as_str).map(str::to_owned)
}

fn list_text<T: serde::Serialize>(items: &[T]) -> Result<String, Error> {
    serde_json::to_string(items).map_err(|e| Error::Internal(format!("list: {e}")))
}
