//! The validating webhook's rules. Every message names the field and the rule.

use crate::defaults::{AFTER_APP, BEFORE_APP, NOT_UPDATE, ROLLING_UPDATE};
use crate::names::{dns1123_label, label_value, qualified_name, split_subscript};
use crate::scope;
use crate::types::{SidecarContainer, SidecarSet, SidecarSetUpdateStrategy};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::{BTreeMap, BTreeSet};

/// A count or a percentage, as Kubernetes' `ValidatePositiveIntOrPercent` (and so Kruise)
/// takes them: a percentage over 100 is accepted and means all.
fn int_or_percent(field: &str, v: &Option<IntOrString>, errs: &mut Vec<String>) {
    match v {
        Some(IntOrString::Int(i)) if *i < 0 => errs.push(format!("{field}: must be a non-negative integer, got {i}")),
        Some(IntOrString::String(s)) => {
            let ok = s.strip_suffix('%').is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
            if !ok {
                errs.push(format!("{field}: must be a non-negative integer or a percentage like \"10%\", got {s:?}"));
            }
        }
        _ => {}
    }
}

fn one_of(field: &str, v: Option<&str>, allowed: &[&str], errs: &mut Vec<String>) {
    if let Some(v) = v
        && !allowed.contains(&v)
    {
        errs.push(format!("{field}: unsupported value {v:?}, must be one of {}", allowed.join(", ")));
    }
}

