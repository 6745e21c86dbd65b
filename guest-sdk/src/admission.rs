//! Admission webhooks in a plugin: the [`Webhooks`] trait and the AdmissionReview v1
//! request and response, as the host hands them over.
//!
//! The host owns TLS, the AdmissionReview envelope and the uid. A mutating handler may
//! simply return the whole mutated object ([`Response::mutate`]) and the host diffs it
//! against the incoming one, or name the fields it changed
//! ([`Response::patch_fields`]) and skip that work on busy webhooks.

use crate::context::Context;
use crate::types::KindRef;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};

/// An operation a handler serves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Operation {
    #[default]
    Create,
    Update,
    Delete,
    Connect,
}

/// One admission handler: served at `/<plugin>/<name>` by the host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handler {
    pub name: String,
    /// True: mutating (runs first, may change the object); false: validating.
    pub mutating: bool,
    pub kinds: Vec<KindRef>,
    pub operations: Vec<Operation>,
}

impl Handler {
    pub fn mutating(name: &str, kind: KindRef, operations: &[Operation]) -> Self {
        Handler { name: name.into(), mutating: true, kinds: vec![kind], operations: operations.to_vec() }
    }

    pub fn validating(name: &str, kind: KindRef, operations: &[Operation]) -> Self {
        Handler { name: name.into(), mutating: false, kinds: vec![kind], operations: operations.to_vec() }
    }
}

/// Group, version and kind as AdmissionReview spells them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupVersionKind {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub kind: String,
}

/// Who asked.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserInfo {
    #[serde(default)]
    pub username: String,
    #[serde(default)]
    pub groups: Vec<String>,
}

/// AdmissionReview v1 `request`, with the objects as `O`: JSON trees by default, or
/// the type a handler reads (see [`Webhooks::review_text`]), as kube-rs's
/// `AdmissionRequest<T>` and controller-runtime's decoder give them.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", bound(serialize = "O: Serialize", deserialize = "O: Deserialize<'de>"))]
pub struct Request<O = serde_json::Value> {
    #[serde(default)]
    pub uid: String,
    /// The kind the handler was registered for (the object is in this version).
    #[serde(default)]
    pub kind: GroupVersionKind,
    /// The kind the client sent, when the apiserver converted it for the handler
    /// (`matchPolicy: Equivalent`; for example a CRD's other served version).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_kind: Option<GroupVersionKind>,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: Option<String>,
    pub operation: Operation,
    #[serde(default)]
    pub user_info: UserInfo,
    /// The object as it would be stored (None on DELETE).
    #[serde(default = "none")]
    pub object: Option<O>,
    /// The stored object (UPDATE and DELETE).
    #[serde(default = "none")]
    pub old_object: Option<O>,
    #[serde(default)]
    pub dry_run: bool,
}

// Not `#[serde(default)]`: that would ask `O: Default` of every object type.
fn none<O>() -> Option<O> {
    None
}

impl<O: serde::de::DeserializeOwned> Request<O> {
    /// A request from the JSON text the host hands a plugin, its objects parsed
    /// straight into `O`.
    pub fn from_text(text: &str) -> Result<Self, String> {
        serde_json::from_str(text).map_err(|e| format!("host sent a bad AdmissionRequest: {e}"))
    }
}

impl Request {
    /// This request with its objects as `T`: for a handler written against
    /// `Request<T>` when it is given a whole request (by [`Webhooks::review`], or a test).
    pub fn typed<T: serde::de::DeserializeOwned>(&self) -> Result<Request<T>, serde_json::Error> {
        Ok(Request {
            uid: self.uid.clone(),
            kind: self.kind.clone(),
            request_kind: self.request_kind.clone(),
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            operation: self.operation,
            user_info: self.user_info.clone(),
            object: self.object_as()?,
            old_object: self.old_object_as()?,
            dry_run: self.dry_run,
        })
    }

    /// `object` as `T`.
    pub fn object_as<T: serde::de::DeserializeOwned>(&self) -> Result<Option<T>, serde_json::Error> {
        self.object.as_ref().map(T::deserialize).transpose()
    }

    pub fn old_object_as<T: serde::de::DeserializeOwned>(&self) -> Result<Option<T>, serde_json::Error> {
        self.old_object.as_ref().map(T::deserialize).transpose()
    }
}

