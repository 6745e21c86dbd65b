//! The controller: status counts, in-place rolling updates and what a Pod change
//! reconciles.

use anyhow::{Result, bail};
use serde_json::{Value, json};
use std::time::Duration;
use wasmop_e2e::sidecarset::*;
use wasmop_e2e::*;

#[test]
#[ignore = "needs the local control plane (make e2e)"]
fn rolling_update_in_place_respects_max_unavailable_and_partition() -> Result<()> {
    let _lock = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let ns = Namespace::new("ss-roll");
    let (_h, _configs) = host("wasmop-e2e-roll", &[&ns.0])?;
    let name = format!("proxy-{}", ns.0);
    let _cleanup = Cleanup(vec![name.clone()]);
    let spec = |image: &str| {
        json!({"namespace": ns.0, "selector": {"matchLabels": {"app": "api"}},
               "updateStrategy": {"partition": 1, "maxUnavailable": 1},
               "containers": [{"name": "proxy", "image": image}]})
    };
    apply(&sidecarset(&name, spec("envoy:1.30"))).map_err(anyhow::Error::msg)?;
    for i in 0..4 {
        apply(&pod(&ns.0, &format!("api-{i}"), "api")).map_err(anyhow::Error::msg)?;
    }
    expect_status(&name, 4, 4)?;

    apply(&sidecarset(&name, spec("envoy:1.31"))).map_err(anyhow::Error::msg)?;
    let mut worst = 0;
    let done = eventually("three Pods on envoy:1.31", Duration::from_secs(90), || {
        let pods = sidecar_images(&ns.0);
        let restarting: Vec<&(String, String, String)> = pods.iter().filter(|(_, s, r)| s != r).collect();
        worst = worst.max(restarting.len());
        for (p, image, _) in &restarting {
            restart_container(&ns.0, p, image)?;
        }
        let new = pods.iter().filter(|(_, s, r)| s == "envoy:1.31" && r == "envoy:1.31").count();
        if new == 3 { Ok(pods) } else { bail!("{pods:?}") }
    })?;
    assert!(worst == 1, "exactly one Pod restarting at a time (maxUnavailable 1), saw at most {worst}");
    // The partition holds one Pod back, for good.
    std::thread::sleep(Duration::from_secs(3));
    let pods = sidecar_images(&ns.0);
    assert_eq!(pods.iter().filter(|(_, s, _)| s == "envoy:1.30").count(), 1, "partition 1: {pods:?} (was {done:?})");
    let s = status(&name);
    assert_eq!((s["matchedPods"].as_i64(), s["updatedPods"].as_i64()), (Some(4), Some(3)), "{s}");
    // Kruise's Pod condition, written through pods/status as the plugin's own identity:
    // each updated Pod says this set can still update it in place; the held-back one
    // has none.
    let pods = get_json(&["pods", "-n", &ns.0]).unwrap();
    let mut marked: Vec<(String, String)> = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| {
            let c = p["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == "SidecarSetUpgradable")?;
            Some((c["status"].as_str()?.to_owned(), c["message"].as_str()?.to_owned()))
        })
        .collect();
    marked.dedup();
    assert_eq!(marked, [("True".to_owned(), format!("{{\"{name}\":true}}"))], "{pods}");
    let count = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["status"]["conditions"].to_string().contains("SidecarSetUpgradable"))
        .count();
    assert_eq!(count, 3, "the three updated Pods carry it");
    Ok(())
}

