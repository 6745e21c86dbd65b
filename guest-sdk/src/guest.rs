//! The wasm side: bindings to the host's imports, and the glue that `export_plugin!`
//! expands to. Only built for wasm32.

wit_bindgen::generate!({
    path: "../wit",
    world: "full-plugin",
    pub_export_macro: true,
    default_bindings_module: "wasmop_sdk::guest",
});

use crate::{Cluster, Context, ListParams, Reconciler};
use crate::{Error, EventType, KindRef, LogLevel, ObjectRef};
use exports::wasmop::operator::admission as adm;
use exports::wasmop::operator::own_writes as own;
use exports::wasmop::operator::reach;
use exports::wasmop::operator::reconciler as rec;
use exports::wasmop::operator::selectors as sel;
use wasmop::operator::{cluster, events, log, types as wt};

pub use adm::Guest as AdmissionGuest;
pub use adm::Handler as WitHandler;
pub use own::Guest as OwnWritesGuest;
pub use reach::Guest as ReachGuest;
pub use rec::Guest as ReconcilerGuest;
pub use rec::Request as WitRequest;
pub use rec::{Action as WitAction, PluginManifest as WitManifest, ReconcileError as WitReconcileError};
pub use sel::Guest as SelectorsGuest;
pub use sel::SelectorWatch as WitSelectorWatch;

/// The host, seen through the SDK's [`Cluster`] trait.
struct HostCluster;

fn wit_ref(r: &ObjectRef) -> wt::ObjectRef {
    wt::ObjectRef {
        api_version: r.api_version.clone(),
        kind: r.kind.clone(),
        namespace: r.namespace.clone(),
        name: r.name.clone(),
    }
}

fn sdk_ref(r: wt::ObjectRef) -> ObjectRef {
    ObjectRef { api_version: r.api_version, kind: r.kind, namespace: r.namespace, name: r.name }
}

fn wit_kind(k: &KindRef) -> wt::KindRef {
    wt::KindRef { api_version: k.api_version.clone(), kind: k.kind.clone() }
}

fn wit_params(p: &ListParams) -> cluster::ListParams {
    cluster::ListParams {
        namespace: p.namespace.clone(),
        label_selector: p.label_selector.clone(),
        field_selector: p.field_selector.clone(),
    }
}

fn sdk_error(e: wt::Error) -> Error {
    match e {
        wt::Error::NotFound(m) => Error::NotFound(m),
        wt::Error::AlreadyExists(m) => Error::AlreadyExists(m),
        wt::Error::Conflict(m) => Error::Conflict(m),
        wt::Error::Forbidden(m) => Error::Forbidden(m),
        wt::Error::Invalid(m) => Error::Invalid(m),
        wt::Error::Unavailable(m) => Error::Unavailable(m),
        wt::Error::Internal(m) => Error::Internal(m),
    }
}

fn parse(text: Result<String, wt::Error>) -> Result<serde_json::Value, Error> {
    let text = text.map_err(sdk_error)?;
    serde_json::from_str(&text).map_err(|e| Error::Internal(format!("host returned bad JSON: {e}")))
}

impl Cluster for HostCluster {
    fn get(&self, object: &ObjectRef) -> Result<serde_json::Value, Error> {
        parse(cluster::get(&wit_ref(object)))
    }

    fn list(&self, kind: &KindRef, p: &ListParams) -> Result<Vec<serde_json::Value>, Error> {
        let text = self.list_text(kind, p)?;
        serde_json::from_str(&text).map_err(|e| Error::Internal(format!("host returned a bad list: {e}")))
    }

    fn lists_as_text(&self) -> bool {
        true
    }

    fn list_text(&self, kind: &KindRef, p: &ListParams) -> Result<String, Error> {
        cluster::list(&wit_kind(kind), &wit_params(p)).map_err(sdk_error)
    }

    fn get_live(&self, object: &ObjectRef) -> Result<serde_json::Value, Error> {
        parse(cluster::get_live(&wit_ref(object)))
    }

    fn list_live(&self, kind: &KindRef, p: &ListParams) -> Result<Vec<serde_json::Value>, Error> {
        let text = cluster::list_live(&wit_kind(kind), &wit_params(p)).map_err(sdk_error)?;
        serde_json::from_str(&text).map_err(|e| Error::Internal(format!("host returned a bad list: {e}")))
    }

    fn create(&self, object: &serde_json::Value) -> Result<serde_json::Value, Error> {
        parse(cluster::create(&object.to_string()))
    }

    fn update(&self, object: &serde_json::Value) -> Result<serde_json::Value, Error> {
        parse(cluster::update(&object.to_string()))
    }

    fn update_status(&self, object: &serde_json::Value) -> Result<serde_json::Value, Error> {
        parse(cluster::update_status(&object.to_string()))
    }

    fn delete(&self, object: &ObjectRef) -> Result<(), Error> {
        cluster::delete(&wit_ref(object)).map_err(sdk_error)
    }

