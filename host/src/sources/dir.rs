//! A directory of plugins: `NAME.wasm` (or `NAME.wasm.gz`) or a script plugin
//! `NAME.js` (or `NAME.js.gz`), with an optional `NAME.settings.yaml` beside it.
//!
//! Polled rather than watched with inotify: it works the same on every filesystem
//! (ConfigMap volumes swap a symlink, which inotify reports unreliably), and a poll of a
//! handful of files every second costs nothing. Only a change of size, mtime or the
//! settings text re-reads a file; the registry dedupes identical bytes by sha256.

use super::{PluginSource, SourceError, SourceEvent};
use crate::registry::PluginSpec;
use crate::runtime::{Format, Limits};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};
use tokio::sync::mpsc;

pub struct DirSource {
    dir: PathBuf,
    interval: Duration,
    limits: Limits,
    /// Namespace of the plugins' ServiceAccounts (each is named after its plugin).
    identities: Option<String>,
}

type Stamp = (u64, SystemTime, String);
/// A plugin file found by a scan: where it is, its format, and its stamp.
type Found = (PathBuf, Format, Stamp);

impl DirSource {
    pub fn new(dir: impl Into<PathBuf>, limits: Limits) -> Self {
        DirSource { dir: dir.into(), interval: Duration::from_secs(1), limits, identities: None }
    }

    /// Each plugin acts as the ServiceAccount named after it in `namespace`.
    pub fn identities_in(mut self, namespace: &str) -> Self {
        self.identities = Some(namespace.to_owned());
        self
    }

    /// One scan: every plugin with its stamp (size, mtime, settings).
    pub fn scan(&self) -> Result<HashMap<String, Found>, SourceError> {
        let io = |e| SourceError::Io { path: self.dir.display().to_string(), source: e };
        let mut found = HashMap::new();
        for entry in std::fs::read_dir(&self.dir).map_err(io)? {
            let path = entry.map_err(io)?.path();
            let Some((name, format)) = path.file_name().and_then(|n| n.to_str()).and_then(Format::of_key) else {
                continue;
            };
            let meta = std::fs::metadata(&path)
                .map_err(|e| SourceError::Io { path: path.display().to_string(), source: e })?;
            let settings = read_settings(&self.dir, name)?;
            found.insert(
                name.to_owned(),
                (path.clone(), format, (meta.len(), meta.modified().unwrap_or(SystemTime::UNIX_EPOCH), settings)),
            );
        }
        Ok(found)
    }

    fn spec(&self, name: &str, path: &Path, format: Format, settings: &str) -> Result<PluginSpec, SourceError> {
        let bytes = std::fs::read(path).map_err(|e| SourceError::Io { path: path.display().to_string(), source: e })?;
        Ok(PluginSpec {
            name: name.to_owned(),
            format,
            bytes: bytes.into(),
            settings: settings.to_owned(),
            origin: format!("dir:{}", path.display()),
            origin_object: None,
            limits: self.limits.clone(),
            narrowing: Default::default(),
            identity: self.identities.as_deref().map(|ns| crate::gateway::Identity::new(ns, name)),
        })
    }
}

fn read_settings(dir: &Path, name: &str) -> Result<String, SourceError> {
    for ext in ["settings.yaml", "settings.yml", "settings.json"] {
        let p = dir.join(format!("{name}.{ext}"));
        match std::fs::read_to_string(&p) {
            Ok(s) => return Ok(s),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(SourceError::Io { path: p.display().to_string(), source: e }),
        }
    }
    Ok(String::new())
}

#[async_trait::async_trait]
impl PluginSource for DirSource {
    async fn run(self: Box<Self>, tx: mpsc::Sender<SourceEvent>) {
        // Plugin name → the file it was loaded from, and its stamp.
        let mut known: HashMap<String, Found> = HashMap::new();
        let mut first = true;
        loop {
            match self.scan() {
                Ok(found) => {
                    for (name, (path, format, stamp)) in &found {
                        if known.get(name).is_some_and(|(p, _, s)| p == path && s == stamp) {
                            continue;
                        }
                        match self.spec(name, path, *format, &stamp.2) {
                            Ok(spec) => {
                                if tx.send(SourceEvent::Upsert(Box::new(spec))).await.is_err() {
                                    return;
                                }
                                known.insert(name.clone(), (path.clone(), *format, stamp.clone()));
                            }
                            Err(e) => tracing::warn!(source = "dir", "{e}"),
                        }
                    }
                    let gone: Vec<String> = known.keys().filter(|n| !found.contains_key(*n)).cloned().collect();
                    for name in gone {
                        let Some((path, _, _)) = known.remove(&name) else { continue };
                        let origin = format!("dir:{}", path.display());
                        if tx.send(SourceEvent::Remove { name, origin, origin_object: None }).await.is_err() {
                            return;
                        }
                    }
                }
                Err(e) => tracing::warn!(source = "dir", "{e}"),
            }
            if std::mem::take(&mut first) && tx.send(SourceEvent::Synced).await.is_err() {
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep(self.interval) => {}
                _ = tx.closed() => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reports_add_change_and_remove() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.wasm"), b"one").unwrap();
        std::fs::write(dir.path().join("a.settings.yaml"), "namespace: x").unwrap();
        std::fs::write(dir.path().join("notes.txt"), "ignored").unwrap();
        let mut src = DirSource::new(dir.path(), Limits::default());
        src.interval = Duration::from_millis(20);
        let (tx, mut rx) = mpsc::channel(8);
        let task = tokio::spawn(Box::new(src).run(tx));

        let SourceEvent::Upsert(spec) = rx.recv().await.unwrap() else { panic!("expected upsert") };
        assert_eq!((spec.name.as_str(), &*spec.bytes, spec.settings.as_str()), ("a", &b"one"[..], "namespace: x"));
        assert!(matches!(rx.recv().await.unwrap(), SourceEvent::Synced));

        std::fs::write(dir.path().join("a.settings.yaml"), "namespace: y").unwrap();
        let SourceEvent::Upsert(spec) = rx.recv().await.unwrap() else { panic!("expected upsert") };
        assert_eq!(spec.settings, "namespace: y");

        std::fs::remove_file(dir.path().join("a.wasm")).unwrap();
        let SourceEvent::Remove { name, origin, origin_object } = rx.recv().await.unwrap() else {
            panic!("expected remove")
        };
        assert_eq!(name, "a");
        assert_eq!(origin, format!("dir:{}", dir.path().join("a.wasm").display()), "the file it was loaded from");
        assert!(origin_object.is_none());
        task.abort();
    }
}
