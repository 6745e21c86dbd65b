//! Per-plugin overrides from a plugin ConfigMap's annotations: limits (within the
//! host's ceilings) and narrowing of what the plugin may touch.
//!
//! | annotation | effect |
//! |---|---|
//! | `wasmop.io/deadline-seconds` | wall-clock deadline of one call |
//! | `wasmop.io/memory-mib` | linear memory of one instance |
//! | `wasmop.io/fuel` | fuel per call (when the host meters fuel) |
//! | `wasmop.io/max-instances` | instances of this plugin alive at once |
//! | `wasmop.io/reviews-per-instance` | admission reviews one instance serves (`1`: a fresh instance each) |
//! | `wasmop.io/allowed-namespaces` | `a,b`: the plugin's world is these namespaces |
//! | `wasmop.io/allowed-kinds` | `v1/ConfigMap,apps/v1/Deployment`: and these kinds |
//!
//! A value above its ceiling is lowered to the ceiling (and logged); a value that does
//! not parse refuses the plugin version with a message naming the annotation.

use crate::registry::Narrowing;
use crate::runtime::Limits;
use std::collections::BTreeMap;
use std::time::Duration;
use wasmop_sdk::KindRef;

pub const PREFIX: &str = "wasmop.io/";

/// The most any plugin may be given, set by whoever runs the host.
#[derive(Clone, Debug)]
pub struct Ceilings {
    pub deadline: Duration,
    pub memory_bytes: usize,
    /// None: the host does not meter fuel, so `wasmop.io/fuel` is refused.
    pub fuel: Option<u64>,
    /// Why not the host-wide slot count: one plugin must not be able to take every
    /// slot (the host sets this to half of them).
    pub max_instances: u32,
}

fn number<T: std::str::FromStr>(a: &BTreeMap<String, String>, key: &str) -> Result<Option<T>, String> {
    a.get(&format!("{PREFIX}{key}"))
        .map(|v| v.trim().parse::<T>().map_err(|_| format!("annotation {PREFIX}{key}: {v:?} is not a positive number")))
        .transpose()
}

fn list(a: &BTreeMap<String, String>, key: &str) -> Option<Vec<String>> {
    a.get(&format!("{PREFIX}{key}"))
        .map(|v| v.split(',').map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect())
}

fn clamp<T: PartialOrd + Copy + std::fmt::Debug>(what: &str, v: T, ceiling: T) -> T {
    if v > ceiling {
        tracing::warn!("annotation {PREFIX}{what}: {v:?} is above the host's ceiling {ceiling:?}; using the ceiling");
        ceiling
    } else {
        v
    }
}

/// `defaults` adjusted by `annotations`, and the operator's narrowing.
pub fn apply(
    annotations: &BTreeMap<String, String>,
    defaults: &Limits,
    ceilings: &Ceilings,
) -> Result<(Limits, Narrowing), String> {
    let mut l = defaults.clone();
    if let Some(s) = number::<u64>(annotations, "deadline-seconds")? {
        l.deadline = clamp("deadline-seconds", Duration::from_secs(s.max(1)), ceilings.deadline);
    }
    if let Some(m) = number::<usize>(annotations, "memory-mib")? {
        // Saturating: a huge number of MiB is "above the ceiling", not an overflow.
        l.memory_bytes = clamp("memory-mib", m.max(1).saturating_mul(1 << 20), ceilings.memory_bytes);
    }
    if let Some(f) = number::<u64>(annotations, "fuel")? {
        let Some(ceiling) = ceilings.fuel else {
            return Err(format!("annotation {PREFIX}fuel: this host does not meter fuel (start it with --fuel)"));
        };
        l.fuel = Some(clamp("fuel", f, ceiling));
    }
    if let Some(n) = number::<u32>(annotations, "max-instances")? {
        l.max_instances = clamp("max-instances", n.max(1), ceilings.max_instances);
    }
    if let Some(n) = number::<u32>(annotations, "reviews-per-instance")? {
        l.reviews_per_instance = n.max(1);
    }
    let kinds = list(annotations, "allowed-kinds")
        .map(|ks| {
            ks.iter()
                .map(|k| {
                    k.rsplit_once('/').map(|(v, k)| KindRef::new(v, k)).ok_or_else(|| {
                        format!(
                            "annotation {PREFIX}allowed-kinds: {k:?} is not API_VERSION/KIND (e.g. apps/v1/Deployment)"
                        )
                    })
                })
                .collect::<Result<Vec<_>, _>>()
        })
        .transpose()?;
    Ok((l, Narrowing { namespaces: list(annotations, "allowed-namespaces"), kinds }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ann(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (format!("{PREFIX}{k}"), v.to_string())).collect()
    }

    fn ceilings() -> Ceilings {
        Ceilings { deadline: Duration::from_secs(60), memory_bytes: 256 << 20, fuel: None, max_instances: 8 }
    }

    #[test]
    fn overrides_within_ceilings() {
        let (l, n) = apply(
            &ann(&[
                ("deadline-seconds", "5"),
                ("memory-mib", "4096"),
                ("max-instances", "2"),
                ("reviews-per-instance", "0"),
                ("allowed-namespaces", "a, b"),
            ]),
            &Limits::default(),
            &ceilings(),
        )
        .unwrap();
        assert_eq!(l.deadline, Duration::from_secs(5));
        assert_eq!(l.memory_bytes, 256 << 20, "clamped to the ceiling");
        assert_eq!(l.max_instances, 2);
        assert_eq!(l.reviews_per_instance, 1, "at least the one review an instance is made for");
        assert_eq!(n.namespaces, Some(vec!["a".to_string(), "b".to_string()]));
        let (_, n) =
            apply(&ann(&[("allowed-kinds", "v1/ConfigMap,apps/v1/Deployment")]), &Limits::default(), &ceilings())
                .unwrap();
        assert_eq!(n.kinds.unwrap()[1], KindRef::new("apps/v1", "Deployment"));
    }

    #[test]
    fn bad_values_name_the_annotation() {
        let e = apply(&ann(&[("deadline-seconds", "soon")]), &Limits::default(), &ceilings()).unwrap_err();
        assert!(e.contains("wasmop.io/deadline-seconds"), "{e}");
        let e = apply(&ann(&[("fuel", "1000")]), &Limits::default(), &ceilings()).unwrap_err();
        assert!(e.contains("does not meter fuel"), "{e}");
        let e = apply(&ann(&[("allowed-kinds", "Deployment")]), &Limits::default(), &ceilings()).unwrap_err();
        assert!(e.contains("API_VERSION/KIND"), "{e}");
    }

    #[test]
    fn huge_values_are_clamped_not_overflowed() {
        let (l, _) = apply(
            &ann(&[("memory-mib", &usize::MAX.to_string()), ("max-instances", "4000000000")]),
            &Limits::default(),
            &ceilings(),
        )
        .unwrap();
        assert_eq!(l.memory_bytes, 256 << 20);
        assert_eq!(l.max_instances, 8);
    }
}
