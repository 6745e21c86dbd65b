//! What a reload's Cranelift compile costs the host when it reuses the functions of
//! the plugin's previous compile (`runtime::reuse`): OLD compiled first, then NEW as
//! its next version, against NEW compiled with reuse off (and OLD, for what keeping its
//! functions adds to a first compile). ROUNDS rounds (3), each on a new runtime; medians in
//! ms, and the memory the store keeps after NEW.
//!
//!   cargo run --profile bench -p wasmop --example reload_compile -- OLD.wasm NEW.wasm [ROUNDS]
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
    let rounds = args.get(2).map_or(3, |r| r.parse().expect("ROUNDS: a number"));
    let off = runtime(0);
    let alone = median((0..rounds).map(|_| ms(&off, &new)).collect());
    let old_alone = median((0..rounds).map(|_| ms(&off, &old)).collect());
    let (mut first, mut next, mut counts, mut kept) = (vec![], vec![], (0, 0), 0);
    for _ in 0..rounds {
        let rt = runtime(RuntimeConfig::default().reuse_max_bytes);
        first.push(ms(&rt, &old));
        let before = rt.reused_functions();
        next.push(ms(&rt, &new));
        let after = rt.reused_functions();
        counts = (after.0 - before.0, after.1 - before.1);
        kept = after.2;
    }
    println!(
        "NEW alone: {alone} ms | OLD alone: {old_alone} ms, with reuse on: {} ms | NEW after OLD: {} ms, {} functions reused, {} compiled; \
         {:.1} MiB kept",
        median(first),
        median(next),
        counts.0,
        counts.1,
        kept as f64 / (1 << 20) as f64
    );
}
