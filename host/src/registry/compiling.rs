//! Compiling plugin bytes for the registry, with bounds: off the async runtime, one
//! compile at a time on one thread (wasmtime's parallel compile is off, see `tiers`),
//! within [`COMPILE_TIME`]; the background tier-up one at a time too, and only for a
//! version that is still serving [`TIER_UP_DELAY`] after it loaded (longer for a
//! version that came in a loop, see `tier_up_delay`).
//!
//! Why: a compile is the heaviest thing the host does (Cranelift takes seconds and tens
//! of MiB for a 1 MB plugin), and anyone who may write a plugin ConfigMap can ask for
//! one as often as the source lets them (at most once a second per plugin, less
//! often while its versions keep coming, see `sources::driver`). One at a time bounds
//! the memory compiles take together and leaves the other core to reconciles and
//! reviews; the delay means a plugin rewritten in a loop costs no Cranelift work at all
//! (each version is gone before its tier-up starts); the time cap turns a compile that does not end into a rejected version
//! instead of a stuck load. Compiled code is shared by sha256, so the same bytes under
//! many names compile once. (Lowering the compile threads' CPU priority was tried and
//! dropped: on a busy machine a niced compile starved for minutes.)
//!
//! A reload of a webhook plugin already on optimized code skips the baseline tier
//! (`ahead`).
//!
//! Caveat: wasmtime cannot cancel a compile; one past its time cap runs on to its end
//! on its own thread, holding the compile turn, so later compiles wait for it (within
//! their own time cap) rather than run beside it.

use super::Registry;
use crate::runtime::{Compiled, Format, RuntimeError};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// The longest a version's compile (waiting for its turn included) may take. Why 60 s:
/// Cranelift compiles the 1 MB Memcached plugin in 1.3 s here, so a minute is far past
/// any real plugin, and a load that waits longer is stuck.
pub const COMPILE_TIME: Duration = Duration::from_secs(60);

/// How long a version must have been serving before its tier-up starts. Why 2 s:
/// longer than the least time between two versions of one plugin (1 s); short enough
/// that steady-state speed arrives within seconds of a real reload.
pub const TIER_UP_DELAY: Duration = Duration::from_secs(2);

/// The least time between two loads of one plugin's versions (enforced by
/// `sources::driver`). Why 1 s: an author's edit is applied at once (the first
/// version after a quiet second does not wait).
pub const MIN_RELOAD_INTERVAL: Duration = Duration::from_secs(1);
/// The most: what a plugin rewritten in a loop settles at (the interval doubles each
/// time a version arrives within twice it). Why 16 s: a compile (a quarter of a second of a core
/// for a 1 MB plugin, by Winch) every 16 s is under 2 % of a core, while an author who
/// edits in a loop still sees each edit within 16 s.
pub const MAX_RELOAD_INTERVAL: Duration = Duration::from_secs(16);

/// How long a new version must serve before its tier-up, when its source says the
/// next version of the plugin may come `next_after` from now. Why twice that: while a
/// plugin is rewritten in a loop, the source's reload interval doubles up to 16 s
/// (`sources::driver`), so each version is replaced about `next_after` (plus a
/// compile) after it loads; waiting twice as long means versions in a loop never tier
/// up (each would cost a Cranelift compile of a second or more), and the last one
/// does, within 32 s of the loop's end. An edit after a quiet spell (`next_after` is
/// 1 s) tiers up after [`TIER_UP_DELAY`].
fn tier_up_delay(next_after: Duration) -> Duration {
    (next_after * 2).max(TIER_UP_DELAY)
}

impl Registry {
    /// `ahead`: the plugin serves webhooks and its current version runs optimized code,
    /// so this one is compiled optimized before it serves (see `ahead`).
    pub(super) async fn compile(
        &self,
        digest: [u8; 32],
        format: Format,
        name: &str,
        bytes: &Arc<[u8]>,
        next_after: Duration,
        ahead: bool,
    ) -> Result<Arc<Compiled>, RuntimeError> {
        if let Some(c) = self.compiled.lock().unwrap().get(&digest).and_then(Weak::upgrade) {
            return Ok(c);
        }
        if ahead
            && format == Format::Component
            && self.runtime.tiered()
            && let Some(c) = self.compile_ahead(digest, bytes).await?
        {
            return Ok(self.remember(digest, c));
        }
        let compiled = tokio::time::timeout(COMPILE_TIME, async {
            let turn = self.compiling.clone().acquire_owned().await.map_err(|_| RuntimeError::Closed)?;
            // The same bytes may have been compiled for another name while we waited.
            if let Some(c) = self.compiled.lock().unwrap().get(&digest).and_then(Weak::upgrade) {
                return Ok(Got::Shared(c));
            }
            let (rt, b, name) = (self.runtime.clone(), bytes.clone(), name.to_owned());
            off_runtime(move || {
                let _turn = turn;
                let c = rt.compile_as(format, &name, &b);
                crate::trim::release();
                c
            })
            .await?
            .map(Got::Fresh)
        })
        .await
        .map_err(|_| RuntimeError::Compile(format!("did not compile within {COMPILE_TIME:?}")))??;
        let compiled = match compiled {
            Got::Fresh(c) => c,
            Got::Shared(c) => return Ok(c),
        };
        let compiled = self.remember(digest, compiled);
        if self.runtime.wants_optimizing(&compiled) {
            compiled.keep_source(bytes.clone());
            self.optimize_later(digest, &compiled, tier_up_delay(next_after));
        }
        Ok(compiled)
    }

    /// Shares `compiled` with later loads of the same bytes.
    fn remember(&self, digest: [u8; 32], compiled: Compiled) -> Arc<Compiled> {
        let compiled = Arc::new(compiled);
        let mut cache = self.compiled.lock().unwrap();
        cache.retain(|_, w| w.strong_count() > 0);
        cache.insert(digest, Arc::downgrade(&compiled));
        compiled
    }

    /// Tier-up in the background, one plugin at a time so a host loading many plugins
    /// keeps a core for reconciles. Skipped when no plugin uses the code any more; a
    /// queued tier-up holds only a weak reference, so a replaced version's bytes go
    /// with it.
    fn optimize_later(&self, digest: [u8; 32], compiled: &Arc<Compiled>, delay: Duration) {
        let (rt, weak, queue) = (self.runtime.clone(), Arc::downgrade(compiled), self.optimizing.clone());
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            if weak.strong_count() == 0 {
                return;
            }
            let Ok(turn) = queue.acquire_owned().await else { return };
            if weak.strong_count() == 0 {
                return;
            }
            let _ = off_runtime(move || {
                let _turn = turn;
                let Some(c) = weak.upgrade() else { return };
                let Some(bytes) = c.take_source() else { return };
                let t = std::time::Instant::now();
                match rt.optimize(&c, &bytes) {
                    Ok(()) => tracing::info!(
                        sha256 = %hex::encode(digest), ms = t.elapsed().as_millis() as u64, "plugin code optimized"
                    ),
                    // The baseline code keeps serving; it is correct, only slower.
                    Err(e) => tracing::warn!(sha256 = %hex::encode(digest), "cannot optimize plugin code: {e}"),
                }
                drop((c, bytes));
                crate::trim::release();
            })
            .await;
        });
    }
}

/// A compile's outcome: new code, or code another name's load compiled meanwhile.
enum Got {
    Fresh(Compiled),
    Shared(Arc<Compiled>),
}

/// Runs `f` on a blocking thread; its result, or Err if it panicked.
async fn off_runtime<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, RuntimeError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| RuntimeError::Compile(format!("compile task: {e}")))
}
