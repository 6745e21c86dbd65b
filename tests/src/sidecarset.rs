//! What the SidecarSet end-to-end tests share: a host serving the plugin's webhooks
//! over TLS through the real apiserver, SidecarSets and Pods as kubectl applies them,
//! and a stand-in for the kubelet's in-place restarts (kwok does not simulate them).
//!
//! SidecarSets are cluster-scoped, so these tests take a lock: one SidecarSet host at
//! a time in a test binary (two would both reconcile every SidecarSet); cargo runs
//! test binaries one after another.

use crate::*;
use anyhow::{Result, bail};
use serde_json::{Value, json};
use std::sync::Mutex;
use std::time::Duration;

pub static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

pub const CRD: &str = include_str!("../../deploy/crds/sidecarset.yaml");

/// A host serving the SidecarSet plugin's webhooks for `namespaces`.
pub fn host(name: &str, namespaces: &[&str]) -> Result<(Host, WebhookConfigs)> {
    host_with(name, namespaces, "")
}

/// [`host`] with the plugin's `settings`.
pub fn host_with(name: &str, namespaces: &[&str], settings: &str) -> Result<(Host, WebhookConfigs)> {
    install_crd(CRD, "sidecarsets.apps.kruise.io")?;
    // Where the plugin keeps revisions unless its settings name another namespace, as
    // Kruise. Tests in parallel may race to create it: only its existence matters.
    let _ = apply("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: kruise-system\n");
    let port = free_port();
    let wasm = plugin_path("sidecarset.wasm");
    let addr = format!("127.0.0.1:{port}");
    let h = Host::start(
        &[("sidecarset", &wasm, settings)],
        &["--webhooks", "--webhook-bind-address", &addr, "--webhook-configurations", name],
    )?;
    let configs = WebhookConfigs::apply(name, port, &[&wasm], namespaces)?;
    wait_for_ca_bundle(name)?;
    // A webhook configuration another test of this binary just deleted can linger in
    // the apiserver's cache for a moment, naming a port a newer host has since taken
    // (seen in CI: "plugin \"sidecarset\" is not loaded" from another test's host):
    // a SidecarSet created as a dry run goes through the webhooks until this host
    // answers.
    let probe = sidecarset(
        &format!("{name}-dry-run"),
        json!({"selector": {"matchLabels": {"wasmop-e2e": "dry-run"}},
               "containers": [{"name": format!("{name}-dry-run"), "image": "busybox:1.36"}]}),
    );
    eventually("the apiserver calls this test's host", Duration::from_secs(30), || {
        kubectl_stdin(&["create", "--dry-run=server", "-f", "-"], Some(&probe)).map(|_| ()).map_err(anyhow::Error::msg)
    })?;
    Ok((h, configs))
}

pub fn sidecarset(name: &str, spec: Value) -> String {
    json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": name}, "spec": spec})
        .to_string()
}

pub fn pod(ns: &str, name: &str, app: &str) -> String {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns, "labels": {"app": app}},
           "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]}})
    .to_string()
}

pub fn containers(ns: &str, name: &str) -> Vec<String> {
    get_json(&["pod", "-n", ns, name])
        .map(|p| {
            p["spec"]["containers"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap().to_owned()).collect()
        })
        .unwrap_or_default()
}

pub fn status(name: &str) -> Value {
    get_json(&["sidecarset", name]).map(|s| s["status"].clone()).unwrap_or_default()
}

pub fn expect_status(name: &str, matched: i64, ready: i64) -> Result<()> {
    eventually(&format!("{name}: matched {matched}, ready {ready}"), Duration::from_secs(60), || {
        let s = status(name);
        if s["matchedPods"] == matched && s["readyPods"] == ready && s["updatedPods"] == matched {
            Ok(())
        } else {
            bail!("status {s}")
        }
    })
}

pub struct Cleanup(pub Vec<String>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for n in &self.0 {
            let _ = kubectl(&["delete", "sidecarset", n, "--ignore-not-found", "--wait=false"]);
        }
    }
}

