//! The order in which Pods waiting for a new sidecar version are updated, as Kruise's
//! `SortUpdateIndexes`: Kubernetes' `ActivePods` order, then
//! `updateStrategy.priorityStrategy` (a stable sort), then `scatterStrategy`.
//!
//! The order decides which Pods go first under maxUnavailable, and which ones the
//! partition keeps old (the last ones). Where Kruise's own order leaves a tie (its
//! first sort is not stable), Pods are taken by namespace and name, so one reconcile
//! and the next agree.

use crate::scope;
use crate::types::{SidecarSetUpdateStrategy, UpdatePriorityStrategy, UpdateScatterTerm};
use serde_json::Value;
use std::cmp::Reverse;
use std::collections::BTreeMap;

/// Sorts `waiting` (a subset of `all`, the SidecarSet's matched Pods) into update order.
pub fn sort(waiting: &mut Vec<&Value>, all: &[&Value], s: &SidecarSetUpdateStrategy) {
    // Keys read once per Pod, not once per comparison: a reconcile sorts every waiting
    // Pod, and a rollout reconciles once per Pod event.
    waiting.sort_by_cached_key(|p| (active_key(p), name(p).0.to_owned(), name(p).1.to_owned()));
    if let Some(p) = &s.priority_strategy {
        waiting.sort_by_key(|pod| priority(p, &labels(pod)));
    }
    if !s.scatter_strategy.is_empty() {
        let terms = expand(&s.scatter_strategy, all);
        *waiting = scatter(&terms, std::mem::take(waiting), all);
    }
}

/// Kubernetes' `controller.ActivePods` Less, as a key: unscheduled < scheduled;
/// Pending < Unknown < Running; not Ready < Ready; Ready more recently < longer; more
/// restarts < fewer; newer < older (a missing time sorts first). (Kubernetes compares
/// ready times only between two Ready Pods: any other pair is already ordered by
/// readiness.)
type ActiveKey = (bool, u8, bool, (bool, Reverse<String>), Reverse<i64>, (bool, Reverse<String>));

fn active_key(p: &Value) -> ActiveKey {
    let scheduled = p["spec"]["nodeName"].as_str().is_some_and(|n| !n.is_empty());
    let phase = match p["status"]["phase"].as_str() {
        Some("Unknown") => 1,
        Some("Running") => 2,
        _ => 0,
    };
    // "Zero first, then the later one": an RFC 3339 time in UTC compares as a string.
    let later_first = |t: Option<&str>| (t.is_some(), Reverse(t.unwrap_or("").to_owned()));
    let since = ready_since(p);
    let statuses = p["status"]["containerStatuses"].as_array();
    let restarts = statuses.into_iter().flatten().filter_map(|c| c["restartCount"].as_i64()).max().unwrap_or(0);
    (
        scheduled,
        phase,
        since.is_some(),
        later_first(since.flatten()),
        Reverse(restarts),
        later_first(p["metadata"]["creationTimestamp"].as_str()),
    )
}

/// Some(since) when the Pod's Ready condition is True (since: its lastTransitionTime).
fn ready_since(p: &Value) -> Option<Option<&str>> {
    let conditions = p["status"]["conditions"].as_array()?;
    let c = conditions.iter().find(|c| c["type"] == "Ready" && c["status"] == "True")?;
    Some(c["lastTransitionTime"].as_str())
}

fn name(p: &Value) -> (&str, &str) {
    (p["metadata"]["namespace"].as_str().unwrap_or(""), p["metadata"]["name"].as_str().unwrap_or(""))
}

fn labels(p: &Value) -> BTreeMap<String, String> {
    serde_json::from_value(p["metadata"]["labels"].clone()).unwrap_or_default()
}

/// A key that sorts first the Pods to update first. Weights: the sum of the matching
/// terms' weights, highest first. Order keys: the first listed key a Pod has (a Pod
/// with none of them first), then the number its value ends in, highest first.
fn priority(p: &UpdatePriorityStrategy, labels: &BTreeMap<String, String>) -> (Reverse<i64>, i64, Reverse<i64>) {
    if !p.weight_priority.is_empty() {
        let weight =
            p.weight_priority.iter().filter(|w| scope::matches(&w.match_selector, labels)).map(|w| i64::from(w.weight));
        return (Reverse(weight.sum()), 0, Reverse(0));
    }
    let level = p.order_priority.iter().enumerate().find_map(|(i, o)| labels.get(&o.ordered_key).map(|v| (i, v)));
    match level {
        Some((i, v)) => (Reverse(0), i as i64, Reverse(number_suffix(v))),
        None => (Reverse(0), -1, Reverse(0)),
    }
}

