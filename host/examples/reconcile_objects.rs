//! What one reconcile costs in wasm, for A/B runs of plugin builds: reconciles the
//! first object of a JSON list with the plugin given, on the in-memory cluster seeded
//! with the rest, and prints the median time per reconcile and the writes it made.
//!
//! Why: a cluster benchmark tells that a plugin build costs more CPU, not where; this
//! times the plugin's reconcile alone, with instantiation and the host's JSON both
//! ways, so two builds can be compared in seconds (or under `valgrind --tool=callgrind`,
//! which counts instructions whatever else the machine does).
//!
//!   cargo run --profile bench -p wasmop --example reconcile_objects -- PLUGIN.wasm WORLD.json [ROUNDS]
//!
//! `WORLD.json` for the SidecarSet plugin: `cargo run --release -p sidecarset --example
//! reconcile_steady 2000 --dump WORLD.json`. Caveat: the host's watch caches are not
//! in the figure (the in-memory cluster answers lists instead).

use std::sync::Arc;
use std::time::{Duration, Instant};
use wasmop::gateway::{Backend, Gateway, MemoryBackend, Permissions};
use wasmop::runtime::{Compiler, Limits, Runtime, RuntimeConfig};
use wasmop_sdk::ObjectRef;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, plugin, world, ..] = args.as_slice() else {
        eprintln!("usage: reconcile_objects PLUGIN.wasm WORLD.json [ROUNDS]");
        std::process::exit(2);
    };
    let rounds: usize = args.get(3).and_then(|n| n.parse().ok()).unwrap_or(20);
    let world: Vec<serde_json::Value> = serde_json::from_slice(&std::fs::read(world).expect("read WORLD.json"))
        .expect("WORLD.json is a JSON list of objects");
    let (object, seed) = world.split_first().expect("WORLD.json names at least the object to reconcile");

    let tokio = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    // Cranelift, as a host serves a plugin once it has tiered up.
    let rt = Arc::new(Runtime::new(RuntimeConfig { compiler: Compiler::Optimizing, ..Default::default() }).unwrap());
    let bytes = std::fs::read(plugin).expect("read the plugin");
    let name = std::path::Path::new(plugin).file_stem().and_then(|s| s.to_str()).unwrap_or("plugin");
    let compiled = rt.compile_as(wasmop::runtime::Format::Component, name, name, &bytes).expect("compile");
    let manifest = tokio.block_on(rt.manifest(&compiled, "bench", "", &Limits::default())).expect("manifest");
    let mem = Arc::new(MemoryBackend::default());
    for s in seed {
        mem.fake().seed(s.clone()).unwrap();
    }
    let object = mem.fake().seed(object.clone()).unwrap();
    let key = ObjectRef::of_json(&object).expect("the object's kind and name");
    let backend: Arc<dyn Backend> = mem.clone();
    let gateway = Gateway::new(name, Arc::new(Permissions::from_manifest(&manifest)), backend);
    let limits = Limits::default();
    let once = || {
        // The object as stored now (a first reconcile may have written its status).
        let current = mem.fake().object(&key).map(|o| o.to_string());
        let r = tokio.block_on(rt.reconcile(&compiled, gateway.clone(), &key, current.as_deref(), "", &limits));
        r.expect("no fault").expect("reconcile ok");
    };
    once();
    let first_writes = mem.fake().take_writes().len();
    let mut times: Vec<Duration> = (0..rounds)
        .map(|_| {
            let t = Instant::now();
            once();
            t.elapsed()
        })
        .collect();
    times.sort();
    let writes = mem.fake().take_writes().len();
    println!(
        "{name}: {:.2} ms per reconcile (median of {rounds}; min {:.2} ms), {} objects seeded, writes: first {first_writes}, then {writes}",
        times[rounds / 2].as_secs_f64() * 1e3,
        times[0].as_secs_f64() * 1e3,
        seed.len() + 1,
    );
}
