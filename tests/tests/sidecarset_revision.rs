//! SidecarSet revision history end to end, as Kruise's e2e spec "sidecarSet inject pod
//! sidecar during canary upgrades" (`test/e2e/apps/v1alpha1/sidecarset.go`) uses it:
//! the versions are ControllerRevisions the set controls, a canary rollout pins the
//! stable Deployment's new Pods to the earlier version (`injectionStrategy.revision`,
//! policy Partial) while the canary's get the new one, a revision forged outside the
//! revision namespace is never injected, and the garbage collector removes the
//! revisions with the set.

use anyhow::{Result, anyhow, bail};
use serde_json::{Value, json};
use std::time::Duration;
use wasmop_e2e::sidecarset::*;
use wasmop_e2e::*;

const CUSTOM_VERSION: &str = "apps.kruise.io/sidecarset-custom-version";

/// The set's ControllerRevisions in `ns`, oldest first: (name, revision, owner uid).
fn revisions(ns: &str, set: &str) -> Vec<(String, i64, String)> {
    let list = get_json(&["controllerrevisions", "-n", ns, "-l", &format!("kruise.io/sidecarset-name={set}")])
        .unwrap_or_default();
    let mut out: Vec<(String, i64, String)> = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            let owner = r["metadata"]["ownerReferences"][0]["uid"].as_str().unwrap_or("").to_owned();
            (r["metadata"]["name"].as_str().unwrap_or("").to_owned(), r["revision"].as_i64().unwrap_or(0), owner)
        })
        .collect();
    out.sort_by_key(|r| r.1);
    out
}

/// The sidecar image of each running Pod labelled `version=<version>`.
fn images(ns: &str, version: &str) -> Vec<String> {
    let pods = get_json(&["pods", "-n", ns, "-l", &format!("version={version}")]).unwrap_or_default();
    pods["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .map(|p| p["spec"]["containers"][0]["image"].as_str().unwrap_or("").to_owned())
        .collect()
}

fn deployment(ns: &str, version: &str, replicas: u32) -> String {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": version, "namespace": ns},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web", "version": version}},
                 "template": {"metadata": {"labels": {"app": "web", "version": version}},
                              "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}}}})
    .to_string()
}

fn set(name: &str, version: &str, spec: Value) -> String {
    let mut s: Value = serde_json::from_str(&sidecarset(name, spec)).unwrap();
    s["metadata"]["labels"] = json!({CUSTOM_VERSION: version});
    s.to_string()
}

