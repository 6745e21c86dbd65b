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

mod apart;
mod body;
pub mod ca_bundle;
pub mod config;
mod handshakes;
mod review;
mod tls;

pub use review::{Reviewer, finish};
pub use tls::{Pems, Tls, TlsSource, generate};

use crate::metrics::METRICS;
use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{Request, StatusCode};
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

/// What one client may hold of the webhook server.
#[derive(Clone, Copy, Debug)]
pub struct ServerLimits {
    /// A TLS handshake not finished by then is dropped: a client that connects and
    /// sends nothing holds no task and no socket for longer.
    pub handshake: std::time::Duration,
    /// A request whose headers have not all arrived by then is dropped (hyper's own
    /// header timeout, off unless given a timer).
    pub headers: std::time::Duration,
    /// A request's body not all arrived by then is refused (see `body`).
    pub body: std::time::Duration,
    /// Connections served at once; one more is closed as soon as it is accepted. Why
    /// 512: the apiserver keeps a few dozen keep-alive connections per replica.
    pub max_connections: usize,
    /// Connections still in their TLS handshake at once; one more closes the oldest of
    /// them (see `handshakes`). Why 64: the apiserver opens connections a few at a
    /// time and then keeps them, so clients that connect and never finish the
    /// handshake hold at most these, never the slots of connections being served.
    pub max_handshakes: usize,
    /// The largest review body, and the bytes of bodies buffered at once (see `body`).
    pub max_body: usize,
    pub body_budget: usize,
}

impl Default for ServerLimits {
    fn default() -> Self {
        let ten = std::time::Duration::from_secs(10);
        ServerLimits {
            handshake: ten,
            headers: ten,
            body: ten,
            max_connections: 512,
            max_handshakes: 64,
            max_body: body::MAX_BODY,
            body_budget: body::BODY_BUDGET,
        }
    }
}

#[derive(Clone)]
struct App {
    reviewer: Arc<Reviewer>,
    bodies: body::BodyBudget,
}

async fn handle(
    State(app): State<App>,
    Path((plugin, handler)): Path<(String, String)>,
    req: Request<Body>,
) -> Response {
    // The reservation is held until the answer is written: the body lives that long.
    let (body, _reserved) = match app.bodies.read(req).await {
        Ok(b) => b,
        Err(refused) => return refused.into_response(),
    };
    match app.reviewer.review(&plugin, &handler, &body).await {
        Ok(text) => ([(axum::http::header::CONTENT_TYPE, "application/json")], text).into_response(),
        Err(e) => (StatusCode::BAD_REQUEST, e).into_response(),
    }
}

/// Binds `addr` and serves reviews until `stop` resolves; then stops accepting and
/// waits for in-flight reviews. Returns the bound address and the server task.
pub async fn serve(
    addr: SocketAddr,
    tls: &Tls,
    reviewer: Arc<Reviewer>,
    limits: ServerLimits,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), WebhookError> {
    let bodies = body::BodyBudget::new(limits.body_budget, limits.max_body, limits.body);
    let app = Router::new().route("/{plugin}/{handler}", post(handle)).with_state(App { reviewer, bodies });
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| WebhookError::Bind(addr, e))?;
    let bound = listener.local_addr().map_err(|e| WebhookError::Bind(addr, e))?;
    let acceptor = tokio_rustls::TlsAcceptor::from(tls.server_config());
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    let handshakes = handshakes::Handshakes::new(limits.max_handshakes);
    // New connections' handshakes run niced (`apart`); in place if that thread cannot start.
    let apart = apart::start()
        .inspect_err(|e| tracing::warn!("cannot start the handshake thread, handshakes run in place: {e}"))
        .ok();
    let task = tokio::spawn(async move {
        let host = tokio::runtime::Handle::current();
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
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                METRICS.webhook_connections_refused.inc();
                tracing::debug!(%peer, "webhook connection refused: the most connections are open");
                continue;
            };
            let (handshaking, evicted) = handshakes.begin();
            if evicted {
                METRICS.webhook_handshakes_evicted.inc();
            }
            let _ = tcp.set_nodelay(true);
            let acceptor = acceptor.clone();
            let service = TowerToHyperService::new(app.clone());
            let watcher = graceful.watcher();
            let host = host.clone();
            let connection = async move {
                let handshake = tokio::select! {
                    r = tokio::time::timeout(limits.handshake, acceptor.accept(tcp)) => r,
                    _ = handshaking.evicted() => {
                        tracing::debug!(%peer, "webhook TLS handshake evicted by a newer connection");
                        return;
                    }
                };
                drop(handshaking);
                let tls = match handshake {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => {
                        tracing::debug!(%peer, "webhook TLS handshake failed: {e}");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(%peer, "webhook TLS handshake not done within {:?}", limits.handshake);
                        return;
                    }
                };
                // Past its handshake: served on the host's runtime from here on.
                host.spawn(async move {
                    let _slot = slot;
                    let conn = hyper::server::conn::http1::Builder::new()
                        .timer(hyper_util::rt::TokioTimer::new())
                        .header_read_timeout(limits.headers)
                        .serve_connection(TokioIo::new(tls), service);
                    if let Err(e) = watcher.watch(conn).await {
                        tracing::debug!(%peer, "webhook connection: {e}");
                    }
                });
            };
            match &apart {
                Some(apart) => apart.spawn(connection),
                None => drop(tokio::spawn(connection)),
            }
        }
        graceful.shutdown().await;
    });
    Ok((bound, task))
}

