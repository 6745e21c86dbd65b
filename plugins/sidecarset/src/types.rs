//! The SidecarSet API, `apps.kruise.io/v1alpha1` and `v1beta1`, with OpenKruise's
//! field names so existing SidecarSet YAML applies unchanged. The CRD in `deploy/crds/`
//! is generated from these types by [`crd`] (see the `crd_is_up_to_date` test).
//!
//! Both versions are served with one schema and `conversion: None`: Kruise's two
//! versions differ only in v1alpha1's `spec.namespace` (v1beta1: a namespaceSelector
//! on `kubernetes.io/metadata.name`) and v1beta1's `spec.customVersion` (v1alpha1: a
//! label), and this plugin reads either form in either version, so a conversion
//! webhook would add a network hop to every read for no change in behaviour. What a
//! client sees: an object written through one version reads back unchanged through
//! the other (Kruise's webhook would rewrite `namespace` into a selector). The
//! validating webhook refuses `spec.namespace` sent as v1beta1, as Kruise's schema does.
//!
//! Enumerations are strings here, as in Kruise's CRD: the validating webhook rejects
//! bad values with a message naming the field, instead of a bare schema error.

use crate::volume::Volume;
use k8s_openapi::api::core::v1::{Container, LocalObjectReference, ObjectFieldSelector};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Sidecar containers injected into the Pods it selects, and kept up to date.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "apps.kruise.io",
    version = "v1alpha1",
    kind = "SidecarSet",
    status = "SidecarSetStatus",
    printcolumn = r#"{"name":"MATCHED","type":"integer","jsonPath":".status.matchedPods","description":"Pods that carry this SidecarSet's sidecars"}"#,
    printcolumn = r#"{"name":"UPDATED","type":"integer","jsonPath":".status.updatedPods","description":"Matched Pods at the current sidecar version"}"#,
    printcolumn = r#"{"name":"READY","type":"integer","jsonPath":".status.readyPods","description":"Matched Pods that are Running and Ready"}"#,
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct SidecarSetSpec {
    /// Pods to inject into (required, non-empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// Only Pods in this namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Only Pods in namespaces with these labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub init_containers: Vec<SidecarContainer>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub containers: Vec<SidecarContainer>,
    /// Volumes the sidecars mount; only the referenced ones are added to a Pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "preserve_list")]
    pub volumes: Vec<Volume>,
    #[serde(default)]
    pub update_strategy: SidecarSetUpdateStrategy,
    #[serde(default)]
    pub injection_strategy: SidecarSetInjectionStrategy,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<LocalObjectReference>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub patch_pod_metadata: Vec<SidecarSetPatchPodMetadata>,
    /// How many ControllerRevisions of this set to keep (default 10, at least 1);
    /// revisions a Pod or `injectionStrategy.revision` still names are kept beyond it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision_history_limit: Option<i32>,
    /// `apps.kruise.io/v1beta1`'s name for what v1alpha1 carries as the label
    /// `apps.kruise.io/sidecarset-custom-version`: the version the set's latest
    /// ControllerRevision is labelled with (either form works in either version).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_version: Option<String>,
}

/// A core Container plus how to inject it.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SidecarContainer {
    #[serde(flatten)]
    pub container: Container,
    /// BeforeAppContainer or AfterAppContainer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_inject_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_volume_policy: Option<ShareVolumePolicy>,
    /// enabled: the sidecar also gets every volume device of the app containers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_volume_device_policy: Option<ShareVolumePolicy>,
    /// Environment variables copied from the Pod's own containers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub transfer_env: Vec<TransferEnvVar>,
    /// The sidecar's resources computed from the Pod's own containers at injection
    /// (see `resources`); exclusive with the sidecar's own `resources`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources_policy: Option<ResourcesPolicy>,
    /// How the sidecar is upgraded: ColdUpgrade (restart in place with the new image) or
    /// HotUpgrade (a pair of containers that take turns, see `hot`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade_strategy: Option<SidecarContainerUpgradeStrategy>,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SidecarContainerUpgradeStrategy {
    /// ColdUpgrade (Kruise's default) or HotUpgrade; immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade_type: Option<String>,
    /// With HotUpgrade, required: the image the idle container of the pair runs (the
    /// sidecar's command and probes, doing no work).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hot_upgrade_empty_image: Option<String>,
}

