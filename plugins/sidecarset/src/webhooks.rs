//! The three admission handlers: default and validate SidecarSets, inject into Pods.

use crate::defaults::default;
use crate::inject::inject;
use crate::scope;
use crate::types::SidecarSet;
use k8s_openapi::api::core::v1::Namespace;
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use wasmop_sdk::{
    AdmissionRequest, AdmissionResponse, ClusterExt, Context, Handler, KindRef, ListParams, Operation, Webhooks,
};

pub const DEFAULT: &str = "default-sidecarset";
pub const VALIDATE: &str = "validate-sidecarset";
pub const INJECT: &str = "inject-pod";

pub struct SidecarSetWebhooks;

impl Webhooks for SidecarSetWebhooks {
    fn handlers(_settings: &str) -> Vec<Handler> {
        let ss = KindRef::of::<SidecarSet>();
        let pod = KindRef::new("v1", "Pod");
        vec![
            Handler::mutating(DEFAULT, ss.clone(), &[Operation::Create, Operation::Update]),
            Handler::validating(VALIDATE, ss, &[Operation::Create, Operation::Update]),
            Handler::mutating(INJECT, pod, &[Operation::Create]),
        ]
    }

    fn review(ctx: &Context<'_>, handler: &str, settings: &str, req: &AdmissionRequest) -> AdmissionResponse {
        match handler {
            DEFAULT => default_review(req),
            VALIDATE => validate_review(ctx, req, settings),
            INJECT => match req.typed::<PodParts>() {
                Ok(req) => inject_review(ctx, req, settings),
                Err(e) => AdmissionResponse::invalid(format!("not a Pod: {e}")),
            },
            other => AdmissionResponse::deny(format!("unknown handler {other:?}")),
        }
    }

    /// Every new Pod in a selected namespace comes here: its object is parsed into the
    /// few fields injection reads ([`PodParts`]), not into a tree of the whole Pod.
    fn review_text(
        ctx: &Context<'_>,
        handler: &str,
        settings: &str,
        request: &str,
    ) -> Result<AdmissionResponse, String> {
        if handler != INJECT {
            return wasmop_sdk::admission::review_whole::<Self>(ctx, handler, settings, request);
        }
        Ok(inject_review(ctx, AdmissionRequest::<PodParts>::from_text(request)?, settings))
    }
}

fn default_review(req: &AdmissionRequest) -> AdmissionResponse {
    let Some(obj) = &req.object else { return AdmissionResponse::allow() };
    let mut ss: SidecarSet = match serde_json::from_value(obj.clone()) {
        Ok(s) => s,
        Err(e) => return AdmissionResponse::invalid(format!("spec: not a valid SidecarSet: {e}")),
    };
    default(&mut ss);
    let mut out = obj.clone();
    out["spec"] = serde_json::to_value(&ss.spec).unwrap_or_default();
    out["metadata"]["annotations"] = serde_json::to_value(&ss.metadata.annotations).unwrap_or_default();
    AdmissionResponse::mutate(out)
}

fn validate_review(ctx: &Context<'_>, req: &AdmissionRequest, settings: &str) -> AdmissionResponse {
    let parse = |v: Option<&serde_json::Value>| v.map(|v| serde_json::from_value::<SidecarSet>(v.clone())).transpose();
    let (ss, old) = match (parse(req.object.as_ref()), parse(req.old_object.as_ref())) {
        (Ok(Some(s)), Ok(old)) => (s, old),
        (Ok(None), _) => return AdmissionResponse::allow(),
        (Err(e), _) | (_, Err(e)) => return AdmissionResponse::invalid(format!("spec: not a valid SidecarSet: {e}")),
    };
    let others: Vec<SidecarSet> = match ctx.list_of(&ListParams::default()) {
        Ok(l) => l,
        Err(e) => return AdmissionResponse::deny(format!("cannot list SidecarSets to check for conflicts: {e}")),
    };
    let old = if req.operation == Operation::Update { old } else { None };
    if let Some(msg) = beta_namespace(req, &ss, old.as_ref()) {
        return AdmissionResponse::invalid(msg);
    }
    let checks = crate::validate::validate(&ss, old.as_ref(), &others)
        .and_then(|()| crate::whitelist::check(settings, &ss))
        .and_then(|()| injected_revision(ctx, settings, &ss));
    match checks {
        Ok(()) => AdmissionResponse::allow(),
        Err(msg) => AdmissionResponse::invalid(msg),
    }
}

