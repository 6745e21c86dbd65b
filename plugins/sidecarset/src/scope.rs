//! Which Pods a SidecarSet selects, and whether two SidecarSets can select the same Pod.

use crate::types::SidecarSetSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use std::collections::{BTreeMap, BTreeSet};

/// One requirement on one label key, normalised from matchLabels and matchExpressions.
#[derive(Clone, Debug)]
enum Req {
    In(BTreeSet<String>),
    NotIn(BTreeSet<String>),
    Exists,
    DoesNotExist,
    /// An operator Kubernetes does not know (`Equals`): the validating webhook refuses
    /// it, and a SidecarSet stored before that matches no Pod by it, as in Kruise (its
    /// selector does not parse) — never the Pods that lack the label.
    Invalid,
}

fn reqs(sel: &LabelSelector) -> Vec<(String, Req)> {
    let mut out: Vec<(String, Req)> =
        sel.match_labels.iter().flatten().map(|(k, v)| (k.clone(), Req::In([v.clone()].into()))).collect();
    for LabelSelectorRequirement { key, operator, values } in sel.match_expressions.iter().flatten() {
        let vals: BTreeSet<String> = values.iter().flatten().cloned().collect();
        let r = match operator.as_str() {
            "In" => Req::In(vals),
            "NotIn" => Req::NotIn(vals),
            "Exists" => Req::Exists,
            "DoesNotExist" => Req::DoesNotExist,
            _ => Req::Invalid,
        };
        out.push((key.clone(), r));
    }
    out
}

/// Whether `labels` satisfy `sel`. An empty selector matches everything.
pub fn matches(sel: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    reqs(sel).iter().all(|(k, r)| match (r, labels.get(k)) {
        (Req::In(vs), Some(v)) => vs.contains(v),
        (Req::In(_), None) => false,
        (Req::NotIn(vs), Some(v)) => !vs.contains(v),
        (Req::NotIn(_), None) => true,
        (Req::Exists, v) => v.is_some(),
        (Req::DoesNotExist, v) => v.is_none(),
        (Req::Invalid, _) => false,
    })
}

pub fn is_empty(sel: &LabelSelector) -> bool {
    reqs(sel).is_empty()
}

/// Whether some label set could satisfy both selectors: false only when a key carries
/// contradictory requirements.
pub fn overlap(a: &LabelSelector, b: &LabelSelector) -> bool {
    let (ra, rb) = (reqs(a), reqs(b));
    for (ka, x) in &ra {
        for (kb, y) in &rb {
            if ka == kb && contradict(x, y) {
                return false;
            }
        }
    }
    true
}

fn contradict(x: &Req, y: &Req) -> bool {
    use Req::*;
    match (x, y) {
        (In(a), In(b)) => a.is_disjoint(b),
        (In(a), NotIn(b)) | (NotIn(b), In(a)) => a.is_subset(b),
        (In(_), DoesNotExist) | (DoesNotExist, In(_)) => true,
        (Exists, DoesNotExist) | (DoesNotExist, Exists) => true,
        _ => false,
    }
}

/// The one namespace a SidecarSet is limited to, if any: `namespace: ""` means every
/// namespace, as in Kruise.
pub fn namespace(spec: &SidecarSetSpec) -> Option<&str> {
    spec.namespace.as_deref().filter(|n| !n.is_empty())
}

/// The namespaces a set is limited to, as a selector: its `namespaceSelector`, or its
/// v1alpha1 `namespace` as the selector Kruise's conversion makes of it
/// (`kubernetes.io/metadata.name`), so a set limited either way is compared with one
/// limited the other way.
fn namespaces(spec: &SidecarSetSpec) -> Option<std::borrow::Cow<'_, LabelSelector>> {
    use std::borrow::Cow;
    if let Some(sel) = &spec.namespace_selector {
        return Some(Cow::Borrowed(sel));
    }
    let ns = namespace(spec)?;
    let labels = BTreeMap::from([("kubernetes.io/metadata.name".to_owned(), ns.to_owned())]);
    Some(Cow::Owned(LabelSelector { match_labels: Some(labels), ..Default::default() }))
}

