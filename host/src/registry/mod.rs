//! The registry: which version of each plugin is serving.
//!
//! [`Registry::apply`] takes a [`PluginSpec`] (name, bytes, settings) and admits it only
//! after it compiled (off the async runtime, deduplicated by sha256 so the same bytes
//! loaded under many names compile once), type-checked against the contract, and
//! answered `manifest` for its settings, and after its primary kind and namespaces do
//! not collide with another plugin's. Then the swap is atomic: a reconcile that already
//! holds the old version finishes on it; the next one gets the new one. A rejected
//! version leaves the previous one serving.
//!
//! Controllers subscribe to [`RegistryEvent`]s to start, re-watch and stop.

mod ahead;
mod compiling;
mod manifest;
mod place;

pub use compiling::{MAX_RELOAD_INTERVAL, MIN_RELOAD_INTERVAL};
pub use manifest::Narrowing;
pub use place::Place;

use manifest::{check_handlers, narrow, narrow_handlers, overlaps, watch_set};
use place::claim;

use crate::gateway::Permissions;
use crate::metrics::{METRICS, labels};
use crate::runtime::{Compiled, Limits, Runtime, RuntimeError};
use arc_swap::ArcSwap;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};
use tokio::sync::broadcast;
use wasmop_sdk::{Handler, Manifest, ObjectRef};

/// One version of a plugin, as a source delivers it.
#[derive(Clone, Debug)]
pub struct PluginSpec {
    /// Unique among loaded plugins; the same bytes may be loaded under several names.
    /// A name belongs to the place that first loaded it (see [`Registry::apply`]).
    pub name: String,
    /// What `bytes` are: a component, or a script run on the JavaScript engine.
    pub format: crate::runtime::Format,
    pub bytes: Arc<[u8]>,
    /// The deployer's settings document (may be empty).
    pub settings: String,
    /// Where it came from, for logs and Events (`dir:/plugins/x.wasm`, `configmap:ns/cm#key`).
    pub origin: String,
    /// The object it came from (a ConfigMap), where rejections are reported as Events.
    pub origin_object: Option<wasmop_sdk::ObjectRef>,
    pub limits: Limits,
    /// What the operator narrowed the plugin to (beyond its own manifest).
    pub narrowing: Narrowing,
    /// The ServiceAccount the host acts as for this plugin (None: the host's own
    /// identity, only with `--plugin-identity host`).
    pub identity: Option<crate::gateway::Identity>,
}

/// A loaded, admitted version.
pub struct LoadedPlugin {
    pub name: String,
    pub sha256: String,
    pub settings: String,
    pub origin: String,
    /// The object it came from (a ConfigMap); None for a file.
    pub origin_object: Option<ObjectRef>,
    pub manifest: Manifest,
    /// Admission handlers, served at `/<name>/<handler>` (empty for reconcile-only plugins).
    pub handlers: Vec<Handler>,
    pub permissions: Arc<Permissions>,
    pub compiled: Arc<Compiled>,
    pub limits: Limits,
    pub narrowing: Narrowing,
    pub identity: Option<crate::gateway::Identity>,
    pub loaded_at: SystemTime,
}

/// The swappable current version of one plugin.
pub type Handle = Arc<ArcSwap<LoadedPlugin>>;

#[derive(Clone)]
pub enum RegistryEvent {
    /// A plugin was loaded for the first time, or replaced. `watches_changed` is true
    /// when its primary, owned or watched kinds or its namespaces differ from before.
    Upserted {
        name: String,
        handle: Handle,
        watches_changed: bool,
    },
    Removed {
        name: String,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error("{0}")]
    Conflict(String),
    #[error("admission handlers: {0}")]
    Handlers(String),
    #[error("narrowed by the operator: {0}")]
    Narrowed(String),
}

impl LoadError {
    pub fn kind(&self) -> &'static str {
        match self {
            LoadError::Runtime(e) => e.kind(),
            LoadError::Conflict(_) => "conflict",
            LoadError::Handlers(_) => "handlers",
            LoadError::Narrowed(_) => "narrowed",
        }
    }
}

