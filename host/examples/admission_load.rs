//! Load generator for the admission benchmark (`scripts/bench-admission.py`): a second
//! process that posts Pod-creation AdmissionReviews to a host's webhook over TLS on
//! keep-alive connections and reports reviews/s and latency percentiles.
//!
//!   admission_load certs DIR                  write a CA + serving cert for 127.0.0.1
//!   admission_load run URL CA_FILE CONNS SECS [RATE]
//!                                             print "reviews/s p50_ms p99_ms errors"
//!
//! Without RATE each connection sends its next review as soon as the last is answered
//! (closed loop): the throughput a host sustains, with latency that is mostly waiting
//! in line behind the other connections. With RATE the connections together send RATE
//! reviews/s on a fixed schedule (open loop), the way an apiserver's traffic arrives:
//! the latency at that load. A review that could not be sent on time because the
//! previous one on its connection was still unanswered is timed from when it was due,
//! so a slow host cannot hide its backlog (coordinated omission).

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn review(i: u64) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": format!("u-{i}"), "operation": "CREATE", "namespace": "bench-admission",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "userInfo": {"username": "bench"},
            "object": {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"generateName": "web-", "namespace": "bench-admission", "labels": {"app": "web"}},
                "spec": {"containers": [{"name": "app", "image": "nginx:1.27",
                    "env": [{"name": "TZ", "value": "UTC"}],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                    "volumes": [{"name": "data", "emptyDir": {}}]}}
        }
    }))
    .unwrap()
}

/// When a connection's reviews are due: (first, interval); None: back to back.
type Schedule = Option<(Instant, Duration)>;

async fn worker(
    url: hyper::Uri,
    tls: Arc<rustls::ClientConfig>,
    until: Instant,
    due: Schedule,
) -> (Vec<Duration>, u64) {
    let host = url.host().unwrap().to_owned();
    let port = url.port_u16().unwrap_or(443);
    let tcp = tokio::net::TcpStream::connect((host.as_str(), port)).await.expect("connect");
    tcp.set_nodelay(true).unwrap();
    let name = rustls::pki_types::ServerName::try_from(host.clone()).unwrap();
    let stream = tokio_rustls::TlsConnector::from(tls).connect(name, tcp).await.expect("tls");
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.expect("http");
    tokio::spawn(conn);
    let (mut lat, mut errors, mut i) = (Vec::new(), 0, 0u64);
    let mut answered = Instant::now();
    while Instant::now() < until {
        // Timed from the actual send, unless the review was held up by the previous
        // one's answer: then from when it was due.
        let from = match due {
            Some((first, every)) => {
                let at = first + every * i as u32;
                tokio::time::sleep_until(at.into()).await;
                if answered > at { at } else { Instant::now() }
            }
            None => Instant::now(),
        };
        i += 1;
        let req = hyper::Request::post(url.path())
            .header("host", &host)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(review(i))))
            .unwrap();
        match send.send_request(req).await {
            Ok(resp) => {
                let ok = resp.status().is_success();
                let body = resp.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                answered = Instant::now();
                if ok && v["response"]["allowed"] == true && v["response"]["patch"].is_string() {
                    lat.push(answered - from);
                } else {
                    errors += 1;
                }
            }
            Err(_) => {
                answered = Instant::now();
                errors += 1
            }
        }
    }
    (lat, errors)
}

#[tokio::main]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("certs") => {
            let dir = std::path::Path::new(&args[2]);
            let p = wasmop::webhook::generate(&["127.0.0.1".into()]).unwrap();
            std::fs::write(dir.join("ca.crt"), p.ca).unwrap();
            std::fs::write(dir.join("tls.crt"), p.cert).unwrap();
            std::fs::write(dir.join("tls.key"), p.key).unwrap();
        }
        Some("run") => {
            let url: hyper::Uri = args[2].parse().unwrap();
            let mut roots = rustls::RootCertStore::empty();
            let ca = std::fs::read(&args[3]).unwrap();
            use rustls::pki_types::pem::PemObject;
            for c in rustls::pki_types::CertificateDer::pem_slice_iter(&ca) {
                roots.add(c.unwrap()).unwrap();
            }
            let tls = Arc::new(rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth());
            let conns: usize = args[4].parse().unwrap();
            let secs: u64 = args[5].parse().unwrap();
            let rate: Option<f64> = args.get(6).map(|r| r.parse().unwrap());
            let start = Instant::now();
            let until = start + Duration::from_secs(secs);
            // Each connection sends every `conns / rate` seconds, the connections evenly
            // staggered, after a moment to connect.
            let every = rate.map(|r| Duration::from_secs_f64(conns as f64 / r));
            let first = start + Duration::from_millis(100);
            let tasks: Vec<_> = (0..conns)
                .map(|c| {
                    let due = every.map(|e| (first + e * c as u32 / conns as u32, e));
                    tokio::spawn(worker(url.clone(), tls.clone(), until, due))
                })
                .collect();
            let (mut all, mut errors) = (Vec::new(), 0);
            for t in tasks {
                let (l, e) = t.await.unwrap();
                all.extend(l);
                errors += e;
            }
            let elapsed = start.elapsed().as_secs_f64();
            all.sort();
            let pct = |p: f64| all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1))).copied();
            let ms = |d: Option<Duration>| d.map(|d| d.as_secs_f64() * 1000.0).unwrap_or(f64::NAN);
            println!("{:.0} {:.3} {:.3} {}", all.len() as f64 / elapsed, ms(pct(0.5)), ms(pct(0.99)), errors);
        }
        _ => eprintln!("usage: admission_load certs DIR | run URL CA CONNS SECS [RATE]"),
    }
}
