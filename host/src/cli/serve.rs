//! The host's own HTTP endpoints: `/metrics` (Prometheus), `/healthz` (the process is
//! alive), `/readyz` (sources and watches synced) and `/plugins` (what is serving).

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Json};
use axum::routing::get;
use std::net::SocketAddr;
use std::sync::Arc;
use wasmop::health::Health;
use wasmop::metrics::METRICS;
use wasmop::registry::Registry;

#[derive(Clone)]
struct Ctx {
    health: Arc<Health>,
    registry: Arc<Registry>,
}

async fn metrics() -> impl IntoResponse {
    ([("content-type", "application/openmetrics-text; version=1.0.0; charset=utf-8")], METRICS.render())
}

async fn readyz(State(c): State<Ctx>) -> impl IntoResponse {
    match c.health.ready() {
        Ok(()) => (StatusCode::OK, "ok".to_owned()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
    }
}

async fn plugins(State(c): State<Ctx>) -> Json<serde_json::Value> {
    let mut list: Vec<serde_json::Value> = c
        .registry
        .handles()
        .into_iter()
        .map(|(_, h)| {
            let p = h.load();
            let loaded = p.loaded_at.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
            serde_json::json!({
                "name": p.name, "version": p.manifest.version, "sha256": p.sha256, "origin": p.origin,
                "primary": p.manifest.primary.to_string(), "namespaces": p.manifest.namespaces,
                "loadedAt": loaded, "size": p.compiled.size(),
                "handlers": p.handlers.iter().map(|h| &h.name).collect::<Vec<_>>(),
            })
        })
        .collect();
    list.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    Json(serde_json::Value::Array(list))
}

/// Binds `addr` and serves until the process ends; returns the bound address.
pub async fn serve(addr: SocketAddr, health: Arc<Health>, registry: Arc<Registry>) -> anyhow::Result<SocketAddr> {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/plugins", get(plugins))
        .with_state(Ctx { health, registry });
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!("http server stopped: {e}");
        }
    });
    Ok(bound)
}
