//! The real apiserver, through kube's dynamic API, as the host or as one plugin.
//!
//! [`KubeBackend::for_identity`] gives the backend of one plugin's identity: the same
//! cluster configuration with `Impersonate-User` set to the plugin's ServiceAccount, so
//! the apiserver's RBAC decides and its audit log names the plugin. Backends of the same
//! host share one discovery cache (kinds map to resources the same for everyone) and
//! are kept per identity, so reloading a plugin reuses its connections.

use super::events::EventWriter;
use super::{Backend, Error, EventType, Identity, KindRef, ListParams, ObjectRef, from_kube};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::{ApiCapabilities, Scope};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

type Resources = Arc<RwLock<HashMap<KindRef, (ApiResource, ApiCapabilities)>>>;

/// Maps kinds to resources once (discovery of one group-version per kind), and is
/// refreshed when a kind is unknown: only successful look-ups are cached, so a CRD
/// installed after start-up is found on the next call.
pub struct KubeBackend {
    client: kube::Client,
    /// The host's own configuration, from which impersonating clients are made.
    config: kube::Config,
    instance: String,
    /// Who this backend acts as (None: the host itself).
    identity: Option<Identity>,
    resources: Resources,
    events: EventWriter,
    /// The backends of plugin identities, made once each (the host's backend only).
    acting: Mutex<HashMap<Identity, Arc<KubeBackend>>>,
}

impl KubeBackend {
    /// The host's own backend. `instance` names this host process in Events
    /// (reportingInstance).
    pub fn new(config: kube::Config, instance: &str) -> Result<Self, kube::Error> {
        Self::build(config, instance, None, Resources::default())
    }

    /// Another backend of this host, sharing its discovery cache, with clients (and so
    /// connections) of its own, made on the current runtime. Why: a client's request
    /// queue and its connections are served by the runtime that made them, and the
    /// reconcile threads (`controllers::apart`) rank below the reviews' runtime; with
    /// one client for both, a review's request could wait on a reconcile thread.
    pub fn with_own_clients(&self) -> Result<Self, kube::Error> {
        Self::build(self.config.clone(), &self.instance, self.identity.clone(), self.resources.clone())
    }

    fn build(
        config: kube::Config,
        instance: &str,
        identity: Option<Identity>,
        resources: Resources,
    ) -> Result<Self, kube::Error> {
        let mut effective = config.clone();
        if let Some(id) = &identity {
            effective.auth_info.impersonate = Some(id.user());
            // The apiserver adds the ServiceAccount's own groups to an impersonated
            // ServiceAccount user when no group is given, as it would for its token;
            // nothing of the host's own kubeconfig impersonation carries over.
            effective.auth_info.impersonate_groups = None;
            effective.auth_info.impersonate_uid = None;
            effective.auth_info.impersonate_user_extra = None;
        }
        let client = kube::Client::try_from(effective)?;
        Ok(KubeBackend {
            events: EventWriter::new(client.clone(), instance),
            client,
            config,
            instance: instance.to_owned(),
            identity,
            resources,
            acting: Mutex::default(),
        })
    }

    /// The backend that acts as `identity` (None: this one, the host's own).
    pub fn for_identity(self: &Arc<Self>, identity: Option<&Identity>) -> Result<Arc<KubeBackend>, Error> {
        let Some(id) = identity else { return Ok(self.clone()) };
        if self.identity.as_ref() == Some(id) {
            return Ok(self.clone());
        }
        let mut acting = self.acting.lock().unwrap();
        if let Some(b) = acting.get(id) {
            return Ok(b.clone());
        }
        let b = Self::build(self.config.clone(), &self.instance, Some(id.clone()), self.resources.clone())
            .map_err(|e| Error::Internal(format!("cannot make a client acting as {id}: {e}")))?;
        let b = Arc::new(b);
        acting.insert(id.clone(), b.clone());
        Ok(b)
    }

    /// Who this backend acts as (None: the host itself).
    pub fn identity(&self) -> Option<&Identity> {
        self.identity.as_ref()
    }

    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    /// The resource for a kind, by discovery on first use.
    pub async fn resource(&self, kind: &KindRef) -> Result<(ApiResource, ApiCapabilities), Error> {
        if let Some(r) = self.resources.read().unwrap().get(kind) {
            return Ok(r.clone());
        }
        let (group, version) = match kind.api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", kind.api_version.as_str()),
        };
        let gvk = GroupVersionKind::gvk(group, version, &kind.kind);
        let found = kube::discovery::pinned_kind(&self.client, &gvk).await.map_err(|e| match from_kube(e) {
            Error::NotFound(_) => Error::NotFound(format!("kind {kind} is not served by the apiserver")),
            other => other,
        })?;
        self.resources.write().unwrap().insert(kind.clone(), found.clone());
        Ok(found)
    }

    async fn api(&self, kind: &KindRef, namespace: Option<&str>) -> Result<(Api<DynamicObject>, ApiResource), Error> {
        let (ar, caps) = self.resource(kind).await?;
        let api = match (&caps.scope, namespace) {
            (Scope::Namespaced, Some(ns)) => Api::namespaced_with(self.client.clone(), ns, &ar),
            (Scope::Namespaced, None) => Api::all_with(self.client.clone(), &ar),
            (Scope::Cluster, _) => Api::all_with(self.client.clone(), &ar),
        };
        Ok((api, ar))
    }

    async fn api_for(&self, object: &Value) -> Result<(Api<DynamicObject>, DynamicObject), Error> {
        let r = super::create_ref(object)?;
        let (api, _) = self.api(&r.kind_ref(), r.namespace.as_deref()).await?;
        let obj: DynamicObject =
            serde_json::from_value(object.clone()).map_err(|e| Error::Invalid(format!("malformed object: {e}")))?;
        Ok((api, obj))
    }
}

