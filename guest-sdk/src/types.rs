use serde::{Deserialize, Serialize};
use std::fmt;

/// Names one Kubernetes object.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    pub api_version: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
}

impl ObjectRef {
    pub fn new(kind: &KindRef, namespace: Option<&str>, name: &str) -> Self {
        ObjectRef {
            api_version: kind.api_version.clone(),
            kind: kind.kind.clone(),
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
        }
    }

    /// The reference of a JSON object; None when apiVersion, kind or name is missing.
    pub fn of_json(object: &serde_json::Value) -> Option<Self> {
        Some(ObjectRef {
            api_version: object.get("apiVersion")?.as_str()?.to_owned(),
            kind: object.get("kind")?.as_str()?.to_owned(),
            namespace: object
                .pointer("/metadata/namespace")
                .and_then(|n| n.as_str())
                .filter(|n| !n.is_empty())
                .map(str::to_owned),
            name: object.pointer("/metadata/name")?.as_str()?.to_owned(),
        })
    }

    pub fn kind_ref(&self) -> KindRef {
        KindRef::new(&self.api_version, &self.kind)
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{}/{} {}/{}", self.api_version, self.kind, ns, self.name),
            None => write!(f, "{}/{} {}", self.api_version, self.kind, self.name),
        }
    }
}

/// A kind: `apps/v1` + `Deployment`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KindRef {
    pub api_version: String,
    pub kind: String,
}

impl KindRef {
    pub fn new(api_version: &str, kind: &str) -> Self {
        KindRef { api_version: api_version.to_owned(), kind: kind.to_owned() }
    }

    /// The kind of a Rust type (k8s-openapi type or kube `CustomResource`).
    pub fn of<T: kube::core::Resource<DynamicType = ()>>() -> Self {
        KindRef { api_version: T::api_version(&()).into_owned(), kind: T::kind(&()).into_owned() }
    }

    /// The API group ("" for the core group).
    pub fn group(&self) -> &str {
        self.api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("")
    }
}

impl fmt::Display for KindRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.api_version, self.kind)
    }
}

/// A failed cluster call, as the contract's `error` variant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    NotFound(String),
    AlreadyExists(String),
    Conflict(String),
    Forbidden(String),
    Invalid(String),
    Unavailable(String),
    Internal(String),
}

impl Error {
    pub fn message(&self) -> &str {
        match self {
            Error::NotFound(m)
            | Error::AlreadyExists(m)
            | Error::Conflict(m)
            | Error::Forbidden(m)
            | Error::Invalid(m)
            | Error::Unavailable(m)
            | Error::Internal(m) => m,
        }
    }

    /// The contract's name for this case (`not-found`, `conflict`, ...).
    pub fn code(&self) -> &'static str {
        match self {
            Error::NotFound(_) => "not-found",
            Error::AlreadyExists(_) => "already-exists",
            Error::Conflict(_) => "conflict",
            Error::Forbidden(_) => "forbidden",
            Error::Invalid(_) => "invalid",
            Error::Unavailable(_) => "unavailable",
            Error::Internal(_) => "internal",
        }
    }

    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::NotFound(_))
    }

    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Conflict(_))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code(), self.message())
    }
}

impl std::error::Error for Error {}

/// Event severity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventType {
    Normal,
    Warning,
}

/// Log severity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

/// What to do after a successful reconcile.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Action {
    /// Reconcile again after this long even if nothing changes.
    pub requeue_after: Option<std::time::Duration>,
}

impl Action {
    /// Done until something changes.
    pub fn done() -> Self {
        Action::default()
    }

    /// Look again after `after`, for example while waiting for Pods to become ready.
    pub fn requeue(after: std::time::Duration) -> Self {
        Action { requeue_after: Some(after) }
    }
}

/// A failed reconcile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReconcileError {
    pub message: String,
    /// True: the host retries with exponential backoff; false: it waits for a change.
    pub retry: bool,
}

impl ReconcileError {
    /// An error the host retries with backoff.
    pub fn retry(message: impl Into<String>) -> Self {
        ReconcileError { message: message.into(), retry: true }
    }

    /// An error retrying cannot fix (bad spec, missing permission): wait for a change.
    pub fn permanent(message: impl Into<String>) -> Self {
        ReconcileError { message: message.into(), retry: false }
    }
}

impl fmt::Display for ReconcileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Cluster errors retry, except those no retry fixes without a change of spec or RBAC.
impl From<Error> for ReconcileError {
    fn from(e: Error) -> Self {
        let retry = !matches!(e, Error::Forbidden(_) | Error::Invalid(_));
        ReconcileError { message: e.to_string(), retry }
    }
}

impl From<serde_json::Error> for ReconcileError {
    fn from(e: serde_json::Error) -> Self {
        ReconcileError::permanent(format!("JSON: {e}"))
    }
}
