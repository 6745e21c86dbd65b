//! The SidecarSet plugin end to end: webhooks served by the host over TLS, through the
//! real apiserver's admission chain (`admission`), and the controller's status and
//! rolling update (`controller`).
//!
//! SidecarSets are cluster-scoped, so these tests take a lock: one SidecarSet host at
//! a time (two would both reconcile every SidecarSet).

mod admission;
mod controller;
