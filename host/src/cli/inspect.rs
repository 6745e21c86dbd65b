//! `wasmop inspect`: what a plugin is, before anyone deploys it.

use sha2::{Digest, Sha256};
use std::path::Path;
use std::process::ExitCode;
use wasmop::gateway::Permissions;
use wasmop::runtime::Limits;

pub async fn inspect(path: &Path, settings: Option<&Path>) -> anyhow::Result<ExitCode> {
    let (rt, compiled, bytes) = super::load(path).await?;
    let settings = super::read_settings(settings)?;
    let name = super::plugin_name(path).unwrap_or_else(|| "plugin".to_owned());
    let name = name.as_str();
    let manifest = rt.manifest(&compiled, name, &settings, &Limits::default()).await?;
    let (imports, exports) = compiled.interfaces();
    let perms = Permissions::from_manifest(&manifest);
    let grants: Vec<serde_json::Value> = perms
        .grants()
        .map(|(k, v)| serde_json::json!({"kind": k.to_string(), "verbs": v.iter().map(|v| v.as_str()).collect::<Vec<_>>()}))
        .collect();
    let out = serde_json::json!({
        "file": path.display().to_string(),
        "format": if compiled.is_script() { "script (JavaScript, run on the host's engine)" } else { "component" },
        "size": bytes.len(),
        "sha256": hex::encode(Sha256::digest(&bytes)),
        "manifest": manifest,
        "effectivePermissions": grants,
        "imports": imports,
        "exports": exports,
    });
    print!("{}", serde_yaml::to_string(&out)?);
    Ok(ExitCode::SUCCESS)
}
