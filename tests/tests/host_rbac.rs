//! The host runs with exactly the RBAC `deploy/rbac.yaml` gives it, as its own
//! ServiceAccount (not the local control plane's admin): that is enough for its own
//! work (plugin ConfigMaps, its Lease, its certificate Secret, Events on ConfigMaps),
//! and it cannot act as a plugin until an admin applies that plugin's `wasmop rbac`.

use anyhow::{Result, anyhow, bail};
use std::process::Command;
use std::time::Duration;
use wasmop_e2e::*;

const WAIT: Duration = Duration::from_secs(60);

#[test]
#[ignore = "needs the local control plane (make e2e)"]
fn the_host_needs_only_its_own_rbac_and_acts_as_a_plugin_only_once_granted() -> Result<()> {
    // The host's namespace stands in for wasmop-system.
    let ns = Namespace::new("host-rbac");
    let rbac = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/rbac.yaml"))?;
    apply(&rbac.replace("wasmop-system", &ns.0)).map_err(|e| anyhow!(e))?;
    let token = kubectl(&["create", "token", "wasmop", "-n", &ns.0, "--duration=1h"]).map_err(|e| anyhow!(e))?;
    let admin = std::fs::read_to_string(kubeconfig())?;
    let own: String =
        admin
            .lines()
            .map(|l| {
                if l.trim_start().starts_with("token:") { format!("    token: {}", token.trim()) } else { l.to_owned() }
            })
            .collect::<Vec<_>>()
            .join("\n");
    let work = tempfile::tempdir()?;
    let config = work.path().join("kubeconfig");
    std::fs::write(&config, own + "\n")?;
    let port = free_port();
    let host = Host::start_with_env(
        &[],
        &[
            "--plugins-configmaps",
            "--plugins-namespace",
            &ns.0,
            "--leader-elect",
            "--webhooks",
            "--webhook-bind-address",
            &format!("127.0.0.1:{port}"),
            "--webhook-cert-secret",
            &format!("{}/wasmop-webhook-cert", ns.0),
        ],
        &[("KUBECONFIG", config.to_str().unwrap()), ("POD_NAMESPACE", &ns.0)],
    )?;

    // Its own work: the Lease, the certificate Secret.
    eventually("the host leads", WAIT, || {
        let lease = get_json(&["lease", "wasmop", "-n", &ns.0]).ok_or_else(|| anyhow!("no Lease"))?;
        if lease["spec"]["holderIdentity"].is_string() { Ok(()) } else { bail!("{lease}") }
    })?;
    eventually("the certificate Secret", WAIT, || {
        get_json(&["secret", "wasmop-webhook-cert", "-n", &ns.0]).map(|_| ()).ok_or_else(|| anyhow!("no Secret"))
    })?;

    // A plugin whose ServiceAccount exists and is approved, but which the host was not
    // granted to impersonate: refused, and nothing is done as it.
    let settings = format!("namespace: {}\n", ns.0);
    let probe = plugin_path("probe.wasm");
    kubectl(&["create", "serviceaccount", "probe", "-n", &ns.0]).map_err(|e| anyhow!(e))?;
    kubectl(&["annotate", "serviceaccount", "probe", "-n", &ns.0, "wasmop.io/plugin=probe"]).map_err(|e| anyhow!(e))?;
    apply_server_side(&pack_plugin(&probe, "probe", "probe", &ns.0, &settings, &[])?).map_err(|e| anyhow!(e))?;
    expect_warning(
        &ns.0,
        "probe",
        "PluginRejected",
        &format!("the host may not impersonate ServiceAccount {}/probe", ns.0),
    )?;

    // The admin applies the plugin's RBAC, naming this host's ServiceAccount.
    let s = work.path().join("probe.settings.yaml");
    std::fs::write(&s, &settings)?;
    let out = Command::new(wasmop_bin())
        .arg("rbac")
        .arg(&probe)
        .args(["--namespace", &ns.0, "--host-service-account", &format!("{}/wasmop", ns.0)])
        .arg(format!("--settings={}", s.display()))
        .output()?;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    apply(&String::from_utf8(out.stdout)?).map_err(|e| anyhow!(e))?;
    apply(&format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c, namespace: {}, labels: {{probe: \"true\"}}}}\ndata: {{value: \"1\"}}\n",
        ns.0
    ))
    .map_err(|e| anyhow!(e))?;
    eventually("the probe reconciles as itself", WAIT, || {
        get_json(&["serviceaccount", "c-probe", "-n", &ns.0]).map(|_| ()).ok_or_else(|| anyhow!("no c-probe yet"))
    })?;

    let log = audit_log();
    let me = format!("system:serviceaccount:{}:wasmop", ns.0);
    let own: Vec<&serde_json::Value> =
        log.iter().filter(|e| e["user"]["username"] == me.as_str() && e["impersonatedUser"].is_null()).collect();
    assert!(!own.is_empty(), "the host's own requests are in the audit log");
    let refused: Vec<_> = own.iter().filter(|e| e["responseStatus"]["code"] == 403).collect();
    assert!(refused.is_empty(), "deploy/rbac.yaml lacks what the host needs: {refused:#?}");
    let as_probe: Vec<_> = log
        .iter()
        .filter(|e| e["impersonatedUser"]["username"] == format!("system:serviceaccount:{}:probe", ns.0).as_str())
        .collect();
    assert!(as_probe.iter().all(|e| e["user"]["username"] == me.as_str()), "made by the host");
    assert!(as_probe.iter().any(|e| e["verb"] == "create" && e["objectRef"]["resource"] == "serviceaccounts"));
    assert!(host.logs().contains("became the leader"), "{}", host.logs());
    Ok(())
}
