//! The runtime: the only place that touches wasmtime.
//!
//! One [`Runtime`] holds the Engine (pooling allocator, epoch interruption driven by a
//! ticker thread) and the Linker with the contract's imports and a locked-down WASI.
//! [`Runtime::compile`] turns plugin bytes into a [`Compiled`] (Component + pre-checked
//! instantiation); each call then gets a **fresh Store**, so no state survives between
//! reconciles and a trapped instance is simply dropped.
//!
//! Every call is bounded: a wall-clock deadline (the epoch ticker makes the guest yield
//! every tick, so a spinning plugin never blocks a runtime thread and the deadline can
//! fire), a memory cap, a cap on any payload the plugin hands the host, log, Event and
//! output budgets, and a host-wide cap on concurrent instances.

mod admission;
mod bindings;
mod config;
mod convert;
mod error;
mod host;
mod output;

use bindings::WebhookPlugin as PluginBindings;
use bindings::exports::wasmop::operator::admission::GuestIndices as AdmissionIndices;
use bindings::exports::wasmop::operator::reconciler::GuestIndices as ReconcilerIndices;
use host::HostState;
use std::sync::Arc;
use std::time::Duration;
use wasmop_sdk::{Action, Manifest, ObjectRef, ReconcileError};
use wasmtime::component::{Component, HasSelf, InstancePre, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, StoreLimitsBuilder};

use crate::gateway::Gateway;
use config::DESCRIBE_DEADLINE;
pub use config::{Limits, RuntimeConfig};
use error::classify;
pub use error::{RuntimeError, TrapKind};

/// A compiled plugin, ready to instantiate. Cheap to clone.
#[derive(Clone)]
pub struct Compiled {
    pre: InstancePre<HostState>,
    reconciler: ReconcilerIndices,
    /// None: the plugin was built for the `plugin` world and serves no webhooks.
    admission: Option<AdmissionIndices>,
    size: usize,
}

impl Compiled {
    /// Size of the component's bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Whether the component exports the `admission` interface.
    pub fn serves_admission(&self) -> bool {
        self.admission.is_some()
    }

    /// The names of the component's imports and exports, for `wasmop inspect`.
    pub fn interfaces(&self, engine: &Engine) -> (Vec<String>, Vec<String>) {
        let ty = self.pre.component().component_type();
        (
            ty.imports(engine).map(|(n, _)| n.to_owned()).collect(),
            ty.exports(engine).map(|(n, _)| n.to_owned()).collect(),
        )
    }
}

/// A plugin's instance cap and its semaphore.
type PluginSlots = (u32, Arc<tokio::sync::Semaphore>);

/// See the module docs.
pub struct Runtime {
    engine: Engine,
    linker: Linker<HostState>,
    slots: Arc<tokio::sync::Semaphore>,
    /// Per plugin name: (capacity, slots).
    plugin_slots: std::sync::Mutex<std::collections::HashMap<Arc<str>, PluginSlots>>,
    config: RuntimeConfig,
}

