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

pub use compiling::{MAX_RELOAD_INTERVAL, MIN_RELOAD_INTERVAL};

use crate::gateway::Permissions;
use crate::metrics::{METRICS, labels};
use crate::runtime::{Compiled, Limits, Runtime, RuntimeError};
use arc_swap::ArcSwap;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};
use tokio::sync::broadcast;
use wasmop_sdk::{Handler, KindRef, Manifest, ObjectRef, Watch};

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

/// An operator's narrowing of a plugin: its world is at most these namespaces and
/// kinds. The manifest must fit inside: a plugin that watches a kind outside
/// `kinds` is refused; watched namespaces are cut down to `namespaces`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Narrowing {
    pub namespaces: Option<Vec<String>>,
    pub kinds: Option<Vec<wasmop_sdk::KindRef>>,
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

impl LoadedPlugin {
    fn place(&self) -> Place<'_> {
        Place::of(&self.origin, self.origin_object.as_ref())
    }
}

impl PluginSpec {
    /// Where this version comes from (see [`Place`]).
    pub fn place(&self) -> Place<'_> {
        Place::of(&self.origin, self.origin_object.as_ref())
    }
}

/// Where a plugin comes from, as far as owning its name goes: the object it came from
/// (a ConfigMap, whichever key), or else the directory of its file (`dir:/plugins`).
#[derive(Debug, PartialEq, Eq)]
pub enum Place<'a> {
    Object(&'a ObjectRef),
    Dir(&'a str),
}

impl<'a> Place<'a> {
    pub fn of(origin: &'a str, object: Option<&'a ObjectRef>) -> Self {
        match object {
            Some(o) => Place::Object(o),
            None => Place::Dir(origin.rsplit_once('/').map_or(origin, |(dir, _)| dir)),
        }
    }
}

/// A name belongs to the place that loaded it: a version from elsewhere (another
/// ConfigMap, in this namespace or another) is refused, not swapped in, so it cannot
/// take over the plugin's narrowing, webhook paths or lifetime.
fn claim(name: &str, held: &LoadedPlugin, from: Place<'_>) -> Result<(), LoadError> {
    claim_from(name, &held.origin, held.place(), from)
}

fn claim_from(name: &str, held_origin: &str, held: Place<'_>, from: Place<'_>) -> Result<(), LoadError> {
    if held == from {
        return Ok(());
    }
    Err(LoadError::Conflict(format!(
        "plugin name {name:?} is already loaded from {held_origin}; plugin names must be unique"
    )))
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
        let compiled = self.compile(code_key, spec.format, &spec.name, &spec.bytes, next_after, ahead).await?;
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
                Some(p) if p.place() == Place::of(origin, origin_object) => plugins.remove(name).is_some(),
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

/// Fits the manifest inside the operator's narrowing, or says why it cannot. Its
/// namespaces end up sorted, each once, without empty names.
fn narrow(m: &mut Manifest, n: &Narrowing) -> Result<(), LoadError> {
    tidy(&mut m.namespaces);
    tidy(&mut m.call_namespaces);
    if let Some(kinds) = &n.kinds {
        let watched = std::iter::once(&m.primary).chain(&m.owns).chain(m.watches.iter().map(|w| &w.kind));
        if let Some(k) = watched.into_iter().find(|k| !kinds.contains(k)) {
            return Err(LoadError::Narrowed(format!("the plugin watches {k}, which is not in its allowed kinds")));
        }
    }
    if let Some(allowed) = &n.namespaces {
        if !m.namespaced {
            return Err(LoadError::Narrowed(format!(
                "{} is cluster-scoped and cannot be limited to namespaces",
                m.primary
            )));
        }
        m.namespaces = if m.namespaces.is_empty() {
            allowed.clone()
        } else {
            m.namespaces.iter().filter(|ns| allowed.contains(ns)).cloned().collect()
        };
        tidy(&mut m.namespaces);
        if m.namespaces.is_empty() {
            return Err(LoadError::Narrowed("none of the plugin's namespaces is in its allowed namespaces".into()));
        }
        // The operator's narrowing binds these too: the permissions refuse them anyway,
        // and the manifest the host reports says so.
        m.call_namespaces.retain(|ns| allowed.contains(ns));
    }
    // Where it may call without watching: beside namespaces it watches, and only for a
    // plugin limited to some (one of all namespaces calls everywhere already).
    m.call_namespaces.retain(|ns| !m.namespaces.is_empty() && !m.namespaces.contains(ns));
    Ok(())
}

/// Each namespace once, in order, without empty names: a duplicate would be watched
/// twice (and the controller would wait for a sync that counts it once).
fn tidy(namespaces: &mut Vec<String>) {
    namespaces.retain(|n| !n.is_empty());
    namespaces.sort();
    namespaces.dedup();
}

/// An operator's narrowing of kinds binds admission handlers too: a handler may only
/// serve kinds the plugin is allowed.
fn narrow_handlers(handlers: &[Handler], n: &Narrowing) -> Result<(), LoadError> {
    let Some(kinds) = &n.kinds else { return Ok(()) };
    for h in handlers {
        if let Some(k) = h.kinds.iter().find(|k| !kinds.iter().any(|a| same_kind(a, k))) {
            return Err(LoadError::Narrowed(format!(
                "admission handler {:?} serves {k}, which is not in its allowed kinds",
                h.name
            )));
        }
    }
    Ok(())
}

/// Handler names become URL path segments and must be unique.
fn check_handlers(handlers: &[Handler]) -> Result<(), LoadError> {
    let mut seen = std::collections::HashSet::new();
    for h in handlers {
        let valid = !h.name.is_empty()
            && h.name.len() <= 63
            && h.name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !valid {
            return Err(LoadError::Handlers(format!(
                "handler name {:?} must be 1-63 characters of a-z, 0-9 and '-'",
                h.name
            )));
        }
        if !seen.insert(&h.name) {
            return Err(LoadError::Handlers(format!("handler name {:?} is declared twice", h.name)));
        }
        if h.kinds.is_empty() || h.operations.is_empty() {
            return Err(LoadError::Handlers(format!("handler {:?} names no kinds or no operations", h.name)));
        }
    }
    Ok(())
}

/// What a controller is built from: its watches, and whether its own writes are news
/// (a new version that changes any of it gets a new controller).
fn watch_set(m: &Manifest) -> (&KindRef, bool, &[String], &[KindRef], &[Watch], bool) {
    (&m.primary, m.namespaced, &m.namespaces, &m.owns, &m.watches, m.skip_own_writes)
}

/// Two manifests reconcile the same primary kind in at least one common namespace.
fn overlaps(a: &Manifest, b: &Manifest) -> bool {
    same_kind(&a.primary, &b.primary)
        && (a.namespaces.is_empty() || b.namespaces.is_empty() || a.namespaces.iter().any(|n| b.namespaces.contains(n)))
}

/// The same resource: the same group and kind, whatever the version (a CRD serves
/// one set of objects under each of its versions).
fn same_kind(a: &KindRef, b: &KindRef) -> bool {
    a.kind == b.kind && group(&a.api_version) == group(&b.api_version)
}

/// `apps/v1` → `apps`; `v1` (and `/v1`) → `` (the core group).
fn group(api_version: &str) -> &str {
    let v = api_version.strip_prefix('/').unwrap_or(api_version);
    v.rsplit_once('/').map_or("", |(g, _)| g)
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmop_sdk::KindRef;

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

    #[test]
    fn narrowing_cuts_namespaces_and_refuses_kinds_outside() {
        let k = KindRef::new("cache.example.com/v1alpha1", "Memcached");
        let mut m = Manifest::for_kind("a", "1", k.clone());
        let n = Narrowing { namespaces: Some(vec!["team-a".into()]), kinds: None };
        narrow(&mut m, &n).unwrap();
        assert_eq!(m.namespaces, ["team-a"], "all namespaces become the allowed ones");
        let mut m = Manifest::for_kind("a", "1", k.clone()).namespaces(["team-b"]);
        assert!(narrow(&mut m, &n).unwrap_err().to_string().contains("none of the plugin's namespaces"));
        // Namespaces it calls in without watching: only allowed ones, none it watches.
        let mut m = Manifest::for_kind("a", "1", k.clone()).call_namespaces(["team-b", "team-a", "team-c"]);
        let both = Narrowing { namespaces: Some(vec!["team-a".into(), "team-b".into()]), kinds: None };
        narrow(&mut m, &both).unwrap();
        assert_eq!(m.namespaces, ["team-a", "team-b"]);
        assert!(m.call_namespaces.is_empty(), "it watches both now");
        let mut m =
            Manifest::for_kind("a", "1", k.clone()).namespaces(["team-a"]).call_namespaces(["team-c", "team-b"]);
        narrow(&mut m, &both).unwrap();
        assert_eq!(m.call_namespaces, ["team-b"], "team-c is not allowed");
        let mut m = Manifest::for_kind("a", "1", k.clone()).call_namespaces(["team-b"]);
        narrow(&mut m, &Narrowing::default()).unwrap();
        assert!(m.call_namespaces.is_empty(), "a plugin of all namespaces calls everywhere already");
        let mut m = Manifest::for_kind("a", "1", k.clone());
        m.owns.push(KindRef::new("apps/v1", "Deployment"));
        let n = Narrowing { namespaces: None, kinds: Some(vec![k]) };
        assert!(narrow(&mut m, &n).unwrap_err().to_string().contains("apps/v1/Deployment"));
    }

    #[test]
    fn same_kind_overlap_rules() {
        let k = KindRef::new("cache.example.com/v1alpha1", "Memcached");
        let all = Manifest::for_kind("a", "1", k.clone());
        let a = Manifest::for_kind("a", "1", k.clone()).namespaces(["a"]);
        let b = Manifest::for_kind("b", "1", k.clone()).namespaces(["b"]);
        assert!(overlaps(&all, &a));
        assert!(!overlaps(&a, &b));
        assert!(overlaps(&a, &Manifest::for_kind("c", "1", k).namespaces(["b", "a"])));
        assert!(!overlaps(&a, &Manifest::for_kind("d", "1", KindRef::new("v1", "ConfigMap"))));
        // One resource under another version, or spelled with a leading '/', is the same.
        let beta = Manifest::for_kind("e", "1", KindRef::new("cache.example.com/v1beta1", "Memcached"));
        assert!(overlaps(&all, &beta), "a CRD's second served version");
        let cm = |v: &str| Manifest::for_kind("f", "1", KindRef::new(v, "ConfigMap"));
        assert!(overlaps(&cm("/v1"), &cm("v1")));
        assert!(!overlaps(&cm("v1"), &cm("other.example.com/v1")), "same kind, another group");
    }

    #[test]
    fn namespaces_are_watched_once_each() {
        let k = KindRef::new("cache.example.com/v1alpha1", "Memcached");
        let mut m = Manifest::for_kind("a", "1", k.clone()).namespaces(["b", "a", "b", ""]);
        narrow(&mut m, &Narrowing::default()).unwrap();
        assert_eq!(m.namespaces, ["a", "b"]);
        let mut m = Manifest::for_kind("a", "1", k.clone());
        let n = Narrowing { namespaces: Some(vec!["x".into(), "x".into(), "".into()]), kinds: None };
        narrow(&mut m, &n).unwrap();
        assert_eq!(m.namespaces, ["x"]);
        // An empty name is no namespace: it does not survive narrowing as "all".
        let mut m = Manifest::for_kind("a", "1", k);
        let n = Narrowing { namespaces: Some(vec!["".into()]), kinds: None };
        assert!(narrow(&mut m, &n).unwrap_err().to_string().contains("none of the plugin's namespaces"));
    }

    #[test]
    fn narrowed_kinds_bind_admission_handlers() {
        use wasmop_sdk::Operation;
        let k = KindRef::new("cache.example.com/v1alpha1", "Memcached");
        let pods = Handler::validating("pods", KindRef::new("v1", "Pod"), &[Operation::Create]);
        let mine =
            Handler::validating("mine", KindRef::new("cache.example.com/v1beta1", "Memcached"), &[Operation::Create]);
        let n = Narrowing { namespaces: None, kinds: Some(vec![k]) };
        assert!(narrow_handlers(&[pods.clone(), mine.clone()], &Narrowing::default()).is_ok(), "not narrowed");
        assert!(narrow_handlers(std::slice::from_ref(&mine), &n).is_ok(), "another version of an allowed kind");
        let e = narrow_handlers(&[mine, pods], &n).unwrap_err();
        assert!(matches!(e, LoadError::Narrowed(_)));
        assert_eq!(
            e.to_string(),
            "narrowed by the operator: admission handler \"pods\" serves v1/Pod, which is not in its allowed kinds"
        );
    }

    #[test]
    fn a_plugin_name_belongs_to_the_place_that_loaded_it() {
        let cm = |ns: &str, name: &str| ObjectRef::new(&KindRef::new("v1", "ConfigMap"), Some(ns), name);
        let (a, b, other_ns) = (cm("ns", "a"), cm("ns", "b"), cm("other", "a"));
        let held = Place::of("configmap:ns/a#foo.wasm", Some(&a));
        let claim = |origin, object| {
            claim_from(
                "foo",
                "configmap:ns/a#foo.wasm",
                Place::of("configmap:ns/a#foo.wasm", Some(&a)),
                Place::of(origin, object),
            )
        };
        let e = claim("configmap:ns/b#foo.wasm", Some(&b)).unwrap_err();
        assert_eq!(e.kind(), "conflict");
        assert_eq!(
            e.to_string(),
            "plugin name \"foo\" is already loaded from configmap:ns/a#foo.wasm; plugin names must be unique"
        );
        assert!(claim("configmap:other/a#foo.wasm", Some(&other_ns)).is_err(), "same name, another namespace");
        assert!(claim("dir:/plugins/foo.wasm", None).is_err());
        assert!(claim("configmap:ns/a#foo.wasm.gz", Some(&a)).is_ok(), "a new version from the same ConfigMap");
        // What a source names when it removes: the object, without the key.
        assert_eq!(Place::of("configmap:ns/a", Some(&a)), held);
        assert_ne!(Place::of("configmap:ns/b", Some(&b)), held);
        // Files: the directory is the place.
        let file = Place::of("dir:/plugins/foo.wasm", None);
        assert_eq!(Place::of("dir:/plugins/foo.wasm.gz", None), file);
        assert_ne!(Place::of("dir:/other/foo.wasm", None), file);
        assert!(claim_from("foo", "dir:/plugins/foo.wasm", file, Place::of("dir:/other/foo.wasm", None)).is_err());
    }
}
