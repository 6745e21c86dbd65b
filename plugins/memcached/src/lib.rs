//! operator-sdk's Memcached operator as a wasmop plugin.
//!
//! Better than the sample: the Deployment's selector is unique per CR (the sample's
//! `app=memcached` lets two CRs in one namespace fight over Pods), status carries
//! standard Conditions and is written only when it changed, the finalizer records an
//! Event, and image and port converge as well as size.

mod reconcile;
pub mod types;

pub use reconcile::{FINALIZER, Memcached as Operator, VERSION, VERSION_LABEL, deployment_for};
pub use types::{Memcached, MemcachedSpec, MemcachedStatus};

wasmop_sdk::export_plugin!(reconcile::Memcached);
