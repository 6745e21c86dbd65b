//! The runtime: the only place that touches wasmtime.
//!
//! One [`Runtime`] holds the engines (Cranelift with a pooling allocator, and Winch for
//! quick loads — see `tiers`), with epoch interruption driven by a ticker thread that sleeps while no call runs
//! (`ticker`), and
//! their Linkers with the contract's imports and a locked-down WASI.
//! [`Runtime::compile`] turns plugin bytes into a [`Compiled`] (Component + pre-checked
//! instantiation) and [`Runtime::optimize`] later swaps in Cranelift's code. Each
//! reconcile gets a **fresh Store**, so no state survives between reconciles and a
//! trapped instance is simply dropped; admission reviews may run on a warm instance of
//! the same plugin version instead (`warm`).
//!
//! Every call is bounded (`call`): a wall-clock deadline that covers waiting for a slot
//! too (the epoch ticker makes the guest yield every tick, so a spinning plugin never
//! blocks a runtime thread and the deadline can fire), a memory cap per instance inside
//! a host-wide memory budget with a share per plugin (`budget`), a cap on any payload
//! the plugin hands the host, log, Event and output budgets, and host-wide and
//! per-plugin caps on concurrent instances. Threads go to short calls first; long
//! calls take turns while short ones are busy (`cpu`), the plugins waiting in rotation
//! (`lane`). Compiled code may be kept on disk, under a
//! size cap (`code_cache`), and a plugin's next Cranelift compile reuses the functions
//! of its last one that did not change (`reuse`).

mod admission;
mod aside;
mod bindings;
mod budget;
mod call;
mod code_cache;
mod config;
mod convert;
mod cpu;
mod error;
mod freeing;
mod host;
mod lane;
mod limiter;
mod niced;
mod output;
mod reuse;
mod script;
mod throttle;
mod ticker;
mod tiers;
mod warm;

use std::sync::Arc;
use std::time::Duration;
use wasmop_sdk::{Action, Manifest, ObjectRef, ReconcileError};
use wasmtime::component::Component;

use crate::gateway::Gateway;
pub use budget::MemoryBudget;
use code_cache::CodeCache;
use config::DESCRIBE_DEADLINE;
pub use config::{ASIDE_PRIORITY, Limits, RuntimeConfig};
pub use error::{RuntimeError, TrapKind};
pub use niced::Priority;
#[cfg(test)]
pub(crate) use niced::own_policy;
#[cfg(test)]
pub(crate) use niced::own_priority;
pub(crate) use niced::{NicedRuntime, thread as niced_thread};
pub use script::Format;
use tiers::{Code, Tier};
pub use tiers::{Compiled, Compiler};

/// A plugin's instance cap and its semaphore.
type PluginSlots = (u32, Arc<tokio::sync::Semaphore>);

/// See the module docs.
pub struct Runtime {
    optimizing: Tier,
    /// None with `Compiler::Optimizing`, or where Winch cannot build an engine.
    baseline: Option<Tier>,
    slots: Arc<tokio::sync::Semaphore>,
    /// Per plugin name: (capacity, slots).
    plugin_slots: std::sync::Mutex<std::collections::HashMap<Arc<str>, PluginSlots>>,
    config: RuntimeConfig,
    /// Warm instances parked host-wide (at most `warm::HOST_WIDE`).
    parked: Arc<std::sync::atomic::AtomicUsize>,
    /// What every instance's linear memories add up to (see `budget`).
    budget: Arc<MemoryBudget>,
    /// Short calls first, long ones take turns (see `cpu`).
    cpu: Arc<cpu::Cpu>,
    code_cache: Option<CodeCache>,
    /// Each plugin's optimized functions, for its next compile (see `reuse`).
    reuse: Arc<reuse::Reuse>,
    /// Advances the epoch while a call runs (see `ticker`).
    ticker: ticker::Ticker,
    /// The threads long and heavy calls move to (see `aside`).
    aside: aside::Aside,
    /// The JavaScript engine's code, once a script plugin needed it (see `script`).
    script_engine: std::sync::Mutex<Option<Arc<tiers::Code>>>,
}

