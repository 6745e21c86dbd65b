//! Two compilers, one contract: how plugin bytes become code the host can run.
//!
//! Cranelift makes fast code slowly (1.3 s for the 950 KiB memcached plugin on this
//! project's 2-core machines); Winch, wasmtime's baseline compiler, makes slower code
//! five times faster (0.23 s; `host/examples/compile_time.rs`, figures in
//! BENCHMARKS.md). A hot reload should not wait for the best code, so by default a new
//! plugin is compiled by Winch and served at once, and the registry then asks for the
//! Cranelift code in the background ([`Compiler::Tiered`]); the swap is invisible to
//! callers because every call picks up the current [`Code`] when it starts, and calls
//! already running finish on the code they began with.
//!
//! Each compiler needs its own Engine (the strategy is engine-wide) and so its own
//! Linker. The baseline engine allocates instances on demand instead of from a pool:
//! its code only serves for the seconds until tier-up, and a second pool would double
//! the host's address-space reservation for nothing.

use std::sync::Arc;

use arc_swap::ArcSwap;
use wasmtime::component::{Component, HasSelf, InstancePre, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Strategy};

use super::bindings::ScriptEngine as PluginBindings;
use super::bindings::exports::wasmop::operator::admission::GuestIndices as AdmissionIndices;
use super::bindings::exports::wasmop::operator::own_writes::GuestIndices as OwnWritesIndices;
use super::bindings::exports::wasmop::operator::reach::GuestIndices as ReachIndices;
use super::bindings::exports::wasmop::operator::reconciler::GuestIndices as ReconcilerIndices;
use super::bindings::exports::wasmop::operator::selectors::GuestIndices as SelectorsIndices;
use super::host::HostState;
use super::{RuntimeConfig, RuntimeError};

/// Which compiler makes a plugin's code.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Compiler {
    /// Winch first, so a new plugin serves within a fraction of a second; Cranelift
    /// code replaces it in the background. A reload of a webhook plugin already on
    /// Cranelift's code compiles the new version with Cranelift before it serves, the
    /// old one serving meanwhile (`registry::ahead`). Why default: load latency is what an
    /// operator author waits on, and steady-state speed arrives seconds later.
    #[default]
    Tiered,
    /// Cranelift only: the slowest load, the fastest code from the first call.
    Optimizing,
    /// Winch only: the fastest load and the least memory while compiling, code about
    /// half as fast. For hosts that reload far more often than they reconcile.
    Baseline,
}

/// An Engine and the Linker holding the contract's imports for it.
pub(super) struct Tier {
    pub engine: Engine,
    pub linker: Linker<HostState>,
}

impl Tier {
    pub fn optimizing(config: &RuntimeConfig, reuse: &Arc<super::reuse::Reuse>) -> Result<Tier, RuntimeError> {
        let mut pool = PoolingAllocationConfig::default();
        // Room for every running call plus the parked warm instances (see `warm`).
        let n = config.max_instances.max(1) + super::warm::HOST_WIDE as u32;
        pool.total_component_instances(n + 2)
            .total_core_instances((n + 2) * 10)
            .total_memories((n + 2) * 2)
            .total_tables((n + 2) * 4)
            .max_memories_per_component(2)
            .max_memory_size(config.memory_ceiling)
            .total_stacks(n + 2);
        let mut cfg = base_config(config);
        cfg.strategy(Strategy::Cranelift).allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        // The store knows whose compile asks by the compiling thread (`reuse`): it relies
        // on `base_config`'s one-thread compiles.
        if config.reuse_max_bytes > 0 {
            cfg.enable_incremental_compilation(reuse.clone())
                .map_err(|e| RuntimeError::Compile(format!("engine: {e}")))?;
        }
        Tier::new(&cfg)
    }

    pub fn baseline(config: &RuntimeConfig) -> Result<Tier, RuntimeError> {
        let mut cfg = base_config(config);
        cfg.strategy(Strategy::Winch).allocation_strategy(InstanceAllocationStrategy::OnDemand);
        Tier::new(&cfg)
    }

    fn new(cfg: &Config) -> Result<Tier, RuntimeError> {
        let engine = Engine::new(cfg).map_err(|e| RuntimeError::Compile(format!("engine: {e}")))?;
        let mut linker = Linker::<HostState>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(|e| RuntimeError::Compile(e.to_string()))?;
        PluginBindings::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s)
            .map_err(|e| RuntimeError::Compile(e.to_string()))?;
        Ok(Tier { engine, linker })
    }

    /// Links a compiled component against the contract: a plugin for another world is
    /// refused here, before it is ever instantiated.
    pub fn code(&self, component: &Component, optimized: bool) -> Result<Code, RuntimeError> {
        let pre = self.linker.instantiate_pre(component).map_err(|e| RuntimeError::WrongWorld(format!("{e:#}")))?;
        let reconciler = ReconcilerIndices::new(&pre).map_err(|e| RuntimeError::WrongWorld(format!("{e:#}")))?;
        let admission = AdmissionIndices::new(&pre).ok();
        let selectors = SelectorsIndices::new(&pre).ok();
        let own_writes = OwnWritesIndices::new(&pre).ok();
        let reach = ReachIndices::new(&pre).ok();
        Ok(Code { pre, reconciler, admission, selectors, own_writes, reach, optimized })
    }
}

