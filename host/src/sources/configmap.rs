//! Plugins from ConfigMaps: how users deploy reconcilers.
//!
//! Watches ConfigMaps labelled `wasmop.io/plugin: "true"` in the given namespaces. Each
//! `binaryData` key ending in `.wasm` or `.wasm.gz` is one plugin named after the key
//! (`memcached.wasm.gz` → `memcached`), and so is each `data` or `binaryData` key
//! ending in `.js` (or a `binaryData` key ending in `.js.gz`): a script plugin, run on
//! the host's JavaScript engine (`runtime::script`); a `data` or `binaryData` key
//! `NAME.settings.yaml` beside it is its settings. A change of bytes or of settings is
//! a new version; a removed key or ConfigMap removes the plugin. Plugin names must be
//! unique across the watched ConfigMaps: while one ConfigMap's plugin serves, a
//! same-name plugin in another is refused (a `PluginRejected` Event on it), and removing
//! it there leaves the serving one alone. It is not retried when the first goes away;
//! a change to its ConfigMap loads it.

use super::annotations::{self, Ceilings};
use super::{PluginSource, SourceEvent};
use crate::registry::PluginSpec;
use crate::runtime::{Format, Limits};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use tokio::sync::mpsc;
use wasmop_sdk::{KindRef, ObjectRef};

/// The label that marks a ConfigMap as carrying plugins.
pub const PLUGIN_LABEL: &str = "wasmop.io/plugin";
/// Names the ServiceAccount (in the ConfigMap's namespace) that the ConfigMap's plugins
/// act as; by default each plugin acts as the ServiceAccount named after it. It picks an
/// identity, it grants nothing: the cluster admin binds its RBAC and lets the host
/// impersonate it (`wasmop rbac`).
pub const SERVICE_ACCOUNT_ANNOTATION: &str = "wasmop.io/service-account";

pub struct ConfigMapSource {
    /// The cluster's configuration, not a client: the source builds its own client on
    /// the thread it runs on (`apart`), so the connections that carry its megabytes
    /// are read there and none of them is shared with the host's runtime.
    config: kube::Config,
    namespaces: Vec<String>,
    limits: Limits,
    ceilings: Ceilings,
}

impl ConfigMapSource {
    /// Plugins get `limits`, adjusted by their ConfigMap's annotations within `ceilings`.
    pub fn new(config: kube::Config, namespaces: Vec<String>, limits: Limits, ceilings: Ceilings) -> Self {
        ConfigMapSource { config, namespaces, limits, ceilings }
    }
}

/// (namespace, ConfigMap name) → plugin name → stamp (sha256 of bytes and settings).
type Known = HashMap<(String, String), HashMap<String, [u8; 32]>>;

fn configmap_ref(ns: &str, name: &str) -> ObjectRef {
    ObjectRef::new(&KindRef::new("v1", "ConfigMap"), Some(ns), name)
}

/// `name` is gone from ConfigMap `id`; the registry removes it only if it came from there.
fn remove_event(id: &(String, String), name: String) -> SourceEvent {
    let (ns, cm) = id;
    SourceEvent::Remove { name, origin: format!("configmap:{ns}/{cm}"), origin_object: Some(configmap_ref(ns, cm)) }
}