impl Runtime {
    pub fn new(config: RuntimeConfig) -> Result<Self, RuntimeError> {
        let reuse = reuse::Reuse::new(config.reuse_max_bytes);
        let optimizing = Tier::optimizing(&config, &reuse)?;
        let baseline = match config.compiler {
            Compiler::Optimizing => None,
            Compiler::Tiered | Compiler::Baseline => match Tier::baseline(&config) {
                Ok(t) => Some(t),
                Err(e) => {
                    tracing::warn!("the baseline compiler is unavailable, compiling with Cranelift only: {e}");
                    None
                }
            },
        };

        let weak: Vec<_> = std::iter::once(&optimizing).chain(&baseline).map(|t| t.engine.weak()).collect();
        let ticker = ticker::Ticker::start(config.tick, move || {
            for w in &weak {
                if let Some(e) = w.upgrade() {
                    e.increment_epoch();
                }
            }
        })
        .map_err(|e| RuntimeError::Compile(format!("epoch thread: {e}")))?;

        let n = config.max_instances.max(1);
        // As many as the host's own runtime has workers (outside one: the cores this
        // process may run on, tokio's default).
        let threads = tokio::runtime::Handle::try_current().map_or_else(
            |_| std::thread::available_parallelism().map_or(1, |n| n.get()),
            |h| h.metrics().num_workers(),
        );
        let aside = aside::Aside::new(threads, config.aside_priority);
        Ok(Runtime {
            optimizing,
            baseline,
            slots: Arc::new(tokio::sync::Semaphore::new(n as usize)),
            plugin_slots: Default::default(),
            budget: MemoryBudget::new(config.memory_budget, config.memory_share),
            cpu: cpu::Cpu::new(),
            code_cache: config.cache_dir.clone().map(|d| CodeCache::new(d, config.cache_max_bytes)),
            reuse,
            config,
            parked: Default::default(),
            ticker,
            aside,
            script_engine: Default::default(),
        })
    }

    /// The host-wide memory budget the runtime's instances are held to.
    pub fn budget(&self) -> &Arc<MemoryBudget> {
        &self.budget
    }

    /// Compiles and type-checks plugin bytes: with Winch when tiered (then call
    /// [`Runtime::optimize`] off the hot path), Cranelift code from the cache
    /// directory when it is there. `line` names whose earlier Cranelift compiles the
    /// compiles of this code may reuse (`reuse`; the registry's is the plugin's name
    /// within the place it comes from). CPU-heavy: run it off the async runtime
    /// (`spawn_blocking`).
    pub fn compile(&self, line: &str, bytes: &[u8]) -> Result<Compiled, RuntimeError> {
        check_header(bytes)?;
        if let Some(component) = self.cached(bytes) {
            return Ok(Compiled::new(self.optimizing.code(&component, true)?, bytes.len(), line));
        }
        if let Some(baseline) = &self.baseline {
            match Component::new(&baseline.engine, bytes) {
                Ok(component) => return Ok(Compiled::new(baseline.code(&component, false)?, bytes.len(), line)),
                // Winch does not take every proposal Cranelift does; such a plugin
                // just loads at the slower pace.
                Err(e) => tracing::debug!("baseline compile failed, using Cranelift: {e:#}"),
            }
        }
        let component = self.compile_optimized(Some(line), bytes)?;
        Ok(Compiled::new(self.optimizing.code(&component, true)?, bytes.len(), line))
    }

    /// Compiles with Cranelift now (or takes its code from the cache), skipping the
    /// baseline tier: for a reload of a plugin whose current version already runs
    /// optimized code, so the new version does not serve slower code than the old
    /// one did (see `registry::compiling`). CPU-heavy, like `compile`.
    pub fn compile_optimizing(&self, line: &str, bytes: &[u8]) -> Result<Compiled, RuntimeError> {
        check_header(bytes)?;
        let component = match self.cached(bytes) {
            Some(c) => c,
            None => self.compile_optimized(Some(line), bytes)?,
        };
        Ok(Compiled::new(self.optimizing.code(&component, true)?, bytes.len(), line))
    }

