//! The per-call store state and the contract's imports, implemented over a [`Gateway`].

use super::bindings::wasmop::operator::{cluster, events, log, types};
use super::budget::Charge;
use super::convert::{sdk_ref, to_wit};
use super::limiter::Tracked;
use crate::gateway::{self, Gateway};
use std::sync::Arc;
use wasmtime::component::ResourceTable;

use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// What a call may reach: the cluster through a gateway, and the object whose Events
/// report its faults; None while the plugin only describes itself.
pub(super) type Call = Option<(Gateway, Option<wasmop_sdk::ObjectRef>)>;

/// Everything one instance's Store holds. A new instance gets a new one; a warm
/// instance's next call starts with [`HostState::begin`], so no budget, cluster access
/// or reported fault carries over between calls.
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
    /// The object being reconciled, where in-call faults are reported as Events.
    pub(super) regarding: Option<wasmop_sdk::ObjectRef>,
    /// Fault kinds already reported by this call: one Event per kind, not a flood.
    pub(super) reported: std::collections::HashSet<&'static str>,
    /// The budget of the plugin's stdout and stderr.
    pub(super) output: super::output::PluginOutput,
    /// Host calls made so far (cluster, Events, logs): the throttle tells time spent in
    /// them from the guest's own compute (see `throttle`).
    pub(super) host_calls: u64,
    /// Bytes handed to and from the guest in this call: the object or review it was
    /// called with, and every host call's objects read, sent (even if refused) and
    /// answered. The throttle lets a call compute longer the more data it was given
    /// to work on (see `throttle`).
    pub(super) exchanged: u64,
    /// A script plugin's script, for the engine's `script` import (see `script`).
    pub(super) script: Option<Arc<super::script::Script>>,
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl HostState {
    /// The state of a new instance for `plugin`, ready for its first call.
    pub(super) fn new(
        plugin: Arc<str>,
        call: Call,
        limits: &super::Limits,
        memory_ceiling: usize,
        charge: Charge,
        script: Option<Arc<super::script::Script>>,
    ) -> Self {
        let (stdout, stderr) = super::output::PluginOutput::pair(plugin.clone(), limits.output_bytes);
        let mut wasi = wasmtime_wasi::WasiCtx::builder();
        wasi.stdout(stdout.clone()).stderr(stderr);
        let mut state = HostState {
            wasi: wasi.build(),
            table: Default::default(),
            limits: Tracked::new(limits.memory_bytes.min(memory_ceiling), charge),
            gateway: None,
            regarding: None,
            reported: Default::default(),
            plugin,
            max_payload: 0,
            log_budget: 0,
            event_budget: 0,
            output: stdout,
            host_calls: 0,
            exchanged: 0,
            script,
        };
        state.begin(call, limits);
        state
    }

    /// Starts a call, on a new instance or a warm one: cluster access as `call` gives
    /// it, and every per-call budget full.
    pub(super) fn begin(&mut self, call: Call, limits: &super::Limits) {
        (self.gateway, self.regarding) = match call {
            Some((g, regarding)) => (Some(g), regarding),
            None => (None, None),
        };
        self.reported.clear();
        self.exchanged = 0;
        self.max_payload = limits.max_payload;
        self.log_budget = limits.log_lines;
        self.event_budget = limits.events;
        self.output.refill(limits.output_bytes);
    }

    /// Ends a call on an instance that will be kept: it holds no cluster access while
    /// parked.
    pub(super) fn end(&mut self) {
        (self.gateway, self.regarding) = (None, None);
    }

    pub(super) fn limiter(&mut self) -> &mut dyn wasmtime::ResourceLimiterAsync {
        &mut self.limits
    }

    fn gateway(&mut self) -> Result<&Gateway, types::Error> {
        self.host_calls += 1;
        self.gateway
            .as_ref()
            .ok_or_else(|| types::Error::Forbidden("no cluster access while computing the manifest".into()))
    }

    /// Parses an object the plugin hands over; oversized or malformed input is refused
    /// (and reported as a fault: a correct plugin never sends either).
    async fn payload(&mut self, what: &str, text: &str) -> Result<serde_json::Value, types::Error> {
        if text.len() > self.max_payload {
            let msg = format!("{what}: {} bytes exceeds the limit of {} bytes", text.len(), self.max_payload);
            self.fault("payload-too-large", &msg).await;
            return Err(types::Error::Invalid(msg));
        }
        match serde_json::from_str(text) {
            Ok(v) => Ok(v),
            Err(e) => {
                let msg = format!("{what}: malformed JSON: {e}");
                self.fault("malformed-json", &msg).await;
                Err(types::Error::Invalid(msg))
            }
        }
    }

    /// A misbehaviour that does not end the call: a log line naming the plugin and the
    /// fault, a counter by kind, and (once per kind per call) a Warning Event on the
    /// object being reconciled.
    pub(super) async fn fault(&mut self, kind: &'static str, detail: &str) {
        tracing::warn!(plugin = %self.plugin, fault = kind, "plugin fault: {}", cut(detail, MAX_LOG_MESSAGE));
        crate::metrics::METRICS
            .faults
            .get_or_create(&crate::metrics::labels(&[("plugin", &self.plugin), ("kind", kind)]))
            .inc();
        if let (Some(g), Some(obj)) = (&self.gateway, &self.regarding)
            && self.reported.insert(kind)
        {
            let msg = format!("plugin {} faulted ({kind}): {}", self.plugin, cut(detail, 512));
            g.report(obj, gateway::EventType::Warning, "PluginFault", &msg).await;
        }
    }

    /// Reports a refused call: by the host's permission check (the gateway already
    /// logged and counted it) or by the apiserver, whose message names the rule the
    /// plugin's ServiceAccount lacks (user, verb, resource, namespace).
    async fn denied<T>(&mut self, r: Result<T, types::Error>) -> Result<T, types::Error> {
        if let Err(types::Error::Forbidden(m)) = &r {
            let m = m.clone();
            self.fault("forbidden", &m).await;
        }
        r
    }
}

