//! A test plugin that makes the host's reconcile loop observable.
//!
//! It reconciles ConfigMaps labelled `probe=true` in the namespace named by its
//! settings (`namespace: NAME`) and keeps a ServiceAccount `<name>-probe` owned by each,
//! annotated `probe/value` = the ConfigMap's `data.value`. `data.mode` picks extra
//! behaviour: `requeue` asks to be called again after 500 ms, `fail` returns a
//! retryable error, `forbidden` tries to create a Secret it never declared and records
//! the answer on the ServiceAccount as `probe/forbidden`, `conflict` writes its
//! ServiceAccount with a resourceVersion long gone and returns the `conflict`. Every
//! reconcile logs `probe reconcile` with the name and mode, which the e2e tests read
//! from the host log. `attack` makes one call the ConfigMap names (see [`attack`]).
//! `requeue0` asks to be called again at once (requeue-after 0). `long` keeps
//! reconciling for `data.ticks` × 200 ms (default 100: 20 s), writing its
//! ServiceAccount's `probe/tick` annotation every tick: a reconcile that is mid-write
//! whenever its host is deposed. `digest:MS` reads every ConfigMap of its namespace
//! and works on that data (serializes and parses one object at a time, round and
//! round) for MS ms of wall time, then logs `probe digested` with the bytes read: a
//! reconcile that computes over much data it was handed, or, over little, a loop.
//!
//! It also serves a validating webhook `check` for ConfigMaps: `data.admission` =
//! `deny` denies, `panic` traps, `loop` spins until the host's deadline; anything else
//! is allowed. The e2e tests use it to prove that a faulty handler yields a clear
//! denial and that the host keeps serving.

mod attack;

use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::collections::BTreeMap;
use std::time::Duration;
use wasmop_sdk::helpers::{controller_ref, setting};
use wasmop_sdk::{
    Action, ClusterExt, Context, KindRef, Manifest, ObjectRef, ReconcileError, Reconciler, Request, Verb,
};

pub struct Probe;

/// Which build this is: the hot-reload tests swap a v1 for a v2 (`--features v2`).
const BUILD: &str = if cfg!(feature = "v2") { "v2" } else { "v1" };

impl Reconciler for Probe {
    fn manifest(settings: &str) -> Result<Manifest, String> {
        let ns = setting(settings, "namespace").ok_or("settings need `namespace: NAME`")?;
        let m = Manifest::new::<ConfigMap>("probe", "1.0.0")
            .namespaces([ns])
            .owns::<ServiceAccount>()
            .allow::<ServiceAccount>(&[Verb::Create, Verb::Update]);
        let mut m = attack::declare(m, settings)?;
        // `own: API_VERSION/KIND`: a second owned kind (a controller owning two kinds
        // must still become ready).
        if let Some((api_version, kind)) = setting(settings, "own").and_then(|w| w.rsplit_once('/')) {
            m.owns.push(wasmop_sdk::KindRef::new(api_version, kind));
        }
        // `watch: API_VERSION/KIND`: an extra watched kind (the readiness test names one
        // whose CRD does not exist yet).
        if let Some((api_version, kind)) = setting(settings, "watch").and_then(|w| w.rsplit_once('/')) {
            m.watches.push(wasmop_sdk::Watch {
                kind: wasmop_sdk::KindRef::new(api_version, kind),
                mapping: wasmop_sdk::Mapping::AllPrimaries,
            });
        }
        Ok(m)
    }

