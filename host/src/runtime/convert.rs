//! Between the generated WIT types and the host's domain types (the SDK's).

use super::bindings::exports::wasmop::operator::reconciler as rec;
use super::bindings::exports::wasmop::operator::selectors as sel;
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

/// What the optional exports beside `manifest` answered (their defaults for a plugin
/// without them).
#[derive(Default)]
pub struct Extras {
    /// `own-writes`.
    pub skip_own_writes: bool,
    /// `reach`.
    pub call_namespaces: Vec<String>,
}

/// The plugin's manifest, with the watches its `selectors` export narrows (each must
/// name a watch with mapping `all-primaries`, once) and the other exports' answers.
pub fn manifest(m: rec::PluginManifest, selectors: Vec<sel::SelectorWatch>, e: Extras) -> Result<Manifest, String> {
    let mut m = Manifest { skip_own_writes: e.skip_own_writes, call_namespaces: e.call_namespaces, ..plain(m) };
    for s in selectors {
        let k = kind(s.kind);
        let w = m.watches.iter_mut().find(|w| w.kind == k && w.mapping == Mapping::AllPrimaries).ok_or_else(|| {
            format!("selector-watches: {k} is not among the manifest's watches with mapping all-primaries")
        })?;
        if s.path.is_empty() {
            return Err(format!("selector-watches: {k}: the selector's path is empty"));
        }
        w.mapping = Mapping::Selector(s.path);
    }
    Ok(m)
}

fn plain(m: rec::PluginManifest) -> Manifest {
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
        skip_own_writes: false,
        call_namespaces: Vec::new(),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn wit_kind(api_version: &str, kind: &str) -> types::KindRef {
        types::KindRef { api_version: api_version.into(), kind: kind.into() }
    }

    fn manifest_watching(mapping: rec::Mapping) -> rec::PluginManifest {
        rec::PluginManifest {
            name: "sets".into(),
            version: "1".into(),
            primary: wit_kind("apps.kruise.io/v1alpha1", "SidecarSet"),
            namespaced: false,
            namespaces: vec![],
            owns: vec![],
            watches: vec![rec::Watch { kind: wit_kind("v1", "Pod"), mapping }],
            permissions: vec![],
        }
    }

    fn selecting(kind: &str, path: &[&str]) -> Vec<sel::SelectorWatch> {
        vec![sel::SelectorWatch { kind: wit_kind("v1", kind), path: path.iter().map(|s| s.to_string()).collect() }]
    }

    #[test]
    fn a_selector_watch_narrows_the_all_primaries_watch_of_its_kind() {
        let m = manifest(
            manifest_watching(rec::Mapping::AllPrimaries),
            selecting("Pod", &["spec", "selector"]),
            Extras::default(),
        )
        .unwrap();
        assert_eq!(m.watches[0].mapping, Mapping::Selector(vec!["spec".into(), "selector".into()]));
        let m = manifest(manifest_watching(rec::Mapping::AllPrimaries), vec![], Extras::default()).unwrap();
        assert!(!m.skip_own_writes);
        assert!(m.call_namespaces.is_empty());
        let extras = Extras { skip_own_writes: true, call_namespaces: vec!["b".into()] };
        let with = manifest(manifest_watching(rec::Mapping::AllPrimaries), vec![], extras).unwrap();
        assert!(with.skip_own_writes);
        assert_eq!(with.call_namespaces, ["b"]);
        assert_eq!(m.watches[0].mapping, Mapping::AllPrimaries, "a plugin without selectors keeps its mapping");
    }

    #[test]
    fn a_selector_watch_for_no_such_watch_or_with_no_path_is_refused_by_name() {
        let e =
            manifest(manifest_watching(rec::Mapping::AllPrimaries), selecting("Secret", &["spec"]), Extras::default())
                .unwrap_err();
        assert!(e.contains("v1/Secret is not among the manifest's watches"), "{e}");
        let e = manifest(manifest_watching(rec::Mapping::SameName), selecting("Pod", &["spec"]), Extras::default())
            .unwrap_err();
        assert!(e.contains("v1/Pod is not among the manifest's watches with mapping all-primaries"), "{e}");
        let e = manifest(manifest_watching(rec::Mapping::AllPrimaries), selecting("Pod", &[]), Extras::default())
            .unwrap_err();
        assert!(e.contains("path is empty"), "{e}");
    }
}