/// The number a label value ends in ("pod-12" → 12), 0 without one (Kruise's
/// `getIntFromStringSuffix`).
fn number_suffix(v: &str) -> i64 {
    let digits = v.len() - v.bytes().rev().take_while(u8::is_ascii_digit).count();
    v[digits..].parse().unwrap_or(0)
}

fn label<'a>(p: &'a Value, key: &str) -> &'a str {
    p["metadata"]["labels"][key].as_str().unwrap_or("")
}

/// `key: "*"` stands for every value of `key` among the Pods; duplicates dropped.
fn expand(terms: &[UpdateScatterTerm], all: &[&Value]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut push = |k: &str, v: &str| {
        if !out.iter().any(|(a, b)| a == k && b == v) {
            out.push((k.to_owned(), v.to_owned()));
        }
    };
    for t in terms {
        if t.value != "*" {
            push(&t.key, &t.value);
            continue;
        }
        for p in all {
            if let Some(v) = p["metadata"]["labels"][&t.key].as_str() {
                push(&t.key, v);
            }
        }
    }
    out
}

/// Kruise's `scatterSort.Sort`: each term (with more than one, those some waiting Pod
/// has, most common first) spreads its Pods evenly among the others.
fn scatter<'a>(terms: &[(String, String)], mut waiting: Vec<&'a Value>, all: &[&Value]) -> Vec<&'a Value> {
    if terms.is_empty() || waiting.len() <= 1 {
        return waiting;
    }
    let mut ordered: Vec<((String, String), usize)> = Vec::new();
    if terms.len() == 1 {
        ordered.push((terms[0].clone(), 0));
    } else {
        for t in terms {
            let n = waiting.iter().filter(|p| p["metadata"]["labels"][&t.0].as_str() == Some(t.1.as_str())).count();
            if n > 0 {
                ordered.push((t.clone(), n));
            }
        }
        ordered.sort_by_key(|(_, n)| Reverse(*n));
    }
    for ((k, v), _) in &ordered {
        waiting = spread(k, v, waiting, all);
    }
    waiting
}

/// Kruise's `scatterPodsByRule`: the waiting Pods with `key=value` interleaved in groups
/// with the others, at the density they have among all matched Pods; the last such
/// Pod goes last.
fn spread<'a>(key: &str, value: &str, waiting: Vec<&'a Value>, all: &[&Value]) -> Vec<&'a Value> {
    let (mut hit, mut miss): (Vec<&Value>, Vec<&Value>) = waiting.iter().partition(|p| label(p, key) == value);
    if hit.len() <= 1 || miss.len() <= 1 {
        return waiting;
    }
    // `waiting` is part of `all`; max() keeps the arithmetic sound if it is not.
    let labelled = all.iter().filter(|p| label(p, key) == value).count().max(hit.len());
    let total_hit = labelled - 1;
    let total_miss = all.len().saturating_sub(labelled).max(miss.len());
    let last = hit.pop().expect("two or more");
    let g = density(total_hit, total_miss, hit.len(), miss.len());
    let mut out = Vec::with_capacity(waiting.len());
    out.extend(miss.drain(..g.remainder.min(miss.len())));
    for _ in 0..g.groups {
        move_front(&mut hit, &mut out, g.hit_size);
        move_front(&mut miss, &mut out, g.miss_size);
    }
    out.append(&mut hit);
    out.append(&mut miss);
    out.push(last);
    out
}

fn move_front<'a>(from: &mut Vec<&'a Value>, to: &mut Vec<&'a Value>, n: usize) {
    to.extend(from.drain(..n.min(from.len())));
}

struct Groups {
    groups: usize,
    hit_size: usize,
    miss_size: usize,
    remainder: usize,
}

/// Kruise's `newScatterGroup`: as many groups as the smaller side has Pods.
fn groups(hit: usize, miss: usize) -> Groups {
    let groups = hit.min(miss);
    let size = |n: usize| (n as f64 / groups as f64).round() as usize;
    Groups { groups, hit_size: size(hit), miss_size: size(miss), remainder: 0 }
}

/// Kruise's `calculateGroupByDensity`: the waiting Pods' own grouping, unless the
/// labelled Pods are denser among the waiting than among all, in which case the
/// group sizes of all Pods, and the unlabelled ones left over go first.
fn density(total_hit: usize, total_miss: usize, hit: usize, miss: usize) -> Groups {
    let all = groups(total_hit, total_miss);
    if total_miss as f32 / total_hit as f32 >= miss as f32 / hit as f32 {
        return groups(hit, miss);
    }
    let n = (hit / all.hit_size).min(miss / all.miss_size);
    Groups { groups: n, hit_size: all.hit_size, miss_size: all.miss_size, remainder: miss - n * all.miss_size }
}

#[cfg(test)]
#[path = "order_tests.rs"]
mod tests;
