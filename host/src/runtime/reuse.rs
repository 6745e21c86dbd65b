//! A plugin's optimized code, function by function, kept for its next compile: a
//! reload (or the tier-up of a reloaded version) Cranelift-compiles only the functions
//! that changed and takes the rest from the plugin's previous compile.
//!
//! Why: Cranelift is the heaviest thing the host does, and a reload of a webhook
//! plugin compiles with it before the new version serves (`registry::ahead`), on the
//! core that serves reviews. Most of an edited plugin is the code it was before
//! (serde, the SDK, the standard library): for the 1.6 MB SidecarSet plugin, a whole
//! compile took 1.6 s here, and after its previous version had compiled, 0.38 s for
//! the same code or with one constant changed, 1.17 s with one message changed
//! (the message's length moved the addresses of the data after it, so every
//! function that reads those changed too). `host/examples/reload_compile.rs` measures
//! it; BENCHMARKS.md, issue 23.
//!
//! How: Cranelift's incremental cache asks a store for each function, by a sha256 of
//! the function's IR and the compiler's settings, and offers each function it compiled.
//! [`Reuse`] is that store for the optimizing engine. It answers only inside a
//! [`Scope`], which `Runtime` opens around one compile of one plugin (its *line*: the
//! registry's is the plugin's name within the place it comes from, so a name another
//! place takes later starts afresh) on the compiling thread (compiles run on one
//! thread, `tiers`).
//! Within it, a function is looked up among what this compile has met so far, then
//! among what the line's last compile kept. When the compile succeeds, the functions
//! it used, found or compiled, become what the line keeps; those of the previous
//! version that the new one no longer has go.
//!
//! Guarantees: a compile reuses only code that its own line's compiles made, never
//! another plugin's, even where their functions are the same: what one tenant's bytes
//! put in the store cannot end up in another's code. (Code the registry shares by
//! sha256 tiers up on the line it was first compiled for: the same bytes, so the same
//! functions.) A compile that fails leaves its line as it was. What all lines keep,
//! and what compiles under way have added, is counted against the cap (each function's
//! code, key and bookkeeping): the lines compiled least recently go first, and a
//! compile that would still pass it keeps compiling, without keeping. Caveat: a compile
//! under way holds its line's functions as they were when it began, counted or not,
//! until it ends (at most one line per compile; they run one or two at a time).
//!
//! Caveats: Winch asks no store, so only Cranelift compiles reuse. With the store on,
//! Cranelift hashes every function and copies out each one it compiles: a first compile
//! took 5–12 % longer (the same example). A compile outside any scope (the JavaScript
//! engine's, a test's) pays that and keeps nothing. Kept code lives in memory only; a
//! restart starts every line empty (the code cache on disk keeps whole plugins).

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// Compiled functions by their key (Cranelift's sha256 of the function and settings).
type Functions = HashMap<Box<[u8]>, Arc<[u8]>>;

/// What one kept function costs beside its code: its key, the map's slot and the
/// `Arc`'s counts, about.
const ENTRY: usize = 96;

/// What a function counts against the cap.
fn cost(code: &[u8]) -> usize {
    code.len() + ENTRY
}

/// See the module docs.
pub(super) struct Reuse {
    cap: usize,
    lines: Mutex<Lines>,
    reused: AtomicU64,
    compiled: AtomicU64,
}

impl std::fmt::Debug for Reuse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reuse").field("cap", &self.cap).field("bytes", &self.bytes()).finish()
    }
}

#[derive(Default)]
struct Lines {
    kept: HashMap<Arc<str>, Kept>,
    /// What the kept functions and the compiles under way hold, in bytes.
    bytes: usize,
    /// Counts commits, to find the line used least recently.
    clock: u64,
}

struct Kept {
    functions: Arc<Functions>,
    bytes: usize,
    used: u64,
}

/// One compile's view of the store, on its thread.
struct Pending {
    /// Which `Reuse` opened it (its address), so a second runtime in one process
    /// does not answer for the first.
    owner: usize,
    line: Arc<str>,
    /// The line's kept functions when the compile began.
    before: Option<Arc<Functions>>,
    /// The functions this compile used so far.
    next: Functions,
    next_bytes: usize,
    /// What this compile added to the store's bytes (its new functions).
    added: usize,
    reused: u64,
    compiled: u64,
}

thread_local! {
    static PENDING: RefCell<Option<Pending>> = const { RefCell::new(None) };
}

/// One compile of one plugin; see the module docs. Dropped without
/// [`Scope::commit`], it leaves the line as it was.
pub(super) struct Scope<'a> {
    reuse: &'a Reuse,
    /// Its compile's state lives on the thread that opened it: the scope stays there.
    _here: std::marker::PhantomData<*const ()>,
}

/// What one compile took from its line and compiled itself, in functions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Counts {
    pub reused: u64,
    pub compiled: u64,
}

