//! OpenKruise's SidecarSet as one wasmop plugin: webhooks that default and validate
//! SidecarSets and inject their sidecars into new Pods, and a controller that keeps the
//! status counts and rolls sidecar image changes out to Pods in place.
//!
//! Kruise-compatible on the wire (`apps.kruise.io/v1alpha1`, the same field names and
//! annotations), so existing SidecarSet YAML applies as it is.

mod controller;
pub mod defaults;
pub mod inject;
pub mod scope;
pub mod types;
pub mod validate;
pub mod webhooks;

pub use controller::SidecarSetController;
pub use types::{SidecarSet, SidecarSetSpec, SidecarSetStatus};
pub use webhooks::SidecarSetWebhooks;

wasmop_sdk::export_plugin!(controller::SidecarSetController, webhooks = webhooks::SidecarSetWebhooks);
