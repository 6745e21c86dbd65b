//! Kruise's own tables (`pkg/util/updatesort/*_test.go`), ported.

use super::*;
use crate::types::{UpdatePriorityOrderTerm, UpdatePriorityWeightTerm};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::json;

fn pod(i: usize, labels: Value) -> Value {
    json!({"metadata": {"namespace": "default", "name": i.to_string(), "labels": labels}})
}

/// "labelA=AAA,labelB=BBB" → labels; anything without '=' is no label.
fn parse(s: &str) -> Value {
    let mut m = serde_json::Map::new();
    for kv in s.split(',') {
        if let Some((k, v)) = kv.split_once('=') {
            m.insert(k.into(), json!(v));
        }
    }
    Value::Object(m)
}

fn names(pods: &[&Value]) -> Vec<usize> {
    pods.iter().map(|p| p["metadata"]["name"].as_str().unwrap().parse().unwrap()).collect()
}

#[test]
fn scatter_pods_by_rule_as_kruise() {
    let cases: &[(&[&str], &[usize])] = &[
        (&[""], &[0]),
        (&["labelA=AAA"], &[0]),
        (&["labelA=AAA", "bbb"], &[0, 1]),
        (&["", "", "", "", "labelA=AAA", "labelA=AAA"], &[4, 0, 1, 2, 3, 5]),
        (&["", "", "", "labelA=AAA", "labelA=AAA", "labelA=AAA"], &[3, 0, 1, 4, 2, 5]),
        (&["", "", "", "labelA=AAA", "", "", "labelA=AAA"], &[3, 0, 1, 2, 4, 5, 6]),
        (&["", "", "", "", "", "", "labelA=AAA", "labelA=AAA", "labelA=AAA"], &[6, 0, 1, 2, 7, 3, 4, 5, 8]),
        (&["", "", "labelA=AAA", "labelA=AAA", "labelA=AAA", "labelA=AAA"], &[2, 3, 0, 4, 1, 5]),
        (&["", "", "", "labelA=AAA", "labelA=AAA", "labelA=AAA"], &[3, 0, 1, 4, 2, 5]),
        (
            &["", "", "labelA=AAA", "", "labelA=AAA", "labelA=AAA", "labelA=AAA", "labelA=AAA", "labelA=AAA"],
            &[2, 4, 0, 5, 6, 1, 7, 3, 8],
        ),
        (
            &["", "labelA=AAA", "", "labelA=AAA", "", "", "labelA=AAA", "labelA=AAA", "labelA=AAA"],
            &[1, 0, 3, 2, 6, 4, 7, 5, 8],
        ),
        (
            &["", "", "", "", "ee", "a", "", "labelA=AAA", "labelA=AAA", "labelA=AAA,labelB=BBB"],
            &[7, 0, 1, 2, 3, 8, 4, 5, 6, 9],
        ),
    ];
    for (labels, want) in cases {
        let pods: Vec<Value> = labels.iter().enumerate().map(|(i, l)| pod(i, parse(l))).collect();
        let all: Vec<&Value> = pods.iter().collect();
        let got = spread("labelA", "AAA", all.clone(), &all);
        assert_eq!(names(&got), *want, "labels {labels:?}");
    }
}

#[test]
fn scatter_sort_with_several_terms_as_kruise() {
    let a = ("labelA", "AAA");
    let b = ("labelB", "BBB");
    type Case<'a> = (Vec<Value>, Vec<(&'a str, &'a str)>, Vec<usize>);
    let cases: Vec<Case> = vec![
        (vec![json!({"labelA": "AAA", "labelB": "BBB"})], vec![a], vec![0]),
        (vec![json!({}); 6], vec![], vec![0, 1, 2, 3, 4, 5]),
        (
            vec![json!({}), json!({}), json!({}), json!({}), json!({"labelA": "AAA"}), json!({"labelA": "AAA"})],
            vec![a],
            vec![4, 0, 1, 2, 3, 5],
        ),
        (
            vec![
                json!({}),
                json!({}),
                json!({}),
                json!({}),
                json!({"sdfb": "eee"}),
                json!({"dsf": "same"}),
                json!({"labelB": "BBB"}),
                json!({"labelA": "AAA"}),
                json!({"labelA": "AAA"}),
                json!({"labelA": "AAA", "labelB": "BBB"}),
            ],
            vec![b],
            vec![6, 0, 1, 2, 3, 4, 5, 7, 8, 9],
        ),
        (
            vec![
                json!({"labelB": "BBB"}),
                json!({"labelB": "BBB"}),
                json!({}),
                json!({}),
                json!({"labelA": "AAA"}),
                json!({"labelA": "AAA"}),
            ],
            vec![a, b],
            vec![0, 4, 2, 3, 5, 1],
        ),
        (
            vec![
                json!({}),
                json!({}),
                json!({}),
                json!({"labelB": "BBB"}),
                json!({"labelA": "AAA", "labelB": "BBB"}),
                json!({"labelA": "AAA"}),
            ],
            vec![a, b],
            vec![4, 0, 1, 2, 5, 3],
        ),
    ];
    let ab_pods = || {
        vec![
            json!({}),
            json!({}),
            json!({}),
            json!({}),
            json!({"sdfb": "eee"}),
            json!({"dsf": "same"}),
            json!({"labelB": "BBB"}),
            json!({"labelA": "AAA"}),
            json!({"labelA": "AAA"}),
            json!({"labelB": "BBB"}),
        ]
    };
    let cases = cases.into_iter().chain([
        (ab_pods(), vec![b, a], vec![7, 6, 0, 1, 2, 3, 4, 5, 9, 8]),
        (ab_pods(), vec![a, b], vec![6, 7, 0, 1, 2, 3, 4, 5, 8, 9]),
    ]);
    for (labels, terms, want) in cases {
        let pods: Vec<Value> = labels.into_iter().enumerate().map(|(i, l)| pod(i, l)).collect();
        let all: Vec<&Value> = pods.iter().collect();
        let terms: Vec<(String, String)> = terms.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        assert_eq!(names(&scatter(&terms, all.clone(), &all)), want, "terms {terms:?}");
    }
}