    /// Functions Cranelift compiles so far took from their plugin's last compile, and
    /// compiled themselves; and the bytes kept for the next compiles (see `reuse`).
    pub fn reused_functions(&self) -> (u64, u64, usize) {
        let t = self.reuse.totals();
        (t.reused, t.compiled, self.reuse.bytes())
    }

    /// Forgets what `line`'s compiles kept for its next one (see `reuse`): it was removed.
    pub fn forget_code(&self, line: &str) {
        self.reuse.forget(line);
    }

    /// Whether plugins load on baseline code first and tier up later.
    pub fn tiered(&self) -> bool {
        self.config.compiler == Compiler::Tiered
    }

    /// Whether `c` still runs baseline code that [`Runtime::optimize`] should replace.
    pub fn wants_optimizing(&self, c: &Compiled) -> bool {
        self.tiered() && !c.optimized()
    }

    /// Replaces `c`'s code with Cranelift's (compiled now, or loaded from the cache).
    /// Calls that start afterwards run the new code. CPU-heavy, like `compile`.
    pub fn optimize(&self, c: &Compiled, bytes: &[u8]) -> Result<(), RuntimeError> {
        let component = match self.cached(bytes) {
            Some(c) => c,
            None => self.compile_optimized(Some(&c.line), bytes)?,
        };
        c.replace(self.optimizing.code(&component, true)?);
        Ok(())
    }

    fn cached(&self, bytes: &[u8]) -> Option<Component> {
        self.code_cache.as_ref()?.load(&self.optimizing.engine, bytes)
    }

    /// Compiles with Cranelift, reusing what `line`'s last compile made of the
    /// functions that did not change (None: nothing reused or kept), and keeps the code
    /// in the cache directory, if any.
    fn compile_optimized(&self, line: Option<&str>, bytes: &[u8]) -> Result<Component, RuntimeError> {
        let scope = line.map(|l| self.reuse.scope(l));
        let component =
            Component::new(&self.optimizing.engine, bytes).map_err(|e| RuntimeError::Compile(format!("{e:#}")))?;
        if let (Some(n), Some(line)) = (scope.map(reuse::Scope::commit), line)
            && n.reused > 0
        {
            tracing::info!(
                line = %line,
                reused = n.reused,
                compiled = n.compiled,
                "functions reused from the plugin's last compile"
            );
        }
        if let Some(cache) = &self.code_cache {
            cache.store(&self.optimizing.engine, bytes, &component);
        }
        Ok(component)
    }

    /// Asks a compiled plugin for its manifest under `settings`. The plugin has no
    /// cluster access during this call.
    pub async fn manifest(
        &self,
        c: &Compiled,
        name: &str,
        settings: &str,
        limits: &Limits,
    ) -> Result<Manifest, RuntimeError> {
        let limits = Limits { deadline: limits.deadline.min(DESCRIBE_DEADLINE), ..limits.clone() };
        let settings = settings.to_owned();
        let r = self
            .call(c, name, None, &limits, None, move |code, i, s| {
                Box::pin(async move {
                    let settings = settings.as_str();
                    let m = code.reconciler.load(&mut *s, i)?.call_manifest(&mut *s, settings).await?;
                    let selectors = match &code.selectors {
                        Some(x) => x.load(&mut *s, i)?.call_selector_watches(&mut *s, settings).await?,
                        None => Ok(Vec::new()),
                    };
                    let skip_own_writes = match &code.own_writes {
                        Some(x) => x.load(&mut *s, i)?.call_skip_own_writes(&mut *s, settings).await?,
                        None => false,
                    };
                    let call_namespaces = match &code.reach {
                        Some(x) => x.load(&mut *s, i)?.call_call_namespaces(&mut *s, settings).await?,
                        None => Vec::new(),
                    };
                    Ok((m, selectors, convert::Extras { skip_own_writes, call_namespaces }))
                })
            })
            .await?;
        match r {
            (Ok(m), Ok(selectors), extras) => convert::manifest(m, selectors, extras).map_err(RuntimeError::Manifest),
            (Err(e), _, _) => Err(RuntimeError::Manifest(e)),
            (_, Err(e), _) => Err(RuntimeError::Manifest(format!("selector-watches: {e}"))),
        }
    }