/// The status of a denial: what `kubectl` prints.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<u16>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// A handler's answer: AdmissionReview v1 `response` without `uid`, plus `object`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Response {
    pub allowed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
    /// A base64 JSONPatch, when the plugin computes the patch itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// wasmop's extension: the whole mutated object; the host turns it into a JSONPatch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<serde_json::Value>,
}

impl Response {
    pub fn allow() -> Self {
        Response { allowed: true, ..Default::default() }
    }

    /// A denial with HTTP code 403; `message` should name the field and the rule.
    pub fn deny(message: impl Into<String>) -> Self {
        Self::deny_with(403, "Forbidden", message)
    }

    /// A denial for an object that is malformed (HTTP 422, `Invalid`).
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::deny_with(422, "Invalid", message)
    }

    fn deny_with(code: u16, reason: &str, message: impl Into<String>) -> Self {
        Response {
            allowed: false,
            status: Some(Status { code: Some(code), message: message.into(), reason: reason.into() }),
            ..Default::default()
        }
    }

    /// Admits `object` as changed by the handler.
    pub fn mutate(object: serde_json::Value) -> Self {
        Response { allowed: true, object: Some(object), ..Default::default() }
    }

    /// Admits `object` as changed by the handler, sending only `fields` (JSON pointers
    /// such as `/spec/containers`), each replaced whole (`add` replaces an existing
    /// member); fields `object` lacks are left as they are, and their parents must
    /// exist in the incoming object. No field present: an unchanged admission.
    ///
    /// Why: [`Response::mutate`] ships the whole object back, and the host parses it
    /// and diffs it against the incoming one on every review; a handler that knows
    /// what it touched saves both. The patch is larger than a minimal diff; the
    /// apiserver applies either the same way.
    pub fn patch_fields(object: &serde_json::Value, fields: &[&str]) -> Self {
        // Borrowed, so the fields are written out once instead of cloned into a tree first.
        #[derive(Serialize)]
        struct Add<'a> {
            op: &'static str,
            path: &'a str,
            value: &'a serde_json::Value,
        }
        let ops: Vec<Add> =
            fields.iter().filter_map(|p| pointer(object, p).map(|value| Add { op: "add", path: p, value })).collect();
        let patch = (!ops.is_empty()).then(|| STANDARD.encode(serde_json::to_vec(&ops).unwrap_or_default()));
        Response { allowed: true, patch, ..Default::default() }
    }

    /// The object as the apiserver would store it after this answer: `original` with
    /// the returned object or patch applied. For unit tests of handlers.
    pub fn apply(&self, original: &serde_json::Value) -> Result<serde_json::Value, String> {
        if let Some(o) = &self.object {
            return Ok(o.clone());
        }
        let mut out = original.clone();
        if let Some(p) = &self.patch {
            let bytes = STANDARD.decode(p).map_err(|e| format!("`patch` is not base64: {e}"))?;
            let patch: json_patch::Patch =
                serde_json::from_slice(&bytes).map_err(|e| format!("`patch` is not a JSONPatch: {e}"))?;
            json_patch::patch(&mut out, &patch).map_err(|e| e.to_string())?;
        }
        Ok(out)
    }

    /// The answer as the JSON text the host reads, as `serde_json::to_string` writes it
    /// but with the patch last and copied as it is. Why: a patch is most of a mutating
    /// answer, and base64 needs no escaping, which serde_json checks a byte at a time
    /// (3 % of a SidecarSet Pod review); [`plain`] checks eight at a time. A patch that
    /// needs escaping is written escaped, so the text is always JSON.
    pub fn into_json(mut self) -> Result<String, String> {
        let patch = self.patch.take_if(|p| plain(p));
        let mut out = serde_json::to_string(&self).map_err(|e| e.to_string())?;
        if let Some(p) = patch {
            out.pop(); // the closing brace; `allowed` is always there before it
            out.reserve(p.len() + 12);
            out.push_str(",\"patch\":\"");
            out.push_str(&p);
            out.push_str("\"}");
        }
        Ok(out)
    }

    pub fn with_warning(mut self, warning: impl Into<String>) -> Self {
        self.warnings.push(warning.into());
        self
    }
}

