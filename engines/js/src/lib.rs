//! The host's JavaScript engine: one component that runs every script plugin.
//!
//! A plugin written in JavaScript is a few KB of script (`NAME.js` in a ConfigMap or
//! the plugins directory), not a component of its own. The host instantiates this
//! engine for each call as it would a compiled plugin, with the same limits and
//! permissions, and the engine reads the plugin's script through the `script` import,
//! evaluates it as an ES module and serves every export of the contract through the
//! module's functions of the same names (`manifest`, `reconcile`, `handlers`,
//! `review`). The engine's code is compiled once and shared by every script plugin.
//!
//! Flow: `js` holds the evaluated script of this instance (evaluated on its first
//! call, kept while the instance lives: a fresh one per reconcile, a warm one across
//! admission reviews); `prelude.js` is the JavaScript side of the SDK (`cluster`,
//! `events`, `log`, `console`, `ClusterError`, `ReconcileError`); `bridge` carries its
//! calls to the host's imports; `contract` turns the module's answers into the WIT
//! records, with a message naming the field when they do not fit.
//!
//! Caveat: every reconcile gets a fresh instance, so the engine builds its realm and
//! parses the prelude and the script on each: a converged Memcached reconcile took
//! 4.3 ms here against 0.11 ms for the Rust plugin (BENCHMARKS.md, issue 20). A warm
//! instance (admission reviews) pays that once per instance.

wit_bindgen::generate!({
    path: "../../wit",
    world: "script-engine",
});

mod bridge;
mod contract;
mod js;

struct Engine;
export!(Engine);
