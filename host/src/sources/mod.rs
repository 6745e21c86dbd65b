//! Plugin sources: where plugin bytes come from. A source only turns "bytes appeared,
//! changed or vanished" into [`SourceEvent`]s; it knows nothing of wasm. The driver in
//! the CLI feeds them to the registry and reports rejections back through the source's
//! [`Reporter`] (a log line for a directory; an Event on the ConfigMap for a ConfigMap).

pub mod annotations;
mod apart;
pub mod bytes;
mod configmap;
mod dir;
mod driver;

pub use annotations::Ceilings;
pub use apart::{SOURCES_NICE, run_apart};
pub use configmap::{ConfigMapSource, PLUGIN_LABEL};
pub use dir::DirSource;
pub use driver::drive;

use crate::registry::PluginSpec;
use tokio::sync::mpsc;

#[derive(Debug)]
pub enum SourceEvent {
    /// A new plugin or a new version (bytes or settings changed). The bytes are as
    /// delivered (possibly gzipped); the driver decodes them.
    Upsert(Box<PluginSpec>),
    /// A version the source already knows to refuse (e.g. a bad annotation): reported
    /// like a version the registry refused, and the previous version keeps serving.
    Reject { spec: Box<PluginSpec>, kind: &'static str, reason: String },
    /// The plugin is gone from the source. `origin` and `origin_object` say where it
    /// was, as in [`PluginSpec`] (a ConfigMap's key may be left out): the registry only
    /// removes a plugin that was loaded from there, not a same-name one from elsewhere.
    Remove { name: String, origin: String, origin_object: Option<wasmop_sdk::ObjectRef> },
    /// The source finished its first pass: every plugin it had at start was sent.
    Synced,
}

/// A running source sends events until `tx` closes.
#[async_trait::async_trait]
pub trait PluginSource: Send + 'static {
    async fn run(self: Box<Self>, tx: mpsc::Sender<SourceEvent>);
}

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{0}")]
    Invalid(String),
}
