//! One AdmissionReview: find the plugin and handler, call it under the admission
//! deadline, and turn its answer into an AdmissionReview v1 response.
//!
//! Guarantees: every well-formed review gets an answer before the deadline — a missing
//! plugin or handler, a trap, a timeout or a malformed plugin answer all become a
//! denial whose message names the plugin and the cause. Whether the apiserver then
//! admits the object is the webhook configuration's `failurePolicy`, not ours.

use crate::gateway::{Backend, Gateway, Reach};
use crate::metrics::{METRICS, labels};
use crate::registry::Registry;
use base64::Engine as _;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wasmop_sdk::{AdmissionResponse, Handler, Operation};

/// Answers reviews for every loaded plugin's handlers.
pub struct Reviewer {
    pub registry: Arc<Registry>,
    pub backend: Arc<dyn Backend>,
    /// Why 8 s by default: the generated webhook configurations give the apiserver a
    /// 10 s `timeoutSeconds`, and the host must deny clearly before the apiserver gives
    /// up with a bare timeout.
    pub deadline: Duration,
    /// Synced primary caches (published by this replica's controllers, when it leads).
    pub caches: Arc<crate::gateway::Caches>,
}

/// The outcome, for metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Allowed,
    Denied,
    Error,
    /// No such plugin or handler: counted without the URL's names, which any client
    /// picks (one series per random path would grow memory without bound).
    Unknown,
}

impl Reviewer {
    /// Answers `body` (an AdmissionReview v1, as received) for `/<plugin>/<handler>`
    /// with the AdmissionReview's JSON text. Err: the body is not an AdmissionReview
    /// (HTTP 400).
    ///
    /// The `request` is handed to the plugin as the bytes the apiserver sent: the host
    /// reads only its uid, and parses the object only if the plugin answers with a
    /// whole mutated object to diff against.
    pub async fn review(&self, plugin: &str, handler: &str, body: &[u8]) -> Result<String, String> {
        let started = Instant::now();
        let envelope: Envelope<'_> =
            serde_json::from_slice(body).map_err(|e| format!("not an AdmissionReview: {e}"))?;
        let request = envelope.request.ok_or("the body has no AdmissionReview request")?;
        let head: Head<'_> = serde_json::from_str(request.get())
            .map_err(|e| format!("the AdmissionReview request is not an object: {e}"))?;
        let uid = head.uid.clone().ok_or("the AdmissionReview request has no uid")?;
        let (response, outcome) = self.answer(plugin, handler, &head, request.get()).await;
        let (result, plugin, handler) = match outcome {
            Outcome::Allowed => ("allowed", plugin, handler),
            Outcome::Denied => ("denied", plugin, handler),
            Outcome::Error => ("error", plugin, handler),
            Outcome::Unknown => ("error", "", ""),
        };
        let l = labels(&[("plugin", plugin), ("handler", handler)]);
        METRICS.admission_seconds.get_or_create(&l).observe(started.elapsed().as_secs_f64());
        let l = labels(&[("plugin", plugin), ("handler", handler), ("result", result)]);
        METRICS.admission_reviews.get_or_create(&l).inc();
        let mut response = response;
        response["uid"] = json!(uid);
        admission_review_text(response)
    }

