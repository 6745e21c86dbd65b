//! What a plugin's manifest and handlers must be before the registry admits them:
//! fitted inside the operator's narrowing, handler names fit for URLs, and no two
//! plugins reconciling one kind in a common namespace.

use super::LoadError;
use wasmop_sdk::{Handler, KindRef, Manifest, Watch};

/// An operator's narrowing of a plugin: its world is at most these namespaces and
/// kinds. The manifest must fit inside: a plugin that watches a kind outside
/// `kinds` is refused; watched namespaces are cut down to `namespaces`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Narrowing {
    pub namespaces: Option<Vec<String>>,
    pub kinds: Option<Vec<wasmop_sdk::KindRef>>,
}

/// Fits the manifest inside the operator's narrowing, or says why it cannot. Its
/// namespaces end up sorted, each once, without empty names.
pub(super) fn narrow(m: &mut Manifest, n: &Narrowing) -> Result<(), LoadError> {
    tidy(&mut m.namespaces);
    tidy(&mut m.call_namespaces);
    if let Some(kinds) = &n.kinds {
        let watched = std::iter::once(&m.primary).chain(&m.owns).chain(m.watches.iter().map(|w| &w.kind));
        if let Some(k) = watched.into_iter().find(|k| !kinds.contains(k)) {
            return Err(LoadError::Narrowed(format!("the plugin watches {k}, which is not in its allowed kinds")));
        }
    }
    if let Some(allowed) = &n.namespaces {
        if !m.namespaced {
            return Err(LoadError::Narrowed(format!(
                "{} is cluster-scoped and cannot be limited to namespaces",
                m.primary
            )));
        }
        m.namespaces = if m.namespaces.is_empty() {
            allowed.clone()
        } else {
            m.namespaces.iter().filter(|ns| allowed.contains(ns)).cloned().collect()
        };
        tidy(&mut m.namespaces);
        if m.namespaces.is_empty() {
            return Err(LoadError::Narrowed("none of the plugin's namespaces is in its allowed namespaces".into()));
        }
        // The operator's narrowing binds these too: the permissions refuse them anyway,
        // and the manifest the host reports says so.
        m.call_namespaces.retain(|ns| allowed.contains(ns));
    }
    // Where it may call without watching: beside namespaces it watches, and only for a
    // plugin limited to some (one of all namespaces calls everywhere already).
    m.call_namespaces.retain(|ns| !m.namespaces.is_empty() && !m.namespaces.contains(ns));
    Ok(())
}

/// Each namespace once, in order, without empty names: a duplicate would be watched
/// twice (and the controller would wait for a sync that counts it once).
fn tidy(namespaces: &mut Vec<String>) {
    namespaces.retain(|n| !n.is_empty());
    namespaces.sort();
    namespaces.dedup();
}

/// An operator's narrowing of kinds binds admission handlers too: a handler may only
/// serve kinds the plugin is allowed.
pub(super) fn narrow_handlers(handlers: &[Handler], n: &Narrowing) -> Result<(), LoadError> {
    let Some(kinds) = &n.kinds else { return Ok(()) };
    for h in handlers {
        if let Some(k) = h.kinds.iter().find(|k| !kinds.iter().any(|a| same_kind(a, k))) {
            return Err(LoadError::Narrowed(format!(
                "admission handler {:?} serves {k}, which is not in its allowed kinds",
                h.name
            )));
        }
    }
    Ok(())
}

/// Handler names become URL path segments and must be unique.
pub(super) fn check_handlers(handlers: &[Handler]) -> Result<(), LoadError> {
    let mut seen = std::collections::HashSet::new();
    for h in handlers {
        let valid = !h.name.is_empty()
            && h.name.len() <= 63
            && h.name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !valid {
            return Err(LoadError::Handlers(format!(
                "handler name {:?} must be 1-63 characters of a-z, 0-9 and '-'",
                h.name
            )));
        }
        if !seen.insert(&h.name) {
            return Err(LoadError::Handlers(format!("handler name {:?} is declared twice", h.name)));
        }
        if h.kinds.is_empty() || h.operations.is_empty() {
            return Err(LoadError::Handlers(format!("handler {:?} names no kinds or no operations", h.name)));
        }
    }
    Ok(())
}

/// What a controller is built from: its watches, and whether its own writes are news
/// (a new version that changes any of it gets a new controller).
pub(super) fn watch_set(m: &Manifest) -> (&KindRef, bool, &[String], &[KindRef], &[Watch], bool) {
    (&m.primary, m.namespaced, &m.namespaces, &m.owns, &m.watches, m.skip_own_writes)
}

/// Two manifests reconcile the same primary kind in at least one common namespace.
pub(super) fn overlaps(a: &Manifest, b: &Manifest) -> bool {
    same_kind(&a.primary, &b.primary)
        && (a.namespaces.is_empty() || b.namespaces.is_empty() || a.namespaces.iter().any(|n| b.namespaces.contains(n)))
}

/// The same resource: the same group and kind, whatever the version (a CRD serves
/// one set of objects under each of its versions).
fn same_kind(a: &KindRef, b: &KindRef) -> bool {
    a.kind == b.kind && group(&a.api_version) == group(&b.api_version)
}

