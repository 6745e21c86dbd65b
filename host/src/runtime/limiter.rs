//! What one instance may hold: wasmtime's own caps (linear memory, instances, tables)
//! and, as its memory grows, a charge on the host-wide memory budget (`budget`): the
//! plugin that asks for memory the budget does not have traps with the reason. A call
//! whose memory grows big goes aside at that grow, before it touches what the grow
//! added (see `cpu::BIG_GROWTH`): the limiter is async so that it can yield there.

use std::sync::Arc;

use super::budget::Charge;
use super::cpu::Meter;
use wasmtime::{ResourceLimiter, ResourceLimiterAsync, StoreLimits};

/// StoreLimits (the instance's own caps) plus the instance's charge on the host-wide
/// memory budget, and the largest linear memory the instance asked for, for the
/// `wasmop_plugin_memory_bytes` gauge.
pub struct Tracked {
    inner: StoreLimits,
    pub(super) charge: Charge,
    peak: usize,
    /// The thread time meter of the call under way, told of every grow.
    meter: Option<Arc<Meter>>,
}

impl Tracked {
    /// Limits for one instance whose linear memory may grow to `memory_bytes`.
    pub fn new(memory_bytes: usize, charge: Charge) -> Self {
        let inner = wasmtime::StoreLimitsBuilder::new()
            .memory_size(memory_bytes)
            .instances(MAX_CORE_INSTANCES)
            .tables(MAX_TABLES)
            .memories(MAX_MEMORIES)
            .table_elements(MAX_TABLE_ELEMENTS)
            .trap_on_grow_failure(true)
            .build();
        Tracked { inner, charge, peak: 0, meter: None }
    }

    pub fn peak(&self) -> usize {
        self.peak
    }

    /// Grows from here on are the call metered by `meter`'s (a warm instance serves
    /// one call after another).
    pub(super) fn metered_by(&mut self, meter: Arc<Meter>) {
        self.meter = Some(meter);
    }
}

/// What one instance may hold besides its linear memory. Why these: a component built
/// by cargo-component links the main module, the WASI adapter and a few shims (about
/// ten core instances, two memories, a handful of tables); wasmtime's defaults (10,000
/// of each) would let one plugin exhaust the pooling allocator's slots.
const MAX_CORE_INSTANCES: usize = 32;
const MAX_TABLES: usize = 32;
const MAX_MEMORIES: usize = 2;
/// Entries of one table: the shipped plugins' largest function table has a few
/// thousand.
const MAX_TABLE_ELEMENTS: usize = 100_000;

#[async_trait::async_trait]
impl ResourceLimiterAsync for Tracked {
    async fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let ok = self.allowed(current, desired, maximum)?;
        if ok && self.meter.as_ref().is_some_and(|m| m.grew(desired.saturating_sub(current))) {
            // The call goes aside at this yield (`aside`), before the guest touches
            // what it grew.
            tokio::task::yield_now().await;
        }
        Ok(ok)
    }

    async fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.inner.table_growing(current, desired, maximum)
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.inner.memory_grow_failed(error)
    }

    fn table_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.inner.table_grow_failed(error)
    }

    fn instances(&self) -> usize {
        self.inner.instances()
    }

    fn tables(&self) -> usize {
        self.inner.tables()
    }

    fn memories(&self) -> usize {
        self.inner.memories()
    }
}

impl Tracked {
    /// Whether a memory may grow: the instance's own cap, then the host-wide budget,
    /// or the guest traps with the reason (the plugin that asked pays).
    fn allowed(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        let ok = self.inner.memory_growing(current, desired, maximum)?;
        if ok {
            self.charge.grow(desired.saturating_sub(current)).map_err(wasmtime::Error::msg)?;
            self.peak = self.peak.max(desired);
        }
        Ok(ok)
    }
}

#[cfg(test)]
mod tests;