    fn reconcile(ctx: &Context<'_>, req: &Request) -> Result<Action, ReconcileError> {
        let name = &req.object.name;
        let Some(cm) = req.current_as::<ConfigMap>()? else {
            ctx.info("probe reconcile", &[("name", name), ("mode", "gone")]);
            return Ok(Action::done());
        };
        if cm.metadata.labels.as_ref().and_then(|l| l.get("probe")).map(String::as_str) != Some("true") {
            return Ok(Action::done());
        }
        let data = cm.data.clone().unwrap_or_default();
        let mode = data.get("mode").map(String::as_str).unwrap_or("normal");
        // `calls:N`: N reads of the primary and nothing else (the overhead benchmark).
        if let Some(n) = mode.strip_prefix("calls:").and_then(|n| n.parse::<u32>().ok()) {
            for _ in 0..n {
                ctx.get(&req.object)?;
            }
            return Ok(Action::done());
        }
        if let Some(ms) = mode.strip_prefix("digest:").and_then(|n| n.parse::<u64>().ok()) {
            return digest(ctx, &req.object, Duration::from_millis(ms));
        }
        ctx.info("probe reconcile", &[("name", name), ("mode", mode)]);

        let mut annotations = BTreeMap::new();
        annotations.insert("probe/value".to_owned(), data.get("value").cloned().unwrap_or_default());
        annotations.insert("probe/build".to_owned(), BUILD.to_owned());
        if mode == "forbidden" {
            let secret = Secret {
                metadata: ObjectMeta {
                    name: Some(format!("{name}-stolen")),
                    namespace: cm.metadata.namespace.clone(),
                    ..Default::default()
                },
                ..Default::default()
            };
            let outcome = match ctx.create_obj(&secret) {
                Ok(_) => "created".to_owned(),
                Err(e) => e.code().to_owned(),
            };
            annotations.insert("probe/forbidden".to_owned(), outcome);
        }
        if mode == "attack" {
            annotations.insert("probe/attack".to_owned(), attack::attack(ctx, &data));
        }

        let ns = cm.metadata.namespace.as_deref();
        let sa_name = format!("{name}-probe");
        match ctx.get_opt::<ServiceAccount>(ns, &sa_name)? {
            None => {
                let sa = ServiceAccount {
                    metadata: ObjectMeta {
                        name: Some(sa_name.clone()),
                        namespace: cm.metadata.namespace.clone(),
                        owner_references: controller_ref(&cm).map(|r| vec![r]),
                        annotations: Some(annotations),
                        ..Default::default()
                    },
                    ..Default::default()
                };
                ctx.create_obj(&sa)?;
            }
            Some(mut sa) if sa.metadata.annotations.as_ref() != Some(&annotations) => {
                sa.metadata.annotations = Some(annotations);
                ctx.update_obj(&sa)?;
            }
            Some(_) => {}
        }
        if mode == "conflict" {
            // What a reconcile from a stale cached read ends in. The read itself is live:
            // the cache may not have seen the ServiceAccount created a moment ago, and
            // the test is about the conflict, not about that lag.
            let live = ctx.get_live(&ObjectRef::new(&KindRef::of::<ServiceAccount>(), ns, &sa_name))?;
            let mut sa: ServiceAccount =
                serde_json::from_value(live).map_err(|e| ReconcileError::permanent(e.to_string()))?;
            sa.metadata.resource_version = Some("1".into());
            ctx.update_obj(&sa)?;
        }
        if mode == "long" {
            let ticks = data.get("ticks").and_then(|t| t.parse::<u32>().ok()).unwrap_or(100);
            for tick in 0..ticks {
                std::thread::sleep(Duration::from_millis(200));
                // A failed write (a conflict with another writer) is not the end: the
                // point is to keep writing until the host stops this reconcile.
                if let Ok(Some(mut sa)) = ctx.get_opt::<ServiceAccount>(ns, &sa_name) {
                    sa.metadata.annotations.get_or_insert_default().insert("probe/tick".into(), tick.to_string());
                    let _ = ctx.update_obj(&sa);
                }
            }
        }
        ctx.info("probe done", &[("name", name), ("build", BUILD)]);
        match mode {
            "requeue" => Ok(Action::requeue(Duration::from_millis(500))),
            "requeue0" => Ok(Action::requeue(Duration::ZERO)),
            "fail" => Err(ReconcileError::retry("probe asked to fail")),
            _ => Ok(Action::done()),
        }
    }
}

impl wasmop_sdk::Webhooks for Probe {
    fn handlers(_settings: &str) -> Vec<wasmop_sdk::Handler> {
        use wasmop_sdk::{Handler, KindRef, Operation};
        vec![Handler::validating("check", KindRef::of::<ConfigMap>(), &[Operation::Create, Operation::Update])]
    }

    fn review(
        _ctx: &Context<'_>,
        _handler: &str,
        _settings: &str,
        req: &wasmop_sdk::AdmissionRequest,
    ) -> wasmop_sdk::AdmissionResponse {
        use std::sync::atomic::{AtomicU32, Ordering};
        use wasmop_sdk::AdmissionResponse;
        // Reviews this instance has answered, this one included: 1 on a fresh instance.
        static REVIEWS: AtomicU32 = AtomicU32::new(0);
        let served = REVIEWS.fetch_add(1, Ordering::Relaxed) + 1;
        let mode = req.object.as_ref().and_then(|o| o.pointer("/data/admission")).and_then(|m| m.as_str());
        match mode {
            Some("deny") => AdmissionResponse::deny("data.admission: the probe denies \"deny\""),
            Some("count") => AdmissionResponse::deny(format!("review {served} of this instance")),
            Some("panic") => panic!("probe panics in its webhook"),
            Some("loop") =>
            {
                #[allow(clippy::empty_loop)]
                loop {}
            }
            _ => AdmissionResponse::allow(),
        }
    }
}

