//! Calls from the script to the host: one native function, `__wasmop_host(op, args)`,
//! that the prelude wraps as `cluster`, `events` and `log`.
//!
//! Arguments arrive as JSON text (the prelude stringifies them) and answers leave as
//! JSON text, so objects cross from the host to the script with one parse. A failed
//! cluster call answers `!reason\nmessage`, which the prelude throws as a
//! `ClusterError`; `reason` is the Kubernetes StatusReason (`NotFound`, `Conflict`, ...).

use crate::wasmop::operator::{cluster, events, log, types};
use boa_engine::{Context, JsNativeError, JsResult, JsString, JsValue, NativeFunction, js_string};
use serde::Deserialize;
use serde_json::Value;

pub fn install(ctx: &mut Context) -> JsResult<()> {
    ctx.register_global_callable(js_string!("__wasmop_host"), 2, NativeFunction::from_fn_ptr(host_call))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Ref {
    api_version: String,
    kind: String,
    #[serde(default)]
    namespace: Option<String>,
    name: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Kind {
    api_version: String,
    kind: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Params {
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    label_selector: Option<String>,
    #[serde(default)]
    field_selector: Option<String>,
}

fn object_ref(r: Ref) -> types::ObjectRef {
    types::ObjectRef { api_version: r.api_version, kind: r.kind, namespace: r.namespace, name: r.name }
}

fn type_error(msg: String) -> boa_engine::JsError {
    JsNativeError::typ().with_message(msg).into()
}

fn args<T: serde::de::DeserializeOwned>(op: &str, text: &str) -> JsResult<T> {
    serde_json::from_str(text).map_err(|e| type_error(format!("{op}: bad arguments: {e}")))
}

fn answer(r: Result<String, types::Error>) -> JsValue {
    let text = match r {
        Ok(text) => text,
        Err(e) => {
            let (reason, m) = match e {
                types::Error::NotFound(m) => ("NotFound", m),
                types::Error::AlreadyExists(m) => ("AlreadyExists", m),
                types::Error::Conflict(m) => ("Conflict", m),
                types::Error::Forbidden(m) => ("Forbidden", m),
                types::Error::Invalid(m) => ("Invalid", m),
                types::Error::Unavailable(m) => ("Unavailable", m),
                types::Error::Internal(m) => ("Internal", m),
            };
            format!("!{reason}\n{m}")
        }
    };
    JsValue::from(JsString::from(text.as_str()))
}

fn host_call(_: &JsValue, argv: &[JsValue], ctx: &mut Context) -> JsResult<JsValue> {
    let text = |i: usize, ctx: &mut Context| -> JsResult<String> {
        Ok(argv.get(i).cloned().unwrap_or_default().to_string(ctx)?.to_std_string_escaped())
    };
    let op = text(0, ctx)?;
    let a = text(1, ctx)?;
    let list = |live: bool, a: &str| -> JsResult<JsValue> {
        let (k, p): (Kind, Option<Params>) = args("list", a)?;
        let p = p.unwrap_or_default();
        let kind = types::KindRef { api_version: k.api_version, kind: k.kind };
        let params = cluster::ListParams {
            namespace: p.namespace,
            label_selector: p.label_selector,
            field_selector: p.field_selector,
        };
        Ok(answer(if live { cluster::list_live(&kind, &params) } else { cluster::list(&kind, &params) }))
    };
    let object = |op: &str, a: &str| -> JsResult<String> {
        let (o,): (Value,) = args(op, a)?;
        Ok(o.to_string())
    };
    match op.as_str() {
        "get" | "getLive" => {
            let (r,): (Ref,) = args(&op, &a)?;
            let r = object_ref(r);
            Ok(answer(if op == "get" { cluster::get(&r) } else { cluster::get_live(&r) }))
        }
        "list" => list(false, &a),
        "listLive" => list(true, &a),
        "create" => Ok(answer(cluster::create(&object(&op, &a)?))),
        "update" => Ok(answer(cluster::update(&object(&op, &a)?))),
        "updateStatus" => Ok(answer(cluster::update_status(&object(&op, &a)?))),
        "delete" => {
            let (r,): (Ref,) = args(&op, &a)?;
            Ok(answer(cluster::delete(&object_ref(r)).map(|()| "null".to_owned())))
        }
        "event" => {
            let (r, t, reason, message): (Ref, String, String, String) = args(&op, &a)?;
            let t = match t.as_str() {
                "Normal" | "normal" => events::EventType::Normal,
                "Warning" | "warning" => events::EventType::Warning,
                other => return Err(type_error(format!("events.record: type is \"{other}\", not Normal or Warning"))),
            };
            events::record(&object_ref(r), t, &reason, &message);
            Ok(JsValue::undefined())
        }
        "log" => {
            let (level, message, fields): (String, String, Option<serde_json::Map<String, Value>>) = args(&op, &a)?;
            let level = match level.as_str() {
                "trace" => log::Level::Trace,
                "debug" => log::Level::Debug,
                "warn" => log::Level::Warn,
                "error" => log::Level::Error,
                _ => log::Level::Info,
            };
            let fields: Vec<(String, String)> = fields
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| match v {
                    Value::String(s) => (k, s),
                    v => (k, v.to_string()),
                })
                .collect();
            log::log(level, &message, &fields);
            Ok(JsValue::undefined())
        }
        other => Err(type_error(format!("no host call named {other}"))),
    }
}
