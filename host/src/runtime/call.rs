//! One bounded call on a plugin instance: the slots, the memory budget and the
//! deadline every reconcile, review and describe call goes through.
//!
//! Flow: the plugin's own slot, then a host-wide slot, then (for a fresh instance) room
//! in the memory budget, then instantiate and call — all of it inside the call's
//! deadline, so a flood of reviews or reconciles queues no longer than the deadline
//! its caller was promised, and gets a clear fault when it cannot start. A warm
//! instance (reviews only, see `warm`) skips instantiation and already holds its
//! memory.
//!
//! While it runs, its thread time is metered and the epoch callback yields to the
//! async runtime on every tick, holds runaway compute to a share of a thread (see
//! `throttle`) and makes long calls take turns while short ones are busy (`cpu`), on
//! the niced aside threads once they are long, their work heavy or faulting, or their
//! memory grew big (`aside`); the Store's limiter holds the instance to its memory cap,
//! the host-wide budget and wasmtime's counts of instances, tables and memories, and
//! tells the call's meter of each grow; host-call fuel
//! bounds what one host call may copy out of the guest. When it ends, an instance that
//! grew big is freed off the thread that serves reviews, with the call's slot
//! (`freeing`). A call that moved aside and ran out of time gives its slots and memory
//! back when an aside thread drops it, after `call` has returned its Timeout.

use std::sync::Arc;
use wasmtime::Store;

use std::sync::atomic::{AtomicU8, Ordering::Relaxed};

use super::aside::Moveable;
use super::budget::{ENTRY_ROOM, waited};
use super::cpu::{Meter, Metered};
use super::error::classify;
use super::freeing::Freed;
use super::host::{self, HostState};
use super::throttle::throttle;
use super::tiers::Code;
use super::warm::Warm;
use super::{Compiled, Limits, Runtime, RuntimeError};

/// What a host call may copy out of the guest besides the payload itself (a log line's
/// fields, an object reference): the payload check (`Limits::max_payload`) then refuses
/// an oversized object with a clear message instead of wasmtime copying 128 MiB first.
const HOSTCALL_SLACK: usize = 256 << 10;

/// Where a call was when its deadline passed, for the fault it reports.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Phase {
    Slots,
    Memory,
    Running,
    /// The deadline passed: the caller has read where the call was.
    Over,
}

/// Moves a call's phase on, unless its deadline has passed.
fn advance(phase: &AtomicU8, to: Phase) {
    let _ = phase.fetch_update(Relaxed, Relaxed, |p| (p != Phase::Over as u8).then_some(to as u8));
}

/// What a call's thread time is judged by (`cpu`): its plugin and kind, reviews apart
/// from reconciles. Why: a SidecarSet reconcile that counts 2,000 Pods computes for
/// tens of ms, and judged with them the plugin's 0.2 ms Pod reviews waited their turn
/// in the long lane, about 150 ms each, while a Deployment's Pods were created.
fn work(plugin: &str, call: &host::Call) -> Arc<str> {
    let kind = match call {
        Some((_, Some(_))) => "reconcile",
        Some((_, None)) => "review",
        None => "load",
    };
    format!("{plugin}/{kind}").into()
}

/// The plugin's part of a call: given the code, the instance and its Store, the future
/// of what the call does with them. Boxed and `'static` (it owns what it needs) so that
/// a long call can move to the aside threads mid-way (`aside`).
pub(super) type Op<'a, R> = std::pin::Pin<Box<dyn Future<Output = wasmtime::Result<R>> + Send + 'a>>;