fn json(v: Result<serde_json::Value, gateway::Error>) -> Result<String, types::Error> {
    v.map(|v| v.to_string()).map_err(to_wit)
}

impl types::Host for HostState {}

impl HostState {
    async fn read_one(&mut self, object: types::ObjectRef, read: gateway::Read) -> Result<String, types::Error> {
        let g = self.gateway()?.clone();
        let r = g.get(&sdk_ref(object), read).await.map_err(to_wit);
        let r = self.handed(0, r);
        self.denied(r).await
    }

    /// Counts `sent` bytes and the answer `r` into [`HostState::exchanged`].
    fn handed(&mut self, sent: usize, r: Result<String, types::Error>) -> Result<String, types::Error> {
        let got = r.as_ref().map_or(0, String::len);
        self.exchanged += (sent + got) as u64;
        r
    }

    async fn read_list(
        &mut self,
        kind: types::KindRef,
        params: cluster::ListParams,
        read: gateway::Read,
    ) -> Result<String, types::Error> {
        let g = self.gateway()?.clone();
        let kind = gateway::KindRef { api_version: kind.api_version, kind: kind.kind };
        let params = gateway::ListParams {
            namespace: params.namespace,
            label_selector: params.label_selector,
            field_selector: params.field_selector,
        };
        let r = g.list(&kind, &params, read).await.map_err(to_wit);
        let r = self.handed(0, r);
        self.denied(r).await
    }
}

impl cluster::Host for HostState {
    async fn get(&mut self, object: types::ObjectRef) -> wasmtime::Result<Result<String, types::Error>> {
        Ok(self.read_one(object, gateway::Read::Cached).await)
    }

    async fn list(
        &mut self,
        kind: types::KindRef,
        params: cluster::ListParams,
    ) -> wasmtime::Result<Result<String, types::Error>> {
        Ok(self.read_list(kind, params, gateway::Read::Cached).await)
    }

    async fn get_live(&mut self, object: types::ObjectRef) -> wasmtime::Result<Result<String, types::Error>> {
        Ok(self.read_one(object, gateway::Read::Live).await)
    }

    async fn list_live(
        &mut self,
        kind: types::KindRef,
        params: cluster::ListParams,
    ) -> wasmtime::Result<Result<String, types::Error>> {
        Ok(self.read_list(kind, params, gateway::Read::Live).await)
    }

    async fn create(&mut self, object: String) -> wasmtime::Result<Result<String, types::Error>> {
        let g = match self.gateway() {
            Ok(g) => g.clone(),
            Err(e) => return Ok(Err(e)),
        };
        let v = match self.payload("create", &object).await {
            Ok(v) => v,
            Err(e) => return Ok(Err(e)),
        };
        let r = self.handed(object.len(), json(g.create(v).await));
        Ok(self.denied(r).await)
    }

    async fn update(&mut self, object: String) -> wasmtime::Result<Result<String, types::Error>> {
        let g = match self.gateway() {
            Ok(g) => g.clone(),
            Err(e) => return Ok(Err(e)),
        };
        let v = match self.payload("update", &object).await {
            Ok(v) => v,
            Err(e) => return Ok(Err(e)),
        };
        let r = self.handed(object.len(), json(g.update(v).await));
        Ok(self.denied(r).await)
    }

    async fn update_status(&mut self, object: String) -> wasmtime::Result<Result<String, types::Error>> {
        let g = match self.gateway() {
            Ok(g) => g.clone(),
            Err(e) => return Ok(Err(e)),
        };
        let v = match self.payload("update-status", &object).await {
            Ok(v) => v,
            Err(e) => return Ok(Err(e)),
        };
        let r = self.handed(object.len(), json(g.update_status(v).await));
        Ok(self.denied(r).await)
    }

    async fn delete(&mut self, object: types::ObjectRef) -> wasmtime::Result<Result<(), types::Error>> {
        let g = match self.gateway() {
            Ok(g) => g.clone(),
            Err(e) => return Ok(Err(e)),
        };
        let r = g.delete(&sdk_ref(object)).await.map_err(to_wit);
        Ok(self.denied(r).await)
    }
}

/// Longest log message kept.
const MAX_LOG_MESSAGE: usize = 4096;

use gateway::truncate as cut;

impl events::Host for HostState {
    async fn record(
        &mut self,
        regarding: types::ObjectRef,
        event_type: events::EventType,
        reason: String,
        message: String,
    ) -> wasmtime::Result<()> {
        self.host_calls += 1;
        let Some(g) = self.gateway.clone() else { return Ok(()) };
        if self.event_budget == 0 {
            return Ok(());
        }
        self.event_budget -= 1;
        if self.event_budget == 0 {
            self.fault("event-flood", "event budget for this call used up; further events dropped").await;
        }
        let t = match event_type {
            events::EventType::Normal => gateway::EventType::Normal,
            events::EventType::Warning => gateway::EventType::Warning,
        };
        g.record_event(&sdk_ref(regarding), t, &reason, &message).await;
        Ok(())
    }
}

impl log::Host for HostState {
    async fn log(&mut self, level: log::Level, message: String, fields: Vec<(String, String)>) -> wasmtime::Result<()> {
        self.host_calls += 1;
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
            self.fault("log-flood", "log budget for this call used up; further lines dropped").await;
        }
        Ok(())
    }
}
