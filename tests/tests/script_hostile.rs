//! A hostile script plugin (tests/scripts/hostile.js) is held to the limits and
//! permissions of a compiled one: a spin times out, a memory grab traps at the
//! instance's cap, calls outside its permissions are refused before they reach the
//! apiserver (its audit log shows none), nothing outside the sandbox is reachable,
//! and the host stays up, serving the JS Memcached beside it.

use anyhow::{Result, anyhow, bail};
use serde_json::{Value, json};
use std::time::Duration;
use wasmop_e2e::*;

fn attack(ns: &str, mode: &str) -> String {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": mode, "namespace": ns, "labels": {"hostile": "true"}}, "data": {"mode": mode}})
    .to_string()
}

#[test]
#[ignore = "needs the local control plane (make e2e)"]
fn a_hostile_script_is_contained_like_a_compiled_plugin() -> Result<()> {
    install_crd(include_str!("../../deploy/crds/memcached.yaml"), "memcacheds.cache.example.com")?;
    let h_ns = Namespace::new("js-hostile");
    let m_ns = Namespace::new("js-beside");
    let hostile = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/hostile.js");
    let mut host = Host::start(
        &[
            ("hostile-js", &hostile, &format!("namespace: {}", h_ns.0)),
            ("memcached-js", &plugin_path("memcached-js.js"), &format!("namespace: {}", m_ns.0)),
        ],
        // A short deadline so the spin ends soon, and a small memory cap so the grab
        // (throttled as runaway compute once it has run 100 ms) reaches it first.
        &["--reconcile-deadline-seconds", "10", "--plugin-memory-mib", "48"],
    )?;
    for mode in ["loop", "grab", "secrets", "escape", "throw"] {
        apply(&attack(&h_ns.0, mode)).map_err(|e| anyhow!(e))?;
    }
    apply(
        &json!({"apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached",
                "metadata": {"name": "cache", "namespace": m_ns.0}, "spec": {"size": 2}})
        .to_string(),
    )
    .map_err(|e| anyhow!(e))?;
    eventually("the JS Memcached converges beside the attacks", Duration::from_secs(90), || {
        let mc = get_json(&["memcached", "cache", "-n", &m_ns.0]).ok_or_else(|| anyhow!("no memcached"))?;
        if mc["status"]["readyReplicas"] == 2 { Ok(()) } else { bail!("{}", mc["status"]) }
    })?;

    expect_warning(&h_ns.0, "loop", "PluginFault", "timeout")?;
    expect_warning(&h_ns.0, "grab", "PluginFault", "(memory)")?;
    expect_warning(
        &h_ns.0,
        "secrets",
        "ReconcileFailed",
        "get=Forbidden list=Forbidden create=Forbidden delete=Forbidden",
    )?;
    expect_warning(&h_ns.0, "throw", "ReconcileFailed", "TypeError: thrown on purpose")?;
    eventually("the escape attempt reports", Duration::from_secs(30), || {
        let evs = get_json(&["events", "-n", &h_ns.0, "--field-selector", "reason=Reachable"]).unwrap_or_default();
        let msgs: Vec<&str> =
            evs["items"].as_array().into_iter().flatten().filter_map(|e| e["message"].as_str()).collect();
        if msgs.is_empty() { bail!("no Event yet") } else { Ok(msgs.join("; ")) }
    })
    .map(|m| assert_eq!(m, "none", "reachable from a script"))?;
    assert!(host.alive(), "the host survived everything");

    // Refused by the host, not the apiserver: no Secret request as the plugin.
    let log = audit_log();
    let me = format!("system:serviceaccount:{DIR_PLUGIN_ACCOUNTS}:hostile-js");
    let secrets: Vec<&Value> =
        audit_as(&log, &me).into_iter().filter(|e| e["objectRef"]["resource"] == "secrets").collect();
    assert!(secrets.is_empty(), "Secret requests for the hostile script: {secrets:?}");
    assert!(!audit_as(&log, &me).is_empty(), "its watches are in the audit log, as itself");
    let (_, metrics) = host.http_get("/metrics")?;
    for kind in ["timeout", "memory"] {
        let line = format!(r#"wasmop_plugin_faults_total{{plugin="hostile-js",kind="{kind}"}}"#);
        assert!(metrics.contains(&line), "{line} missing");
    }
    assert!(metrics.contains(r#"wasmop_denied_calls_total{plugin="hostile-js",verb="get"}"#), "denials counted");
    host.terminate(Duration::from_secs(10))?;
    Ok(())
}
