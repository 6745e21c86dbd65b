//! An in-memory cluster for offline runs (`wasmop reconcile`), the SDK's fake cluster
//! behind the [`Backend`] interface.

use super::{Backend, Error, EventType, KindRef, ListParams, ObjectRef};
use serde_json::Value;
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
