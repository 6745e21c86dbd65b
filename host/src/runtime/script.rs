//! Script plugins: a plugin that is JavaScript text, run on the one engine component
//! the host carries (`engines/js`, built by `make engines`).
//!
//! Flow: [`Runtime::compile_as`] with [`Format::Script`] checks that the text is UTF-8
//! and pairs it with the engine's code, compiled once per host (Cranelift, or from
//! the code cache; Winch for the one-shot commands) and shared by every script plugin, so a script plugin costs its
//! text and its manifest, not a compile. Each instance of the engine reads its
//! plugin's script through the `script` import and evaluates it on its first call; a
//! script that does not evaluate fails `manifest` with the file, line and column, so
//! the registry rejects the version and the previous one keeps serving. Limits,
//! permissions, faults, Events, metrics and hot reload are the compiled plugins' own:
//! the engine is just another component to them.
//!
//! Where the engine comes from: `RuntimeConfig::script_engine`, else
//! `$WASMOP_JS_ENGINE`, else `wasmop-js-engine.wasm` beside the executable (as the
//! image installs it) or in `../plugins/` from it (as `make` builds it). The engine's
//! sha256 is logged on first use.

use super::bindings::wasmop::operator::script;
use super::host::HostState;
use super::tiers::Code;
use super::{Compiled, Runtime, RuntimeError};
use sha2::Digest as _;
use std::path::PathBuf;
use std::sync::Arc;

/// What plugin bytes are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Format {
    /// A WebAssembly component (`NAME.wasm`, `NAME.wasm.gz`).
    #[default]
    Component,
    /// JavaScript text (`NAME.js`, `NAME.js.gz`), run on the script engine.
    Script,
}

impl Format {
    /// The plugin a file or ConfigMap key names, and its format; None for other files
    /// (settings, notes).
    pub fn of_key(key: &str) -> Option<(&str, Format)> {
        let strip = |ext: &str| key.strip_suffix(&format!("{ext}.gz")).or_else(|| key.strip_suffix(ext));
        match (strip(".wasm"), strip(".js")) {
            (Some(name), _) if !name.is_empty() => Some((name, Format::Component)),
            (_, Some(name)) if !name.is_empty() => Some((name, Format::Script)),
            _ => None,
        }
    }
}

/// One script plugin's source, as the engine reads it.
pub(super) struct Script {
    pub file: String,
    pub text: String,
}

impl script::Host for HostState {
    async fn source(&mut self) -> wasmtime::Result<(String, String)> {
        Ok(match &self.script {
            Some(s) => (s.file.clone(), s.text.clone()),
            None => (String::new(), String::new()),
        })
    }
}

/// The engine file's default place; see the module docs.
fn engine_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("WASMOP_JS_ENGINE") {
        return Some(p.into());
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [dir.join("wasmop-js-engine.wasm"), dir.join("../plugins/wasmop-js-engine.wasm")].into_iter().find(|p| p.is_file())
}

impl Runtime {
    /// [`Runtime::compile`] for bytes of either format; `name` names the plugin in a
    /// script's messages (`memcached.js:3:8`), `line` is whose earlier Cranelift
    /// compiles a component's may reuse (`Runtime::compile`).
    pub fn compile_as(&self, format: Format, name: &str, line: &str, bytes: &[u8]) -> Result<Compiled, RuntimeError> {
        match format {
            Format::Component => self.compile(line, bytes),
            Format::Script => {
                let text = std::str::from_utf8(bytes)
                    .map_err(|e| RuntimeError::NotAComponent(format!("{name}.js is not UTF-8 text: {e}")))?;
                let script = Script { file: format!("{name}.js"), text: text.to_owned() };
                Ok(Compiled::script(self.script_engine()?, Arc::new(script), bytes.len()))
            }
        }
    }

    /// The engine's code, compiled on first use and kept.
    fn script_engine(&self) -> Result<Arc<Code>, RuntimeError> {
        let mut slot = self.script_engine.lock().unwrap();
        if let Some(code) = &*slot {
            return Ok(code.clone());
        }
        let path = self.config.script_engine.clone().or_else(engine_path).ok_or_else(|| {
            RuntimeError::NotAComponent(
                "script plugins need the JavaScript engine: wasmop-js-engine.wasm was not found beside the \
                 executable (build it with `make engines`, or set WASMOP_JS_ENGINE)"
                    .into(),
            )
        })?;
        let bytes = std::fs::read(&path).map_err(|e| {
            RuntimeError::NotAComponent(format!("cannot read the JavaScript engine {}: {e}", path.display()))
        })?;
        let t = std::time::Instant::now();
        let code = match (&self.baseline, self.config.compiler) {
            // One-shot commands (`wasmop inspect`, `reconcile`, `rbac`) run one call or
            // two: Winch's code is there five times sooner.
            (Some(baseline), super::Compiler::Baseline) => {
                let component = wasmtime::component::Component::new(&baseline.engine, &bytes)
                    .map_err(|e| RuntimeError::Compile(format!("the JavaScript engine: {e:#}")))?;
                baseline.code(&component, false)?
            }
            // A host compiles it once and runs every script plugin on it: Cranelift.
            _ => {
                let component = match self.cached(&bytes) {
                    Some(c) => c,
                    None => self.compile_optimized(None, &bytes)?,
                };
                self.optimizing.code(&component, true)?
            }
        };
        let code = Arc::new(code);
        tracing::info!(
            path = %path.display(),
            sha256 = %hex::encode(sha2::Sha256::digest(&bytes)),
            ms = t.elapsed().as_millis() as u64,
            "JavaScript engine ready"
        );
        *slot = Some(code.clone());
        Ok(code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_plugins_by_their_format() {
        assert_eq!(Format::of_key("memcached.wasm"), Some(("memcached", Format::Component)));
        assert_eq!(Format::of_key("memcached.wasm.gz"), Some(("memcached", Format::Component)));
        assert_eq!(Format::of_key("memcached-js.js"), Some(("memcached-js", Format::Script)));
        assert_eq!(Format::of_key("memcached-js.js.gz"), Some(("memcached-js", Format::Script)));
        for other in ["memcached.settings.yaml", ".js", ".wasm", "README", "x.json", "x.mjs"] {
            assert_eq!(Format::of_key(other), None, "{other}");
        }
    }

    #[test]
    fn a_script_that_is_not_text_is_refused_with_the_reason() {
        let rt = Runtime::new(super::super::RuntimeConfig { max_instances: 2, ..Default::default() }).unwrap();
        let e = rt.compile_as(Format::Script, "bad", "bad", &[0xff, 0xfe, 0]).err().unwrap();
        assert!(e.to_string().contains("bad.js is not UTF-8 text"), "{e}");
    }
}
