//! The evaluated script of this instance, and calls into its exported functions.
//!
//! The script is evaluated on the instance's first call and kept while the instance
//! lives. A script that does not evaluate (a syntax error, a throw at top level) fails
//! every call with the same message, which names the file, line and column, so the
//! host rejects the version at load (`manifest` is its first call) and the previous
//! version keeps serving.

use boa_engine::builtins::promise::PromiseState;
use boa_engine::{Context, JsObject, JsString, JsValue, Module, Source, js_string};
use serde_json::Value;
use std::cell::RefCell;

struct Script {
    ctx: Context,
    exports: JsObject,
    /// The prelude's `__wasmop_call` and `__wasmop_settled`.
    call: JsObject,
    settled: JsObject,
}

thread_local! {
    static SCRIPT: RefCell<Option<Result<Script, String>>> = const { RefCell::new(None) };
}

/// What an exported function did.
pub enum Outcome {
    /// It returned this value (`null` for undefined).
    Returned(Value),
    /// It threw: the error's message, and whether the host should retry (false only
    /// for a `ReconcileError` made with `{ retry: false }`).
    Threw { message: String, retry: bool },
    /// The script exports no function of that name.
    Missing,
}

/// Calls the script's exported function `name` with `args` (a JSON array).
pub fn call(name: &str, args: &Value) -> Result<Outcome, String> {
    call_text(name, &args.to_string())
}

/// [`call`] with the arguments as JSON text: objects the host sent as text go to the
/// script without being parsed and written again on the way.
pub fn call_text(name: &str, args: &str) -> Result<Outcome, String> {
    SCRIPT.with_borrow_mut(|slot| {
        let script = slot.get_or_insert_with(evaluate).as_mut().map_err(|e| e.clone())?;
        let argv = [
            JsValue::from(script.exports.clone()),
            JsValue::from(JsString::from(name)),
            JsValue::from(JsString::from(args)),
        ];
        let mut answer = script.answer(&script.call.clone(), &argv).map_err(|e| format!("{name}: {e}"))?;
        if answer.get("pending").is_some() {
            script.ctx.run_jobs().map_err(|e| format!("{name}: {e}"))?;
            answer = script.answer(&script.settled.clone(), &[]).map_err(|e| format!("{name}: {e}"))?;
        }
        Ok(match answer {
            Value::Object(m) if m.contains_key("missing") => Outcome::Missing,
            Value::Object(mut m) if m.contains_key("threw") => Outcome::Threw {
                message: m.remove("threw").and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default(),
                retry: m.get("retry").and_then(Value::as_bool).unwrap_or(true),
            },
            Value::Object(mut m) => Outcome::Returned(m.remove("ok").unwrap_or(Value::Null)),
            other => return Err(format!("{name}: bad answer {other}")),
        })
    })
}

impl Script {
    /// Calls one of the prelude's functions; its answer is JSON text.
    fn answer(&mut self, f: &JsObject, argv: &[JsValue]) -> Result<Value, String> {
        let text = f
            .call(&JsValue::undefined(), argv, &mut self.ctx)
            .and_then(|v| v.to_string(&mut self.ctx))
            .map_err(|e| e.to_string())?
            .to_std_string_escaped();
        serde_json::from_str(&text).map_err(|e| format!("bad answer: {e}"))
    }
}

fn evaluate() -> Result<Script, String> {
    let (file, text) = crate::wasmop::operator::script::source();
    let file = if file.is_empty() { "plugin.js".to_owned() } else { file };
    let mut ctx = Context::default();
    crate::bridge::install(&mut ctx).map_err(|e| format!("engine: {e}"))?;
    ctx.eval(Source::from_bytes(include_str!("prelude.js"))).map_err(|e| format!("engine prelude: {e}"))?;
    let global = |name: JsString, ctx: &mut Context| {
        ctx.global_object()
            .get(name.clone(), ctx)
            .ok()
            .and_then(|v| v.as_object())
            .ok_or_else(|| format!("engine prelude: no {}", name.to_std_string_escaped()))
    };
    let call = global(js_string!("__wasmop_call"), &mut ctx)?;
    let settled = global(js_string!("__wasmop_settled"), &mut ctx)?;
    let source = Source::from_bytes(text.as_bytes()).with_path(std::path::Path::new(&file));
    let module = Module::parse(source, None, &mut ctx).map_err(|e| format!("{file}: {e}"))?;
    let done = module.load_link_evaluate(&mut ctx);
    ctx.run_jobs().map_err(|e| format!("{file}: {e}"))?;
    match done.state() {
        PromiseState::Fulfilled(_) => {}
        PromiseState::Rejected(e) => {
            // As a native error, a thrown Error says where it was thrown.
            let e = match boa_engine::JsError::from_opaque(e.clone()).try_native(&mut ctx) {
                Ok(native) => native.to_string(),
                Err(_) => e.display().to_string(),
            };
            return Err(format!("{file}: {e}"));
        }
        PromiseState::Pending => return Err(format!("{file}: top-level await never settled")),
    }
    let exports = module.namespace(&mut ctx);
    Ok(Script { ctx, exports, call, settled })
}
