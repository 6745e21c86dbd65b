//! The webhook server against hostile and unauthenticated clients, on loopback: with
//! `--webhook-client-ca` a client without a certificate that CA signed cannot run a
//! review; clients stuck in their handshake cannot take the serving connections;
//! handshakes run on the niced handshake thread (`apart`), not the host's runtime.

use super::tests::{closed_after, server_with};
use super::*;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A client CA (PEM, written to `dir`) and a client certificate + key it signed.
fn client_ca(dir: &std::path::Path) -> (std::path::PathBuf, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = rcgen::CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
    let path = dir.join("client-ca.crt");
    std::fs::write(&path, ca.pem()).unwrap();
    let mut leaf = CertificateParams::new(vec!["kube-apiserver".to_owned()]).unwrap();
    leaf.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let key = KeyPair::generate().unwrap();
    let cert = leaf.signed_by(&key, &ca).unwrap();
    (path, cert.pem(), key.serialize_pem())
}

/// Posts a review to `/probe/check` and returns the first line of the answer, or the
/// error that ended the exchange.
async fn post(addr: SocketAddr, server_ca: &str, client: Option<(&str, &str)>) -> Result<String, String> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(server_ca.as_bytes()).unwrap()).unwrap();
    let b = rustls::ClientConfig::builder().with_root_certificates(roots);
    let cfg = match client {
        Some((cert, key)) => b
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()],
                PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
            )
            .unwrap(),
        None => b.with_no_client_auth(),
    };
    let tcp = tokio::net::TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let mut tls =
        tokio_rustls::TlsConnector::from(Arc::new(cfg)).connect(name, tcp).await.map_err(|e| e.to_string())?;
    let body = r#"{"request": {"uid": "1", "kind": {"group": "", "version": "v1", "kind": "ConfigMap"}, "operation": "CREATE"}}"#;
    let req = format!("POST /probe/check HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n{body}", body.len());
    tls.write_all(req.as_bytes()).await.map_err(|e| e.to_string())?;
    let mut answer = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), tls.read(&mut answer))
        .await
        .map_err(|_| "no answer".to_owned())?
        .map_err(|e| e.to_string())?;
    if n == 0 {
        return Err("closed without an answer".into());
    }
    Ok(String::from_utf8_lossy(&answer[..n]).lines().next().unwrap_or_default().to_owned())
}

#[tokio::test]
async fn with_a_client_ca_only_clients_it_signed_get_an_answer() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = client_ca(dir.path());
    let ((addr, _), server_ca) = server_with(ServerLimits::default(), Some(&ca)).await;
    let e = post(addr, &server_ca, None).await.expect_err("no certificate: refused");
    assert!(e.contains("CertificateRequired") || e.contains("closed") || e.contains("reset"), "{e}");
    // Signed by another CA: refused too.
    let other = tempfile::tempdir().unwrap();
    let (_, other_cert, other_key) = client_ca(other.path());
    post(addr, &server_ca, Some((&other_cert, &other_key))).await.expect_err("a stranger's certificate: refused");
    let ok = post(addr, &server_ca, Some((&cert, &key))).await.expect("the apiserver's certificate: served");
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
}

#[tokio::test]
async fn clients_stuck_in_their_handshake_lock_no_new_client_out() {
    let limits = ServerLimits { max_handshakes: 3, handshake: Duration::from_secs(5), ..Default::default() };
    let ((addr, _), server_ca) = server_with(limits, None).await;
    let mut stuck = Vec::new();
    for _ in 0..3 {
        stuck.push(tokio::net::TcpStream::connect(addr).await.unwrap());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let before = METRICS.webhook_handshakes_evicted.get();
    // Every handshake place is held by a client that never speaks: a real client
    // still gets its answer, and the oldest silent one is the one closed for it.
    let ok = post(addr, &server_ca, None).await.expect("a new client is served while the places are held");
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    assert!(closed_after(&mut stuck[0], Duration::from_millis(500)).await.is_some(), "the oldest is evicted");
    for c in &mut stuck[1..] {
        assert!(closed_after(c, Duration::from_millis(100)).await.is_none(), "only the oldest is evicted");
    }
    assert!(METRICS.webhook_handshakes_evicted.get() > before);
}

/// CPU time (ns) used so far by this process's threads named `name`.
fn cpu_of_threads(name: &str) -> u64 {
    let mut ns = 0;
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim_end() == name {
            let stat = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
            ns += stat.split_whitespace().next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        }
    }
    ns
}

#[tokio::test]
async fn handshakes_run_on_the_niced_handshake_thread() {
    let ((addr, _), server_ca) = server_with(ServerLimits::default(), None).await;
    let before = cpu_of_threads("wasmop-tls");
    for _ in 0..20 {
        let ok = post(addr, &server_ca, None).await.expect("served");
        assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    }
    // Each handshake's key exchange and signature cost well over 50 µs; a handshake
    // thread that only idles (handshakes done in place) would use next to nothing.
    let used = cpu_of_threads("wasmop-tls") - before;
    assert!(used > 20 * 50_000, "the handshake threads used {used} ns for 20 handshakes");
}
