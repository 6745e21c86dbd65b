//! JSONPatches for mutating admission handlers: built in the plugin from the fields it
//! changed, and applied back for unit tests.
//!
//! Why a plugin would build the patch itself: [`crate::AdmissionResponse::mutate`]
//! ships the whole mutated object back and the host diffs it against the incoming one,
//! which costs a serialisation in the plugin and a parse and a tree diff in the host
//! for every review. A handler that knows which fields it touched names them
//! ([`crate::AdmissionResponse::patch_fields`]) and the host only checks the patch.
//!
//! Caveat: a field is replaced whole (`add`, which replaces an existing member), so the
//! patch is larger than a minimal diff; the apiserver applies either the same way.

use serde_json::{Value, json};

/// `add` operations setting each pointer in `fields` to its value in `object`;
/// pointers that `object` lacks are left out.
pub fn set_fields(object: &Value, fields: &[&str]) -> Vec<Value> {
    fields.iter().filter_map(|p| object.pointer(p).map(|v| json!({ "op": "add", "path": p, "value": v }))).collect()
}

/// Applies a JSONPatch's `add`, `replace` and `remove` operations to `object`.
pub fn apply(object: &mut Value, patch: &[Value]) -> Result<(), String> {
    for op in patch {
        let path = op["path"].as_str().ok_or("a patch operation without a path")?;
        let (parent, last) = path.rsplit_once('/').ok_or_else(|| format!("bad path {path:?}"))?;
        let last = last.replace("~1", "/").replace("~0", "~");
        let target = object.pointer_mut(parent).ok_or_else(|| format!("{path}: no parent {parent:?}"))?;
        match (op["op"].as_str(), target) {
            (Some("add" | "replace"), Value::Object(m)) => {
                m.insert(last, op["value"].clone());
            }
            (Some("remove"), Value::Object(m)) => {
                m.remove(&last).ok_or_else(|| format!("{path}: nothing to remove"))?;
            }
            (Some(o @ ("add" | "replace" | "remove")), Value::Array(a)) => {
                let i = if last == "-" { a.len() } else { last.parse().map_err(|_| format!("bad index in {path}"))? };
                match o {
                    "add" if i <= a.len() => a.insert(i, op["value"].clone()),
                    "replace" if i < a.len() => a[i] = op["value"].clone(),
                    "remove" if i < a.len() => drop(a.remove(i)),
                    _ => return Err(format!("{path}: index out of range")),
                }
            }
            (o, _) => return Err(format!("{path}: cannot apply {o:?} here")),
        }
    }
    Ok(())
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding, as AdmissionReview's `patch` is encoded.
pub fn base64(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | (*b as u32) << (16 - 8 * i));
        for i in 0..4 {
            out.push(if i <= chunk.len() { ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char } else { '=' });
        }
    }
    out
}

/// The inverse of [`base64`].
pub fn unbase64(text: &str) -> Result<Vec<u8>, String> {
    let text = text.trim_end_matches('=');
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut n, mut bits) = (0u32, 0);
    for c in text.bytes() {
        let v = ALPHABET.iter().position(|a| *a == c).ok_or_else(|| format!("{:?} is not base64", c as char))?;
        n = n << 6 | v as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((n >> bits) as u8);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips_every_length() {
        assert_eq!(base64(b"Man"), "TWFu");
        assert_eq!(base64(b"Ma"), "TWE=");
        assert_eq!(base64(b"M"), "TQ==");
        for n in 0..20 {
            let b: Vec<u8> = (0..n).map(|i| (i * 37 + 250) as u8).collect();
            assert_eq!(unbase64(&base64(&b)).unwrap(), b);
        }
        assert!(unbase64("a*b=").is_err());
    }

    #[test]
    fn set_fields_patches_only_what_exists_and_applies_back() {
        let before = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "app"}]}});
        let mut after = before.clone();
        after["metadata"]["annotations"] = json!({"a/b": "c"});
        after["spec"]["containers"] = json!([{"name": "side"}, {"name": "app"}]);
        let patch = set_fields(&after, &["/metadata/annotations", "/spec/containers", "/spec/volumes"]);
        assert_eq!(patch.len(), 2, "no operation for a field the object lacks");
        let mut applied = before.clone();
        apply(&mut applied, &patch).unwrap();
        assert_eq!(applied, after);
    }

    #[test]
    fn apply_handles_arrays_escapes_and_errors() {
        let mut v = json!({"a": [1, 2], "m": {"x/y": 1}});
        let ops = [
            json!({"op": "add", "path": "/a/-", "value": 3}),
            json!({"op": "remove", "path": "/a/0"}),
            json!({"op": "replace", "path": "/m/x~1y", "value": 2}),
        ];
        apply(&mut v, &ops).unwrap();
        assert_eq!(v, json!({"a": [2, 3], "m": {"x/y": 2}}));
        assert!(apply(&mut v, &[json!({"op": "add", "path": "/no/such", "value": 1})]).is_err());
        assert!(apply(&mut v, &[json!({"op": "remove", "path": "/a/9"})]).is_err());
    }
}
