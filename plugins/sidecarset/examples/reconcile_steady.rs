//! What a reconcile with nothing to roll costs per matched Pod, natively: the
//! reconciles a SidecarSet gets while its Pods are created and become ready (one per
//! batch of Pod events), each counting every matched Pod. The wasm figure is several
//! times this, and the SDK's fake cluster lists Pods differently from the host, so
//! compare builds with it, not with the benchmarks.
//!
//!   cargo run --release -p sidecarset --example reconcile_steady [PODS] [--dump FILE]
//!
//! `--dump FILE` writes the converged world (the set, then its Pods) as a JSON list,
//! for the host's `reconcile_objects` example to time the same reconcile in wasm with
//! any build of the plugin.

// The tests' admission helper: Pods and the set go through the plugin's own webhooks.
#[path = "../tests/common/mod.rs"]
#[allow(dead_code)]
mod common;

use common::admit;
use serde_json::json;
use sidecarset::webhooks::{DEFAULT, INJECT};
use sidecarset::{SidecarSet, SidecarSetController};
use std::time::Instant;
use wasmop_sdk::fake::FakeCluster;
use wasmop_sdk::{Context, KindRef, ObjectRef, Reconciler, Request};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let pods: usize = args.get(1).and_then(|n| n.parse().ok()).unwrap_or(2000);
    let dump = args.iter().position(|a| a == "--dump").and_then(|i| args.get(i + 1));
    let fake = FakeCluster::new();
    let ss = json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": "s", "uid": "u"},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
                 "containers": [{"name": "proxy", "image": "envoy:1.31"}]}});
    fake.seed(admit(&fake, DEFAULT, None, ss)).unwrap();
    for i in 0..pods {
        let p = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("web-{i}"), "namespace": "demo", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]}});
        let mut p = admit(&fake, INJECT, Some("demo"), p);
        let statuses: Vec<_> = p["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| json!({"name": c["name"], "image": c["image"], "imageID": format!("docker.io/x@sha256:{i}"), "ready": true}))
            .collect();
        p["status"] = json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                             "containerStatuses": statuses});
        fake.seed(p).unwrap();
    }
    let key = ObjectRef::new(&KindRef::of::<SidecarSet>(), None, "s");
    let reconcile = || {
        let req = Request { object: key.clone(), current: fake.object(&key), settings: String::new() };
        SidecarSetController::reconcile(&Context::new(&fake), &req).expect("reconcile");
    };
    reconcile();
    if let Some(file) = dump {
        let mut world = vec![fake.object(&key).expect("the set")];
        world.extend(fake.objects_of(&KindRef::new("v1", "Pod")));
        std::fs::write(file, serde_json::to_vec(&world).unwrap()).expect("write the dump");
    }
    let rounds = 20;
    let t = Instant::now();
    for _ in 0..rounds {
        reconcile();
    }
    let each = t.elapsed() / rounds;
    println!(
        "{pods} Pods: {:.2} ms per reconcile, {:.2} µs per Pod",
        each.as_secs_f64() * 1e3,
        each.as_secs_f64() * 1e6 / pods as f64
    );
}
