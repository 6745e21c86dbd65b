//! The `wasmop` binary: `run` the host, `inspect` a plugin, or `reconcile` offline.

mod cli;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let args = cli::Cli::parse();
    // kube's TLS stack links more than one rustls crypto backend; pick one explicitly.
    let _ = rustls::crypto::ring::default_provider().install_default();
    // A worker about to sleep tells the idle poller (`run --idle-poll-us`; nothing when off).
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_park(wasmop::idle_poll::parked)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match rt.block_on(cli::dispatch(args)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