/// Issue 26: a Pod's change reconciles the SidecarSets whose selector matches the Pod
/// before or after the change, and no other (Kruise's handler does the same; with
/// `all-primaries` every Pod event reconciled every SidecarSet).
#[test]
#[ignore = "needs the local control plane (make e2e)"]
fn a_pod_change_reconciles_only_the_sidecarsets_that_select_it() -> Result<()> {
    let _lock = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let ns = Namespace::new("ss-sel");
    let (h, _configs) = host("wasmop-e2e-ss-sel", &[&ns.0])?;
    let set = |app: &str| format!("sel-{app}-{}", ns.0);
    let apps = ["web", "db", "a", "b", "c", "d"];
    let _cleanup = Cleanup(apps.iter().map(|a| set(a)).collect());
    for app in apps {
        let spec = json!({"namespace": ns.0, "selector": {"matchLabels": {"app": app}},
                          "containers": [{"name": format!("side-{app}"), "image": "busybox:1.36"}]});
        apply(&sidecarset(&set(app), spec)).map_err(anyhow::Error::msg)?;
    }
    for app in apps {
        expect_status(&set(app), 0, 0)?;
    }
    // Reconciles of `app`'s set logged after line `from` of the host's log.
    let reconciled = |app: &str, from: usize| {
        let n = format!("SidecarSet {} ", set(app));
        h.logs().lines().skip(from).filter(|l| l.contains("reconciled plugin=sidecarset") && l.contains(&n)).count()
    };
    // Each set's own writes (status, revision) reconcile it again; wait until those
    // chains end (no reconcile logged for 3 s) so that only the Pods' changes count.
    let reconciles = || h.logs().lines().filter(|l| l.contains("reconciled plugin=sidecarset")).count();
    let mut seen = (reconciles(), std::time::Instant::now());
    eventually("the sets' own reconciles settle", Duration::from_secs(60), || {
        let now = reconciles();
        if now != seen.0 {
            seen = (now, std::time::Instant::now());
        }
        if seen.1.elapsed() >= Duration::from_secs(3) { Ok(()) } else { bail!("{now} reconciles so far") }
    })?;
    let created = h.logs().lines().count();
    apply(&pod(&ns.0, "p1", "web")).map_err(anyhow::Error::msg)?;
    apply(&pod(&ns.0, "p2", "web")).map_err(anyhow::Error::msg)?;
    expect_status(&set("web"), 2, 2)?;
    // Relabelled out of web's selection into db's: news to both (db's set counts only
    // Pods it injected, as Kruise's does, so its reconcile shows in the log, not in its
    // status).
    let relabelled = h.logs().lines().count();
    kubectl(&["label", "pod", "-n", &ns.0, "p2", "app=db", "--overwrite"]).map_err(anyhow::Error::msg)?;
    eventually("p2 no longer counted by web's set, and db's reconciled", Duration::from_secs(60), || {
        let web = status(&set("web"));
        if web["matchedPods"] == 1 && reconciled("db", relabelled) >= 1 { Ok(()) } else { bail!("web {web}") }
    })?;
    for app in ["a", "b", "c", "d"] {
        let n = reconciled(app, created);
        assert_eq!(n, 0, "{} selects none of the Pods, yet their changes reconciled it {n} times", set(app));
    }
    Ok(())
}

/// Issue 19, Kruise's rollout counting and order (`calculateUpgradeCount` and
/// `SortNextUpgradePods`, e2e "sidecarSet upgrade cold sidecar container image, and
/// maxUnavailable"): `maxUnavailable: 0` updates no Ready Pod at all; with 1, the Pod
/// that `priorityStrategy` weighs highest goes first, though its name sorts last.
#[test]
#[ignore = "needs the local control plane (make e2e)"]
fn max_unavailable_zero_holds_and_priority_picks_the_first_pod() -> Result<()> {
    let _lock = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let ns = Namespace::new("ss-order");
    let (_h, _configs) = host("wasmop-e2e-order", &[&ns.0])?;
    let name = format!("proxy-{}", ns.0);
    let _cleanup = Cleanup(vec![name.clone()]);
    let spec = |image: &str, max_unavailable: u32| {
        json!({"namespace": ns.0, "selector": {"matchLabels": {"app": "api"}},
               "updateStrategy": {"maxUnavailable": max_unavailable, "priorityStrategy": {"weightPriority": [
                   {"weight": 100, "matchSelector": {"matchLabels": {"tier": "gold"}}}]}},
               "containers": [{"name": "proxy", "image": image}]})
    };
    apply(&sidecarset(&name, spec("envoy:1.30", 0))).map_err(anyhow::Error::msg)?;
    for i in 0..3 {
        let mut p: Value = serde_json::from_str(&pod(&ns.0, &format!("api-{i}"), "api"))?;
        if i == 2 {
            p["metadata"]["labels"]["tier"] = json!("gold");
        }
        apply(&p.to_string()).map_err(anyhow::Error::msg)?;
    }
    expect_status(&name, 3, 3)?;

    let on = |image: &str| -> Vec<String> {
        let pods = sidecar_images(&ns.0);
        pods.into_iter().filter(|(_, s, _)| s == image).map(|(p, _, _)| p).collect()
    };
    apply(&sidecarset(&name, spec("envoy:1.31", 0))).map_err(anyhow::Error::msg)?;
    eventually("the new version observed", Duration::from_secs(30), || {
        let s = get_json(&["sidecarset", &name]).unwrap_or_default();
        let observed = s["status"]["observedGeneration"] == s["metadata"]["generation"];
        if observed && s["status"]["updatedPods"] == 0 { Ok(()) } else { bail!("{}", s["status"]) }
    })?;
    // Nothing to wait for but time: a reconcile that would update a Pod has run by now.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(on("envoy:1.31"), Vec::<String>::new(), "maxUnavailable 0: no Ready Pod is taken down");

    apply(&sidecarset(&name, spec("envoy:1.31", 1))).map_err(anyhow::Error::msg)?;
    let first = eventually("one Pod updated", Duration::from_secs(30), || match &on("envoy:1.31")[..] {
        [] => bail!("none yet"),
        pods => Ok(pods.to_vec()),
    })?;
    assert_eq!(first, ["api-2"], "the gold Pod first");
    eventually("every Pod on envoy:1.31", Duration::from_secs(90), || {
        for (p, image, running) in sidecar_images(&ns.0) {
            if image != running {
                restart_container(&ns.0, &p, &image)?;
            }
        }
        let s = status(&name);
        if s["updatedPods"] == 3 && s["updatedReadyPods"] == 3 { Ok(()) } else { bail!("{s}") }
    })?;
    Ok(())
}

