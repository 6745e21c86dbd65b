use crate::types::{Error, EventType, KindRef, LogLevel, ObjectRef};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Filters for [`Cluster::list`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListParams {
    pub namespace: Option<String>,
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
}

impl ListParams {
    pub fn namespace(ns: &str) -> Self {
        ListParams { namespace: Some(ns.to_owned()), ..Default::default() }
    }

    pub fn labels(mut self, selector: &str) -> Self {
        self.label_selector = Some(selector.to_owned());
        self
    }
}

/// Cluster access at the level of the contract: objects as JSON values.
///
/// In a plugin this is the host (`cluster`, `events` and `log` imports); in tests it is
/// [`crate::fake::FakeCluster`]. Use the typed helpers of [`ClusterExt`].
pub trait Cluster {
    fn get(&self, object: &ObjectRef) -> Result<serde_json::Value, Error>;
    fn list(&self, kind: &KindRef, params: &ListParams) -> Result<Vec<serde_json::Value>, Error>;
    fn create(&self, object: &serde_json::Value) -> Result<serde_json::Value, Error>;
    fn update(&self, object: &serde_json::Value) -> Result<serde_json::Value, Error>;
    fn update_status(&self, object: &serde_json::Value) -> Result<serde_json::Value, Error>;
    fn delete(&self, object: &ObjectRef) -> Result<(), Error>;
    fn record_event(&self, regarding: &ObjectRef, event_type: EventType, reason: &str, message: &str);
    fn log(&self, level: LogLevel, message: &str, fields: &[(&str, &str)]);
}

/// A Kubernetes type the SDK can move across the boundary: any k8s-openapi type, or a
/// kube `CustomResource`.
pub trait Object: kube::core::Resource<DynamicType = ()> + Serialize + DeserializeOwned {}
impl<T: kube::core::Resource<DynamicType = ()> + Serialize + DeserializeOwned> Object for T {}

/// Typed helpers over any [`Cluster`].
pub trait ClusterExt: Cluster {
    /// Reads `T` named `name` in `namespace`; Ok(None) when it does not exist.
    fn get_opt<T: Object>(&self, namespace: Option<&str>, name: &str) -> Result<Option<T>, Error> {
        let r = ObjectRef::new(&KindRef::of::<T>(), namespace, name);
        match self.get(&r) {
            Ok(v) => from_value(v).map(Some),
            Err(Error::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn list_of<T: Object>(&self, params: &ListParams) -> Result<Vec<T>, Error> {
        self.list(&KindRef::of::<T>(), params)?.into_iter().map(from_value).collect()
    }

    fn create_obj<T: Object>(&self, object: &T) -> Result<T, Error> {
        from_value(self.create(&to_value(object)?)?)
    }

    fn update_obj<T: Object>(&self, object: &T) -> Result<T, Error> {
        from_value(self.update(&to_value(object)?)?)
    }

    fn update_status_obj<T: Object>(&self, object: &T) -> Result<T, Error> {
        from_value(self.update_status(&to_value(object)?)?)
    }

    fn delete_obj<T: Object>(&self, namespace: Option<&str>, name: &str) -> Result<(), Error> {
        self.delete(&ObjectRef::new(&KindRef::of::<T>(), namespace, name))
    }
}

impl<C: Cluster + ?Sized> ClusterExt for C {}

/// Serializes `object` with its apiVersion and kind filled in (k8s-openapi types carry
/// them implicitly; kube `CustomResource` types carry them as fields).
pub fn to_value<T: Object>(object: &T) -> Result<serde_json::Value, Error> {
    let mut v = serde_json::to_value(object).map_err(|e| Error::Internal(format!("serialize: {e}")))?;
    if let Some(map) = v.as_object_mut() {
        map.insert("apiVersion".into(), T::api_version(&()).into_owned().into());
        map.insert("kind".into(), T::kind(&()).into_owned().into());
    }
    Ok(v)
}

pub fn from_value<T: DeserializeOwned>(v: serde_json::Value) -> Result<T, Error> {
    serde_json::from_value(v).map_err(|e| Error::Internal(format!("deserialize: {e}")))
}
