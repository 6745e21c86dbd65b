//! Who owns a plugin's name: the place that first loaded it (a ConfigMap, or a
//! directory of files). A version from anywhere else is refused, not swapped in.

use super::{LoadError, LoadedPlugin, PluginSpec};
use wasmop_sdk::ObjectRef;

impl LoadedPlugin {
    pub(super) fn place(&self) -> Place<'_> {
        Place::of(&self.origin, self.origin_object.as_ref())
    }
}

impl PluginSpec {
    /// Where this version comes from (see [`Place`]).
    pub fn place(&self) -> Place<'_> {
        Place::of(&self.origin, self.origin_object.as_ref())
    }
}

impl Place<'_> {
    /// Plugin `name` from this place, as the runtime keeps its compiled functions for its
    /// next compile (`runtime::reuse`): a name that another place takes later (once the
    /// first has removed it) starts afresh, and never reuses the first place's code.
    pub fn reuse_line(&self, name: &str) -> String {
        match self {
            Place::Object(o) => {
                format!("{}/{}/{}/{}#{name}", o.api_version, o.kind, o.namespace.as_deref().unwrap_or(""), o.name)
            }
            Place::Dir(dir) => format!("dir:{dir}#{name}"),
        }
    }
}

/// Where a plugin comes from, as far as owning its name goes: the object it came from
/// (a ConfigMap, whichever key), or else the directory of its file (`dir:/plugins`).
#[derive(Debug, PartialEq, Eq)]
pub enum Place<'a> {
    Object(&'a ObjectRef),
    Dir(&'a str),
}

impl<'a> Place<'a> {
    pub fn of(origin: &'a str, object: Option<&'a ObjectRef>) -> Self {
        match object {
            Some(o) => Place::Object(o),
            None => Place::Dir(origin.rsplit_once('/').map_or(origin, |(dir, _)| dir)),
        }
    }
}

/// A name belongs to the place that loaded it: a version from elsewhere (another
/// ConfigMap, in this namespace or another) is refused, not swapped in, so it cannot
/// take over the plugin's narrowing, webhook paths or lifetime.
pub(super) fn claim(name: &str, held: &LoadedPlugin, from: Place<'_>) -> Result<(), LoadError> {
    claim_from(name, &held.origin, held.place(), from)
}

fn claim_from(name: &str, held_origin: &str, held: Place<'_>, from: Place<'_>) -> Result<(), LoadError> {
    if held == from {
        return Ok(());
    }
    Err(LoadError::Conflict(format!(
        "plugin name {name:?} is already loaded from {held_origin}; plugin names must be unique"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmop_sdk::KindRef;

    #[test]
    fn a_plugin_name_belongs_to_the_place_that_loaded_it() {
        let cm = |ns: &str, name: &str| ObjectRef::new(&KindRef::new("v1", "ConfigMap"), Some(ns), name);
        let (a, b, other_ns) = (cm("ns", "a"), cm("ns", "b"), cm("other", "a"));
        let held = Place::of("configmap:ns/a#foo.wasm", Some(&a));
        let claim = |origin, object| {
            claim_from(
                "foo",
                "configmap:ns/a#foo.wasm",
                Place::of("configmap:ns/a#foo.wasm", Some(&a)),
                Place::of(origin, object),
            )
        };
        let e = claim("configmap:ns/b#foo.wasm", Some(&b)).unwrap_err();
        assert_eq!(e.kind(), "conflict");
        assert_eq!(
            e.to_string(),
            "plugin name \"foo\" is already loaded from configmap:ns/a#foo.wasm; plugin names must be unique"
        );
        assert!(claim("configmap:other/a#foo.wasm", Some(&other_ns)).is_err(), "same name, another namespace");
        assert!(claim("dir:/plugins/foo.wasm", None).is_err());
        assert!(claim("configmap:ns/a#foo.wasm.gz", Some(&a)).is_ok(), "a new version from the same ConfigMap");
        // What a source names when it removes: the object, without the key.
        assert_eq!(Place::of("configmap:ns/a", Some(&a)), held);
        assert_ne!(Place::of("configmap:ns/b", Some(&b)), held);
        // Files: the directory is the place.
        let file = Place::of("dir:/plugins/foo.wasm", None);
        assert_eq!(Place::of("dir:/plugins/foo.wasm.gz", None), file);
        assert_ne!(Place::of("dir:/other/foo.wasm", None), file);
        assert!(claim_from("foo", "dir:/plugins/foo.wasm", file, Place::of("dir:/other/foo.wasm", None)).is_err());
    }

    #[test]
    fn a_name_another_place_takes_later_has_a_reuse_line_of_its_own() {
        let cm = |ns: &str, name: &str| ObjectRef::new(&KindRef::new("v1", "ConfigMap"), Some(ns), name);
        let (a, b, other_ns) = (cm("ns", "a"), cm("ns", "b"), cm("other", "a"));
        let line = |origin, object| Place::of(origin, object).reuse_line("foo");
        let first = line("configmap:ns/a#foo.wasm", Some(&a));
        assert_eq!(line("configmap:ns/a#foo.wasm.gz", Some(&a)), first, "a new version from the same ConfigMap");
        assert_ne!(line("configmap:ns/b#foo.wasm", Some(&b)), first);
        assert_ne!(line("configmap:other/a#foo.wasm", Some(&other_ns)), first);
        assert_ne!(line("dir:/plugins/foo.wasm", None), first);
        assert_eq!(line("dir:/plugins/foo.wasm", None), line("dir:/plugins/foo.wasm.gz", None));
        assert_ne!(line("dir:/plugins/foo.wasm", None), line("dir:/other/foo.wasm", None));
        assert_ne!(Place::of("configmap:ns/a#foo.wasm", Some(&a)).reuse_line("bar"), first, "another name");
    }
}