    async fn answer(&self, plugin: &str, handler: &str, head: &Head<'_>, request: &str) -> (Value, Outcome) {
        let fail = |msg: String| {
            let msg = crate::gateway::truncate(&msg, 4096);
            tracing::warn!(plugin, handler, "admission denied by the host: {msg}");
            (deny(500, "InternalError", &format!("wasmop: {msg}")), Outcome::Error)
        };
        let unknown = |msg: String| (fail(msg).0, Outcome::Unknown);
        let Some(loaded) = self.registry.get(plugin) else {
            return unknown(format!("plugin {:?} is not loaded", crate::gateway::truncate(plugin, 64)));
        };
        let Some(h) = loaded.handlers.iter().find(|h| h.name == handler) else {
            let handler = crate::gateway::truncate(handler, 64);
            return unknown(format!("plugin {plugin:?} serves no admission handler {handler:?}"));
        };
        // Before any plugin code runs: the review must be one this handler serves, in
        // the plugin's world (the same authority check as its calls).
        let (group, kind, mut reach) = match in_scope(h, head) {
            Ok(r) => r,
            Err(e) => return fail(format!("plugin {plugin:?} handler {handler:?} does not serve this review: {e}")),
        };
        // A cluster-scoped object (a Namespace) may come with `namespace` set to its own
        // name: its scope, not the field, decides (looked up only where it matters).
        if loaded.permissions.limited_to_namespaces()
            && let Some(version) = head.kind.as_ref().map(|k| k.version.as_ref())
        {
            let api_version = if group.is_empty() { version.to_owned() } else { format!("{group}/{version}") };
            if !self.backend.namespaced(&wasmop_sdk::KindRef::new(&api_version, kind)).await.unwrap_or(true) {
                reach = Reach::Cluster;
            }
        }
        if let Err(e) = loaded.permissions.check_review(group, kind, reach) {
            return fail(format!("plugin {plugin:?} handler {handler:?} does not serve this review: {}", e.message()));
        }
        let backend = match self.backend.clone().acting_as(loaded.identity.as_ref()) {
            Ok(b) => b,
            Err(e) => return fail(format!("cannot act as plugin {plugin:?}: {e}")),
        };
        let gateway = Gateway::new(plugin, loaded.permissions.clone(), backend)
            .with_cache(self.caches.get(plugin, loaded.identity.as_ref()));
        let limits =
            crate::runtime::Limits { deadline: self.deadline.min(loaded.limits.deadline), ..loaded.limits.clone() };
        let rt = self.registry.runtime();
        match rt.review(&loaded.compiled, gateway, handler, &loaded.settings, request, &limits).await {
            Err(e) => {
                crate::metrics::METRICS.faults.get_or_create(&labels(&[("plugin", plugin), ("kind", e.kind())])).inc();
                fail(format!("plugin {plugin:?} failed in admission handler {handler:?}: {e}"))
            }
            Ok(Err(msg)) => fail(format!("plugin {plugin:?} handler {handler:?} returned an error: {msg}")),
            Ok(Ok(answer)) => match finish(request, &answer, h.mutating) {
                Ok(v) if v["allowed"] == json!(true) => (v, Outcome::Allowed),
                Ok(v) => (v, Outcome::Denied),
                Err(msg) => fail(format!("plugin {plugin:?} handler {handler:?}: {msg}")),
            },
        }
    }
}

/// The envelope, with the request left as text.
#[derive(serde::Deserialize)]
struct Envelope<'a> {
    #[serde(borrow)]
    request: Option<&'a serde_json::value::RawValue>,
}

/// What the host itself reads of a request.
#[derive(serde::Deserialize)]
struct Head<'a> {
    #[serde(borrow)]
    uid: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow)]
    kind: Option<ReviewKind<'a>>,
    operation: Option<Operation>,
    #[serde(borrow, default)]
    namespace: Option<std::borrow::Cow<'a, str>>,
}

#[derive(serde::Deserialize)]
struct ReviewKind<'a> {
    #[serde(borrow, default)]
    group: std::borrow::Cow<'a, str>,
    #[serde(borrow, default)]
    version: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    kind: std::borrow::Cow<'a, str>,
}

/// The review's (group, kind, where) when `h` serves its kind and operation; else why not.
/// Kinds compare by group and kind: the apiserver may send a version the handler did
/// not name (`matchPolicy: Equivalent`).
fn in_scope<'h>(h: &Handler, head: &'h Head<'_>) -> Result<(&'h str, &'h str, Reach<'h>), String> {
    let kind = head.kind.as_ref().ok_or("the request names no kind")?;
    let (group, name) = (kind.group.as_ref(), kind.kind.as_ref());
    if !h.kinds.iter().any(|k| k.group() == group && k.kind == name) {
        let served: Vec<String> = h.kinds.iter().map(ToString::to_string).collect();
        return Err(format!("it serves {}, not {group}/{name}", served.join(", ")));
    }
    let op = head.operation.ok_or("the request names no operation")?;
    if !h.operations.contains(&op) {
        return Err(format!("it serves {:?}, not {op:?}", h.operations));
    }
    let reach = match head.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => Reach::Namespace(ns),
        _ => Reach::Cluster,
    };
    Ok((group, name, reach))
}

/// The request's object, read only to diff a returned whole object against.
#[derive(serde::Deserialize)]
struct Incoming {
    object: Option<Value>,
}

/// One JSONPatch operation, as far as the host checks it.
#[derive(serde::Deserialize)]
struct PatchOp<'a> {
    #[serde(borrow)]
    op: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    path: std::borrow::Cow<'a, str>,
}

/// Whether `patch` is a JSONPatch: an array of operations, each with a known `op` and a
/// JSON Pointer `path`. Values are skipped, not parsed: checking the shape is enough to
/// name the plugin at fault, and the apiserver applies the patch anyway (a full parse
/// cost as much as the rest of the host's work on a review).
fn check_patch(patch: &[u8]) -> Result<(), String> {
    let ops: Vec<PatchOp<'_>> = serde_json::from_slice(patch).map_err(|e| e.to_string())?;
    for (i, o) in ops.iter().enumerate() {
        if !matches!(&*o.op, "add" | "remove" | "replace" | "move" | "copy" | "test") {
            return Err(format!("operation {i}: unknown op {:?}", o.op));
        }
        if !(o.path.is_empty() || o.path.starts_with('/')) {
            return Err(format!("operation {i}: path {:?} is not a JSON Pointer", o.path));
        }
    }
    Ok(())
}

