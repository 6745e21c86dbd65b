//! An in-memory cluster for offline runs (`wasmop reconcile`), the SDK's fake cluster
//! behind the [`Backend`] interface.

use super::{Backend, Error, EventType, Identity, KindRef, ListParams, ObjectRef};
use serde_json::Value;
use std::sync::Arc;
use wasmop_sdk::Cluster;
use wasmop_sdk::fake::FakeCluster;

#[derive(Default)]
pub struct MemoryBackend {
    fake: FakeCluster,
}

impl MemoryBackend {
    pub fn fake(&self) -> &FakeCluster {
        &self.fake
    }
}

#[async_trait::async_trait]
impl Backend for MemoryBackend {
    /// One in-memory cluster, no identities: every plugin sees the same objects.
    fn acting_as(self: Arc<Self>, _: Option<&Identity>) -> Result<Arc<dyn Backend>, Error> {
        Ok(self)
    }
    async fn get(&self, object: &ObjectRef) -> Result<Value, Error> {
        self.fake.get(object)
    }
    async fn list(&self, kind: &KindRef, params: &ListParams) -> Result<Vec<Value>, Error> {
        self.fake.list(kind, params)
    }
    async fn create(&self, object: Value) -> Result<Value, Error> {
        self.fake.create(&object)
    }
    async fn update(&self, object: Value) -> Result<Value, Error> {
        self.fake.update(&object)
    }
    async fn update_status(&self, object: Value) -> Result<Value, Error> {
        self.fake.update_status(&object)
    }
    async fn delete(&self, object: &ObjectRef) -> Result<(), Error> {
        self.fake.delete(object)
    }
    async fn record_event(
        &self,
        _: &str,
        regarding: &ObjectRef,
        _: Option<String>,
        t: EventType,
        reason: &str,
        message: &str,
    ) {
        self.fake.record_event(regarding, t, reason, message)
    }
}