pub struct Registry {
    runtime: Arc<Runtime>,
    plugins: Mutex<HashMap<String, Handle>>,
    /// Compiled code by sha256; weak so code no plugin uses is freed.
    compiled: Mutex<HashMap<[u8; 32], Weak<Compiled>>>,
    /// One compile at a time, one of a version that came in a loop, and one background
    /// tier-up (see `compiling`).
    compiling: Arc<tokio::sync::Semaphore>,
    looping: Arc<tokio::sync::Semaphore>,
    /// Code whose plugin is loading a newer version (its tier-up waits, see `compiling`).
    replacing: Arc<compiling::Replacing>,
    optimizing: Arc<tokio::sync::Semaphore>,
    /// A reload's compile ahead, held until its thread ends, even one given up on
    /// (see `ahead`).
    ahead: Arc<tokio::sync::Semaphore>,
    events: broadcast::Sender<RegistryEvent>,
}

impl Registry {
    pub fn new(runtime: Arc<Runtime>) -> Arc<Self> {
        Arc::new(Registry {
            runtime,
            plugins: Mutex::default(),
            compiled: Mutex::default(),
            compiling: Arc::new(tokio::sync::Semaphore::new(1)),
            looping: Arc::new(tokio::sync::Semaphore::new(1)),
            replacing: Default::default(),
            optimizing: Arc::new(tokio::sync::Semaphore::new(1)),
            ahead: Arc::new(tokio::sync::Semaphore::new(1)),
            events: broadcast::channel(1024).0,
        })
    }

    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    pub fn subscribe(&self) -> broadcast::Receiver<RegistryEvent> {
        self.events.subscribe()
    }

    pub fn get(&self, name: &str) -> Option<Arc<LoadedPlugin>> {
        self.plugins.lock().unwrap().get(name).map(|h| h.load_full())
    }