/// Kruise's e2e spec "inject pod sidecar with canary sidecarSet": a NotUpdate set's
/// ready counts are taken as Pods come, not when they become ready (Kruise's Pod event
/// handler skips NotUpdate sets on Pod updates). The Pods here wait unscheduled until
/// the test reports them ready, as a kubelet would after pulling images (kwok's own
/// Pods are ready before the set is counted).
#[test]
#[ignore = "needs the local control plane (make e2e)"]
fn a_not_update_set_counts_pods_as_they_come_not_as_they_become_ready() -> Result<()> {
    let _lock = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let ns = Namespace::new("ss-notupd");
    let (_h, _configs) = host("wasmop-e2e-notupd", &[&ns.0])?;
    let name = format!("canary-{}", ns.0);
    let _cleanup = Cleanup(vec![name.clone()]);
    let spec = json!({"namespace": ns.0, "selector": {"matchLabels": {"app": "api"}},
                      "updateStrategy": {"type": "NotUpdate"}, "containers": [{"name": "proxy", "image": "envoy:1.31"}]});
    apply(&sidecarset(&name, spec)).map_err(anyhow::Error::msg)?;
    for i in 0..2 {
        let mut p: Value = serde_json::from_str(&pod(&ns.0, &format!("api-{i}"), "api"))?;
        p["spec"]["nodeSelector"] = json!({"wasmop-e2e/no-such-node": "true"});
        apply(&p.to_string()).map_err(anyhow::Error::msg)?;
    }
    let counts = || {
        let s = status(&name);
        ["matchedPods", "updatedPods", "readyPods", "updatedReadyPods"].map(|k| s[k].as_i64().unwrap_or(-1))
    };
    eventually("both Pods counted", Duration::from_secs(30), || match counts() {
        [2, 2, 0, 0] => Ok(()),
        c => bail!("{c:?}"),
    })?;
    for i in 0..2 {
        let ready = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "proxy", "image": "envoy:1.31", "imageID": "docker.io/envoy@sha256:1", "ready": true,
                                   "restartCount": 0, "state": {"running": {}}},
                                  {"name": "app", "image": "nginx:1.27", "imageID": "docker.io/nginx@sha256:2", "ready": true,
                                   "restartCount": 0, "state": {"running": {}}}]}});
        let patch = ready.to_string();
        kubectl(&[
            "patch",
            "pod",
            "-n",
            &ns.0,
            &format!("api-{i}"),
            "--subresource=status",
            "--type=merge",
            "-p",
            &patch,
        ])
        .map_err(anyhow::Error::msg)?;
    }
    // The Pods' updates reconcile the set (its selector matches them); a count of
    // readiness would show within a reconcile.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(counts(), [2, 2, 0, 0], "readiness alone does not recount a NotUpdate set");
    // A Pod going away recounts, readiness included.
    kubectl(&["delete", "pod", "-n", &ns.0, "api-1", "--grace-period=0", "--force"]).map_err(anyhow::Error::msg)?;
    eventually("recounted", Duration::from_secs(30), || match counts() {
        [1, 1, 1, 1] => Ok(()),
        c => bail!("{c:?}"),
    })?;
    Ok(())
}
