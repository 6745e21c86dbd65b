//! `resourcesPolicy`: a sidecar's resources computed, when a Pod is created, from the
//! resources of the Pod's own containers (Kruise >= 1.9,
//! `pkg/webhook/pod/mutating/sidecarset_resources.go`).
//!
//! Flow: the *targets* are the Pod's native-sidecar init containers (restartPolicy
//! Always), then its containers, as they were before injection, less every container
//! named by a SidecarSet being injected, whose names the policy's regex finds
//! (unanchored). Their cpu and memory are combined (`sum` or `max`); each expression of
//! the policy (`calc`) then gets the combined value as `memory` if its text has the
//! word `memory`, else as `cpu` — Kruise binds one variable so, whatever the field.
//!
//! Guarantees, as Kruise's: a limit is *unlimited* when any target has none; the
//! sidecar then gets no such limit, and its expression is not evaluated. A missing
//! request counts 0. The sidecar's whole `resources` is replaced. No target, or an
//! expression that fails (negative, two quantities multiplied), refuses the Pod with
//! the reason. The policy applies at creation only: an in-place update changes
//! images, never resources.

use crate::calc::{self, Val, go_int64};
use crate::quantity::{Format, Quantity};
use crate::types::{ResourcesPolicy, SidecarSet};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};

pub const SUM: &str = "sum";
pub const MAX: &str = "max";
pub const DEFAULT_REGEX: &str = ".*";
const RESOURCES: [(&str, &str); 2] = [("cpu", "CPU"), ("memory", "memory")];

/// The containers of `pod` (as it came) a policy may read: native-sidecar init
/// containers, then containers, less the sidecars of `sets`.
pub fn candidates<'a>(pod: &'a Value, sets: &[&SidecarSet]) -> Vec<&'a Value> {
    let sidecars: BTreeSet<&str> = sets
        .iter()
        .flat_map(|s| s.spec.init_containers.iter().chain(&s.spec.containers))
        .map(|c| c.container.name.as_str())
        .collect();
    let list = |k: &str| pod["spec"][k].as_array().into_iter().flatten();
    let native = list("initContainers").filter(|c| c["restartPolicy"] == "Always");
    native.chain(list("containers")).filter(|c| c["name"].as_str().is_none_or(|n| !sidecars.contains(n))).collect()
}

/// The sidecar's `resources` under `policy`, from `candidates`. Err: why the Pod is refused.
pub fn compute(policy: &ResourcesPolicy, candidates: &[&Value]) -> Result<Value, String> {
    let regex = policy.target_containers_name_regex.as_deref().unwrap_or(DEFAULT_REGEX);
    let re = regex_lite::Regex::new(regex)
        .map_err(|e| format!("failed to get target containers: invalid regex pattern {regex:?}: {e}"))?;
    let targets: Vec<&Value> =
        candidates.iter().copied().filter(|c| c["name"].as_str().is_some_and(|n| re.is_match(n))).collect();
    if targets.is_empty() {
        return Err(format!("no containers match the regex pattern {regex:?}"));
    }
    let mut out = Map::new();
    let exprs = &policy.resources_expr;
    for (kind, block) in [("limits", &exprs.limits), ("requests", &exprs.requests)] {
        let Some(block) = block else { continue };
        let mut values = Map::new();
        for ((res, label), expr) in RESOURCES.iter().zip([&block.cpu, &block.memory]) {
            let Some(expr) = expr.as_deref().filter(|e| !e.is_empty()) else { continue };
            let combined = combine(&targets, kind, res, &policy.target_containers_mode)?;
            let value = match (kind, combined) {
                ("limits", None) => continue,
                (_, c) => c.unwrap_or_else(Quantity::zero),
            };
            let q = evaluate(expr, value).map_err(|e| {
                format!("failed to evaluate {label} {kind} expression: failed to parse expression {expr:?}: {e}")
            })?;
            values.insert((*res).into(), json!(q.to_string()));
        }
        if !values.is_empty() {
            out.insert(kind.into(), Value::Object(values));
        }
    }
    Ok(Value::Object(out))
}

