//! What a Memcached operator (the Rust plugin or the JavaScript one) must bring about,
//! read the way a user reads it.

use crate::{eventually, get_json};
use anyhow::{Result, anyhow, bail};
use serde_json::Value;
use std::time::Duration;

/// The running, not deleted Pods of Memcached `name`, sorted.
pub fn running_pods(ns: &str, name: &str) -> Vec<String> {
    let pods = get_json(&["pods", "-n", ns, "-l", &format!("app.kubernetes.io/instance={name}")]).unwrap_or_default();
    let mut names: Vec<String> = pods["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["status"]["phase"] == "Running" && p["metadata"]["deletionTimestamp"].is_null())
        .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_owned))
        .collect();
    names.sort();
    names
}

/// Waits until the Deployment has `size` replicas, `size` Pods run, and status.nodes
/// names exactly them, with Available=True for `size/size Pods ready`.
pub fn converged(ns: &str, name: &str, size: usize) -> Result<Value> {
    eventually(&format!("{name} converged at {size}"), Duration::from_secs(60), || {
        let d = get_json(&["deployment", name, "-n", ns]).ok_or_else(|| anyhow!("no deployment"))?;
        if d["spec"]["replicas"] != size {
            bail!("deployment replicas {}", d["spec"]["replicas"]);
        }
        let pods = running_pods(ns, name);
        let mc = get_json(&["memcached", name, "-n", ns]).ok_or_else(|| anyhow!("no memcached"))?;
        let nodes: Vec<String> = serde_json::from_value(mc["status"]["nodes"].clone()).unwrap_or_default();
        let available = mc["status"]["conditions"].as_array().into_iter().flatten().any(|c| {
            c["type"] == "Available" && c["status"] == "True" && c["message"] == format!("{size}/{size} Pods ready")
        });
        if pods.len() == size && nodes == pods && available {
            Ok(d)
        } else {
            bail!("pods {pods:?}, status.nodes {nodes:?}, available {available}")
        }
    })
}

/// Sets the Memcached's `spec.image` and waits until its Deployment runs that image.
pub fn follows_the_image(ns: &str, name: &str, image: &str) -> Result<()> {
    let patch = serde_json::json!({"spec": {"image": image}}).to_string();
    super::kubectl(&["-n", ns, "patch", "memcached", name, "--type=merge", "-p", &patch]).map_err(|e| anyhow!(e))?;
    eventually("the Deployment follows the image", Duration::from_secs(60), || {
        let d = get_json(&["deployment", name, "-n", ns]).ok_or_else(|| anyhow!("no deployment"))?;
        let img = &d["spec"]["template"]["spec"]["containers"][0]["image"];
        if img == image { Ok(()) } else { bail!("image {img}") }
    })
}

/// Deletes the Memcached and waits for it to go: the finalizer records a `Deleting`
/// Event, and the Deployment is garbage-collected.
pub fn deleted_with_its_deployment(ns: &str, name: &str) -> Result<()> {
    super::kubectl(&["-n", ns, "delete", "memcached", name, "--wait=true", "--timeout=60s"]).map_err(|e| anyhow!(e))?;
    let events = super::kubectl(&["-n", ns, "get", "events", "--field-selector", "reason=Deleting", "-o", "name"])
        .map_err(|e| anyhow!(e))?;
    if events.trim().is_empty() {
        bail!("the finalizer recorded no Deleting Event");
    }
    eventually("the Deployment is garbage-collected", Duration::from_secs(60), || {
        if get_json(&["deployment", name, "-n", ns]).is_some() { bail!("still there") } else { Ok(()) }
    })
}
