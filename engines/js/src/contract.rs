//! The contract's exports, served by the script: arguments become JavaScript values
//! (records in camelCase, `null` for none, settings parsed from YAML or JSON), and the
//! script's answers become WIT records, refused with a message naming the field when
//! they do not fit.
//!
//! The script exports `manifest(settings)` and `reconcile(request)`, and optionally
//! `handlers(settings)` with `review(handler, settings, request)`. Selector watches,
//! own writes and call namespaces are fields of the manifest
//! (`{selector: ["spec", "selector"]}` as a watch's mapping, `skipOwnWrites`,
//! `callNamespaces`), as in the Rust SDK.

use crate::exports::wasmop::operator::{admission, own_writes, reach, reconciler, selectors};
use crate::js::{self, Outcome};
use crate::wasmop::operator::types::KindRef;
use serde::Deserialize;
use serde_json::{Value, json};
use std::cell::RefCell;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Kind {
    api_version: String,
    kind: String,
}

impl From<Kind> for KindRef {
    fn from(k: Kind) -> Self {
        KindRef { api_version: k.api_version, kind: k.kind }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
enum Mapping {
    AllPrimaries,
    SameName,
    Label(String),
    Selector(Vec<String>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Watch {
    kind: Kind,
    mapping: Mapping,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
enum Verb {
    Get,
    List,
    Create,
    Update,
    UpdateStatus,
    Delete,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Permission {
    kind: Kind,
    verbs: Vec<Verb>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Manifest {
    name: String,
    version: String,
    primary: Kind,
    #[serde(default = "yes")]
    namespaced: bool,
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default)]
    owns: Vec<Kind>,
    #[serde(default)]
    watches: Vec<Watch>,
    #[serde(default)]
    permissions: Vec<Permission>,
    #[serde(default)]
    skip_own_writes: bool,
    #[serde(default)]
    call_namespaces: Vec<String>,
}

fn yes() -> bool {
    true
}

#[derive(Deserialize)]
#[serde(rename_all = "UPPERCASE")]
enum Operation {
    #[serde(alias = "create")]
    Create,
    #[serde(alias = "update")]
    Update,
    #[serde(alias = "delete")]
    Delete,
    #[serde(alias = "connect")]
    Connect,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Handler {
    name: String,
    #[serde(default)]
    mutating: bool,
    kinds: Vec<Kind>,
    operations: Vec<Operation>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Action {
    #[serde(default)]
    requeue_after_ms: Option<f64>,
}

/// The settings document as a value: YAML (of which JSON is a part), `null` when empty.
fn settings_value(settings: &str) -> Result<Value, String> {
    if settings.trim().is_empty() {
        return Ok(Value::Null);
    }
    serde_yaml::from_str(settings).map_err(|e| format!("settings: {e}"))
}

/// `what` as `T`: serde's message names the field that does not fit, with its path.
fn parse<T: serde::de::DeserializeOwned>(what: &str, v: Value) -> Result<T, String> {
    serde_json::from_value(v).map_err(|e| format!("{what}: {e}"))
}

thread_local! {
    /// The last settings the manifest was asked for, and its answer: the host asks for
    /// the manifest and its optional parts in one call, and the script runs once.
    static MANIFEST: RefCell<Option<(String, Result<Value, String>)>> = const { RefCell::new(None) };
}

fn manifest_value(settings: &str) -> Result<Value, String> {
    if let Some(hit) = MANIFEST.with_borrow(|m| m.as_ref().filter(|(s, _)| s == settings).map(|(_, r)| r.clone())) {
        return hit;
    }
    let r = (|| match js::call("manifest", &json!([settings_value(settings)?]))? {
        Outcome::Returned(v) => Ok(v),
        Outcome::Threw { message, .. } => Err(format!("manifest threw: {message}")),
        Outcome::Missing => Err("the script exports no function `manifest`".to_owned()),
    })();
    MANIFEST.with_borrow_mut(|m| *m = Some((settings.to_owned(), r.clone())));
    r
}

fn manifest(settings: &str) -> Result<Manifest, String> {
    parse("manifest", manifest_value(settings)?)
}

/// The script's handlers: none when it exports no `handlers`; an error when they throw
/// or do not fit, which `manifest` reports, so such a version is rejected at load
/// instead of serving without its webhooks.
fn handlers(settings: &str) -> Result<Vec<Handler>, String> {
    match js::call("handlers", &json!([settings_value(settings)?]))? {
        Outcome::Returned(v) => parse::<Vec<Handler>>("handlers", v),
        Outcome::Missing => Ok(Vec::new()),
        Outcome::Threw { message, .. } => Err(format!("handlers threw: {message}")),
    }
}

thread_local! {
    /// The last settings text a review parsed, as JSON text: a warm instance answers
    /// many reviews with the same settings.
    static SETTINGS: RefCell<(String, String)> = const { RefCell::new((String::new(), String::new())) };
}

fn settings_json(settings: &str) -> Result<String, String> {
    if let Some(hit) = SETTINGS.with_borrow(|(s, j)| (s == settings && !j.is_empty()).then(|| j.clone())) {
        return Ok(hit);
    }
    let j = settings_value(settings)?.to_string();
    SETTINGS.with_borrow_mut(|c| *c = (settings.to_owned(), j.clone()));
    Ok(j)
}

impl reconciler::Guest for crate::Engine {
    fn manifest(settings: String) -> Result<reconciler::PluginManifest, String> {
        let m = manifest(&settings)?;
        handlers(&settings)?;
        Ok(reconciler::PluginManifest {
            name: m.name,
            version: m.version,
            primary: m.primary.into(),
            namespaced: m.namespaced,
            namespaces: m.namespaces,
            owns: m.owns.into_iter().map(Into::into).collect(),
            watches: m
                .watches
                .into_iter()
                .map(|w| reconciler::Watch {
                    kind: w.kind.into(),
                    mapping: match w.mapping {
                        Mapping::AllPrimaries | Mapping::Selector(_) => reconciler::Mapping::AllPrimaries,
                        Mapping::SameName => reconciler::Mapping::SameName,
                        Mapping::Label(l) => reconciler::Mapping::Label(l),
                    },
                })
                .collect(),
            permissions: m
                .permissions
                .into_iter()
                .map(|p| reconciler::Permission {
                    kind: p.kind.into(),
                    verbs: p
                        .verbs
                        .into_iter()
                        .map(|v| match v {
                            Verb::Get => reconciler::Verb::Get,
                            Verb::List => reconciler::Verb::List,
                            Verb::Create => reconciler::Verb::Create,
                            Verb::Update => reconciler::Verb::Update,
                            Verb::UpdateStatus => reconciler::Verb::UpdateStatus,
                            Verb::Delete => reconciler::Verb::Delete,
                        })
                        .collect(),
                })
                .collect(),
        })
    }

    fn reconcile(req: reconciler::Request) -> Result<reconciler::Action, reconciler::ReconcileError> {
        let fail = |message: String, retry: bool| reconciler::ReconcileError { message, retry };
        let settings = settings_json(&req.settings).map_err(|e| fail(e, false))?;
        let o = req.object;
        let object = json!({"apiVersion": o.api_version, "kind": o.kind, "namespace": o.namespace, "name": o.name});
        // The host's JSON text of the object goes in as it is (the script parses it once).
        let current = req.current.as_deref().unwrap_or("null");
        let args = format!(r#"[{{"object":{object},"current":{current},"settings":{settings}}}]"#);
        match js::call_text("reconcile", &args).map_err(|e| fail(e, true))? {
            Outcome::Returned(Value::Null) => Ok(reconciler::Action { requeue_after_ms: None }),
            Outcome::Returned(v) => {
                let a: Action = parse("reconcile's answer", v).map_err(|e| fail(e, false))?;
                let ms = a.requeue_after_ms.filter(|ms| ms.is_finite() && *ms >= 0.0).map(|ms| ms as u64);
                Ok(reconciler::Action { requeue_after_ms: ms })
            }
            Outcome::Threw { message, retry } => Err(fail(message, retry)),
            Outcome::Missing => Err(fail("the script exports no function `reconcile`".into(), false)),
        }
    }
}

impl selectors::Guest for crate::Engine {
    fn selector_watches(settings: String) -> Result<Vec<selectors::SelectorWatch>, String> {
        Ok(manifest(&settings)?
            .watches
            .into_iter()
            .filter_map(|w| match w.mapping {
                Mapping::Selector(path) => Some(selectors::SelectorWatch { kind: w.kind.into(), path }),
                _ => None,
            })
            .collect())
    }
}

impl own_writes::Guest for crate::Engine {
    fn skip_own_writes(settings: String) -> bool {
        manifest(&settings).is_ok_and(|m| m.skip_own_writes)
    }
}

impl reach::Guest for crate::Engine {
    fn call_namespaces(settings: String) -> Vec<String> {
        manifest(&settings).map(|m| m.call_namespaces).unwrap_or_default()
    }
}

impl admission::Guest for crate::Engine {
    fn handlers(settings: String) -> Vec<admission::Handler> {
        // `manifest` refused a version whose handlers fail; this is for a host that
        // asks for handlers without the manifest first.
        let list = handlers(&settings).unwrap_or_else(|e| {
            crate::wasmop::operator::log::log(crate::wasmop::operator::log::Level::Error, &e, &[]);
            Vec::new()
        });
        list.into_iter()
            .map(|h| admission::Handler {
                name: h.name,
                mutating: h.mutating,
                kinds: h.kinds.into_iter().map(Into::into).collect(),
                operations: h
                    .operations
                    .into_iter()
                    .map(|o| match o {
                        Operation::Create => admission::Operation::Create,
                        Operation::Update => admission::Operation::Update,
                        Operation::Delete => admission::Operation::Delete,
                        Operation::Connect => admission::Operation::Connect,
                    })
                    .collect(),
            })
            .collect()
    }

    fn review(handler: String, settings: String, request: String) -> Result<String, String> {
        let args = format!("[{},{},{request}]", Value::from(handler), settings_json(&settings)?);
        match js::call_text("review", &args)? {
            Outcome::Returned(Value::Null) => Err("review returned nothing: return {allowed: true} or a denial".into()),
            Outcome::Returned(v) => Ok(v.to_string()),
            Outcome::Threw { message, .. } => Err(format!("review threw: {message}")),
            Outcome::Missing => Err("the script exports no function `review`".into()),
        }
    }
}
