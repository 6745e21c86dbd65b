//! Per-reconcile cost of the wasm sandbox, measured with real plugins against the
//! in-memory cluster (so the apiserver's latency is not in the numbers):
//!
//! * `probe calls:0`   — fresh Store + instantiate + one `reconcile` call doing nothing
//! * `probe calls:10`  — the same with 10 host calls (`get`, JSON both ways)
//! * `memcached wasm`  — the Memcached reconcile on a converged object (get + list,
//!   no writes), through the runtime
//! * `memcached native` — the same plugin crate compiled natively, called directly on
//!   the SDK's fake cluster: the baseline the wasm figure is compared with
//! * `memcached-js`    — the same operator as a script plugin (plugins/memcached-js) on
//!   the JavaScript engine: instantiate the engine, evaluate the script, reconcile
//!
//! `cargo bench -p wasmop --bench reconcile_overhead` prints a Markdown table (median of
//! 5 rounds). `-- --quick` runs each case a few times only, so `make test` keeps the
//! harness from rotting without timing anything. Plugins come from `target/plugins`
//! (`make plugins`) or `$WASMOP_PLUGINS`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use wasmop::gateway::{Backend, Gateway, MemoryBackend, Permissions};
use wasmop::runtime::{Compiled, Compiler, Limits, Runtime, RuntimeConfig};
use wasmop_sdk::{Context, ObjectRef, Reconciler, Request};

fn plugins_dir() -> PathBuf {
    std::env::var("WASMOP_PLUGINS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../target/plugins")))
}

struct Case {
    rt: Arc<Runtime>,
    compiled: Compiled,
    mem: Arc<MemoryBackend>,
    gateway: Gateway,
    key: ObjectRef,
    /// The object's JSON text, as the host's cache hands it to a reconcile.
    object: String,
    settings: String,
}

fn case(
    rt: &Arc<Runtime>,
    tokio: &tokio::runtime::Runtime,
    file: &str,
    settings: &str,
    object: serde_json::Value,
    seed: &[serde_json::Value],
) -> Case {
    let bytes = std::fs::read(plugins_dir().join(file)).unwrap_or_else(|e| panic!("{file}: {e} (run `make plugins`)"));
    let (name, format) = wasmop::runtime::Format::of_key(file).expect("a plugin file");
    let compiled = rt.compile_as(format, name, name, &bytes).expect("compile");
    let manifest = tokio.block_on(rt.manifest(&compiled, "bench", settings, &Limits::default())).expect("manifest");
    let mem = Arc::new(MemoryBackend::default());
    for s in seed {
        mem.fake().seed(s.clone()).unwrap();
    }
    let object = mem.fake().seed(object).unwrap();
    let backend: Arc<dyn Backend> = mem.clone();
    let gateway = Gateway::new("bench", Arc::new(Permissions::from_manifest(&manifest)), backend);
    Case {
        rt: rt.clone(),
        compiled,
        mem,
        gateway,
        key: ObjectRef::of_json(&object).unwrap(),
        object: object.to_string(),
        settings: settings.into(),
    }
}

impl Case {
    async fn once(&self) {
        let r = self
            .rt
            .reconcile(
                &self.compiled,
                self.gateway.clone(),
                &self.key,
                Some(&self.object),
                &self.settings,
                &Limits::default(),
            )
            .await
            .expect("no fault");
        r.expect("reconcile ok");
    }
}

/// Median over `rounds` of the mean time per call in a round of `n` calls.
fn measure(rounds: usize, n: usize, mut f: impl FnMut()) -> Duration {
    for _ in 0..n.min(20) {
        f();
    }
    let mut per_call: Vec<Duration> = (0..rounds)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..n {
                f();
            }
            t.elapsed() / n as u32
        })
        .collect();
    per_call.sort();
    per_call[per_call.len() / 2]
}

