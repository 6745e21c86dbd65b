//! Load generator for the admission benchmark (`scripts/bench-admission.py`): a second
//! process that posts Pod-creation AdmissionReviews to a host's webhook over TLS on
//! keep-alive connections and reports reviews/s and latency percentiles.
//!
//!   admission_load certs DIR                  write a CA + serving cert for 127.0.0.1
//!   admission_load run URL CA_FILE CONNS SECS [RATE | poisson:RATE]
//!                                             print "reviews/s p50_ms p99_ms errors p99.9_ms max_ms"
//!
//! Without RATE each connection sends its next review as soon as the last is answered
//! (closed loop): the throughput a host sustains, with latency that is mostly waiting
//! in line behind the other connections. With RATE the connections together send RATE
//! reviews/s (open loop): evenly spaced, or with `poisson:` as a Poisson process, the
//! way traffic from many independent clients arrives. That gives the latency at that
//! load. A review that could not be sent on time because the previous one on its
//! connection was still unanswered is timed from when it was due, so a slow host
//! cannot hide its backlog (coordinated omission).
//!
//! ADMISSION_LOAD_DUMP=FILE also writes each review's send time (s from the start) and
//! latency (ms), one per line after a `# start UNIX_TIME` line: where in a run the slow
//! ones fall (`scripts/admission-stalls.py` groups them into stalls).

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the local apiserver sent for a Pod a Deployment created (captured by
/// `scripts/capture-review.py`): defaulted, with its ServiceAccount volume, tolerations,
/// managedFields and `request.options`, as every webhook in a cluster sees them.
const POD_REVIEW: &str = include_str!("pod-review.json");

fn review(i: u64) -> Vec<u8> {
    thread_local! {
        static CAPTURED: serde_json::Value = serde_json::from_str(POD_REVIEW).expect("pod-review.json is JSON");
    }
    let mut r = CAPTURED.with(|c| c.clone());
    r["request"]["uid"] = format!("u-{i}").into();
    serde_json::to_vec(&r).unwrap()
}

/// When a connection's reviews are due.
#[derive(Clone, Copy)]
enum Schedule {
    /// Each as soon as the previous one is answered (closed loop).
    BackToBack,
    /// From `first`, one every `every`.
    Even { first: Instant, every: Duration },
    /// From `first`, at exponentially distributed gaps of mean `mean`: with every
    /// connection doing so, arrivals are a Poisson process, as from many independent
    /// clients.
    Poisson { first: Instant, mean: Duration },
}

/// The due instants of `schedule` before `until`, each sent when it comes (None: back
/// to back). They are kept by a thread of their own: `std::thread::sleep` wakes within
/// tens of µs, where tokio's timer rounds up to whole milliseconds and so would send
/// the reviews due within each millisecond together, in bursts the schedule does not
/// have.
fn clock(schedule: Schedule, until: Instant) -> Option<tokio::sync::mpsc::UnboundedReceiver<Instant>> {
    let (first, mut gap): (Instant, Box<dyn FnMut() -> Duration + Send>) = match schedule {
        Schedule::BackToBack => return None,
        Schedule::Even { first, every } => (first, Box::new(move || every)),
        Schedule::Poisson { first, mean } => {
            (first, Box::new(move || mean.mul_f64(-(1.0 - rand::random::<f64>()).ln())))
        }
    };
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        let mut at = first;
        while at < until {
            std::thread::sleep(at.saturating_duration_since(Instant::now()));
            if tx.send(at).is_err() {
                break;
            }
            at += gap();
        }
    });
    Some(rx)
}

async fn worker(
    url: hyper::Uri,
    tls: Arc<rustls::ClientConfig>,
    until: Instant,
    schedule: Schedule,
) -> (Vec<(Instant, Duration)>, u64) {
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
    let mut clock = clock(schedule, until);
    loop {
        // Timed from the actual send, unless the review was held up by the previous
        // one's answer: then from when it was due.
        let from = match &mut clock {
            None if Instant::now() >= until => break,
            None => Instant::now(),
            // An overloaded host answers after the run's end: the reviews still due
            // then were never sent in time, and count as errors.
            Some(due) if Instant::now() >= until => {
                while due.try_recv().is_ok() {
                    errors += 1;
                }
                break;
            }
            Some(due) => match due.recv().await {
                None => break,
                Some(at) if answered > at => at,
                Some(_) => Instant::now(),
            },
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
                    lat.push((from, answered - from));
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
            // RATE reviews/s in all, evenly spaced ("5000") or as a Poisson process
            // ("poisson:5000"), after a moment to connect.
            let rate = args.get(6).map(|r| match r.strip_prefix("poisson:") {
                Some(r) => (r.parse::<f64>().unwrap(), true),
                None => (r.parse::<f64>().unwrap(), false),
            });
            let start = Instant::now();
            let until = start + Duration::from_secs(secs);
            let first = start + Duration::from_millis(100);
            let tasks: Vec<_> = (0..conns)
                .map(|c| {
                    let schedule = match rate {
                        None => Schedule::BackToBack,
                        Some((r, poisson)) => {
                            let every = Duration::from_secs_f64(conns as f64 / r);
                            // Staggered, so that evenly spaced connections interleave.
                            let first = first + every * c as u32 / conns as u32;
                            if poisson {
                                Schedule::Poisson { first, mean: every }
                            } else {
                                Schedule::Even { first, every }
                            }
                        }
                    };
                    tokio::spawn(worker(url.clone(), tls.clone(), until, schedule))
                })
                .collect();
            let (mut all, mut errors) = (Vec::new(), 0);
            for t in tasks {
                let (l, e) = t.await.unwrap();
                all.extend(l);
                errors += e;
            }
            let elapsed = start.elapsed().as_secs_f64();
            if let Ok(path) = std::env::var("ADMISSION_LOAD_DUMP") {
                // The start as Unix time, to line the slow reviews up with the host's log.
                let unix =
                    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap() - start.elapsed();
                let head = format!("# start {:.6}\n", unix.as_secs_f64());
                let text: String = std::iter::once(head)
                    .chain(
                        all.iter()
                            .map(|(f, d)| format!("{:.6} {:.6}\n", (*f - start).as_secs_f64(), d.as_secs_f64() * 1e3)),
                    )
                    .collect();
                std::fs::write(path, text).unwrap();
            }
            let mut all: Vec<Duration> = all.into_iter().map(|(_, d)| d).collect();
            all.sort();
            let pct = |p: f64| all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1))).copied();
            let ms = |d: Option<Duration>| d.map(|d| d.as_secs_f64() * 1000.0).unwrap_or(f64::NAN);
            // p99.9 and the slowest review too: the slowest is the longest the host kept
            // any review waiting (a stall), which p99 alone hides when it is short.
            println!(
                "{:.0} {:.3} {:.3} {} {:.3} {:.3}",
                all.len() as f64 / elapsed,
                ms(pct(0.5)),
                ms(pct(0.99)),
                errors,
                ms(pct(0.999)),
                ms(all.last().copied())
            );
        }
        _ => eprintln!("usage: admission_load certs DIR | run URL CA CONNS SECS [RATE]"),
    }
}
