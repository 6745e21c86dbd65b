//! Defaulting and the version hashes, as OpenKruise does them.

use crate::types::{SidecarContainer, SidecarSet, SidecarSetSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use sha2::{Digest, Sha256};

pub const HASH: &str = "kruise.io/sidecarset-hash";
pub const HASH_WITHOUT_IMAGE: &str = "kruise.io/sidecarset-hash-without-image";
pub const INJECTED_LIST: &str = "kruise.io/sidecarset-injected-list";
/// The env var every injected sidecar carries (`"true"`), as Kruise's `SidecarEnvKey`.
pub const IS_INJECTED: &str = "IS_INJECTED";

pub const BEFORE_APP: &str = "BeforeAppContainer";
pub const AFTER_APP: &str = "AfterAppContainer";
pub const ROLLING_UPDATE: &str = "RollingUpdate";
pub const NOT_UPDATE: &str = "NotUpdate";

/// Sets `o` to `v` when it is unset or empty: Go's defaulting (Kubernetes' and
/// Kruise's) cannot tell an empty string from a missing one, and the hashes must agree.
fn fill<'a>(o: &'a mut Option<String>, v: &str) -> &'a mut String {
    if o.as_deref().is_none_or(str::is_empty) {
        *o = Some(v.to_owned());
    }
    o.as_mut().expect("just set")
}

/// [`fill`] for a number, where 0 is Go's unset.
fn fill_n(o: &mut Option<i32>, v: i32) {
    if o.is_none_or(|n| n == 0) {
        *o = Some(v);
    }
}

/// Fills every default in place (idempotent).
pub fn default(ss: &mut SidecarSet) {
    let spec = &mut ss.spec;
    let u = &mut spec.update_strategy;
    let ty = fill(&mut u.type_, ROLLING_UPDATE);
    if ty == ROLLING_UPDATE {
        u.max_unavailable.get_or_insert(IntOrString::Int(1));
        u.partition.get_or_insert(IntOrString::Int(0));
    }
    for c in &mut spec.containers {
        default_container(c, BEFORE_APP);
    }
    for c in &mut spec.init_containers {
        default_container(c, AFTER_APP);
    }
    spec.revision_history_limit.get_or_insert(10);
    for p in &mut spec.patch_pod_metadata {
        fill(&mut p.patch_policy, "Retain");
    }
    // Kruise's CRD default.
    if let Some(r) = &mut spec.injection_strategy.revision {
        fill(&mut r.policy, crate::pin::ALWAYS);
    }
    let (h, w) = hashes(spec);
    let a = ss.metadata.annotations.get_or_insert_with(Default::default);
    a.insert(HASH.into(), h);
    a.insert(HASH_WITHOUT_IMAGE.into(), w);
}

fn default_container(c: &mut SidecarContainer, policy: &str) {
    fill(&mut c.pod_inject_policy, policy);
    let share = c.share_volume_policy.get_or_insert_with(Default::default);
    fill(&mut share.type_, "disabled");
    let upgrade = c.upgrade_strategy.get_or_insert_with(Default::default);
    fill(&mut upgrade.upgrade_type, "ColdUpgrade");
    for t in &mut c.transfer_env {
        if let Some(r) = t.source_container_name_from.as_mut().and_then(|f| f.field_ref.as_mut()) {
            fill(&mut r.api_version, "v1");
        }
    }
    // Kruise's CRD default; an explicit "" stays, and validation refuses it.
    if let Some(p) = &mut c.resources_policy {
        p.target_containers_name_regex.get_or_insert_with(|| crate::resources::DEFAULT_REGEX.into());
    }
    let k = &mut c.container;
    // The kubelet's defaults for a Container, so the stored SidecarSet shows what Pods get.
    if k.image_pull_policy.as_deref().is_none_or(str::is_empty) {
        let image = k.image.as_deref().unwrap_or("");
        let tag = image.rsplit('/').next().unwrap_or("").split_once(':').map(|(_, t)| t);
        let latest = !image.contains('@') && matches!(tag, None | Some("latest"));
        k.image_pull_policy = Some(if latest { "Always" } else { "IfNotPresent" }.into());
    }
    fill(&mut k.termination_message_path, "/dev/termination-log");
    fill(&mut k.termination_message_policy, "File");
    for p in k.ports.iter_mut().flatten() {
        fill(&mut p.protocol, "TCP");
    }
    // The rest of Kruise's setDefaultContainer (Kubernetes' own defaults, which Kruise
    // applies to these probes and handlers only): the hashes cover them.
    for e in k.env.iter_mut().flatten() {
        if let Some(r) = e.value_from.as_mut().and_then(|v| v.field_ref.as_mut()) {
            fill(&mut r.api_version, "v1");
        }
    }
    let http = |h: &mut Option<k8s_openapi::api::core::v1::HTTPGetAction>| {
        if let Some(h) = h {
            fill(&mut h.path, "/");
            fill(&mut h.scheme, "HTTP");
        }
    };
    for p in [&mut k.liveness_probe, &mut k.readiness_probe].into_iter().flatten() {
        fill_n(&mut p.timeout_seconds, 1);
        fill_n(&mut p.period_seconds, 10);
        fill_n(&mut p.success_threshold, 1);
        fill_n(&mut p.failure_threshold, 3);
        http(&mut p.http_get);
    }
    if let Some(l) = &mut k.lifecycle {
        for h in [&mut l.post_start, &mut l.pre_stop].into_iter().flatten() {
            http(&mut h.http_get);
        }
    }
}

