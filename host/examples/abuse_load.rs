//! Attack client for the abuse benchmark (`scripts/bench-abuse.py`): runs the attacks
//! of issue 18 at once against a host on loopback, each bounded in count and stopped at
//! a deadline, and prints one summary line per attack.
//!
//!   abuse_load ADDR CA_FILE SECS ATTACK...
//!
//! ADDR is the webhook server's 127.0.0.1:PORT; the attacks are
//!
//!   handshake:N             N sockets that connect and never send a ClientHello,
//!                           reopened when the host drops them
//!   bodies:N:PATH           N TLS connections at once, each POSTing a Content-Length
//!                           8 MiB body and holding back its last byte for 15 s
//!   paths:N                 N POSTs to random /x-R/y-R paths over 4 keep-alive connections
//!   grab:N:PATH:NS          N concurrent reviews, back to back, of a ConfigMap in NS
//!   churn:NS/CM/KEY:WASM:MS every MS ms, ConfigMap CM's binaryData KEY replaced with
//!                           WASM plus a fresh custom section, gzipped (a new sha256 each
//!                           time: a new version the host must load and compile)
//!
//! Every loop ends at the deadline or at its count, whichever comes first.

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

type Tls = Arc<rustls::ClientConfig>;
type Counters = Arc<[AtomicU64; 4]>;

/// The first failure or refusal an attack saw, for its summary line.
static FIRST: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

fn note(what: &str, e: impl std::fmt::Display) {
    let mut f = FIRST.lock().unwrap();
    if !f.iter().any(|l| l.starts_with(what)) {
        let e: String = e.to_string().chars().take(300).collect();
        f.push(format!("{what}: first refusal or failure: {e}"));
    }
}

fn counters() -> Counters {
    Arc::new(Default::default())
}

fn count(c: &Counters, i: usize) {
    c[i].fetch_add(1, Relaxed);
}

fn show(c: &Counters) -> [u64; 4] {
    [0, 1, 2, 3].map(|i| c[i].load(Relaxed))
}

async fn tls_connect(addr: &str, tls: &Tls) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    tokio_rustls::TlsConnector::from(tls.clone()).connect(name, tcp).await
}

/// A review of a ConfigMap `name` created in `ns`: what the hostile `grab` handler
/// serves, and (for random paths) a well-formed body, so that the host gets as far as
/// looking the path's plugin up.
fn review(ns: &str, name: &str) -> Bytes {
    Bytes::from(
        serde_json::to_vec(&serde_json::json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": name, "operation": "CREATE", "namespace": ns, "name": name,
                "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                "resource": {"group": "", "version": "v1", "resource": "configmaps"},
                "userInfo": {"username": "abuse"},
                "object": {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": ns}, "data": {"a": "b"}}
            }
        }))
        .unwrap(),
    )
}

/// Connections that never start TLS. Counters: opened, dropped by the host within 1 s
/// (refused at its connection cap), dropped later (its handshake timeout), connect errors.
async fn handshake(addr: String, n: usize, until: Instant) -> String {
    let c = counters();
    let cap = n as u64 * 50;
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let (c, addr) = (c.clone(), addr.clone());
            tokio::spawn(async move {
                while Instant::now() < until && c[0].load(Relaxed) < cap {
                    let Ok(mut s) = tokio::net::TcpStream::connect(&addr).await else {
                        count(&c, 3);
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        continue;
                    };
                    count(&c, 0);
                    let opened = Instant::now();
                    let mut buf = [0u8; 64];
                    match tokio::time::timeout_at(until.into(), s.read(&mut buf)).await {
                        Err(_) => break,
                        Ok(_) if opened.elapsed() < Duration::from_secs(1) => {
                            count(&c, 1);
                            // Not a tight reconnect loop: the attack is holding slots,
                            // not burning the machine's CPU.
                            tokio::time::sleep(Duration::from_millis(500)).await;
                        }
                        Ok(_) => count(&c, 2),
                    }
                }
            })
        })
        .collect();
    futures::future::join_all(tasks).await;
    let [o, r, t, e] = show(&c);
    format!("handshake x{n}: {o} opened, {r} dropped at once, {t} timed out by the host, {e} connect errors")
}

