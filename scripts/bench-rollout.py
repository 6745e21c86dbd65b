#!/usr/bin/env python3
"""SidecarSet at cluster scale, as a Kruise user runs it: injection into a Deployment's
Pods, then an in-place rollout of a sidecar image, with the host serving the plugin's
webhooks and controller on the local control plane.

Per (Pods N, SidecarSets S): S sets of two sidecars each, set j selecting the Pods of
Deployment j (N/S Pods, so each set matches a share), `maxUnavailable: 100%`. Reports

- create: time from applying the Deployments until every Pod is injected (both
  sidecars of its set) and Running and Ready, and the host's CPU meanwhile;
- rollout: time from changing every set's first sidecar image until each set's
  `status.updatedPods` is its share and every Pod runs the new image (the fake kubelet
  below has reported it), and the host's CPU meanwhile;
- the host's peak RSS, its idle CPU per 20 s afterwards, and the apiserver requests it
  made as the plugin (audit log: impersonated user), by verb and resource, per Pod;
- where the host's time went in each phase (its /metrics): how many reconciles and
  reviews ran and their summed wall time, so a change in CPU can be put down to the
  controller or to the webhook, and to more calls or costlier ones.

kwok runs no containers and reports no image change after an in-place update, so a
fake kubelet here does what a kubelet does then: it watches the namespace's Pods and,
when a container's spec image differs from the image its status reports, reports the
new image (and imageID, restartCount + 1) through the status subresource.

The host runs pinned to core 1 and the control plane to core 0 (on a real node the
control plane runs elsewhere), as in the other harnesses.

Usage: scripts/bench-rollout.py [--quick] [N:S ...]   (default 100:1 500:1 2000:1
500:10 500:100; --quick: 10:1 10:2). Needs `make plugins` and a control plane in
target/cluster (KUBECONFIG overrides it). Prints a Markdown table.
BENCH_HOST_LOG=PREFIX keeps each run's host log in PREFIX.N-S; BENCH_WASMOP_LOG sets its
WASMOP_LOG (for example `info,wasmop::runtime=debug` shows throttled calls)."""

import http.client, json, os, queue, shutil, socket, ssl, subprocess, sys, tempfile, threading, time, urllib.parse, urllib.request

from benchlib import ENV, HOST, ROOT, build, control_plane_on, cpu_seconds, kubectl, plugins_dir_with, wait_ready

QUICK = "--quick" in sys.argv
ARGS = [a for a in sys.argv[1:] if a != "--quick"]
RUNS = [tuple(int(x) for x in a.split(":")) for a in ARGS] or ([(10, 1), (10, 2)] if QUICK else
                                                               [(100, 1), (500, 1), (2000, 1), (500, 10), (500, 100)])
PLUGIN = os.environ.get("WASMOP_BENCH_PLUGIN") or os.path.join(ROOT, "target", "plugins", "sidecarset.wasm")
NS = "bench-rollout"
WEBHOOKS = "bench-rollout"
ACCOUNT = "system:serviceaccount:default:sidecarset"
AUDIT = os.path.join(os.path.dirname(ENV["KUBECONFIG"]), "audit.log")
OLD, NEW = "busybox:1.36", "busybox:1.37"
PIN = ["taskset", "-c", "1"] if (os.cpu_count() or 1) > 1 else []


class Api:
    """The apiserver as the kubeconfig's user, over keep-alive HTTPS (kubectl per Pod
    would cost more than what is measured)."""

    def __init__(self):
        cfg = json.loads(kubectl("config", "view", "--raw", "--minify", "-o", "json").stdout)
        cluster, user = cfg["clusters"][0]["cluster"], cfg["users"][0]["user"]
        url = urllib.parse.urlparse(cluster["server"])
        self.addr = (url.hostname, url.port)
        self.ctx = ssl.create_default_context(cafile=cluster["certificate-authority"])
        self.auth = {"Authorization": f"Bearer {user['token']}"}

    def conn(self, timeout=60):
        return http.client.HTTPSConnection(*self.addr, context=self.ctx, timeout=timeout)

    def call(self, conn, method, path, body=None, ctype="application/json"):
        headers = dict(self.auth, **({"Content-Type": ctype} if body is not None else {}))
        conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
        r = conn.getresponse()
        data = r.read()
        if r.status >= 300:
            raise RuntimeError(f"{method} {path}: {r.status} {data[:300]!r}")
        return json.loads(data) if data else None


