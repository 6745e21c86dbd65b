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
//! [`Scope`], which `Runtime` opens around one compile of one plugin (its *line*, the
//! plugin's name) on the compiling thread (compiles run on one thread, `tiers`).
//! Within it, a function is looked up among what this compile has met so far, then
//! among what the line's last compile kept. When the compile succeeds, the functions
//! it used, found or compiled, become what the line keeps; those of the previous
//! version that the new one no longer has go.
//!
//! Guarantees: a compile reuses only code that its own plugin's compiles made, never
//! another plugin's, even where their functions are the same: what one tenant's bytes
//! put in the store cannot end up in another's code. A compile that fails leaves its
//! line as it was. What all lines keep, and what compiles under way have added, stays
//! within the cap: the lines used least recently go first, and a compile that would
//! still pass it keeps compiling, without keeping.
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
        PENDING.with(|p| {
            let previous = p.borrow_mut().replace(pending);
            debug_assert!(previous.is_none(), "compiles do not nest");
        });
        Scope { reuse: self }
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
    /// Makes room for `more` bytes by dropping the lines used least recently, other
    /// than `line`; whether it fits now.
    fn room(&mut self, cap: usize, more: usize, line: &str) -> bool {
        if more > cap {
            return false;
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
            p.next_bytes += f.len();
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
            let mut lines = self.lines.lock().unwrap();
            if !lines.room(self.cap, value.len(), &p.line) {
                return false;
            }
            lines.bytes += value.len();
            p.added += value.len();
            p.next_bytes += value.len();
            p.next.insert(key.into(), value.into());
            true
        })
        .unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime::CacheStore;

    /// What Cranelift does for one function: ask, and offer what it compiled on a miss.
    fn compile(r: &Reuse, key: &str, code: &str) -> Vec<u8> {
        match r.get(key.as_bytes()) {
            Some(found) => found.into_owned(),
            None => {
                r.insert(key.as_bytes(), code.as_bytes().to_vec());
                code.as_bytes().to_vec()
            }
        }
    }

    #[test]
    fn a_plugin_reuses_its_own_functions_and_no_one_elses() {
        let r = Reuse::new(1 << 20);
        let s = r.scope("a");
        compile(&r, "f", "code of f");
        compile(&r, "g", "code of g");
        assert_eq!(s.commit(), Counts { reused: 0, compiled: 2 });
        let s = r.scope("a");
        assert_eq!(compile(&r, "f", "new code"), b"code of f");
        compile(&r, "h", "code of h");
        assert_eq!(s.commit(), Counts { reused: 1, compiled: 1 });
        // Plugin b has an f too: it compiles its own.
        let s = r.scope("b");
        assert_eq!(compile(&r, "f", "b's f"), b"b's f");
        assert_eq!(s.commit(), Counts { reused: 0, compiled: 1 });
        // a keeps what its last compile used: f and h, not g.
        let s = r.scope("a");
        assert_eq!(compile(&r, "g", "g again"), b"g again");
        assert_eq!(compile(&r, "h", "other"), b"code of h");
        assert_eq!(s.commit(), Counts { reused: 1, compiled: 1 });
        assert_eq!(r.totals(), Counts { reused: 2, compiled: 5 });
    }

    #[test]
    fn outside_a_compile_nothing_is_found_or_kept() {
        let r = Reuse::new(1 << 20);
        assert!(!r.insert(b"f", b"code".to_vec()));
        assert!(r.get(b"f").is_none());
        // Another runtime's scope on this thread is not this one's.
        let other = Reuse::new(1 << 20);
        let _s = other.scope("a");
        assert!(!r.insert(b"f", b"code".to_vec()));
        assert_eq!(r.bytes(), 0);
    }

    #[test]
    fn a_failed_compile_leaves_its_line_as_it_was() {
        let r = Reuse::new(1 << 20);
        let s = r.scope("a");
        compile(&r, "f", "code of f");
        s.commit();
        let kept = r.bytes();
        let s = r.scope("a");
        compile(&r, "g", "code of g");
        assert!(r.bytes() > kept, "a compile under way counts");
        drop(s);
        assert_eq!(r.bytes(), kept);
        let s = r.scope("a");
        assert_eq!(compile(&r, "f", "x"), b"code of f");
        assert_eq!(compile(&r, "g", "x"), b"x");
        s.commit();
    }

    #[test]
    fn the_cap_drops_the_line_used_least_recently() {
        let r = Reuse::new(100);
        for line in ["a", "b"] {
            let s = r.scope(line);
            compile(&r, "f", &"x".repeat(40));
            s.commit();
        }
        assert_eq!(r.bytes(), 80);
        // c needs 40 more: a, the older, goes.
        let s = r.scope("c");
        compile(&r, "f", &"y".repeat(40));
        s.commit();
        assert_eq!(r.bytes(), 80);
        let s = r.scope("a");
        assert_eq!(compile(&r, "f", "z"), b"z", "a was dropped");
        s.commit();
        let s = r.scope("b");
        assert_eq!(compile(&r, "f", "z"), "x".repeat(40).as_bytes(), "b was kept");
        s.commit();
        assert_eq!(r.bytes(), 81);
        // A function over the cap is compiled but not kept, and drops no line for it.
        let s = r.scope("d");
        assert!(!r.insert(b"big", vec![0; 101]));
        s.commit();
        assert_eq!(r.bytes(), 81);
        // A removed plugin's functions go.
        r.forget("a");
        assert_eq!(r.bytes(), 80);
    }

    /// A component holding one core module whose functions add `consts` to their
    /// argument, one function per constant.
    fn component(consts: &[u8]) -> Vec<u8> {
        let section = |id: u8, body: Vec<u8>| [vec![id, body.len() as u8], body].concat();
        let n = consts.len() as u8;
        let types = section(1, vec![1, 0x60, 1, 0x7f, 1, 0x7f]);
        let funcs = section(3, [vec![n], vec![0; n as usize]].concat());
        // Each body: no locals; local.get 0, i32.const c, i32.add, end.
        let bodies: Vec<u8> = consts.iter().flat_map(|&c| [7, 0, 0x20, 0, 0x41, c & 0x3f, 0x6a, 0x0b]).collect();
        let code = section(10, [vec![n], bodies].concat());
        let module = [b"\0asm\x01\0\0\0".to_vec(), types, funcs, code].concat();
        [b"\0asm\x0d\0\x01\0".to_vec(), section(1, module)].concat()
    }

    #[test]
    fn cranelift_recompiles_only_the_functions_that_changed() {
        use super::super::{Runtime, RuntimeConfig};
        let rt = Runtime::new(RuntimeConfig { max_instances: 2, ..Default::default() }).unwrap();
        let compile = |plugin: &str, consts: &[u8]| {
            let before = rt.reuse.totals();
            rt.compile_optimized(Some(plugin), &component(consts)).unwrap();
            let after = rt.reuse.totals();
            (after.reused - before.reused, after.compiled - before.compiled)
        };
        let (reused, first) = compile("a", &[1, 2, 3, 4]);
        assert_eq!(reused, 0);
        assert!(first >= 4, "each function compiled: {first}");
        // One function changed: it alone is compiled; the three others (and whatever
        // else wasmtime compiles for the module) come from the first compile.
        assert_eq!(compile("a", &[1, 2, 3, 5]), (first - 1, 1));
        // The same code for another plugin: compiled afresh.
        assert_eq!(compile("b", &[1, 2, 3, 5]), (0, first));
        // Off: nothing kept, nothing reused.
        let off = Runtime::new(RuntimeConfig { max_instances: 2, reuse_max_bytes: 0, ..Default::default() }).unwrap();
        for _ in 0..2 {
            off.compile_optimized(Some("a"), &component(&[1, 2])).unwrap();
        }
        assert_eq!((off.reuse.totals(), off.reuse.bytes()), (Counts::default(), 0));
    }
}
