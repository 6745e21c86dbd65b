//! Mutating/ValidatingWebhookConfigurations written from the plugins' declared
//! handlers, pointing at the host by URL (a local control plane) or by Service (in a
//! cluster). `wasmop webhook-config` prints them; `deploy/` carries the Service form.

use serde_json::{Value, json};
use wasmop_sdk::{Handler, KindRef, Operation};

/// Where the apiserver reaches the host's webhook server.
#[derive(Clone, Debug)]
pub enum Endpoint {
    /// `https://127.0.0.1:9443`: a host outside the cluster.
    Url(String),
    Service {
        namespace: String,
        name: String,
        port: u16,
    },
}

/// What every generated webhook shares.
#[derive(Clone, Debug)]
pub struct Options {
    /// Name of both configurations (the host injects its CA into them by this name).
    pub name: String,
    pub endpoint: Endpoint,
    /// PEM; None leaves `caBundle` for the host (or cert-manager's CA injector) to fill.
    pub ca_bundle: Option<String>,
    /// Namespaces never sent to the webhooks. Why kube-system and the host's own: a
    /// Pod webhook with `failurePolicy: Fail` must not block the host from starting.
    pub exclude_namespaces: Vec<String>,
    /// The plugin's narrowing (`wasmop.io/allowed-namespaces`): only these namespaces
    /// are sent, so the apiserver does not ask for reviews the host would refuse.
    pub only_namespaces: Option<Vec<String>>,
    /// `Fail` (default: an unreachable host rejects, never silently skips policy) or `Ignore`.
    pub failure_policy: String,
    /// Why 10 s: the apiserver's maximum is 30; the host denies at its own 8 s deadline first.
    pub timeout_seconds: u32,
}

/// The resource name of a kind, as kubebuilder derives it: lower case, plural.
pub fn plural(kind: &str) -> String {
    let k = kind.to_ascii_lowercase();
    if k.ends_with('s') || k.ends_with("ch") || k.ends_with("sh") || k.ends_with('x') {
        format!("{k}es")
    } else if let Some(stem) = k.strip_suffix('y').filter(|s| !s.ends_with(['a', 'e', 'i', 'o', 'u'])) {
        format!("{stem}ies")
    } else {
        format!("{k}s")
    }
}

fn rule(kind: &KindRef, ops: &[Operation]) -> Value {
    let (group, version) = kind.api_version.rsplit_once('/').unwrap_or(("", &kind.api_version));
    let ops: Vec<&str> = ops
        .iter()
        .map(|o| match o {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        })
        .collect();
    json!({ "apiGroups": [group], "apiVersions": [version], "resources": [plural(&kind.kind)], "operations": ops, "scope": "*" })
}

fn client_config(o: &Options, plugin: &str, handler: &str) -> Value {
    let path = format!("/{plugin}/{handler}");
    let mut c = match &o.endpoint {
        Endpoint::Url(base) => json!({ "url": format!("{}{path}", base.trim_end_matches('/')) }),
        Endpoint::Service { namespace, name, port } => {
            json!({ "service": { "namespace": namespace, "name": name, "port": port, "path": path } })
        }
    };
    if let Some(ca) = &o.ca_bundle {
        use base64::Engine as _;
        c["caBundle"] = json!(base64::engine::general_purpose::STANDARD.encode(ca));
    }
    c
}

/// The configurations for `plugins` (name, handlers): a Mutating one when any handler
/// mutates, a Validating one when any validates.
pub fn configurations(o: &Options, plugins: &[(String, Vec<Handler>)]) -> Vec<Value> {
    let mut out = Vec::new();
    for (mutating, kind) in [(true, "MutatingWebhookConfiguration"), (false, "ValidatingWebhookConfiguration")] {
        let webhooks: Vec<Value> = plugins
            .iter()
            .flat_map(|(p, hs)| hs.iter().filter(move |h| h.mutating == mutating).map(move |h| (p, h)))
            .map(|(p, h)| {
                let mut w = json!({
                    "name": format!("{}.{}.wasmop.io", h.name, p),
                    "clientConfig": client_config(o, p, &h.name),
                    "rules": h.kinds.iter().map(|k| rule(k, &h.operations)).collect::<Vec<_>>(),
                    "failurePolicy": o.failure_policy,
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "timeoutSeconds": o.timeout_seconds,
                    "matchPolicy": "Equivalent",
                });
                let mut selector = Vec::new();
                if !o.exclude_namespaces.is_empty() {
                    selector.push(json!({
                        "key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": o.exclude_namespaces,
                    }));
                }
                if let Some(only) = &o.only_namespaces {
                    selector.push(json!({ "key": "kubernetes.io/metadata.name", "operator": "In", "values": only }));
                }
                if !selector.is_empty() {
                    w["namespaceSelector"] = json!({ "matchExpressions": selector });
                }
                if mutating {
                    // Another mutating webhook may add containers after us; run again then.
                    w["reinvocationPolicy"] = json!("IfNeeded");
                }
                w
            })
            .collect();
        if !webhooks.is_empty() {
            out.push(json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": kind,
                "metadata": { "name": o.name, "labels": { "app.kubernetes.io/managed-by": "wasmop" } },
                "webhooks": webhooks,
            }));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plurals_follow_kubebuilder() {
        assert_eq!(plural("Pod"), "pods");
        assert_eq!(plural("SidecarSet"), "sidecarsets");
        assert_eq!(plural("Ingress"), "ingresses");
        assert_eq!(plural("NetworkPolicy"), "networkpolicies");
        assert_eq!(plural("Gateway"), "gateways");
    }

    #[test]
    fn one_configuration_per_direction_with_paths_per_handler() {
        let o = Options {
            name: "wasmop".into(),
            endpoint: Endpoint::Service { namespace: "wasmop-system".into(), name: "wasmop".into(), port: 443 },
            ca_bundle: None,
            exclude_namespaces: vec!["kube-system".into()],
            only_namespaces: Some(vec!["team-a".into()]),
            failure_policy: "Fail".into(),
            timeout_seconds: 10,
        };
        let pod = KindRef::new("v1", "Pod");
        let hs = vec![
            Handler::mutating("inject", pod.clone(), &[Operation::Create]),
            Handler::validating("check", KindRef::new("apps.kruise.io/v1alpha1", "SidecarSet"), &[Operation::Update]),
        ];
        let c = configurations(&o, &[("sidecarset".into(), hs)]);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0]["kind"], "MutatingWebhookConfiguration");
        let w = &c[0]["webhooks"][0];
        assert_eq!(w["name"], "inject.sidecarset.wasmop.io");
        assert_eq!(w["clientConfig"]["service"]["path"], "/sidecarset/inject");
        assert_eq!(w["rules"][0]["apiGroups"][0], "");
        assert_eq!(w["rules"][0]["resources"][0], "pods");
        assert_eq!(c[1]["webhooks"][0]["rules"][0]["apiGroups"][0], "apps.kruise.io");
        assert!(c[1]["webhooks"][0].get("reinvocationPolicy").is_none());
        let exprs = &w["namespaceSelector"]["matchExpressions"];
        assert_eq!(exprs[0]["operator"], "NotIn");
        assert_eq!(exprs[1], json!({"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a"]}));
    }
}