/// Whether the two SidecarSets can select a common Pod.
pub fn scopes_overlap(a: &SidecarSetSpec, b: &SidecarSetSpec) -> bool {
    if let (Some(x), Some(y)) = (namespaces(a), namespaces(b))
        && !overlap(&x, &y)
    {
        return false;
    }
    let empty = LabelSelector::default();
    overlap(a.selector.as_ref().unwrap_or(&empty), b.selector.as_ref().unwrap_or(&empty))
}

/// Whether a Pod with `labels` in namespace `ns` (with `ns_labels`) is selected.
pub fn selects(
    spec: &SidecarSetSpec,
    ns: &str,
    ns_labels: &BTreeMap<String, String>,
    labels: &BTreeMap<String, String>,
) -> bool {
    if namespace(spec).is_some_and(|n| n != ns) {
        return false;
    }
    if spec.namespace_selector.as_ref().is_some_and(|s| !matches(s, ns_labels)) {
        return false;
    }
    // A SidecarSet without a selector never passes validation; selecting nothing is safe.
    spec.selector.as_ref().is_some_and(|s| !is_empty(s) && matches(s, labels))
}

/// The selector as a list call's label selector string; None if it has an operator
/// Kubernetes does not know (it selects nothing, see [`Req::Invalid`]).
pub fn to_query(sel: &LabelSelector) -> Option<String> {
    let mut parts = Vec::new();
    for (k, r) in reqs(sel) {
        let join = |v: &BTreeSet<String>| v.iter().cloned().collect::<Vec<_>>().join(",");
        parts.push(match r {
            Req::In(v) if v.len() == 1 => format!("{k}={}", join(&v)),
            Req::In(v) => format!("{k} in ({})", join(&v)),
            Req::NotIn(v) => format!("{k} notin ({})", join(&v)),
            Req::Exists => k,
            Req::DoesNotExist => format!("!{k}"),
            Req::Invalid => return None,
        });
    }
    Some(parts.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(labels: &[(&str, &str)], exprs: &[(&str, &str, &[&str])]) -> LabelSelector {
        LabelSelector {
            match_labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            match_expressions: Some(
                exprs
                    .iter()
                    .map(|(k, op, vs)| LabelSelectorRequirement {
                        key: k.to_string(),
                        operator: op.to_string(),
                        values: Some(vs.iter().map(|v| v.to_string()).collect()),
                    })
                    .collect(),
            ),
        }
    }

    #[test]
    fn matching_and_overlap() {
        let web = sel(&[("app", "web")], &[]);
        let db = sel(&[("app", "db")], &[]);
        let not_web = sel(&[], &[("app", "NotIn", &["web"])]);
        let tier = sel(&[("tier", "front")], &[]);
        let labels: BTreeMap<_, _> = [("app".to_string(), "web".to_string())].into();
        assert!(matches(&web, &labels) && !matches(&db, &labels) && !matches(&not_web, &labels));
        assert!(!overlap(&web, &db));
        assert!(!overlap(&web, &not_web));
        assert!(overlap(&db, &not_web));
        assert!(overlap(&web, &tier), "different keys can both hold");
        assert_eq!(to_query(&sel(&[("app", "web")], &[("env", "In", &["a", "b"])])).unwrap(), "app=web,env in (a,b)");
        assert_eq!(to_query(&sel(&[("app", "web")], &[("env", "Equals", &["a"])])), None, "selects nothing");
    }

    #[test]
    fn a_namespace_and_a_namespace_selector_are_compared_as_kruise_converts_them() {
        let spec = |ns: Option<&str>, ns_sel: Option<&str>| SidecarSetSpec {
            selector: Some(sel(&[("app", "web")], &[])),
            namespace: ns.map(Into::into),
            namespace_selector: ns_sel.map(|n| sel(&[("kubernetes.io/metadata.name", n)], &[])),
            ..Default::default()
        };
        assert!(!scopes_overlap(&spec(Some("a"), None), &spec(None, Some("b"))));
        assert!(scopes_overlap(&spec(Some("a"), None), &spec(None, Some("a"))));
        assert!(!scopes_overlap(&spec(Some("a"), None), &spec(Some("b"), None)));
        assert!(scopes_overlap(&spec(None, None), &spec(None, Some("b"))), "an unlimited set meets every one");
    }
}
