//! Per-call limits and engine-wide settings, with the reasons for their defaults.

use std::time::Duration;

/// Per-call limits. The defaults suit a reconciler that makes a few dozen API calls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock time for one call, host calls included. Why 30 s: the apiserver's own
    /// request timeout is 60 s, and a reconcile slower than half of it is stuck.
    pub deadline: Duration,
    /// Linear memory of one instance. Why 128 MiB: the shipped plugins peak below 8 MiB;
    /// this leaves room for large lists while 64 concurrent instances stay under 8 GiB.
    pub memory_bytes: usize,
    /// Largest object or string accepted from a plugin in one host call. Why 4 MiB: the
    /// apiserver rejects requests over 3 MiB anyway.
    pub max_payload: usize,
    /// Log lines and Events one call may emit; the rest is dropped with a warning.
    pub log_lines: u32,
    pub events: u32,
    /// Bytes of stdout+stderr one call may write into the host log.
    pub output_bytes: usize,
    /// Wasm fuel (roughly, instructions) one call may burn; None: unmetered. Only
    /// effective when the engine meters fuel (`RuntimeConfig::fuel`).
    pub fuel: Option<u64>,
    /// Instances of this plugin alive at once, so one busy plugin cannot take every
    /// host-wide slot.
    pub max_instances: u32,
    /// Admission reviews one instance serves before it is replaced (1: a fresh
    /// instance per review, as for every other call); see `warm`.
    pub reviews_per_instance: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            deadline: Duration::from_secs(30),
            memory_bytes: 128 << 20,
            max_payload: 4 << 20,
            log_lines: 1000,
            events: 100,
            output_bytes: 64 << 10,
            fuel: None,
            // Why 16: a quarter of the default host-wide 64, so at least four busy
            // plugins can run side by side at full speed.
            max_instances: 16,
            // Why 256: a fresh instance cost ~100 µs of host CPU per SidecarSet review
            // (BENCHMARKS.md, fifth pass), so this spreads it to under half a
            // microsecond, and a plugin that leaks memory is reset long before it fills.
            reviews_per_instance: 256,
        }
    }
}

/// Engine-wide settings.
#[derive(Clone, Debug)]
pub struct RuntimeConfig {
    /// Instances alive at once, host-wide. Why 64: each reserves a pooling slot; 64
    /// concurrent reconciles already saturate two cores many times over.
    pub max_instances: u32,
    /// The largest `Limits::memory_bytes` any plugin may be given.
    pub memory_ceiling: usize,
    /// What all instances' linear memories may add up to, host-wide (see `budget`).
    /// Why 640 MiB: the deployment's container limit is 1 GiB, and the host itself
    /// (watch caches, a compile, requests; about 100 MiB at 1,000 Memcacheds, see
    /// BENCHMARKS.md) keeps the rest.
    pub memory_budget: usize,
    /// The most of `memory_budget` one plugin's instances may hold together. Why a
    /// quarter (160 MiB by default): above the default instance cap of 128 MiB, so one
    /// instance can always grow to its own cap, and three plugins that take all they
    /// may still leave room for the others.
    pub memory_share: usize,
    /// How often the epoch ticks: the granularity of deadlines and yields.
    pub tick: Duration,
    /// Where compiled code is kept across restarts, keyed by the plugin's sha256 and the
    /// engine's compatibility hash. Code loaded from here is trusted as-is, so only the
    /// host may write this directory. None: compile in memory only.
    pub cache_dir: Option<std::path::PathBuf>,
    /// The most the cache directory may hold; the least recently used code goes first.
    /// Why 192 MiB: the deployment's cache volume is a 256 Mi emptyDir, and a compiled
    /// plugin is a few MiB.
    pub cache_max_bytes: u64,
    /// The most memory the compiled functions kept for plugins' next compiles may take
    /// (see `reuse`; 0: none kept). Why 48 MiB: the 1.6 MB SidecarSet plugin keeps about
    /// 5.5 MiB (and holds its old ones beside them while a reload compiles), so a few
    /// plugins' fit within the room the memory budget leaves the host.
    pub reuse_max_bytes: usize,
    /// Meter fuel, so `Limits::fuel` can bound the work of one call. Off by default:
    /// the wall-clock deadline already bounds a call, and metering costs some speed.
    pub fuel: bool,
    /// Which compiler makes plugin code; see [`super::Compiler`].
    pub compiler: super::Compiler,
    /// Name plugin code for `perf` in /tmp/perf-<pid>.map. Off by default: the file
    /// grows with every compile and only a profiler reads it.
    pub perf_map: bool,
    /// The JavaScript engine component script plugins run on; None: found where the
    /// runtime's `script` module says.
    pub script_engine: Option<std::path::PathBuf>,
    /// How the threads long and heavy calls move to rank (see `aside`).
    pub aside_priority: super::Priority,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            max_instances: 64,
            memory_ceiling: 512 << 20,
            memory_budget: 640 << 20,
            memory_share: 160 << 20,
            tick: Duration::from_millis(10),
            cache_dir: None,
            cache_max_bytes: 192 << 20,
            reuse_max_bytes: 48 << 20,
            fuel: false,
            compiler: super::Compiler::default(),
            perf_map: false,
            script_engine: None,
            aside_priority: ASIDE_PRIORITY,
        }
    }
}

/// Why nice 19: the kernel lets the runtime thread have the core back when a review wakes
/// the host (at the next scheduler tick at the latest), and gives the aside threads
/// about 1.5 % of a core the host's own threads keep busy (weight 15 against 1024); on
/// an idle host, or a core of their own, they run at full speed. Under every attack of
/// `scripts/bench-abuse.py` at once, with its load generator no longer starved on its
/// own core, nice 19 left the thread that serves reviews 10.1 s of each 11 s closed
/// loop against 9.85 s at nice 10 (medians), and a healthy webhook 90 % of its alone
/// throughput against 85 % (medians of 27 and 10 attack phases, BENCHMARKS.md, issue
/// 18, 2026-12-07 18:37Z). Nice 10 had been kept as the milder value when both measured
/// the same under the memory attacks alone (issue 18, sixth part). Against idle
/// priority, see `aside`'s caveats.
pub const ASIDE_PRIORITY: super::Priority = super::Priority::Nice(19);

/// Why 10 s: `manifest` and `handlers` only describe the plugin; a plugin that needs
/// longer is broken, and loading waits for it.
pub(super) const DESCRIBE_DEADLINE: Duration = Duration::from_secs(10);
