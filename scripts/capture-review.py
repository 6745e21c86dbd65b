#!/usr/bin/env python3
"""Captures the AdmissionReview the local apiserver sends a webhook for a Pod that a
Deployment creates, and writes it to host/examples/pod-review.json: the review the
admission benchmark's load generator posts (only its uid changes per review).

Why captured, not written by hand: a hand-written review lacked `request.options`
and the fields the apiserver defaults (a real webhook sees them all, and Kruise's
answers a review without options with a 500), so the benchmark measured a smaller,
unreal request. Re-run it after a Kubernetes upgrade of tests/cluster.

Usage: scripts/capture-review.py  (needs a control plane: KUBECONFIG or target/cluster)."""

import base64, http.server, json, os, ssl, subprocess, tempfile, threading

from benchlib import ENV, ROOT, build, kubectl

NS = "bench-admission"
WEBHOOK = """apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {{name: capture-review}}
webhooks:
- name: capture.wasmop.io
  clientConfig: {{url: "https://127.0.0.1:{port}/capture", caBundle: {ca}}}
  rules: [{{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}}]
  namespaceSelector: {{matchLabels: {{kubernetes.io/metadata.name: {ns}}}}}
  sideEffects: None
  admissionReviewVersions: [v1]
  failurePolicy: Ignore
"""
# The benchmark's Pod: what bench-admission.py's SidecarSet selects and injects into.
DEPLOYMENT = f"""apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: {NS}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      containers:
      - name: app
        image: nginx:1.27
        env: [{{name: TZ, value: UTC}}]
        volumeMounts: [{{name: data, mountPath: /data}}]
      volumes: [{{name: data, emptyDir: {{}}}}]
"""


def main():
    load = build("admission_load")
    captured = threading.Event()
    review = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            review.update(body)
            captured.set()
            out = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                              "response": {"uid": body["request"]["uid"], "allowed": True}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args):
            pass

    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([load, "certs", tmp], check=True)
        server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(os.path.join(tmp, "tls.crt"), os.path.join(tmp, "tls.key"))
        server.socket = tls.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        ca = base64.b64encode(open(os.path.join(tmp, "ca.crt"), "rb").read()).decode()
        kubectl("create", "namespace", NS, check=False)
        try:
            kubectl("apply", "-f", "-", stdin=WEBHOOK.format(port=server.server_address[1], ca=ca, ns=NS))
            kubectl("delete", "deployment", "web", "-n", NS, "--ignore-not-found")
            kubectl("apply", "-f", "-", stdin=DEPLOYMENT)
            if not captured.wait(60):
                raise RuntimeError("the apiserver sent no review within 60 s")
        finally:
            kubectl("delete", "mutatingwebhookconfiguration", "capture-review", "--ignore-not-found")
            kubectl("delete", "deployment", "web", "-n", NS, "--ignore-not-found", "--wait=false")
            server.shutdown()
    out = os.path.join(ROOT, "host", "examples", "pod-review.json")
    with open(out, "w") as f:
        json.dump(review, f, indent=1)
        f.write("\n")
    print(f"{out}: {review['request']['operation']} {review['request']['kind']['kind']} "
          f"with options {review['request'].get('options')}")


if __name__ == "__main__":
    main()
