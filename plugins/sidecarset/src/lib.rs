//! OpenKruise's SidecarSet as one wasmop plugin: webhooks that default and validate
//! SidecarSets and inject their sidecars into new Pods, and a controller that keeps the
//! status counts and rolls sidecar image changes out to Pods in place.
//!
//! Kruise-compatible on the wire (`apps.kruise.io/v1alpha1` and `v1beta1`, the same
//! field names and annotations), so existing SidecarSet YAML applies as it is.
//!
//! As Kruise (checked against its webhook and controller code): the validation rules of
//! `validate` (Kubernetes' label selector rules on every selector, `namespace` xor
//! `namespaceSelector`, `partition` xor `updateStrategy.selector`, no native-sidecar
//! init container under RollingUpdate, each patched annotation key once), the rollout's
//! counting (Kruise >= 1.8: the partition, rounded up, is kept out of the Pods waiting
//! for the new version; maxUnavailable rounds up; only updated Pods that are not
//! available count against it; finished Pods, and Pods missing one of the set's
//! containers, are neither counted nor updated; the Pod condition
//! `SidecarSetUpgradable`; patchPodMetadata applied again on each in-place update, with
//! `MergePatchJson` as RFC 7386; a NotUpdate set's ready counts taken as Pods come and
//! go, not as they become ready), and injection (a sidecar replaces a
//! same-named Pod container where it stands; all matching sets' sidecars are placed in
//! one pass, init containers sorted by name across sets; volumes used as block devices
//! go in too; `sidecarList` names containers and native-sidecar init containers,
//! sorted, and the injected-list annotation is sorted; what shared volumes bring along),
//! canary SidecarSets (`canary`), sidecar resources computed from the app containers
//! (`resources`, with Kruise's expression language in `calc` and Kubernetes'
//! quantities in `quantity`), and the conflicts between sets that may meet in a Pod.
//!
//! The `kruise.io/sidecarset-hash` values are Kruise's, byte for byte (`gojson`), so
//! Pods injected by Kruise are rolled after a move here; hashes this plugin wrote
//! before are still accepted (`defaults::accepted_hashes`). Defaults are Kruise's
//! (`upgradeType: ColdUpgrade`, `revisionHistoryLimit: 10`, `patchPolicy: Retain`,
//! the probe and fieldRef defaults its hash covers).
//!
//! HotUpgrade sidecars run as Kruise's container pair (`hot`). Each version of a set is
//! kept as a ControllerRevision with Kruise's data, names and numbering, and new Pods
//! can be pinned to an earlier one (`revision`, `pin`).
//!
//! Not as Kruise, and said rather than ignored: a percentage too large for any integer
//! means all Pods (Kruise's result there is undefined or 0).
//! The update order is Kruise's (`order`: Kubernetes' ActivePods order, then
//! `priorityStrategy`, then `scatterStrategy`), with ties taken by name where Kruise's
//! unstable sort leaves them to chance.

mod calc;
pub mod canary;
mod controller;
pub mod defaults;
mod go_layout;
pub mod gojson;
pub mod hot;
pub mod inject;
pub mod inplace;
mod names;
pub mod order;
pub mod patch;
pub mod pin;
mod pod_state;
mod pods;
mod quantity;
pub mod resources;
pub mod revision;
pub mod scope;
pub mod settings;
mod share;
pub mod types;
pub mod upgradable;
pub mod validate;
pub mod volume;
pub mod webhooks;
pub mod whitelist;

pub use controller::SidecarSetController;
pub use types::{SidecarSet, SidecarSetSpec, SidecarSetStatus};
pub use webhooks::SidecarSetWebhooks;

wasmop_sdk::export_plugin!(controller::SidecarSetController, webhooks = webhooks::SidecarSetWebhooks);