def stale(pod):
    """Statuses of containers whose spec image the status does not report yet, updated."""
    spec = {c["name"]: c["image"] for c in pod["spec"].get("containers", [])}
    statuses = pod.get("status", {}).get("containerStatuses") or []
    if not any(spec.get(s["name"], s.get("image")) != s.get("image") for s in statuses):
        return None
    out = []
    for s in statuses:
        s = dict(s)
        if s["name"] in spec and spec[s["name"]] != s.get("image"):
            s["image"], s["imageID"] = spec[s["name"]], "fake://" + spec[s["name"]]
            s["restartCount"] = s.get("restartCount", 0) + 1
        out.append(s)
    return out


class Kubelet:
    """Reports the new image of containers updated in place (see the module doc)."""

    def __init__(self, api):
        self.api, self.stopped, self.latest, self.pending = api, False, {}, queue.Queue()
        self.lock = threading.Lock()
        self.reported = 0
        threading.Thread(target=self.watch, daemon=True).start()
        for _ in range(4):
            threading.Thread(target=self.work, daemon=True).start()

    def watch(self):
        rv = ""
        while not self.stopped:
            conn = self.api.conn(timeout=None)
            try:
                conn.request("GET", f"/api/v1/namespaces/{NS}/pods?watch=1&timeoutSeconds=600&resourceVersion={rv}",
                             headers=self.api.auth)
                r = conn.getresponse()
                for line in iter(r.readline, b""):
                    ev = json.loads(line)
                    if ev["type"] == "ERROR":
                        rv = ""
                        break
                    pod = ev["object"]
                    rv = pod["metadata"]["resourceVersion"]
                    if ev["type"] != "DELETED" and stale(pod) is not None:
                        name = pod["metadata"]["name"]
                        with self.lock:
                            queued = name in self.latest
                            self.latest[name] = pod
                        if not queued:
                            self.pending.put(name)
            except (OSError, http.client.HTTPException, ValueError):
                time.sleep(0.2)
            finally:
                conn.close()

    def work(self):
        conn = self.api.conn()
        while True:
            name = self.pending.get()
            with self.lock:
                pod = self.latest.pop(name)
            statuses = stale(pod)
            if statuses is None:
                continue
            try:
                self.api.call(conn, "PATCH", f"/api/v1/namespaces/{NS}/pods/{name}/status",
                              {"status": {"containerStatuses": statuses}}, "application/merge-patch+json")
                self.reported += 1
            except (OSError, http.client.HTTPException, RuntimeError):
                conn.close()
                conn = self.api.conn()

    def stop(self):
        self.stopped = True


def sidecarset(j):
    return {"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
            "metadata": {"name": f"bench-rollout-{j}", "labels": {"bench-rollout": "true"}},
            "spec": {"namespace": NS, "selector": {"matchLabels": {"app": f"web-{j}"}},
                     "updateStrategy": {"type": "RollingUpdate", "maxUnavailable": "100%"},
                     "containers": [{"name": "log-agent", "image": OLD, "command": ["sleep", "inf"]},
                                    {"name": "proxy", "image": "envoyproxy/envoy:v1.31.0"}]}}


def deployment(j, replicas):
    labels = {"app": f"web-{j}"}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": f"web-{j}", "namespace": NS},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]}}}}


def apply(items):
    kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))


def until(what, cond, timeout, every=0.1):
    end = time.time() + timeout
    while time.time() < end:
        if cond():
            return
        time.sleep(every)
    raise RuntimeError(f"timed out after {timeout} s: {what}")


def pods(api, conn):
    return api.call(conn, "GET", f"/api/v1/namespaces/{NS}/pods")["items"]