/// As Kruise's `validateSidecarSetInjectionStrategy`: the revision to inject is named
/// and exists, and the policy is one Kruise knows.
fn injected_revision(ctx: &Context<'_>, settings: &str, ss: &SidecarSet) -> Result<(), String> {
    use crate::pin::{ALWAYS, PARTIAL};
    let Some(info) = &ss.spec.injection_strategy.revision else { return Ok(()) };
    let f = "spec.injectionStrategy.revision";
    let rev = crate::pin::find(ctx, ss, crate::settings::revision_namespace(settings), info)
        .map_err(|e| format!("{f}: {e}"))?;
    // What it would inject must read, and its patches pass the admin's whitelist as
    // it stands now.
    let old = crate::pin::restore(ss, &rev).map_err(|e| format!("{f}: {e}"))?;
    crate::whitelist::check(settings, &old)
        .map_err(|e| format!("{f} ({}): {e}", rev.metadata.name.unwrap_or_default()))?;
    match info.policy.as_deref() {
        None | Some("" | ALWAYS | PARTIAL) => Ok(()),
        Some(p) => Err(format!("{f}.policy: Invalid policy {p:?}, supported: [{ALWAYS}, {PARTIAL}]")),
    }
}

/// `spec.namespace` is not part of v1beta1 (Kruise's v1beta1 schema refuses it). Both
/// versions share one schema here (see `types`), so the field is refused when a client
/// sets or changes it through v1beta1; an object written through v1alpha1 and then
/// updated through v1beta1 keeps its value.
fn beta_namespace(req: &AdmissionRequest, ss: &SidecarSet, old: Option<&SidecarSet>) -> Option<String> {
    let sent = req.request_kind.as_ref().unwrap_or(&req.kind);
    let ns = scope::namespace(&ss.spec)?;
    (sent.version == "v1beta1" && old.and_then(|o| scope::namespace(&o.spec)) != Some(ns)).then(|| {
        format!(
            "spec.namespace: not a field of apps.kruise.io/v1beta1; select the namespace with \
             spec.namespaceSelector.matchLabels[\"kubernetes.io/metadata.name\"]: {ns}"
        )
    })
}

/// Labels of namespace `ns`, read only when some SidecarSet selects by namespace labels.
pub fn namespace_labels(ctx: &Context<'_>, ns: &str) -> Result<BTreeMap<String, String>, wasmop_sdk::Error> {
    Ok(ctx.get_opt::<Namespace>(None, ns)?.and_then(|n| n.metadata.labels).unwrap_or_default())
}

