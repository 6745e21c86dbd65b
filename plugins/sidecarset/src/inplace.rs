//! Whether a Pod's sidecars have finished an in-place image update, told as Kruise
//! tells it (`IsPodStateConsistent`, `UpdatePodAnnotationsInUpgrade`).
//!
//! Why not compare `spec.containers[].image` with `status.containerStatuses[].image`:
//! container runtimes report their own name for an image (`busybox:1.37` runs as
//! `docker.io/library/busybox:1.37`), so such a Pod would look mid-update forever and
//! stall the rollout under maxUnavailable. Instead, before each update the controller
//! records the running `imageID` of every sidecar the update changes, in the Pod
//! annotation `kruise.io/sidecarset-inplace-update-state` (Kruise's format, so either
//! controller reads what the other wrote); the update is done once that imageID
//! changed, or once the status shows the spec's very image. A sidecar pinned by digest
//! is done when the running imageID has that digest.

use serde_json::{Map, Value, json};
use std::collections::BTreeSet;

pub const STATE: &str = "kruise.io/sidecarset-inplace-update-state";

fn states(pod: &Value) -> Option<Result<Map<String, Value>, serde_json::Error>> {
    pod["metadata"]["annotations"][STATE].as_str().map(serde_json::from_str)
}

/// The running imageID of each container, without the runtime's `scheme://`.
fn image_ids(pod: &Value) -> Vec<(&str, &str)> {
    let statuses = pod["status"]["containerStatuses"].as_array().into_iter().flatten();
    statuses
        .filter_map(|c| {
            let id = c["imageID"].as_str().unwrap_or("");
            Some((c["name"].as_str()?, id.split_once("://").map_or(id, |(_, rest)| rest)))
        })
        .collect()
}