/// The AdmissionReview v1 text around `response`. Its patch, most of a mutating
/// answer's bytes, is base64 (`finish` decoded or encoded it): nothing in it needs
/// escaping, so it is copied in as it is rather than checked again a byte at a time.
fn admission_review_text(mut response: Value) -> Result<String, String> {
    let patch = response.as_object_mut().and_then(|r| r.remove("patch"));
    let review = json!({ "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response });
    let mut text = serde_json::to_string(&review).map_err(|e| e.to_string())?;
    if let Some(Value::String(p)) = patch {
        debug_assert!(text.ends_with("}}") && base64::engine::general_purpose::STANDARD.decode(&p).is_ok());
        text.truncate(text.len() - 2); // the closing braces of `response` and the review
        text.reserve(p.len() + 13);
        text.push_str(",\"patch\":\"");
        text.push_str(&p);
        text.push_str("\"}}");
    }
    Ok(text)
}

fn deny(code: u16, reason: &str, message: &str) -> Value {
    json!({ "allowed": false, "status": { "code": code, "reason": reason, "message": message } })
}

/// Turns a plugin's answer into the AdmissionResponse (without uid): a returned
/// `object` becomes a JSONPatch against the object of `request` (the AdmissionReview
/// request's JSON); a validating handler cannot patch. A `patch` in the result is
/// always standard base64 (checked or written here).
pub fn finish(request: &str, answer: &str, mutating: bool) -> Result<Value, String> {
    let r: AdmissionResponse = serde_json::from_str(answer).map_err(|e| format!("malformed AdmissionResponse: {e}"))?;
    let mut out = json!({ "allowed": r.allowed });
    if let Some(s) = &r.status {
        out["status"] = serde_json::to_value(s).map_err(|e| e.to_string())?;
        // What kubectl prints; a plugin cannot make it unbounded.
        out["status"]["message"] = json!(crate::gateway::truncate(&s.message, 4096));
        if !r.allowed && s.code.is_none() {
            out["status"]["code"] = json!(403);
        }
    } else if !r.allowed {
        out["status"] = json!({ "code": 403, "message": "denied" });
    }
    if !r.warnings.is_empty() {
        out["warnings"] = json!(r.warnings);
    }
    if !r.allowed {
        return Ok(out);
    }
    let patch = match (r.patch, &r.object) {
        (Some(p), _) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(&p)
                .map_err(|e| format!("`patch` is not base64: {e}"))?;
            check_patch(&bytes).map_err(|e| format!("`patch` is not a JSONPatch: {e}"))?;
            Some(p)
        }
        (None, Some(obj)) => {
            let incoming: Incoming = serde_json::from_str(request).map_err(|e| format!("request: {e}"))?;
            let original = incoming.object.ok_or("returned an object for a request without one")?;
            let patch = json_patch::diff(&original, obj);
            (!patch.0.is_empty())
                .then(|| serde_json::to_vec(&patch).map(|b| base64::engine::general_purpose::STANDARD.encode(b)))
                .transpose()
                .map_err(|e| e.to_string())?
        }
        (None, None) => None,
    };
    if let Some(p) = patch {
        if !mutating {
            return Err("a validating handler returned a change; only mutating handlers may patch".into());
        }
        out["patch"] = json!(p);
        out["patchType"] = json!("JSONPatch");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn patch_of(v: &Value) -> Value {
        let b = base64::engine::general_purpose::STANDARD.decode(v["patch"].as_str().unwrap()).unwrap();
        serde_json::from_slice(&b).unwrap()
    }

    #[test]
    fn mutated_object_becomes_a_json_patch() {
        let req = json!({ "object": { "metadata": { "name": "p" }, "spec": { "containers": [{ "name": "app" }] } } });
        let mut obj = req["object"].clone();
        obj["metadata"]["annotations"] = json!({ "a": "b" });
        let answer = serde_json::to_string(&AdmissionResponse::mutate(obj.clone())).unwrap();
        let out = finish(&req.to_string(), &answer, true).unwrap();
        assert_eq!(out["patchType"], "JSONPatch");
        let mut patched = req["object"].clone();
        json_patch::patch(&mut patched, &serde_json::from_value::<json_patch::Patch>(patch_of(&out)).unwrap()).unwrap();
        assert_eq!(patched, obj);
    }

    #[test]
    fn a_patch_built_by_the_plugin_passes_through_unparsed_object() {
        let obj = json!({ "metadata": { "name": "p" }, "spec": { "containers": [{ "name": "side" }] } });
        let answer = serde_json::to_string(&AdmissionResponse::patch_fields(&obj, &["/spec/containers"])).unwrap();
        // The request need not even be parseable as an object to diff: nothing is diffed.
        let out = finish("{}", &answer, true).unwrap();
        assert_eq!(out["patchType"], "JSONPatch");
        assert_eq!(patch_of(&out), json!([{ "op": "add", "path": "/spec/containers", "value": [{ "name": "side" }] }]));
        let bad =
            serde_json::to_string(&AdmissionResponse { patch: Some("e30=".into()), ..AdmissionResponse::allow() });
        assert!(
            finish("{}", &bad.unwrap(), true).unwrap_err().contains("not a JSONPatch"),
            "an empty object is no patch"
        );
        for (patch, why) in [
            (r#"[{"op":"frob","path":"/a"}]"#, "unknown op \"frob\""),
            (r#"[{"op":"add","path":"a","value":1}]"#, "not a JSON Pointer"),
            (r#"[{"op":"remove"}]"#, "missing field `path`"),
        ] {
            let p = base64::engine::general_purpose::STANDARD.encode(patch);
            let a = serde_json::to_string(&AdmissionResponse { patch: Some(p), ..AdmissionResponse::allow() });
            let e = finish("{}", &a.unwrap(), true).unwrap_err();
            assert!(e.contains("not a JSONPatch") && e.contains(why), "{patch}: {e}");
        }
    }

    #[test]
    fn the_review_carries_the_patch_as_finish_made_it() {
        let obj = json!({ "metadata": { "annotations": { "a": "\"quoted\"\n" } } });
        let answer = serde_json::to_string(&AdmissionResponse::patch_fields(&obj, &["/metadata"])).unwrap();
        for response in [finish("{}", &answer, true).unwrap(), deny(403, "Forbidden", "no \"x\"")] {
            let mut with_uid = response.clone();
            with_uid["uid"] = json!("u-1");
            let text = admission_review_text(with_uid.clone()).unwrap();
            let read: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(
                read,
                json!({ "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": with_uid })
            );
        }
    }

    #[test]
    fn unchanged_object_means_no_patch_and_validators_cannot_patch() {
        let req = json!({ "object": { "a": 1 } });
        let same = serde_json::to_string(&AdmissionResponse::mutate(json!({ "a": 1 }))).unwrap();
        let req = req.to_string();
        assert!(finish(&req, &same, true).unwrap().get("patch").is_none());
        let changed = serde_json::to_string(&AdmissionResponse::mutate(json!({ "a": 2 }))).unwrap();
        assert!(finish(&req, &changed, false).unwrap_err().contains("validating handler"));
    }

    #[test]
    fn a_review_must_be_of_a_kind_and_operation_its_handler_serves() {
        let h = Handler::mutating("inject-pod", wasmop_sdk::KindRef::new("v1", "Pod"), &[Operation::Create]);
        let head =
            |r: Value| -> Head<'static> { serde_json::from_str(Box::leak(r.to_string().into_boxed_str())).unwrap() };
        let pod = head(
            json!({"uid": "1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "CREATE", "namespace": "a"}),
        );
        assert_eq!(in_scope(&h, &pod).unwrap(), ("", "Pod", Reach::Namespace("a")));
        let secret =
            head(json!({"uid": "1", "kind": {"group": "", "version": "v1", "kind": "Secret"}, "operation": "CREATE"}));
        assert!(in_scope(&h, &secret).unwrap_err().contains("not /Secret"));
        let update =
            head(json!({"uid": "1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "UPDATE"}));
        assert!(in_scope(&h, &update).unwrap_err().contains("not Update"));
        let kindless = head(json!({"uid": "1", "operation": "CREATE"}));
        assert!(in_scope(&h, &kindless).is_err());
        // A cluster-scoped object lies in no namespace.
        let h = Handler::validating("ns", wasmop_sdk::KindRef::new("v1", "Namespace"), &[Operation::Create]);
        let ns = head(
            json!({"uid": "1", "kind": {"group": "", "version": "v1", "kind": "Namespace"}, "operation": "CREATE", "namespace": ""}),
        );
        assert_eq!(in_scope(&h, &ns).unwrap().2, Reach::Cluster);
    }

    #[test]
    fn denials_keep_the_message_and_get_a_code() {
        let answer = serde_json::to_string(&AdmissionResponse::deny("spec.selector: required")).unwrap();
        let out = finish("{}", &answer, false).unwrap();
        assert_eq!(out["allowed"], false);
        assert_eq!(out["status"]["message"], "spec.selector: required");
        assert_eq!(out["status"]["code"], 403);
        assert!(finish("{}", "{not json", true).unwrap_err().contains("malformed"));
    }
}
