//! The Memcached API, `cache.example.com/v1alpha1`. The CRD in `deploy/crds/` is
//! generated from these types (see the `crd_is_up_to_date` test).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The memcached image used when `spec.image` is not set.
pub const DEFAULT_IMAGE: &str = "docker.io/library/memcached:1.6.38-alpine";

/// A memcached cluster: a Deployment of `size` memcached Pods.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "cache.example.com",
    version = "v1alpha1",
    kind = "Memcached",
    namespaced,
    status = "MemcachedStatus",
    shortname = "mc",
    printcolumn = r#"{"name":"Size","type":"integer","jsonPath":".spec.size"}"#,
    printcolumn = r#"{"name":"Ready","type":"integer","jsonPath":".status.readyReplicas"}"#,
    printcolumn = r#"{"name":"Available","type":"string","jsonPath":".status.conditions[?(@.type==\"Available\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct MemcachedSpec {
    /// Number of memcached Pods.
    #[schemars(range(min = 0, max = 100))]
    pub size: i32,
    /// The port memcached listens on.
    #[serde(default = "default_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub container_port: i32,
    /// The memcached image (default: an official memcached 1.6 alpine image).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub image: Option<String>,
}

fn default_port() -> i32 {
    11211
}

/// Observed state.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemcachedStatus {
    /// Names of the memcached Pods, sorted.
    #[serde(default)]
    pub nodes: Vec<String>,
    /// Pods of the Deployment that are ready.
    #[serde(default)]
    pub ready_replicas: i32,
    /// Available, Progressing and Degraded.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}