/// Records in `pod` (before its update) the imageIDs of `changed` for SidecarSet `set`.
pub fn record(pod: &mut Value, set: &str, revision: &str, changed: &[String], now: &Value) {
    let mut all = states(pod).and_then(Result::ok).unwrap_or_default();
    let ids: Vec<(String, String)> = pod["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| Some((c["name"].as_str()?.to_owned(), c["imageID"].as_str().unwrap_or("").to_owned())))
        .collect();
    let entry = all.entry(set.to_owned()).or_insert_with(|| json!({"revision": revision, "updateTimestamp": now}));
    let last = &mut entry["lastContainerStatuses"];
    if !last.is_object() {
        *last = json!({});
    }
    for name in changed {
        let id = ids.iter().find(|(n, _)| n == name).map_or("", |(_, id)| id.as_str());
        last[name] = json!({"imageID": id});
    }
    if !pod["metadata"]["annotations"].is_object() {
        pod["metadata"]["annotations"] = json!({});
    }
    pod["metadata"]["annotations"][STATE] = json!(Value::Object(all).to_string());
}

/// Kruise's `IsPodStateConsistent`: the sidecars `names` of SidecarSet `set` run what
/// the Pod's spec says.
pub fn consistent(pod: &Value, set: &str, names: &BTreeSet<&str>) -> bool {
    let spec: Vec<&Value> = pod["spec"]["containers"].as_array().into_iter().flatten().collect();
    let statuses: Vec<&Value> = pod["status"]["containerStatuses"].as_array().into_iter().flatten().collect();
    if spec.len() != statuses.len() {
        return false;
    }
    let ids = image_ids(pod);
    let sidecars: Vec<&&Value> =
        spec.iter().filter(|c| c["name"].as_str().is_some_and(|n| names.contains(n))).collect();
    fn digest(c: &Value) -> Option<(String, &str)> {
        c["image"].as_str().and_then(|i| i.split_once('@')).map(|(repo, d)| (normalize(repo), d))
    }
    if !sidecars.is_empty() && sidecars.iter().all(|c| digest(c).is_some()) {
        return sidecars.iter().all(|c| {
            let Some((repo, d)) = digest(c) else { return false };
            let id = ids.iter().find(|(n, _)| c["name"] == *n).map(|(_, id)| *id);
            id.and_then(|id| id.split_once('@')).is_some_and(|(r, x)| normalize(r) == repo && x == d)
        });
    }
    // Every sidecar reports its spec's very image: done, whatever was recorded (the
    // common case, decided without parsing the annotation; a reconcile asks this of
    // every matched Pod).
    let reports_spec = |cs: &&Value| {
        cs["name"].as_str().is_none_or(|n| !names.contains(n))
            || spec.iter().any(|c| c["name"] == cs["name"] && c["image"] == cs["image"])
    };
    if statuses.iter().all(reports_spec) {
        return true;
    }
    let last = match states(pod) {
        None => return true,
        Some(Err(_)) => return false,
        Some(Ok(all)) => all.get(set).map(|s| s["lastContainerStatuses"].clone()).unwrap_or(Value::Null),
    };
    statuses.iter().all(|cs| {
        let Some(name) = cs["name"].as_str().filter(|n| names.contains(n)) else { return true };
        let Some(old) = last[name]["imageID"].as_str() else { return true };
        let now = ids.iter().find(|(n, _)| *n == name).map_or("", |(_, id)| *id);
        let old = old.split_once("://").map_or(old, |(_, rest)| rest);
        let spec_image = spec.iter().find(|c| c["name"] == name).map(|c| &c["image"]);
        !(old == now && spec_image != Some(&cs["image"]))
    })
}

/// A repository as the Docker reference grammar normalizes it (`busybox` →
/// `docker.io/library/busybox`), without a tag (`busybox:1.37@sha256:…` is pinned by
/// its digest; a registry's `host:port` stays).
fn normalize(repo: &str) -> String {
    let last = repo.rfind('/').map_or(0, |i| i + 1);
    let repo = match repo[last..].find(':') {
        Some(i) => &repo[..last + i],
        None => repo,
    };
    let first = repo.split('/').next().unwrap_or("");
    let has_domain = repo.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    match (has_domain, repo.contains('/')) {
        (true, _) => repo.to_owned(),
        (false, true) => format!("docker.io/{repo}"),
        (false, false) => format!("docker.io/library/{repo}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(spec_image: &str, status_image: &str, image_id: &str) -> Value {
        json!({"metadata": {"annotations": {}},
               "spec": {"containers": [{"name": "app", "image": "nginx"}, {"name": "log", "image": spec_image}]},
               "status": {"containerStatuses": [
                   {"name": "app", "image": "docker.io/library/nginx:latest", "imageID": "docker-pullable://nginx@sha256:aaa"},
                   {"name": "log", "image": status_image, "imageID": image_id}]}})
    }

    #[test]
    fn an_update_is_done_when_the_image_id_changed_whatever_the_runtime_calls_the_image() {
        let names = BTreeSet::from(["log"]);
        let now = json!("2026-12-03T00:00:00Z");
        // Never updated: done, even though the runtime names the image its own way.
        let mut p = pod("busybox:1.36", "docker.io/library/busybox:1.36", "containerd://sha256:old");
        assert!(consistent(&p, "s", &names));
        // Updated to 1.37: recorded, not done while the old image runs.
        p["spec"]["containers"][1]["image"] = json!("busybox:1.37");
        record(&mut p, "s", "rev", &["log".into()], &now);
        let state: Value = serde_json::from_str(p["metadata"]["annotations"][STATE].as_str().unwrap()).unwrap();
        assert_eq!(state["s"]["lastContainerStatuses"]["log"]["imageID"], "containerd://sha256:old");
        assert!(!consistent(&p, "s", &names));
        // The kubelet restarted it: a new imageID, reported under the runtime's name.
        p["status"]["containerStatuses"][1]["image"] = json!("docker.io/library/busybox:1.37");
        p["status"]["containerStatuses"][1]["imageID"] = json!("containerd://sha256:new");
        assert!(consistent(&p, "s", &names), "the old rule (spec image == status image) stalled here forever");
        // A status missing a container is not consistent.
        p["status"]["containerStatuses"].as_array_mut().unwrap().pop();
        assert!(!consistent(&p, "s", &names));
    }

    #[test]
    fn a_digest_pinned_sidecar_is_done_when_the_running_image_has_that_digest() {
        let names = BTreeSet::from(["log"]);
        let p = pod("busybox@sha256:bbb", "busybox", "docker-pullable://docker.io/library/busybox@sha256:bbb");
        assert!(consistent(&p, "s", &names));
        let p = pod("busybox@sha256:bbb", "busybox", "docker-pullable://busybox@sha256:ccc");
        assert!(!consistent(&p, "s", &names));
        assert_eq!(normalize("quay.io/x/y"), "quay.io/x/y");
        assert_eq!(normalize("x/y"), "docker.io/x/y");
        assert_eq!(normalize("localhost:5000/x:1"), "localhost:5000/x");
        let tagged =
            pod("busybox:1.37@sha256:bbb", "busybox", "docker-pullable://docker.io/library/busybox@sha256:bbb");
        assert!(consistent(&tagged, "s", &names), "a tag beside the digest is not part of the repository");
    }
}