    fn record_event(&self, regarding: &ObjectRef, event_type: EventType, reason: &str, message: &str) {
        let t = match event_type {
            EventType::Normal => events::EventType::Normal,
            EventType::Warning => events::EventType::Warning,
        };
        events::record(&wit_ref(regarding), t, reason, message)
    }

    fn log(&self, level: LogLevel, message: &str, fields: &[(&str, &str)]) {
        let l = match level {
            LogLevel::Trace => log::Level::Trace,
            LogLevel::Debug => log::Level::Debug,
            LogLevel::Info => log::Level::Info,
            LogLevel::Warn => log::Level::Warn,
            LogLevel::Error => log::Level::Error,
        };
        let fields: Vec<(String, String)> = fields.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        log::log(l, message, &fields)
    }
}

#[doc(hidden)]
pub fn selector_watches<R: Reconciler>(settings: &str) -> Result<Vec<WitSelectorWatch>, String> {
    let m = R::manifest(settings)?;
    Ok(m.watches
        .iter()
        .filter_map(|w| match &w.mapping {
            crate::Mapping::Selector(path) => Some(WitSelectorWatch { kind: wit_kind(&w.kind), path: path.clone() }),
            _ => None,
        })
        .collect())
}

#[doc(hidden)]
pub fn skip_own_writes<R: Reconciler>(settings: &str) -> bool {
    R::manifest(settings).is_ok_and(|m| m.skip_own_writes)
}

#[doc(hidden)]
pub fn call_namespaces<R: Reconciler>(settings: &str) -> Vec<String> {
    R::manifest(settings).map(|m| m.call_namespaces).unwrap_or_default()
}

#[doc(hidden)]
pub fn manifest<R: Reconciler>(settings: &str) -> Result<WitManifest, String> {
    let m = R::manifest(settings)?;
    Ok(WitManifest {
        name: m.name,
        version: m.version,
        primary: wit_kind(&m.primary),
        namespaced: m.namespaced,
        namespaces: m.namespaces,
        owns: m.owns.iter().map(wit_kind).collect(),
        watches: m
            .watches
            .iter()
            .map(|w| rec::Watch {
                kind: wit_kind(&w.kind),
                mapping: match &w.mapping {
                    crate::Mapping::AllPrimaries | crate::Mapping::Selector(_) => rec::Mapping::AllPrimaries,
                    crate::Mapping::Label(l) => rec::Mapping::Label(l.clone()),
                    crate::Mapping::SameName => rec::Mapping::SameName,
                },
            })
            .collect(),
        permissions: m
            .permissions
            .iter()
            .map(|p| rec::Permission {
                kind: wit_kind(&p.kind),
                verbs: p
                    .verbs
                    .iter()
                    .map(|v| match v {
                        crate::Verb::Get => rec::Verb::Get,
                        crate::Verb::List => rec::Verb::List,
                        crate::Verb::Create => rec::Verb::Create,
                        crate::Verb::Update => rec::Verb::Update,
                        crate::Verb::UpdateStatus => rec::Verb::UpdateStatus,
                        crate::Verb::Delete => rec::Verb::Delete,
                    })
                    .collect(),
            })
            .collect(),
    })
}

#[doc(hidden)]
pub fn reconcile<R: Reconciler>(req: WitRequest) -> Result<WitAction, WitReconcileError> {
    let current = match req.current.as_deref().map(serde_json::from_str).transpose() {
        Ok(c) => c,
        Err(e) => {
            return Err(WitReconcileError { message: format!("host sent bad JSON: {e}"), retry: false });
        }
    };
    let request = crate::Request { object: sdk_ref(req.object), current, settings: req.settings };
    let ctx = Context::new(&HostCluster);
    match R::reconcile(&ctx, &request) {
        Ok(a) => Ok(WitAction { requeue_after_ms: a.requeue_after.map(|d| d.as_millis() as u64) }),
        Err(e) => Err(WitReconcileError { message: e.message, retry: e.retry }),
    }
}

#[doc(hidden)]
pub fn handlers<W: crate::Webhooks>(settings: &str) -> Vec<WitHandler> {
    use crate::admission::Operation as Op;
    W::handlers(settings)
        .into_iter()
        .map(|h| WitHandler {
            name: h.name,
            mutating: h.mutating,
            kinds: h.kinds.iter().map(wit_kind).collect(),
            operations: h
                .operations
                .iter()
                .map(|o| match o {
                    Op::Create => adm::Operation::Create,
                    Op::Update => adm::Operation::Update,
                    Op::Delete => adm::Operation::Delete,
                    Op::Connect => adm::Operation::Connect,
                })
                .collect(),
        })
        .collect()
}

#[doc(hidden)]
pub fn review<W: crate::Webhooks>(handler: &str, settings: &str, request: &str) -> Result<String, String> {
    let ctx = Context::new(&HostCluster);
    W::review_text(&ctx, handler, settings, request)?.into_json()
}
