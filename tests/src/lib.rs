//! Helpers for the end-to-end tests: kubectl against the local control plane, a host
//! process per test, and polling with a deadline.
//!
//! The tests are `#[ignore]`d so that a bare `cargo test` needs no cluster; `make e2e`
//! starts the control plane and runs them with `--include-ignored`. Each test works in
//! its own namespace and, where it runs a host, its own host process and plugin dir.

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod host;
pub use host::Host;

/// Path of the kubeconfig of the local control plane.
pub fn kubeconfig() -> String {
    std::env::var("KUBECONFIG")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../target/cluster/kubeconfig").to_string())
}

/// Runs kubectl; Ok(stdout) on success, Err(stderr) otherwise.
pub fn kubectl(args: &[&str]) -> Result<String, String> {
    kubectl_stdin(args, None)
}

pub fn kubectl_stdin(args: &[&str], stdin: Option<&str>) -> Result<String, String> {
    let mut cmd = Command::new("kubectl");
    cmd.args(args).env("KUBECONFIG", kubeconfig()).stdout(Stdio::piped()).stderr(Stdio::piped());
    if stdin.is_some() {
        cmd.stdin(Stdio::piped());
    }
    let mut child = cmd.spawn().map_err(|e| format!("cannot run kubectl: {e}"))?;
    if let Some(input) = stdin {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(input.as_bytes()).map_err(|e| e.to_string())?;
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// `kubectl apply -f -` with `yaml`.
pub fn apply(yaml: &str) -> Result<String, String> {
    kubectl_stdin(&["apply", "-f", "-"], Some(yaml))
}

/// `kubectl apply --server-side -f -`: for objects too big for the client-side
/// last-applied annotation (plugin ConfigMaps).
pub fn apply_server_side(yaml: &str) -> Result<String, String> {
    kubectl_stdin(&["apply", "--server-side", "--force-conflicts", "-f", "-"], Some(yaml))
}

/// `kubectl get ... -o json` parsed; None when not found.
pub fn get_json(args: &[&str]) -> Option<serde_json::Value> {
    let mut a = vec!["get"];
    a.extend_from_slice(args);
    a.extend_from_slice(&["-o", "json"]);
    kubectl(&a).ok().and_then(|s| serde_json::from_str(&s).ok())
}

/// Applies a CRD (server-side: a big schema would overflow the client-side annotation)
/// and waits until the apiserver serves it, with the scripts' `wait-crd.sh` (plain
/// `kubectl wait` fails at once on a CRD whose conditions are still null).
pub fn install_crd(yaml: &str, name: &str) -> Result<()> {
    apply_server_side(yaml).map_err(anyhow::Error::msg)?;
    let out = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/wait-crd.sh"))
        .arg(name)
        .env("KUBECONFIG", kubeconfig())
        .output()
        .context("run scripts/wait-crd.sh")?;
    if !out.status.success() {
        bail!("{}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// A fresh namespace for one test, deleted (without waiting) when dropped.
pub struct Namespace(pub String);

impl Namespace {
    pub fn new(prefix: &str) -> Self {
        let name = format!("{prefix}-{}", std::process::id() % 100000);
        let _ = kubectl(&["delete", "namespace", &name, "--wait=true", "--ignore-not-found"]);
        kubectl(&["create", "namespace", &name]).expect("create namespace");
        Namespace(name)
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = kubectl(&["delete", "namespace", &self.0, "--wait=false"]);
    }
}

/// Polls `f` until it returns Ok or `timeout` passes; the last error explains a failure.
pub fn eventually<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Result<T>) -> Result<T> {
    let deadline = Instant::now() + timeout;
    loop {
        match f() {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() >= deadline => bail!("{what}: not true after {timeout:?}: {e:#}"),
            Err(_) => std::thread::sleep(Duration::from_millis(250)),
        }
    }
}

/// A built plugin: `$WASMOP_PLUGINS/NAME.wasm` (or `component/NAME.wasm`).
pub fn plugin_path(rel: &str) -> PathBuf {
    let dir = std::env::var("WASMOP_PLUGINS")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../target/plugins").to_string());
    Path::new(&dir).join(rel)
}

pub fn wasmop_bin() -> PathBuf {
    std::env::var("WASMOP_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debug/wasmop"))
}

/// Where the ServiceAccounts of the hosts' directory plugins live (the namespace every
/// cluster has): a directory plugin `NAME` acts as `default/NAME`.
pub const DIR_PLUGIN_ACCOUNTS: &str = "default";

/// What a cluster admin does to let a plugin run as itself: `wasmop rbac` for the
/// plugin (with its settings, which decide its manifest), applied. `account_namespace`
/// is where its ServiceAccount lives (a ConfigMap plugin's: the ConfigMap's namespace).
pub fn grant(plugin: &Path, name: &str, settings: &str, account_namespace: &str) -> Result<String> {
    let work = tempfile::tempdir()?;
    let file = work.path().join("settings.yaml");
    std::fs::write(&file, settings)?;
    let out = Command::new(wasmop_bin())
        .arg("rbac")
        .arg(plugin)
        .args(["--name", name, "--namespace", account_namespace])
        .arg(format!("--settings={}", file.display()))
        .output()?;
    if !out.status.success() {
        bail!("wasmop rbac {}: {}", plugin.display(), String::from_utf8_lossy(&out.stderr));
    }
    let yaml = String::from_utf8(out.stdout)?;
    // Two tests granting the same plugin at once race in `kubectl apply` (both see no
    // ServiceAccount, one create fails AlreadyExists); applying again then updates it.
    let applied = apply(&yaml).or_else(|e| if e.contains("AlreadyExists") { apply(&yaml) } else { Err(e) });
    applied.map_err(|e| anyhow::anyhow!("apply the RBAC of {name}: {e}"))?;
    Ok(yaml)
}

/// `wasmop pack` of one plugin: ConfigMap `configmap` in `ns` carrying `wasm` as
/// plugin `plugin` with `settings`, and `annotations` (`KEY=VALUE`).
pub fn pack_plugin(
    wasm: &Path,
    plugin: &str,
    configmap: &str,
    ns: &str,
    settings: &str,
    annotations: &[&str],
) -> Result<String> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join(format!("{plugin}.wasm"));
    std::fs::copy(wasm, &file)?;
    let s = dir.path().join(format!("{plugin}.settings.yaml"));
    std::fs::write(&s, settings)?;
    let mut cmd = Command::new(wasmop_bin());
    cmd.arg("pack").arg(&file).args(["--name", configmap, "--namespace", ns]);
    cmd.arg(format!("--settings={plugin}={}", s.display()));
    for a in annotations {
        cmd.arg(format!("--annotation={a}"));
    }
    let out = cmd.output()?;
    if !out.status.success() {
        bail!("pack: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// Warning Events on the object named `name` in `ns`: (reason, message).
pub fn warnings(ns: &str, name: &str) -> Vec<(String, String)> {
    let evs = get_json(&["events", "-n", ns, "--field-selector", &format!("involvedObject.name={name},type=Warning")])
        .unwrap_or_default();
    evs["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| (e["reason"].as_str().unwrap_or("").to_owned(), e["message"].as_str().unwrap_or("").to_owned()))
        .collect()
}

/// Waits for a Warning Event `reason` on `name` whose message contains `needle`.
pub fn expect_warning(ns: &str, name: &str, reason: &str, needle: &str) -> Result<()> {
    eventually(&format!("{name}: {reason} Event containing {needle:?}"), Duration::from_secs(90), || {
        let w = warnings(ns, name);
        if w.iter().any(|(r, m)| r == reason && m.contains(needle)) { Ok(()) } else { bail!("{w:?}") }
    })
}

/// The apiserver's audit log of the local control plane, one JSON event per line.
pub fn audit_log() -> Vec<serde_json::Value> {
    let path = Path::new(&kubeconfig()).with_file_name("audit.log");
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

/// Audit events of requests made as `user` (impersonated or not).
pub fn audit_as<'a>(log: &'a [serde_json::Value], user: &str) -> Vec<&'a serde_json::Value> {
    log.iter()
        .filter(|e| e["impersonatedUser"]["username"].as_str().or(e["user"]["username"].as_str()) == Some(user))
        .collect()
}

/// A free loopback port (for a webhook URL that must be known before the host starts).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("free port")
}

/// Webhook configurations named `name`, generated by `wasmop webhook-config` for
/// `plugins` at `https://127.0.0.1:port`, narrowed to `namespaces` so that tests
/// running beside this one are never sent to its host; deleted when dropped (a
/// `failurePolicy: Fail` webhook without its host would block the whole cluster).
pub struct WebhookConfigs(pub String);

impl WebhookConfigs {
    pub fn apply(name: &str, port: u16, plugins: &[&Path], namespaces: &[&str]) -> Result<Self> {
        let out = Command::new(wasmop_bin())
            .args(["webhook-config", "--name", name, "--url", &format!("https://127.0.0.1:{port}")])
            .args(plugins)
            .output()?;
        if !out.status.success() {
            bail!("webhook-config: {}", String::from_utf8_lossy(&out.stderr));
        }
        let guard = WebhookConfigs(name.to_owned());
        let text = String::from_utf8(out.stdout)?;
        let mut docs = Vec::new();
        for doc in text.split("\n---").map(|d| d.trim_start_matches("---")).filter(|d| !d.trim().is_empty()) {
            let mut v: serde_json::Value = serde_yaml::from_str(doc)?;
            for w in v["webhooks"].as_array_mut().into_iter().flatten() {
                w["namespaceSelector"] = serde_json::json!({"matchExpressions": [{
                    "key": "kubernetes.io/metadata.name", "operator": "In", "values": namespaces}]});
            }
            docs.push(serde_json::to_string(&v)?);
        }
        for d in docs {
            apply(&d).map_err(|e| anyhow::anyhow!("apply webhook configuration: {e}"))?;
        }
        Ok(guard)
    }
}

impl Drop for WebhookConfigs {
    fn drop(&mut self) {
        for kind in ["mutatingwebhookconfiguration", "validatingwebhookconfiguration"] {
            let _ = kubectl(&["delete", kind, &self.0, "--ignore-not-found"]);
        }
    }
}

/// Waits until the host has written its CA into every webhook of configurations `name`.
pub fn wait_for_ca_bundle(name: &str) -> Result<()> {
    eventually("caBundle injected", Duration::from_secs(30), || {
        for kind in ["mutatingwebhookconfiguration", "validatingwebhookconfiguration"] {
            if let Some(c) = get_json(&[kind, name]) {
                for w in c["webhooks"].as_array().into_iter().flatten() {
                    if w["clientConfig"]["caBundle"].as_str().unwrap_or("").is_empty() {
                        bail!("{kind} {name}: webhook {} has no caBundle yet", w["name"]);
                    }
                }
            }
        }
        Ok(())
    })
}

/// Where the probe's reconciles start and end in a host log: (timestamp, start?, name),
/// in log order. The timestamp is the log's RFC 3339 prefix, comparable as text.
///
/// A start is the probe's `probe reconcile` line. An end is its `probe done` line, or the
/// worker's line (`controllers::worker`) for a reconcile that ended early: a conflict retried (a stale
/// cached read; quiet by design, so no WARN) or an error the plugin returned. Without those, a
/// reconcile that returned on a conflict would look as if it never ended, and the
/// retry as a second reconcile running beside it.
pub fn probe_intervals(log: &str) -> Vec<(String, bool, String)> {
    // Not a fault: that may be the host cutting the reconcile off, which a test of
    // graceful ends must see as unfinished.
    const EARLY_ENDS: [&str; 2] = ["reconcile hit a conflict", "reconcile failed"];
    log.lines()
        .filter_map(|l| {
            let start = l.contains("probe reconcile ");
            let name = if start || l.contains("probe done ") {
                l.split("name=").nth(1)?.split_whitespace().next()?.to_owned()
            } else if l.contains("wasmop::controllers::worker:") && EARLY_ENDS.iter().any(|e| l.contains(e)) {
                // `object=<group/version>/<Kind> <namespace>/<name>`
                let object = l.rsplit("object=").next()?.split_whitespace().nth(1)?;
                object.rsplit('/').next()?.to_owned()
            } else {
                return None;
            };
            let ts = l.split_whitespace().next()?.to_owned();
            Some((ts, start, name))
        })
        .collect()
}

#[cfg(test)]
mod probe_intervals_tests {
    /// The host's own lines, as it logs them: a conflict ends a reconcile, so the retry
    /// after it is not a second reconcile beside the first. (A log target moved once and
    /// an e2e test saw a conflict-ended reconcile as still running.)
    #[test]
    fn a_conflict_logged_by_the_worker_ends_the_reconcile() {
        let log = "\
2026-12-07T13:31:16.2Z  INFO wasmop::runtime::host: probe reconcile name=o0 mode=normal plugin=\"probe\"
2026-12-07T13:31:16.3Z  INFO wasmop::controllers::worker: reconcile hit a conflict, retrying: conflict: x plugin=probe object=v1/ConfigMap ns/o0
2026-12-07T13:31:16.4Z  INFO wasmop::runtime::host: probe reconcile name=o0 mode=normal plugin=\"probe\"
";
        let ends: Vec<(bool, String)> =
            super::probe_intervals(log).into_iter().map(|(_, start, name)| (start, name)).collect();
        assert_eq!(ends, [(true, "o0".into()), (false, "o0".into()), (true, "o0".into())]);
    }
}

pub mod memcached;
pub mod sidecarset;
