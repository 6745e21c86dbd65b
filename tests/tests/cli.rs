//! `wasmop inspect` and `wasmop reconcile` on fixtures: no cluster needed, but the
//! plugins must be built (make plugins), hence ignored in a bare `cargo test`.

use std::process::{Command, Output};
use wasmop_e2e::{plugin_path, wasmop_bin};

fn wasmop(args: &[&str]) -> Output {
    Command::new(wasmop_bin()).args(args).output().expect("run wasmop")
}

fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

#[test]
#[ignore = "needs built plugins (make plugins)"]
fn inspect_prints_manifest_and_interfaces() {
    let o = wasmop(&["inspect", plugin_path("memcached.wasm").to_str().unwrap()]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let doc: serde_json::Value = serde_yaml::from_str(&out).unwrap();
    assert_eq!(doc["manifest"]["primary"]["kind"], "Memcached");
    assert_eq!(doc["manifest"]["owns"][0]["kind"], "Deployment");
    let exports =
        |interface: &str| doc["exports"].as_array().unwrap().iter().any(|e| e.as_str().unwrap().starts_with(interface));
    assert!(exports("wasmop:operator/reconciler"));
    // What the plugin's `own-writes` export answered: its own status writes are not news.
    assert_eq!(doc["manifest"]["skipOwnWrites"], true);
    assert!(exports("wasmop:operator/own-writes"));
    let other = wasmop(&["inspect", plugin_path("sidecarset.wasm").to_str().unwrap()]);
    let other: serde_json::Value = serde_yaml::from_str(&text(&other).0).unwrap();
    assert_eq!(other["manifest"]["skipOwnWrites"], false, "a plugin that does not ask is reconciled on its own writes");
    assert!(doc["size"].as_u64().unwrap() > 0 && doc["sha256"].as_str().unwrap().len() == 64);
}

#[test]
#[ignore = "needs built plugins (make plugins)"]
fn inspect_refuses_what_is_not_a_plugin() {
    let dir = tempfile::tempdir().unwrap();
    let text_file = dir.path().join("notes.wasm");
    std::fs::write(&text_file, "just text").unwrap();
    let core = dir.path().join("core.wasm");
    std::fs::write(&core, b"\0asm\x01\0\0\0").unwrap();
    let cases = [
        (text_file, "not WebAssembly"),
        (core, "core WebAssembly module"),
        (plugin_path("not-a-plugin.wasm"), "does not implement the wasmop:operator plugin world"),
    ];
    for (path, want) in cases {
        let o = wasmop(&["inspect", path.to_str().unwrap()]);
        let (_, err) = text(&o);
        assert!(!o.status.success(), "{} must fail", path.display());
        assert!(err.contains(want), "{}: {err}", path.display());
    }
}

#[test]
#[ignore = "needs built plugins (make plugins)"]
fn reconcile_offline_prints_what_the_plugin_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let cr = dir.path().join("cr.yaml");
    std::fs::write(&cr, "apiVersion: cache.example.com/v1alpha1\nkind: Memcached\nmetadata: {name: m, namespace: demo}\nspec: {size: 2}\n").unwrap();
    let o = wasmop(&["reconcile", plugin_path("memcached.wasm").to_str().unwrap(), "--object", cr.to_str().unwrap()]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let doc: serde_json::Value = serde_yaml::from_str(&out).unwrap();
    let writes = doc["writes"].as_array().unwrap();
    assert!(writes[0]["update"]["metadata"]["finalizers"][0] == "cache.example.com/finalizer", "{out}");
    let created = writes.iter().find_map(|w| w.get("create")).expect("a create");
    assert_eq!(created["kind"], "Deployment");
    assert_eq!(created["spec"]["replicas"], 2);
    assert!(writes.iter().any(|w| w.get("updateStatus").is_some()));
    assert_eq!(doc["events"][0]["reason"], "Created");
    // Pods not ready yet, but no requeue: their events bring the next reconcile.
    assert!(doc["result"]["ok"].is_object(), "{out}");
    assert!(doc["result"]["ok"]["requeueAfterMs"].is_null(), "{out}");

    // An existing Deployment owned by someone else (seeded with --state) is left alone.
    let state = dir.path().join("state.yaml");
    std::fs::write(
        &state,
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: m, namespace: demo}\nspec: {replicas: 9}\n",
    )
    .unwrap();
    let o = wasmop(&[
        "reconcile",
        plugin_path("memcached.wasm").to_str().unwrap(),
        "--object",
        cr.to_str().unwrap(),
        "--state",
        state.to_str().unwrap(),
    ]);
    let (out, _) = text(&o);
    assert!(!o.status.success());
    assert!(out.contains("not owned by this Memcached"), "{out}");
}

#[test]
#[ignore = "needs built plugins (make plugins)"]
fn pack_labels_gzips_when_asked_and_refuses_what_cannot_fit() {
    let probe = plugin_path("probe.wasm");
    let o = wasmop(&["pack", probe.to_str().unwrap(), "--name", "p", "--namespace", "ops", "--gzip", "always"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let cm: serde_json::Value = serde_yaml::from_str(&out).unwrap();
    assert_eq!(cm["metadata"]["labels"]["wasmop.io/plugin"], "true");
    assert_eq!(cm["metadata"]["namespace"], "ops");
    assert_eq!(cm["metadata"]["annotations"]["wasmop.io/sha256.probe"].as_str().map(str::len), Some(64));
    assert!(cm["binaryData"]["probe.wasm.gz"].is_string(), "{out}");

    // 2 MiB of incompressible bytes: not even gzip makes it fit a ConfigMap.
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.wasm");
    let mut bytes = b"\0asm\x0d\0\x01\0".to_vec();
    let mut x: u64 = 0x9e3779b97f4a7c15;
    bytes.extend((0..(2 << 20)).map(|_| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x as u8
    }));
    std::fs::write(&big, bytes).unwrap();
    let o = wasmop(&["pack", big.to_str().unwrap(), "--name", "p"]);
    let (_, err) = text(&o);
    assert!(!o.status.success());
    assert!(err.contains("even gzipped"), "{err}");
}