impl Runtime {
    /// One call on an instance of `c`: a fresh one, or with `warm` (the call's
    /// settings) an idle one of the same code, settings and limits, parked again after
    /// a clean return (see `warm`).
    pub(super) async fn call<R: Send + 'static>(
        &self,
        c: &Compiled,
        name: &str,
        call: host::Call,
        limits: &Limits,
        warm: Option<&str>,
        f: impl for<'a> FnOnce(&'a Code, &'a wasmtime::component::Instance, &'a mut Store<HostState>) -> Op<'a, R>
        + Send
        + 'static,
    ) -> Result<R, RuntimeError> {
        let plugin: Arc<str> = name.into();
        let work = work(name, &call);
        let phase = Arc::new(AtomicU8::new(Phase::Slots as u8));
        let meter = Meter::new(&self.cpu, plugin.clone());
        // What the call needs, owned: it may finish on another runtime (`aside`).
        let (cpu, slots, budget, ticks, parked) =
            (self.cpu.clone(), self.slots.clone(), self.budget.clone(), self.ticker.ticks(), self.parked.clone());
        let mine = self.plugin_slots(&plugin, limits.max_instances);
        let (c, limits, warm) = (c.clone(), limits.clone(), warm.map(str::to_owned));
        let (ceiling, fuel) = (self.config.memory_ceiling, self.config.fuel);
        let (deadline, at, m, w) = (limits.deadline, phase.clone(), meter.clone(), work.clone());
        let run = async move {
            let (phase, meter, work) = (at, m, w);
            // A heavy plugin waits its turn while short calls are busy, and one whose
            // calls keep faulting is paced (see `cpu`), before it takes any slot
            // another plugin could use.
            cpu.admit(&work, &meter).await;
            // The plugin's own slot first: a plugin at its cap waits without holding a
            // host-wide slot that another plugin could use.
            let _mine = mine.acquire_owned().await.map_err(|_| RuntimeError::Closed)?;
            // Held by the Store's `Freed` until its instance is freed: the instance pool
            // has room for as many instances as there are slots.
            let slot = slots.acquire_owned().await.map_err(|_| RuntimeError::Closed)?;
            // The code current when the call starts serves the whole call, even if a
            // tier-up lands meanwhile.
            let code = c.current();
            let idle = warm.as_deref().and_then(|s| c.idle.take(&plugin, &code, s, &limits));
            let (mut store, instance, served) = match idle {
                Some(mut w) => {
                    w.store.data_mut().begin(call, &limits);
                    (Freed::new(w.store, slot), Some(w.instance), w.served)
                }
                None => {
                    advance(&phase, Phase::Memory);
                    if !budget.has_room(&plugin, ENTRY_ROOM) {
                        // This plugin's idle instances go first: it pays for itself.
                        c.idle.clear(&plugin);
                    }
                    let charge = budget.reserve(plugin.clone(), ENTRY_ROOM).await;
                    let state = HostState::new(plugin.clone(), call, &limits, ceiling, charge, c.script.clone());
                    let mut store = Store::new(code.pre.engine(), state);
                    store.limiter_async(|s| s.limiter());
                    (Freed::new(store, slot), None, 0)
                }
            };
            store.data_mut().limits.metered_by(meter.clone());
            advance(&phase, Phase::Running);
            // Guest code runs from here on (instantiation included): the epoch ticks.
            let _ticking = ticks.running();
            // Yield to the async runtime on every tick; the timeout bounds the total.
            store.set_epoch_deadline(1);
            store.epoch_deadline_callback(throttle(plugin.clone(), cpu.clone(), meter.clone()));
            store.set_hostcall_fuel(limits.max_payload.saturating_add(HOSTCALL_SLACK));
            if fuel {
                store.set_fuel(limits.fuel.unwrap_or(u64::MAX)).map_err(|e| RuntimeError::Compile(e.to_string()))?;
            }
            let instance = match instance {
                Some(i) => Ok(i),
                None => code.pre.instantiate_async(&mut *store).await,
            };
            let r = match instance {
                Ok(i) => f(&code, &i, &mut store).await.map(|r| (r, i)),
                Err(e) => Err(e),
            };
            let l = crate::metrics::labels(&[("plugin", &plugin)]);
            crate::metrics::METRICS.plugin_memory.get_or_create(&l).set(store.data().limits.peak() as i64);
            let (r, instance) = r.map_err(classify)?;
            if let Some(settings) = warm
                && store.data().limits.charge.parkable()
            {
                store.data_mut().end();
                let w = Warm { code, store: store.keep(), instance, settings, limits, served: served + 1 };
                c.idle.park(w, &parked);
            }
            Ok(r)
        };
        let run: Moveable<Result<R, RuntimeError>> = Box::pin(Metered::new(run, meter.clone()));
        let r = tokio::time::timeout(deadline, self.aside.run(run, meter.clone())).await;
        // Where it was is read once and frozen: a moved call may still run a step until
        // its aside thread drops it, and must not turn a Budget into a Timeout.
        let was = phase.swap(Phase::Over as u8, Relaxed);
        let r = match r {
            Err(_) if was == Phase::Memory as u8 => Err(RuntimeError::Budget(waited(deadline))),
            Err(_) => Err(RuntimeError::Timeout(deadline)),
            Ok(None) => Err(RuntimeError::Closed),
            Ok(Some(r)) => r,
        };
        // A call that faulted wasted its work or its wait (see `Cpu::ended`). A timeout
        // in the queue counts too: with only calls that ran counted, a memory-grabbing
        // attacker's paced calls mostly succeeded and it kept a third of the thread
        // (BENCHMARKS.md, issue 18, fifth part, build E). Only a call that ran says what
        // its work computes. One that waited for memory is not counted at all: the
        // memory may be held by other plugins (or by its own plugin's other calls: the
        // budget does not say which limit held it).
        let faulted = matches!(r, Err(RuntimeError::Trap { .. } | RuntimeError::Timeout(_)));
        if was == Phase::Running as u8 {
            self.cpu.ended(&work, meter.spent(), faulted);
        } else if faulted {
            self.cpu.timed_out_waiting(&work);
        }
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
