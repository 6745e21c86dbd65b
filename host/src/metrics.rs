//! Prometheus metrics, process-wide. A leaf module: every layer may record here, and
//! only the HTTP server (cli) renders them.
//!
//! Names follow Prometheus conventions: `wasmop_` prefix, `_total` for counters,
//! `_seconds` for durations.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::LazyLock;

type Labels = Vec<(&'static str, String)>;

pub struct Metrics {
    registry: Registry,
    info_labels: std::sync::Mutex<std::collections::HashMap<String, Labels>>,
    pub reconciles: Family<Labels, Counter>,
    pub reconcile_seconds: Family<Labels, Histogram, fn() -> Histogram>,
    pub queue_depth: Family<Labels, Gauge>,
    pub retries: Family<Labels, Counter>,
    pub host_calls: Family<Labels, Counter>,
    pub denied_calls: Family<Labels, Counter>,
    pub faults: Family<Labels, Counter>,
    pub plugin_loads: Family<Labels, Counter>,
    pub plugin_rejections: Family<Labels, Counter>,
    pub plugin_info: Family<Labels, Gauge>,
    pub admission_reviews: Family<Labels, Counter>,
    pub admission_seconds: Family<Labels, Histogram, fn() -> Histogram>,
    pub leader: Gauge,
    pub webhook_connections_refused: Counter,
    pub webhook_handshakes_evicted: Counter,
    pub webhook_bodies_refused: Counter,
    pub plugin_memory: Family<Labels, Gauge>,
    pub memory_budget_used: Gauge,
    pub plugin_versions_superseded: Counter,
    pub throttled: Family<Labels, Counter>,
    pub long_calls: Family<Labels, Counter>,
}

fn duration_histogram() -> Histogram {
    // 100 µs … ~52 s: from a no-op reconcile to one stuck near its deadline.
    Histogram::new(exponential_buckets(0.0001, 2.0, 20))
}

pub static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let mut registry = Registry::default();
    let m = Metrics {
        reconciles: Family::default(),
        reconcile_seconds: Family::new_with_constructor(duration_histogram as fn() -> Histogram),
        queue_depth: Family::default(),
        retries: Family::default(),
        host_calls: Family::default(),
        denied_calls: Family::default(),
        faults: Family::default(),
        plugin_loads: Family::default(),
        plugin_rejections: Family::default(),
        plugin_info: Family::default(),
        admission_reviews: Family::default(),
        admission_seconds: Family::new_with_constructor(duration_histogram as fn() -> Histogram),
        leader: Gauge::default(),
        webhook_connections_refused: Counter::default(),
        webhook_handshakes_evicted: Counter::default(),
        webhook_bodies_refused: Counter::default(),
        plugin_memory: Family::default(),
        memory_budget_used: Gauge::default(),
        plugin_versions_superseded: Counter::default(),
        throttled: Family::default(),
        long_calls: Family::default(),
        registry: Registry::default(),
        info_labels: Default::default(),
    };
    registry.register("wasmop_reconciles", "Reconciles by plugin and result (ok, error, fault)", m.reconciles.clone());
    registry.register("wasmop_reconcile_duration_seconds", "Wall time of one reconcile", m.reconcile_seconds.clone());
    registry.register("wasmop_queue_depth", "Objects waiting to be reconciled", m.queue_depth.clone());
    registry.register(
        "wasmop_reconcile_retries",
        "Reconciles scheduled again after an error or fault",
        m.retries.clone(),
    );
    registry.register("wasmop_host_calls", "Cluster calls made by plugins, by verb and result", m.host_calls.clone());
    registry.register("wasmop_denied_calls", "Plugin calls refused by the permission check", m.denied_calls.clone());
    registry.register("wasmop_plugin_faults", "Plugin traps and timeouts by kind", m.faults.clone());
    registry.register("wasmop_plugin_loads", "Plugin versions admitted", m.plugin_loads.clone());
    registry.register("wasmop_plugin_rejections", "Plugin versions refused, by reason", m.plugin_rejections.clone());
    registry.register("wasmop_plugin_info", "1 for each serving plugin version", m.plugin_info.clone());
    registry.register(
        "wasmop_admission_reviews",
        "AdmissionReviews answered, by plugin, handler and result (allowed, denied, error)",
        m.admission_reviews.clone(),
    );
    registry.register(
        "wasmop_admission_duration_seconds",
        "Wall time of one AdmissionReview, plugin call included",
        m.admission_seconds.clone(),
    );
    registry.register(
        "wasmop_webhook_connections_refused",
        "Webhook connections closed on accept: the server had its most connections open",
        m.webhook_connections_refused.clone(),
    );
    registry.register(
        "wasmop_webhook_handshakes_evicted",
        "Webhook connections closed in their TLS handshake to make room for a newer one: every handshake place was taken",
        m.webhook_handshakes_evicted.clone(),
    );
    registry.register(
        "wasmop_webhook_bodies_refused",
        "Webhook requests refused before their body was read: over the size cap, or no room in the body budget",
        m.webhook_bodies_refused.clone(),
    );
    registry.register(
        "wasmop_plugin_memory_budget_used_bytes",
        "Linear memory all live plugin instances hold, against --plugin-memory-budget-mib",
        m.memory_budget_used.clone(),
    );
    registry.register(
        "wasmop_plugin_versions_superseded",
        "Plugin versions replaced by a newer one before they were applied",
        m.plugin_versions_superseded.clone(),
    );
    registry.register(
        "wasmop_plugin_calls_throttled",
        "Plugin calls held to a share of a thread after computing without a host call for 100 ms plus 100 ms per MiB of data they were handed",
        m.throttled.clone(),
    );
    registry.register(
        "wasmop_plugin_calls_long",
        "Plugin calls that spent 10 ms of their thread's CPU time: from then on they take turns, the plugins waiting in rotation, while short calls are busy",
        m.long_calls.clone(),
    );
    registry.register("wasmop_leader", "1 while this replica holds the leader Lease (reconciles)", m.leader.clone());
    registry.register(
        "wasmop_plugin_memory_bytes",
        "Largest linear memory of the plugin's most recent instance",
        m.plugin_memory.clone(),
    );
    Metrics { registry, ..m }
});

impl Metrics {
    /// Marks `version`/`sha256` as the serving version of `plugin` (None: not serving).
    pub fn plugin_serving(&self, plugin: &str, version: Option<(&str, &str)>) {
        let mut known = self.info_labels.lock().unwrap();
        if let Some(old) = known.remove(plugin) {
            self.plugin_info.remove(&old);
        }
        if let Some((version, sha256)) = version {
            let l = labels(&[("plugin", plugin), ("version", version), ("sha256", sha256)]);
            self.plugin_info.get_or_create(&l).set(1);
            known.insert(plugin.to_owned(), l);
        }
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = encode(&mut out, &self.registry);
        out
    }
}

/// Label set helper: `labels(&[("plugin", name)])`.
pub fn labels(pairs: &[(&'static str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (*k, (*v).to_owned())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_conventional_names() {
        METRICS.reconciles.get_or_create(&labels(&[("plugin", "t"), ("result", "ok")])).inc();
        METRICS.reconcile_seconds.get_or_create(&labels(&[("plugin", "t")])).observe(0.01);
        let text = METRICS.render();
        assert!(text.contains(r#"wasmop_reconciles_total{plugin="t",result="ok"} 1"#), "{text}");
        assert!(text.contains("wasmop_reconcile_duration_seconds_bucket"), "{text}");
    }
}
