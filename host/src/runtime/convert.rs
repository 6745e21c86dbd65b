//! Between the generated WIT types and the host's domain types (the SDK's).

use super::bindings::exports::wasmop::operator::reconciler as rec;
use super::bindings::wasmop::operator::types;
use wasmop_sdk::{KindRef, Manifest, Mapping, ObjectRef, Permission, Verb, Watch};

pub fn kind(k: types::KindRef) -> KindRef {
    KindRef { api_version: k.api_version, kind: k.kind }
}

pub fn wit_ref(r: &ObjectRef) -> types::ObjectRef {
    types::ObjectRef {
        api_version: r.api_version.clone(),
        kind: r.kind.clone(),
        namespace: r.namespace.clone(),
        name: r.name.clone(),
    }
}

pub fn manifest(m: rec::PluginManifest) -> Manifest {
    Manifest {
        name: m.name,
        version: m.version,
        primary: kind(m.primary),
        namespaced: m.namespaced,
        namespaces: m.namespaces,
        owns: m.owns.into_iter().map(kind).collect(),
        watches: m
            .watches
            .into_iter()
            .map(|w| Watch {
                kind: kind(w.kind),
                mapping: match w.mapping {
                    rec::Mapping::AllPrimaries => Mapping::AllPrimaries,
                    rec::Mapping::Label(l) => Mapping::Label(l),
                    rec::Mapping::SameName => Mapping::SameName,
                },
            })
            .collect(),
        permissions: m
            .permissions
            .into_iter()
            .map(|p| Permission {
                kind: kind(p.kind),
                verbs: p
                    .verbs
                    .into_iter()
                    .map(|v| match v {
                        rec::Verb::Get => Verb::Get,
                        rec::Verb::List => Verb::List,
                        rec::Verb::Create => Verb::Create,
                        rec::Verb::Update => Verb::Update,
                        rec::Verb::UpdateStatus => Verb::UpdateStatus,
                        rec::Verb::Delete => Verb::Delete,
                    })
                    .collect(),
            })
            .collect(),
    }
}

pub fn to_wit(e: wasmop_sdk::Error) -> types::Error {
    match e {
        wasmop_sdk::Error::NotFound(m) => types::Error::NotFound(m),
        wasmop_sdk::Error::AlreadyExists(m) => types::Error::AlreadyExists(m),
        wasmop_sdk::Error::Conflict(m) => types::Error::Conflict(m),
        wasmop_sdk::Error::Forbidden(m) => types::Error::Forbidden(m),
        wasmop_sdk::Error::Invalid(m) => types::Error::Invalid(m),
        wasmop_sdk::Error::Unavailable(m) => types::Error::Unavailable(m),
        wasmop_sdk::Error::Internal(m) => types::Error::Internal(m),
    }
}

pub fn sdk_ref(r: types::ObjectRef) -> wasmop_sdk::ObjectRef {
    wasmop_sdk::ObjectRef { api_version: r.api_version, kind: r.kind, namespace: r.namespace, name: r.name }
}