    pub fn handles(&self) -> Vec<(String, Handle)> {
        self.plugins.lock().unwrap().iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    /// Compiles (or reuses) and admits `spec`; see the module docs. `next_after`: the
    /// least time before the source may bring the plugin's next version (its reload
    /// interval); a version likely to be replaced soon tiers up later, if at all.
    pub async fn apply(&self, spec: PluginSpec, next_after: Duration) -> Result<Arc<LoadedPlugin>, LoadError> {
        if spec.name == "host" {
            // The host's own Events are reported as `wasmop/host`.
            return Err(LoadError::Conflict("plugin name \"host\" is reserved for the host itself".into()));
        }
        let digest: [u8; 32] = Sha256::digest(&spec.bytes).into();
        // A script compiles for its name (its messages name the file); a component's
        // code is shared by every name that loads the same bytes.
        let code_key: [u8; 32] = match spec.format {
            crate::runtime::Format::Component => digest,
            crate::runtime::Format::Script => {
                Sha256::new().chain_update(digest).chain_update(&spec.name).finalize().into()
            }
        };
        let sha256 = hex::encode(digest);
        let mut ahead = false;
        let mut _replacing = None;
        if let Some(cur) = self.get(&spec.name) {
            // Only webhooks: a reconcile on slower code for seconds costs no one a wait.
            ahead = cur.compiled.optimized() && !cur.compiled.is_script() && !cur.handlers.is_empty();
            claim(&spec.name, &cur, Place::of(&spec.origin, spec.origin_object.as_ref()))?;
            if cur.origin == spec.origin
                && cur.sha256 == sha256
                && cur.settings == spec.settings
                && cur.limits == spec.limits
                && cur.narrowing == spec.narrowing
                && cur.identity == spec.identity
            {
                return Ok(cur);
            }
            if cur.sha256 != sha256 {
                _replacing = Some(self.replacing.begin(&cur.sha256));
            }
        }
        let line = spec.place().reuse_line(&spec.name);
        let compiled = self.compile(code_key, spec.format, (&spec.name, &line), &spec.bytes, next_after, ahead).await?;
        let mut manifest = self.runtime.manifest(&compiled, &spec.name, &spec.settings, &spec.limits).await?;
        narrow(&mut manifest, &spec.narrowing)?;
        let handlers = self.runtime.handlers(&compiled, &spec.name, &spec.settings, &spec.limits).await?;
        check_handlers(&handlers)?;
        narrow_handlers(&handlers, &spec.narrowing)?;
        let mut permissions = Permissions::from_manifest(&manifest);
        if let Some(ns) = &spec.narrowing.namespaces {
            permissions.restrict_namespaces(ns.iter().cloned());
        }
        if let Some(kinds) = &spec.narrowing.kinds {
            permissions.restrict_kinds(kinds);
        }
        let loaded = Arc::new(LoadedPlugin {
            name: spec.name.clone(),
            sha256,
            settings: spec.settings,
            origin: spec.origin,
            origin_object: spec.origin_object,
            manifest,
            handlers,
            permissions: Arc::new(permissions),
            compiled,
            limits: spec.limits,
            narrowing: spec.narrowing.clone(),
            identity: spec.identity.clone(),
            loaded_at: SystemTime::now(),
        });

        let event = {
            let mut plugins = self.plugins.lock().unwrap();
            // Again under the lock: another version may have been admitted meanwhile.
            if let Some(h) = plugins.get(&spec.name) {
                claim(&spec.name, &h.load(), loaded.place())?;
            }
            if let Some((other, _)) =
                plugins.iter().find(|(n, h)| **n != spec.name && overlaps(&h.load().manifest, &loaded.manifest))
            {
                return Err(LoadError::Conflict(format!(
                    "plugin {other} already reconciles {} in an overlapping set of namespaces",
                    loaded.manifest.primary
                )));
            }
            match plugins.get(&spec.name) {
                Some(h) => {
                    let old = h.swap(loaded.clone());
                    RegistryEvent::Upserted {
                        name: spec.name.clone(),
                        handle: h.clone(),
                        // Watches run as the plugin: a new identity needs new ones.
                        watches_changed: watch_set(&old.manifest) != watch_set(&loaded.manifest)
                            || old.identity != loaded.identity,
                    }
                }
                None => {
                    let h: Handle = Arc::new(ArcSwap::new(loaded.clone()));
                    plugins.insert(spec.name.clone(), h.clone());
                    RegistryEvent::Upserted { name: spec.name.clone(), handle: h, watches_changed: true }
                }
            }
        };
        METRICS.plugin_loads.get_or_create(&labels(&[("plugin", &loaded.name)])).inc();
        METRICS.plugin_serving(&loaded.name, Some((&loaded.manifest.version, &loaded.sha256)));
        tracing::info!(
            plugin = %loaded.name, version = %loaded.manifest.version, sha256 = %loaded.sha256,
            origin = %loaded.origin, primary = %loaded.manifest.primary,
            code = %if loaded.compiled.optimized() { "optimized" } else { "baseline" }, "plugin loaded"
        );
        let _ = self.events.send(event);
        Ok(loaded)
    }

    /// Stops serving `name` when it was loaded from `origin` (`origin_object`): the same
    /// place, as [`Registry::apply`] compares them; true when it was. A source removing
    /// a plugin it did not load (its version was refused: the name was taken) leaves the
    /// serving one alone.
    pub fn remove(&self, name: &str, origin: &str, origin_object: Option<&ObjectRef>) -> bool {
        let removed = {
            let mut plugins = self.plugins.lock().unwrap();
            let held = plugins.get(name).map(|h| h.load_full());
            match held {
                Some(p) if p.place() == Place::of(origin, origin_object) => {
                    self.runtime.forget_code(&p.place().reuse_line(name));
                    plugins.remove(name).is_some()
                }
                Some(p) => {
                    tracing::info!(
                        plugin = %name, origin = %origin, serving_from = %p.origin,
                        "plugin not removed: the serving version was loaded from elsewhere"
                    );
                    false
                }
                None => false,
            }
        };
        if removed {
            METRICS.plugin_serving(name, None);
            tracing::info!(plugin = %name, "plugin removed");
            let _ = self.events.send(RegistryEvent::Removed { name: name.to_owned() });
        }
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_name_host_is_reserved() {
        let runtime = crate::runtime::Runtime::new(crate::runtime::RuntimeConfig::default()).unwrap();
        let registry = Registry::new(Arc::new(runtime));
        let spec = PluginSpec {
            name: "host".into(),
            format: Default::default(),
            bytes: Arc::from(&b"\0asm"[..]),
            settings: String::new(),
            origin: "dir:/plugins/host.wasm".into(),
            origin_object: None,
            limits: Limits::default(),
            narrowing: Narrowing::default(),
            identity: None,
        };
        let e = registry.apply(spec, MIN_RELOAD_INTERVAL).await.err().expect("refused");
        assert!(e.to_string().contains("reserved for the host"), "{e}");
    }
}
