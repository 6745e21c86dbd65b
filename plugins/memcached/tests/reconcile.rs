//! The Memcached reconcile against the SDK's fake cluster.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::CustomResourceExt;
use memcached::{FINALIZER, Memcached, MemcachedSpec, Operator};
use serde_json::{Value, json};
use wasmop_sdk::fake::{FakeCluster, Write};
use wasmop_sdk::{Action, Context, KindRef, ObjectRef, Reconciler, Request};

fn mc(name: &str, size: i32) -> Memcached {
    let mut m = Memcached::new(name, MemcachedSpec { size, container_port: 11211, image: None });
    m.metadata.namespace = Some("demo".into());
    m
}

fn key(kind: KindRef, name: &str) -> ObjectRef {
    ObjectRef::new(&kind, Some("demo"), name)
}

fn mc_key(name: &str) -> ObjectRef {
    key(KindRef::of::<Memcached>(), name)
}

fn reconcile(fake: &FakeCluster, name: &str) -> Action {
    let current = fake.object(&mc_key(name));
    let req = Request { object: mc_key(name), current, settings: String::new() };
    Operator::reconcile(&Context::new(fake), &req).expect("reconcile")
}

fn deployment(fake: &FakeCluster, name: &str) -> Value {
    fake.object(&key(KindRef::of::<Deployment>(), name)).expect("deployment")
}

/// What the Deployment controller and kubelet would do: Pods and ready status.
fn simulate_ready(fake: &FakeCluster, name: &str, ready: i32) {
    let d = deployment(fake, name);
    let want = d["spec"]["replicas"].as_i64().unwrap() as i32;
    for p in fake.objects_of(&KindRef::of::<Pod>()) {
        let r = ObjectRef::of_json(&p).unwrap();
        if p["metadata"]["labels"]["app.kubernetes.io/instance"] == name {
            fake.delete(&r).unwrap();
        }
    }
    for i in 0..want {
        fake.seed(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("{name}-pod-{i}"), "namespace": "demo",
            "labels": d["spec"]["template"]["metadata"]["labels"].clone()}}))
        .unwrap();
    }
    fake.edit(&key(KindRef::of::<Deployment>(), name), |d| {
        d["status"] = json!({"replicas": want, "readyReplicas": ready, "updatedReplicas": want});
    })
    .unwrap();
}

use wasmop_sdk::Cluster;

#[test]
fn creates_deployment_then_reports_ready_pods() {
    let fake = FakeCluster::new();
    fake.seed_obj(&mc("cache", 3)).unwrap();
    // Not ready yet, yet no requeue: the Pods' and the Deployment's events bring the next.
    assert_eq!(reconcile(&fake, "cache"), Action::done());
    let status = &fake.object(&mc_key("cache")).unwrap()["status"];
    let available = status["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Available").unwrap();
    assert_eq!(available["status"], "False");

    let cr = fake.object(&mc_key("cache")).unwrap();
    assert_eq!(cr["metadata"]["finalizers"], json!([FINALIZER]));
    let d = deployment(&fake, "cache");
    assert_eq!(d["spec"]["replicas"], 3);
    assert_eq!(d["metadata"]["ownerReferences"][0]["uid"], cr["metadata"]["uid"]);
    assert_eq!(d["metadata"]["ownerReferences"][0]["controller"], true);
    assert_eq!(d["spec"]["selector"]["matchLabels"]["app.kubernetes.io/instance"], "cache");
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["args"], json!(["-m=64", "-o", "modern", "-v"]));
    assert_eq!(c["ports"][0]["containerPort"], 11211);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert!(fake.events().iter().any(|e| e.reason == "Created"));

    simulate_ready(&fake, "cache", 3);
    assert_eq!(reconcile(&fake, "cache"), Action::done());
    let status = &fake.object(&mc_key("cache")).unwrap()["status"];
    assert_eq!(status["nodes"], json!(["cache-pod-0", "cache-pod-1", "cache-pod-2"]));
    let available = status["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Available").unwrap();
    assert_eq!(available["status"], "True");

    // Converged: nothing more is written.
    fake.take_writes();
    assert_eq!(reconcile(&fake, "cache"), Action::done());
    assert_eq!(fake.take_writes(), vec![]);
}