/// What both engines share, so a plugin sees the same limits whichever compiled it.
fn base_config(config: &RuntimeConfig) -> Config {
    let mut cfg = Config::new();
    cfg.wasm_component_model(true)
        .epoch_interruption(true)
        .consume_fuel(config.fuel)
        // Why 4 GiB of address space per linear memory, though a plugin may use at most
        // the memory ceiling: every 32-bit index then lands inside the reservation plus
        // guard, so Cranelift drops the bounds check from each load and store (a
        // plugin's JSON work is little else: admission served 8–19 % more reviews/s
        // than with a ceiling-sized reservation, in alternating runs). It is address
        // space, not memory: RSS is what the plugin touches, and the ceiling is still
        // enforced, by the pool's max_memory_size and the Store's limiter.
        .memory_reservation(4 << 30)
        .memory_guard_size(32 << 20)
        .memory_reservation_for_growth(0)
        // Compile on the calling thread only: the registry runs one compile at a time
        // (`registry::compiling`), so a compile takes at most one core, and the others
        // stay with reconciles and reviews whenever a plugin ConfigMap changes.
        .parallel_compilation(false);
    if config.perf_map {
        cfg.profiler(wasmtime::ProfilingStrategy::PerfMap);
    }
    cfg
}

/// Linked code of one tier.
pub(super) struct Code {
    pub pre: InstancePre<HostState>,
    pub reconciler: ReconcilerIndices,
    /// None: the plugin was built for the `plugin` world and serves no webhooks.
    pub admission: Option<AdmissionIndices>,
    /// None: the plugin narrows no watch by selectors (it predates them, or needs none).
    pub selectors: Option<SelectorsIndices>,
    /// None: the plugin's own writes are news to it (it predates the export).
    pub own_writes: Option<OwnWritesIndices>,
    /// None: the plugin calls only where it watches (it predates the export).
    pub reach: Option<ReachIndices>,
    pub optimized: bool,
}

/// A compiled plugin, ready to instantiate. Cheap to clone; clones share the code, so
/// a tier-up reaches every holder.
#[derive(Clone)]
pub struct Compiled {
    code: Arc<ArcSwap<Code>>,
    size: usize,
    pub(super) idle: super::warm::Idle,
    /// The bytes a pending tier-up will compile: held here, not by the queued tier-up,
    /// so a version replaced before its turn frees them with itself.
    source: Arc<std::sync::Mutex<Option<Arc<[u8]>>>>,
    /// A script plugin's source, read by the engine through the `script` import; its
    /// code is the engine's, shared with every other script plugin.
    pub(super) script: Option<Arc<super::script::Script>>,
    /// Whose compiles this code's tier-up may reuse (`reuse`): the line it was first
    /// compiled for. Code shared by sha256 is the same bytes under another name, so
    /// its functions are that name's too.
    pub(super) line: Arc<str>,
}

impl Compiled {
    pub(super) fn new(code: Code, size: usize, line: &str) -> Compiled {
        Compiled {
            code: Arc::new(ArcSwap::from_pointee(code)),
            size,
            idle: Default::default(),
            source: Default::default(),
            script: None,
            line: line.into(),
        }
    }

    /// A script plugin: the engine's shared code and the plugin's script.
    pub(super) fn script(engine: Arc<Code>, script: Arc<super::script::Script>, size: usize) -> Compiled {
        Compiled {
            code: Arc::new(ArcSwap::new(engine)),
            size,
            idle: Default::default(),
            source: Default::default(),
            script: Some(script),
            line: "".into(),
        }
    }

    /// Whether this is a script plugin, run on the JavaScript engine.
    pub fn is_script(&self) -> bool {
        self.script.is_some()
    }

    /// Keeps `bytes` for a tier-up to come (see [`Compiled::take_source`]).
    pub fn keep_source(&self, bytes: Arc<[u8]>) {
        *self.source.lock().unwrap() = Some(bytes);
    }

    /// The bytes kept for a tier-up, once.
    pub fn take_source(&self) -> Option<Arc<[u8]>> {
        self.source.lock().unwrap().take()
    }

    pub(super) fn current(&self) -> Arc<Code> {
        self.code.load_full()
    }

    pub(super) fn replace(&self, code: Code) {
        self.code.store(Arc::new(code));
    }

    /// Size of the component's bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Whether the code now serving came from the optimizing compiler.
    pub fn optimized(&self) -> bool {
        self.code.load().optimized
    }

    /// Whether the component exports the `admission` interface.
    pub fn serves_admission(&self) -> bool {
        self.code.load().admission.is_some()
    }

    /// The names of the component's imports and exports, for `wasmop inspect`.
    pub fn interfaces(&self) -> (Vec<String>, Vec<String>) {
        let code = self.current();
        let component = code.pre.component();
        let ty = component.component_type();
        let engine = component.engine();
        (
            ty.imports(engine).map(|(n, _)| n.to_owned()).collect(),
            ty.exports(engine).map(|(n, _)| n.to_owned()).collect(),
        )
    }
}