/// Kruise's `ResourcesPolicy`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourcesPolicy {
    /// sum or max: how the target containers' resources are combined.
    pub target_containers_mode: String,
    /// Which of the Pod's containers are targets: a regular expression searched for in
    /// their names (unanchored, as Go's MatchString); defaulted to ".*".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_containers_name_regex: Option<String>,
    pub resources_expr: ResourcesExpr,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourcesExpr {
    /// Expressions over `cpu` / `memory` (the targets' combined limits); a target
    /// without a limit makes that limit unlimited, and the sidecar gets none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<ResourceExprs>,
    /// Expressions over `cpu` / `memory` (the targets' combined requests; a missing
    /// request counts 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<ResourceExprs>,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceExprs {
    /// For example `max(cpu*50%, 50m)`: + - * /, max(a, b), min(a, b), quantities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<String>,
    /// For example `memory*20% + 100Mi`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShareVolumePolicy {
    /// enabled: the sidecar also mounts every volume the app containers mount.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TransferEnvVar {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_container_name: Option<String>,
    /// The source container's name read from the Pod instead (it wins over
    /// `sourceContainerName`): `fieldRef.fieldPath` `metadata.labels['KEY']` or
    /// `metadata.annotations['KEY']`, as in Kruise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_container_name_from: Option<SourceContainerNameSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_name: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_names: Vec<String>,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourceContainerNameSource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_ref: Option<ObjectFieldSelector>,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SidecarSetUpdateStrategy {
    /// RollingUpdate (default) or NotUpdate.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// Only Pods also matching this selector are updated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// Matched Pods (count or percentage) kept at the old sidecar version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<IntOrString>,
    /// Matched Pods (count or percentage) that may be unavailable during the update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
    /// Which waiting Pods are updated first (see `order`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_strategy: Option<UpdatePriorityStrategy>,
    /// Labels whose Pods are spread across the update instead of updated together
    /// (`value: "*"`: each value of the key).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scatter_strategy: Vec<UpdateScatterTerm>,
}

/// Kruise's `UpdatePriorityStrategy`: weights or order keys, not both.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdatePriorityStrategy {
    /// Pods with the first listed label key first, then by the number its value ends in,
    /// highest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub order_priority: Vec<UpdatePriorityOrderTerm>,
    /// Pods with the highest sum of the weights of the selectors they match first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub weight_priority: Vec<UpdatePriorityWeightTerm>,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdatePriorityOrderTerm {
    pub ordered_key: String,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdatePriorityWeightTerm {
    /// 0 to 100.
    pub weight: i32,
    pub match_selector: LabelSelector,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdateScatterTerm {
    pub key: String,
    pub value: String,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SidecarSetInjectionStrategy {
    /// True: new Pods are not injected.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// Inject an earlier version of the sidecars, kept as a ControllerRevision, into
    /// new Pods (for example the stable one during a canary rollout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<SidecarSetInjectRevision>,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SidecarSetInjectRevision {
    /// The latest revision labelled with this custom version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_version: Option<String>,
    /// This ControllerRevision (in the plugin's revision namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision_name: Option<String>,
    /// Always (default): every new Pod gets that revision. Partial: new Pods outside
    /// `updateStrategy.selector` get it; the others get it with the probability of a
    /// percentage `updateStrategy.partition`, else the latest version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SidecarSetPatchPodMetadata {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Retain (default: keep the Pod's value), Overwrite, or MergePatchJson.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch_policy: Option<String>,
}

/// Observed state.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SidecarSetStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Pods that carry this SidecarSet's sidecars.
    #[serde(default)]
    pub matched_pods: i32,
    /// Matched Pods whose sidecars are at the current version.
    #[serde(default)]
    pub updated_pods: i32,
    /// Matched Pods that are Running and Ready.
    #[serde(default)]
    pub ready_pods: i32,
    /// Matched Pods both updated and ready.
    #[serde(default)]
    pub updated_ready_pods: i32,
    /// The name of the ControllerRevision holding the current version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_revision: Option<String>,
    /// Hash collisions met while naming revisions (a part of the next name's hash).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collision_count: Option<i32>,
}

/// The CRD: [`SidecarSet::crd`] (v1alpha1, the stored version) served as v1beta1 too.
///
/// The core Container fields of the sidecars are described once, by a pointer to
/// `kubectl explain pod.spec.containers`, rather than field by field: their copied
/// descriptions made up three quarters of the CRD, and with two versions it came
/// within 10 KB of the 256 KiB that a client-side `kubectl apply` can store.
pub fn crd() -> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    use kube::CustomResourceExt;
    let mut crd = serde_json::to_value(SidecarSet::crd()).expect("a CRD serializes");
    let spec = &mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
    for list in ["containers", "initContainers"] {
        let items = &mut spec[list]["items"];
        items["description"] = serde_json::json!(
            "A core/v1 Container (its fields: kubectl explain pod.spec.containers) and how to inject it."
        );
        for (name, field) in items["properties"].as_object_mut().into_iter().flatten() {
            if !SIDECAR_FIELDS.contains(&name.as_str()) {
                drop_descriptions(field);
            }
        }
    }
    let mut crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition =
        serde_json::from_value(crd).expect("still a CRD");
    let mut beta = crd.spec.versions[0].clone();
    beta.name = "v1beta1".into();
    beta.storage = false;
    crd.spec.versions.push(beta);
    crd
}

/// The fields a SidecarContainer adds to a core Container.
const SIDECAR_FIELDS: [&str; 6] = [
    "podInjectPolicy",
    "shareVolumePolicy",
    "shareVolumeDevicePolicy",
    "transferEnv",
    "resourcesPolicy",
    "upgradeStrategy",
];

fn drop_descriptions(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(m) => {
            // A schema's description is a string; a field named "description" is not.
            if m.get("description").is_some_and(serde_json::Value::is_string) {
                m.remove("description");
            }
            m.values_mut().for_each(drop_descriptions);
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(drop_descriptions),
        _ => {}
    }
}

/// Volumes are passed through as the core API defines them; the apiserver validates
/// them when they reach a Pod. Keeps the CRD small.
fn preserve_list(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "items": { "type": "object", "x-kubernetes-preserve-unknown-fields": true }
    })
}
