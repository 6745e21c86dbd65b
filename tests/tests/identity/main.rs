//! Each plugin acts as itself: every request the host makes for a plugin impersonates
//! the plugin's ServiceAccount, so the apiserver's RBAC is the wall and its audit log
//! names the plugin. One test per hole a security review found, each doing the exploit
//! with the probe plugin's `attack` mode and asserting what a user sees (forbidden, an
//! Event, the object untouched) and what the audit log recorded: who a plugin runs as
//! (`account`), and where its calls, Events and reviews reach (`reach`).

mod account;
mod reach;

use anyhow::{Result, anyhow, bail};
use serde_json::Value;
use std::time::Duration;
use wasmop_e2e::*;

const WAIT: Duration = Duration::from_secs(60);

fn user(ns: &str, account: &str) -> String {
    format!("system:serviceaccount:{ns}:{account}")
}

/// A ConfigMap the probe reconciles in `attack` mode, making the call `data` names.
fn attack(ns: &str, name: &str, data: &[(&str, &str)]) -> Result<()> {
    let mut d = serde_json::Map::new();
    d.insert("mode".into(), "attack".into());
    for (k, v) in data {
        d.insert((*k).into(), (*v).into());
    }
    let cm = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns, "labels": {"probe": "true"}},
        "data": d,
    });
    apply(&cm.to_string()).map_err(|e| anyhow!(e))?;
    Ok(())
}

/// What the probe's attack from ConfigMap `name` got back.
fn outcome(ns: &str, name: &str) -> Result<String> {
    eventually(&format!("the outcome of attack {name}"), WAIT, || {
        let sa = get_json(&["serviceaccount", &format!("{name}-probe"), "-n", ns]).ok_or_else(|| anyhow!("no SA"))?;
        sa["metadata"]["annotations"]["probe/attack"].as_str().map(str::to_owned).ok_or_else(|| anyhow!("no outcome"))
    })
}

/// A host loading plugins from ConfigMaps in `ns`, with the probe deployed there as
/// plugin `probe` with `settings`; `granted`: the settings the cluster admin ran
/// `wasmop rbac` with (None: nothing granted).
fn host_with_probe(ns: &str, settings: &str, granted: Option<&str>) -> Result<Host> {
    let host = Host::start(&[], &["--plugins-configmaps", "--plugins-namespace", ns])?;
    let probe = plugin_path("probe.wasm");
    if let Some(g) = granted {
        grant(&probe, "probe", g, ns)?;
    }
    apply_server_side(&pack_plugin(&probe, "probe", "probe", ns, settings, &[])?).map_err(|e| anyhow!(e))?;
    Ok(host)
}

fn requests<'a>(log: &'a [Value], as_user: &str, resource: &str) -> Vec<&'a Value> {
    audit_as(log, as_user).into_iter().filter(|e| e["objectRef"]["resource"] == resource).collect()
}

fn code(e: &Value) -> i64 {
    e["responseStatus"]["code"].as_i64().unwrap_or(0)
}
