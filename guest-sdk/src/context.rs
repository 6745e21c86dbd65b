use crate::cluster::Cluster;
use crate::types::{EventType, LogLevel, ObjectRef};
use serde::de::DeserializeOwned;

/// One reconcile request.
#[derive(Clone, Debug)]
pub struct Request {
    pub object: ObjectRef,
    /// The primary as the host last saw it; None when it no longer exists.
    pub current: Option<serde_json::Value>,
    /// The deployer's settings document, as given (YAML or JSON text, possibly empty).
    pub settings: String,
}

impl Request {
    /// The current primary as `T`; Ok(None) when it is gone.
    pub fn current_as<T: DeserializeOwned>(&self) -> Result<Option<T>, serde_json::Error> {
        self.current.as_ref().map(|v| T::deserialize(v)).transpose()
    }
}

/// What a reconcile may use: the cluster, Events and logs.
pub struct Context<'a> {
    cluster: &'a dyn Cluster,
}

impl<'a> Context<'a> {
    pub fn new(cluster: &'a dyn Cluster) -> Self {
        Context { cluster }
    }

    pub fn cluster(&self) -> &'a dyn Cluster {
        self.cluster
    }

    /// Records a Normal Event on `regarding`.
    pub fn event(&self, regarding: &ObjectRef, reason: &str, message: &str) {
        self.cluster.record_event(regarding, EventType::Normal, reason, message)
    }

    /// Records a Warning Event on `regarding`.
    pub fn warning(&self, regarding: &ObjectRef, reason: &str, message: &str) {
        self.cluster.record_event(regarding, EventType::Warning, reason, message)
    }

    pub fn log(&self, level: LogLevel, message: &str, fields: &[(&str, &str)]) {
        self.cluster.log(level, message, fields)
    }

    pub fn info(&self, message: &str, fields: &[(&str, &str)]) {
        self.log(LogLevel::Info, message, fields)
    }
}

impl<'a> std::ops::Deref for Context<'a> {
    type Target = dyn Cluster + 'a;
    fn deref(&self) -> &Self::Target {
        self.cluster
    }
}
