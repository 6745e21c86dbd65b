//! How long each of the host's compilers takes on plugin files: the figures behind the
//! tiered default (`--plugin-compiler`). Three compiles per file and compiler, in ms.
//!
//!   cargo run --profile bench -p wasmop --example compile_time -- target/plugins/*.wasm

use std::time::Instant;
use wasmtime::{Config, Engine, OptLevel, Strategy};

fn main() -> anyhow::Result<()> {
    println!("| plugin | size | Cranelift | Winch |");
    println!("|---|---|---|---|");
    for path in std::env::args().skip(1) {
        let bytes = std::fs::read(&path)?;
        let mut row = Vec::new();
        for strategy in [Strategy::Cranelift, Strategy::Winch] {
            let mut cfg = Config::new();
            cfg.wasm_component_model(true)
                .epoch_interruption(true)
                .strategy(strategy)
                .cranelift_opt_level(OptLevel::Speed);
            let engine = Engine::new(&cfg).map_err(|e| anyhow::anyhow!("{e}"))?;
            let mut ms = Vec::new();
            for _ in 0..3 {
                let t = Instant::now();
                wasmtime::component::Component::new(&engine, &bytes).map_err(|e| anyhow::anyhow!("{path}: {e}"))?;
                ms.push(t.elapsed().as_millis());
            }
            ms.sort();
            row.push(format!("{} ms ({}–{})", ms[1], ms[0], ms[2]));
        }
        let name = std::path::Path::new(&path).file_name().unwrap_or_default().to_string_lossy().into_owned();
        println!("| {name} | {} KiB | {} | {} |", bytes.len() / 1024, row[0], row[1]);
    }
    Ok(())
}
