use crate::types::KindRef;
use serde::{Deserialize, Serialize};

/// A verb a plugin may use on a kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verb {
    Get,
    List,
    Create,
    Update,
    UpdateStatus,
    Delete,
}

impl Verb {
    pub const ALL: [Verb; 6] = [Verb::Get, Verb::List, Verb::Create, Verb::Update, Verb::UpdateStatus, Verb::Delete];

    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::UpdateStatus => "update-status",
            Verb::Delete => "delete",
        }
    }
}

/// Permission to use `verbs` on `kind`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Permission {
    pub kind: KindRef,
    pub verbs: Vec<Verb>,
}

/// How a change to a watched object maps to primaries to reconcile.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mapping {
    /// Every primary (in the object's namespace when primaries are namespaced).
    AllPrimaries,
    /// The primary named by this label's value, in the object's namespace.
    Label(String),
    /// The primary of the same name and namespace.
    SameName,
    /// The primaries whose label selector, at this field path from the primary's root
    /// (`["spec", "selector"]`), matches the object's labels before or after the change
    /// (in the object's namespace when primaries are namespaced). A primary whose
    /// selector is missing or invalid is reconciled on every change. Crosses the
    /// contract as `all-primaries` plus the `selectors` export, so hosts without
    /// selector mappings still run the plugin (reconciling every primary).
    Selector(Vec<String>),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Watch {
    pub kind: KindRef,
    pub mapping: Mapping,
}

/// What the host needs to run a plugin; see the WIT `manifest` record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub name: String,
    pub version: String,
    pub primary: KindRef,
    pub namespaced: bool,
    /// Empty: all namespaces.
    pub namespaces: Vec<String>,
    pub owns: Vec<KindRef>,
    pub watches: Vec<Watch>,
    pub permissions: Vec<Permission>,
    /// See [`Manifest::skip_own_writes`]. Crosses the contract as the `own-writes`
    /// export, so hosts without it still run the plugin (reconciling on its own writes).
    #[serde(default, rename = "skipOwnWrites")]
    pub skip_own_writes: bool,
    /// See [`Manifest::call_namespaces`]. Crosses the contract as the `reach` export.
    #[serde(default, rename = "callNamespaces", skip_serializing_if = "Vec::is_empty")]
    pub call_namespaces: Vec<String>,
}

impl Manifest {
    /// A manifest reconciling the Rust type `P` (namespaced unless [`Self::cluster_scoped`]).
    pub fn new<P: kube::core::Resource<DynamicType = ()>>(name: &str, version: &str) -> Self {
        Self::for_kind(name, version, KindRef::of::<P>())
    }

    pub fn for_kind(name: &str, version: &str, primary: KindRef) -> Self {
        Manifest {
            name: name.to_owned(),
            version: version.to_owned(),
            primary,
            namespaced: true,
            namespaces: Vec::new(),
            owns: Vec::new(),
            watches: Vec::new(),
            permissions: Vec::new(),
            skip_own_writes: false,
            call_namespaces: Vec::new(),
        }
    }

    pub fn cluster_scoped(mut self) -> Self {
        self.namespaced = false;
        self
    }

    /// Watch only these namespaces (default: all).
    pub fn namespaces<I: IntoIterator<Item = S>, S: Into<String>>(mut self, ns: I) -> Self {
        self.namespaces = ns.into_iter().map(Into::into).collect();
        self
    }

    /// For a plugin limited to [`Self::namespaces`]: namespaces where it may also call
    /// (its permissions apply there; `wasmop rbac` grants them there) without watching
    /// them, so reads there go to the apiserver. See the WIT `reach` interface.
    pub fn call_namespaces<I: IntoIterator<Item = S>, S: Into<String>>(mut self, ns: I) -> Self {
        self.call_namespaces = ns.into_iter().map(Into::into).collect();
        self
    }

    /// The plugin creates `O` with a controller ownerReference to the primary.
    pub fn owns<O: kube::core::Resource<DynamicType = ()>>(mut self) -> Self {
        self.owns.push(KindRef::of::<O>());
        self
    }

    pub fn watches<W: kube::core::Resource<DynamicType = ()>>(mut self, mapping: Mapping) -> Self {
        self.watches.push(Watch { kind: KindRef::of::<W>(), mapping });
        self
    }

    /// A change of a primary that is only its own reconcile's write to it (the state the
    /// apiserver answered that `update` or `update_status` with) does not reconcile it
    /// again; every other change does. For a reconcile that takes every step it can in
    /// one call: one that writes a status and counts on the next reconcile to read it
    /// back and go on must not set this (or must return [`crate::Action::requeue`]).
    /// See the WIT `own-writes` interface.
    pub fn skip_own_writes(mut self) -> Self {
        self.skip_own_writes = true;
        self
    }

    /// Allows `verbs` on `T`.
    pub fn allow<T: kube::core::Resource<DynamicType = ()>>(self, verbs: &[Verb]) -> Self {
        self.allow_kind(KindRef::of::<T>(), verbs)
    }

    pub fn allow_kind(mut self, kind: KindRef, verbs: &[Verb]) -> Self {
        match self.permissions.iter_mut().find(|p| p.kind == kind) {
            Some(p) => {
                for v in verbs {
                    if !p.verbs.contains(v) {
                        p.verbs.push(*v);
                    }
                }
            }
            None => self.permissions.push(Permission { kind, verbs: verbs.to_vec() }),
        }
        self
    }
}