/// Kubernetes' label selector rules (`ValidateLabelSelector`: operators, keys, values),
/// and Kruise's own: a SidecarSet's selectors may not be empty.
fn selector(field: &str, sel: &LabelSelector, errs: &mut Vec<String>) {
    if scope::is_empty(sel) {
        errs.push(format!("{field}: must not be empty (an empty selector would select every Pod)"));
    }
    for (k, v) in sel.match_labels.iter().flatten() {
        errs.extend(qualified_name(k).map(|e| format!("{field}.matchLabels: {e}")));
        errs.extend(label_value(v).map(|e| format!("{field}.matchLabels[{k}]: {e}")));
    }
    for (i, r) in sel.match_expressions.iter().flatten().enumerate() {
        let f = format!("{field}.matchExpressions[{i}]");
        errs.extend(qualified_name(&r.key).map(|e| format!("{f}.key: {e}")));
        for (j, v) in r.values.iter().flatten().enumerate() {
            errs.extend(label_value(v).map(|e| format!("{f}.values[{j}]: {e}")));
        }
        let values = r.values.as_ref().is_some_and(|v| !v.is_empty());
        match r.operator.as_str() {
            "In" | "NotIn" if !values => {
                errs.push(format!("{f}.values: must be specified when `operator` is 'In' or 'NotIn'"))
            }
            "Exists" | "DoesNotExist" if values => {
                errs.push(format!("{f}.values: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
            }
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            op => errs.push(format!(
                "{f}.operator: {op:?} is not a valid selector operator, must be one of In, NotIn, Exists, DoesNotExist"
            )),
        }
    }
}

fn containers(
    path: &str,
    list: &[SidecarContainer],
    volumes: &BTreeSet<&str>,
    seen: &mut BTreeSet<String>,
    errs: &mut Vec<String>,
) {
    for (i, c) in list.iter().enumerate() {
        let f = format!("spec.{path}[{i}]");
        let name = &c.container.name;
        if let Some(e) = crate::names::label_name(&f, name) {
            errs.push(e);
        } else if !seen.insert(name.clone()) {
            errs.push(format!("{f}.name: {name:?} is used by another container of this SidecarSet"));
        }
        if c.container.image.as_deref().unwrap_or("").trim().is_empty() {
            errs.push(format!("{f}.image: required"));
        }
        one_of(&format!("{f}.podInjectPolicy"), c.pod_inject_policy.as_deref(), &[BEFORE_APP, AFTER_APP], errs);
        let share = c.share_volume_policy.as_ref().and_then(|s| s.type_.as_deref());
        one_of(&format!("{f}.shareVolumePolicy.type"), share, &["enabled", "disabled"], errs);
        let devices = c.share_volume_device_policy.as_ref().and_then(|s| s.type_.as_deref());
        one_of(&format!("{f}.shareVolumeDevicePolicy.type"), devices, &["enabled", "disabled"], errs);
        match c.upgrade_strategy.as_ref().and_then(|u| u.upgrade_type.as_deref()) {
            None | Some("ColdUpgrade") => {}
            Some(crate::hot::HOT_UPGRADE) => hot(&f, c, seen, errs),
            Some(other) => errs.push(format!(
                "{f}.upgradeStrategy.upgradeType: unsupported value {other:?}, must be one of ColdUpgrade, HotUpgrade"
            )),
        }
        if let Some(p) = &c.resources_policy {
            let raw = serde_json::to_value(&c.container).unwrap_or_default();
            crate::resources::validate(p, &f, path == "initContainers", &raw, errs);
        }
        for (j, t) in c.transfer_env.iter().enumerate() {
            if let Some(r) = t.source_container_name_from.as_ref().and_then(|f| f.field_ref.as_ref()) {
                let f = format!("{f}.transferEnv[{j}].sourceContainerNameFrom.fieldRef");
                errs.extend(field_ref(&f, r.api_version.as_deref(), &r.field_path));
            }
        }
        for (j, m) in c.container.volume_mounts.iter().flatten().enumerate() {
            if !volumes.contains(m.name.as_str()) {
                errs.push(format!("{f}.volumeMounts[{j}].name: volume {:?} is not declared in spec.volumes", m.name));
            }
        }
    }
}

/// A HotUpgrade sidecar: it needs its empty image (Kruise accepts none, and then every
/// Pod it is injected into is refused for a container without an image), and its pair's
/// names (`hot`) must be free and valid.
fn hot(f: &str, c: &SidecarContainer, seen: &mut BTreeSet<String>, errs: &mut Vec<String>) {
    let empty = c.upgrade_strategy.as_ref().and_then(|u| u.hot_upgrade_empty_image.as_deref()).unwrap_or("");
    if empty.trim().is_empty() {
        errs.push(format!(
            "{f}.upgradeStrategy.hotUpgradeEmptyImage: required with upgradeType HotUpgrade (the image the idle container of the pair runs)"
        ));
    }
    let (a, b) = crate::hot::pair_names(&c.container.name);
    for n in [a, b] {
        if !dns1123_label(&n) {
            errs.push(format!(
                "{f}.name: HotUpgrade runs it as {n:?}, which must be a DNS-1123 label (at most 63 characters)"
            ));
        } else if !seen.insert(n.clone()) {
            errs.push(format!(
                "{f}.name: HotUpgrade runs it as {n:?}, a name another container of this SidecarSet uses"
            ));
        }
    }
}

/// Kruise's `validateSidecarContainerConflict`: a container's upgradeType cannot
/// change on update (a Pod's pair, or its lack, cannot be changed in place).
fn upgrade_type_kept(ss: &SidecarSet, old: &SidecarSet, errs: &mut Vec<String>) {
    let kind =
        |c: &SidecarContainer| c.upgrade_strategy.as_ref().and_then(|u| u.upgrade_type.clone()).unwrap_or_default();
    for (i, c) in ss.spec.containers.iter().enumerate() {
        let was = old.spec.containers.iter().find(|o| o.container.name == c.container.name).map(kind);
        if let Some(was) = was.filter(|w| !w.is_empty() && *w != kind(c)) {
            errs.push(format!(
                "spec.containers[{i}].upgradeStrategy.upgradeType: container {} upgradeType is immutable (was {was})",
                c.container.name
            ));
        }
    }
}

/// Kruise's `validateDownwardAPI` for `sourceContainerNameFrom.fieldRef`: apiVersion v1
/// and a Pod label or annotation by key (`metadata.name` and the bare maps pass
/// validation too, as in Kruise, though they name no container).
fn field_ref(f: &str, api_version: Option<&str>, path: &str) -> Option<String> {
    match api_version.unwrap_or("") {
        "" => return Some(format!("{f}.apiVersion: required")),
        "v1" => {}
        v => return Some(format!("{f}.apiVersion: unsupported pod version {v:?}, must be v1")),
    }
    if path.is_empty() {
        return Some(format!("{f}.fieldPath: required"));
    }
    match split_subscript(path) {
        Some(("metadata.annotations", key)) => {
            qualified_name(&key.to_lowercase()).map(|e| format!("{f}.fieldPath: invalid annotation key: {e}"))
        }
        Some(("metadata.labels", key)) => qualified_name(key).map(|e| format!("{f}.fieldPath: invalid label key: {e}")),
        Some((field, _)) => Some(format!("{f}.fieldPath: {field} does not support a subscript")),
        None if ["metadata.name", "metadata.labels", "metadata.annotations"].contains(&path) => None,
        None => Some(format!(
            "{f}.fieldPath: unsupported value {path:?}, must be metadata.labels['KEY'] or metadata.annotations['KEY']"
        )),
    }
}

fn names(ss: &SidecarSet) -> BTreeSet<&str> {
    ss.spec.init_containers.iter().chain(&ss.spec.containers).map(|c| c.container.name.as_str()).collect()
}

/// Checks `ss` (already defaulted); `old` on update; `others`: every other stored SidecarSet.
/// `priorityStrategy` and `scatterStrategy`, with Kruise's rules and messages.
fn update_order(u: &SidecarSetUpdateStrategy, errs: &mut Vec<String>) {
    if let Some(p) = &u.priority_strategy {
        let f = "spec.updateStrategy.priorityStrategy";
        if !p.weight_priority.is_empty() && !p.order_priority.is_empty() {
            errs.push(format!("{f}: only one of weightPriority and orderPriority can be used"));
        }
        for (i, w) in p.weight_priority.iter().enumerate() {
            if !(0..=100).contains(&w.weight) {
                errs.push(format!("{f}.weightPriority[{i}].weight: must be in the range 0-100, got {}", w.weight));
            }
            selector(&format!("{f}.weightPriority[{i}].matchSelector"), &w.match_selector, errs);
        }
        for (i, o) in p.order_priority.iter().enumerate() {
            if o.ordered_key.is_empty() {
                errs.push(format!("{f}.orderPriority[{i}].orderedKey: order key can not be empty"));
            }
        }
    }
    let mut seen = BTreeSet::new();
    for (i, t) in u.scatter_strategy.iter().enumerate() {
        let f = format!("spec.updateStrategy.scatterStrategy[{i}]");
        if t.key.is_empty() {
            errs.push(format!("{f}.key: key should not be empty"));
        }
        if !seen.insert((&t.key, &t.value)) {
            errs.push(format!("{f}: duplicated key={} value={}", t.key, t.value));
        }
    }
}

pub fn validate(ss: &SidecarSet, old: Option<&SidecarSet>, others: &[SidecarSet]) -> Result<(), String> {
    let mut errs = Vec::new();
    let name = ss.metadata.name.as_deref().unwrap_or("");
    if !dns1123_label(name) {
        errs.push(format!(
            "metadata.name: {name:?} must be a DNS-1123 label (a-z, 0-9, '-', at most 63 characters): it names the SidecarSet in Pod annotations"
        ));
    }
    match &ss.spec.selector {
        None => errs.push("spec.selector: required".into()),
        Some(s) => selector("spec.selector", s, &mut errs),
    }
    match (&ss.spec.namespace, &ss.spec.namespace_selector) {
        (Some(ns), Some(_)) if !ns.is_empty() => errs.push(
            "spec.namespace, spec.namespaceSelector: namespace and namespaceSelector are mutually exclusive".into(),
        ),
        (_, Some(s)) => selector("spec.namespaceSelector", s, &mut errs),
        _ => {}
    }
    if ss.spec.containers.is_empty() && ss.spec.init_containers.is_empty() {
        errs.push("spec.containers: at least one container or initContainer is required".into());
    }
    if let Some(n) = ss.spec.revision_history_limit.filter(|n| *n < 0) {
        errs.push(format!("spec.revisionHistoryLimit: must be a non-negative integer, got {n}"));
    }
    // It labels the set's ControllerRevisions (stricter than Kruise, which then fails
    // to record any).
    if let Some(e) = ss.spec.custom_version.as_deref().and_then(crate::names::label_value) {
        errs.push(format!("spec.customVersion: {e}"));
    }
    errs.extend(crate::volume::problems(&ss.spec.volumes));
    let volumes: BTreeSet<&str> = ss.spec.volumes.iter().map(|v| v.name()).collect();
    let mut seen = BTreeSet::new();
    containers("initContainers", &ss.spec.init_containers, &volumes, &mut seen, &mut errs);
    containers("containers", &ss.spec.containers, &volumes, &mut seen, &mut errs);
    let u = &ss.spec.update_strategy;
    one_of("spec.updateStrategy.type", u.type_.as_deref(), &[ROLLING_UPDATE, NOT_UPDATE], &mut errs);
    // Kruise checks the rest of the strategy only for RollingUpdate (the default).
    if u.type_.as_deref().unwrap_or(ROLLING_UPDATE) == ROLLING_UPDATE {
        let partitioned = match &u.partition {
            Some(IntOrString::Int(i)) => *i != 0,
            Some(IntOrString::String(_)) => true,
            None => false,
        };
        if partitioned && u.selector.is_some() {
            errs.push("spec.updateStrategy: partition and selector cannot be used together".into());
        }
        if let Some(s) = &u.selector {
            selector("spec.updateStrategy.selector", s, &mut errs);
        }
        int_or_percent("spec.updateStrategy.partition", &u.partition, &mut errs);
        int_or_percent("spec.updateStrategy.maxUnavailable", &u.max_unavailable, &mut errs);
        update_order(u, &mut errs);
        // A native sidecar (an init container that keeps running) cannot be restarted in
        // place with a new image, so Kruise refuses it with RollingUpdate.
        for (i, c) in ss.spec.init_containers.iter().enumerate() {
            if c.container.restart_policy.as_deref() == Some("Always") {
                errs.push(format!(
                    "spec.updateStrategy: initContainers[{i}] ({:?}) has restartPolicy Always, which cannot be updated in place; use updateStrategy.type NotUpdate",
                    c.container.name
                ));
            }
        }
    }
    let mut patched = BTreeSet::new();
    for (i, p) in ss.spec.patch_pod_metadata.iter().enumerate() {
        let f = format!("spec.patchPodMetadata[{i}]");
        one_of(
            &format!("{f}.patchPolicy"),
            p.patch_policy.as_deref(),
            &["Retain", "Overwrite", "MergePatchJson"],
            &mut errs,
        );
        if p.annotations.is_empty() {
            errs.push(format!("{f}.annotations: required (a patch without annotations patches nothing)"));
        }
        for k in p.annotations.keys() {
            if !patched.insert(k.as_str()) {
                errs.push(format!("{f}.annotations: {k:?} is already patched by an earlier entry"));
            }
        }
    }
    if let Some(old) = old {
        upgrade_type_kept(ss, old, &mut errs);
        let before = names(old);
        let added: Vec<&str> = names(ss).into_iter().filter(|n| !before.contains(n)).collect();
        if !added.is_empty() {
            errs.push(format!(
                "spec.containers: containers cannot be added or renamed on update (new: {}); create another SidecarSet instead",
                added.join(", ")
            ));
        }
    }
    crate::canary::validate(ss, old, others, &mut errs);
    // A canary never meets its base in one Pod: no conflict with it.
    let base = crate::canary::base_of(ss);
    for other in others {
        let me_or_base = other.metadata.name.as_deref() == Some(name) || other.metadata.name.as_deref() == base;
        if !me_or_base && scope::scopes_overlap(&ss.spec, &other.spec) {
            conflicts(ss, other, &mut errs);
        }
    }
    if errs.is_empty() { Ok(()) } else { Err(errs.join("; ")) }
}

/// Kruise's `validateSidecarConflict` against one other set whose Pods may overlap:
/// a container name used by both (containers against containers, init containers
/// against init containers), a volume of the same name defined differently, an
/// annotation both patch where either overwrites it.
fn conflicts(ss: &SidecarSet, other: &SidecarSet, errs: &mut Vec<String>) {
    let theirs = other.metadata.name.as_deref().unwrap_or("");
    let named = |l: &[SidecarContainer]| l.iter().map(|c| c.container.name.clone()).collect::<BTreeSet<_>>();
    for (path, mine, others) in [
        ("containers", &ss.spec.containers, &other.spec.containers),
        ("initContainers", &ss.spec.init_containers, &other.spec.init_containers),
    ] {
        let clash: Vec<String> = named(mine).intersection(&named(others)).cloned().collect();
        if !clash.is_empty() {
            errs.push(format!(
                "spec.{path}: container {} is also injected by SidecarSet {theirs:?}, whose scope overlaps this one",
                clash.join(", ")
            ));
        }
    }
    for v in &ss.spec.volumes {
        if other.spec.volumes.iter().any(|o| o.name() == v.name() && o != v) {
            errs.push(format!(
                "spec.volumes: volume {:?} is defined differently by SidecarSet {theirs:?}, whose scope overlaps this one",
                v.name()
            ));
        }
    }
    let policy =
        |p: &crate::types::SidecarSetPatchPodMetadata| p.patch_policy.clone().unwrap_or_else(|| "Retain".into());
    let patched_by_them: BTreeMap<&str, String> = other
        .spec
        .patch_pod_metadata
        .iter()
        .filter(|p| policy(p) != "Retain")
        .flat_map(|p| p.annotations.keys().map(move |k| (k.as_str(), policy(p))))
        .collect();
    for p in ss.spec.patch_pod_metadata.iter().filter(|p| policy(p) != "Retain") {
        for k in p.annotations.keys() {
            if patched_by_them.get(k.as_str()).is_some_and(|theirs| policy(p) == "Overwrite" || theirs == "Overwrite") {
                errs.push(format!(
                    "spec.patchPodMetadata: annotation {k:?} is also patched by SidecarSet {theirs:?} (one of them overwrites it), whose scope overlaps this one"
                ));
            }
        }
    }
}
