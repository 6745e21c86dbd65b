//! The per-call store state and the contract's imports, implemented over a [`Gateway`].

use super::bindings::wasmop::operator::{cluster, events, log, types};
use super::convert::{sdk_ref, to_wit};
use crate::gateway::{self, Gateway};
use std::sync::Arc;
use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, StoreLimits};

/// StoreLimits that also remember the largest linear memory the instance asked for,
/// for the `wasmop_plugin_memory_bytes` gauge.
pub struct Tracked {
    inner: StoreLimits,
    peak: usize,
}

impl Tracked {
    pub fn new(inner: StoreLimits) -> Self {
        Tracked { inner, peak: 0 }
    }

    pub fn peak(&self) -> usize {
        self.peak
    }
}

impl ResourceLimiter for Tracked {
    fn memory_growing(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        let ok = self.inner.memory_growing(current, desired, maximum)?;
        if ok {
            self.peak = self.peak.max(desired);
        }
        Ok(ok)
    }

    fn table_growing(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
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
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// Everything one call's Store holds. A fresh one per call: nothing leaks between calls.
pub struct HostState {
    pub(super) wasi: WasiCtx,
    pub(super) table: ResourceTable,
    pub(super) limits: Tracked,
    /// None while the host asks for the manifest: no cluster access before the plugin
    /// is admitted.
    pub(super) gateway: Option<Gateway>,
    pub(super) plugin: Arc<str>,
    /// Largest string accepted from the plugin in one host call.
    pub(super) max_payload: usize,
    /// Log lines and Events this call may still emit.
    pub(super) log_budget: u32,
    pub(super) event_budget: u32,
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl HostState {
    pub(super) fn limiter(&mut self) -> &mut dyn ResourceLimiter {
        &mut self.limits
    }

    fn gateway(&self) -> Result<&Gateway, types::Error> {
        self.gateway
            .as_ref()
            .ok_or_else(|| types::Error::Forbidden("no cluster access while computing the manifest".into()))
    }

    /// Parses an object the plugin hands over; oversized or malformed input is refused
    /// (and counted as a fault: a correct plugin never sends either).
    fn payload(&self, what: &str, text: &str) -> Result<serde_json::Value, types::Error> {
        if text.len() > self.max_payload {
            self.fault("payload-too-large", &format!("{what}: {} bytes", text.len()));
            return Err(types::Error::Invalid(format!(
                "{what}: {} bytes exceeds the limit of {} bytes",
                text.len(),
                self.max_payload
            )));
        }
        serde_json::from_str(text).map_err(|e| {
            self.fault("malformed-json", &format!("{what}: {e}"));
            types::Error::Invalid(format!("{what}: malformed JSON: {e}"))
        })
    }

    /// A misbehaviour that does not end the call: logged and counted by kind.
    pub(super) fn fault(&self, kind: &str, detail: &str) {
        tracing::warn!(plugin = %self.plugin, fault = kind, "plugin fault: {detail}");
        crate::metrics::METRICS
            .faults
            .get_or_create(&crate::metrics::labels(&[("plugin", &self.plugin), ("kind", kind)]))
            .inc();
    }
}

fn json(v: Result<serde_json::Value, gateway::Error>) -> Result<String, types::Error> {
    v.map(|v| v.to_string()).map_err(to_wit)
}

impl types::Host for HostState {}

impl cluster::Host for HostState {
    async fn get(&mut self, object: types::ObjectRef) -> wasmtime::Result<Result<String, types::Error>> {
        let g = match self.gateway() {
            Ok(g) => g.clone(),
            Err(e) => return Ok(Err(e)),
        };
        Ok(json(g.get(&sdk_ref(object)).await))
    }

    async fn list(
        &mut self,
        kind: types::KindRef,
        params: cluster::ListParams,
    ) -> wasmtime::Result<Result<String, types::Error>> {
        let g = match self.gateway() {
            Ok(g) => g.clone(),
            Err(e) => return Ok(Err(e)),
        };
        let kind = gateway::KindRef { api_version: kind.api_version, kind: kind.kind };
        let params = gateway::ListParams {
            namespace: params.namespace,
            label_selector: params.label_selector,
            field_selector: params.field_selector,
        };
        Ok(g.list(&kind, &params).await.map(|items| serde_json::Value::Array(items).to_string()).map_err(to_wit))
    }

    async fn create(&mut self, object: String) -> wasmtime::Result<Result<String, types::Error>> {
        let (g, v) = match self.gateway().and_then(|g| Ok((g.clone(), self.payload("create", &object)?))) {
            Ok(x) => x,
            Err(e) => return Ok(Err(e)),
        };
        Ok(json(g.create(v).await))
    }

    async fn update(&mut self, object: String) -> wasmtime::Result<Result<String, types::Error>> {
        let (g, v) = match self.gateway().and_then(|g| Ok((g.clone(), self.payload("update", &object)?))) {
            Ok(x) => x,
            Err(e) => return Ok(Err(e)),
        };
        Ok(json(g.update(v).await))
    }

    async fn update_status(&mut self, object: String) -> wasmtime::Result<Result<String, types::Error>> {
        let (g, v) = match self.gateway().and_then(|g| Ok((g.clone(), self.payload("update-status", &object)?))) {
            Ok(x) => x,
            Err(e) => return Ok(Err(e)),
        };
        Ok(json(g.update_status(v).await))
    }

    async fn delete(&mut self, object: types::ObjectRef) -> wasmtime::Result<Result<(), types::Error>> {
        let g = match self.gateway() {
            Ok(g) => g.clone(),
            Err(e) => return Ok(Err(e)),
        };
        Ok(g.delete(&sdk_ref(object)).await.map_err(to_wit))
    }
}

/// Longest Event message kept (the apiserver's own limit is 1 KiB for `note`).
const MAX_EVENT_MESSAGE: usize = 1024;
/// Longest log message kept.
const MAX_LOG_MESSAGE: usize = 4096;

fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

impl events::Host for HostState {
    async fn record(
        &mut self,
        regarding: types::ObjectRef,
        event_type: events::EventType,
        reason: String,
        message: String,
    ) -> wasmtime::Result<()> {
        let Some(g) = self.gateway.clone() else { return Ok(()) };
        if self.event_budget == 0 {
            return Ok(());
        }
        self.event_budget -= 1;
        if self.event_budget == 0 {
            self.fault("event-flood", "event budget for this call used up; further events dropped");
        }
        let t = match event_type {
            events::EventType::Normal => gateway::EventType::Normal,
            events::EventType::Warning => gateway::EventType::Warning,
        };
        g.record_event(&sdk_ref(regarding), t, cut(&reason, 128), cut(&message, MAX_EVENT_MESSAGE)).await;
        Ok(())
    }
}

impl log::Host for HostState {
    async fn log(&mut self, level: log::Level, message: String, fields: Vec<(String, String)>) -> wasmtime::Result<()> {
        if self.log_budget == 0 {
            return Ok(());
        }
        self.log_budget -= 1;
        let msg = cut(&message, MAX_LOG_MESSAGE);
        let fields: String = fields.iter().take(32).map(|(k, v)| format!(" {}={}", cut(k, 64), cut(v, 256))).collect();
        let plugin = &*self.plugin;
        match level {
            log::Level::Trace => tracing::trace!(plugin, "{msg}{fields}"),
            log::Level::Debug => tracing::debug!(plugin, "{msg}{fields}"),
            log::Level::Info => tracing::info!(plugin, "{msg}{fields}"),
            log::Level::Warn => tracing::warn!(plugin, "{msg}{fields}"),
            log::Level::Error => tracing::error!(plugin, "{msg}{fields}"),
        }
        if self.log_budget == 0 {
            self.fault("log-flood", "log budget for this call used up; further lines dropped");
        }
        Ok(())
    }
}
