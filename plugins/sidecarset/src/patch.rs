//! `patchPodMetadata`: the annotations a SidecarSet writes into the Pods it selects, at
//! injection and again at each in-place update (Kruise's `PatchPodMetadata`).
//!
//! Policies, as Kruise's: `Retain` (the default) sets a key the Pod does not have;
//! `Overwrite` sets it; `MergePatchJson` applies the value as a JSON merge patch
//! (RFC 7386) to the Pod's value, or sets it as it is when the Pod has none. A Pod value
//! or a patch that is not JSON is an error naming the annotation (Kruise refuses the
//! Pod then too).

use crate::types::SidecarSetPatchPodMetadata;
use serde_json::{Map, Value};

/// Applies `patches` to a Pod's `annotations`.
pub fn apply(annotations: &mut Map<String, Value>, patches: &[SidecarSetPatchPodMetadata]) -> Result<(), String> {
    for p in patches {
        for (k, v) in &p.annotations {
            match p.patch_policy.as_deref().unwrap_or("Retain") {
                "Overwrite" => {
                    annotations.insert(k.clone(), Value::String(v.clone()));
                }
                "MergePatchJson" => {
                    let merged = match annotations.get(k).and_then(Value::as_str).filter(|s| !s.is_empty()) {
                        Some(origin) => merged(origin, v).map_err(|e| format!("annotation {k:?}: {e}"))?,
                        None => v.clone(),
                    };
                    annotations.insert(k.clone(), Value::String(merged));
                }
                _ => {
                    annotations.entry(k.clone()).or_insert_with(|| Value::String(v.clone()));
                }
            }
        }
    }
    Ok(())
}

/// `patch` merged into `origin`, both JSON texts, as compact JSON with sorted keys.
fn merged(origin: &str, patch: &str) -> Result<String, String> {
    let mut doc: Value = serde_json::from_str(origin)
        .map_err(|e| format!("the Pod's value is not JSON ({e}), cannot merge-patch it"))?;
    let patch: Value = serde_json::from_str(patch).map_err(|e| format!("the patch is not JSON ({e})"))?;
    merge(&mut doc, &patch);
    Ok(doc.to_string())
}

/// RFC 7386: an object patch merges key by key, `null` removes a key; anything else
/// replaces the target.
fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(t) = target else { return };
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
        } else {
            merge(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn patch(policy: &str, k: &str, v: &str) -> SidecarSetPatchPodMetadata {
        SidecarSetPatchPodMetadata {
            annotations: [(k.to_owned(), v.to_owned())].into(),
            patch_policy: Some(policy.to_owned()),
        }
    }

    #[test]
    fn policies_as_kruise() {
        let mut a = Map::new();
        a.insert("kept".into(), json!("pod"));
        a.insert("over".into(), json!("pod"));
        a.insert("cfg".into(), json!(r#"{"a":{"x":1,"y":2},"b":1,"gone":true}"#));
        apply(
            &mut a,
            &[
                patch("Retain", "kept", "set"),
                patch("Retain", "new", "set"),
                patch("Overwrite", "over", "set"),
                patch("MergePatchJson", "cfg", r#"{"a":{"y":3,"z":4},"gone":null}"#),
                patch("MergePatchJson", "fresh", r#"{ "as": "is" }"#),
            ],
        )
        .unwrap();
        assert_eq!((&a["kept"], &a["new"], &a["over"]), (&json!("pod"), &json!("set"), &json!("set")));
        // RFC 7386, deep: nested keys merge, null removes (one level deep kept {"y":3,"z":4}
        // in place of the whole `a` and left `gone`).
        assert_eq!(a["cfg"], json!(r#"{"a":{"x":1,"y":3,"z":4},"b":1}"#));
        assert_eq!(a["fresh"], json!(r#"{ "as": "is" }"#), "no Pod value: the patch as written");
    }

    #[test]
    fn a_value_that_is_not_json_is_an_error_naming_the_annotation() {
        let mut a = Map::new();
        a.insert("cfg".into(), json!("not json"));
        let e = apply(&mut a, &[patch("MergePatchJson", "cfg", r#"{"a":1}"#)]).unwrap_err();
        assert!(e.contains("\"cfg\"") && e.contains("not JSON"), "{e}");
    }
}
