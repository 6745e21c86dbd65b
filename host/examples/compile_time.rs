//! How long each of the host's compilers takes on plugin files: the figures behind the
//! tiered default (`--plugin-compiler`). Three compiles per file and compiler, in ms.
//!
//!   cargo run --profile bench -p wasmop --example compile_time -- target/plugins/*.wasm
//!
//! Columns: Cranelift on one thread (as the host compiles), the process's peak RSS
//! during it (the largest of three; Linux, VmHWM reset before each), Cranelift on every
//! core (wasmtime's default), and Winch. The one-thread compile runs first, but memory
//! an earlier file's compiles left with the allocator still counts: give one file per
//! run for a clean peak.

use std::time::Instant;
use wasmtime::{Config, Engine, OptLevel, Strategy};

fn main() -> anyhow::Result<()> {
    println!("| plugin | size | Cranelift, one thread | its peak RSS | Cranelift | Winch |");
    println!("|---|---|---|---|---|---|");
    let engines = [(Strategy::Cranelift, false), (Strategy::Cranelift, true), (Strategy::Winch, true)];
    for path in std::env::args().skip(1) {
        let bytes = std::fs::read(&path)?;
        let mut row = Vec::new();
        for (strategy, parallel) in engines {
            let mut cfg = Config::new();
            cfg.wasm_component_model(true)
                .epoch_interruption(true)
                .strategy(strategy)
                .parallel_compilation(parallel)
                .cranelift_opt_level(OptLevel::Speed);
            let engine = Engine::new(&cfg).map_err(|e| anyhow::anyhow!("{e}"))?;
            let mut ms = Vec::new();
            // None: VmHWM could not be reset, so it would be the whole run's peak.
            let mut peak = Some(0);
            for _ in 0..3 {
                // Why reset: VmHWM is the process's peak so far; "5" starts it again.
                let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
                let t = Instant::now();
                wasmtime::component::Component::new(&engine, &bytes).map_err(|e| anyhow::anyhow!("{path}: {e}"))?;
                ms.push(t.elapsed().as_millis());
                peak = peak.filter(|_| reset).map(|p| p.max(vm_hwm_kib()));
            }
            ms.sort();
            row.push(format!("{} ms ({}–{})", ms[1], ms[0], ms[2]));
            if strategy == Strategy::Cranelift && !parallel {
                row.push(peak.map_or("unknown".into(), |p| format!("{} MiB", p / 1024)));
            }
        }
        let name = std::path::Path::new(&path).file_name().unwrap_or_default().to_string_lossy().into_owned();
        println!("| {name} | {} KiB | {} |", bytes.len() / 1024, row.join(" | "));
    }
    Ok(())
}

/// The process's peak resident memory since the last reset, in KiB (0 if unknown).
fn vm_hwm_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap_or_default();
    line.split_whitespace().nth(1).and_then(|n| n.parse().ok()).unwrap_or(0)
}