const BODY: usize = 8 << 20;
const HOLD: Duration = Duration::from_secs(15);

/// One slow 8 MiB POST; Ok(status) once answered. A host that refuses the body early
/// answers and closes while it is still being written: its answer is read then.
async fn one_body(addr: &str, tls: &Tls, path: &str, until: Instant) -> std::io::Result<u16> {
    let mut s = tls_connect(addr, tls).await?;
    let sent = async {
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {BODY}\r\n\r\n"
        );
        s.write_all(head.as_bytes()).await?;
        let chunk = vec![b' '; 64 << 10];
        let mut sent = 0;
        while sent < BODY - 1 {
            let n = chunk.len().min(BODY - 1 - sent);
            s.write_all(&chunk[..n]).await?;
            sent += n;
        }
        s.flush().await?;
        tokio::time::sleep_until((Instant::now() + HOLD).min(until).into()).await;
        s.write_all(b" ").await
    }
    .await;
    let mut buf = vec![0u8; 1024];
    let n = match tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await {
        Ok(Ok(n)) => n,
        _ => 0,
    };
    let status = String::from_utf8_lossy(&buf[..n]).split_whitespace().nth(1).and_then(|s| s.parse().ok());
    match (status, sent) {
        (Some(status), _) => Ok(status),
        (None, Err(e)) => Err(e),
        (None, Ok(())) => Err(std::io::Error::other("no HTTP answer")),
    }
}

/// Counters: bodies answered, answered with 413 (too large), failed (dropped, refused).
async fn bodies(addr: String, tls: Tls, n: usize, path: String, until: Instant) -> String {
    let c = counters();
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let (c, addr, tls, path) = (c.clone(), addr.clone(), tls.clone(), path.clone());
            tokio::spawn(async move {
                for _ in 0..10 {
                    if Instant::now() >= until {
                        break;
                    }
                    match one_body(&addr, &tls, &path, until).await {
                        Ok(status) => {
                            count(&c, if status == 413 { 1 } else { 0 });
                            // Not at once again: a refused body is answered in
                            // milliseconds, and the attack is memory, not CPU.
                            tokio::time::sleep(Duration::from_millis(500)).await;
                        }
                        Err(e) => {
                            note("bodies", e);
                            count(&c, 2);
                            tokio::time::sleep(Duration::from_millis(500)).await;
                        }
                    }
                }
            })
        })
        .collect();
    futures::future::join_all(tasks).await;
    let [a, big, f, _] = show(&c);
    format!("bodies x{n} of 8 MiB: {a} answered, {big} refused as too large, {f} dropped or refused")
}

/// A keep-alive HTTP/1 client over TLS.
async fn client(addr: &str, tls: &Tls) -> Option<hyper::client::conn::http1::SendRequest<Full<Bytes>>> {
    let s = tls_connect(addr, tls).await.ok()?;
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(s)).await.ok()?;
    tokio::spawn(conn);
    Some(send)
}

