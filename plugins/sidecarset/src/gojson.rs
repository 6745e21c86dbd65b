//! Kruise's SidecarSet hashes, byte for byte: `kruise.io/sidecarset-hash` and
//! `-hash-without-image` as Kruise's `SidecarSetHashV1beta1` computes them, so that Pods
//! injected by Kruise are recognised, and rolled, after a move to this plugin (and
//! Pods injected here, by Kruise).
//!
//! Kruise hashes Go's `json.Marshal` of its typed containers, which is not the JSON
//! the apiserver stores: Go writes struct fields in declaration order, leaves out
//! `omitempty` zero values but writes every other field (a missing non-pointer struct
//! as `{}`, a quantity as `"0"`), prints quantities canonically, and escapes `<`, `>`
//! and `&`. [`encode`] replays that on the stored JSON from the field layout in
//! `go_layout` (generated from Kruise's Go types by
//! `testdata/kruise-hash`; its `hashes` mode made the test vectors in
//! `tests/kruise_hash.rs`).
//!
//! The hash: `SafeEncodeString(hex(sha256(json)))` of `{"containers": [...]}`, plus
//! `"initContainers"` (all of them) when one of them is a native sidecar.

use crate::go_layout::SIDECARCONTAINER;
use crate::quantity::Quantity;
use crate::types::SidecarSetSpec;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::fmt::Write as _;

#[derive(Clone, Copy)]
pub enum Kind {
    Str,
    Bool,
    Int,
    Quantity,
    IntOrString,
    Ptr(&'static Kind),
    List(&'static Kind),
    Map(&'static Kind),
    Struct(&'static [Field]),
}

#[derive(Clone, Copy)]
pub struct Field {
    name: &'static str,
    omitempty: bool,
    kind: Kind,
}

pub const fn f(name: &'static str, omitempty: bool, kind: Kind) -> Field {
    Field { name, omitempty, kind }
}

/// Go's `isEmptyValue` for a field stored as `v` (absent: Null). Structs (quantities
/// and IntOrStrings too) are never empty.
fn empty(kind: Kind, v: &Value) -> bool {
    match kind {
        Kind::Struct(_) | Kind::Quantity | Kind::IntOrString => false,
        Kind::Str => v.as_str().is_none_or(str::is_empty),
        Kind::Bool => v.as_bool() != Some(true),
        Kind::Int => v.as_i64().is_none_or(|n| n == 0),
        Kind::Ptr(_) => v.is_null(),
        Kind::List(_) => v.as_array().is_none_or(Vec::is_empty),
        Kind::Map(_) => v.as_object().is_none_or(|m| m.is_empty()),
    }
}

/// Go's string encoding (HTML-safe, as `json.Marshal`).
pub(crate) fn string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `v` as Go would marshal a value of `kind` that was decoded from it.
pub fn encode(out: &mut String, kind: Kind, v: &Value) {
    match kind {
        Kind::Str => string(out, v.as_str().unwrap_or("")),
        Kind::Bool => out.push_str(if v.as_bool() == Some(true) { "true" } else { "false" }),
        Kind::Int => {
            let _ = write!(out, "{}", v.as_i64().unwrap_or(0));
        }
        Kind::Quantity => {
            let s = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
            let q =
                if v.is_null() { Quantity::zero() } else { Quantity::parse(&s).unwrap_or_else(|_| Quantity::zero()) };
            string(out, &q.to_string());
        }
        Kind::IntOrString => match v {
            Value::String(s) => string(out, s),
            v => {
                let _ = write!(out, "{}", v.as_i64().unwrap_or(0));
            }
        },
        Kind::Ptr(k) => {
            if v.is_null() {
                out.push_str("null");
            } else {
                encode(out, *k, v);
            }
        }
        Kind::List(k) => match v.as_array() {
            None => out.push_str("null"),
            Some(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    encode(out, *k, item);
                }
                out.push(']');
            }
        },
        Kind::Map(k) => match v.as_object() {
            None => out.push_str("null"),
            Some(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                out.push('{');
                for (i, key) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    string(out, key);
                    out.push(':');
                    encode(out, *k, &m[key]);
                }
                out.push('}');
            }
        },
        Kind::Struct(fields) => {
            out.push('{');
            let mut first = true;
            for fd in fields {
                let value = &v[fd.name];
                if fd.omitempty && empty(fd.kind, value) {
                    continue;
                }
                if !first {
                    out.push(',');
                }
                first = false;
                string(out, fd.name);
                out.push(':');
                encode(out, fd.kind, value);
            }
            out.push('}');
        }
    }
}

/// Kruise's `encodeSidecarSetV1beta1` of `spec` (images blanked when `without_image`).
pub fn encode_spec(spec: &SidecarSetSpec, without_image: bool) -> String {
    let list = |cs: &[crate::types::SidecarContainer]| {
        let mut v = serde_json::to_value(cs).unwrap_or(Value::Null);
        if without_image {
            for c in v.as_array_mut().into_iter().flatten() {
                c["image"] = Value::Null;
            }
        }
        if cs.is_empty() { Value::Null } else { v }
    };
    const ITEM: Kind = Kind::Struct(SIDECARCONTAINER);
    let mut out = String::from("{\"containers\":");
    encode(&mut out, Kind::List(&ITEM), &list(&spec.containers));
    if spec.init_containers.iter().any(|c| c.container.restart_policy.as_deref() == Some("Always")) {
        out.push_str(",\"initContainers\":");
        encode(&mut out, Kind::List(&ITEM), &list(&spec.init_containers));
    }
    out.push('}');
    out
}

/// Kubernetes' `rand.SafeEncodeString`: each byte mapped onto consonants and digits
/// (no vowels, so no words).
pub(crate) fn safe_encode(s: &str) -> String {
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    s.bytes().map(|b| ALPHANUMS[b as usize % ALPHANUMS.len()] as char).collect()
}

fn hash(data: &str) -> String {
    let hex: String = Sha256::digest(data.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    safe_encode(&hex)
}

/// (hash, hash without images), as Kruise.
pub fn kruise_hashes(spec: &SidecarSetSpec) -> (String, String) {
    (hash(&encode_spec(spec, false)), hash(&encode_spec(spec, true)))
}
