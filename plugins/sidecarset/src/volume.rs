//! A SidecarSet's volume: kept as the JSON object the core API defines, with its name
//! checked and its nulls dropped, the way a typed decode would leave it.
//!
//! Why not k8s-openapi's `Volume`: its derived deserializer, every volume source
//! inlined into it, became two wasm functions of 70 and 90 KB once the plugin was
//! built for speed (opt-level 2), and Cranelift took ~400 MiB and 8 s to compile the
//! plugin, against 60 MiB and 2 s without it (BENCHMARKS.md, issue 23). The plugin
//! only names, compares and copies volumes; the apiserver validates their sources when
//! they reach a Pod, and `validate` checks that each has exactly one.
//!
//! Caveat: a field the core API does not know is kept (a typed decode drops it). It
//! reaches an injected Pod's patch (which the apiserver decodes into the core API's
//! Pod) and the set's revision data, whose hash then differs from Kruise's.

use serde::de::{Deserializer, Error as _};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One entry of a SidecarSet's `spec.volumes`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Volume(Map<String, Value>);

impl Volume {
    /// The volume's name (a decoded volume always has one).
    pub fn name(&self) -> &str {
        self.0.get("name").and_then(Value::as_str).unwrap_or_default()
    }

    /// Every field but `name`, with its value: the volume's source (one, when valid).
    pub fn sources(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.0.iter().filter(|(k, _)| *k != "name").map(|(k, v)| (k.as_str(), v))
    }
}

impl<'de> Deserialize<'de> for Volume {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Volume, D::Error> {
        let mut fields = Map::deserialize(d)?;
        match fields.get("name") {
            Some(Value::String(_)) => {}
            None | Some(Value::Null) => return Err(D::Error::missing_field("name")),
            Some(other) => {
                return Err(D::Error::custom(format!("volume name: invalid type: {other}, expected a string")));
            }
        }
        drop_nulls(&mut fields);
        Ok(Volume(fields))
    }
}

/// What the core API's `ValidateVolumes` would refuse in `volumes` (Kruise runs it on a
/// SidecarSet's volumes): a name that is no DNS-1123 label, a name used twice, no
/// volume source or more than one, a source that is not an object. Deeper checks of a
/// source are the apiserver's, when the volume reaches a Pod.
pub fn problems(volumes: &[Volume]) -> Vec<String> {
    let mut errs = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for (i, v) in volumes.iter().enumerate() {
        let f = format!("spec.volumes[{i}]");
        let name = v.name();
        if let Some(e) = crate::names::label_name(&f, name) {
            errs.push(e);
        } else if !seen.insert(name) {
            errs.push(format!("{f}.name: duplicate value {name:?}"));
        }
        let mut sources = v.sources();
        match sources.next() {
            None => errs.push(format!("{f}: must specify a volume type")),
            Some((k, s)) if !s.is_object() => errs.push(format!("{f}.{k}: must be an object, got {s}")),
            Some(_) => {}
        }
        if let Some((k, _)) = sources.next() {
            errs.push(format!("{f}.{k}: may not specify more than 1 volume type"));
        }
    }
    errs
}

/// A typed decode reads a null as an absent field.
fn drop_nulls(fields: &mut Map<String, Value>) {
    fields.retain(|_, v| !v.is_null());
    for v in fields.values_mut() {
        if let Value::Object(inner) = v {
            drop_nulls(inner);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_volume_keeps_its_source_drops_nulls_and_needs_a_name() {
        let v: Volume = serde_json::from_value(
            json!({"name": "cfg", "configMap": {"name": "envoy", "items": null}, "secret": null}),
        )
        .unwrap();
        assert_eq!(v.name(), "cfg");
        assert_eq!(serde_json::to_value(&v).unwrap(), json!({"name": "cfg", "configMap": {"name": "envoy"}}));
        assert_eq!(v.sources().map(|(k, _)| k).collect::<Vec<_>>(), ["configMap"]);
        let e = serde_json::from_value::<Volume>(json!({"emptyDir": {}})).unwrap_err();
        assert!(e.to_string().contains("missing field `name`"), "{e}");
        let e = serde_json::from_value::<Volume>(json!({"name": 5, "emptyDir": {}})).unwrap_err();
        assert!(e.to_string().contains("volume name: invalid type"), "{e}");
    }

    #[test]
    fn problems_name_the_volume_field_as_the_core_api_would() {
        let vols: Vec<Volume> = serde_json::from_value(json!([
            {"name": "ok", "emptyDir": {}},
            {"name": "ok", "emptyDir": {}},
            {"name": "Bad_Name", "emptyDir": {}},
            {"name": "none"},
            {"name": "two", "emptyDir": {}, "hostPath": {"path": "/x"}},
            {"name": "flat", "hostPath": "/x"}
        ]))
        .unwrap();
        assert_eq!(
            problems(&vols),
            [
                "spec.volumes[1].name: duplicate value \"ok\"",
                "spec.volumes[2].name: \"Bad_Name\" must be a DNS-1123 label (a-z, 0-9, '-', at most 63 characters)",
                "spec.volumes[3]: must specify a volume type",
                "spec.volumes[4].hostPath: may not specify more than 1 volume type",
                "spec.volumes[5].hostPath: must be an object, got \"/x\"",
            ]
        );
        assert!(problems(&vols[..1]).is_empty());
    }
}
