//! `wasmop pack`: plugin files → a ConfigMap the host loads (`kubectl apply -f -`).

use anyhow::{Context, bail};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// The most a ConfigMap may hold (data + binaryData), less room for settings and metadata.
const CONFIGMAP_BUDGET: usize = (1 << 20) - (16 << 10);

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Gzip {
    /// Compress only when the plugins would not fit uncompressed.
    Auto,
    Always,
    Never,
}

#[derive(clap::Args)]
pub struct PackArgs {
    /// Plugin files; each becomes the key NAME.wasm (or NAME.wasm.gz), NAME from the file
    /// name; a script plugin NAME.js stays text under `data`, so `kubectl edit` shows it.
    #[arg(required = true)]
    plugins: Vec<PathBuf>,
    /// The ConfigMap's name.
    #[arg(long)]
    name: String,
    /// The ConfigMap's namespace (where the host looks for plugin ConfigMaps).
    #[arg(long)]
    namespace: Option<String>,
    #[arg(long, value_enum, default_value_t = Gzip::Auto)]
    gzip: Gzip,
    /// Settings for one plugin, as NAME=FILE (repeatable).
    #[arg(long = "settings", value_name = "NAME=FILE")]
    settings: Vec<String>,
    /// An annotation on the ConfigMap, e.g. `wasmop.io/deadline-seconds=10` or
    /// `wasmop.io/allowed-namespaces=team-a` (repeatable; see SECURITY.md).
    #[arg(long = "annotation", value_name = "KEY=VALUE")]
    annotation: Vec<String>,
}

fn gz(bytes: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(bytes)?;
    Ok(e.finish()?)
}

pub fn pack(args: PackArgs) -> anyhow::Result<ExitCode> {
    let mut plugins = Vec::new();
    let mut scripts = std::collections::BTreeMap::new();
    for path in &args.plugins {
        let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        let file = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if let Some(name) = file.strip_suffix(".js").filter(|n| !n.is_empty()) {
            let text = String::from_utf8(bytes).with_context(|| format!("{} is not UTF-8 text", path.display()))?;
            scripts.insert(format!("{name}.js"), (name.to_owned(), text));
            continue;
        }
        if !bytes.starts_with(b"\0asm") {
            bail!("{} is not a WebAssembly file", path.display());
        }
        let name = file
            .strip_suffix(".wasm")
            .with_context(|| format!("{}: plugin files must end in .wasm (or .js for a script)", path.display()))?
            .to_owned();
        plugins.push((name, bytes));
    }
    // The ConfigMap's `data`: settings documents and scripts, as text.
    let mut data = std::collections::BTreeMap::new();
    let mut annotations_sha = Vec::new();
    for s in &args.settings {
        let (name, file) = s.split_once('=').with_context(|| format!("--settings {s}: expected NAME=FILE"))?;
        let text = std::fs::read_to_string(file).with_context(|| format!("cannot read {file}"))?;
        data.insert(format!("{name}.settings.yaml"), text);
    }
    for (key, (name, text)) in &scripts {
        annotations_sha.push((name.clone(), hex::encode(Sha256::digest(text.as_bytes()))));
        data.insert(key.clone(), text.clone());
    }
    let plain: usize =
        plugins.iter().map(|(_, b)| b.len()).sum::<usize>() + data.values().map(String::len).sum::<usize>();
    let compress = match args.gzip {
        Gzip::Always => true,
        Gzip::Never => false,
        Gzip::Auto => plain > CONFIGMAP_BUDGET,
    };
    let mut binary = serde_json::Map::new();
    let mut annotations = serde_json::Map::new();
    for a in &args.annotation {
        let (k, v) = a.split_once('=').with_context(|| format!("--annotation {a}: expected KEY=VALUE"))?;
        annotations.insert(k.to_owned(), v.into());
    }
    for (name, sha) in annotations_sha {
        annotations.insert(format!("wasmop.io/sha256.{name}"), sha.into());
    }
    let mut total = data.values().map(String::len).sum::<usize>();
    for (name, bytes) in &plugins {
        annotations.insert(format!("wasmop.io/sha256.{name}"), hex::encode(Sha256::digest(bytes)).into());
        let (key, data) =
            if compress { (format!("{name}.wasm.gz"), gz(bytes)?) } else { (format!("{name}.wasm"), bytes.clone()) };
        total += data.len();
        use base64::Engine;
        binary.insert(key, base64::engine::general_purpose::STANDARD.encode(&data).into());
    }
    if total > CONFIGMAP_BUDGET {
        bail!(
            "the plugins take {total} bytes{}, over the {CONFIGMAP_BUDGET} bytes a ConfigMap can hold; {}",
            if compress { " even gzipped" } else { "" },
            if compress { "split them over several ConfigMaps or shrink them" } else { "use --gzip auto or always" }
        );
    }
    let mut metadata = serde_json::json!({
        "name": args.name,
        "labels": {wasmop::sources::PLUGIN_LABEL: "true"},
        "annotations": annotations,
    });
    if let Some(ns) = args.namespace {
        metadata["namespace"] = ns.into();
    }
    let mut cm =
        serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "binaryData": binary});
    if !data.is_empty() {
        cm["data"] = serde_json::to_value(data)?;
    }
    print!("{}", serde_yaml::to_string(&cm)?);
    Ok(ExitCode::SUCCESS)
}
