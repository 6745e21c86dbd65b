//! What one plugin may do: kinds × verbs from its manifest, narrowed by the operator.

use std::collections::{BTreeMap, BTreeSet};
use wasmop_sdk::{Error, KindRef, Manifest, Verb};

/// A plugin's permissions. Built from its manifest ([`Self::from_manifest`]): the
/// primary, owned and watched kinds grant get and list (the host watches them anyway);
/// everything else is what the manifest's `permissions` list. An operator may narrow
/// them to a set of namespaces ([`Self::restrict_namespaces`]) or kinds
/// ([`Self::restrict_kinds`]); the host's own RBAC stays the outer bound.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Permissions {
    grants: BTreeMap<KindRef, BTreeSet<Verb>>,
    namespaces: Option<BTreeSet<String>>,
}

impl Permissions {
    pub fn from_manifest(m: &Manifest) -> Self {
        let mut p = Permissions::default();
        let read = [Verb::Get, Verb::List];
        p.allow(&m.primary, &read);
        for k in &m.owns {
            p.allow(k, &read);
        }
        for w in &m.watches {
            p.allow(&w.kind, &read);
        }
        for perm in &m.permissions {
            p.allow(&perm.kind, &perm.verbs);
        }
        p
    }

    pub fn allow(&mut self, kind: &KindRef, verbs: &[Verb]) {
        self.grants.entry(kind.clone()).or_default().extend(verbs.iter().copied());
    }

    /// Only these namespaces (cluster-scoped calls are then denied too).
    pub fn restrict_namespaces(&mut self, namespaces: impl IntoIterator<Item = String>) {
        self.namespaces = Some(namespaces.into_iter().collect());
    }

    /// Only these kinds, whatever the manifest asked for.
    pub fn restrict_kinds(&mut self, kinds: &[KindRef]) {
        self.grants.retain(|k, _| kinds.contains(k));
    }

    pub fn allows(&self, kind: &KindRef, verb: Verb) -> bool {
        self.grants.get(kind).is_some_and(|v| v.contains(&verb))
    }

    /// Ok, or `forbidden` with a message saying what was missing and how to get it.
    pub fn check(&self, kind: &KindRef, verb: Verb, namespace: Option<&str>) -> Result<(), Error> {
        if !self.allows(kind, verb) {
            return Err(Error::Forbidden(format!(
                "plugin may not {} {kind}: not in its manifest's permissions",
                verb.as_str()
            )));
        }
        if let Some(allowed) = &self.namespaces {
            match namespace {
                Some(ns) if allowed.contains(ns) => {}
                Some(ns) => {
                    return Err(Error::Forbidden(format!(
                        "plugin may not {} {kind} in namespace {ns}: outside its allowed namespaces",
                        verb.as_str()
                    )));
                }
                None => {
                    return Err(Error::Forbidden(format!(
                        "plugin may not {} {kind} across namespaces: it is limited to {}",
                        verb.as_str(),
                        allowed.iter().cloned().collect::<Vec<_>>().join(",")
                    )));
                }
            }
        }
        Ok(())
    }

    /// Every granted kind with its verbs, for `wasmop inspect` and RBAC generation.
    pub fn grants(&self) -> impl Iterator<Item = (&KindRef, &BTreeSet<Verb>)> {
        self.grants.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmop_sdk::Mapping;

    fn manifest() -> Manifest {
        let mut m = Manifest::for_kind("m", "1", KindRef::new("cache.example.com/v1alpha1", "Memcached"));
        m.owns.push(KindRef::new("apps/v1", "Deployment"));
        m.watches.push(wasmop_sdk::Watch { kind: KindRef::new("v1", "Pod"), mapping: Mapping::AllPrimaries });
        m.allow_kind(KindRef::new("apps/v1", "Deployment"), &[Verb::Create, Verb::Update])
    }

    #[test]
    fn watched_kinds_are_readable_and_declared_verbs_allowed() {
        let p = Permissions::from_manifest(&manifest());
        let dep = KindRef::new("apps/v1", "Deployment");
        assert!(p.check(&dep, Verb::Create, Some("a")).is_ok());
        assert!(p.check(&dep, Verb::Get, Some("a")).is_ok());
        assert!(p.check(&KindRef::new("v1", "Pod"), Verb::List, None).is_ok());
        let err = p.check(&dep, Verb::Delete, Some("a")).unwrap_err();
        assert!(matches!(err, Error::Forbidden(ref m) if m.contains("delete apps/v1/Deployment")), "{err}");
        assert!(p.check(&KindRef::new("v1", "Secret"), Verb::Get, Some("a")).is_err());
        // update-status is its own verb.
        let mc = KindRef::new("cache.example.com/v1alpha1", "Memcached");
        assert!(p.check(&mc, Verb::UpdateStatus, Some("a")).is_err());
    }

    #[test]
    fn operator_narrowing() {
        let mut p = Permissions::from_manifest(&manifest());
        p.restrict_namespaces(["team-a".to_string()]);
        let dep = KindRef::new("apps/v1", "Deployment");
        assert!(p.check(&dep, Verb::Create, Some("team-a")).is_ok());
        assert!(p.check(&dep, Verb::Create, Some("team-b")).is_err());
        assert!(p.check(&dep, Verb::List, None).is_err());
        p.restrict_kinds(&[KindRef::new("v1", "Pod")]);
        assert!(p.check(&dep, Verb::Get, Some("team-a")).is_err());
    }
}