def created(api, conn, n):
    """Every Pod injected with both sidecars, Running and Ready."""
    ps = pods(api, conn)
    return len(ps) == n and all(
        {c["name"] for c in p["spec"]["containers"]} >= {"log-agent", "proxy"}
        and p.get("status", {}).get("phase") == "Running"
        and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))
        for p in ps)


def rolled(api, conn, n, sets):
    items = api.call(conn, "GET", "/apis/apps.kruise.io/v1alpha1/sidecarsets?labelSelector=bench-rollout")["items"]
    if sum((s.get("status") or {}).get("updatedPods", 0) for s in items) != n or len(items) != sets:
        return False
    return all(c["image"] == NEW for p in pods(api, conn)
               for c in p["status"].get("containerStatuses", []) if c["name"] == "log-agent")


def audit_size():
    return os.path.getsize(AUDIT) if os.path.exists(AUDIT) else 0


def requests(start, end):
    """The plugin's requests (impersonated) logged between two offsets, by verb/resource."""
    counts = {}
    if not os.path.exists(AUDIT) or end < start:  # rotated meanwhile: not counted
        return counts
    with open(AUDIT, "rb") as f:
        f.seek(start)
        for line in f.read(end - start).splitlines():
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if (e.get("impersonatedUser") or {}).get("username") != ACCOUNT:
                continue
            ref = e.get("objectRef") or {}
            key = f"{e['verb']} {ref.get('resource', '?')}" + (f"/{ref['subresource']}" if ref.get("subresource") else "")
            counts[key] = counts.get(key, 0) + 1
    return counts


def per_pod(counts, n):
    top = sorted(counts.items(), key=lambda kv: -kv[1])
    return f"{sum(counts.values()) / n:.2f} (" + ", ".join(f"{k} {v / n:.2f}" for k, v in top) + ")"