/// Whether `s` goes into a JSON string as it is: no control character, quote or
/// backslash (UTF-8 beyond ASCII is written as it is, as serde_json does). Eight bytes
/// per step, with the zero-byte tests of "Bit Twiddling Hacks" (exact for these).
fn plain(s: &str) -> bool {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    let less_than_space = |x: u64| x.wrapping_sub(ONES * 0x20) & !x & HIGH != 0;
    let has = |x: u64, c: u8| {
        let y = x ^ (ONES * c as u64);
        y.wrapping_sub(ONES) & !y & HIGH != 0
    };
    let (words, rest) = s.as_bytes().as_chunks::<8>();
    words.iter().map(|w| u64::from_ne_bytes(*w)).all(|x| !(less_than_space(x) || has(x, b'"') || has(x, b'\\')))
        && rest.iter().all(|&b| b >= 0x20 && b != b'"' && b != b'\\')
}

/// `object.pointer(path)` without allocating: serde_json's unescapes every token into
/// a new String, which cost a review as much as writing the patch out.
fn pointer<'a>(object: &'a serde_json::Value, path: &str) -> Option<&'a serde_json::Value> {
    if path.is_empty() || path.contains('~') {
        return object.pointer(path);
    }
    let rest = path.strip_prefix('/')?;
    rest.split('/').try_fold(object, |v, token| match v {
        serde_json::Value::Object(m) => m.get(token),
        // As RFC 6901 (and serde_json) read an index: digits, no leading zero.
        serde_json::Value::Array(a) if token == "0" || !token.starts_with(['0', '+']) => {
            token.parse::<usize>().ok().and_then(|i| a.get(i))
        }
        _ => None,
    })
}

/// Admission handlers: the optional second trait a plugin implements.
///
/// A review runs with the plugin's cluster permissions (to look up the objects a
/// decision depends on) and under the host's admission deadline; it should read, not
/// write. Whatever it returns, a trap or a timeout becomes a denial naming the plugin.
pub trait Webhooks {
    /// Handlers served for the given settings.
    fn handlers(settings: &str) -> Vec<Handler>;

    /// Answers one review for the handler named `handler`.
    fn review(ctx: &Context<'_>, handler: &str, settings: &str, request: &Request) -> Response;

    /// Answers one review given as the JSON text the host sends (AdmissionReview v1
    /// `request`); an `Err` is a request this SDK cannot read, which the host denies.
    /// The default parses the whole request, its objects as JSON trees, and calls
    /// [`Webhooks::review`] ([`review_whole`]).
    ///
    /// Why override it: on a busy handler, most of a review's cost can be building the
    /// tree of an object the handler reads a few fields of, and dropping it again (a
    /// Pod with its managedFields, for a sidecar injector: BENCHMARKS.md, issue 23).
    /// Parse `Request::<T>::from_text(request)` with `T` naming only those fields, and
    /// serde skips the rest without building anything.
    fn review_text(ctx: &Context<'_>, handler: &str, settings: &str, request: &str) -> Result<Response, String> {
        review_whole::<Self>(ctx, handler, settings, request)
    }
}

/// What [`Webhooks::review_text`] does unless overridden: for an override to fall back
/// on for the handlers it does not specialise.
pub fn review_whole<W: Webhooks + ?Sized>(
    ctx: &Context<'_>,
    handler: &str,
    settings: &str,
    request: &str,
) -> Result<Response, String> {
    Ok(W::review(ctx, handler, settings, &Request::from_text(request)?))
}

/// For plugins without webhooks.
pub struct NoWebhooks;

impl Webhooks for NoWebhooks {
    fn handlers(_: &str) -> Vec<Handler> {
        Vec::new()
    }

