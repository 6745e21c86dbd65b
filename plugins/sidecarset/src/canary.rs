//! Canary SidecarSets (Kruise 1.9): a set annotated `apps.kruise.io/sidecarset-canary:
//! "true"` and `apps.kruise.io/sidecarset-base: BASE` tries a new sidecar on the Pods it
//! selects *instead of* its base set's.
//!
//! As Kruise: a Pod both select gets the canary's sidecars and not the base's; the
//! canary may reuse the base's container names (they never meet in one Pod); it must
//! name an existing base other than itself that is not a canary, keep that base for
//! its life, and use `updateStrategy.type: NotUpdate` (it is injected, not rolled).

use crate::defaults::NOT_UPDATE;
use crate::types::SidecarSet;

pub const CANARY: &str = "apps.kruise.io/sidecarset-canary";
pub const BASE: &str = "apps.kruise.io/sidecarset-base";

fn annotation<'a>(ss: &'a SidecarSet, key: &str) -> Option<&'a str> {
    ss.metadata.annotations.as_ref()?.get(key).map(String::as_str)
}

/// The base set `ss` is a canary of (Kruise's `IsCanarySidecarSet`), if it is one.
pub fn base_of(ss: &SidecarSet) -> Option<&str> {
    (annotation(ss, CANARY) == Some("true")).then(|| annotation(ss, BASE)).flatten().filter(|b| !b.is_empty())
}

/// Kruise's `validateSidecarSetCanaryAnnotations`; `others`: the other stored sets.
pub fn validate(ss: &SidecarSet, old: Option<&SidecarSet>, others: &[SidecarSet], errs: &mut Vec<String>) {
    let Some(base) = base_of(ss) else { return };
    let f = format!("metadata.annotations[{BASE}]");
    if Some(base) == ss.metadata.name.as_deref() {
        errs.push(format!("{f}: the base SidecarSet cannot be the canary itself"));
    }
    if let Some(old) = old
        && annotation(old, BASE) != Some(base)
    {
        errs.push(format!("{f}: immutable (was {:?})", annotation(old, BASE).unwrap_or("")));
    }
    match others.iter().find(|o| o.metadata.name.as_deref() == Some(base)) {
        None => errs.push(format!("{f}: base SidecarSet {base:?} not found")),
        Some(b) if base_of(b).is_some() => errs.push(format!("{f}: base SidecarSet {base:?} is itself a canary")),
        Some(_) => {}
    }
    if ss.spec.update_strategy.type_.as_deref() != Some(NOT_UPDATE) {
        errs.push(format!(
            "spec.updateStrategy.type: a canary SidecarSet ({CANARY}) must be NotUpdate; RollingUpdate is not supported"
        ));
    }
}

/// Of the sets that select a Pod, drops each one a selecting canary replaces.
pub fn replace_bases(sets: &mut Vec<&SidecarSet>) {
    let bases: Vec<String> = sets.iter().filter_map(|s| base_of(s)).map(str::to_owned).collect();
    sets.retain(|s| !bases.iter().any(|b| s.metadata.name.as_deref() == Some(b.as_str())));
}
