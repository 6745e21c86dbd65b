//! # wasmop
//!
//! A Kubernetes operator host that runs reconcilers (and admission webhooks) as
//! sandboxed WebAssembly components.
//!
//! Data flows one way: [`sources`] turn plugin bytes into added/changed/removed events;
//! the [`registry`] compiles and admits versions and swaps them atomically; the
//! [`controllers`] watch the cluster and drive reconciles through the [`runtime`] (the
//! only place that touches wasmtime), whose host calls go through the [`gateway`] (the
//! only place that touches the cluster for a plugin, and where permissions are checked).

pub mod controllers;
pub mod gateway;
pub mod health;
pub mod leader;
pub mod metrics;
pub mod rbac;
pub mod registry;
pub mod runtime;
pub mod sources;
pub mod thread_name;
pub mod trim;
pub mod webhook;
