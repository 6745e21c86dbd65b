//! The local control plane itself (tests/cluster): what every other e2e test relies on.

use anyhow::{Result, anyhow, bail};
use std::time::Duration;
use wasmop_e2e::*;

#[test]
#[ignore = "needs the local control plane (make e2e)"]
fn node_ready_and_readyz_ok() {
    assert_eq!(kubectl(&["get", "--raw", "/readyz"]).unwrap().trim(), "ok");
    let nodes = kubectl(&["get", "nodes", "--no-headers"]).unwrap();
    assert!(
        nodes.lines().any(|l| l.starts_with("kwok-node-0") && l.split_whitespace().nth(1) == Some("Ready")),
        "{nodes}"
    );
}

#[test]
#[ignore = "needs the local control plane (make e2e)"]
fn deployment_gets_running_ready_pods() -> Result<()> {
    let ns = Namespace::new("cp-deploy");
    kubectl(&["-n", &ns.0, "create", "deployment", "web", "--image=nginx", "--replicas=2"]).map_err(|e| anyhow!(e))?;
    eventually("2 Pods Running and Ready on kwok-node-0", Duration::from_secs(60), || {
        let pods = get_json(&["pods", "-n", &ns.0]).ok_or_else(|| anyhow!("no pods"))?;
        let items = pods["items"].as_array().cloned().unwrap_or_default();
        let ok = items
            .iter()
            .filter(|p| {
                p["spec"]["nodeName"] == "kwok-node-0"
                    && p["status"]["phase"] == "Running"
                    && p["status"]["conditions"]
                        .as_array()
                        .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
            })
            .count();
        if ok == 2 { Ok(()) } else { bail!("{ok} of {} pods running and ready", items.len()) }
    })?;
    let rs = get_json(&["rs", "-n", &ns.0]).unwrap();
    assert_eq!(rs["items"].as_array().unwrap().len(), 1, "one ReplicaSet");
    Ok(())
}

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.e2e.wasmop.io}
spec:
  group: e2e.wasmop.io
  names: {kind: Widget, plural: widgets, singular: widget}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              replicas: {type: integer, minimum: 0}
"#;

#[test]
#[ignore = "needs the local control plane (make e2e)"]
fn crd_established_and_schema_violation_names_the_field() -> Result<()> {
    install_crd(CRD, "widgets.e2e.wasmop.io")?;
    let ns = Namespace::new("cp-crd");
    let bad = format!(
        "apiVersion: e2e.wasmop.io/v1\nkind: Widget\nmetadata: {{name: w, namespace: {}}}\nspec: {{replicas: -1}}\n",
        ns.0
    );
    let err = eventually("the Widget kind is served", Duration::from_secs(20), || match apply(&bad) {
        Err(e) if e.contains("no matches for kind") => bail!(e),
        other => Ok(other),
    })?
    .expect_err("a schema violation must be rejected");
    assert!(err.contains("spec.replicas"), "the message names the field: {err}");
    Ok(())
}

#[test]
#[ignore = "needs the local control plane (make e2e)"]
fn url_webhook_on_loopback_patches_created_pods() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let bin = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("cluster/bin/cluster");
    let mut server = std::process::Command::new(bin).args(["test-webhook", "--dir"]).arg(dir.path()).spawn()?;
    let port = eventually("webhook server listening", Duration::from_secs(10), || {
        Ok(std::fs::read_to_string(dir.path().join("port"))?.trim().parse::<u16>()?)
    })?;
    let ca = std::fs::read_to_string(dir.path().join("ca.b64"))?;
    let ns = Namespace::new("cp-webhook");
    let cfg = format!(
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {{name: e2e-{ns}}}
webhooks:
- name: label.e2e.wasmop.io
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Fail
  clientConfig: {{url: "https://127.0.0.1:{port}/mutate", caBundle: {ca}}}
  namespaceSelector: {{matchLabels: {{kubernetes.io/metadata.name: {ns}}}}}
  rules: [{{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}}]
"#,
        ns = ns.0
    );
    apply(&cfg).map_err(|e| anyhow!(e))?;
    let result = eventually("a created Pod carries the webhook's label", Duration::from_secs(30), || {
        let _ = kubectl(&["-n", &ns.0, "delete", "pod", "p", "--ignore-not-found", "--wait=false"]);
        kubectl(&["-n", &ns.0, "run", "p", "--image=nginx", "--restart=Never"]).map_err(|e| anyhow!(e))?;
        let pod = get_json(&["pod", "p", "-n", &ns.0]).ok_or_else(|| anyhow!("pod missing"))?;
        if pod["metadata"]["labels"]["webhook"] == "seen" {
            Ok(())
        } else {
            bail!("labels: {}", pod["metadata"]["labels"])
        }
    });
    let _ = kubectl(&["delete", "mutatingwebhookconfiguration", &format!("e2e-{}", ns.0)]);
    let _ = server.kill();
    result
}