    fn review(_: &Context<'_>, handler: &str, _: &str, _: &Request) -> Response {
        Response::deny(format!("this plugin serves no admission handler {handler:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pointer_reads_as_serde_json_does() {
        let v = json!({"a": {"b/c": [10, {"d~e": 1}], "": 2}, "f": [0, 1]});
        for p in ["", "/a", "/a/b~1c/1/d~0e", "/a/b~1c/0", "/a/", "/f/1", "/f/01", "/f/+1", "/f/2", "/x", "a", "/f/x"] {
            assert_eq!(pointer(&v, p), v.pointer(p), "{p}");
        }
    }

    /// What the host reads back is the answer the handler gave, whatever it holds: a
    /// patch copied as it is, one that is not base64 (escaped as any string), none.
    #[test]
    fn answers_read_back_as_given() {
        let patched = Response::patch_fields(&json!({"spec": {"a": "\"q\"\n"}}), &["/spec"]).with_warning("w\"");
        let odd = Response { patch: Some("not \"base64\"\n".into()), ..Response::allow() };
        let denied = Response::invalid("spec.x: \"bad\"");
        let whole = Response::mutate(json!({"a": [1, "b"]}));
        // Every ASCII byte at every place of a word and of the tail, beside UTF-8.
        for b in 0..128u8 {
            let base = "aé€bcdefghijklmn";
            for at in (0..=base.len()).filter(|&i| base.is_char_boundary(i)) {
                let mut s: Vec<u8> = base.bytes().collect();
                s.insert(at, b);
                let s = String::from_utf8(s).unwrap();
                let naive = s.bytes().all(|c| c >= 0x20 && c != b'"' && c != b'\\');
                assert_eq!(plain(&s), naive, "{s:?}");
            }
        }
        for r in [patched, odd, denied, whole, Response::allow()] {
            let text = r.clone().into_json().unwrap();
            assert_eq!(serde_json::from_str::<Response>(&text).unwrap(), r, "{text}");
        }
    }

    /// A handler typed for its objects sees the request it would see whole: every field
    /// carried over by `typed`, and `from_text` reading what the host sends.
    #[test]
    fn typed_requests_carry_every_field() {
        #[derive(Debug, PartialEq, Serialize, Deserialize)]
        struct Named {
            metadata: serde_json::Map<String, serde_json::Value>,
        }
        let text = json!({"uid": "u", "kind": {"version": "v1", "kind": "Pod"},
            "requestKind": {"group": "g", "version": "v2", "kind": "K"}, "name": "n", "namespace": "ns",
            "operation": "UPDATE", "userInfo": {"username": "me", "groups": ["a"]}, "dryRun": true,
            "object": {"metadata": {"name": "new"}, "spec": {"big": [1, 2, 3]}}, "oldObject": {"metadata": {"name": "old"}}})
        .to_string();
        let whole = Request::<serde_json::Value>::from_text(&text).unwrap();
        let typed = Request::<Named>::from_text(&text).unwrap();
        let strip = |v: serde_json::Value| json!({"metadata": v["metadata"]});
        let expected = json!({"object": strip(whole.object.clone().unwrap()), "oldObject": strip(whole.old_object.clone().unwrap())});
        let mut want = serde_json::to_value(&whole).unwrap();
        want.as_object_mut().unwrap().extend(expected.as_object().unwrap().clone());
        assert_eq!(serde_json::to_value(&typed).unwrap(), want, "parsed from text");
        assert_eq!(
            serde_json::to_value(whole.typed::<Named>().unwrap()).unwrap(),
            want,
            "converted from a whole request"
        );
        let e = Request::<Named>::from_text(r#"{"operation": "CREATE", "object": {"spec": {}}}"#).unwrap_err();
        assert!(e.contains("bad AdmissionRequest") && e.contains("metadata"), "{e}");
    }

    #[test]
    fn patch_fields_sends_only_fields_the_object_has_and_applies_back() {
        let before = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "app"}]}});
        let mut after = before.clone();
        after["metadata"]["annotations"] = json!({"a/b": "c"});
        after["spec"]["containers"] = json!([{"name": "side"}, {"name": "app"}]);
        let r = Response::patch_fields(&after, &["/metadata/annotations", "/spec/containers", "/spec/volumes"]);
        let ops: Vec<serde_json::Value> =
            serde_json::from_slice(&STANDARD.decode(r.patch.as_ref().unwrap()).unwrap()).unwrap();
        assert_eq!(ops.len(), 2, "no operation for a field the object lacks");
        assert_eq!(r.apply(&before).unwrap(), after);
        assert!(Response::patch_fields(&before, &["/spec/volumes"]).patch.is_none(), "nothing to send");
        let broken = Response { patch: Some("e30=".into()), ..Response::allow() };
        assert!(broken.apply(&before).unwrap_err().contains("not a JSONPatch"));
    }
}
