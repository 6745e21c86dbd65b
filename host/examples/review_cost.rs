//! What one `inject-pod` review costs in wasm, for A/B runs of plugin builds: the
//! review `scripts/bench-admission.py` sends (`pod-review.json`), answered by each
//! SidecarSet plugin build given, in process, with its SidecarSet on an in-memory
//! cluster (defaulted by the build's own webhook first, as in the benchmark). Prints
//! the median time per review of each build, the second's over the first's, the
//! answer's size, and whether both answers make the same Pod.
//!
//! Why: on a shared VM the benchmark's CPU per review moves by ±40 % between runs a
//! minute apart (BENCHMARKS.md, issue 23), more than a plugin change moves it. Here
//! the two builds take turns of 50 reviews, so both meet the machine as it is in the
//! same second. (valgrind could count instructions instead, but cannot map the pooling
//! allocator's reservations.)
//!
//!   cargo build --profile bench -p wasmop --example review_cost
//!   taskset -c 0 target/release/examples/review_cost OLD.wasm NEW.wasm [ROUNDS]
//!
//! Caveats: no TLS, HTTP or AdmissionReview envelope (the host's JSON work on the
//! request's text and the answer is in, as `webhook::review` does it); the in-memory
//! cluster answers the plugin's list instead of a watch cache.

use std::sync::Arc;
use std::time::{Duration, Instant};
use wasmop::gateway::{Backend, Gateway, MemoryBackend, Permissions};
use wasmop::runtime::{Compiled, Compiler, Limits, Runtime, RuntimeConfig};
use wasmop_sdk::AdmissionResponse;

const POD_REVIEW: &str = include_str!("pod-review.json");

/// One plugin build, loaded and ready to review, on an in-memory cluster of its own.
struct Build {
    name: String,
    compiled: Compiled,
    gateway: Gateway,
    times: Vec<Duration>,
    /// The last answer, as the SDK reads it.
    answer: AdmissionResponse,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (plugins, rounds): (Vec<&String>, Option<usize>) = match args.last().map(|a| a.parse::<usize>()) {
        Some(Ok(n)) => (args[..args.len() - 1].iter().collect(), Some(n)),
        _ => (args.iter().collect(), None),
    };
    if plugins.is_empty() || plugins.len() > 2 {
        eprintln!("usage: review_cost SIDECARSET.wasm [OTHER.wasm] [ROUNDS]");
        std::process::exit(2);
    }
    let rounds = rounds.unwrap_or(4000);
    let tokio = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    // Cranelift, as a host serves a plugin once it has tiered up.
    // WASMOP_PLUGIN_PERF_MAP=1: plugin functions named for `perf record` (as the host's flag).
    let perf_map = std::env::var_os("WASMOP_PLUGIN_PERF_MAP").is_some();
    let config = RuntimeConfig { compiler: Compiler::Optimizing, perf_map, ..Default::default() };
    let rt = Arc::new(Runtime::new(config).unwrap());
    let limits = Limits::default();
    let review = |b: &Build, handler: &str, request: &str| -> serde_json::Value {
        let answer = tokio.block_on(rt.review(&b.compiled, b.gateway.clone(), handler, "", request, &limits));
        let text = answer.expect("no fault").unwrap_or_else(|e| panic!("{}: {handler}: {e}", b.name));
        serde_json::from_str(&text).expect("the answer is JSON")
    };
    let mut builds: Vec<Build> = plugins
        .iter()
        .map(|plugin| {
            let bytes = std::fs::read(plugin).expect("read the plugin");
            let compiled =
                rt.compile_as(wasmop::runtime::Format::Component, "sidecarset", "sidecarset", &bytes).expect("compile");
            let manifest = tokio.block_on(rt.manifest(&compiled, "bench", "", &limits)).expect("manifest");
            let mem = Arc::new(MemoryBackend::default());
            let backend: Arc<dyn Backend> = mem.clone();
            let gateway = Gateway::new("sidecarset", Arc::new(Permissions::from_manifest(&manifest)), backend);
            let b = Build {
                name: plugin.to_string(),
                compiled,
                gateway,
                times: Vec::new(),
                answer: AdmissionResponse::default(),
            };
            // bench-admission.py's SidecarSet, through the plugin's defaulting webhook.
            let defaulted = review(&b, "default-sidecarset", &defaulting_request().to_string());
            mem.fake().seed(defaulted["object"].clone()).expect("seed the defaulted SidecarSet");
            b
        })
        .collect();

    let request = serde_json::from_str::<serde_json::Value>(POD_REVIEW).unwrap()["request"].clone();
    let pod = request["object"].clone();
    let request = request.to_string();
    let once = |b: &mut Build| {
        let t = Instant::now();
        let answer = review(b, "inject-pod", &request);
        b.times.push(t.elapsed());
        b.answer = serde_json::from_value(answer).expect("an AdmissionResponse");
    };
    // Warm, then the builds in turns of BATCH reviews: each sees the machine as the
    // other does, a second apart at most.
    for b in &mut builds {
        (0..BATCH).for_each(|_| once(b));
        b.times.clear();
    }
    for _ in 0..rounds.div_ceil(BATCH) {
        for b in &mut builds {
            (0..BATCH).for_each(|_| once(b));
        }
    }
    let median = |b: &mut Build| {
        b.times.sort();
        b.times[b.times.len() / 2].as_secs_f64() * 1e6
    };
    let medians: Vec<f64> = builds.iter_mut().map(median).collect();
    for b in &builds {
        assert!(b.answer.allowed && b.answer.patch.is_some(), "{}: sidecars injected: {:?}", b.name, b.answer);
    }
    for (b, m) in builds.iter().zip(&medians) {
        println!(
            "{}: {m:.1} µs per inject-pod review (median of {}; min {:.1} µs), answer {} bytes",
            b.name,
            b.times.len(),
            b.times[0].as_secs_f64() * 1e6,
            serde_json::to_string(&b.answer).unwrap().len()
        );
    }
    if let [a, b] = medians[..] {
        // Two patches may differ and still make the same Pod.
        let applied = |b: &Build| b.answer.apply(&pod).unwrap_or_else(|e| panic!("{}: {e}", b.name));
        let same = if applied(&builds[0]) == applied(&builds[1]) { "the same Pod" } else { "DIFFERENT Pods" };
        println!("second / first: {:.3}; {same}", b / a);
    }
}

/// Reviews each build answers in a turn.
const BATCH: usize = 50;

fn defaulting_request() -> serde_json::Value {
    let sidecarset = serde_json::json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": "bench-sidecars"},
        "spec": {"namespace": "bench-admission", "selector": {"matchLabels": {"app": "web"}},
            "containers": [
                {"name": "proxy", "image": "envoy:1.31", "transferEnv": [{"sourceContainerName": "app", "envName": "TZ"}]},
                {"name": "logs", "image": "busybox:1.36", "podInjectPolicy": "AfterAppContainer",
                 "shareVolumePolicy": {"type": "enabled"}}]}});
    serde_json::json!({"uid": "d", "operation": "CREATE", "name": "bench-sidecars",
        "kind": {"group": "apps.kruise.io", "version": "v1alpha1", "kind": "SidecarSet"}, "object": sidecarset})
}