#[cfg(test)]
mod client_auth_tests;
#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};
    use tokio::io::AsyncReadExt;

    pub(super) async fn server(limits: ServerLimits) -> (SocketAddr, Arc<Reviewer>) {
        server_with(limits, None).await.0
    }

    /// A server on loopback; with `client_ca`, clients need a certificate it signed.
    /// Also returns the server's CA (PEM).
    pub(super) async fn server_with(
        limits: ServerLimits,
        client_ca: Option<&std::path::Path>,
    ) -> ((SocketAddr, Arc<Reviewer>), String) {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let runtime = crate::runtime::Runtime::new(crate::runtime::RuntimeConfig::default()).unwrap();
        let reviewer = Arc::new(Reviewer {
            registry: crate::registry::Registry::new(Arc::new(runtime)),
            backend: Arc::new(crate::gateway::MemoryBackend::default()),
            deadline: Duration::from_secs(1),
            caches: Arc::default(),
        });
        let source = TlsSource::Managed { names: vec!["127.0.0.1".into()], secret: None };
        let mut tls = Tls::load(&source, None).await.unwrap();
        if let Some(ca) = client_ca {
            tls.require_client_certs(ca).unwrap();
        }
        let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let (addr, _task) = serve(addr, &tls, reviewer.clone(), limits, std::future::pending()).await.unwrap();
        ((addr, reviewer), tls.ca_pem.clone().unwrap())
    }

    /// Seconds until the server closes a connection that never speaks (None: still open after `wait`).
    pub(super) async fn closed_after(c: &mut tokio::net::TcpStream, wait: Duration) -> Option<Duration> {
        let t = Instant::now();
        match tokio::time::timeout(wait, c.read(&mut [0u8; 64])).await {
            Ok(Ok(0)) | Ok(Err(_)) => Some(t.elapsed()),
            _ => None,
        }
    }

    #[tokio::test]
    async fn silent_clients_are_dropped_and_connections_beyond_the_cap_refused() {
        let limits = ServerLimits {
            handshake: Duration::from_millis(300),
            headers: Duration::from_secs(1),
            max_connections: 2,
            ..Default::default()
        };
        let (addr, _) = server(limits).await;
        let mut held = Vec::new();
        for _ in 0..2 {
            held.push(tokio::net::TcpStream::connect(addr).await.unwrap());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut extra = tokio::net::TcpStream::connect(addr).await.unwrap();
        let refused = closed_after(&mut extra, Duration::from_millis(200)).await;
        assert!(refused.is_some(), "a third connection is closed at once");
        for c in &mut held {
            let closed = closed_after(c, Duration::from_secs(5)).await.expect("a silent client is dropped");
            assert!(closed < Duration::from_secs(2), "dropped at the handshake timeout, not later: {closed:?}");
        }
        // Their slots are free again.
        let mut again = tokio::net::TcpStream::connect(addr).await.unwrap();
        assert!(closed_after(&mut again, Duration::from_millis(100)).await.is_none(), "served again");
    }

    #[tokio::test]
    async fn reviews_for_unknown_paths_add_no_metric_series() {
        let (_, reviewer) = server(ServerLimits::default()).await;
        let body = br#"{"request": {"uid": "1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "CREATE"}}"#;
        for i in 0..50 {
            let answer = reviewer.review(&format!("random-{i}"), "x", body).await.unwrap();
            let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
            assert_eq!(answer["response"]["allowed"], false);
            assert!(answer["response"]["status"]["message"].as_str().unwrap().contains("is not loaded"));
        }
        let metrics = METRICS.render();
        assert!(!metrics.contains("random-"), "{metrics}");
        assert!(
            metrics.contains(r#"wasmop_admission_reviews_total{plugin="",handler="",result="error"}"#),
            "{metrics}"
        );
    }
}
