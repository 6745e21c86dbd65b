//! `wasmop reconcile`: one reconcile against an in-memory cluster seeded from YAML. No
//! apiserver needed; prints every write and Event the plugin made.

use anyhow::{Context, bail};
use serde::Deserialize;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use wasmop::gateway::{Backend, Gateway, MemoryBackend, ObjectRef, Permissions};
use wasmop::runtime::Limits;
use wasmop_sdk::fake::Write;

#[derive(clap::Args)]
pub struct ReconcileArgs {
    /// The plugin (.wasm or .wasm.gz, or a script plugin .js).
    plugin: PathBuf,
    /// The primary object to reconcile (YAML or JSON).
    #[arg(long)]
    object: PathBuf,
    /// Other objects that already exist (YAML, several documents per file allowed).
    #[arg(long)]
    state: Vec<PathBuf>,
    /// The plugin's settings document.
    #[arg(long)]
    settings: Option<PathBuf>,
    /// What the output must contain (YAML: `result`, `writes`, `events`, each a part of
    /// the printed document); the command fails naming the first difference. A
    /// plugin's unit test on the in-memory cluster, in any language.
    #[arg(long)]
    expect: Option<PathBuf>,
}

fn read_docs(path: &PathBuf) -> anyhow::Result<Vec<serde_json::Value>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut docs = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let v = serde_json::Value::deserialize(doc).with_context(|| format!("{} is not valid YAML", path.display()))?;
        if !v.is_null() {
            docs.push(v);
        }
    }
    Ok(docs)
}

pub async fn reconcile(args: ReconcileArgs) -> anyhow::Result<ExitCode> {
    let (rt, compiled, _) = super::load(&args.plugin).await?;
    let settings = super::read_settings(args.settings.as_deref())?;
    let name = super::plugin_name(&args.plugin).unwrap_or_else(|| "plugin".to_owned());
    let limits = Limits::default();
    let manifest = rt.manifest(&compiled, &name, &settings, &limits).await?;

    let mem = Arc::new(MemoryBackend::default());
    for path in &args.state {
        for doc in read_docs(path)? {
            mem.fake().seed(doc).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        }
    }
    let mut objects = read_docs(&args.object)?;
    if objects.len() != 1 {
        bail!("{} must hold exactly one object, found {}", args.object.display(), objects.len());
    }
    let object = mem.fake().seed(objects.remove(0)).map_err(|e| anyhow::anyhow!("{}: {e}", args.object.display()))?;
    let key = ObjectRef::of_json(&object).context("object needs apiVersion, kind and metadata.name")?;
    if key.kind_ref() != manifest.primary {
        bail!("plugin reconciles {}, but the object is a {}", manifest.primary, key.kind_ref());
    }

    let backend: Arc<dyn Backend> = mem.clone();
    let gateway = Gateway::new(&name, Arc::new(Permissions::from_manifest(&manifest)), backend);
    let result = rt.reconcile(&compiled, gateway, &key, Some(&object.to_string()), &settings, &limits).await?;

    let writes: Vec<serde_json::Value> = mem
        .fake()
        .take_writes()
        .into_iter()
        .map(|w| match w {
            Write::Create(o) => serde_json::json!({"create": o}),
            Write::Update(o) => serde_json::json!({"update": o}),
            Write::UpdateStatus(o) => serde_json::json!({"updateStatus": o}),
            Write::Delete(r) => serde_json::json!({"delete": r}),
        })
        .collect();
    let events: Vec<serde_json::Value> = mem
        .fake()
        .events()
        .into_iter()
        .map(|e| serde_json::json!({"type": format!("{:?}", e.event_type), "reason": e.reason, "message": e.message, "regarding": e.regarding}))
        .collect();
    let (outcome, code) = match &result {
        Ok(a) => (
            serde_json::json!({"ok": {"requeueAfterMs": a.requeue_after.map(|d| d.as_millis() as u64)}}),
            ExitCode::SUCCESS,
        ),
        Err(e) => (serde_json::json!({"error": {"message": e.message, "retry": e.retry}}), ExitCode::from(2)),
    };
    let out = serde_json::json!({"result": outcome, "writes": writes, "events": events});
    print!("{}", serde_yaml::to_string(&out)?);
    if let Some(path) = &args.expect {
        let mut expected = read_docs(path)?;
        if expected.len() != 1 {
            bail!("{} must hold exactly one document, found {}", path.display(), expected.len());
        }
        if let Some(why) = super::expect::mismatch(&out, &expected.remove(0), "") {
            eprintln!("not as expected by {}: {why}", path.display());
            return Ok(ExitCode::from(1));
        }
        eprintln!("as expected by {}", path.display());
    }
    Ok(code)
}
