//! Running several replicas: leader election over a Lease, fail-over on a crash,
//! hand-over on SIGTERM, graceful shutdown during a burst, and readiness.

use anyhow::{Result, bail};
use std::time::{Duration, Instant};
use wasmop_e2e::*;

/// Lease timings short enough for a test, in the production ratios.
const LEASE: &[&str] = &[
    "--leader-elect",
    "--leader-election-lease-duration-seconds",
    "8",
    "--leader-election-renew-deadline-seconds",
    "5",
    "--leader-election-retry-period-seconds",
    "1",
];

fn replica(ns: &str, identity: &str, extra: &[&str]) -> Result<Host> {
    let mut args = LEASE.to_vec();
    args.extend_from_slice(&["--leader-election-namespace", ns, "--leader-election-id", "probe-leader"]);
    args.extend_from_slice(extra);
    Host::start_with_env(
        &[("probe", &plugin_path("probe.wasm"), &format!("namespace: {ns}"))],
        &args,
        &[("POD_NAME", identity)],
    )
}

fn holder(ns: &str) -> String {
    get_json(&["lease", "-n", ns, "probe-leader"])
        .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

fn wait_holder(ns: &str, want: &str, within: Duration) -> Result<Duration> {
    let start = Instant::now();
    eventually(&format!("{want} holds the lease"), within, || {
        let h = holder(ns);
        if h == want { Ok(start.elapsed()) } else { bail!("holder is {h:?}") }
    })
}

fn configmaps(ns: &str, names: std::ops::Range<usize>, value: &str) -> Result<()> {
    let docs: Vec<String> = names
        .map(|i| {
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm-{i}, namespace: {ns}, labels: {{probe: \"true\"}}}}\ndata: {{value: \"{value}\"}}\n"
            )
        })
        .collect();
    apply(&docs.join("---\n")).map_err(anyhow::Error::msg)?;
    Ok(())
}

fn converged(ns: &str, n: usize, value: &str) -> Result<()> {
    eventually(&format!("{n} ServiceAccounts with value {value}"), Duration::from_secs(60), || {
        let sas = get_json(&["serviceaccounts", "-n", ns]).unwrap_or_default();
        let ok = sas["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|s| s["metadata"]["annotations"]["probe/value"] == value)
            .count();
        if ok == n { Ok(()) } else { bail!("{ok} of {n}") }
    })
}

/// No object was inside a reconcile on two hosts at the same time.
fn never_both(logs: &[String]) {
    let mut spans: Vec<(String, String, String, usize)> = Vec::new(); // (name, start, end, host)
    for (h, log) in logs.iter().enumerate() {
        let mut open: std::collections::HashMap<String, String> = Default::default();
        for (ts, start, name) in probe_intervals(log) {
            if start {
                open.insert(name, ts);
            } else if let Some(s) = open.remove(&name) {
                spans.push((name, s, ts, h));
            }
        }
        for (name, s) in open {
            spans.push((name, s, "9999".into(), h));
        }
    }
    for a in &spans {
        for b in &spans {
            if a.0 == b.0 && a.3 != b.3 {
                assert!(a.2 < b.1 || b.2 < a.1, "{} reconciled by two hosts at once: {a:?} {b:?}", a.0);
            }
        }
    }
}

#[test]
#[ignore = "needs the local control plane (make e2e)"]
fn one_leader_fails_over_on_crash_and_hands_over_on_sigterm() -> Result<()> {
    let ns = Namespace::new("leader");
    let mut a = replica(&ns.0, "replica-a", &[])?;
    wait_holder(&ns.0, "replica-a", Duration::from_secs(30))?;
    let mut b = replica(&ns.0, "replica-b", &[])?;
    configmaps(&ns.0, 0..5, "one")?;
    converged(&ns.0, 5, "one")?;
    std::thread::sleep(Duration::from_secs(2));
    assert!(a.logs().contains("probe reconcile"), "the leader reconciles");
    assert!(!b.logs().contains("probe reconcile"), "the standby does not:\n{}", b.logs());

    // Crash of the leader: the standby takes over once the lease expires (8 s).
    a.kill9();
    let took = wait_holder(&ns.0, "replica-b", Duration::from_secs(20))?;
    assert!(took <= Duration::from_secs(8 + 3), "took over in {took:?}, lease is 8 s");
    configmaps(&ns.0, 0..5, "two")?;
    converged(&ns.0, 5, "two")?;

    // SIGTERM of the leader: it releases the lease, so the hand-over does not wait for expiry.
    a.restart()?;
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(holder(&ns.0), "replica-b");
    let code = b.terminate(Duration::from_secs(30))?;
    assert_eq!(code, Some(0), "exit 0 on SIGTERM");
    let took = wait_holder(&ns.0, "replica-a", Duration::from_secs(20))?;
    assert!(took < Duration::from_secs(4), "hand-over took {took:?}: the lease was not released");
    configmaps(&ns.0, 0..5, "three")?;
    converged(&ns.0, 5, "three")?;
    never_both(&[a.logs(), b.logs()]);
    Ok(())
}

#[test]
#[ignore = "needs the local control plane (make e2e)"]
fn sigterm_during_a_burst_exits_zero_and_the_next_leader_converges() -> Result<()> {
    let ns = Namespace::new("burst");
    let grace = ["--shutdown-grace-seconds", "10"];
    let mut a = replica(&ns.0, "burst-a", &grace)?;
    wait_holder(&ns.0, "burst-a", Duration::from_secs(30))?;
    let b = replica(&ns.0, "burst-b", &grace)?;
    configmaps(&ns.0, 0..40, "burst")?;
    eventually("the burst has started", Duration::from_secs(30), || {
        if a.logs().contains("probe reconcile") { Ok(()) } else { bail!("not yet") }
    })?;
    let started = Instant::now();
    let code = a.terminate(Duration::from_secs(15))?;
    assert_eq!(code, Some(0), "exit 0 within the grace period (took {:?})", started.elapsed());
    converged(&ns.0, 40, "burst")?;
    let log = a.logs();
    let ends = probe_intervals(&log);
    let (s, e) = (ends.iter().filter(|x| x.1).count(), ends.iter().filter(|x| !x.1).count());
    assert_eq!(s, e, "every reconcile the old leader began, it finished ({s} begun, {e} done)");
    never_both(&[log, b.logs()]);
    Ok(())
}

#[test]
#[ignore = "needs the local control plane (make e2e)"]
fn readyz_is_false_until_watches_sync() -> Result<()> {
    let ns = Namespace::new("readyz");
    let group = format!("{}.e2e.wasmop.io", ns.0);
    let h = Host::start(
        &[("probe", &plugin_path("probe.wasm"), &format!("namespace: {}\nwatch: {group}/v1/Gadget", ns.0))],
        &[],
    )?;
    let why = eventually("readyz answers", Duration::from_secs(20), || match h.http_get("/readyz")? {
        (503, why) if why.contains("probe") => Ok(why),
        other => bail!("{other:?}"),
    })?;
    assert!(why.contains("watches not synced"), "{why}");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(h.http_get("/readyz")?.0, 503, "still not ready while the watched kind is missing");
    let crd = format!(
        r#"{{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
        "metadata":{{"name":"gadgets.{group}"}},
        "spec":{{"group":"{group}","scope":"Namespaced","names":{{"kind":"Gadget","plural":"gadgets"}},
        "versions":[{{"name":"v1","served":true,"storage":true,"schema":{{"openAPIV3Schema":{{"type":"object"}}}}}}]}}}}"#
    );
    apply(&crd).map_err(anyhow::Error::msg)?;
    let r = eventually("ready after the CRD exists", Duration::from_secs(30), || match h.http_get("/readyz")? {
        (200, body) => Ok(body),
        other => bail!("{other:?}"),
    });
    let _ = kubectl(&["delete", "crd", &format!("gadgets.{group}"), "--wait=false"]);
    assert_eq!(r?, "ok");
    assert_eq!(h.http_get("/healthz")?, (200, "ok".into()));
    Ok(())
}