fn inject_review(ctx: &Context<'_>, req: AdmissionRequest<PodParts>, settings: &str) -> AdmissionResponse {
    let Some(object) = req.object else { return AdmissionResponse::allow() };
    let (mut pod, pod_labels) = object.into_value();
    let ns = req.namespace.unwrap_or_default();
    // Every new Pod reads the same few SidecarSets: parsed once per change, not per Pod.
    let all = match ctx.list_shared::<SidecarSet>(&ListParams::default()) {
        Ok(l) => l,
        Err(e) => return AdmissionResponse::deny(format!("cannot list SidecarSets to inject sidecars: {e}")),
    };
    let mut sets: Vec<&SidecarSet> =
        all.iter().filter(|s| !s.spec.injection_strategy.paused && s.metadata.deletion_timestamp.is_none()).collect();
    let ns_labels = if sets.iter().any(|s| s.spec.namespace_selector.is_some()) {
        match namespace_labels(ctx, &ns) {
            Ok(l) => l,
            Err(e) => return AdmissionResponse::deny(format!("cannot read namespace {ns:?}: {e}")),
        }
    } else {
        BTreeMap::new()
    };
    let labels: BTreeMap<String, String> = pod_labels
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
        .collect();
    sets.retain(|s| scope::selects(&s.spec, &ns, &ns_labels, &labels));
    // Sets that pin new Pods to an earlier version (`injectionStrategy.revision`).
    let mut pinned = Vec::new();
    for s in &sets {
        let rev_ns = crate::settings::revision_namespace(settings);
        match crate::pin::for_new_pod(ctx, s, rev_ns, &labels, &req.uid) {
            Ok(Some(old)) => pinned.push(old),
            Ok(None) => {}
            Err(e) => {
                let name = s.metadata.name.as_deref().unwrap_or_default();
                return AdmissionResponse::deny(format!("SidecarSet {name}: spec.injectionStrategy.revision: {e}"));
            }
        }
    }
    let mut sets: Vec<&SidecarSet> =
        sets.into_iter().map(|s| pinned.iter().find(|p| p.metadata.name == s.metadata.name).unwrap_or(s)).collect();
    crate::canary::replace_bases(&mut sets);
    sets.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    // Only what injection changed goes back: no whole Pod to serialise here and to diff
    // in the host, on the path every new Pod takes.
    match inject(&mut pod, &pod_labels, &sets) {
        Ok(changed) if changed.is_empty() => AdmissionResponse::allow(),
        Ok(changed) => AdmissionResponse::patch_fields(&pod, &changed),
        Err(e) => AdmissionResponse::deny(e),
    }
}

/// The fields of a Pod that injection reads and writes ([`crate::inject::FIELDS`]), and its
/// labels: all the `inject-pod` handler parses of a Pod. The rest of a real one
/// (managedFields, tolerations, status...) is skipped by the parser, neither built nor
/// sent back.
#[derive(Clone, Debug, Default, Deserialize)]
struct PodParts {
    #[serde(default)]
    metadata: PartsMeta,
    #[serde(default)]
    spec: PartsSpec,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct PartsMeta {
    labels: Option<Value>,
    annotations: Option<Value>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PartsSpec {
    containers: Option<Value>,
    init_containers: Option<Value>,
    volumes: Option<Value>,
    image_pull_secrets: Option<Value>,
}

impl PodParts {
    /// The parts as a Pod of only those fields, the form `inject` reads and writes,
    /// and the labels apart.
    fn into_value(self) -> (Value, Value) {
        let (m, s) = (self.metadata, self.spec);
        let present = |pairs: Vec<(&str, Option<Value>)>| -> serde_json::Map<String, Value> {
            pairs.into_iter().filter_map(|(k, v)| Some((k.to_owned(), v?))).collect()
        };
        let meta = present(vec![("annotations", m.annotations)]);
        let spec = present(vec![
            ("containers", s.containers),
            ("initContainers", s.init_containers),
            ("volumes", s.volumes),
            ("imagePullSecrets", s.image_pull_secrets),
        ]);
        (serde_json::json!({"metadata": meta, "spec": spec}), m.labels.unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inject::FIELDS as INJECTED_FIELDS;

    /// `PodParts` names each of `inject::FIELDS`: one it missed would be dropped from
    /// every Pod's patch, as if the Pod never had it.
    #[test]
    fn pod_parts_keep_every_injected_field_and_skip_the_rest() {
        let mut pod = serde_json::json!({"metadata": {"labels": {"app": "web"}, "managedFields": [{"manager": "m"}]},
            "spec": {"tolerations": [{"key": "k"}]}, "status": {}});
        for (i, field) in INJECTED_FIELDS.iter().enumerate() {
            let (parent, key) = field[1..].split_once('/').unwrap();
            pod[parent][key] = serde_json::json!([i]);
        }
        let (parts, labels) = serde_json::from_value::<PodParts>(pod.clone()).unwrap().into_value();
        assert_eq!(labels, pod["metadata"]["labels"]);
        for field in INJECTED_FIELDS {
            assert_eq!(parts.pointer(field), pod.pointer(field), "{field}");
        }
        let kept = |p: &str| parts[p].as_object().unwrap().len();
        assert_eq!(kept("metadata") + kept("spec"), INJECTED_FIELDS.len(), "nothing else: {parts}");
    }
}
