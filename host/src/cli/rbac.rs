//! `wasmop rbac`: the ServiceAccount and least-privilege RBAC a cluster admin applies to
//! let the host run one plugin as itself (see [`wasmop::rbac`]).

use anyhow::{Context, bail};
use std::path::PathBuf;
use std::process::ExitCode;
use wasmop::gateway::Identity;
use wasmop::runtime::Limits;

#[derive(clap::Args)]
pub struct RbacArgs {
    /// The plugin (.wasm or .wasm.gz).
    plugin: PathBuf,
    /// A settings document to compute the manifest with (the one the plugin will run with).
    #[arg(long)]
    settings: Option<PathBuf>,
    /// The plugin's name on the host [default: the file name without .wasm or .wasm.gz].
    #[arg(long)]
    name: Option<String>,
    /// Namespace of the plugin's ServiceAccount.
    #[arg(long, default_value = "wasmop-system")]
    namespace: String,
    /// The plugin's ServiceAccount [default: the plugin's name].
    #[arg(long)]
    service_account: Option<String>,
    /// NAMESPACE/NAME of the host's ServiceAccount, which impersonates the plugin's.
    #[arg(long, default_value = "wasmop-system/wasmop")]
    host_service_account: String,
}

pub async fn rbac(args: RbacArgs) -> anyhow::Result<ExitCode> {
    let name = match &args.name {
        Some(n) => n.clone(),
        None => super::plugin_name(&args.plugin).with_context(|| {
            format!("{}: plugin files end in .wasm, .wasm.gz or .js (or pass --name)", args.plugin.display())
        })?,
    };
    let Some((host_ns, host_name)) = args.host_service_account.split_once('/') else {
        bail!("--host-service-account {:?} is not NAMESPACE/NAME", args.host_service_account);
    };
    let account = Identity::new(&args.namespace, args.service_account.as_deref().unwrap_or(&name));
    let host = Identity::new(host_ns, host_name);
    if account == host {
        bail!("{account} is the host's own: a plugin never acts as the host (pick another --service-account)");
    }

    let (rt, compiled, _) = super::load(&args.plugin).await?;
    let settings = super::read_settings(args.settings.as_deref())?;
    let manifest = rt.manifest(&compiled, &name, &settings, &Limits::default()).await?;
    let rbac = wasmop::rbac::plugin_rbac(&name, &manifest, &account, &host);
    print!("{}", wasmop::rbac::to_yaml(&rbac)?);
    Ok(ExitCode::SUCCESS)
}
