//! The native baseline for the convergence benchmark: the Memcached plugin's own
//! reconcile code, compiled natively and driven by a plain kube-rs `Controller` — no
//! wasm, no instances, no host. Cluster calls go through the same `KubeBackend` the
//! host uses, so the difference measured is what the wasm host adds.
//!
//!   memcached_native NAMESPACE

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::controller::{Action as KAction, Config, Controller};
use kube::runtime::reflector::ObjectRef as KRef;
use memcached::{Memcached, Operator};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use wasmop::gateway::{Backend, KubeBackend};
use wasmop_sdk::{Cluster, Context, EventType, KindRef, ListParams, LogLevel, ObjectRef, Reconciler, Request};

/// The SDK's `Cluster` over the host's backend, blocking on the async calls the way a
/// synchronous reconcile must.
struct Native {
    backend: Arc<KubeBackend>,
    rt: tokio::runtime::Handle,
    /// Uids of the Memcacheds being reconciled, so an Event needs no GET: what the
    /// host's watch cache gives its plugins, and kube-rs's Recorder its callers.
    uids: std::sync::Mutex<std::collections::HashMap<ObjectRef, String>>,
}

impl Native {
    fn block<T>(&self, f: impl std::future::Future<Output = T>) -> T {
        tokio::task::block_in_place(|| self.rt.block_on(f))
    }
}

type R<T> = Result<T, wasmop_sdk::Error>;

impl Cluster for Native {
    fn get(&self, o: &ObjectRef) -> R<serde_json::Value> {
        self.block(self.backend.get(o))
    }
    fn list(&self, k: &KindRef, p: &ListParams) -> R<Vec<serde_json::Value>> {
        self.block(self.backend.list(k, p))
    }
    fn create(&self, o: &serde_json::Value) -> R<serde_json::Value> {
        self.block(self.backend.create(o.clone()))
    }
    fn update(&self, o: &serde_json::Value) -> R<serde_json::Value> {
        self.block(self.backend.update(o.clone()))
    }
    fn update_status(&self, o: &serde_json::Value) -> R<serde_json::Value> {
        self.block(self.backend.update_status(o.clone()))
    }
    fn delete(&self, o: &ObjectRef) -> R<()> {
        self.block(self.backend.delete(o))
    }
    fn record_event(&self, regarding: &ObjectRef, t: EventType, reason: &str, message: &str) {
        let uid = self.uids.lock().unwrap().get(regarding).cloned();
        self.block(self.backend.record_event("memcached-native", regarding, uid, t, reason, message))
    }
    fn log(&self, _: LogLevel, message: &str, _: &[(&str, &str)]) {
        tracing::debug!("{message}");
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Failed(String);

/// Reconciles started, printed on SIGUSR1 (the benchmark's count, as the host's metric).
static RECONCILES: AtomicU64 = AtomicU64::new(0);

async fn reconcile(mc: Arc<Memcached>, ctx: Arc<(Native, String)>) -> Result<KAction, Failed> {
    RECONCILES.fetch_add(1, Ordering::Relaxed);
    let mut object = serde_json::to_value(&*mc).map_err(|e| Failed(e.to_string()))?;
    object["apiVersion"] = "cache.example.com/v1alpha1".into();
    object["kind"] = "Memcached".into();
    let key = ObjectRef::of_json(&object).ok_or_else(|| Failed("no name".into()))?;
    if let Some(uid) = &mc.metadata.uid {
        ctx.0.uids.lock().unwrap().insert(key.clone(), uid.clone());
    }
    let req = Request { object: key, current: Some(object), settings: ctx.1.clone() };
    let r = tokio::task::block_in_place(|| Operator::reconcile(&Context::new(&ctx.0), &req));
    match r {
        Ok(a) => Ok(a.requeue_after.map(KAction::requeue).unwrap_or_else(KAction::await_change)),
        Err(e) => Err(Failed(e.message)),
    }
}

fn error_policy(_: Arc<Memcached>, _: &Failed, _: Arc<(Native, String)>) -> KAction {
    KAction::requeue(Duration::from_millis(200))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    tracing_subscriber::fmt().with_env_filter("warn").init();
    let ns = std::env::args().nth(1).unwrap_or_else(|| "default".into());
    let backend = Arc::new(KubeBackend::new(kube::Config::infer().await?, "memcached-native")?);
    let client = backend.client().clone();
    let ctx = Arc::new((
        Native { backend, rt: tokio::runtime::Handle::current(), uids: Default::default() },
        format!("namespace: {ns}"),
    ));
    let mcs: Api<Memcached> = Api::namespaced(client.clone(), &ns);
    let deps: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client, &ns);
    let mut usr1 = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1())?;
    tokio::spawn(async move {
        while usr1.recv().await.is_some() {
            eprintln!("reconciles {}", RECONCILES.load(Ordering::Relaxed));
        }
    });
    eprintln!("controller started");
    Controller::new(mcs, Default::default())
        .owns(deps, Default::default())
        .watches(pods, Default::default(), move |p: Pod| {
            let ns = p.metadata.namespace.clone();
            p.metadata
                .labels
                .and_then(|l| l.get("app.kubernetes.io/instance").cloned())
                .map(|name| KRef::new(&name).within(ns.as_deref().unwrap_or_default()))
        })
        // The host's default: four reconciles at once per plugin.
        .with_config(Config::default().concurrency(4))
        .run(reconcile, error_policy, ctx)
        .for_each(|_| async {})
        .await;
    Ok(())
}
