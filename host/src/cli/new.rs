//! `wasmop new NAME --lang rust|js`: a plugin project that builds and passes its test
//! as generated: a reconciler (ConfigMaps copied where an annotation says), its unit
//! test on the in-memory cluster, and `make test`, `make rbac`, `make deploy`.
//!
//! The files are templates under `host/templates/new/`, built into the binary, with
//! `{{name}}` (and, for Rust, `{{sdk}}`, the wasmop-sdk dependency) filled in.

use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    Rust,
    Js,
}

#[derive(clap::Args)]
pub struct NewArgs {
    /// The plugin's name: lowercase letters, digits and '-', starting with a letter.
    name: String,
    #[arg(long, value_enum, default_value_t = Lang::Rust)]
    lang: Lang,
    /// Where to create the project (default: ./NAME). Must not exist yet.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Rust: the wasmop-sdk crate to depend on, as a path (default: the SDK of the source
    /// tree this binary was built from, when it is there).
    #[arg(long)]
    sdk_path: Option<PathBuf>,
}

const JS: &[(&str, &str)] = &[
    ("{{name}}.js", include_str!("../../templates/new/js/plugin.js")),
    ("test/object.yaml", include_str!("../../templates/new/js/test/object.yaml")),
    ("test/expect.yaml", include_str!("../../templates/new/js/test/expect.yaml")),
    ("Makefile", include_str!("../../templates/new/js/Makefile")),
    ("README.md", include_str!("../../templates/new/js/README.md")),
    ("wasmop.d.ts", include_str!("../../../guest-sdk/js/wasmop.d.ts")),
];

const RUST: &[(&str, &str)] = &[
    ("Cargo.toml", include_str!("../../templates/new/rust/Cargo.toml")),
    ("src/lib.rs", include_str!("../../templates/new/rust/src/lib.rs")),
    ("Makefile", include_str!("../../templates/new/rust/Makefile")),
    ("README.md", include_str!("../../templates/new/rust/README.md")),
];

fn valid_name(name: &str) -> bool {
    name.len() <= 50
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

fn sdk_dependency(path: Option<&Path>) -> anyhow::Result<String> {
    let built_from = Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest-sdk");
    let path = match path {
        Some(p) => p.to_path_buf(),
        None if built_from.join("Cargo.toml").is_file() => built_from,
        None => bail!("pass --sdk-path: the path of wasmop's guest-sdk crate (wasmop-sdk is not on crates.io)"),
    };
    let path = path.canonicalize().with_context(|| format!("--sdk-path {}", path.display()))?;
    Ok(format!("{{ path = {:?} }}", path.display().to_string()))
}

pub fn new(args: NewArgs) -> anyhow::Result<ExitCode> {
    if !valid_name(&args.name) {
        bail!("{:?}: a plugin name is lowercase letters, digits and '-', starting with a letter", args.name);
    }
    let dir = args.dir.clone().unwrap_or_else(|| PathBuf::from(&args.name));
    if dir.exists() {
        bail!("{} already exists", dir.display());
    }
    let (files, sdk, lang) = match args.lang {
        Lang::Js => (JS, String::new(), "js"),
        Lang::Rust => (RUST, sdk_dependency(args.sdk_path.as_deref())?, "rust"),
    };
    let fill = |s: &str| {
        s.replace("{{name}}", &args.name)
            .replace("{{name_snake}}", &args.name.replace('-', "_"))
            .replace("{{sdk}}", &sdk)
            .replace("{{lang}}", lang)
    };
    for (rel, text) in files {
        let path = dir.join(fill(rel));
        std::fs::create_dir_all(path.parent().unwrap_or(&dir))?;
        std::fs::write(&path, fill(text)).with_context(|| format!("cannot write {}", path.display()))?;
    }
    println!("created {} ({lang}); next: cd {} && make test", dir.display(), dir.display());
    Ok(ExitCode::SUCCESS)
}
