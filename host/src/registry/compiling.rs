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
//! reviews; the delay means a plugin rewritten in a loop costs no Cranelift work at
//! all (each version is gone before its tier-up starts); the time cap turns a compile
//! that does not end into a rejected version instead of a stuck load. Compiled code is
//! shared by sha256, so the same bytes under many names compile once. (Lowering the
//! priority of every compile was tried and dropped: on a busy machine a first load's
//! niced compile starved for minutes, and nothing served meanwhile.)
//!
//! A reload of a webhook plugin already on optimized code skips the baseline tier
//! (`ahead`).
//!
//! A version that came in a loop (the source's reload interval for its plugin has
//! grown to [`LOOPING_FROM`]: the third of versions in quick succession, and later
//! ones) compiles at [`LOOP_NICE`] in a turn of its own, never ahead.
//! Why: whoever may write a plugin ConfigMap can keep a compile coming for ever, and
//! at full priority each took the host's core from reviews for a third of a second: a
//! tenth of the host's CPU while a healthy webhook saturated it (issue 18's churn
//! attack, BENCHMARKS.md). At nice 19 it takes what reviews and reconciles leave, so
//! the plugin that loops is the one that waits; its own turn means it never holds up
//! another plugin's load; an author's edits (two in quick succession included) still
//! compile at full priority. Caveat: on a core kept busy by others such a compile gets
//! about 1.5 % of it, so a 1 MB plugin's takes ~25 s instead of a third of one; its
//! time cap is [`LOOP_COMPILE_TIME`], so that a loop's last version is not refused
//! for having waited (it holds up nothing but later versions of looping plugins).
//!
//! Caveat: wasmtime cannot cancel a compile; one past its time cap runs on to its end
//! on its own thread, holding the compile turn, so later compiles wait for it (within
//! their own time cap) rather than run beside it.

use super::Registry;
use crate::runtime::{Compiled, Format, Priority, RuntimeError, niced_thread};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// The longest a version's compile (waiting for its turn included) may take. Why 60 s:
/// Cranelift compiles the 1 MB Memcached plugin in 1.3 s here, so a minute is far past
/// any real plugin, and a load that waits longer is stuck.
pub const COMPILE_TIME: Duration = Duration::from_secs(60);

/// The time cap of a compile of a version that came in a loop (see the module docs).
/// Why ten times [`COMPILE_TIME`]: at [`LOOP_NICE`] on a core that others keep busy a
/// compile gets about a seventieth of it, and it waits in a turn of its own.
pub const LOOP_COMPILE_TIME: Duration = Duration::from_secs(600);

/// How long a version must have been serving before its tier-up starts. Why 2 s:
/// longer than the least time between two versions of one plugin (1 s); short enough
/// that steady-state speed arrives within seconds of a real reload.
pub const TIER_UP_DELAY: Duration = Duration::from_secs(2);

/// The reload interval from which a plugin's versions count as coming in a loop. Why
/// 4 s (the third doubling from 1 s): an author who saves twice within two seconds,
/// or a metadata change just after an edit, still compiles at full priority.
pub const LOOPING_FROM: Duration = Duration::from_secs(4);

