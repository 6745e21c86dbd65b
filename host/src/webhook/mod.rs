//! Admission webhooks served from plugins over HTTPS.
//!
//! Flow: the apiserver POSTs an AdmissionReview to `/<plugin>/<handler>`; the
//! [`Reviewer`] finds the plugin's current version in the registry, runs the handler
//! in a fresh instance under the admission deadline, and answers — a mutated object
//! becomes a JSONPatch. TLS comes from [`TlsSource`]; with a host-managed certificate,
//! [`ca_bundle::inject`] keeps the CA in the named webhook configurations.
//! [`config`] writes those configurations from the plugins' declared handlers.
//!
//! Every replica serves webhooks (leader election only gates reconciling); on shutdown
//! the server stops accepting and lets in-flight reviews finish.

pub mod ca_bundle;
pub mod config;
mod review;
mod tls;

pub use review::{Reviewer, finish};
pub use tls::{Pems, Tls, TlsSource, generate};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use std::net::SocketAddr;
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("TLS: {0}")]
    Tls(String),
    #[error("cannot listen on {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
    #[error("webhook configuration {0}: {1}")]
    Config(String, String),
}

/// Why 8 MiB: a review carries the object and the old object, each up to the
/// apiserver's 3 MiB request limit.
const MAX_BODY: usize = 8 << 20;

async fn handle(
    State(r): State<Arc<Reviewer>>,
    Path((plugin, handler)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    match r.review(&plugin, &handler, &body).await {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => (StatusCode::BAD_REQUEST, e).into_response(),
    }
}

/// Binds `addr` and serves reviews until `stop` resolves; then stops accepting and
/// waits for in-flight reviews. Returns the bound address and the server task.
pub async fn serve(
    addr: SocketAddr,
    tls: &Tls,
    reviewer: Arc<Reviewer>,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), WebhookError> {
    let app = Router::new()
        .route("/{plugin}/{handler}", post(handle))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(reviewer);
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| WebhookError::Bind(addr, e))?;
    let bound = listener.local_addr().map_err(|e| WebhookError::Bind(addr, e))?;
    let acceptor = tokio_rustls::TlsAcceptor::from(tls.server_config());
    let task = tokio::spawn(async move {
        let graceful = hyper_util::server::graceful::GracefulShutdown::new();
        tokio::pin!(stop);
        loop {
            let (tcp, peer) = tokio::select! {
                _ = &mut stop => break,
                r = listener.accept() => match r {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::warn!("webhook accept: {e}");
                        continue;
                    }
                },
            };
            let _ = tcp.set_nodelay(true);
            let acceptor = acceptor.clone();
            let service = TowerToHyperService::new(app.clone());
            let watcher = graceful.watcher();
            tokio::spawn(async move {
                let tls = match acceptor.accept(tcp).await {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::debug!(%peer, "webhook TLS handshake failed: {e}");
                        return;
                    }
                };
                let conn = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(tls), service);
                if let Err(e) = watcher.watch(conn).await {
                    tracing::debug!(%peer, "webhook connection: {e}");
                }
            });
        }
        graceful.shutdown().await;
    });
    Ok((bound, task))
}
