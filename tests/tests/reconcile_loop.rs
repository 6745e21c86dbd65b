//! The host's reconcile loop against the real control plane, through the probe test
//! plugin (tests/plugins/probe).

use anyhow::{Result, anyhow, bail};
use std::time::Duration;
use wasmop_e2e::*;

fn probe_cm(ns: &str, name: &str, mode: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: {ns}, labels: {{probe: \"true\"}}}}\ndata: {{mode: {mode}, value: \"{value}\"}}\n"
    )
}

fn sa_annotation(ns: &str, name: &str, key: &str) -> Result<String> {
    let sa = get_json(&["serviceaccount", name, "-n", ns]).ok_or_else(|| anyhow!("{name} not found"))?;
    sa["metadata"]["annotations"][key].as_str().map(str::to_owned).ok_or_else(|| anyhow!("no annotation {key}"))
}

/// Times (in seconds since the host started logging) of `probe reconcile` lines for `name`.
fn reconcile_times(log: &str, name: &str, mode: &str) -> Vec<f64> {
    log.lines()
        .filter(|l| {
            l.contains("probe reconcile") && l.contains(&format!("name={name} ")) && l.contains(&format!("mode={mode}"))
        })
        .filter_map(|l| {
            let ts = l.split_whitespace().next()?;
            let t = ts.get(11..)?.trim_end_matches('Z');
            let mut parts = t.split(':');
            let (h, m, s): (f64, f64, f64) =
                (parts.next()?.parse().ok()?, parts.next()?.parse().ok()?, parts.next()?.parse().ok()?);
            Some(h * 3600.0 + m * 60.0 + s)
        })
        .collect()
}

#[test]
#[ignore = "needs the local control plane (make e2e)"]
fn create_update_of_owned_and_delete() -> Result<()> {
    let ns = Namespace::new("loop");
    let _host = Host::start(&[("probe", &plugin_path("probe.wasm"), &format!("namespace: {}", ns.0))], &[])?;
    apply(&probe_cm(&ns.0, "a", "normal", "1")).map_err(|e| anyhow!(e))?;
    eventually("the owned ServiceAccount is created", Duration::from_secs(30), || {
        if sa_annotation(&ns.0, "a-probe", "probe/value")? == "1" { Ok(()) } else { bail!("wrong value") }
    })?;
    let sa = get_json(&["serviceaccount", "a-probe", "-n", &ns.0]).unwrap();
    let cm = get_json(&["configmap", "a", "-n", &ns.0]).unwrap();
    assert_eq!(sa["metadata"]["ownerReferences"][0]["uid"], cm["metadata"]["uid"]);

    // A change to the owned object reconciles its owner, which puts it back.
    kubectl(&["-n", &ns.0, "annotate", "serviceaccount", "a-probe", "probe/value=hacked", "--overwrite"])
        .map_err(|e| anyhow!(e))?;
    eventually("the owned object is restored", Duration::from_secs(30), || {
        let v = sa_annotation(&ns.0, "a-probe", "probe/value")?;
        if v == "1" { Ok(()) } else { bail!("still {v}") }
    })?;

    // An update of the primary is reconciled.
    apply(&probe_cm(&ns.0, "a", "normal", "2")).map_err(|e| anyhow!(e))?;
    eventually("the update reaches the owned object", Duration::from_secs(30), || {
        if sa_annotation(&ns.0, "a-probe", "probe/value")? == "2" { Ok(()) } else { bail!("not yet") }
    })?;

    // Delete: the plugin is told the object is gone; the apiserver's GC removes the child.
    kubectl(&["-n", &ns.0, "delete", "configmap", "a"]).map_err(|e| anyhow!(e))?;
    eventually("the plugin saw the delete", Duration::from_secs(30), || {
        if reconcile_times(&_host.logs(), "a", "gone").is_empty() { bail!("no gone reconcile yet") } else { Ok(()) }
    })?;
    eventually("the owned ServiceAccount is garbage-collected", Duration::from_secs(60), || {
        if get_json(&["serviceaccount", "a-probe", "-n", &ns.0]).is_some() { bail!("still there") } else { Ok(()) }
    })?;
    Ok(())
}

#[test]
#[ignore = "needs the local control plane (make e2e)"]
fn requeue_after_is_honoured_and_errors_back_off() -> Result<()> {
    let ns = Namespace::new("requeue");
    // A minimum below the plugin's 500 ms, so its own requeue-after is what is measured.
    let host = Host::start(
        &[("probe", &plugin_path("probe.wasm"), &format!("namespace: {}", ns.0))],
        &["--min-requeue-ms", "100"],
    )?;
    apply(&probe_cm(&ns.0, "r", "requeue", "1")).map_err(|e| anyhow!(e))?;
    apply(&probe_cm(&ns.0, "f", "fail", "1")).map_err(|e| anyhow!(e))?;
    // Requeue every 500 ms with no change in between: at least 6 reconciles in ~4 s.
    let times = eventually("requeued reconciles", Duration::from_secs(30), || {
        let t = reconcile_times(&host.logs(), "r", "requeue");
        if t.len() >= 6 { Ok(t) } else { bail!("{} reconciles so far", t.len()) }
    })?;
    let gaps: Vec<f64> = times.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps.iter().skip(1).all(|g| *g >= 0.4), "requeue-after 500ms respected: {gaps:?}");

    // Failing reconciles are retried with growing delays (200ms, 400ms, 800ms, ...).
    let times = eventually("retries of the failing object", Duration::from_secs(30), || {
        let t = reconcile_times(&host.logs(), "f", "fail");
        if t.len() >= 5 { Ok(t) } else { bail!("{} attempts so far", t.len()) }
    })?;
    let gaps: Vec<f64> = times.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps.windows(2).skip(1).all(|w| w[1] > w[0]), "delays grow: {gaps:?}");
    assert!(gaps[3] >= 1.0, "fourth delay is around 1.6s: {gaps:?}");
    assert!(host.logs().contains("reconcile failed"), "the failure is logged");
    let events =
        kubectl(&["-n", &ns.0, "get", "events", "--field-selector", "reason=ReconcileFailed", "-o", "name"]).unwrap();
    assert!(!events.trim().is_empty(), "a Warning Event is recorded on the failing object");
    Ok(())
}

