//! `wasmop reconcile --expect FILE`: whether what a reconcile did contains what a test
//! expects, so a plugin's unit test on the in-memory cluster is one command in any
//! language.
//!
//! Containment, not equality: an expected mapping's keys must all be there with
//! contained values (others may be present: uids, timestamps); an expected list's
//! items must each be contained in a different item of the actual list, in any order;
//! scalars must be equal.

use serde_json::Value;

/// None when `actual` contains `expected`; else where and why not.
pub fn mismatch(actual: &Value, expected: &Value, path: &str) -> Option<String> {
    match (actual, expected) {
        (Value::Object(a), Value::Object(e)) => e.iter().find_map(|(k, ev)| match a.get(k) {
            Some(av) => mismatch(av, ev, &format!("{path}.{k}")),
            None => Some(format!("{path}.{k}: missing (expected {ev})")),
        }),
        (Value::Array(a), Value::Array(e)) => {
            let mut used = vec![false; a.len()];
            for (i, ev) in e.iter().enumerate() {
                let hit = a.iter().enumerate().find(|(j, av)| !used[*j] && mismatch(av, ev, "").is_none());
                match hit {
                    Some((j, _)) => used[j] = true,
                    None => return Some(format!("{path}[{i}]: no item contains {ev}")),
                }
            }
            None
        }
        (a, e) if a == e => None,
        (a, e) => Some(format!("{path}: is {a}, expected {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn containment_names_the_first_difference() {
        let actual = json!({"writes": [{"create": {"kind": "ConfigMap", "metadata": {"name": "b", "uid": "1"}}},
                                       {"update": {"kind": "Memcached"}}],
                            "result": {"ok": {"requeueAfterMs": null}}});
        assert_eq!(
            mismatch(&actual, &json!({"writes": [{"update": {}}, {"create": {"metadata": {"name": "b"}}}]}), ""),
            None
        );
        let m = mismatch(&actual, &json!({"writes": [{"create": {"metadata": {"name": "c"}}}]}), "").unwrap();
        assert!(m.starts_with(".writes[0]: no item contains"), "{m}");
        let m = mismatch(&actual, &json!({"result": {"error": {}}}), "").unwrap();
        assert!(m.starts_with(".result.error: missing"), "{m}");
        let m = mismatch(&actual, &json!({"writes": [{"update": {}}, {"update": {}}]}), "").unwrap();
        assert!(m.starts_with(".writes[1]"), "each expected item needs its own actual item: {m}");
        assert!(mismatch(&json!(1), &json!(2), "").unwrap().contains("is 1, expected 2"));
    }
}