def peak_rss(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def calls(addr):
    """(count, summed seconds) of reconciles and of reviews so far, from /metrics."""
    text = urllib.request.urlopen(f"http://{addr}/metrics", timeout=10).read().decode()
    out = {}
    for kind, metric in (("reconciles", "wasmop_reconcile_duration_seconds"),
                         ("reviews", "wasmop_admission_duration_seconds")):
        total = lambda suffix: sum(float(l.rsplit(" ", 1)[1]) for l in text.splitlines()
                                   if l.startswith(metric + suffix + "{") or l.startswith(metric + suffix + " "))
        out[kind] = (total("_count"), total("_sum"))
    return out


def spent(before, after):
    return ", ".join(f"{after[k][0] - before[k][0]:.0f} {k} {after[k][1] - before[k][1]:.2f} s" for k in after)


def cleanup():
    kubectl("delete", "sidecarsets", "-l", "bench-rollout", "--wait=true", check=False)
    kubectl("delete", "mutatingwebhookconfiguration,validatingwebhookconfiguration", WEBHOOKS, "--ignore-not-found", check=False)
    kubectl("delete", "namespace", NS, "--wait=true", "--timeout=300s", check=False)


def room_for(n):
    """The fake node holds 2,000 Pods (tests/cluster/launcher.go): a larger run raises
    it, with room for whatever else runs there (as bench-converge.sh does)."""
    got = kubectl("get", "node", "kwok-node-0", "-o", "jsonpath={.status.allocatable.pods}", check=False).stdout.strip()
    pods = int(got[:-1]) * 1000 if got.endswith("k") else int(got or 2000)
    if n > pods - 500:
        want = str(n + 1000)
        kubectl("patch", "node", "kwok-node-0", "--subresource=status", "--type=merge", "-p",
                json.dumps({"status": {"capacity": {"pods": want}, "allocatable": {"pods": want}}}))


def run(api, n, sets):
    cleanup()
    room_for(n)
    kubectl("create", "namespace", NS)
    with tempfile.TemporaryDirectory() as tmp:
        plugins, identity = plugins_dir_with(tmp, PLUGIN, "sidecarset")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        log = os.path.join(tmp, "host.log")
        host = subprocess.Popen(
            PIN + [HOST, "run", "--plugins-dir", plugins, *identity, "--metrics-bind-address", "127.0.0.1:0",
             "--webhooks", "--webhook-bind-address", f"127.0.0.1:{port}", "--webhook-configurations", WEBHOOKS],
            env=dict(ENV, WASMOP_LOG=os.environ.get("BENCH_WASMOP_LOG", "warn,wasmop::cli=info")),
            stdout=open(log, "w"), stderr=subprocess.STDOUT)
        kubelet = Kubelet(api)
        try:
            addr = wait_ready(log)
            config = subprocess.run([HOST, "webhook-config", "--name", WEBHOOKS, "--url", f"https://127.0.0.1:{port}",
                                     "--allowed-namespaces", NS, os.path.join(plugins, "sidecarset.wasm")],
                                    env=ENV, check=True, capture_output=True, text=True).stdout
            kubectl("apply", "-f", "-", stdin=config)
            conn = api.conn()
            # Until the apiserver calls this host's webhooks (the CA is in, the config is live).
            probe = sidecarset("dry-run")
            until("webhooks answer", lambda: kubectl("create", "--dry-run=server", "-f", "-", stdin=json.dumps(probe),
                                                     check=False).returncode == 0, 60)
            apply([sidecarset(j) for j in range(sets)])
            time.sleep(2)
            # Listing every Pod costs the apiserver (and this script) more as N grows.
            poll = max(0.1, n / 5000)
            with control_plane_on("0"):
                a0, c0, t0, m0 = audit_size(), cpu_seconds(host.pid), time.time(), calls(addr)
                apply([deployment(j, n // sets + (1 if j < n % sets else 0)) for j in range(sets)])
                until("every Pod injected and Ready", lambda: created(api, conn, n), 600, poll)
                t_create, c_create, a1, m1 = time.time() - t0, cpu_seconds(host.pid) - c0, audit_size(), calls(addr)
                time.sleep(3)
                c1, t1 = cpu_seconds(host.pid), time.time()
                for j in range(sets):
                    kubectl("patch", "sidecarset", f"bench-rollout-{j}", "--type=json", "-p",
                            json.dumps([{"op": "replace", "path": "/spec/containers/0/image", "value": NEW}]))
                until("every Pod rolled", lambda: rolled(api, conn, n, sets), 600, poll)
                t_roll, c_roll, a2 = time.time() - t1, cpu_seconds(host.pid) - c1, audit_size()
                m2 = calls(addr)
            time.sleep(1 if QUICK else 10)
            i0, window = cpu_seconds(host.pid), 2 if QUICK else 20
            time.sleep(window)
            idle = (cpu_seconds(host.pid) - i0) * 20 / window
            rss = peak_rss(host.pid)
        except Exception:
            sys.stderr.write(open(log).read()[-3000:])
            raise
        finally:
            kubelet.stop()
            host.terminate()
            host.wait(timeout=30)
            if os.environ.get("BENCH_HOST_LOG"):
                shutil.copy(log, f"{os.environ['BENCH_HOST_LOG']}.{n}-{sets}")
            cleanup()
    print(f"| {n} | {sets} | {t_create:.1f} s | {c_create:.2f} s | {t_roll:.1f} s | {c_roll:.2f} s | {rss:.0f} MiB "
          f"| {idle:.2f} s | {per_pod(requests(a0, a1), n)} | {per_pod(requests(a1, a2), n)} "
          f"| {spent(m0, m1)} | {spent(m1, m2)} |")
    sys.stdout.flush()


def main():
    build()
    kubectl("apply", "--server-side", "-f", os.path.join(ROOT, "deploy", "crds", "sidecarset.yaml"))
    subprocess.run([os.path.join(ROOT, "scripts", "wait-crd.sh"), "sidecarsets.apps.kruise.io"], env=ENV, check=True)
    api = Api()
    print("| Pods | SidecarSets | create → injected, Ready | host CPU | rollout → updated, running | host CPU "
          "| peak RSS | idle CPU / 20 s | requests per Pod, create | requests per Pod, rollout "
          "| calls and their wall time, create | calls, rollout |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n, sets in RUNS:
        run(api, n, sets)


if __name__ == "__main__":
    main()