#[test]
fn a_star_term_stands_for_each_value_of_its_key() {
    let pods: Vec<Value> = [json!({"zone": "a"}), json!({"zone": "b"}), json!({"zone": "a"}), json!({})]
        .into_iter()
        .enumerate()
        .map(|(i, l)| pod(i, l))
        .collect();
    let all: Vec<&Value> = pods.iter().collect();
    let star = [UpdateScatterTerm { key: "zone".into(), value: "*".into() }];
    let want: Vec<(String, String)> = vec![("zone".into(), "a".into()), ("zone".into(), "b".into())];
    assert_eq!(expand(&star, &all), want);
}

fn weights(terms: &[(i32, &str, &str)]) -> UpdatePriorityStrategy {
    let weight_priority = terms
        .iter()
        .map(|(w, k, v)| UpdatePriorityWeightTerm {
            weight: *w,
            match_selector: LabelSelector {
                match_labels: Some([(k.to_string(), v.to_string())].into()),
                ..Default::default()
            },
        })
        .collect();
    UpdatePriorityStrategy { weight_priority, ..Default::default() }
}

fn labels(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
    kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn priority_compares_as_kruise() {
    // Kruise's TestCompare: "expected false" (I not before J) means J goes first or they tie.
    let w = weights(&[(20, "key", "foo"), (10, "key", "bar")]);
    let first = |s: &UpdatePriorityStrategy, i: &[(&str, &str)], j: &[(&str, &str)]| {
        priority(s, &labels(i)) < priority(s, &labels(j))
    };
    assert!(!first(&w, &[], &[]));
    assert!(!first(&w, &[("key", "bar")], &[("key", "foo")]));
    assert!(first(&w, &[("key", "foo")], &[("key", "bar")]));
    assert!(first(&w, &[("key", "bar")], &[]));
    let w3 = weights(&[(20, "key1", "foo"), (10, "key2", "bar"), (15, "key3", "baz")]);
    assert!(first(&w3, &[("key2", "bar"), ("key3", "baz")], &[("key1", "foo")]), "25 before 20");
    let w5 = weights(&[(20, "key1", "foo"), (10, "key2", "bar"), (5, "key3", "baz")]);
    assert!(!first(&w5, &[("key2", "bar"), ("key3", "baz")], &[("key1", "foo")]), "15 after 20");

    let o = UpdatePriorityStrategy {
        order_priority: vec![
            UpdatePriorityOrderTerm { ordered_key: "key1".into() },
            UpdatePriorityOrderTerm { ordered_key: "key2".into() },
        ],
        ..Default::default()
    };
    assert!(first(&o, &[], &[("key1", "1")]), "a Pod with none of the keys goes first");
    assert!(first(&o, &[("key1", "1")], &[("key2", "9")]), "the first key before the second");
    assert!(first(&o, &[("key1", "pod-12")], &[("key1", "pod-3")]), "the larger number first");
    assert!(!first(&o, &[("key1", "x")], &[("key1", "0")]), "no number reads as 0");
    assert_eq!(number_suffix("abc123"), 123);
    assert_eq!(number_suffix("12abc"), 0);
}

#[test]
fn active_pods_order_puts_the_cheapest_updates_first() {
    let p = |name: &str, node: &str, phase: &str, ready: Option<&str>, restarts: i64, created: &str| {
        let conditions = match ready {
            Some(t) => json!([{"type": "Ready", "status": "True", "lastTransitionTime": t}]),
            None => json!([{"type": "Ready", "status": "False"}]),
        };
        json!({"metadata": {"namespace": "n", "name": name, "creationTimestamp": created},
               "spec": {"nodeName": node},
               "status": {"phase": phase, "conditions": conditions,
                          "containerStatuses": [{"name": "c", "restartCount": restarts}]}})
    };
    let t = "2026-01-01T00:00:00Z";
    let pods = [
        p("ready-long", "n1", "Running", Some("2026-01-01T00:00:00Z"), 0, t),
        p("ready-recent", "n1", "Running", Some("2026-01-02T00:00:00Z"), 0, t),
        p("not-ready-old", "n1", "Running", None, 0, "2025-01-01T00:00:00Z"),
        p("not-ready-new", "n1", "Running", None, 0, t),
        p("not-ready-restarting", "n1", "Running", None, 5, t),
        p("pending", "n1", "Pending", None, 0, t),
        p("unscheduled", "", "Pending", None, 0, t),
    ];
    let all: Vec<&Value> = pods.iter().collect();
    let mut waiting = all.clone();
    sort(&mut waiting, &all, &SidecarSetUpdateStrategy::default());
    let got: Vec<&str> = waiting.iter().map(|p| p["metadata"]["name"].as_str().unwrap()).collect();
    assert_eq!(
        got,
        [
            "unscheduled",
            "pending",
            "not-ready-restarting",
            "not-ready-new",
            "not-ready-old",
            "ready-recent",
            "ready-long"
        ]
    );
}
