//! `make demo` end to end: scripts/demo.sh run against a cluster it did not start (this
//! suite's control plane, through KUBECONFIG, standing in for a user's cluster) with
//! namespaces of its own; each step's outcome checked in the cluster; then
//! scripts/demo-down.sh, after which no process and no object of the demo is left.

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;
use wasmop_e2e::*;

const SCRIPTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts");

/// One demo at a time: the existing-cluster test checks that no control plane appears
/// while it runs, and the local one starts one.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// One run of the demo in its own namespaces and state directory; demo-down runs when
/// dropped if the test did not get that far.
struct Demo {
    dir: tempfile::TempDir,
    ns: String,
    sys: String,
    down: bool,
    /// Local mode: the state directory of the control plane the demo starts itself.
    local: Option<std::path::PathBuf>,
}

impl Demo {
    fn new() -> Result<Self> {
        let id = std::process::id() % 100000;
        Ok(Demo {
            dir: tempfile::tempdir()?,
            ns: format!("demo-{id}"),
            sys: format!("demo-sys-{id}"),
            down: false,
            local: None,
        })
    }

    /// A demo that starts (and demo-down stops) a control plane of its own.
    fn local() -> Result<Self> {
        let mut d = Self::new()?;
        d.local = Some(d.dir.path().join("cluster"));
        // Names of its own: both tests run at once, and the other looks for its hosts by name.
        (d.ns, d.sys) = (d.ns.replace("demo-", "demol-"), d.sys.replace("demo-sys-", "demol-sys-"));
        Ok(d)
    }

    /// Runs `scripts/SCRIPT`: (success, stdout and stderr).
    fn script(&self, script: &str) -> Result<(bool, String)> {
        let plugins = plugin_path("memcached.wasm").parent().context("plugins dir")?.to_path_buf();
        let mut cmd = Command::new(Path::new(SCRIPTS).join(script));
        match &self.local {
            Some(state) => cmd.env("DEMO_CLUSTER", "local").env("CLUSTER_STATE", state).env_remove("KUBECONFIG"),
            None => cmd.env("DEMO_CLUSTER", "existing").env("KUBECONFIG", kubeconfig()),
        };
        let out = cmd
            .env("DEMO_NAMESPACE", &self.ns)
            .env("DEMO_SYSTEM_NAMESPACE", &self.sys)
            .env("DEMO_DIR", self.dir.path())
            .env("WASMOP_BIN", wasmop_bin())
            .env("WASMOP_PLUGINS", plugins)
            .env_remove("DEMO_WEBHOOK_HOST")
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("run {script}"))?;
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        Ok((out.status.success(), text))
    }

    fn state(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("created")).unwrap_or_default()
    }

    fn host_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("host.log")).unwrap_or_default()
    }

    fn down(&mut self) -> Result<String> {
        self.down = true;
        let (ok, out) = self.script("demo-down.sh")?;
        ensure!(ok, "demo-down failed:\n{out}");
        Ok(out)
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        if !self.down {
            eprintln!("---- host log ----\n{}", self.host_log());
            match self.script("demo-down.sh") {
                Ok((_, out)) => eprintln!("---- demo-down ----\n{out}"),
                Err(e) => eprintln!("demo-down: {e:#}"),
            }
        }
    }
}

/// PIDs of the processes whose command line contains `needle`.
fn processes(needle: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).replace('\0', " ").contains(needle) {
            pids.push(pid);
        }
    }
    pids.sort();
    pids
}

fn is_apiserver(pid: u32) -> bool {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    String::from_utf8_lossy(&cmdline).replace('\0', " ").contains("bin/cluster kube-apiserver")
}

/// Whether process `pid` runs (exists and is no zombie).
fn running(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z'))
}

fn json(args: &[&str]) -> Result<Value> {
    get_json(args).with_context(|| format!("kubectl get {}", args.join(" ")))
}

/// A web Pod: its containers, and the log-agent image in its spec and running.
#[derive(Debug)]
struct WebPod {
    name: String,
    containers: Vec<String>,
    spec: String,
    running: String,
}

fn web_pods(ns: &str) -> Result<Vec<WebPod>> {
    let pods = json(&["pods", "-n", ns, "-l", "app=nginx"])?;
    let sidecar = |list: &Value| {
        list.as_array()
            .and_then(|l| l.iter().find(|c| c["name"] == "log-agent"))
            .map(|c| c["image"].as_str().unwrap_or("").to_owned())
            .unwrap_or_default()
    };
    Ok(pods["items"]
        .as_array()
        .context("items")?
        .iter()
        .map(|p| WebPod {
            name: p["metadata"]["name"].as_str().unwrap_or("").to_owned(),
            containers: p["spec"]["containers"]
                .as_array()
                .map(|cs| cs.iter().map(|c| c["name"].as_str().unwrap_or("").to_owned()).collect())
                .unwrap_or_default(),
            spec: sidecar(&p["spec"]["containers"]),
            running: sidecar(&p["status"]["containerStatuses"]),
        })
        .collect())
}