#[test]
#[ignore = "needs the local control plane (make e2e)"]
fn a_canary_rollout_pins_the_stable_pods_to_the_earlier_revision() -> Result<()> {
    let _lock = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let ns = Namespace::new("ss-rev");
    // The revisions go to the test's namespace rather than kruise-system.
    let (_h, _configs) = host_with("wasmop-e2e-rev", &[&ns.0], &format!("revisionNamespace: {}\n", ns.0))?;
    let name = format!("web-{}", ns.0);
    let _cleanup = Cleanup(vec![name.clone()]);
    let stable = |image: &str| {
        json!({"namespace": ns.0, "selector": {"matchLabels": {"app": "web"}},
               "containers": [{"name": "proxy", "image": image}]})
    };
    apply(&set(&name, "0", stable("nginx:1.20.1"))).map_err(|e| anyhow!(e))?;
    let first = eventually("revision 1, named by the status", Duration::from_secs(30), || {
        let revs = revisions(&ns.0, &name);
        let latest = status(&name)["latestRevision"].as_str().unwrap_or("").to_owned();
        match &revs[..] {
            [(n, 1, _)] if *n == latest => Ok(n.clone()),
            _ => bail!("revisions {revs:?}, status names {latest:?}"),
        }
    })?;
    let uid = get_json(&["sidecarset", &name]).unwrap()["metadata"]["uid"].as_str().unwrap().to_owned();
    assert_eq!(revisions(&ns.0, &name)[0].2, uid, "the set controls its revision");

    apply(&deployment(&ns.0, "stable", 1)).map_err(|e| anyhow!(e))?;
    apply(&deployment(&ns.0, "canary", 1)).map_err(|e| anyhow!(e))?;
    eventually("both Deployments' Pods carry the first version", Duration::from_secs(60), || {
        let (s, c) = (images(&ns.0, "stable"), images(&ns.0, "canary"));
        if s == ["nginx:1.20.1"] && c == ["nginx:1.20.1"] { Ok(()) } else { bail!("stable {s:?}, canary {c:?}") }
    })?;

    // The canary version: a new image and env (so no in-place update), rolled out to
    // the canary Pods only; new stable Pods stay on custom version 0.
    let mut canary = stable("nginx:1.21.1");
    canary["containers"][0]["env"] = json!([{"name": "SOME_ENV", "value": "SOME_VAL"}]);
    canary["updateStrategy"] = json!({"selector": {"matchLabels": {"version": "canary"}}});
    canary["injectionStrategy"] = json!({"revision": {"customVersion": "0", "policy": "Partial"}});
    apply(&set(&name, "1", canary)).map_err(|e| anyhow!(e))?;
    let second = eventually("revision 2", Duration::from_secs(30), || match &revisions(&ns.0, &name)[..] {
        [(a, 1, _), (b, 2, _)] if *a == first && status(&name)["latestRevision"] == b.as_str() => Ok(b.clone()),
        other => bail!("{other:?}"),
    })?;
    // A forged revision outside the revision namespace, labelled for the set with the
    // pinned custom version and a higher number, is never injected.
    let elsewhere = Namespace::new("ss-rev-forged");
    let forged = json!({"apiVersion": "apps/v1", "kind": "ControllerRevision",
        "metadata": {"name": "forged", "namespace": elsewhere.0,
                     "labels": {"kruise.io/sidecarset-name": name, CUSTOM_VERSION: "0"}},
        "revision": 99,
        "data": {"spec": {"$patch": "replace", "containers": [{"name": "proxy", "image": "evil:1"}]}}});
    apply(&forged.to_string()).map_err(|e| anyhow!(e))?;
    apply(&deployment(&ns.0, "stable", 2)).map_err(|e| anyhow!(e))?;
    apply(&deployment(&ns.0, "canary", 2)).map_err(|e| anyhow!(e))?;
    eventually("new stable Pods pinned, new canary Pods on the latest", Duration::from_secs(60), || {
        let (mut s, mut c) = (images(&ns.0, "stable"), images(&ns.0, "canary"));
        s.sort();
        c.sort();
        if s == ["nginx:1.20.1", "nginx:1.20.1"] && c == ["nginx:1.20.1", "nginx:1.21.1"] {
            Ok(())
        } else {
            bail!("stable {s:?}, canary {c:?}")
        }
    })?;
    // Each Pod names the revision it was given.
    let pods = get_json(&["pods", "-n", &ns.0, "-l", "app=web"]).unwrap();
    for p in pods["items"].as_array().unwrap() {
        let hash: Value =
            serde_json::from_str(p["metadata"]["annotations"]["kruise.io/sidecarset-hash"].as_str().unwrap())?;
        let want = if p["spec"]["containers"][0]["image"] == "nginx:1.21.1" { &second } else { &first };
        assert_eq!(hash[&name]["controllerRevision"], want.as_str(), "{}", p["metadata"]["name"]);
    }

    // A revision that does not exist cannot be pinned.
    let mut bad = stable("nginx:1.21.1");
    bad["injectionStrategy"] = json!({"revision": {"revisionName": "no-such-revision"}});
    let e = apply(&set(&name, "1", bad)).expect_err("a missing revision is refused");
    assert!(e.contains("spec.injectionStrategy.revision") && e.contains("not found"), "{e}");

    // Nor can another set pin this set's version (it would inject what that set was
    // never admitted with).
    let mut thief = stable("nginx:1.21.1");
    thief["selector"] = json!({"matchLabels": {"app": "thief"}});
    thief["injectionStrategy"] = json!({"revision": {"revisionName": first}});
    let e = kubectl_stdin(&["create", "--dry-run=server", "-f", "-"], Some(&set(&format!("{name}-thief"), "0", thief)))
        .expect_err("another set's revision is refused");
    assert!(e.contains(&format!("is not a revision of SidecarSet {name}-thief")), "{e}");

    // The garbage collector removes the revisions with the set.
    kubectl(&["delete", "sidecarset", &name, "--wait=true"]).map_err(|e| anyhow!(e))?;
    eventually("the revisions are collected", Duration::from_secs(60), || {
        let left = revisions(&ns.0, &name);
        if left.is_empty() { Ok(()) } else { bail!("{left:?}") }
    })?;
    Ok(())
}