wasmop_sdk::export_plugin!(Probe, webhooks = Probe);

/// `digest:MS`: every ConfigMap of the namespace, each serialized and parsed in turn,
/// round and round, for `work` (wall time once the list is read; no host call
/// meanwhile). One object per step, so the last step overruns `work` by little.
fn digest(ctx: &Context<'_>, cm: &ObjectRef, work: Duration) -> Result<Action, ReconcileError> {
    let params = wasmop_sdk::ListParams { namespace: cm.namespace.clone(), ..Default::default() };
    let all = ctx.list(&KindRef::new("v1", "ConfigMap"), &params)?;
    let bytes: usize = all.iter().map(|o| o.to_string().len()).sum();
    let start = std::time::Instant::now();
    for o in all.iter().cycle() {
        if start.elapsed() >= work {
            break;
        }
        let again: serde_json::Value = serde_json::from_str(&o.to_string()).unwrap_or_default();
        std::hint::black_box(again);
    }
    ctx.info("probe digested", &[("name", &cm.name), ("bytes", &bytes.to_string())]);
    Ok(Action::done())
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmop_sdk::fake::FakeCluster;
    use wasmop_sdk::{KindRef, ObjectRef};

    fn cm(mode: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some("a".into()),
                namespace: Some("t".into()),
                labels: Some([("probe".to_string(), "true".to_string())].into()),
                ..Default::default()
            },
            data: Some([("value".to_string(), "1".to_string()), ("mode".to_string(), mode.to_string())].into()),
            ..Default::default()
        }
    }

    fn run(fake: &FakeCluster, stored: serde_json::Value) -> Result<Action, ReconcileError> {
        let req = Request {
            object: ObjectRef::of_json(&stored).unwrap(),
            current: Some(stored),
            settings: "namespace: t".into(),
        };
        Probe::reconcile(&Context::new(fake), &req)
    }

    #[test]
    fn creates_owned_service_account_and_converges() {
        let fake = FakeCluster::new();
        let stored = fake.seed_obj(&cm("normal")).unwrap();
        assert_eq!(run(&fake, stored.clone()), Ok(Action::done()));
        let sa = fake.object(&ObjectRef::new(&KindRef::of::<ServiceAccount>(), Some("t"), "a-probe")).unwrap();
        assert_eq!(sa["metadata"]["annotations"]["probe/value"], "1");
        assert_eq!(sa["metadata"]["ownerReferences"][0]["uid"], stored["metadata"]["uid"]);
        fake.take_writes();
        run(&fake, stored).unwrap();
        assert!(fake.take_writes().is_empty(), "a converged object is not written again");
    }

    #[test]
    fn modes() {
        let fake = FakeCluster::new();
        let stored = fake.seed_obj(&cm("requeue")).unwrap();
        assert_eq!(run(&fake, stored).unwrap().requeue_after, Some(Duration::from_millis(500)));
        let fake = FakeCluster::new();
        let stored = fake.seed_obj(&cm("fail")).unwrap();
        assert!(run(&fake, stored).unwrap_err().retry);
        assert!(Probe::manifest("").is_err());
        let fake = FakeCluster::new();
        let stored = fake.seed_obj(&cm("conflict")).unwrap();
        let e = run(&fake, stored).unwrap_err();
        assert!(e.retry && e.message.starts_with("conflict"), "{e}");
    }

    #[test]
    fn requeue0_and_long_modes() {
        let fake = FakeCluster::new();
        let stored = fake.seed_obj(&cm("requeue0")).unwrap();
        assert_eq!(run(&fake, stored).unwrap().requeue_after, Some(Duration::ZERO));
        let fake = FakeCluster::new();
        let mut long = cm("long");
        long.data.as_mut().unwrap().insert("ticks".into(), "2".into());
        let stored = fake.seed_obj(&long).unwrap();
        assert_eq!(run(&fake, stored), Ok(Action::done()));
        let sa = fake.object(&ObjectRef::new(&KindRef::of::<ServiceAccount>(), Some("t"), "a-probe")).unwrap();
        assert_eq!(sa["metadata"]["annotations"]["probe/tick"], "1", "written every tick");
    }
}