#[test]
fn scale_image_and_hand_edits_converge() {
    let fake = FakeCluster::new();
    fake.seed_obj(&mc("cache", 3)).unwrap();
    reconcile(&fake, "cache");
    fake.edit(&mc_key("cache"), |o| {
        o["spec"]["size"] = json!(1);
        o["spec"]["image"] = json!("memcached:1.6.9");
    })
    .unwrap();
    reconcile(&fake, "cache");
    let d = deployment(&fake, "cache");
    assert_eq!(d["spec"]["replicas"], 1);
    assert_eq!(d["spec"]["template"]["spec"]["containers"][0]["image"], "memcached:1.6.9");
    assert!(fake.events().iter().any(|e| e.reason == "Scaled" && e.message.contains("from 3 to 1")));

    fake.edit(&key(KindRef::of::<Deployment>(), "cache"), |d| d["spec"]["replicas"] = json!(5)).unwrap();
    reconcile(&fake, "cache");
    assert_eq!(deployment(&fake, "cache")["spec"]["replicas"], 1);
}

#[test]
fn two_crs_in_one_namespace_stay_apart() {
    let fake = FakeCluster::new();
    fake.seed_obj(&mc("a", 2)).unwrap();
    fake.seed_obj(&mc("b", 1)).unwrap();
    reconcile(&fake, "a");
    reconcile(&fake, "b");
    simulate_ready(&fake, "a", 2);
    simulate_ready(&fake, "b", 1);
    reconcile(&fake, "a");
    reconcile(&fake, "b");
    assert_eq!(fake.object(&mc_key("a")).unwrap()["status"]["nodes"], json!(["a-pod-0", "a-pod-1"]));
    assert_eq!(fake.object(&mc_key("b")).unwrap()["status"]["nodes"], json!(["b-pod-0"]));
}

#[test]
fn delete_runs_finalizer_and_collects_deployment() {
    let fake = FakeCluster::new();
    fake.seed_obj(&mc("cache", 1)).unwrap();
    reconcile(&fake, "cache");
    fake.delete(&mc_key("cache")).unwrap();
    assert!(fake.object(&mc_key("cache")).unwrap()["metadata"]["deletionTimestamp"].is_string());
    reconcile(&fake, "cache");
    assert!(fake.object(&mc_key("cache")).is_none(), "finalizer removed, CR gone");
    assert!(fake.object(&key(KindRef::of::<Deployment>(), "cache")).is_none(), "garbage-collected");
    assert!(fake.events().iter().any(|e| e.reason == "Deleting"));
    // Gone: done, nothing written.
    fake.take_writes();
    assert_eq!(reconcile(&fake, "cache"), Action::done());
    assert!(fake.take_writes().is_empty());
}

#[test]
fn foreign_deployment_is_not_taken_over() {
    let fake = FakeCluster::new();
    fake.seed(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "cache", "namespace": "demo"}, "spec": {"replicas": 7}})).unwrap();
    fake.seed_obj(&mc("cache", 1)).unwrap();
    let req = Request { object: mc_key("cache"), current: fake.object(&mc_key("cache")), settings: String::new() };
    let err = Operator::reconcile(&Context::new(&fake), &req).unwrap_err();
    assert!(!err.retry && err.message.contains("not owned"), "{err}");
    assert_eq!(deployment(&fake, "cache")["spec"]["replicas"], 7);
    assert!(!fake.take_writes().iter().any(|w| matches!(w, Write::Update(d) if d["kind"] == "Deployment")));
}