/// `apps/v1` → `apps`; `v1` (and `/v1`) → `` (the core group).
fn group(api_version: &str) -> &str {
    let v = api_version.strip_prefix('/').unwrap_or(api_version);
    v.rsplit_once('/').map_or("", |(g, _)| g)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narrowing_cuts_namespaces_and_refuses_kinds_outside() {
        let k = KindRef::new("cache.example.com/v1alpha1", "Memcached");
        let mut m = Manifest::for_kind("a", "1", k.clone());
        let n = Narrowing { namespaces: Some(vec!["team-a".into()]), kinds: None };
        narrow(&mut m, &n).unwrap();
        assert_eq!(m.namespaces, ["team-a"], "all namespaces become the allowed ones");
        let mut m = Manifest::for_kind("a", "1", k.clone()).namespaces(["team-b"]);
        assert!(narrow(&mut m, &n).unwrap_err().to_string().contains("none of the plugin's namespaces"));
        // Namespaces it calls in without watching: only allowed ones, none it watches.
        let mut m = Manifest::for_kind("a", "1", k.clone()).call_namespaces(["team-b", "team-a", "team-c"]);
        let both = Narrowing { namespaces: Some(vec!["team-a".into(), "team-b".into()]), kinds: None };
        narrow(&mut m, &both).unwrap();
        assert_eq!(m.namespaces, ["team-a", "team-b"]);
        assert!(m.call_namespaces.is_empty(), "it watches both now");
        let mut m =
            Manifest::for_kind("a", "1", k.clone()).namespaces(["team-a"]).call_namespaces(["team-c", "team-b"]);
        narrow(&mut m, &both).unwrap();
        assert_eq!(m.call_namespaces, ["team-b"], "team-c is not allowed");
        let mut m = Manifest::for_kind("a", "1", k.clone()).call_namespaces(["team-b"]);
        narrow(&mut m, &Narrowing::default()).unwrap();
        assert!(m.call_namespaces.is_empty(), "a plugin of all namespaces calls everywhere already");
        let mut m = Manifest::for_kind("a", "1", k.clone());
        m.owns.push(KindRef::new("apps/v1", "Deployment"));
        let n = Narrowing { namespaces: None, kinds: Some(vec![k]) };
        assert!(narrow(&mut m, &n).unwrap_err().to_string().contains("apps/v1/Deployment"));
    }

    #[test]
    fn same_kind_overlap_rules() {
        let k = KindRef::new("cache.example.com/v1alpha1", "Memcached");
        let all = Manifest::for_kind("a", "1", k.clone());
        let a = Manifest::for_kind("a", "1", k.clone()).namespaces(["a"]);
        let b = Manifest::for_kind("b", "1", k.clone()).namespaces(["b"]);
        assert!(overlaps(&all, &a));
        assert!(!overlaps(&a, &b));
        assert!(overlaps(&a, &Manifest::for_kind("c", "1", k).namespaces(["b", "a"])));
        assert!(!overlaps(&a, &Manifest::for_kind("d", "1", KindRef::new("v1", "ConfigMap"))));
        // One resource under another version, or spelled with a leading '/', is the same.
        let beta = Manifest::for_kind("e", "1", KindRef::new("cache.example.com/v1beta1", "Memcached"));
        assert!(overlaps(&all, &beta), "a CRD's second served version");
        let cm = |v: &str| Manifest::for_kind("f", "1", KindRef::new(v, "ConfigMap"));
        assert!(overlaps(&cm("/v1"), &cm("v1")));
        assert!(!overlaps(&cm("v1"), &cm("other.example.com/v1")), "same kind, another group");
    }

    #[test]
    fn namespaces_are_watched_once_each() {
        let k = KindRef::new("cache.example.com/v1alpha1", "Memcached");
        let mut m = Manifest::for_kind("a", "1", k.clone()).namespaces(["b", "a", "b", ""]);
        narrow(&mut m, &Narrowing::default()).unwrap();
        assert_eq!(m.namespaces, ["a", "b"]);
        let mut m = Manifest::for_kind("a", "1", k.clone());
        let n = Narrowing { namespaces: Some(vec!["x".into(), "x".into(), "".into()]), kinds: None };
        narrow(&mut m, &n).unwrap();
        assert_eq!(m.namespaces, ["x"]);
        // An empty name is no namespace: it does not survive narrowing as "all".
        let mut m = Manifest::for_kind("a", "1", k);
        let n = Narrowing { namespaces: Some(vec!["".into()]), kinds: None };
        assert!(narrow(&mut m, &n).unwrap_err().to_string().contains("none of the plugin's namespaces"));
    }

    #[test]
    fn narrowed_kinds_bind_admission_handlers() {
        use wasmop_sdk::Operation;
        let k = KindRef::new("cache.example.com/v1alpha1", "Memcached");
        let pods = Handler::validating("pods", KindRef::new("v1", "Pod"), &[Operation::Create]);
        let mine =
            Handler::validating("mine", KindRef::new("cache.example.com/v1beta1", "Memcached"), &[Operation::Create]);
        let n = Narrowing { namespaces: None, kinds: Some(vec![k]) };
        assert!(narrow_handlers(&[pods.clone(), mine.clone()], &Narrowing::default()).is_ok(), "not narrowed");
        assert!(narrow_handlers(std::slice::from_ref(&mine), &n).is_ok(), "another version of an allowed kind");
        let e = narrow_handlers(&[mine, pods], &n).unwrap_err();
        assert!(matches!(e, LoadError::Narrowed(_)));
        assert_eq!(
            e.to_string(),
            "narrowed by the operator: admission handler \"pods\" serves v1/Pod, which is not in its allowed kinds"
        );
    }
}