impl Runtime {
    pub fn new(config: RuntimeConfig) -> Result<Self, RuntimeError> {
        let mut pool = PoolingAllocationConfig::default();
        let n = config.max_instances.max(1);
        pool.total_component_instances(n + 2)
            .total_core_instances((n + 2) * 10)
            .total_memories((n + 2) * 2)
            .total_tables((n + 2) * 4)
            .max_memories_per_component(2)
            .max_memory_size(config.memory_ceiling)
            .total_stacks(n + 2);
        let mut cfg = Config::new();
        cfg.wasm_component_model(true)
            .epoch_interruption(true)
            .consume_fuel(config.fuel)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool))
            // Plugins are at most a few MiB of code: keep reservations small.
            .memory_reservation(config.memory_ceiling as u64)
            .memory_guard_size(64 << 10)
            .memory_reservation_for_growth(0);
        let engine = Engine::new(&cfg).map_err(|e| RuntimeError::Compile(format!("engine: {e}")))?;

        let mut linker = Linker::<HostState>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(|e| RuntimeError::Compile(e.to_string()))?;
        PluginBindings::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s)
            .map_err(|e| RuntimeError::Compile(e.to_string()))?;

        let weak = engine.weak();
        let tick = config.tick;
        std::thread::Builder::new()
            .name("wasmop-epoch".into())
            .spawn(move || {
                while let Some(engine) = weak.upgrade() {
                    engine.increment_epoch();
                    drop(engine);
                    std::thread::sleep(tick);
                }
            })
            .map_err(|e| RuntimeError::Compile(format!("epoch thread: {e}")))?;

        Ok(Runtime {
            engine,
            linker,
            slots: Arc::new(tokio::sync::Semaphore::new(n as usize)),
            plugin_slots: Default::default(),
            config,
        })
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Compiles and type-checks plugin bytes. CPU-heavy: run it off the async runtime
    /// (`spawn_blocking`).
    pub fn compile(&self, bytes: &[u8]) -> Result<Compiled, RuntimeError> {
        check_header(bytes)?;
        let component = self.component(bytes)?;
        let pre = self.linker.instantiate_pre(&component).map_err(|e| RuntimeError::WrongWorld(format!("{e:#}")))?;
        let reconciler = ReconcilerIndices::new(&pre).map_err(|e| RuntimeError::WrongWorld(format!("{e:#}")))?;
        let admission = AdmissionIndices::new(&pre).ok();
        Ok(Compiled { pre, reconciler, admission, size: bytes.len() })
    }

    /// Compiles, or loads the code compiled earlier from the cache directory.
    fn component(&self, bytes: &[u8]) -> Result<Component, RuntimeError> {
        let compile = || Component::new(&self.engine, bytes).map_err(|e| RuntimeError::Compile(format!("{e:#}")));
        let Some(dir) = &self.config.cache_dir else { return compile() };
        use sha2::Digest;
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.engine.precompile_compatibility_hash().hash(&mut h);
        let path = dir.join(format!("{}-{:016x}.cwasm", hex::encode(sha2::Sha256::digest(bytes)), h.finish()));
        if path.exists() {
            // SAFETY: the cache directory is written only by this host (see `cache_dir`),
            // and the file name binds the code to these exact bytes and this engine.
            match unsafe { Component::deserialize_file(&self.engine, &path) } {
                Ok(c) => return Ok(c),
                Err(e) => tracing::warn!(path = %path.display(), "ignoring unreadable cached code: {e}"),
            }
        }
        let component = compile()?;
        match component.serialize() {
            Ok(code) => {
                let tmp = path.with_extension(format!("tmp{}", std::process::id()));
                if let Err(e) = std::fs::create_dir_all(dir)
                    .and_then(|_| std::fs::write(&tmp, code))
                    .and_then(|_| std::fs::rename(&tmp, &path))
                {
                    tracing::warn!(path = %path.display(), "cannot write the code cache: {e}");
                }
            }
            Err(e) => tracing::warn!("cannot serialize compiled code: {e}"),
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
        let r = self
            .call(c, name, None, &limits, async |i, s| c.reconciler.load(&mut *s, i)?.call_manifest(s, settings).await)
            .await?;
        r.map(convert::manifest).map_err(RuntimeError::Manifest)
    }

    /// Runs one reconcile. The outer error is the host's view (trap, timeout); the inner
    /// one is the plugin's own answer.
    pub async fn reconcile(
        &self,
        c: &Compiled,
        gateway: Gateway,
        object: &ObjectRef,
        current: Option<&serde_json::Value>,
        settings: &str,
        limits: &Limits,
    ) -> Result<Result<Action, ReconcileError>, RuntimeError> {
        let req = bindings::exports::wasmop::operator::reconciler::Request {
            object: convert::wit_ref(object),
            current: current.map(|c| c.to_string()),
            settings: settings.to_owned(),
        };
        let name = gateway.plugin().to_owned();
        let r = self
            .call(c, &name, Some((gateway, Some(object.clone()))), limits, async |i, s| {
                c.reconciler.load(&mut *s, i)?.call_reconcile(s, &req).await
            })
            .await?;
        Ok(match r {
            Ok(a) => Ok(Action { requeue_after: a.requeue_after_ms.map(Duration::from_millis) }),
            Err(e) => Err(ReconcileError { message: e.message, retry: e.retry }),
        })
    }

    async fn call<R>(
        &self,
        c: &Compiled,
        name: &str,
        gateway: Option<(Gateway, Option<ObjectRef>)>,
        limits: &Limits,
        f: impl AsyncFnOnce(&wasmtime::component::Instance, &mut Store<HostState>) -> wasmtime::Result<R>,
    ) -> Result<R, RuntimeError> {
        let plugin: Arc<str> = name.into();
        // The plugin's own slot first: a plugin at its cap waits without holding a
        // host-wide slot that another plugin could use.
        let _mine =
            self.plugin_slots(&plugin, limits.max_instances).acquire_owned().await.map_err(|_| RuntimeError::Closed)?;
        let _slot = self.slots.acquire().await.map_err(|_| RuntimeError::Closed)?;
        let (stdout, stderr) = output::PluginOutput::pair(plugin.clone(), limits.output_bytes);
        let mut wasi = wasmtime_wasi::WasiCtx::builder();
        wasi.stdout(stdout).stderr(stderr);
        let state = HostState {
            wasi: wasi.build(),
            table: Default::default(),
            limits: host::Tracked::new(
                StoreLimitsBuilder::new()
                    .memory_size(limits.memory_bytes.min(self.config.memory_ceiling))
                    .trap_on_grow_failure(true)
                    .build(),
            ),
            gateway: gateway.as_ref().map(|(g, _)| g.clone()),
            regarding: gateway.and_then(|(_, o)| o),
            reported: Default::default(),
            plugin,
            max_payload: limits.max_payload,
            log_budget: limits.log_lines,
            event_budget: limits.events,
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| s.limiter());
        // Yield to the async runtime on every tick; the timeout below bounds the total.
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(throttle());
        if self.config.fuel {
            store.set_fuel(limits.fuel.unwrap_or(u64::MAX)).map_err(|e| RuntimeError::Compile(e.to_string()))?;
        }

        let run = async {
            let instance = c.pre.instantiate_async(&mut store).await?;
            f(&instance, &mut store).await
        };
        let r = match tokio::time::timeout(limits.deadline, run).await {
            Err(_) => Err(RuntimeError::Timeout(limits.deadline)),
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(classify(e)),
        };
        let peak = store.data().limits.peak() as i64;
        crate::metrics::METRICS.plugin_memory.get_or_create(&crate::metrics::labels(&[("plugin", name)])).set(peak);
        r
    }

    fn plugin_slots(&self, plugin: &Arc<str>, cap: u32) -> Arc<tokio::sync::Semaphore> {
        let cap = cap.max(1);
        let mut m = self.plugin_slots.lock().unwrap();
        match m.get(plugin) {
            Some((c, s)) if *c == cap => s.clone(),
            // A new cap (the plugin's annotations changed): calls already holding
            // slots of the old semaphore finish on it.
            _ => {
                let s = Arc::new(tokio::sync::Semaphore::new(cap as usize));
                m.insert(plugin.clone(), (cap, s.clone()));
                s
            }
        }
    }
}

