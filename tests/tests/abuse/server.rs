//! The webhook server with a client CA: the apiserver's reviews are answered,
//! anyone else's connection refused.

use super::*;

/// The local control plane's state directory (its CA signs the client certificate the
/// apiserver presents to webhooks: tests/cluster/pki.go).
fn cluster_state() -> std::path::PathBuf {
    std::path::Path::new(&kubeconfig()).parent().expect("kubeconfig in the state directory").to_owned()
}

/// `curl` a review to `url` with `args`: (curl's exit code, HTTP status or 0).
fn curl(url: &str, args: &[&str]) -> (i32, u16) {
    let body = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1","kind":{"group":"","version":"v1","kind":"ConfigMap"},"operation":"CREATE","namespace":"x","object":{"data":{"admission":"deny"}}}}"#;
    let out = Command::new("curl")
        .args(["-s", "-k", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "5", "-X", "POST", "-d", body])
        .args(args)
        .arg(url)
        .output()
        .expect("curl");
    let code = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or(0);
    (out.status.code().unwrap_or(-1), code)
}

#[test]
#[ignore = "needs the local control plane (make e2e)"]
fn with_a_client_ca_the_webhook_server_answers_the_apiserver_and_no_one_else() -> Result<()> {
    let ns = Namespace::new("client-ca");
    let state = cluster_state();
    let ca = state.join("ca.crt");
    let port = free_port();
    let name = format!("client-ca-{}", ns.0);
    let probe = plugin_path("probe.wasm");
    let _host = Host::start(
        &[("probe", &probe, &format!("namespace: {}", ns.0))],
        &[
            "--webhooks",
            "--webhook-bind-address",
            &format!("127.0.0.1:{port}"),
            "--webhook-configurations",
            &name,
            "--webhook-client-ca",
            ca.to_str().unwrap(),
        ],
    )?;
    let _configs = WebhookConfigs::apply(&name, port, &[&probe], &[&ns.0])?;
    wait_for_ca_bundle(&name)?;

    // The apiserver presents its webhook client certificate: its review reaches the
    // plugin, whose denial the user sees.
    let cm = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: denied, namespace: {}}}\ndata: {{admission: deny}}\n",
        ns.0
    );
    let denied =
        eventually("the apiserver's review answered by the plugin", Duration::from_secs(30), || match apply(&cm) {
            Ok(out) => bail!("admitted: {out}"),
            Err(e) if e.contains("the probe denies") => Ok(e),
            Err(e) => bail!("not the plugin's denial yet: {e}"),
        })?;
    assert!(denied.contains("data.admission"), "{denied}");
    let allowed = cm.replace("name: denied", "name: allowed").replace("admission: deny", "admission: allow");
    apply(&allowed).map_err(|e| anyhow!("an allowed ConfigMap is created: {e}"))?;
    // The audit log shows the apiserver refusing the create with the plugin's message.
    let log = audit_log();
    let refused = log.iter().any(|e| {
        e["objectRef"]["name"] == "denied"
            && e["objectRef"]["namespace"] == ns.0.as_str()
            && e["verb"] == "create"
            && e["responseStatus"]["message"].as_str().is_some_and(|m| m.contains("the probe denies"))
    });
    assert!(refused, "the audit log records the create denied by the plugin's webhook");

    // Anyone else: no certificate, or one the CA did not sign, gets no TLS session, so
    // cannot run plugin code or read what it answers.
    let url = format!("https://127.0.0.1:{port}/probe/check");
    let (exit, status) = curl(&url, &[]);
    assert!(
        exit != 0 && status == 0,
        "no client certificate: refused at the handshake (curl exit {exit}, HTTP {status})"
    );
    let stranger = tempfile::tempdir()?;
    let key = stranger.path().join("k.pem");
    let crt = stranger.path().join("c.pem");
    let made = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1"])
        .args(["-subj", "/CN=stranger", "-keyout", key.to_str().unwrap(), "-out", crt.to_str().unwrap()])
        .output()?;
    assert!(made.status.success(), "openssl: {}", String::from_utf8_lossy(&made.stderr));
    let (exit, status) = curl(&url, &["--cert", crt.to_str().unwrap(), "--key", key.to_str().unwrap()]);
    assert!(exit != 0 && status == 0, "a self-signed certificate: refused (curl exit {exit}, HTTP {status})");
    // The apiserver's own client certificate works from here too: the check is the
    // certificate, not the address.
    let (crt, key) = (state.join("webhook-client.crt"), state.join("webhook-client.key"));
    let (exit, status) = curl(&url, &["--cert", crt.to_str().unwrap(), "--key", key.to_str().unwrap()]);
    assert_eq!((exit, status), (0, 200), "the CA-signed client certificate is served");
    Ok(())
}