#[test]
#[ignore = "needs the local control plane (make e2e)"]
fn the_demo_runs_on_an_existing_cluster_and_demo_down_removes_all_of_it() -> Result<()> {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let apiservers = processes("bin/cluster kube-apiserver");
    let local_state = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/cluster");
    let local_state_before = local_state.exists();
    let mut demo = Demo::new()?;
    let (ns, sys) = (demo.ns.clone(), demo.sys.clone());
    let ss = format!("{ns}-log-agent");

    let started = std::time::Instant::now();
    let (ok, out) = demo.script("demo.sh")?;
    println!("---- demo ({:?}) ----\n{out}", started.elapsed());
    ensure!(ok, "the demo failed:\n{out}");

    // It used the cluster it was given and started no control plane of its own.
    assert!(out.contains("Using the cluster in KUBECONFIG: no control plane is started"), "{out}");
    assert!(!out.contains("Starting the local control plane"), "{out}");
    // (Other control planes may come and go on a shared machine: look for the demo's.)
    let demo_dir = demo.dir.path().to_string_lossy().into_owned();
    for place in [local_state.to_string_lossy().into_owned(), demo_dir] {
        let new: Vec<u32> =
            processes(&place).into_iter().filter(|p| is_apiserver(*p) && !apiservers.contains(p)).collect();
        assert!(new.is_empty(), "a control plane was started in {place}: {new:?}");
    }
    assert_eq!(local_state.exists(), local_state_before, "no local control plane state appeared");
    assert!(!demo.state().lines().any(|l| l.starts_with("cluster ")), "{}", demo.state());
    for step in [
        "Creating a Memcached of size 3",
        "Scaling to 1",
        "Webhook configurations for its handlers",
        "A Deployment of 2 nginx Pods",
        "A new sidecar image",
        "New plugin code: Memcached v2",
        "A broken version",
        "Done.",
    ] {
        assert!(out.contains(step), "step {step:?} missing from the output");
    }

    // Memcached: scaled to 1, Events; then served by v2 (its label), also after the
    // broken version (the image change made after it carries v2's label).
    let mc = json(&["memcached", "-n", &ns, "memcached-sample"])?;
    assert_eq!((mc["spec"]["size"].as_i64(), mc["status"]["readyReplicas"].as_i64()), (Some(1), Some(1)), "{mc}");
    let d = json(&["deployment", "-n", &ns, "memcached-sample"])?;
    assert_eq!(d["spec"]["replicas"], 1);
    assert_eq!(d["spec"]["template"]["spec"]["containers"][0]["image"], "docker.io/library/memcached:1.6.39-alpine");
    assert_eq!(d["metadata"]["labels"]["app.kubernetes.io/version"], "1.6.39-alpine", "v2's behaviour: {d}");
    let events = json(&["events", "-n", &ns, "--field-selector", "involvedObject.name=memcached-sample"])?;
    let reasons: Vec<&str> =
        events["items"].as_array().context("events")?.iter().filter_map(|e| e["reason"].as_str()).collect();
    assert!(reasons.contains(&"Created") && reasons.contains(&"Scaled"), "{reasons:?}");
    let log = demo.host_log();
    assert!(log.contains(&format!("plugin loaded plugin=memcached version={}+v2 ", env!("CARGO_PKG_VERSION"))));
    let rejected = warnings(&sys, "memcached");
    assert!(
        rejected.iter().any(|(r, m)| r == "PluginRejected" && m.contains("keeps serving")),
        "the broken version's Event: {rejected:?}"
    );
    assert!(out.contains("PluginRejected"), "the demo shows the Event");

    // SidecarSet: the host's webhooks injected the sidecar into both Pods, the
    // controller counts them, and the image change was rolled into the same Pods.
    let pods = web_pods(&ns)?;
    assert_eq!(pods.len(), 2, "{pods:?}");
    for p in &pods {
        assert_eq!(p.containers, ["nginx", "log-agent"], "{}: injected after the app container", p.name);
        let images = (p.spec.as_str(), p.running.as_str());
        assert_eq!(images, ("docker.io/library/busybox:1.37", "docker.io/library/busybox:1.37"), "{p:?}");
    }
    let status = json(&["sidecarset", &ss])?["status"].clone();
    let counts = (status["matchedPods"].as_i64(), status["updatedPods"].as_i64(), status["readyPods"].as_i64());
    assert_eq!(counts, (Some(2), Some(2), Some(2)), "{status}");
    let updated =
        json(&["events", "-A", "--field-selector", &format!("involvedObject.name={ss},reason=SidecarUpdated")])?;
    let messages: Vec<&str> =
        updated["items"].as_array().context("events")?.iter().filter_map(|e| e["message"].as_str()).collect();
    for p in &pods {
        let name = &p.name;
        assert!(messages.iter().any(|m| m.ends_with(&format!("/{name}"))), "{name} updated in place: {messages:?}");
    }
    assert!(out.contains("updated in place, not replaced"), "{out}");
    // The webhooks see Pods in the demo's namespace only, SidecarSets only the demo's.
    let mutating = json(&["mutatingwebhookconfiguration", &ns])?;
    for w in mutating["webhooks"].as_array().context("webhooks")? {
        let selector = w["namespaceSelector"].to_string();
        assert!(selector.contains(&format!(r#""operator":"In","values":["{ns}"]"#)), "{selector}");
        assert!(!w["clientConfig"]["caBundle"].as_str().unwrap_or("").is_empty(), "CA injected");
        if w["rules"].to_string().contains("sidecarsets") {
            assert_eq!(w["objectSelector"]["matchLabels"]["wasmop.io/demo"], ns.as_str());
        }
    }

    // demo-down: exactly what was recorded goes, the host included.
    let state = demo.state();
    let host_pids: Vec<u32> = state
        .lines()
        .filter_map(|l| l.strip_prefix("pid "))
        .filter_map(|l| l.split(' ').next()?.parse().ok())
        .collect();
    assert_eq!(host_pids.len(), 1, "{state}");
    let objects: Vec<Vec<String>> = state
        .lines()
        .filter_map(|l| l.strip_prefix("object "))
        .map(|l| l.split(' ').map(str::to_owned).collect())
        .collect();
    for want in [
        ["Namespace", "-", ns.as_str()],
        ["Namespace", "-", sys.as_str()],
        ["MutatingWebhookConfiguration", "-", ns.as_str()],
        ["ValidatingWebhookConfiguration", "-", ns.as_str()],
        ["SidecarSet", "-", ss.as_str()],
        ["Deployment", ns.as_str(), "web"],
        ["Memcached", ns.as_str(), "memcached-sample"],
        ["ConfigMap", sys.as_str(), "memcached"],
        ["ServiceAccount", sys.as_str(), "sidecarset"],
    ] {
        assert!(objects.iter().any(|o| o == &want), "{want:?} not recorded:\n{state}");
    }
    let down = demo.down()?;
    println!("---- demo-down ----\n{down}");
    assert!(!demo.dir.path().join("created").exists(), "the record is gone with what it listed");
    for pid in host_pids {
        assert!(!running(pid), "host pid {pid} still running");
    }
    assert_eq!(processes(&format!("--plugins-namespace {sys}")), Vec::<u32>::new(), "a demo host is left");
    for o in &objects {
        let mut args = vec![o[0].as_str(), o[2].as_str()];
        if o[1] != "-" {
            args.extend(["-n", o[1].as_str()]);
        }
        eventually(&format!("{o:?} gone"), Duration::from_secs(30), || match get_json(&args) {
            Some(v) => bail!("still there: {}", v["metadata"]),
            None => Ok(()),
        })?;
    }
    let events = json(&["events", "-A", "--field-selector", &format!("involvedObject.name={ss}")])?;
    assert_eq!(events["items"].as_array().map(Vec::len), Some(0), "Events about the SidecarSet: {events}");
    for l in state.lines().filter_map(|l| l.strip_prefix("subject ")) {
        let f: Vec<&str> = l.splitn(5, ' ').collect();
        let mut args = vec![f[0], f[2]];
        if f[1] != "-" {
            args.extend(["-n", f[1]]);
        }
        if let Some(binding) = get_json(&args) {
            let subject: Value = serde_json::from_str(f[4])?;
            let subjects = binding["subjects"].as_array().cloned().unwrap_or_default();
            assert!(!subjects.contains(&subject), "{} {} still binds {}", f[0], f[2], f[3]);
        }
    }
    Ok(())
}

#[test]
#[ignore = "needs the local control plane (make e2e)"]
fn the_demo_starts_a_control_plane_of_its_own_and_demo_down_stops_it() -> Result<()> {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut demo = Demo::local()?;
    let state = demo.local.clone().context("local")?;
    let (ok, out) = demo.script("demo.sh")?;
    ensure!(ok, "the demo failed:\n{out}");
    assert!(out.contains("Starting the local control plane"), "{out}");
    let own = state.to_string_lossy().into_owned();
    assert!(!processes(&own).is_empty(), "its control plane runs after the demo");
    // What a user reads: converged, injected, rolled, reloaded, rejected.
    for seen in ["memcached-sample   3      3       True", "nginx,log-agent", "version=0.1.0+v2", "PluginRejected"] {
        assert!(out.contains(seen), "{seen:?} missing from the output:\n{out}");
    }
    let down = demo.down()?;
    assert!(processes(&own).is_empty(), "processes of its control plane are left:\n{down}");
    assert!(!state.join("kubeconfig").exists(), "its control plane's state is left");
    Ok(())
}