fn probe_cm(mode: &str) -> serde_json::Value {
    serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "p", "namespace": "bench", "labels": {"probe": "true"}}, "data": {"mode": mode}})
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (rounds, n) = if quick { (1, 3) } else { (5, 2000) };
    let tokio = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    // Cranelift only: a host serves Cranelift code from the pool once a plugin has tiered
    // up, and nothing tiers up here (that is the registry's job), so the default would
    // time Winch code on the on-demand allocator instead of the steady state.
    let rt = Arc::new(
        Runtime::new(RuntimeConfig {
            max_instances: 4,
            compiler: Compiler::Optimizing,
            script_engine: Some(plugins_dir().join("wasmop-js-engine.wasm")),
            ..Default::default()
        })
        .unwrap(),
    );

    let mut rows: Vec<(String, Duration)> = Vec::new();
    for calls in [0, 10] {
        let c = case(&rt, &tokio, "probe.wasm", "namespace: bench", probe_cm(&format!("calls:{calls}")), &[]);
        rows.push((
            format!("probe `calls:{calls}` (instantiate + reconcile + {calls} host calls)"),
            measure(rounds, n, || tokio.block_on(c.once())),
        ));
    }

    // A converged Memcached: the finalizer, the Deployment and its status are in place.
    let cr = serde_json::json!({"apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached",
        "metadata": {"name": "m", "namespace": "bench"}, "spec": {"size": 1, "containerPort": 11211}});
    let native = wasmop_sdk::fake::FakeCluster::new();
    let stored = native.seed(cr.clone()).unwrap();
    let key = ObjectRef::of_json(&stored).unwrap();
    let run_native = |cluster: &wasmop_sdk::fake::FakeCluster| {
        let req = Request { object: key.clone(), current: cluster.object(&key), settings: String::new() };
        memcached::Operator::reconcile(&Context::new(cluster), &req).expect("native reconcile")
    };
    run_native(&native);
    let dref = ObjectRef::new(&wasmop_sdk::KindRef::new("apps/v1", "Deployment"), Some("bench"), "m");
    native
        .edit(&dref, |d| d["status"] = serde_json::json!({"replicas": 1, "readyReplicas": 1, "updatedReplicas": 1}))
        .unwrap();
    native
        .seed(serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "m-0", "namespace": "bench",
        "labels": {"app.kubernetes.io/instance": "m"}}}))
        .unwrap();
    run_native(&native);
    let converged: Vec<serde_json::Value> = ["cache.example.com/v1alpha1/Memcached", "apps/v1/Deployment", "v1/Pod"]
        .iter()
        .flat_map(|k| {
            let (av, kind) = k.rsplit_once('/').unwrap();
            native.objects_of(&wasmop_sdk::KindRef::new(av, kind))
        })
        .collect();
    native.take_writes();
    let native_time = measure(rounds, n, || {
        run_native(&native);
    });
    assert!(native.take_writes().is_empty(), "the native baseline must be converged");

    let mc = case(&rt, &tokio, "memcached.wasm", "", converged[0].clone(), &converged[1..]);
    mc.mem.fake().take_writes();
    let wasm_time = measure(rounds, n, || tokio.block_on(mc.once()));
    assert!(mc.mem.fake().take_writes().is_empty(), "the wasm case must be converged too");
    rows.push(("memcached, converged (wasm: instantiate + reconcile, get + list)".into(), wasm_time));
    rows.push(("memcached, converged (same crate native, no sandbox)".into(), native_time));
    let js = case(&rt, &tokio, "memcached-js.js", "", converged[0].clone(), &converged[1..]);
    js.mem.fake().take_writes();
    let js_time = measure(rounds, (n / 10).max(1), || tokio.block_on(js.once()));
    assert!(js.mem.fake().take_writes().is_empty(), "the script case must be converged too");
    rows.push(("memcached-js, converged (JavaScript engine: instantiate + evaluate + reconcile)".into(), js_time));

    println!("| case | median per reconcile |\n|---|---|");
    for (name, d) in &rows {
        println!("| {name} | {:.1} µs |", d.as_secs_f64() * 1e6);
    }
    println!("\nwasm / native (memcached): {:.2}×", wasm_time.as_secs_f64() / native_time.as_secs_f64());
    println!("JavaScript / wasm (memcached): {:.2}×", js_time.as_secs_f64() / wasm_time.as_secs_f64());
    if quick {
        println!("bench: {} passed, 0 failed (quick mode: nothing timed)", rows.len());
    }
}
