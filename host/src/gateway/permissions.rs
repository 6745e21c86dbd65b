//! What one plugin may do: kinds × verbs from its manifest, narrowed by the operator.
//!
//! This is the host's one authority check: plugin calls, Events (which need read
//! access to the object they describe), watches and admission reviews all ask
//! [`Permissions::check`] before anything reaches the apiserver. It is a fast first
//! filter; the plugin's own ServiceAccount, which the host impersonates, is the wall.

use std::collections::{BTreeMap, BTreeSet};
use wasmop_sdk::{Error, KindRef, Manifest, Verb};

/// A plugin's permissions. Built from its manifest ([`Self::from_manifest`]): the
/// primary, owned and watched kinds grant get and list (the host watches them anyway);
/// everything else is what the manifest's `permissions` list. The manifest's own
/// namespaces, or an operator's narrowing, limit them to a set of namespaces
/// ([`Self::restrict_namespaces`]) or kinds ([`Self::restrict_kinds`]).
/// Where a call lands, as far as namespaces go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach<'a> {
    Namespace(&'a str),
    /// A namespaced kind, across every namespace.
    AllNamespaces,
    /// A cluster-scoped kind (whatever namespace the plugin named).
    Cluster,
}

impl<'a> Reach<'a> {
    /// A call of a kind whose scope is known.
    pub fn of(namespaced: bool, namespace: Option<&'a str>) -> Self {
        match (namespaced, namespace) {
            (false, _) => Reach::Cluster,
            (true, Some(ns)) => Reach::Namespace(ns),
            (true, None) => Reach::AllNamespaces,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Permissions {
    grants: BTreeMap<KindRef, BTreeSet<Verb>>,
    namespaces: Option<BTreeSet<String>>,
    /// Beyond `namespaces`, where calls (and Events) may also land: the manifest's call
    /// namespaces (the WIT `reach`). Never where reviews or watches may: the plugin
    /// declared calls there, nothing more.
    call_namespaces: BTreeSet<String>,
    /// The operator's allowed kinds, as (group, kind): what admission reviews check.
    kinds: Option<BTreeSet<(String, String)>>,
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
        // A manifest's own namespaces bound its calls, not only its watches; its calls
        // may also land in the namespaces it names for them (the WIT `reach`).
        if !m.namespaces.is_empty() {
            p.restrict_namespaces(m.namespaces.iter().cloned());
            p.call_namespaces = m.call_namespaces.iter().filter(|n| !n.is_empty()).cloned().collect();
        }
        p
    }

    pub fn allow(&mut self, kind: &KindRef, verbs: &[Verb]) {
        self.grants.entry(kind.clone()).or_default().extend(verbs.iter().copied());
    }

    /// Only these namespaces (cluster-scoped calls are then denied too). Restricting
    /// twice keeps what both allow.
    pub fn restrict_namespaces(&mut self, namespaces: impl IntoIterator<Item = String>) {
        let new: BTreeSet<String> = namespaces.into_iter().collect();
        self.call_namespaces.retain(|n| new.contains(n));
        self.namespaces = Some(match self.namespaces.take() {
            Some(old) => old.intersection(&new).cloned().collect(),
            None => new,
        });
    }

    /// Whether the plugin is limited to namespaces: then where a call lands (which
    /// needs the kind's scope) decides, not only its kind and verb.
    pub fn limited_to_namespaces(&self) -> bool {
        self.namespaces.is_some()
    }

    /// Only these kinds, whatever the manifest asked for.
    pub fn restrict_kinds(&mut self, kinds: &[KindRef]) {
        self.grants.retain(|k, _| kinds.contains(k));
        self.kinds = Some(kinds.iter().map(|k| (k.group().to_owned(), k.kind.clone())).collect());
    }

    pub fn allows(&self, kind: &KindRef, verb: Verb) -> bool {
        self.grants.get(kind).is_some_and(|v| v.contains(&verb))
    }

    /// Ok, or `forbidden` with a message saying what was missing and how to get it.
    pub fn check(&self, kind: &KindRef, verb: Verb, reach: Reach<'_>) -> Result<(), Error> {
        if !self.allows(kind, verb) {
            return Err(Error::Forbidden(format!(
                "plugin may not {} {kind}: not in its manifest's permissions",
                verb.as_str()
            )));
        }
        self.within(|| format!("{} {kind}", verb.as_str()), reach, &self.call_namespaces)
    }

    /// Whether an admission review of an object of `kind` (by group and kind, as a
    /// review names it) lying at `reach` is in the plugin's world: the handler's own
    /// kinds are checked by the caller; this adds the operator's narrowing.
    pub fn check_review(&self, group: &str, kind: &str, reach: Reach<'_>) -> Result<(), Error> {
        if let Some(kinds) = &self.kinds
            && !kinds.contains(&(group.to_owned(), kind.to_owned()))
        {
            return Err(Error::Forbidden(format!("plugin may not review {group}/{kind}: outside its allowed kinds")));
        }
        self.within(|| format!("review {group}/{kind}"), reach, &BTreeSet::new())
    }

    /// `what` is only written out for a refusal: this runs on every call. `also`: the
    /// namespaces beyond the plugin's own that this kind of request may land in.
    fn within(&self, what: impl Fn() -> String, reach: Reach<'_>, also: &BTreeSet<String>) -> Result<(), Error> {
        let Some(allowed) = &self.namespaces else { return Ok(()) };
        let what = what();
        let list = || allowed.iter().cloned().collect::<Vec<_>>().join(",");
        match reach {
            Reach::Namespace(ns) if allowed.contains(ns) || also.contains(ns) => Ok(()),
            Reach::Namespace(ns) => Err(Error::Forbidden(format!(
                "plugin may not {what} in namespace {ns}: outside its allowed namespaces"
            ))),
            Reach::AllNamespaces => {
                Err(Error::Forbidden(format!("plugin may not {what} across namespaces: it is limited to {}", list())))
            }
            Reach::Cluster => Err(Error::Forbidden(format!(
                "plugin may not {what}: the kind is cluster-scoped and the plugin is limited to namespaces {}",
                list()
            ))),
        }
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
        let a = Reach::Namespace("a");
        assert!(p.check(&dep, Verb::Create, a).is_ok());
        assert!(p.check(&dep, Verb::Get, a).is_ok());
        assert!(p.check(&KindRef::new("v1", "Pod"), Verb::List, Reach::AllNamespaces).is_ok());
        let err = p.check(&dep, Verb::Delete, a).unwrap_err();
        assert!(matches!(err, Error::Forbidden(ref m) if m.contains("delete apps/v1/Deployment")), "{err}");
        assert!(p.check(&KindRef::new("v1", "Secret"), Verb::Get, a).is_err());
        // update-status is its own verb.
        let mc = KindRef::new("cache.example.com/v1alpha1", "Memcached");
        assert!(p.check(&mc, Verb::UpdateStatus, a).is_err());
    }

    #[test]
    fn call_namespaces_extend_where_a_limited_plugin_may_call() {
        let mut m = manifest().namespaces(["a"]).call_namespaces(["b"]);
        let p = Permissions::from_manifest(&m);
        let dep = KindRef::new("apps/v1", "Deployment");
        assert!(p.check(&dep, Verb::Create, Reach::Namespace("a")).is_ok());
        assert!(p.check(&dep, Verb::Create, Reach::Namespace("b")).is_ok());
        let err = p.check(&dep, Verb::Create, Reach::Namespace("c")).unwrap_err();
        assert!(matches!(err, Error::Forbidden(ref m) if m.contains("namespace c")), "{err}");
        // Only the manifest's verbs there too.
        assert!(p.check(&dep, Verb::Delete, Reach::Namespace("b")).is_err());
        // Calls only: an admission review of an object there is not the plugin's.
        assert!(p.check_review("apps", "Deployment", Reach::Namespace("a")).is_ok());
        let err = p.check_review("apps", "Deployment", Reach::Namespace("b")).unwrap_err();
        assert!(matches!(err, Error::Forbidden(ref m) if m.contains("namespace b")), "{err}");
        // An operator's narrowing takes it away like the plugin's own namespaces.
        let mut narrowed = p.clone();
        narrowed.restrict_namespaces(["a".to_string()]);
        assert!(narrowed.check(&dep, Verb::Create, Reach::Namespace("b")).is_err());
        // A plugin of all namespaces may call everywhere already.
        m.namespaces.clear();
        assert!(Permissions::from_manifest(&m).check(&dep, Verb::Create, Reach::Namespace("c")).is_ok());
    }

    #[test]
    fn operator_narrowing() {
        let mut p = Permissions::from_manifest(&manifest());
        p.restrict_namespaces(["team-a".to_string()]);
        let dep = KindRef::new("apps/v1", "Deployment");
        assert!(p.check(&dep, Verb::Create, Reach::Namespace("team-a")).is_ok());
        assert!(p.check(&dep, Verb::Create, Reach::Namespace("team-b")).is_err());
        assert!(p.check(&dep, Verb::List, Reach::AllNamespaces).is_err());
        // A cluster-scoped kind is outside every namespace, whatever namespace is named.
        let err = p.check(&KindRef::new("v1", "Pod"), Verb::Get, Reach::of(false, Some("team-a"))).unwrap_err();
        assert!(matches!(err, Error::Forbidden(ref m) if m.contains("cluster-scoped")), "{err}");
        // Narrowing twice (manifest namespaces, then the operator's) keeps the overlap.
        p.restrict_namespaces(["team-a".to_string(), "team-c".to_string()]);
        assert!(p.check(&dep, Verb::Create, Reach::Namespace("team-c")).is_err());
        assert!(p.check(&dep, Verb::Create, Reach::Namespace("team-a")).is_ok());
        p.restrict_kinds(&[KindRef::new("v1", "Pod")]);
        assert!(p.check(&dep, Verb::Get, Reach::Namespace("team-a")).is_err());
    }
}