/// The plugins one ConfigMap carries, with their stamps and, when its annotations do
/// not parse, why they must be refused.
fn plugins_of(cm: &ConfigMap, limits: &Limits, ceilings: &Ceilings) -> Vec<(PluginSpec, [u8; 32], Option<String>)> {
    let ann: std::collections::BTreeMap<String, String> = cm
        .metadata
        .annotations
        .iter()
        .flatten()
        .filter(|(k, _)| k.starts_with(annotations::PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let (limits, narrowing, problem) = match annotations::apply(&ann, limits, ceilings) {
        Ok((l, n)) => (l, n, None),
        Err(e) => (limits.clone(), Default::default(), Some(e)),
    };
    let ns = cm.metadata.namespace.clone().unwrap_or_default();
    let name = cm.metadata.name.clone().unwrap_or_default();
    let binary = cm.binary_data.clone().unwrap_or_default();
    let data = cm.data.clone().unwrap_or_default();
    let mut out = Vec::new();
    // Scripts are text, so they may sit in `data`; components only in `binaryData`.
    let scripts = data.iter().map(|(k, v)| (k, v.as_bytes())).filter(|(k, _)| k.ends_with(".js"));
    for (key, value) in binary.iter().map(|(k, v)| (k, &v.0[..])).chain(scripts) {
        let Some((plugin, format)) = Format::of_key(key) else { continue };
        let settings_key = format!("{plugin}.settings.yaml");
        let settings = data
            .get(&settings_key)
            .cloned()
            .or_else(|| binary.get(&settings_key).map(|b| String::from_utf8_lossy(&b.0).into_owned()))
            .unwrap_or_default();
        let mut h = Sha256::new();
        h.update(value);
        h.update([0]);
        h.update(settings.as_bytes());
        for (k, v) in &ann {
            h.update([0]);
            h.update(k.as_bytes());
            h.update([0]);
            h.update(v.as_bytes());
        }
        let account = ann.get(SERVICE_ACCOUNT_ANNOTATION).map(String::as_str).unwrap_or(plugin);
        let spec = PluginSpec {
            name: plugin.to_owned(),
            format,
            bytes: value.into(),
            settings,
            origin: format!("configmap:{ns}/{name}#{key}"),
            origin_object: Some(configmap_ref(&ns, &name)),
            limits: limits.clone(),
            narrowing: narrowing.clone(),
            identity: Some(crate::gateway::Identity::new(&ns, account)),
        };
        out.push((spec, h.finalize().into(), problem.clone()));
    }
    out
}

impl ConfigMapSource {
    async fn changed(&self, cm: &ConfigMap, known: &mut Known, tx: &mpsc::Sender<SourceEvent>) -> bool {
        let id = (cm.metadata.namespace.clone().unwrap_or_default(), cm.metadata.name.clone().unwrap_or_default());
        let before = known.remove(&id).unwrap_or_default();
        let mut now = HashMap::new();
        for (spec, stamp, problem) in plugins_of(cm, &self.limits, &self.ceilings) {
            now.insert(spec.name.clone(), stamp);
            if before.get(&spec.name) == Some(&stamp) {
                continue;
            }
            let ev = match problem {
                None => SourceEvent::Upsert(Box::new(spec)),
                Some(reason) => SourceEvent::Reject { spec: Box::new(spec), kind: "annotation", reason },
            };
            if tx.send(ev).await.is_err() {
                return false;
            }
        }
        for gone in before.keys().filter(|n| !now.contains_key(*n)) {
            if tx.send(remove_event(&id, gone.clone())).await.is_err() {
                return false;
            }
        }
        known.insert(id, now);
        true
    }

    async fn removed(id: (String, String), known: &mut Known, tx: &mpsc::Sender<SourceEvent>) -> bool {
        for name in known.remove(&id).unwrap_or_default().into_keys() {
            if tx.send(remove_event(&id, name)).await.is_err() {
                return false;
            }
        }
        true
    }
}

#[async_trait::async_trait]
impl PluginSource for ConfigMapSource {
    async fn run(self: Box<Self>, tx: mpsc::Sender<SourceEvent>) {
        let client = match kube::Client::try_from(self.config.clone()) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(
                    source = "configmap",
                    "cannot build the cluster client; no plugin ConfigMap is read: {e}"
                );
                return;
            }
        };
        let config = watcher::Config::default().labels(&format!("{PLUGIN_LABEL}=true"));
        let streams = self.namespaces.iter().map(|ns| {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
            watcher(api, config.clone()).default_backoff().map(move |e| (ns.clone(), e)).boxed()
        });
        let mut events = futures::stream::select_all(streams);
        let mut known: Known = HashMap::new();
        let mut unsynced: HashSet<String> = self.namespaces.iter().cloned().collect();
        let mut relisting: HashMap<String, HashSet<(String, String)>> = HashMap::new();
        while let Some((ns, ev)) = events.next().await {
            use watcher::Event::*;
            let ok = match ev {
                Err(e) => {
                    tracing::debug!(source = "configmap", namespace = %ns, "watch error (retrying): {e}");
                    true
                }
                Ok(Init) => {
                    relisting.insert(ns, HashSet::new());
                    true
                }
                Ok(InitApply(cm)) | Ok(Apply(cm)) => {
                    if let Some(seen) = relisting.get_mut(&ns) {
                        seen.insert((ns.clone(), cm.metadata.name.clone().unwrap_or_default()));
                    }
                    self.changed(&cm, &mut known, &tx).await
                }
                Ok(Delete(cm)) => {
                    let id = (ns, cm.metadata.name.clone().unwrap_or_default());
                    Self::removed(id, &mut known, &tx).await
                }
                Ok(InitDone) => {
                    // ConfigMaps deleted while the watch was down.
                    let seen = relisting.remove(&ns).unwrap_or_default();
                    let gone: Vec<_> = known.keys().filter(|id| id.0 == ns && !seen.contains(*id)).cloned().collect();
                    let mut ok = true;
                    for id in gone {
                        ok &= Self::removed(id, &mut known, &tx).await;
                    }
                    if unsynced.remove(&ns) && unsynced.is_empty() {
                        ok &= tx.send(SourceEvent::Synced).await.is_ok();
                    }
                    ok
                }
            };
            if !ok {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    fn ceilings() -> Ceilings {
        Ceilings { deadline: std::time::Duration::from_secs(60), memory_bytes: 1 << 30, fuel: None, max_instances: 4 }
    }

    #[test]
    fn scripts_are_plugins_in_data_or_binary_data_and_components_only_in_binary_data() {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some("scripts".into());
        cm.metadata.namespace = Some("ops".into());
        cm.data = Some(
            [
                ("copier.js".to_string(), "export function manifest() {}".to_string()),
                ("copier.settings.yaml".to_string(), "namespaces: [a]".to_string()),
                ("text.wasm".to_string(), "not binary data".to_string()),
            ]
            .into(),
        );
        cm.binary_data = Some([("packed.js.gz".to_string(), ByteString(vec![0x1f, 0x8b]))].into());
        let ceilings = ceilings();
        let mut found = plugins_of(&cm, &Limits::default(), &ceilings);
        found.sort_by(|a, b| a.0.name.cmp(&b.0.name));
        let got: Vec<_> = found.iter().map(|(s, _, _)| (s.name.as_str(), s.format, s.settings.as_str())).collect();
        assert_eq!(got, [("copier", Format::Script, "namespaces: [a]"), ("packed", Format::Script, "")]);
        assert_eq!(&found[0].0.bytes[..], b"export function manifest() {}");
        // Editing the script is a new version (a new stamp).
        let before = found[0].1;
        cm.data.as_mut().unwrap().insert("copier.js".into(), "export function manifest() { return 1 }".into());
        let after =
            plugins_of(&cm, &Limits::default(), &ceilings).into_iter().find(|p| p.0.name == "copier").unwrap().1;
        assert_ne!(before, after);
    }

    #[test]
    fn keys_become_plugins_with_settings_and_stamps() {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some("plugins".into());
        cm.metadata.namespace = Some("ops".into());
        cm.binary_data = Some(
            [
                ("memcached.wasm.gz".to_string(), ByteString(vec![1, 2])),
                ("probe.wasm".to_string(), ByteString(vec![3])),
                ("README".to_string(), ByteString(vec![4])),
            ]
            .into(),
        );
        cm.data = Some([("probe.settings.yaml".to_string(), "namespace: x".to_string())].into());
        let ceilings = ceilings();
        let mut found = plugins_of(&cm, &Limits::default(), &ceilings);
        found.sort_by(|a, b| a.0.name.cmp(&b.0.name));
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].0.name, "memcached");
        assert_eq!(found[0].0.origin, "configmap:ops/plugins#memcached.wasm.gz");
        assert_eq!(found[1].0.settings, "namespace: x");
        let stamp = found[1].1;
        cm.data = Some([("probe.settings.yaml".to_string(), "namespace: y".to_string())].into());
        let again = plugins_of(&cm, &Limits::default(), &ceilings);
        let probe = again.iter().find(|p| p.0.name == "probe").unwrap();
        assert_ne!(probe.1, stamp, "a settings change is a new version");
        let stamp = probe.1;
        cm.metadata.annotations = Some([("wasmop.io/deadline-seconds".to_string(), "5".to_string())].into());
        let again = plugins_of(&cm, &Limits::default(), &ceilings);
        let probe = again.iter().find(|p| p.0.name == "probe").unwrap();
        assert_ne!(probe.1, stamp, "an annotation change is a new version");
        assert_eq!(probe.0.limits.deadline, std::time::Duration::from_secs(5));
        cm.metadata.annotations = Some([("wasmop.io/memory-mib".to_string(), "lots".to_string())].into());
        let again = plugins_of(&cm, &Limits::default(), &ceilings);
        assert!(again[0].2.as_deref().unwrap().contains("wasmop.io/memory-mib"));
    }

    #[tokio::test]
    async fn removals_name_the_configmap_they_come_from() {
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let ceilings = ceilings();
        let src = ConfigMapSource::new(config, vec![], Limits::default(), ceilings);
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some("b".into());
        cm.metadata.namespace = Some("ops".into());
        cm.binary_data =
            Some([("foo.wasm".to_string(), ByteString(vec![1])), ("bar.wasm".to_string(), ByteString(vec![2]))].into());
        let (tx, mut rx) = mpsc::channel(8);
        let mut known = Known::new();
        assert!(src.changed(&cm, &mut known, &tx).await);
        for _ in 0..2 {
            assert!(matches!(rx.recv().await.unwrap(), SourceEvent::Upsert(_)));
        }
        let b = ObjectRef::new(&KindRef::new("v1", "ConfigMap"), Some("ops"), "b");
        let removal_of = |ev: SourceEvent| match ev {
            SourceEvent::Remove { name, origin, origin_object } => (name, origin, origin_object),
            _ => panic!("expected a removal"),
        };
        // A key removed: only the ConfigMap that had it may unload the plugin.
        cm.binary_data.as_mut().unwrap().remove("foo.wasm");
        assert!(src.changed(&cm, &mut known, &tx).await);
        let (name, origin, object) = removal_of(rx.recv().await.unwrap());
        assert_eq!((name.as_str(), origin.as_str(), object.as_ref()), ("foo", "configmap:ops/b", Some(&b)));
        // The ConfigMap deleted.
        assert!(ConfigMapSource::removed(("ops".into(), "b".into()), &mut known, &tx).await);
        let (name, origin, object) = removal_of(rx.recv().await.unwrap());
        assert_eq!((name.as_str(), origin.as_str(), object.as_ref()), ("bar", "configmap:ops/b", Some(&b)));
    }
}
