//! The compiled-code cache: Cranelift code kept on disk across restarts, so a host that
//! restarts (or loads bytes it has compiled before) skips the slow compile — kept under
//! a size cap, so it cannot fill its volume.
//!
//! Why a cap: a plugin ConfigMap rewritten with new bytes again and again leaves one
//! file per version; the deployment's 256 Mi emptyDir then fills and the kubelet evicts
//! the Pod. After every write the least recently used files go until the directory
//! holds at most `max_bytes` (a file read back counts as used: its mtime is renewed).
//!
//! Trust: code loaded from here runs as-is (`Component::deserialize_file`), so only the
//! host may write the directory; each file name binds the code to the sha256 of the
//! exact bytes and to the engine's compatibility hash.

use std::path::{Path, PathBuf};
use std::time::SystemTime;
use wasmtime::Engine;
use wasmtime::component::Component;

/// See the module docs.
#[derive(Clone, Debug)]
pub(super) struct CodeCache {
    dir: PathBuf,
    max_bytes: u64,
}

impl CodeCache {
    pub fn new(dir: PathBuf, max_bytes: u64) -> Self {
        CodeCache { dir, max_bytes }
    }

    /// Where `bytes`' code for `engine` lives.
    fn path(&self, engine: &Engine, bytes: &[u8]) -> PathBuf {
        use sha2::Digest;
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        self.dir.join(format!("{}-{:016x}.cwasm", hex::encode(sha2::Sha256::digest(bytes)), h.finish()))
    }

    /// The cached code of `bytes`, if any (and readable).
    pub fn load(&self, engine: &Engine, bytes: &[u8]) -> Option<Component> {
        let path = self.path(engine, bytes);
        if !path.exists() {
            return None;
        }
        // SAFETY: see the module docs: only the host writes here, and the name binds
        // the code to these exact bytes and this engine.
        match unsafe { Component::deserialize_file(engine, &path) } {
            Ok(c) => {
                // Recently used: the last to be evicted.
                let _ =
                    std::fs::File::options().write(true).open(&path).and_then(|f| f.set_modified(SystemTime::now()));
                Some(c)
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), "ignoring unreadable cached code: {e}");
                None
            }
        }
    }

    /// Keeps `component` (compiled from `bytes`), then evicts down to the cap.
    pub fn store(&self, engine: &Engine, bytes: &[u8], component: &Component) {
        let path = self.path(engine, bytes);
        let code = match component.serialize() {
            Ok(code) => code,
            Err(e) => return tracing::warn!("cannot serialize compiled code: {e}"),
        };
        if code.len() as u64 > self.max_bytes {
            return tracing::debug!(bytes = code.len(), "compiled code larger than the whole cache: not kept");
        }
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        if let Err(e) = std::fs::create_dir_all(&self.dir)
            .and_then(|_| std::fs::write(&tmp, code))
            .and_then(|_| std::fs::rename(&tmp, &path))
        {
            let _ = std::fs::remove_file(&tmp);
            return tracing::warn!(path = %path.display(), "cannot write the code cache: {e}");
        }
        evict(&self.dir, self.max_bytes, &path);
    }
}

/// Deletes the least recently used files of `dir` until it holds at most `max` bytes,
/// never `keep` (the file just written).
fn evict(dir: &Path, max: u64, keep: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut files: Vec<(SystemTime, u64, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let m = e.metadata().ok().filter(|m| m.is_file())?;
            Some((m.modified().unwrap_or(SystemTime::UNIX_EPOCH), m.len(), e.path()))
        })
        .collect();
    let mut total: u64 = files.iter().map(|f| f.1).sum();
    files.sort();
    for (_, len, path) in files {
        if total <= max {
            break;
        }
        if path == keep {
            continue;
        }
        match std::fs::remove_file(&path) {
            Ok(()) => {
                total -= len;
                tracing::debug!(path = %path.display(), "evicted from the code cache");
            }
            Err(e) => tracing::warn!(path = %path.display(), "cannot evict from the code cache: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_files_go_first_and_the_new_one_stays() {
        let dir = tempfile::tempdir().unwrap();
        let at = |secs| SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs);
        for (name, secs) in [("old", 1), ("used", 3), ("mid", 2), ("new", 0)] {
            let p = dir.path().join(name);
            std::fs::write(&p, vec![0u8; 100]).unwrap();
            std::fs::File::options().write(true).open(&p).unwrap().set_modified(at(secs)).unwrap();
        }
        // 400 bytes in four files, a cap of 250: two go, the oldest first; "new" (just
        // written, whatever its time) stays.
        evict(dir.path(), 250, &dir.path().join("new"));
        let mut left: Vec<String> =
            std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        left.sort();
        assert_eq!(left, ["new", "used"]);
    }
}
