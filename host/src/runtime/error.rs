//! What can go wrong loading or running a plugin.

use std::time::Duration;

/// Errors of loading or running a plugin. Each is data for an Event or a metric; none
/// takes the host down.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("not a WebAssembly component: {0}")]
    NotAComponent(String),
    #[error("does not implement the wasmop:operator plugin world: {0}")]
    WrongWorld(String),
    #[error("could not compile: {0}")]
    Compile(String),
    #[error("plugin trapped ({kind}): {message}")]
    Trap { kind: TrapKind, message: String },
    #[error("plugin exceeded its deadline of {0:?}")]
    Timeout(Duration),
    /// The call could not start: the host-wide memory budget had no room for it.
    #[error("{0}")]
    Budget(String),
    #[error("plugin refused its settings: {0}")]
    Manifest(String),
    #[error("host is shutting down")]
    Closed,
}

impl RuntimeError {
    /// A short label for metrics and Events: `timeout`, `memory`, `panic`, ...
    pub fn kind(&self) -> &'static str {
        match self {
            RuntimeError::NotAComponent(_) => "not-a-component",
            RuntimeError::WrongWorld(_) => "wrong-world",
            RuntimeError::Compile(_) => "compile",
            RuntimeError::Trap { kind, .. } => kind.as_str(),
            RuntimeError::Timeout(_) => "timeout",
            RuntimeError::Budget(_) => "budget",
            RuntimeError::Manifest(_) => "manifest",
            RuntimeError::Closed => "closed",
        }
    }
}

/// How a plugin trapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrapKind {
    /// A Rust panic (unreachable), or an explicit abort.
    Panic,
    /// It tried to grow memory past its cap.
    Memory,
    /// It tried to grow memory past its plugin's share of the host-wide budget, or the
    /// budget itself.
    Budget,
    /// It handed a host call more data than the call may copy (host-call fuel).
    PayloadTooLarge,
    StackOverflow,
    OutOfFuel,
    Other,
}

impl TrapKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TrapKind::Panic => "panic",
            TrapKind::Memory => "memory",
            TrapKind::Budget => "budget",
            TrapKind::PayloadTooLarge => "payload-too-large",
            TrapKind::StackOverflow => "stack-overflow",
            TrapKind::OutOfFuel => "fuel",
            TrapKind::Other => "trap",
        }
    }
}

impl std::fmt::Display for TrapKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Sorts a wasmtime error into a trap kind (for Events and metrics).
pub(super) fn classify(e: wasmtime::Error) -> RuntimeError {
    let full = format!("{e:#}");
    let kind = match e.downcast_ref::<wasmtime::Trap>() {
        Some(wasmtime::Trap::UnreachableCodeReached) => TrapKind::Panic,
        Some(wasmtime::Trap::StackOverflow) => TrapKind::StackOverflow,
        Some(wasmtime::Trap::OutOfFuel) => TrapKind::OutOfFuel,
        Some(wasmtime::Trap::MemoryOutOfBounds) => TrapKind::Other,
        // Our limiter's refusal (see `budget`) and wasmtime's host-call fuel; neither
        // error type is a Trap.
        _ if full.contains("host memory budget") => TrapKind::Budget,
        _ if full.contains("fuel allocated for hostcalls has been exhausted") => TrapKind::PayloadTooLarge,
        _ if ["memory growth failure", "memory minimum size", "growing memory"].iter().any(|m| full.contains(m)) => {
            TrapKind::Memory
        }
        _ => TrapKind::Other,
    };
    // The wasm backtrace goes to the debug log; Events and errors carry the cause.
    tracing::debug!("plugin trap: {full}");
    RuntimeError::Trap { kind, message: e.root_cause().to_string() }
}