/// The targets' `kind.res` combined by `mode`. None: a limit some target does not set
/// (unlimited), or a request none sets.
fn combine(targets: &[&Value], kind: &str, res: &str, mode: &str) -> Result<Option<Quantity>, String> {
    let mut values = Vec::new();
    for c in targets {
        match &c["resources"][kind][res] {
            Value::Null if kind == "limits" => return Ok(None),
            Value::Null => {}
            v => {
                let s = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
                let q = Quantity::parse(&s).map_err(|e| {
                    format!("container {}: resources.{kind}.{res}: {e}", c["name"].as_str().unwrap_or(""))
                })?;
                values.push(q);
            }
        }
    }
    Ok(match mode {
        SUM => {
            let total = values.iter().try_fold(Quantity::zero(), |a, q| a.add(q))?;
            (kind == "limits" || !total.is_zero()).then_some(total)
        }
        // The first of equals wins (its format is the one printed).
        MAX => values.into_iter().reduce(|a, q| if q.cmp(&a).is_gt() { q } else { a }),
        _ => None,
    })
}

/// One expression with `value` bound as Kruise binds it (see the module doc).
fn evaluate(expr: &str, value: Quantity) -> Result<Quantity, String> {
    let var = if has_word(expr, "memory") { "memory" } else { "cpu" };
    let vars = BTreeMap::from([(var.to_owned(), Val::Q(value))]);
    Ok(match calc::eval(expr, &vars)? {
        Val::Q(q) => q,
        Val::Num(n) if var == "cpu" => Quantity::from_milli(go_int64(n * 1000.0), Format::DecimalSI),
        Val::Num(n) => Quantity::from_milli(go_int64(n).saturating_mul(1000), Format::DecimalSI),
    })
}

/// Go's `\bword\b`, case-sensitive.
fn has_word(text: &str, word: &str) -> bool {
    let w = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_');
    let bytes = text.as_bytes();
    text.match_indices(word)
        .any(|(i, _)| !w(i.checked_sub(1).and_then(|j| bytes.get(j))) && !w(bytes.get(i + word.len())))
}

/// Kruise's `validateResourcesPolicy` for the sidecar at `field` (`is_init`: an init
/// container), with its messages; `resources` is the sidecar's own.
pub fn validate(p: &ResourcesPolicy, field: &str, is_init: bool, c: &Value, errs: &mut Vec<String>) {
    let f = format!("{field}.resourcesPolicy");
    if is_init && c["restartPolicy"] != "Always" {
        errs.push(format!("{f}: resourcesPolicy is only supported for containers with RestartPolicy Always"));
    }
    let set = |k: &str| c["resources"][k].as_object().is_some_and(|m| !m.is_empty());
    if set("limits") || set("requests") {
        errs.push(format!("{f}: resourcesPolicy and resources cannot be configured together"));
        return;
    }
    if ![SUM, MAX].contains(&p.target_containers_mode.as_str()) {
        errs.push(format!(
            "{f}.targetContainersMode: unsupported value {:?}: supported values: \"sum\", \"max\"",
            p.target_containers_mode
        ));
    }
    match p.target_containers_name_regex.as_deref() {
        Some("") => errs.push(format!("{f}.targetContainersNameRegex: invalid empty regex")),
        Some(r) => {
            if let Err(e) = regex_lite::Regex::new(r) {
                errs.push(format!("{f}.targetContainersNameRegex: invalid regex pattern: {e}"));
            }
        }
        None => {}
    }
    let exprs = &p.resources_expr;
    if exprs.limits.is_none() && exprs.requests.is_none() {
        errs.push(format!("{f}.resourcesExpr: at least one of limits or requests must be configured"));
        return;
    }
    for (kind, block) in [("limits", &exprs.limits), ("requests", &exprs.requests)] {
        let Some(block) = block else { continue };
        for ((res, _), expr) in RESOURCES.iter().zip([&block.cpu, &block.memory]) {
            let Some(expr) = expr.as_deref().filter(|e| !e.is_empty()) else { continue };
            // As Kruise: the field's own variable, as the number 1.
            let vars = BTreeMap::from([((*res).to_owned(), Val::Num(1.0))]);
            if let Err(e) = calc::eval(expr, &vars) {
                errs.push(format!("{f}.resourcesExpr.{kind}.{res}: invalid expression: {e}"));
            }
        }
    }
}

#[cfg(test)]
#[path = "resources_tests.rs"]
mod tests;