#[test]
#[ignore = "needs the local control plane (make e2e)"]
fn a_conflict_is_retried_without_a_warning_event() -> Result<()> {
    let ns = Namespace::new("conflict");
    let host = Host::start(&[("probe", &plugin_path("probe.wasm"), &format!("namespace: {}", ns.0))], &[])?;
    apply(&probe_cm(&ns.0, "c", "conflict", "1")).map_err(|e| anyhow!(e))?;
    eventually("retries after the apiserver's conflict", Duration::from_secs(30), || {
        let t = reconcile_times(&host.logs(), "c", "conflict");
        if t.len() >= 3 { Ok(()) } else { bail!("{} attempts so far", t.len()) }
    })?;
    let logs = host.logs();
    assert!(logs.contains("reconcile hit a conflict, retrying"), "the retry is logged");
    assert!(!logs.contains("reconcile failed"), "a conflict is not logged as a failure");
    let events =
        kubectl(&["-n", &ns.0, "get", "events", "--field-selector", "reason=ReconcileFailed", "-o", "name"]).unwrap();
    assert!(events.trim().is_empty(), "no Warning Event for a routine conflict: {events}");
    Ok(())
}

#[test]
#[ignore = "needs the local control plane (make e2e)"]
fn undeclared_call_is_forbidden_and_writes_nothing() -> Result<()> {
    let ns = Namespace::new("forbid");
    let host = Host::start(&[("probe", &plugin_path("probe.wasm"), &format!("namespace: {}", ns.0))], &[])?;
    apply(&probe_cm(&ns.0, "x", "forbidden", "1")).map_err(|e| anyhow!(e))?;
    eventually("the plugin recorded the answer", Duration::from_secs(30), || {
        let v = sa_annotation(&ns.0, "x-probe", "probe/forbidden")?;
        if v == "forbidden" { Ok(()) } else { bail!("answer was {v}") }
    })?;
    assert!(get_json(&["secret", "x-stolen", "-n", &ns.0]).is_none(), "no Secret was written");
    assert!(host.logs().contains("denied"), "the denial is logged");
    Ok(())
}

#[test]
#[ignore = "needs the local control plane (make e2e)"]
fn cargo_component_build_loads_too() -> Result<()> {
    let ns = Namespace::new("component");
    let _host = Host::start(&[("probe", &plugin_path("component/probe.wasm"), &format!("namespace: {}", ns.0))], &[])?;
    apply(&probe_cm(&ns.0, "c", "normal", "7")).map_err(|e| anyhow!(e))?;
    eventually("the wasip1+adapter build reconciles", Duration::from_secs(30), || {
        if sa_annotation(&ns.0, "c-probe", "probe/value")? == "7" { Ok(()) } else { bail!("not yet") }
    })?;
    Ok(())
}

#[test]
#[ignore = "needs the local control plane (make e2e)"]
fn requeue_after_zero_waits_the_minimum_and_the_host_stays_healthy() -> Result<()> {
    let ns = Namespace::new("requeue0");
    let host = Host::start(&[("probe", &plugin_path("probe.wasm"), &format!("namespace: {}", ns.0))], &[])?;
    apply(&probe_cm(&ns.0, "z", "requeue0", "1")).map_err(|e| anyhow!(e))?;
    // Asked to requeue at once, every time: requeued after the minimum (1 s) instead.
    let times = eventually("requeued reconciles", Duration::from_secs(30), || {
        let t = reconcile_times(&host.logs(), "z", "requeue0");
        if t.len() >= 5 { Ok(t) } else { bail!("{} reconciles so far", t.len()) }
    })?;
    // The first gap may be the create of its ServiceAccount coming back as a watch event.
    let gaps: Vec<f64> = times.windows(2).map(|w| w[1] - w[0]).skip(1).collect();
    assert!(gaps.iter().all(|g| *g >= 0.9), "at most one reconcile a second: {gaps:?}");
    let span = times.last().unwrap() - times[0];
    assert!(times.len() as f64 <= span + 2.0, "{} reconciles in {span:.1}s", times.len());
    assert!(host.logs().contains("requeue-after below the minimum"), "the clamp is logged");
    assert_eq!(host.http_get("/healthz")?, (200, "ok".into()));
    Ok(())
}