/// `total` POSTs from `conns` connections at once, each body from `body(i)` to `path(i)`.
/// Counters: 2xx answers, allowed reviews, other answers, failures.
async fn posts(
    (addr, tls, until): (String, Tls, Instant),
    conns: usize,
    total: u64,
    what: &'static str,
    path: impl Fn(u64) -> String + Send + Sync + 'static,
    body: impl Fn(u64) -> Bytes + Send + Sync + 'static,
) -> [u64; 4] {
    let (c, next) = (counters(), Arc::new(AtomicU64::new(0)));
    let (path, body) = (Arc::new(path), Arc::new(body));
    let tasks: Vec<_> = (0..conns)
        .map(|_| {
            let (c, next, addr, tls, path, body) =
                (c.clone(), next.clone(), addr.clone(), tls.clone(), path.clone(), body.clone());
            tokio::spawn(async move {
                let mut send = None;
                loop {
                    let i = next.fetch_add(1, Relaxed);
                    if i >= total || Instant::now() >= until {
                        break;
                    }
                    if send.is_none() {
                        send = client(&addr, &tls).await;
                    }
                    let Some(s) = send.as_mut() else {
                        count(&c, 3);
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    };
                    let req = hyper::Request::post(path(i))
                        .header("host", "127.0.0.1")
                        .header("content-type", "application/json")
                        .body(Full::new(body(i)))
                        .unwrap();
                    let answer = tokio::time::timeout_at(until.into(), async {
                        let resp = s.send_request(req).await.ok()?;
                        let ok = resp.status().is_success();
                        let b = resp.into_body().collect().await.ok()?.to_bytes();
                        let v: serde_json::Value = serde_json::from_slice(&b).unwrap_or_default();
                        if v["response"]["allowed"] != true {
                            note(what, String::from_utf8_lossy(&b));
                        }
                        Some((ok, v["response"]["allowed"] == true))
                    });
                    match answer.await {
                        Ok(Some((true, allowed))) => {
                            count(&c, 0);
                            if allowed {
                                count(&c, 1);
                            }
                        }
                        Ok(Some((false, _))) => count(&c, 2),
                        Ok(None) | Err(_) => {
                            note(what, "no answer (connection dropped or deadline)");
                            count(&c, 3);
                            send = None;
                        }
                    }
                }
            })
        })
        .collect();
    futures::future::join_all(tasks).await;
    show(&c)
}

async fn paths(addr: String, tls: Tls, n: u64, until: Instant) -> String {
    let path = |_| format!("/x-{}/y-{}", rand::random::<u32>(), rand::random::<u32>());
    let [ok, _, other, failed] =
        posts((addr, tls, until), 4, n, "random paths", path, |i| review("default", &format!("p-{i}"))).await;
    format!("random paths x{n}: {ok} answered 2xx, {other} other answers, {failed} failed")
}

async fn grab(addr: String, tls: Tls, n: usize, path: String, ns: String, until: Instant) -> String {
    let total = n as u64 * 200;
    let [ok, allowed, other, failed] =
        posts((addr, tls, until), n, total, "grab", move |_| path.clone(), move |i| review(&ns, &format!("grab-{i}")))
            .await;
    format!("grab reviews x{n} concurrent: {ok} answered ({allowed} allowed), {other} other answers, {failed} failed")
}

/// `bytes` with a custom section (id 0) appended: valid at the end of a component, and
/// a new sha256 for the host.
fn with_custom_section(bytes: &[u8], payload: &[u8]) -> Vec<u8> {
    fn leb(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let b = (n & 0x7f) as u8;
            n >>= 7;
            out.push(if n == 0 { b } else { b | 0x80 });
            if n == 0 {
                break;
            }
        }
    }
    let name = b"abuse-churn";
    let mut body = Vec::new();
    leb(name.len(), &mut body);
    body.extend_from_slice(name);
    body.extend_from_slice(payload);
    let mut out = bytes.to_vec();
    out.push(0);
    leb(body.len(), &mut out);
    out.extend(body);
    out
}

/// Writes at most this many new versions at once: one write of a 1 MiB ConfigMap takes
/// the apiserver longer than the 100 ms between them, and one at a time would lower the
/// rate the attack claims.
const CHURN_IN_FLIGHT: usize = 4;