/// An object as plugins get it. Without managedFields, like the controllers' watch
/// caches (see `controllers::watches`): plugins would pay to copy and parse them on
/// every read, and an update that omits them keeps the stored ones.
fn to_json(mut obj: DynamicObject, ar: Option<&ApiResource>) -> Result<Value, Error> {
    obj.metadata.managed_fields = None;
    let mut v = serde_json::to_value(obj).map_err(|e| Error::Internal(e.to_string()))?;
    // List items come without apiVersion/kind; plugins expect whole objects.
    if let (Some(ar), Some(m)) = (ar, v.as_object_mut()) {
        m.entry("apiVersion").or_insert_with(|| ar.api_version.clone().into());
        m.entry("kind").or_insert_with(|| ar.kind.clone().into());
    }
    Ok(v)
}

#[async_trait::async_trait]
impl Backend for KubeBackend {
    fn acting_as(self: Arc<Self>, identity: Option<&Identity>) -> Result<Arc<dyn Backend>, Error> {
        Ok(self.for_identity(identity)?)
    }

    async fn namespaced(&self, kind: &KindRef) -> Result<bool, Error> {
        // On every call of a plugin limited to namespaces: read the scope in place.
        if let Some((_, caps)) = self.resources.read().unwrap().get(kind) {
            return Ok(matches!(caps.scope, Scope::Namespaced));
        }
        Ok(matches!(self.resource(kind).await?.1.scope, Scope::Namespaced))
    }

    async fn get(&self, object: &ObjectRef) -> Result<Value, Error> {
        let (api, ar) = self.api(&object.kind_ref(), object.namespace.as_deref()).await?;
        to_json(api.get(&object.name).await.map_err(from_kube)?, Some(&ar))
    }

    async fn list(&self, kind: &KindRef, params: &ListParams) -> Result<Vec<Value>, Error> {
        let (api, ar) = self.api(kind, params.namespace.as_deref()).await?;
        let lp = kube::api::ListParams {
            label_selector: params.label_selector.clone(),
            field_selector: params.field_selector.clone(),
            ..Default::default()
        };
        let list = api.list(&lp).await.map_err(from_kube)?;
        list.items.into_iter().map(|o| to_json(o, Some(&ar))).collect()
    }

    async fn create(&self, object: Value) -> Result<Value, Error> {
        let (api, obj) = self.api_for(&object).await?;
        to_json(api.create(&PostParams::default(), &obj).await.map_err(from_kube)?, None)
    }

    async fn update(&self, object: Value) -> Result<Value, Error> {
        let (api, obj) = self.api_for(&object).await?;
        let name = obj.metadata.name.clone().unwrap_or_default();
        to_json(api.replace(&name, &PostParams::default(), &obj).await.map_err(from_kube)?, None)
    }

    async fn update_status(&self, object: Value) -> Result<Value, Error> {
        let (api, obj) = self.api_for(&object).await?;
        let name = obj.metadata.name.clone().unwrap_or_default();
        to_json(api.replace_status(&name, &PostParams::default(), &obj).await.map_err(from_kube)?, None)
    }

    async fn delete(&self, object: &ObjectRef) -> Result<(), Error> {
        let (api, _) = self.api(&object.kind_ref(), object.namespace.as_deref()).await?;
        api.delete(&object.name, &DeleteParams::background()).await.map_err(from_kube)?;
        Ok(())
    }

    async fn record_event(
        &self,
        reporter: &str,
        regarding: &ObjectRef,
        uid: Option<String>,
        event_type: EventType,
        reason: &str,
        message: &str,
    ) {
        // `kubectl describe` selects Events by the regarded object's uid, so look it up
        // (as whoever this backend acts as: the gateway has checked the read).
        let uid = match uid {
            Some(uid) => Some(uid),
            None => {
                self.get(regarding).await.ok().and_then(|v| v.pointer("/metadata/uid")?.as_str().map(str::to_owned))
            }
        };
        let reference = ObjectReference {
            api_version: Some(regarding.api_version.clone()),
            kind: Some(regarding.kind.clone()),
            namespace: regarding.namespace.clone(),
            name: Some(regarding.name.clone()),
            uid,
            ..Default::default()
        };
        let t = match event_type {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        };
        if let Err(e) = self.events.write(&format!("wasmop/{reporter}"), reference, t, reason, message).await {
            tracing::warn!(plugin = reporter, %regarding, "could not record event {reason}: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn objects_reach_plugins_without_managed_fields_and_with_their_type() {
        let item: DynamicObject = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns", "resourceVersion": "7",
                         "managedFields": [{"manager": "kube-controller-manager", "operation": "Update"}]},
            "spec": {"replicas": 2}
        }))
        .unwrap();
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("apps", "v1", "Deployment"));
        let v = to_json(item, Some(&ar)).unwrap();
        assert_eq!(v["apiVersion"], "apps/v1");
        assert_eq!(v["kind"], "Deployment");
        assert_eq!(v["metadata"]["resourceVersion"], "7", "what an update needs stays");
        assert_eq!(v["spec"]["replicas"], 2);
        assert!(v["metadata"].get("managedFields").is_none(), "{v}");
    }
}
