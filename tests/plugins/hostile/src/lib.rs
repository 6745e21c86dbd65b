//! A plugin that misbehaves on purpose. It reconciles ConfigMaps labelled
//! `hostile=true` in the namespace its settings name, and `data.mode` picks the attack:
//!
//! - `loop`: spins forever (the deadline must stop it, without blocking a host thread);
//! - `panic`: traps;
//! - `grab`: allocates until it has several GiB (the memory cap must stop it);
//! - `huge`: hands the host a 100 MiB object to create and a 100 MiB log line, and
//!   returns a 100 MiB error message;
//! - `flood`: 1 000 Events and 10 000 log lines in one call (ten times each budget);
//! - `secrets`: reads, lists and creates Secrets it never declared;
//! - `badjson`: passes malformed JSON to create and update;
//! - `calm`: does nothing (the throughput benchmark's healthy neighbour);
//! - `hold`: takes 120 MiB, within the per-instance cap, and keeps it for ~2 s of host
//!   calls, then asks to be called again in 1 s: many such reconciles at once are what
//!   only a host-wide memory budget can bound (`scripts/bench-abuse.py`).
//!
//! It also serves a validating webhook `grab` for ConfigMaps that takes 120 MiB and
//! allows: the same pressure from concurrent admission reviews.
//!
//! With `mode: manifest-loop` in its settings, its `manifest` itself never returns.

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use wasmop_sdk::helpers::setting;
use wasmop_sdk::{
    Action, ClusterExt, Context, KindRef, ListParams, LogLevel, Manifest, ObjectRef, ReconcileError, Reconciler,
    Request,
};

pub struct Hostile;

impl Reconciler for Hostile {
    fn manifest(settings: &str) -> Result<Manifest, String> {
        if setting(settings, "mode") == Some("manifest-loop") {
            #[allow(clippy::empty_loop)]
            loop {}
        }
        let ns = setting(settings, "namespace").ok_or("settings need `namespace: NAME`")?;
        Ok(Manifest::new::<ConfigMap>("hostile", "1.0.0").namespaces([ns]))
    }

    fn reconcile(ctx: &Context<'_>, req: &Request) -> Result<Action, ReconcileError> {
        let Some(cm) = req.current_as::<ConfigMap>()? else { return Ok(Action::done()) };
        if cm.metadata.labels.as_ref().and_then(|l| l.get("hostile")).map(String::as_str) != Some("true") {
            return Ok(Action::done());
        }
        let mode = cm.data.as_ref().and_then(|d| d.get("mode")).cloned().unwrap_or_default();
        let ns = cm.metadata.namespace.clone();
        match mode.as_str() {
            "loop" => spin(),
            "panic" => panic!("hostile plugin panics on purpose"),
            "grab" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                for _ in 0..(8 << 10) {
                    hoard.push(vec![1u8; 1 << 20]);
                }
                Ok(Action::requeue(std::time::Duration::from_millis(hoard.len() as u64)))
            }
            "huge" => {
                let big = "x".repeat(100 << 20);
                raw::create(&big);
                ctx.log(LogLevel::Info, &big, &[]);
                Err(ReconcileError::retry(big))
            }
            "flood" => {
                // Ten times each budget (100 Events, 1000 lines).
                for i in 0..1_000 {
                    ctx.warning(&req.object, "Flood", &format!("flood event {i}"));
                }
                for i in 0..10_000 {
                    ctx.log(LogLevel::Info, &format!("flood line {i}"), &[]);
                }
                Ok(Action::done())
            }
            "secrets" => {
                let got = ctx.get_opt::<Secret>(ns.as_deref(), "db-password").map(|_| ());
                let listed = ctx.list(&KindRef::new("v1", "Secret"), &ListParams::default()).map(|_| ());
                let mut s = Secret::default();
                s.metadata.name = Some("planted".into());
                s.metadata.namespace = ns.clone();
                let created = ctx.create_obj(&s).map(|_| ());
                let all = [("get", got), ("list", listed), ("create", created)];
                let report: Vec<String> = all
                    .iter()
                    .map(|(v, r)| format!("{v}={}", r.as_ref().err().map(|e| e.code()).unwrap_or("ok")))
                    .collect();
                Err(ReconcileError::permanent(format!("secrets: {}", report.join(" "))))
            }
            "badjson" => {
                let a = raw::create("{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"metadata\": {");
                let b = raw::update("[1, 2,");
                let r = ObjectRef::new(&KindRef::new("v1", "ConfigMap"), ns.as_deref(), "x");
                Err(ReconcileError::permanent(format!("badjson: create={a} update={b} ({r})")))
            }
            "hold" => {
                let hoard = hoard();
                // Host calls while holding it: the instance stays alive and charged
                // for the whole time, as a slow reconcile's would.
                let start = std::time::Instant::now();
                while start.elapsed() < std::time::Duration::from_secs(2) {
                    ctx.get(&req.object)?;
                }
                std::hint::black_box(&hoard);
                Ok(Action::requeue(std::time::Duration::from_secs(1)))
            }
            _ => Ok(Action::done()),
        }
    }
}

/// 120 MiB in 1 MiB pieces, every page written (`vec![1; _]` fills it), so that it is
/// resident and not just reserved: under the default 128 MiB cap, so no trap stops it.
fn hoard() -> Vec<Vec<u8>> {
    (0..120).map(|_| vec![1u8; 1 << 20]).collect()
}

impl wasmop_sdk::Webhooks for Hostile {
    fn handlers(_settings: &str) -> Vec<wasmop_sdk::Handler> {
        use wasmop_sdk::{Handler, Operation};
        vec![Handler::validating("grab", KindRef::of::<ConfigMap>(), &[Operation::Create, Operation::Update])]
    }

    fn review(
        _ctx: &Context<'_>,
        _handler: &str,
        _settings: &str,
        _req: &wasmop_sdk::AdmissionRequest,
    ) -> wasmop_sdk::AdmissionResponse {
        std::hint::black_box(hoard());
        wasmop_sdk::AdmissionResponse::allow()
    }
}

fn spin() -> ! {
    let mut n: u64 = 0;
    loop {
        n = std::hint::black_box(n.wrapping_add(1));
    }
}

/// The contract's calls with raw text, which the SDK's typed API never sends malformed.
#[cfg(target_arch = "wasm32")]
mod raw {
    use wasmop_sdk::guest::wasmop::operator::cluster;

    fn code(r: Result<String, impl std::fmt::Debug>) -> String {
        match r {
            Ok(_) => "ok".into(),
            Err(e) => format!("{e:?}").chars().take(80).collect(),
        }
    }

    pub fn create(text: &str) -> String {
        code(cluster::create(text))
    }

    pub fn update(text: &str) -> String {
        code(cluster::update(text))
    }
}

/// Natively (clippy, `cargo test`) there is no host to send raw text to.
#[cfg(not(target_arch = "wasm32"))]
mod raw {
    pub fn create(_: &str) -> String {
        "no host".into()
    }

    pub fn update(_: &str) -> String {
        "no host".into()
    }
}

wasmop_sdk::export_plugin!(Hostile, webhooks = Hostile);