async fn churn(spec: String, ms: u64, wasm: String, until: Instant) -> String {
    use kube::api::{Api, Patch, PatchParams};
    let (target, key) = spec.rsplit_once('/').expect("churn:NS/CM/KEY:WASM:MS");
    let (ns, cm) = target.split_once('/').expect("churn:NS/CM/KEY:WASM:MS");
    let (cm, key) = (cm.to_owned(), key.to_owned());
    let base = std::fs::read(&wasm).expect("churn wasm");
    let client = kube::Client::try_default().await.expect("kubeconfig");
    let api: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client, ns);
    let c = counters();
    let slots = Arc::new(tokio::sync::Semaphore::new(CHURN_IN_FLIGHT));
    let max = until.saturating_duration_since(Instant::now()).as_millis() as u64 / ms + 1;
    let mut tick = tokio::time::interval(Duration::from_millis(ms));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut writes = Vec::new();
    for i in 0..max {
        tick.tick().await;
        if Instant::now() >= until {
            break;
        }
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            count(&c, 2);
            continue;
        };
        let bytes = with_custom_section(&base, format!("{i}-{}", rand::random::<u64>()).as_bytes());
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, &bytes).unwrap();
        let b64 = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, gz.finish().unwrap());
        let patch = serde_json::json!({"binaryData": {key.as_str(): b64}});
        let (api, cm, c) = (api.clone(), cm.clone(), c.clone());
        writes.push(tokio::spawn(async move {
            let _slot = slot;
            let started = Instant::now();
            match api.patch(&cm, &PatchParams::default(), &Patch::Merge(&patch)).await {
                Ok(_) => count(&c, 0),
                Err(e) => {
                    note("churn", e);
                    count(&c, 1);
                }
            }
            c[3].fetch_add(started.elapsed().as_millis() as u64, Relaxed);
        }));
    }
    futures::future::join_all(writes).await;
    let [ok, failed, skipped, took] = show(&c);
    let mean = took as f64 / (ok + failed).max(1) as f64;
    let kib = base.len() >> 10;
    format!(
        "plugin churn every {ms} ms ({kib} KiB component): {ok} new versions written, {failed} failed, \
         {skipped} ticks skipped ({CHURN_IN_FLIGHT} writes in flight), {mean:.0} ms per write"
    )
}

#[tokio::main]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 5 {
        eprintln!("usage: abuse_load ADDR CA_FILE SECS ATTACK...");
        std::process::exit(2);
    }
    let addr = args[1].clone();
    assert!(addr.starts_with("127.0.0.1:"), "abuse_load attacks loopback only");
    let mut roots = rustls::RootCertStore::empty();
    use rustls::pki_types::pem::PemObject;
    for c in rustls::pki_types::CertificateDer::pem_slice_iter(&std::fs::read(&args[2]).unwrap()) {
        roots.add(c.unwrap()).unwrap();
    }
    let tls: Tls = Arc::new(rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth());
    let until = Instant::now() + Duration::from_secs_f64(args[3].parse().unwrap());
    let mut tasks: Vec<tokio::task::JoinHandle<String>> = Vec::new();
    for a in &args[4..] {
        let p: Vec<&str> = a.split(':').collect();
        let n = || p.get(1).and_then(|n| n.parse::<usize>().ok()).expect("ATTACK:N");
        let (addr, tls) = (addr.clone(), tls.clone());
        tasks.push(match p[0] {
            "handshake" => tokio::spawn(handshake(addr, n(), until)),
            "bodies" => tokio::spawn(bodies(addr, tls, n(), p[2].to_owned(), until)),
            "paths" => tokio::spawn(paths(addr, tls, n() as u64, until)),
            "grab" => tokio::spawn(grab(addr, tls, n(), p[2].to_owned(), p[3].to_owned(), until)),
            "churn" => tokio::spawn(churn(p[1].to_owned(), p[3].parse().unwrap(), p[2].to_owned(), until)),
            "none" => continue, // the harness's placeholder when a run has none of these
            other => panic!("unknown attack {other}"),
        });
    }
    for t in tasks {
        println!("{}", t.await.unwrap());
    }
    for l in FIRST.lock().unwrap().iter() {
        println!("{l}");
    }
}
