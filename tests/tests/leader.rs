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

/// Two replicas, each as its own ServiceAccount `ns/<replica>` so that the audit log
/// tells their requests apart: the rights the host needs for ConfigMap plugins in `ns`
/// and to act as the probe, and the Lease rights in a binding of their own
/// (`lease-<replica>`) that a test can take away from one replica.
fn replica_accounts(ns: &str, replicas: &[&str]) -> Result<()> {
    let role = |name: &str, rules: serde_json::Value| {
        serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": name, "namespace": ns}, "rules": rules})
    };
    let mut docs = vec![
        role(
            "host",
            serde_json::json!([
                {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
                {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["get"]},
                {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["impersonate"],
                    "resourceNames": ["probe"]},
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
            ]),
        ),
        role(
            "lease",
            serde_json::json!([{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                "resourceNames": ["probe-leader"], "verbs": ["get", "update"]}]),
        ),
    ];
    for r in replicas {
        docs.push(
            serde_json::json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": r, "namespace": ns}}),
        );
        for role in ["host", "lease"] {
            docs.push(serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": format!("{role}-{r}"), "namespace": ns},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
                "subjects": [{"kind": "ServiceAccount", "name": r, "namespace": ns}]}));
        }
    }
    for d in docs {
        apply(&d.to_string()).map_err(anyhow::Error::msg)?;
    }
    Ok(())
}

/// A kubeconfig for the local control plane that authenticates as ServiceAccount
/// `ns/account` (a token from `kubectl create token`) instead of the admin, written
/// into `dir`: for a host that runs with only the RBAC a test gives it.
fn kubeconfig_as(ns: &str, account: &str, dir: &std::path::Path) -> Result<std::path::PathBuf> {
    let token = kubectl(&["create", "token", account, "-n", ns, "--duration=1h"]).map_err(anyhow::Error::msg)?;
    let admin = std::fs::read_to_string(kubeconfig())?;
    let own: Vec<String> =
        admin
            .lines()
            .map(|l| {
                if l.trim_start().starts_with("token:") { format!("    token: {}", token.trim()) } else { l.to_owned() }
            })
            .collect();
    let path = dir.join(format!("kubeconfig-{account}"));
    std::fs::write(&path, own.join("\n") + "\n")?;
    Ok(path)
}

/// Writes in `ns` made by `user` (the host's own identity, whoever it impersonated):
/// (object, request received, response sent), timestamps as the audit log's text.
fn writes(log: &[serde_json::Value], ns: &str, user: &str) -> Vec<(String, String, String)> {
    log.iter()
        .filter(|e| e["user"]["username"] == user && e["objectRef"]["namespace"] == ns)
        .filter(|e| matches!(e["verb"].as_str(), Some("create" | "update" | "patch" | "delete")))
        .map(|e| {
            let o = &e["objectRef"];
            let object = format!("{}/{}", o["resource"].as_str().unwrap_or(""), o["name"].as_str().unwrap_or(""));
            let at = |k: &str| e[k].as_str().unwrap_or("").to_owned();
            (object, at("requestReceivedTimestamp"), at("stageTimestamp"))
        })
        .collect()
}

#[test]
#[ignore = "needs the local control plane (make e2e)"]
fn a_deposed_leader_aborts_its_reconciles_before_another_replica_writes() -> Result<()> {
    let ns = Namespace::new("depose");
    let (id_a, id_b) = ("depose-a", "depose-b");
    replica_accounts(&ns.0, &[id_a, id_b])?;
    let settings = format!("namespace: {}\n", ns.0);
    let probe = plugin_path("probe.wasm");
    grant(&probe, "probe", &settings, &ns.0)?;
    apply_server_side(&pack_plugin(&probe, "probe", "probe", &ns.0, &settings, &[])?).map_err(anyhow::Error::msg)?;
    let work = tempfile::tempdir()?;
    let start = |id: &str| -> Result<Host> {
        let config = kubeconfig_as(&ns.0, id, work.path())?;
        let mut args = LEASE.to_vec();
        args.extend_from_slice(&["--leader-election-namespace", &ns.0, "--leader-election-id", "probe-leader"]);
        args.extend_from_slice(&["--plugins-configmaps", "--plugins-namespace", &ns.0]);
        let env = [("KUBECONFIG", config.to_str().unwrap()), ("POD_NAME", id), ("POD_NAMESPACE", &ns.0)];
        Host::start_with_env(&[], &args, &env)
    };
    let a = start(id_a)?;
    wait_holder(&ns.0, id_a, Duration::from_secs(30))?;
    let b = start(id_b)?;

    // One object whose reconcile writes its ServiceAccount every 200 ms for 20 s.
    let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "x", "namespace": ns.0, "labels": {"probe": "true"}},
        "data": {"mode": "long", "value": "1"}});
    apply(&cm.to_string()).map_err(anyhow::Error::msg)?;
    eventually("the leader is mid-reconcile, writing", Duration::from_secs(60), || {
        let sa = get_json(&["serviceaccount", "x-probe", "-n", &ns.0]).ok_or_else(|| anyhow::anyhow!("no x-probe"))?;
        if sa["metadata"]["annotations"]["probe/tick"].is_string() { Ok(()) } else { bail!("no tick yet") }
    })?;

    // Deposed as by a partition of its own: its Lease renewals fail (RBAC refuses them
    // now), so after the renew deadline (5 s) it stops leading; the standby takes the
    // Lease once it has seen no renewal for the lease duration (8 s).
    kubectl(&["delete", "rolebinding", &format!("lease-{id_a}"), "-n", &ns.0]).map_err(anyhow::Error::msg)?;
    wait_holder(&ns.0, id_b, Duration::from_secs(30))?;
    let (user_a, user_b) =
        (format!("system:serviceaccount:{}:{id_a}", ns.0), format!("system:serviceaccount:{}:{id_b}", ns.0));
    eventually("the new leader writes the object", Duration::from_secs(60), || {
        let w = writes(&audit_log(), &ns.0, &user_b);
        if w.iter().any(|w| w.0 == "serviceaccounts/x-probe") { Ok(()) } else { bail!("{w:?}") }
    })?;
    // The old leader's reconcile, had it been left running, would still be writing now.
    std::thread::sleep(Duration::from_secs(3));

    let log = audit_log();
    let (old, new) = (writes(&log, &ns.0, &user_a), writes(&log, &ns.0, &user_b));
    let x = |w: &Vec<(String, String, String)>| w.iter().filter(|w| w.0 == "serviceaccounts/x-probe").count();
    assert!(x(&old) >= 3 && x(&new) >= 1, "both replicas wrote x-probe in turn: {old:?}\n{new:?}");
    let first_new = new.iter().map(|w| w.1.as_str()).min().unwrap();
    let late: Vec<_> = old.iter().filter(|w| w.2.as_str() >= first_new).collect();
    assert!(late.is_empty(), "the old leader wrote after the new leader's first write at {first_new}: {late:?}");
    let logs = a.logs();
    let aborted = logs.lines().find(|l| l.contains("lost leadership: in-flight reconciles aborted"));
    eprintln!("old leader: {}", aborted.unwrap_or_else(|| panic!("no abort logged:\n{logs}")));
    assert!(!b.logs().contains("lost leadership"), "the new leader keeps leading");
    Ok(())
}
