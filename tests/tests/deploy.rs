//! The deploy/ kustomize tree is valid against the real apiserver, and its generated
//! parts are up to date.

use anyhow::{Context, Result};
use std::path::Path;
use std::process::Command;
use wasmop_e2e::*;

const DEPLOY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy");

#[test]
#[ignore = "needs the local control plane (make e2e)"]
fn kustomize_tree_is_schema_valid_server_side() -> Result<()> {
    // A server-side dry run cannot create the namespace it then fills, so it must exist.
    let _ = kubectl(&["create", "namespace", "wasmop-system"]);
    let out = kubectl(&["apply", "-k", DEPLOY, "--dry-run=server"]).map_err(anyhow::Error::msg)?;
    for want in
        ["deployment.apps/wasmop", "clusterrole.rbac.authorization.k8s.io/wasmop", "mutatingwebhookconfiguration"]
    {
        assert!(out.contains(want), "{want} missing from:\n{out}");
    }

    // The plugin ConfigMaps, with the built plugins gzipped as `make deploy-plugins` does.
    let dir = tempfile::tempdir()?;
    for f in [
        "kustomization.yaml",
        "memcached.settings.yaml",
        "memcached-rbac.yaml",
        "sidecarset.settings.yaml",
        "sidecarset-rbac.yaml",
    ] {
        std::fs::copy(Path::new(DEPLOY).join("plugins").join(f), dir.path().join(f))?;
    }
    for p in ["memcached", "sidecarset"] {
        let wasm = std::fs::read(plugin_path(&format!("{p}.wasm"))).context("built plugin")?;
        let mut gz = gzip(&wasm)?;
        assert!(gz.len() < 700 << 10, "{p}.wasm.gz is {} bytes: too close to the 1 MiB ConfigMap limit", gz.len());
        std::fs::write(dir.path().join(format!("{p}.wasm.gz")), std::mem::take(&mut gz))?;
    }
    let out = kubectl(&["apply", "-k", dir.path().to_str().unwrap(), "--server-side", "--dry-run=server"])
        .map_err(anyhow::Error::msg)?;
    assert!(out.contains("wasmop-plugin-sidecarset"), "{out}");
    assert!(out.contains("serviceaccount/sidecarset"), "{out}");
    Ok(())
}

#[test]
fn shipped_plugin_rbac_matches_their_manifests() -> Result<()> {
    for p in ["memcached", "sidecarset"] {
        let wasm = plugin_path(&format!("{p}.wasm"));
        if !wasm.exists() {
            eprintln!("skipped: {} not built (make plugins)", wasm.display());
            return Ok(());
        }
        let mut cmd = Command::new(wasmop_bin());
        cmd.arg("rbac").arg(&wasm).args(["--namespace", "wasmop-system"]);
        let settings = Path::new(DEPLOY).join("plugins").join(format!("{p}.settings.yaml"));
        if settings.exists() {
            cmd.arg("--settings").arg(&settings);
        }
        let out = cmd.output()?;
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let have = std::fs::read_to_string(Path::new(DEPLOY).join("plugins").join(format!("{p}-rbac.yaml")))?;
        assert_eq!(
            have,
            String::from_utf8(out.stdout)?,
            "deploy/plugins/{p}-rbac.yaml is stale: run `make deploy-rbac`"
        );
    }
    Ok(())
}

/// Level 9, as `gzip -9` in `make deploy-plugins` and `wasmop pack`'s encoder: the same
/// deflate level, so the size check below holds for what ships.
fn gzip(bytes: &[u8]) -> Result<Vec<u8>> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(bytes)?;
    Ok(e.finish()?)
}

#[test]
fn webhook_configurations_match_the_plugins_handlers() -> Result<()> {
    let wasm = plugin_path("sidecarset.wasm");
    if !wasm.exists() {
        eprintln!("skipped: {} not built (make plugins)", wasm.display());
        return Ok(());
    }
    let out = Command::new(wasmop_bin())
        .args(["webhook-config", "--name", "wasmop", "--service", "wasmop-system/wasmop-webhook"])
        .args(["--exclude-namespaces", "kube-system,wasmop-system"])
        .arg(&wasm)
        .output()?;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let have = std::fs::read_to_string(Path::new(DEPLOY).join("webhooks.yaml"))?;
    let want = String::from_utf8(out.stdout)?;
    assert!(have.ends_with(&want), "deploy/webhooks.yaml is stale: run `make deploy-manifests`");
    Ok(())
}

#[test]
#[ignore = "needs the local control plane (make e2e)"]
fn the_network_policy_is_valid_once_its_apiserver_range_is_filled_in() -> Result<()> {
    let _ = kubectl(&["create", "namespace", "wasmop-system"]);
    let text = std::fs::read_to_string(Path::new(DEPLOY).join("networkpolicy.yaml"))?;
    assert!(text.contains("${APISERVER_CIDR}"), "the placeholder its header documents");
    // What `APISERVER_CIDR=... envsubst` makes of it.
    let filled = text.replace("${APISERVER_CIDR}", "127.0.0.1/32");
    let out = kubectl_stdin(&["apply", "-f", "-", "--dry-run=server", "-o", "json"], Some(&filled))
        .map_err(anyhow::Error::msg)?;
    let policy: serde_json::Value = serde_json::from_str(&out)?;
    let ingress = &policy["spec"]["ingress"];
    assert_eq!(ingress[0]["ports"][0]["port"], "webhook", "{policy}");
    assert_eq!(ingress[0]["from"][0]["ipBlock"]["cidr"], "127.0.0.1/32", "{policy}");
    assert_eq!(ingress[1]["ports"][0]["port"], "metrics", "{policy}");
    assert_eq!(ingress.as_array().map(Vec::len), Some(2), "nothing else is admitted: {policy}");
    // The port names it admits are the Deployment's.
    let deployment = std::fs::read_to_string(Path::new(DEPLOY).join("deployment.yaml"))?;
    assert!(deployment.contains("name: webhook") && deployment.contains("name: metrics"));
    Ok(())
}
