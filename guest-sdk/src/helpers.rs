//! Helpers for the chores every reconciler repeats: owner references, finalizers,
//! status conditions and label selectors.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, OwnerReference, Time};
use std::collections::BTreeMap;

/// A controller ownerReference to `owner`: the dependent is garbage-collected with it,
/// and the host maps the dependent's changes back to it.
pub fn controller_ref<T: kube::core::Resource<DynamicType = ()>>(owner: &T) -> Option<OwnerReference> {
    let meta = owner.meta();
    Some(OwnerReference {
        api_version: T::api_version(&()).into_owned(),
        kind: T::kind(&()).into_owned(),
        name: meta.name.clone()?,
        uid: meta.uid.clone()?,
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

/// True when `meta` carries a controller ownerReference to the object with `uid`.
pub fn is_controlled_by(meta: &ObjectMeta, uid: &str) -> bool {
    meta.owner_references.iter().flatten().any(|r| r.controller == Some(true) && r.uid == uid)
}

pub fn has_finalizer(meta: &ObjectMeta, finalizer: &str) -> bool {
    meta.finalizers.iter().flatten().any(|f| f == finalizer)
}

/// Adds `finalizer`; false when it was already there.
pub fn add_finalizer(meta: &mut ObjectMeta, finalizer: &str) -> bool {
    if has_finalizer(meta, finalizer) {
        return false;
    }
    meta.finalizers.get_or_insert_with(Vec::new).push(finalizer.to_owned());
    true
}

/// Removes `finalizer`; false when it was not there.
pub fn remove_finalizer(meta: &mut ObjectMeta, finalizer: &str) -> bool {
    let Some(list) = meta.finalizers.as_mut() else { return false };
    let before = list.len();
    list.retain(|f| f != finalizer);
    before != list.len()
}

/// Sets a condition the way `meta.SetStatusCondition` does: lastTransitionTime moves only
/// when the status changes; reason, message and observedGeneration are always updated.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    observed_generation: Option<i64>,
) {
    let status = if status { "True" } else { "False" }.to_owned();
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != status {
                c.status = status;
                c.last_transition_time = now();
            }
            c.reason = reason.to_owned();
            c.message = message.to_owned();
            c.observed_generation = observed_generation;
        }
        None => conditions.push(Condition {
            type_: type_.to_owned(),
            status,
            reason: reason.to_owned(),
            message: message.to_owned(),
            observed_generation,
            last_transition_time: now(),
        }),
    }
}

/// Finds a condition by type.
pub fn condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Conditions equal but for lastTransitionTime: for "write status only when it changed".
pub fn conditions_equivalent(a: &[Condition], b: &[Condition]) -> bool {
    a.len() == b.len()
        && a.iter().all(|x| {
            condition(b, &x.type_).is_some_and(|y| {
                x.status == y.status
                    && x.reason == y.reason
                    && x.message == y.message
                    && x.observed_generation == y.observed_generation
            })
        })
}

/// The current time, second precision (as the apiserver stores it).
pub fn now() -> Time {
    let now = k8s_openapi::jiff::Timestamp::now();
    Time(k8s_openapi::jiff::Timestamp::from_second(now.as_second()).unwrap_or(now))
}

/// A top-level scalar of a flat `key: value` settings document (YAML or JSON-ish), with
/// quotes removed; None when absent or empty. Plugins that need nested settings can
/// parse the document themselves; this keeps the common case free of a YAML parser
/// (which would add ~100 KiB to the plugin).
pub fn setting<'a>(settings: &'a str, key: &str) -> Option<&'a str> {
    settings.lines().find_map(|line| {
        let line = line.trim().trim_start_matches(['{', ',']).trim();
        let rest = line.strip_prefix(key).or_else(|| line.strip_prefix(&format!("\"{key}\"")))?;
        let value = rest.trim_start().strip_prefix(':')?.trim().trim_end_matches([',', '}']).trim();
        let value = value.trim_matches('"').trim_matches('\'');
        (!value.is_empty()).then_some(value)
    })
}

