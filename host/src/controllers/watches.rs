//! A controller's watch streams, and the part of each event the controller keeps.
//!
//! Flow: one stream per watched kind (and per namespace when the manifest names
//! namespaces). Every kind is watched **whole**: the primary's objects are the `current`
//! of every reconcile, and each kind's objects fill the plugin's cache, which answers
//! its `get` and `list` of that kind (`gateway::cache`). Owned and watched kinds also map
//! each event to primary keys (owner references, labels, a name).
//!
//! Why whole and not metadata-only for owned and watched kinds (controller-runtime's
//! `OnlyMetadata`, which this host used before): plugins read what they own and watch
//! (the Memcached plugin its Deployment and Pods, the SidecarSet plugin whole Pods), and
//! a metadata-only watch cannot answer those reads, so each one went to the apiserver:
//! ~15 requests per Memcached. The cost is memory: a cached Pod or Deployment is its
//! JSON text, a few KB (`gateway::Cached`; BENCHMARKS.md has the figure per 1,000
//! Memcacheds).
//!
//! `metadata.managedFields` is dropped from every object as it arrives, as
//! controller-runtime's `TransformStripManagedFields` does: no reconcile reads it, it is
//! often a third of an object's JSON (bytes the cache holds and every reconcile would
//! copy into the plugin and parse), and an update that omits it leaves the stored
//! field as it is.
//!
//! Caveat: a plugin that needs managedFields must `get` the object itself; the gateway
//! strips them from what it hands back too (`gateway::kube_backend`), so in practice
//! plugins do not see them.

use crate::gateway::{Cached, KindRef, KubeBackend, ObjectRef, Permissions, Reach, Verb};
use futures::{Stream, StreamExt, stream::BoxStream};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, DynamicResourceScope, Resource};
use kube::discovery::Scope;
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;
use std::sync::Arc;

/// Why a kind is watched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    Primary,
    /// The manifest's `owns[i]`.
    Owned(usize),
    /// The manifest's `watches[i]`.
    Watched(usize),
}

/// Which watch an event came from: its role and namespace (None: all namespaces).
/// Distinct for every stream, so the controller can count them synced.
pub type Source = (Role, Option<String>);

/// What the controller keeps of a watched object.
pub struct Seen {
    /// Built from the watched kind, not the payload (list items may lack their type).
    pub oref: ObjectRef,
    /// The controllers of the object, for owned kinds' mapping to primaries.
    pub owners: Vec<OwnerReference>,
    /// The whole object (without managedFields) as the cache keeps it.
    pub object: Arc<Cached>,
}

/// One watched kind: why, what, and where its streams look (None: all namespaces, or
/// a cluster-scoped kind); what its cache covers.
pub struct Watched {
    pub role: Role,
    pub kind: KindRef,
    pub namespaces: Option<Vec<String>>,
}

type Item = (Source, Result<watcher::Event<Seen>, watcher::Error>);
pub type Events = BoxStream<'static, Item>;

/// An object as the plugin sees it: whole, typed, without managedFields.
fn seen(kind: &KindRef, mut o: DynamicObject) -> Option<Seen> {
    o.metadata.managed_fields = None;
    // List and watch items may lack apiVersion/kind; the plugin gets whole objects.
    o.types
        .get_or_insert_with(|| kube::core::TypeMeta { api_version: kind.api_version.clone(), kind: kind.kind.clone() });
    let name = o.metadata.name.as_deref()?;
    let oref = ObjectRef::new(kind, o.metadata.namespace.as_deref().filter(|n| !n.is_empty()), name);
    // Written out once as it arrives; a reconcile's read is then a copy of this text.
    let text = serde_json::to_string(&o).ok()?.into_boxed_str();
    let meta = o.metadata;
    let (uid, resource_version) =
        (meta.uid.map(String::into_boxed_str), meta.resource_version.map(String::into_boxed_str));
    let object = Arc::new(Cached { text, labels: meta.labels.unwrap_or_default(), uid, resource_version });
    Some(Seen { oref, owners: meta.owner_references.unwrap_or_default(), object })
}

/// The streams for `m`'s primary, owned and watched kinds, made with `kube` (the
/// backend acting as the plugin), and what each kind's cache covers. Each watch passes
/// the plugin's permission check as a `list` of where it looks: a plugin limited to
/// namespaces cannot watch a cluster-scoped kind, whatever its manifest says about scope.
pub async fn streams(
    kube: &KubeBackend,
    m: &wasmop_sdk::Manifest,
    permissions: &Permissions,
) -> Result<(Vec<Watched>, Vec<Events>), wasmop_sdk::Error> {
    let (mut kinds, mut out) = (Vec::new(), Vec::new());
    for (role, kind) in self::kinds(m) {
        let (ar, caps) = kube.resource(&kind).await?;
        let namespaced = matches!(caps.scope, Scope::Namespaced);
        let namespaces = (namespaced && !m.namespaces.is_empty()).then(|| m.namespaces.clone());
        let looks: Vec<Option<String>> = match &namespaces {
            Some(list) => list.iter().cloned().map(Some).collect(),
            None => vec![None],
        };
        for ns in looks {
            permissions.check(&kind, Verb::List, Reach::of(namespaced, ns.as_deref()))?;
            let (source, kind) = ((role, ns.clone()), kind.clone());
            let events = watch::<DynamicObject>(kube, ns.as_deref(), &ar);
            out.push(events.filter_map(move |ev| tagged(source.clone(), ev, |o| seen(&kind, o))).boxed());
        }
        kinds.push(Watched { role, kind, namespaces });
    }
    Ok((kinds, out))
}

