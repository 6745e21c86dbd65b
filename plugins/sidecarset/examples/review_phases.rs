//! Where the `inject-pod` handler's time goes, natively: the same review
//! `scripts/bench-admission.py` sends, split into the steps the plugin takes inside
//! wasm. The wasm figure is several times this; the split says which step to cut.
//!
//!   cargo run --release -p sidecarset --example review_phases

use serde_json::{Value, json};
use sidecarset::SidecarSet;
use std::hint::black_box;
use std::time::{Duration, Instant};
use wasmop_sdk::{AdmissionRequest, AdmissionResponse};

const N: u32 = 20_000;

fn time<T>(label: &str, mut f: impl FnMut() -> T) {
    let t = Instant::now();
    for _ in 0..N {
        black_box(f());
    }
    let each: Duration = t.elapsed() / N;
    println!("| {label} | {:.1} µs |", each.as_secs_f64() * 1e6);
}

fn main() {
    // The request and SidecarSet of the admission benchmark; the SidecarSet defaulted
    // (with its version hashes), as the host's watch cache holds it.
    let request = json!({
        "uid": "u-1", "operation": "CREATE", "namespace": "bench-admission",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "userInfo": {"username": "bench"},
        "object": {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": "web-", "namespace": "bench-admission", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "app", "image": "nginx:1.27", "env": [{"name": "TZ", "value": "UTC"}],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                "volumes": [{"name": "data", "emptyDir": {}}]}}
    })
    .to_string();
    let mut ss: SidecarSet = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": "bench-sidecars"},
        "spec": {"namespace": "bench-admission", "selector": {"matchLabels": {"app": "web"}},
            "containers": [
                {"name": "proxy", "image": "envoy:1.31", "transferEnv": [{"sourceContainerName": "app", "envName": "TZ"}]},
                {"name": "logs", "image": "busybox:1.36", "podInjectPolicy": "AfterAppContainer",
                 "shareVolumePolicy": {"type": "enabled"}}]}
    }))
    .unwrap();
    sidecarset::defaults::default(&mut ss);
    let list = Value::from(vec![serde_json::to_value(&ss).unwrap()]).to_string();

    let req: AdmissionRequest = serde_json::from_str(&request).unwrap();
    let values: Value = serde_json::from_str(&list).unwrap();
    let sets: Vec<SidecarSet> = serde_json::from_value(values.clone()).unwrap();
    let sets: Vec<&SidecarSet> = sets.iter().collect();
    let mut pod = req.object.clone().unwrap();
    sidecarset::inject::inject(&mut pod, &Value::Null, &sets).unwrap();
    let fields = ["/metadata/annotations", "/spec/containers", "/spec/initContainers", "/spec/volumes"];
    let answer = AdmissionResponse::patch_fields(&pod, &fields);

    println!("| step (native, {N} rounds) | per review |\n|---|---|");
    time("parse the AdmissionRequest", || serde_json::from_str::<AdmissionRequest>(&request).unwrap());
    // The next two steps run once per change of the SidecarSets (`list_shared`); an
    // unchanged list costs a comparison of its text.
    time("parse the SidecarSet list into `Value`s", || serde_json::from_str::<Value>(&list).unwrap());
    time("`Value`s into typed SidecarSets", || serde_json::from_value::<Vec<SidecarSet>>(values.clone()).unwrap());
    time("inject (Pod clone included)", || {
        let mut p = req.object.clone().unwrap();
        sidecarset::inject::inject(&mut p, &Value::Null, &sets).unwrap();
        p
    });
    time("patch_fields + serialise the answer", || {
        serde_json::to_string(&AdmissionResponse::patch_fields(&pod, &fields)).unwrap()
    });
    time("(for comparison) serialise a whole-Pod answer", || {
        serde_json::to_string(&AdmissionResponse::mutate(pod.clone())).unwrap()
    });
    black_box(answer);
}