/// Compute ticks (10 ms each) a call may run at full speed. Why 10: a healthy
/// reconcile or review computes for well under 10 ms; only runaway code gets here.
const FULL_SPEED_TICKS: u32 = 10;
/// What a runaway call sleeps per compute tick after that: it keeps at most ~10 % of a
/// thread until its deadline, so spinning plugins cannot starve healthy ones of CPU.
const THROTTLE_SLEEP: Duration = Duration::from_millis(90);

/// The epoch callback: yield to the async runtime on every tick; once the call has
/// computed for `FULL_SPEED_TICKS` consecutive ticks, also sleep. A tick counts as
/// compute when it follows the previous one closely (a call waiting on a host call
/// does not reach epoch checks, so after I/O the gap is long).
fn throttle()
-> impl FnMut(wasmtime::StoreContextMut<'_, HostState>) -> wasmtime::Result<wasmtime::UpdateDeadline> + Send + Sync + 'static
{
    let mut last = std::time::Instant::now();
    let mut compute = 0u32;
    move |_| {
        let now = std::time::Instant::now();
        if now.duration_since(last) < Duration::from_millis(15) {
            compute += 1;
        }
        last = now;
        if compute < FULL_SPEED_TICKS {
            return Ok(wasmtime::UpdateDeadline::Yield(1));
        }
        Ok(wasmtime::UpdateDeadline::YieldCustom(1, Box::pin(tokio::time::sleep(THROTTLE_SLEEP))))
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
        rt.component(empty_component).unwrap();
        use std::os::unix::fs::MetadataExt;
        let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().path()).collect();
        assert_eq!(files.len(), 1, "one cached artefact");
        let inode = std::fs::metadata(&files[0]).unwrap().ino();
        rt.component(empty_component).unwrap();
        assert_eq!(std::fs::metadata(&files[0]).unwrap().ino(), inode, "loaded from the cache, not rewritten");
        // It is not a plugin, and says so, whether compiled or cached.
        assert!(matches!(rt.compile(empty_component), Err(RuntimeError::WrongWorld(_))));
    }

    #[test]
    fn rejects_non_wasm_and_core_modules_with_a_reason() {
        let rt = Runtime::new(RuntimeConfig { max_instances: 2, ..Default::default() }).unwrap();
        let e = rt.compile(b"hello world, not wasm").err().unwrap();
        assert!(matches!(e, RuntimeError::NotAComponent(ref m) if m.contains("not WebAssembly")), "{e}");
        let core = b"\0asm\x01\0\0\0";
        let e = rt.compile(core).err().unwrap();
        assert!(matches!(e, RuntimeError::NotAComponent(ref m) if m.contains("core WebAssembly module")), "{e}");
    }
}