    /// Runs one reconcile. The outer error is the host's view (trap, timeout); the inner
    /// one is the plugin's own answer.
    pub async fn reconcile(
        &self,
        c: &Compiled,
        gateway: Gateway,
        object: &ObjectRef,
        current: Option<&str>,
        settings: &str,
        limits: &Limits,
    ) -> Result<Result<Action, ReconcileError>, RuntimeError> {
        let req = bindings::exports::wasmop::operator::reconciler::Request {
            object: convert::wit_ref(object),
            current: current.map(str::to_owned),
            settings: settings.to_owned(),
        };
        let name = gateway.plugin().to_owned();
        let r = self
            .call(c, &name, Some((gateway, Some(object.clone()))), limits, None, move |code, i, s| {
                Box::pin(async move {
                    // The object handed in counts toward the call's compute allowance.
                    s.data_mut().exchanged += req.current.as_ref().map_or(0, |c| c.len() as u64);
                    code.reconciler.load(&mut *s, i)?.call_reconcile(s, &req).await
                })
            })
            .await?;
        Ok(match r {
            Ok(a) => Ok(Action { requeue_after: a.requeue_after_ms.map(Duration::from_millis) }),
            Err(e) => Err(ReconcileError { message: e.message, retry: e.retry }),
        })
    }
}

fn check_header(bytes: &[u8]) -> Result<(), RuntimeError> {
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        return Err(RuntimeError::NotAComponent("the file is not WebAssembly (no \\0asm header)".into()));
    }
    if bytes[4..8] == [1, 0, 0, 0] {
        return Err(RuntimeError::NotAComponent(
            "this is a core WebAssembly module; build the plugin with `cargo component build` or `cargo build --target wasm32-wasip2`".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_dir_round_trip() {
        // The smallest valid component: compiled once, then loaded from the cache.
        let empty_component = b"\0asm\x0d\0\x01\0";
        let dir = tempfile::tempdir().unwrap();
        let cfg = RuntimeConfig { max_instances: 2, cache_dir: Some(dir.path().into()), ..Default::default() };
        let rt = Runtime::new(cfg).unwrap();
        rt.compile_optimized(None, empty_component).unwrap();
        use std::os::unix::fs::MetadataExt;
        let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().path()).collect();
        assert_eq!(files.len(), 1, "one cached artefact");
        let inode = std::fs::metadata(&files[0]).unwrap().ino();
        assert!(rt.cached(empty_component).is_some(), "loaded from the cache");
        assert_eq!(std::fs::metadata(&files[0]).unwrap().ino(), inode, "loaded from the cache, not rewritten");
        // It is not a plugin, and says so, whether compiled or cached.
        assert!(matches!(rt.compile("empty", empty_component), Err(RuntimeError::WrongWorld(_))));
    }

    #[test]
    fn rejects_non_wasm_and_core_modules_with_a_reason() {
        let rt = Runtime::new(RuntimeConfig { max_instances: 2, ..Default::default() }).unwrap();
        let e = rt.compile("x", b"hello world, not wasm").err().unwrap();
        assert!(matches!(e, RuntimeError::NotAComponent(ref m) if m.contains("not WebAssembly")), "{e}");
        let core = b"\0asm\x01\0\0\0";
        let e = rt.compile("x", core).err().unwrap();
        assert!(matches!(e, RuntimeError::NotAComponent(ref m) if m.contains("core WebAssembly module")), "{e}");
    }
}