/// The kinds `m` watches, each under its own role.
fn kinds(m: &wasmop_sdk::Manifest) -> Vec<(Role, KindRef)> {
    let mut kinds: Vec<(Role, KindRef)> = vec![(Role::Primary, m.primary.clone())];
    kinds.extend(m.owns.iter().enumerate().map(|(i, k)| (Role::Owned(i), k.clone())));
    kinds.extend(m.watches.iter().enumerate().map(|(i, w)| (Role::Watched(i), w.kind.clone())));
    kinds
}

/// How long one watch request lasts before kube renews it (its default is 290 s). Why
/// shorter: the apiserver authorizes a watch when it starts, so a plugin whose RBAC an
/// admin revoked keeps its open watches, and its cached reads, until they are renewed;
/// at 60 s a revocation reaches cached reads within about a minute, for one watch
/// request (no re-list) per kind per minute.
const WATCH_RENEWAL_SECS: u32 = 60;

/// One watch of `ar`'s objects (in `ns`, or everywhere), retried with backoff.
fn watch<K>(
    kube: &KubeBackend,
    ns: Option<&str>,
    ar: &ApiResource,
) -> impl Stream<Item = watcher::Result<watcher::Event<K>>> + use<K>
where
    K: Resource<DynamicType = ApiResource, Scope = DynamicResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    let client = kube.client().clone();
    let api = match ns {
        Some(ns) => Api::<K>::namespaced_with(client, ns, ar),
        None => Api::<K>::all_with(client, ar),
    };
    watcher(api, watcher::Config::default().timeout(WATCH_RENEWAL_SECS)).default_backoff()
}

/// An event in the controller's terms; objects without a name are dropped.
fn tagged<K>(
    source: Source,
    ev: watcher::Result<watcher::Event<K>>,
    f: impl Fn(K) -> Option<Seen>,
) -> futures::future::Ready<Option<Item>> {
    use watcher::Event::*;
    let ev = match ev {
        Ok(Apply(o)) => f(o).map(|s| Ok(Apply(s))),
        Ok(Delete(o)) => f(o).map(|s| Ok(Delete(s))),
        Ok(InitApply(o)) => f(o).map(|s| Ok(InitApply(s))),
        Ok(Init) => Some(Ok(Init)),
        Ok(InitDone) => Some(Ok(InitDone)),
        Err(e) => Some(Err(e)),
    };
    futures::future::ready(ev.map(|ev| (source, ev)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn kind() -> KindRef {
        KindRef::new("cache.example.com/v1alpha1", "Memcached")
    }

    fn managed() -> Value {
        json!([{"manager": "kubectl", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}])
    }

    fn object(v: Value) -> DynamicObject {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn objects_reach_the_cache_whole_but_without_managed_fields() {
        // As a list item arrives: no apiVersion/kind.
        let o = object(json!({
            "metadata": {"name": "a", "namespace": "ns", "uid": "u1", "managedFields": managed()},
            "spec": {"size": 3}
        }));
        let s = seen(&kind(), o).unwrap();
        let v: Value = serde_json::from_str(&s.object.text).unwrap();
        assert_eq!(v["spec"]["size"], 3);
        assert_eq!(v["metadata"]["uid"], "u1");
        assert_eq!(v["kind"], "Memcached");
        assert_eq!(v["apiVersion"], "cache.example.com/v1alpha1");
        assert!(v["metadata"].get("managedFields").is_none(), "{v}");
        assert_eq!(s.object.uid.as_deref(), Some("u1"));
        assert_eq!(s.oref, ObjectRef::new(&kind(), Some("ns"), "a"));
        // An owned or watched kind's object is kept whole too: the plugin reads it.
        let pods = KindRef::new("v1", "Pod");
        let pod = object(json!({"metadata": {"name": "web-1", "namespace": "ns", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]}, "status": {"phase": "Running"}}));
        let s = seen(&pods, pod).unwrap();
        assert_eq!(s.oref, ObjectRef::new(&pods, Some("ns"), "web-1"));
        assert_eq!(s.object.labels["app"], "web");
        let v: Value = serde_json::from_str(&s.object.text).unwrap();
        assert_eq!(v["status"]["phase"], "Running");
        assert_eq!(v["kind"], "Pod");
    }

    #[test]
    fn cluster_scoped_objects_have_no_namespace_and_nameless_ones_are_dropped() {
        let ns = KindRef::new("v1", "Namespace");
        assert_eq!(
            seen(&ns, object(json!({"metadata": {"name": "prod", "namespace": ""}}))).unwrap().oref.namespace,
            None
        );
        assert!(seen(&ns, object(json!({"metadata": {}}))).is_none());
    }

    #[test]
    fn every_watched_kind_has_its_own_source() {
        let mut m = wasmop_sdk::Manifest::for_kind("a", "1", kind());
        m.owns.push(KindRef::new("apps/v1", "Deployment"));
        m.owns.push(KindRef::new("v1", "Service"));
        m.watches
            .push(wasmop_sdk::Watch { kind: KindRef::new("v1", "Secret"), mapping: wasmop_sdk::Mapping::SameName });
        let roles: Vec<Role> = kinds(&m).into_iter().map(|(r, _)| r).collect();
        assert_eq!(roles, [Role::Primary, Role::Owned(0), Role::Owned(1), Role::Watched(0)]);
        // One source per stream: two owned kinds sharing one would never all count as
        // synced in the controller, which would then never be ready.
        let sources: std::collections::HashSet<Source> = roles.into_iter().map(|r| (r, Some("ns".into()))).collect();
        assert_eq!(sources.len(), 4);
    }
}