/// An equality- and set-based label selector (`a=b,c!=d,e,!f,g in (x,y),h notin (z)`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut requirements = Vec::new();
        for part in split_top_level(s) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let req = if let Some(k) = part.strip_prefix('!') {
                Requirement::NotExists(k.trim().to_owned())
            } else if let Some((k, v)) = part.split_once("!=") {
                Requirement::NotIn(k.trim().to_owned(), vec![v.trim().to_owned()])
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                Requirement::In(k.trim().to_owned(), vec![v.trim().to_owned()])
            } else if let Some((k, set)) = part.split_once(" notin ") {
                Requirement::NotIn(k.trim().to_owned(), parse_set(set)?)
            } else if let Some((k, set)) = part.split_once(" in ") {
                Requirement::In(k.trim().to_owned(), parse_set(set)?)
            } else {
                Requirement::Exists(part.to_owned())
            };
            requirements.push(req);
        }
        Ok(LabelSelector { requirements })
    }

    /// From `matchLabels` alone.
    pub fn from_labels(labels: &BTreeMap<String, String>) -> Self {
        LabelSelector {
            requirements: labels.iter().map(|(k, v)| Requirement::In(k.clone(), vec![v.clone()])).collect(),
        }
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| match r {
            Requirement::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::NotExists(k) => !labels.contains_key(k),
        })
    }

    /// [`LabelSelector::matches`] on `metadata.labels` as JSON, read in place: a host
    /// matches every cached object of a kind against a list's selector, so no copy.
    pub fn matches_json(&self, labels: Option<&serde_json::Value>) -> bool {
        let labels = labels.and_then(serde_json::Value::as_object);
        let get = |k: &str| labels.and_then(|m| m.get(k)).and_then(serde_json::Value::as_str);
        let one_of = |vs: &[String], v: &str| vs.iter().any(|x| x == v);
        self.requirements.iter().all(|r| match r {
            Requirement::In(k, vs) => get(k).is_some_and(|v| one_of(vs, v)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|v| !one_of(vs, v)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
        })
    }
}

fn parse_set(s: &str) -> Result<Vec<String>, String> {
    let inner = s
        .trim()
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| format!("label selector set {s:?} must be in parentheses"))?;
    Ok(inner.split(',').map(|v| v.trim().to_owned()).filter(|v| !v.is_empty()).collect())
}

/// Splits on commas outside parentheses.
fn split_top_level(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn selector_forms() {
        let l = labels(&[("app", "memcached"), ("tier", "cache")]);
        assert!(LabelSelector::parse("app=memcached").unwrap().matches(&l));
        assert!(LabelSelector::parse("app==memcached,tier").unwrap().matches(&l));
        assert!(!LabelSelector::parse("app!=memcached").unwrap().matches(&l));
        assert!(LabelSelector::parse("!missing,app in (a, memcached)").unwrap().matches(&l));
        assert!(!LabelSelector::parse("tier notin (cache,db)").unwrap().matches(&l));
        assert!(LabelSelector::parse("").unwrap().matches(&l));
        assert!(LabelSelector::parse("app in a,b").is_err());
        // The same on labels as JSON, read in place.
        let j = serde_json::json!({"app": "memcached", "tier": "cache"});
        for (sel, want) in [
            ("app=memcached", true),
            ("app==memcached,tier", true),
            ("app!=memcached", false),
            ("!missing,app in (a, memcached)", true),
            ("tier notin (cache,db)", false),
            ("", true),
            ("missing", false),
        ] {
            assert_eq!(LabelSelector::parse(sel).unwrap().matches_json(Some(&j)), want, "{sel}");
        }
        assert!(LabelSelector::parse("!app").unwrap().matches_json(None), "no labels at all");
        assert!(!LabelSelector::parse("app").unwrap().matches_json(None));
    }

    #[test]
    fn condition_transition_time_moves_only_on_status_change() {
        let mut conds = Vec::new();
        set_condition(&mut conds, "Available", false, "Scaling", "0/3", Some(1));
        let first = conds[0].last_transition_time.clone();
        conds[0].last_transition_time = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        set_condition(&mut conds, "Available", false, "Scaling", "1/3", Some(2));
        assert_eq!(conds[0].last_transition_time.0, k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        assert_eq!(conds[0].message, "1/3");
        set_condition(&mut conds, "Available", true, "Ready", "3/3", Some(2));
        assert_ne!(conds[0].last_transition_time.0, k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        assert!(first.0 > k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    }

    #[test]
    fn flat_settings() {
        let s = "namespace: team-a\ndefaultImage: \"memcached:1.6\"\n";
        assert_eq!(setting(s, "namespace"), Some("team-a"));
        assert_eq!(setting(s, "defaultImage"), Some("memcached:1.6"));
        assert_eq!(setting(s, "missing"), None);
        assert_eq!(setting("{\"namespace\": \"x\"}", "namespace"), Some("x"));
        assert_eq!(setting("namespaces: a", "namespace"), None);
        assert_eq!(setting("", "namespace"), None);
    }

    #[test]
    fn finalizers_add_and_remove_once() {
        let mut m = ObjectMeta::default();
        assert!(add_finalizer(&mut m, "x/f"));
        assert!(!add_finalizer(&mut m, "x/f"));
        assert!(has_finalizer(&m, "x/f"));
        assert!(remove_finalizer(&mut m, "x/f"));
        assert!(!remove_finalizer(&mut m, "x/f"));
    }
}