#[test]
fn manifest_scopes_namespaces_from_settings() {
    let m = Operator::manifest("namespace: a, b").unwrap();
    assert_eq!(m.namespaces, vec!["a", "b"]);
    assert!(Operator::manifest("").unwrap().namespaces.is_empty());
}

/// The checked-in CRD equals the one generated from the Rust types. Regenerate with
/// `WASMOP_UPDATE_CRDS=1 cargo test -p memcached crd`.
#[test]
fn crd_is_up_to_date() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/crds/memcached.yaml");
    let generated = format!(
        "# Generated from plugins/memcached/src/types.rs; do not edit.\n{}",
        serde_yaml::to_string(&Memcached::crd()).unwrap()
    );
    if std::env::var_os("WASMOP_UPDATE_CRDS").is_some() {
        std::fs::create_dir_all(std::path::Path::new(path).parent().unwrap()).unwrap();
        std::fs::write(path, &generated).unwrap();
    }
    let on_disk = std::fs::read_to_string(path).unwrap_or_default();
    assert!(on_disk == generated, "{path} is stale: run WASMOP_UPDATE_CRDS=1 cargo test -p memcached crd");
}

#[test]
fn default_image_comes_from_settings_unless_the_cr_sets_one() {
    let fake = FakeCluster::new();
    fake.seed_obj(&mc("cache", 1)).unwrap();
    let run = |settings: &str| {
        let req =
            Request { object: mc_key("cache"), current: fake.object(&mc_key("cache")), settings: settings.into() };
        Operator::reconcile(&Context::new(&fake), &req).unwrap();
    };
    let image = || deployment(&fake, "cache")["spec"]["template"]["spec"]["containers"][0]["image"].clone();
    run("");
    assert_eq!(image(), memcached::types::DEFAULT_IMAGE);
    run("defaultImage: memcached:1.6.30");
    assert_eq!(image(), "memcached:1.6.30");
    fake.edit(&mc_key("cache"), |o| o["spec"]["image"] = json!("custom:1")).unwrap();
    run("defaultImage: memcached:1.6.30");
    assert_eq!(image(), "custom:1");
}

/// The default build leaves the Deployment's labels alone; v2 (`--features v2`, the
/// demo's hot-reloaded code) adds the memcached version, also to a Deployment an
/// earlier build created, and follows image changes.
#[test]
fn v2_labels_the_deployment_with_the_memcached_version() {
    let fake = FakeCluster::new();
    fake.seed_obj(&mc("cache", 1)).unwrap();
    reconcile(&fake, "cache");
    let label = || deployment(&fake, "cache")["metadata"]["labels"][memcached::VERSION_LABEL].clone();
    if cfg!(feature = "v2") {
        assert!(memcached::VERSION.ends_with("+v2"));
        let default_tag = memcached::types::DEFAULT_IMAGE.rsplit(':').next().unwrap();
        assert_eq!(label(), default_tag);
        fake.edit(&key(KindRef::of::<Deployment>(), "cache"), |d| {
            d["metadata"]["labels"].as_object_mut().unwrap().remove(memcached::VERSION_LABEL);
        })
        .unwrap();
        reconcile(&fake, "cache");
        assert_eq!(label(), default_tag, "added to a Deployment that lacks it");
        fake.edit(&mc_key("cache"), |o| o["spec"]["image"] = json!("registry:5000/memcached:1.6.39")).unwrap();
        reconcile(&fake, "cache");
        assert_eq!(label(), "1.6.39");
        fake.edit(&mc_key("cache"), |o| o["spec"]["image"] = json!("registry:5000/memcached@sha256:abc")).unwrap();
        reconcile(&fake, "cache");
        assert_eq!(label(), Value::Null, "no tag, no label");
        assert!(
            deployment(&fake, "cache")["spec"]["template"]["metadata"]["labels"][memcached::VERSION_LABEL].is_null()
        );
    } else {
        assert_eq!(memcached::VERSION, env!("CARGO_PKG_VERSION"));
        assert_eq!(label(), Value::Null);
    }
}