/// The sidecar image of each Pod: (name, spec image, running image).
pub fn sidecar_images(ns: &str) -> Vec<(String, String, String)> {
    let pods = get_json(&["pods", "-n", ns]).unwrap();
    pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let spec = p["spec"]["containers"].as_array().unwrap().iter().find(|c| c["name"] == "proxy").unwrap();
            let status = p["status"]["containerStatuses"]
                .as_array()
                .and_then(|s| s.iter().find(|c| c["name"] == "proxy"))
                .map(|c| c["image"].as_str().unwrap_or("").to_owned())
                .unwrap_or_default();
            (p["metadata"]["name"].as_str().unwrap().to_owned(), spec["image"].as_str().unwrap().to_owned(), status)
        })
        .collect()
}

/// What a kubelet does after an in-place image change: restart the container and
/// report the new image (kwok does not simulate this).
pub fn restart_container(ns: &str, pod: &str, image: &str) -> Result<()> {
    let p = get_json(&["pod", "-n", ns, pod]).unwrap();
    let i = p["status"]["containerStatuses"].as_array().unwrap().iter().position(|c| c["name"] == "proxy").unwrap();
    let patch = json!([{"op": "replace", "path": format!("/status/containerStatuses/{i}/image"), "value": image}]);
    kubectl(&["patch", "pod", "-n", ns, pod, "--subresource=status", "--type=json", "-p", &patch.to_string()])
        .map_err(anyhow::Error::msg)?;
    Ok(())
}

/// Images no registry serves, as Kruise's e2e `InvalidImage`: the stand-in kubelet
/// below fails to pull them.
pub const UNPULLABLE: &str = "invalid.registry.k8s.io/";

/// What a kubelet reports after in-place image changes of Pod `ns/pod` (kwok reports
/// nothing after an in-place update): each container whose reported image differs
/// from its spec's runs the spec's image now, with a new imageID, and is ready; one
/// whose image cannot be pulled (`UNPULLABLE`) waits in `ErrImagePull`, not ready,
/// with no imageID. The Pod is Ready when all its containers are. Only Pod status is
/// written. Returns how many containers it changed.
pub fn play_kubelet(ns: &str, pod: &str) -> Result<usize> {
    let Some(p) = get_json(&["pod", "-n", ns, pod]) else { bail!("pod {ns}/{pod} not found") };
    let spec = p["spec"]["containers"].as_array().cloned().unwrap_or_default();
    let mut statuses = p["status"]["containerStatuses"].as_array().cloned().unwrap_or_default();
    let mut changed = 0;
    for s in &mut statuses {
        let Some(c) = spec.iter().find(|c| c["name"] == s["name"]) else { continue };
        let image = c["image"].as_str().unwrap_or("");
        let failing = s["state"]["waiting"]["reason"] == "ErrImagePull";
        if image.starts_with(UNPULLABLE) {
            if !(failing && s["image"] == image) {
                s["image"] = json!(image);
                s["imageID"] = json!("");
                s["ready"] = json!(false);
                s["started"] = json!(false);
                s["state"] = json!({"waiting": {"reason": "ErrImagePull", "message": format!("cannot pull {image}")}});
                changed += 1;
            }
        } else if s["image"] != image || failing {
            let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            let name = c["name"].as_str().unwrap_or("");
            s["image"] = json!(image);
            s["imageID"] = json!(format!("docker.io/restarted/{name}@sha256:{:064x}", nanos.as_nanos()));
            s["ready"] = json!(true);
            s["started"] = json!(true);
            s["state"] = json!({"running": {"startedAt": "2026-01-01T00:00:00Z"}});
            changed += 1;
        }
    }
    if changed == 0 {
        return Ok(0);
    }
    let all_ready = if statuses.iter().all(|s| s["ready"] == true) { "True" } else { "False" };
    let mut conditions = p["status"]["conditions"].as_array().cloned().unwrap_or_default();
    for c in &mut conditions {
        if c["type"] == "Ready" || c["type"] == "ContainersReady" {
            c["status"] = json!(all_ready);
        }
    }
    let patch = json!([
        {"op": "replace", "path": "/status/containerStatuses", "value": statuses},
        {"op": "replace", "path": "/status/conditions", "value": conditions},
    ]);
    kubectl(&["patch", "pod", "-n", ns, pod, "--subresource=status", "--type=json", "-p", &patch.to_string()])
        .map_err(anyhow::Error::msg)?;
    Ok(changed)
}
