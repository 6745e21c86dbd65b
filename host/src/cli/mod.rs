//! Command-line parsing and dispatch. Every `run` flag can also be set by environment
//! variable (`WASMOP_...`), the way a Deployment usually configures a controller.

mod election;
mod expect;
mod inspect;
mod new;
mod offline;
mod pack;
mod rbac;
mod run;
mod serve;
mod webhooks;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "wasmop", version, about = "Run Kubernetes reconcilers as sandboxed WebAssembly components")]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the host: load plugins and reconcile against the cluster in KUBECONFIG (or in-cluster).
    Run(Box<run::RunArgs>),
    /// Print a plugin's manifest, imports, exports and size.
    Inspect {
        /// The plugin (.wasm or .wasm.gz).
        plugin: PathBuf,
        /// A settings document to compute the manifest with.
        #[arg(long)]
        settings: Option<PathBuf>,
    },
    /// Run one reconcile offline against an in-memory cluster and print what the plugin wrote.
    Reconcile(offline::ReconcileArgs),
    /// Print a ConfigMap (YAML) carrying plugins, for `kubectl apply -f -`.
    Pack(pack::PackArgs),
    /// Print Mutating/ValidatingWebhookConfigurations (YAML) for plugins' admission handlers.
    WebhookConfig(webhooks::WebhookConfigArgs),
    /// Print the ServiceAccount and least-privilege RBAC a plugin needs (apply it to let the host run the plugin as itself).
    Rbac(rbac::RbacArgs),
    /// Create a plugin project (Rust or JavaScript) that builds and passes its test as generated.
    New(new::NewArgs),
}

pub async fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Run(args) => run::run(*args).await,
        Command::Inspect { plugin, settings } => inspect::inspect(&plugin, settings.as_deref()).await,
        Command::Reconcile(args) => offline::reconcile(args).await,
        Command::Pack(args) => pack::pack(args),
        Command::WebhookConfig(args) => webhooks::webhook_config(args).await,
        Command::Rbac(args) => rbac::rbac(args).await,
        Command::New(args) => new::new(args),
    }
}

/// Reads a plugin file (gunzipping it if needed) and compiles it with a small runtime:
/// a component, or a script (`.js`) on the JavaScript engine.
pub(crate) async fn load(
    path: &std::path::Path,
) -> anyhow::Result<(std::sync::Arc<wasmop::runtime::Runtime>, wasmop::runtime::Compiled, Vec<u8>)> {
    use anyhow::Context;
    let raw = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let bytes = wasmop::sources::bytes::decode(&raw).with_context(|| path.display().to_string())?;
    let rt = std::sync::Arc::new(wasmop::runtime::Runtime::new(wasmop::runtime::RuntimeConfig {
        max_instances: 4,
        // One-shot commands: the quickest compile wins.
        compiler: wasmop::runtime::Compiler::Baseline,
        ..Default::default()
    })?);
    let file = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    // Anything else is taken for a component (and refused with the reason if it is not).
    let (name, format) = wasmop::runtime::Format::of_key(file).unwrap_or(("plugin", Default::default()));
    let compiled = {
        let (rt, b, name) = (rt.clone(), bytes.clone(), name.to_owned());
        tokio::task::spawn_blocking(move || rt.compile_as(format, &name, &name, &b)).await??
    };
    Ok((rt, compiled, bytes))
}

/// The plugin a file is, as the host would name it (`memcached.wasm.gz` → `memcached`,
/// `memcached-js.js` → `memcached-js`); None for a file no source would load.
pub(crate) fn plugin_name(path: &std::path::Path) -> Option<String> {
    let file = path.file_name()?.to_str()?;
    wasmop::runtime::Format::of_key(file).map(|(name, _)| name.to_owned())
}

pub(crate) fn read_settings(path: Option<&std::path::Path>) -> anyhow::Result<String> {
    use anyhow::Context;
    match path {
        Some(p) => std::fs::read_to_string(p).with_context(|| format!("cannot read settings {}", p.display())),
        None => Ok(String::new()),
    }
}