fn sha(v: &serde_json::Value) -> String {
    // serde_json sorts object keys (no preserve_order), so equal specs hash equally.
    hex(&Sha256::digest(v.to_string().as_bytes()))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// (hash of the containers, hash of the containers with images blanked), Kruise's
/// (`gojson`): equal "without image" hashes mean only images changed, so Pods can be
/// updated in place.
pub fn hashes(spec: &SidecarSetSpec) -> (String, String) {
    crate::gojson::kruise_hashes(spec)
}

/// The hashes this plugin wrote before it wrote Kruise's (hex sha256 of the containers
/// and every init container, an unspelled ColdUpgrade left out): Pods injected then
/// still count as up to date, and stay updatable in place.
pub fn legacy_hashes(spec: &SidecarSetSpec) -> (String, String) {
    let all: Vec<&SidecarContainer> = spec.init_containers.iter().chain(&spec.containers).collect();
    let mut with = serde_json::to_value(&all).unwrap_or_default();
    for c in with.as_array_mut().into_iter().flatten() {
        let u = &c["upgradeStrategy"];
        let cold =
            matches!(u["upgradeType"].as_str(), None | Some("ColdUpgrade")) && u["hotUpgradeEmptyImage"].is_null();
        if cold && let Some(c) = c.as_object_mut() {
            c.remove("upgradeStrategy");
        }
    }
    let mut without = with.clone();
    for c in without.as_array_mut().into_iter().flatten() {
        c["image"] = serde_json::Value::Null;
    }
    (sha(&with), sha(&without))
}

/// `spec` without the defaults this plugin added when it began to hash as Kruise
/// (probe, httpGet and fieldRef defaults), where they hold their default value: a
/// SidecarSet defaulted since then still yields the legacy hashes its older Pods carry
/// (an explicitly written default yields them unstripped, hence both are accepted).
fn without_new_defaults(spec: &SidecarSetSpec) -> SidecarSetSpec {
    let mut spec = spec.clone();
    let drop = |o: &mut Option<String>, v: &str| {
        if o.as_deref() == Some(v) {
            *o = None;
        }
    };
    let drop_n = |o: &mut Option<i32>, v: i32| {
        if *o == Some(v) {
            *o = None;
        }
    };
    for c in spec.containers.iter_mut().chain(&mut spec.init_containers) {
        for t in &mut c.transfer_env {
            if let Some(r) = t.source_container_name_from.as_mut().and_then(|f| f.field_ref.as_mut()) {
                drop(&mut r.api_version, "v1");
            }
        }
        let k = &mut c.container;
        for e in k.env.iter_mut().flatten() {
            if let Some(r) = e.value_from.as_mut().and_then(|v| v.field_ref.as_mut()) {
                drop(&mut r.api_version, "v1");
            }
        }
        let http = |h: &mut Option<k8s_openapi::api::core::v1::HTTPGetAction>| {
            if let Some(h) = h {
                drop(&mut h.path, "/");
                drop(&mut h.scheme, "HTTP");
            }
        };
        for p in [&mut k.liveness_probe, &mut k.readiness_probe].into_iter().flatten() {
            drop_n(&mut p.timeout_seconds, 1);
            drop_n(&mut p.period_seconds, 10);
            drop_n(&mut p.success_threshold, 1);
            drop_n(&mut p.failure_threshold, 3);
            http(&mut p.http_get);
        }
        if let Some(l) = &mut k.lifecycle {
            for h in [&mut l.post_start, &mut l.pre_stop].into_iter().flatten() {
                http(&mut h.http_get);
            }
        }
    }
    spec
}

/// Every (hash, hash without image) a Pod at the SidecarSet's current version may
/// carry: the set's own annotations (written by whichever controller defaulted it),
/// Kruise's computed from the spec, and this plugin's legacy ones.
pub fn accepted_hashes(ss: &SidecarSet) -> (Vec<String>, Vec<String>) {
    let mut with = Vec::new();
    let mut without = Vec::new();
    let older = [legacy_hashes(&ss.spec), legacy_hashes(&without_new_defaults(&ss.spec))];
    for (h, w) in [current_hashes(ss), hashes(&ss.spec)].into_iter().chain(older) {
        if !with.contains(&h) {
            with.push(h);
        }
        if !without.contains(&w) {
            without.push(w);
        }
    }
    (with, without)
}

/// The SidecarSet's current hashes: from its annotations (written by the defaulting
/// webhook), or computed when they are missing.
pub fn current_hashes(ss: &SidecarSet) -> (String, String) {
    let a = ss.metadata.annotations.as_ref();
    match (a.and_then(|a| a.get(HASH)), a.and_then(|a| a.get(HASH_WITHOUT_IMAGE))) {
        (Some(h), Some(w)) => (h.clone(), w.clone()),
        _ => hashes(&ss.spec),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::SidecarContainerUpgradeStrategy;

    fn c_upgrade(ss: &SidecarSet) -> Option<&str> {
        ss.spec.containers[0].upgrade_strategy.as_ref().and_then(|u| u.upgrade_type.as_deref())
    }

    #[test]
    fn defaults_and_hashes() {
        let mut ss: SidecarSet = serde_json::from_value(serde_json::json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": "s"},
            "spec": {"selector": {"matchLabels": {"a": "b"}},
                     "containers": [{"name": "log", "image": "busybox:1.36"}],
                     "initContainers": [{"name": "init", "image": "busybox"}]}
        }))
        .unwrap();
        default(&mut ss);
        let c = &ss.spec.containers[0];
        assert_eq!(c.pod_inject_policy.as_deref(), Some(BEFORE_APP));
        assert_eq!(c.container.image_pull_policy.as_deref(), Some("IfNotPresent"));
        assert_eq!(ss.spec.init_containers[0].pod_inject_policy.as_deref(), Some(AFTER_APP));
        assert_eq!(ss.spec.init_containers[0].container.image_pull_policy.as_deref(), Some("Always"));
        assert_eq!(ss.spec.update_strategy.max_unavailable, Some(IntOrString::Int(1)));
        let (h1, w1) = current_hashes(&ss);
        ss.spec.containers[0].container.image = Some("busybox:1.37".into());
        let (h2, w2) = hashes(&ss.spec);
        assert_ne!(h1, h2);
        assert_eq!(w1, w2, "only the image changed");
        let mut unspelled = ss.spec.clone();
        unspelled.containers[0].upgrade_strategy = Some(SidecarContainerUpgradeStrategy::default());
        assert_eq!(
            legacy_hashes(&unspelled),
            legacy_hashes(&ss.spec),
            "legacy: ColdUpgrade spelled out is the default"
        );
        assert_eq!(c_upgrade(&ss), Some("ColdUpgrade"), "Kruise's default, spelled out");
        assert_eq!(ss.spec.revision_history_limit, Some(10));
        let before = ss.clone();
        default(&mut ss);
        default(&mut ss);
        assert_eq!(ss.spec, {
            let mut b = before;
            default(&mut b);
            b.spec
        });
    }
}