/// The nice value of a compile of a version that came in a loop. Why 19 (weight 15
/// against a review thread's 1024): such versions are replaced anyway, so they get
/// only what nobody else wants; a loop's last version still loads within a minute on
/// a core one busy thread keeps saturated.
pub const LOOP_NICE: i32 = 19;

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
        // The plugin's name, and its line for reused functions (`Place::reuse_line`).
        (name, line): (&str, &str),
        bytes: &Arc<[u8]>,
        next_after: Duration,
        ahead: bool,
    ) -> Result<Arc<Compiled>, RuntimeError> {
        if let Some(c) = self.compiled.lock().unwrap().get(&digest).and_then(Weak::upgrade) {
            return Ok(c);
        }
        // A version in a loop is never compiled ahead: that would be a Cranelift compile
        // in the tier-up turn for each version of the loop.
        let looping = next_after >= LOOPING_FROM;
        if ahead
            && !looping
            && format == Format::Component
            && self.runtime.tiered()
            && let Some(c) = self.compile_ahead(digest, line, bytes).await?
        {
            return Ok(self.remember(digest, c));
        }
        let cap = if looping { LOOP_COMPILE_TIME } else { COMPILE_TIME };
        let compiled = tokio::time::timeout(cap, async {
            let queue = if looping { &self.looping } else { &self.compiling };
            let turn = queue.clone().acquire_owned().await.map_err(|_| RuntimeError::Closed)?;
            // The same bytes may have been compiled for another name while we waited.
            if let Some(c) = self.compiled.lock().unwrap().get(&digest).and_then(Weak::upgrade) {
                return Ok(Got::Shared(c));
            }
            let (rt, b, name, line) = (self.runtime.clone(), bytes.clone(), name.to_owned(), line.to_owned());
            let job = move || {
                let _turn = turn;
                rt.compile_as(format, &name, &line, &b)
            };
            let c = if looping {
                at_low_priority("wasmop-looping", Priority::Nice(LOOP_NICE), job).await?
            } else {
                off_runtime(c"wasmop-compile", job).await?
            };
            // Trimmed at the host's priority: a trim locks the allocator's arenas, which a
            // preempted niced thread would hold while reviews wait.
            off_runtime(c"wasmop-trim", crate::trim::release).await?;
            c.map(Got::Fresh)
        })
        .await
        .map_err(|_| RuntimeError::Compile(format!("did not compile within {cap:?}")))??;
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
    /// with it. While a newer version of a plugin serving this code loads, the tier-up
    /// waits for that load's end (for at most [`COMPILE_TIME`]): a version in a loop
    /// whose successor compiles slowly (at [`LOOP_NICE`]) would otherwise outlive its
    /// delay and be optimized (seconds of Cranelift at full priority) just before it
    /// goes.
    fn optimize_later(&self, digest: [u8; 32], compiled: &Arc<Compiled>, delay: Duration) {
        let (rt, weak, queue) = (self.runtime.clone(), Arc::downgrade(compiled), self.optimizing.clone());
        let replacing = self.replacing.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let (sha256, since) = (hex::encode(digest), std::time::Instant::now());
            // At most COMPILE_TIME in all, so that a plugin whose new versions keep
            // failing to load still gets its current version optimized.
            let replaced = || replacing.contains(&sha256) && since.elapsed() < COMPILE_TIME;
            let turn = loop {
                let mut waited = false;
                while replaced() && weak.strong_count() > 0 {
                    waited = true;
                    tokio::time::sleep(REPLACING_POLL).await;
                }
                if waited && replacing.contains(&sha256) && weak.strong_count() > 0 {
                    tracing::info!(
                        sha256 = %sha256,
                        "a newer version of this plugin is still loading after {COMPILE_TIME:?}: optimizing this one"
                    );
                } else if waited {
                    // The new version serves now; calls that began on this code end first.
                    tokio::time::sleep(REPLACING_POLL).await;
                }
                if weak.strong_count() == 0 {
                    return;
                }
                let Ok(turn) = queue.clone().acquire_owned().await else { return };
                // A load that began while this waited for its turn: wait for it too.
                if !replaced() {
                    break turn;
                }
            };
            if weak.strong_count() == 0 {
                return;
            }
            let _ = off_runtime(c"wasmop-tier-up", move || {
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

/// How often a tier-up waiting for a newer version's load looks again.
const REPLACING_POLL: Duration = Duration::from_millis(500);

/// The code (by sha256) of plugins loading a new version, counted since one code may
/// serve several names: their tier-ups wait (see `optimize_later`).
#[derive(Default)]
pub(super) struct Replacing(Mutex<HashMap<String, usize>>);

/// One load's mark on the code it replaces; taken off when dropped.
pub(super) struct Replaced {
    all: Arc<Replacing>,
    sha256: String,
}

impl Replacing {
    /// Marks `sha256` as being replaced until the returned mark is dropped.
    pub(super) fn begin(self: &Arc<Self>, sha256: &str) -> Replaced {
        *self.0.lock().unwrap().entry(sha256.to_owned()).or_default() += 1;
        Replaced { all: self.clone(), sha256: sha256.to_owned() }
    }

    fn contains(&self, sha256: &str) -> bool {
        self.0.lock().unwrap().contains_key(sha256)
    }
}

impl Drop for Replaced {
    fn drop(&mut self) {
        let mut all = self.all.0.lock().unwrap();
        if let Some(n) = all.get_mut(&self.sha256) {
            *n -= 1;
            if *n == 0 {
                all.remove(&self.sha256);
            }
        }
    }
}

/// A compile's outcome: new code, or code another name's load compiled meanwhile.
enum Got {
    Fresh(Compiled),
    Shared(Arc<Compiled>),
}

/// Runs `f` on a blocking thread, named `name` while it runs (`thread_name`); its
/// result, or Err if it panicked.
async fn off_runtime<T: Send + 'static>(
    name: &'static std::ffi::CStr,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, RuntimeError> {
    tokio::task::spawn_blocking(move || {
        let _named = crate::thread_name::Named::now(name);
        f()
    })
    .await
    .map_err(|e| RuntimeError::Compile(format!("compile task: {e}")))
}

/// Runs `f` on a new thread named `name` at `priority` (`runtime::niced`); its result,
/// or Err if it panicked.
pub(super) async fn at_low_priority<T: Send + 'static>(
    name: &str,
    priority: Priority,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, RuntimeError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let job = move || {
        let _ = tx.send(f());
    };
    niced_thread(name, priority, job).map_err(|e| RuntimeError::Compile(format!("compile thread: {e}")))?;
    rx.await.map_err(|_| RuntimeError::Compile("the compile thread panicked".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::runtime::own_priority as own_nice;

    #[tokio::test]
    async fn the_compile_thread_runs_niced_and_named_and_the_caller_does_not() {
        let before = own_nice();
        let (inside, name) = at_low_priority("wasmop-looping", Priority::Nice(LOOP_NICE), || {
            (own_nice(), std::thread::current().name().map(str::to_owned))
        })
        .await
        .unwrap();
        assert_eq!(inside, LOOP_NICE.max(before));
        assert_eq!(name.as_deref(), Some("wasmop-looping"));
        assert_eq!(own_nice(), before, "the caller's priority is left alone");
    }

    #[tokio::test]
    async fn a_version_in_a_loop_compiles_in_a_turn_of_its_own() {
        let runtime = crate::runtime::Runtime::new(crate::runtime::RuntimeConfig::default()).unwrap();
        let registry = super::super::Registry::new(Arc::new(runtime));
        // Another plugin's first load holds the compile turn.
        let _held = registry.compiling.clone().acquire_owned().await.unwrap();
        let bytes: Arc<[u8]> = Arc::from(&b"\0asm not a component"[..]);
        let compile = |digest, next_after| {
            registry.compile(digest, Format::Component, ("loop", "loop"), &bytes, next_after, false)
        };
        // In a loop: compiled (and refused: these bytes are no component) without waiting.
        let looped = tokio::time::timeout(Duration::from_secs(30), compile([1; 32], LOOPING_FROM)).await;
        let e = looped.expect("a looping version waited for another plugin's compile").err().expect("refused");
        assert!(!e.to_string().contains("within"), "{e}");
        // An author's edit after a quiet spell takes the shared turn: it waits.
        let edit = tokio::time::timeout(Duration::from_millis(500), compile([2; 32], MIN_RELOAD_INTERVAL * 2)).await;
        assert!(edit.is_err(), "a version not in a loop did not wait for the held turn");
    }

    #[test]
    fn code_is_marked_replaced_while_any_load_replacing_it_lasts() {
        let all = Arc::new(Replacing::default());
        let a = all.begin("c0de");
        let b = all.begin("c0de");
        assert!(all.contains("c0de") && !all.contains("other"));
        drop(a);
        assert!(all.contains("c0de"), "another load still replaces it");
        drop(b);
        assert!(!all.contains("c0de"));
    }

    #[tokio::test]
    async fn a_panicking_compile_is_an_error_not_a_crash() {
        let e = at_low_priority("wasmop-looping", Priority::Nice(LOOP_NICE), || -> u8 { panic!("boom") })
            .await
            .unwrap_err();
        assert!(e.to_string().contains("panicked"), "{e}");
    }
}
