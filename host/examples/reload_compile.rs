//! What a reload's Cranelift compile costs the host when it reuses the functions of
//! the plugin's previous compile (`runtime::reuse`): OLD compiled first, then NEW as
//! its next version, against NEW compiled with reuse off. Three rounds, each on a new
//! runtime; medians in ms.
//!
//!   cargo run --profile bench -p wasmop --example reload_compile -- OLD.wasm NEW.wasm
//!
//! The compiles are the ones a reload of a webhook plugin makes (`compile_optimizing`,
//! one thread), so OLD and NEW must be plugins the host would load.
use std::time::Instant;
use wasmop::runtime::{Compiler, Runtime, RuntimeConfig};

fn runtime(reuse_max_bytes: usize) -> Runtime {
    let cfg = RuntimeConfig { max_instances: 2, compiler: Compiler::Optimizing, reuse_max_bytes, ..Default::default() };
    Runtime::new(cfg).expect("runtime")
}

fn ms(rt: &Runtime, bytes: &[u8]) -> u128 {
    let t = Instant::now();
    rt.compile_optimizing("plugin", bytes).expect("compile");
    t.elapsed().as_millis()
}

fn median(mut v: Vec<u128>) -> u128 {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [old, new] = [&args[0], &args[1]].map(|p| std::fs::read(p).expect("plugin file"));
    let off = runtime(0);
    let alone = median((0..3).map(|_| ms(&off, &new)).collect());
    let (mut first, mut next, mut counts) = (vec![], vec![], (0, 0));
    for _ in 0..3 {
        let rt = runtime(RuntimeConfig::default().reuse_max_bytes);
        first.push(ms(&rt, &old));
        let before = rt.reused_functions();
        next.push(ms(&rt, &new));
        let after = rt.reused_functions();
        counts = (after.0 - before.0, after.1 - before.1);
    }
    println!(
        "NEW alone: {alone} ms | OLD with reuse on: {} ms | NEW after OLD: {} ms, {} functions reused, {} compiled",
        median(first),
        median(next),
        counts.0,
        counts.1
    );
}
