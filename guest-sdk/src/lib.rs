//! # wasmop-sdk
//!
//! Write a Kubernetes reconciler once, as one `impl Reconciler`, and run it as a
//! sandboxed WebAssembly component inside the wasmop host — or natively against
//! [`fake::FakeCluster`] in `cargo test`, with no wasm and no apiserver.
//!
//! ```ignore
//! struct MyOperator;
//! impl wasmop_sdk::Reconciler for MyOperator {
//!     fn manifest(settings: &str) -> Result<Manifest, String> { ... }
//!     fn reconcile(ctx: &Context, req: &Request) -> Result<Action, ReconcileError> { ... }
//! }
//! wasmop_sdk::export_plugin!(MyOperator);
//! ```
//!
//! Objects are k8s-openapi (or kube `CustomResource`) types; they cross into the host as
//! JSON. Every cluster call goes through [`Cluster`], so the code under test and the
//! code in production are the same. The host hands objects over without
//! `metadata.managedFields` (bytes no reconcile reads, often a third of an object);
//! an update that omits them keeps the stored ones.
//!
//! In wasm the SDK also installs the plugin's memory allocator ([`small_blocks`]: freed
//! small blocks reused per size class, in front of dlmalloc); a plugin that brings its
//! own depends on `wasmop-sdk` with `default-features = false`.

pub mod admission;
mod cluster;
mod context;
pub mod fake;
pub mod helpers;
mod manifest;
pub mod small_blocks;
mod types;

// Every plugin built on the SDK allocates through it (see `small_blocks`).
#[cfg(all(target_family = "wasm", not(target_feature = "atomics"), feature = "small-blocks"))]
#[global_allocator]
static ALLOCATOR: small_blocks::SmallBlocks = small_blocks::SmallBlocks::new();

#[cfg(target_arch = "wasm32")]
#[doc(hidden)]
pub mod guest;

pub use admission::{
    Handler, NoWebhooks, Operation, Request as AdmissionRequest, Response as AdmissionResponse, Webhooks,
};
pub use cluster::{Cluster, ClusterExt, ListParams, Object};
pub use context::{Context, Request};
pub use manifest::{Manifest, Mapping, Permission, Verb, Watch};
pub use types::{Action, Error, EventType, KindRef, LogLevel, ObjectRef, ReconcileError};

pub use k8s_openapi;
pub use serde_json;

/// A reconciler: the one trait a plugin implements.
pub trait Reconciler {
    /// Describes the plugin for the given settings document (YAML or JSON text, possibly
    /// empty): what it reconciles, what it watches, what it may call.
    fn manifest(settings: &str) -> Result<Manifest, String>;

    /// Brings the cluster in line with one primary object. Must be idempotent: the host
    /// calls it again on every relevant change, after restarts, and on requeue.
    fn reconcile(ctx: &Context<'_>, req: &Request) -> Result<Action, ReconcileError>;
}

/// Exports a [`Reconciler`] as the plugin's `reconciler` interface, and optionally a
/// [`Webhooks`] implementation as its `admission` interface:
/// `export_plugin!(MyOperator)` or `export_plugin!(MyOperator, webhooks = MyWebhooks)`.
///
/// Outside wasm32 it expands to nothing, so the same crate builds natively for tests.
#[macro_export]
macro_rules! export_plugin {
    ($ty:ty) => {
        $crate::export_plugin!($ty, webhooks = $crate::NoWebhooks);
    };
    ($ty:ty, webhooks = $wh:ty) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            struct __WasmopExport;
            impl $crate::guest::ReconcilerGuest for __WasmopExport {
                fn manifest(
                    settings: ::std::string::String,
                ) -> ::std::result::Result<$crate::guest::WitManifest, ::std::string::String> {
                    $crate::guest::manifest::<$ty>(&settings)
                }
                fn reconcile(
                    request: $crate::guest::WitRequest,
                ) -> ::std::result::Result<$crate::guest::WitAction, $crate::guest::WitReconcileError> {
                    $crate::guest::reconcile::<$ty>(request)
                }
            }
            impl $crate::guest::SelectorsGuest for __WasmopExport {
                fn selector_watches(
                    settings: ::std::string::String,
                ) -> ::std::result::Result<::std::vec::Vec<$crate::guest::WitSelectorWatch>, ::std::string::String>
                {
                    $crate::guest::selector_watches::<$ty>(&settings)
                }
            }
            impl $crate::guest::OwnWritesGuest for __WasmopExport {
                fn skip_own_writes(settings: ::std::string::String) -> bool {
                    $crate::guest::skip_own_writes::<$ty>(&settings)
                }
            }
            impl $crate::guest::ReachGuest for __WasmopExport {
                fn call_namespaces(settings: ::std::string::String) -> ::std::vec::Vec<::std::string::String> {
                    $crate::guest::call_namespaces::<$ty>(&settings)
                }
            }
            impl $crate::guest::AdmissionGuest for __WasmopExport {
                fn handlers(settings: ::std::string::String) -> ::std::vec::Vec<$crate::guest::WitHandler> {
                    $crate::guest::handlers::<$wh>(&settings)
                }
                fn review(
                    handler: ::std::string::String,
                    settings: ::std::string::String,
                    request: ::std::string::String,
                ) -> ::std::result::Result<::std::string::String, ::std::string::String> {
                    $crate::guest::review::<$wh>(&handler, &settings, &request)
                }
            }
    $crate::guest::export!(__WasmopExport with_types_in $crate::guest);
        };
    };
}
