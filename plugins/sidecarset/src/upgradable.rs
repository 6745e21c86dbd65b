//! The Pod condition `SidecarSetUpgradable`, as Kruise keeps it: whether every
//! SidecarSet that rolls a Pod can still update it in place.
//!
//! Why: an in-place update can change only a container's image. When a set changes
//! anything else of its sidecars (the hash without images differs), its Pods can no
//! longer be rolled, only recreated; the condition says so on the Pod (status False,
//! reason `UpdateImmutableField`), and a Pod this controller did update says True
//! (`AllSidecarsetUpgradable`) once every set that recorded itself agrees. Tools built
//! for Kruise (and its e2e suites) read it.
//!
//! Format, as Kruise's: the message is a JSON object of set name to upgradable; the
//! transition time moves only when the status does. Written only when it changes, so
//! a Pod already marked costs no request on later rollouts.

use serde_json::{Map, Value, json};
use wasmop_sdk::{Context, Error, ObjectRef};

pub const CONDITION: &str = "SidecarSetUpgradable";

/// `pod` with `set`'s entry in its condition set to `upgradable`, or None when the
/// condition would not change. `now`: the transition time if the status flips.
pub fn marked(pod: &Value, set: &str, upgradable: bool, now: &Value) -> Option<Value> {
    let conditions = pod["status"]["conditions"].as_array().map_or(&[][..], Vec::as_slice);
    let at = conditions.iter().position(|c| c["type"] == CONDITION);
    let old = at.map(|i| &conditions[i]);
    let mut kv: Map<String, Value> = old
        .and_then(|c| c["message"].as_str())
        .filter(|m| !m.is_empty())
        .and_then(|m| serde_json::from_str(m).ok())
        .unwrap_or_default();
    kv.insert(set.to_owned(), json!(upgradable));
    let all = kv.values().all(|v| v != &json!(false));
    let (status, reason) = if all { ("True", "AllSidecarsetUpgradable") } else { ("False", "UpdateImmutableField") };
    let mut c = old.cloned().unwrap_or_else(|| json!({"type": CONDITION}));
    let flips = c["status"] != status;
    c["status"] = json!(status);
    c["reason"] = json!(reason);
    c["message"] = json!(Value::Object(kv).to_string());
    if flips {
        c["lastTransitionTime"] = now.clone();
    }
    if old == Some(&c) {
        return None;
    }
    let mut next = pod.clone();
    let list = next["status"]["conditions"].as_array_mut();
    match (list, at) {
        (Some(list), Some(i)) => list[i] = c,
        (Some(list), None) => list.push(c),
        (None, _) => next["status"]["conditions"] = json!([c]),
    }
    Some(next)
}

/// Records `set`'s entry on Pod `pod` (as last read) in its status. Returns the Pod as
/// written, or None when the condition already said so. A conflict (the kubelet
/// reported status meanwhile) re-reads the Pod and tries again, a few times.
pub fn mark(ctx: &Context<'_>, pod: &Value, set: &str, upgradable: bool, now: &Value) -> Result<Option<Value>, Error> {
    let mut pod = std::borrow::Cow::Borrowed(pod);
    for _ in 0..3 {
        let Some(next) = marked(&pod, set, upgradable, now) else { return Ok(None) };
        match ctx.update_status(&next) {
            Ok(written) => return Ok(Some(written)),
            Err(e) if e.is_conflict() => {
                let Some(at) = ObjectRef::of_json(&pod) else { return Err(e) };
                pod = std::borrow::Cow::Owned(ctx.get_live(&at)?);
            }
            Err(e) => return Err(e),
        }
    }
    Err(Error::Conflict(format!("Pod condition {CONDITION}: still conflicting after 3 tries")))
}

/// The current time as a Kubernetes timestamp.
pub fn now() -> Value {
    serde_json::to_value(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()))
        .unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_entry_per_set_and_written_only_on_change() {
        let t0 = json!("2026-01-01T00:00:00Z");
        let t1 = json!("2026-01-02T00:00:00Z");
        let pod = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
        let p = marked(&pod, "a", true, &t0).expect("new condition");
        let c = &p["status"]["conditions"][1];
        assert_eq!(
            (&c["status"], &c["reason"], &c["message"]),
            (&json!("True"), &json!("AllSidecarsetUpgradable"), &json!(r#"{"a":true}"#))
        );
        assert_eq!(c["lastTransitionTime"], t0);
        assert!(marked(&p, "a", true, &t1).is_none(), "unchanged: no write");
        // Another set cannot update the Pod in place: False, and its time moves.
        let p = marked(&p, "b", false, &t1).expect("changed");
        let c = &p["status"]["conditions"][1];
        assert_eq!((&c["status"], &c["reason"]), (&json!("False"), &json!("UpdateImmutableField")));
        assert_eq!(c["message"], json!(r#"{"a":true,"b":false}"#));
        assert_eq!(c["lastTransitionTime"], t1);
        // Same status, new entry: the transition time stays.
        let p = marked(&p, "c", true, &json!("2026-01-03T00:00:00Z")).expect("changed");
        assert_eq!(p["status"]["conditions"][1]["lastTransitionTime"], t1);
        assert_eq!(p["status"]["conditions"][0]["type"], "Ready", "other conditions kept");
    }
}