impl Reuse {
    /// A store holding at most `cap` bytes of compiled functions (0: it keeps nothing).
    pub(super) fn new(cap: usize) -> Arc<Self> {
        Arc::new(Reuse { cap, lines: Default::default(), reused: AtomicU64::new(0), compiled: AtomicU64::new(0) })
    }

    /// Opens the compile of plugin `line` on this thread, until the scope ends.
    pub(super) fn scope(&self, line: &str) -> Scope<'_> {
        let before = self.lines.lock().unwrap().kept.get(line).map(|k| k.functions.clone());
        let pending = Pending {
            owner: self as *const Reuse as usize,
            line: line.into(),
            before,
            next: Functions::new(),
            next_bytes: 0,
            added: 0,
            reused: 0,
            compiled: 0,
        };
        // Compiles do not nest; if one were left open here, what it added goes back.
        if let Some(left) = PENDING.with(|p| p.borrow_mut().replace(pending)) {
            self.lines.lock().unwrap().bytes -= left.added;
        }
        Scope { reuse: self, _here: std::marker::PhantomData }
    }

    /// Drops what plugin `line` keeps (it was removed).
    pub(super) fn forget(&self, line: &str) {
        let mut lines = self.lines.lock().unwrap();
        if let Some(k) = lines.kept.remove(line) {
            lines.bytes -= k.bytes;
        }
    }

    /// What the store holds, in bytes.
    pub(super) fn bytes(&self) -> usize {
        self.lines.lock().unwrap().bytes
    }

    /// Functions reused and compiled by every compile so far.
    pub(super) fn totals(&self) -> Counts {
        Counts { reused: self.reused.load(Relaxed), compiled: self.compiled.load(Relaxed) }
    }

    /// Runs `f` on this thread's compile, if `self` opened it.
    fn pending<T>(&self, f: impl FnOnce(&mut Pending) -> T) -> Option<T> {
        PENDING.with(|p| p.borrow_mut().as_mut().filter(|p| p.owner == self as *const Reuse as usize).map(f))
    }
}

impl Lines {
    /// Makes room for `more` bytes by dropping the lines compiled least recently, other
    /// than `line`; whether it fits now. Drops nothing when even that would not do.
    fn room(&mut self, cap: usize, more: usize, line: &str) -> bool {
        let others: usize = self.kept.iter().filter(|(l, _)| &***l != line).map(|(_, k)| k.bytes).sum();
        if self.bytes - others + more > cap {
            return self.bytes + more <= cap;
        }
        while self.bytes + more > cap {
            let oldest = self.kept.iter().filter(|(l, _)| &***l != line).min_by_key(|(_, k)| k.used);
            let Some(oldest) = oldest.map(|(l, _)| l.clone()) else { return false };
            let k = self.kept.remove(&oldest).expect("found above");
            self.bytes -= k.bytes;
        }
        true
    }
}

impl Scope<'_> {
    /// The compile succeeded: the functions it used become what its line keeps.
    pub(super) fn commit(self) -> Counts {
        let Some(p) = PENDING.with(|p| p.borrow_mut().take()) else { return Counts::default() };
        let counts = Counts { reused: p.reused, compiled: p.compiled };
        let mut lines = self.reuse.lines.lock().unwrap();
        lines.bytes -= p.added;
        if let Some(k) = lines.kept.remove(&p.line) {
            lines.bytes -= k.bytes;
        }
        if !p.next.is_empty() && lines.room(self.reuse.cap, p.next_bytes, &p.line) {
            lines.clock += 1;
            let used = lines.clock;
            lines.bytes += p.next_bytes;
            lines.kept.insert(p.line, Kept { functions: Arc::new(p.next), bytes: p.next_bytes, used });
        }
        counts
    }
}

impl Drop for Scope<'_> {
    fn drop(&mut self) {
        // Not committed: give back what the failed compile added.
        if let Some(p) = PENDING.with(|p| p.borrow_mut().take()) {
            self.reuse.lines.lock().unwrap().bytes -= p.added;
        }
    }
}

impl wasmtime::CacheStore for Reuse {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        let found = self.pending(|p| {
            if let Some(f) = p.next.get(key) {
                return Some(f.to_vec());
            }
            let f = p.before.as_ref()?.get(key)?.clone();
            p.next_bytes += cost(&f);
            p.next.insert(key.into(), f.clone());
            p.reused += 1;
            self.reused.fetch_add(1, Relaxed);
            Some(f.to_vec())
        });
        found.flatten().map(Cow::Owned)
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
        self.pending(|p| {
            p.compiled += 1;
            self.compiled.fetch_add(1, Relaxed);
            let n = cost(&value);
            let mut lines = self.lines.lock().unwrap();
            if !lines.room(self.cap, n, &p.line) {
                return false;
            }
            lines.bytes += n;
            p.added += n;
            p.next_bytes += n;
            // Offered again (a kept one Cranelift could not read back): counted once.
            if let Some(old) = p.next.insert(key.into(), value.into()) {
                p.next_bytes -= cost(&old);
            }
            true
        })
        .unwrap_or(false)
    }
}

#[cfg(test)]
mod tests;
