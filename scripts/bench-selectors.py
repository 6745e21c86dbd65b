#!/usr/bin/env python3
"""Reconciles and cluster calls per Pod event with S SidecarSets of which one selects
the Pods: does the work of a Pod's change grow with sets that do not select it?

The SidecarSet plugin runs from a plugins dir (no webhooks: the Pods are not
injected, which changes nothing about what their events reconcile). One set selects
`app=web`, S - 1 others select labels no Pod has. Once every set's first reconcile
is done, P Pods labelled `app=web` are created one by one; the figures are the
reconciles and plugin host calls (by verb) counted by the host's metrics until they
stop changing, per Pod created. Counts, not times: the debug build gives the same.

Usage: scripts/bench-selectors.py [PODS] [SETS...]  (default 20 pods; 1 10 100 sets).
WASMOP_BENCH_PLUGIN=PATH: another sidecarset.wasm (an A/B of two plugin builds)."""

import json, os, re, subprocess, sys, tempfile, time, urllib.request

from benchlib import ENV, HOST, ROOT, build, kubectl, metrics_addr, plugins_dir_with, wait_ready

PODS = int(sys.argv[1]) if len(sys.argv) > 1 else 20
SETS = [int(a) for a in sys.argv[2:]] or [1, 10, 100]
PLUGIN = os.environ.get("WASMOP_BENCH_PLUGIN") or os.path.join(ROOT, "target", "plugins", "sidecarset.wasm")
NS = "bench-selectors"


def metrics(log):
    return urllib.request.urlopen(f"http://{metrics_addr(log)}/metrics", timeout=5).read().decode()


def counts(log):
    """(reconciles, {verb: host calls}) so far."""
    text = metrics(log)
    rec = sum(float(l.rsplit(" ", 1)[1]) for l in text.splitlines() if l.startswith("wasmop_reconciles_total{"))
    calls = {}
    for l in text.splitlines():
        if l.startswith("wasmop_host_calls_total{"):
            verb = re.search(r'verb="([^"]+)"', l).group(1)
            calls[verb] = calls.get(verb, 0) + float(l.rsplit(" ", 1)[1])
    return rec, calls


def settled(log, quiet=3.0, timeout=300):
    """The counts once they have not changed for `quiet` seconds."""
    last, since, end = None, time.time(), time.time() + timeout
    while time.time() < end:
        now = counts(log)
        if now != last:
            last, since = now, time.time()
        elif time.time() - since >= quiet:
            return now
        time.sleep(0.5)
    raise RuntimeError("reconciles never settled")


def sidecarset(name, app):
    return {"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": name},
            "spec": {"namespace": NS, "selector": {"matchLabels": {"app": app}},
                     "containers": [{"name": f"side-{name}", "image": "busybox:1.36"}]}}


def pod(i):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"web-{i}", "namespace": NS, "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]}}


def apply(items):
    kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))


def run(sets):
    kubectl("delete", "sidecarsets", "-l", "bench-selectors", "--wait=true", check=False)
    kubectl("delete", "namespace", NS, "--wait=true", check=False)
    kubectl("create", "namespace", NS)
    with tempfile.TemporaryDirectory() as tmp:
        plugins, identity = plugins_dir_with(tmp, PLUGIN, "sidecarset")
        log = os.path.join(tmp, "host.log")
        host = subprocess.Popen([HOST, "run", "--plugins-dir", plugins, *identity, "--metrics-bind-address", "127.0.0.1:0"],
                                env=dict(ENV, WASMOP_LOG="warn,wasmop::cli=info"), stdout=open(log, "w"), stderr=subprocess.STDOUT)
        try:
            wait_ready(log)
            items = [sidecarset("bench-web", "web")] + [sidecarset(f"bench-other-{i}", f"other-{i}") for i in range(1, sets)]
            for it in items:
                it["metadata"]["labels"] = {"bench-selectors": "true"}
            apply(items)
            before_rec, before_calls = settled(log)
            # One at a time, as a Deployment's ReplicaSet creates them: each Pod's
            # events reach the host apart, not folded into one queued reconcile.
            for i in range(PODS):
                apply([pod(i)])
            after_rec, after_calls = settled(log)
        finally:
            host.terminate()
            host.wait(timeout=30)
            kubectl("delete", "sidecarsets", "-l", "bench-selectors", "--wait=false", check=False)
            kubectl("delete", "namespace", NS, "--wait=false", check=False)
    calls = {v: after_calls.get(v, 0) - before_calls.get(v, 0) for v in after_calls}
    per = ", ".join(f"{v} {n / PODS:.1f}" for v, n in sorted(calls.items()) if n)
    print(f"| {sets} ({sets - 1} selecting none) | {PODS} | {(after_rec - before_rec) / PODS:.1f} | {sum(calls.values()) / PODS:.1f} ({per}) |")


def main():
    build()
    kubectl("apply", "--server-side", "-f", os.path.join(ROOT, "deploy", "crds", "sidecarset.yaml"))
    subprocess.run([os.path.join(ROOT, "scripts", "wait-crd.sh"), "sidecarsets.apps.kruise.io"], env=ENV, check=True)
    for s in SETS:
        run(s)


if __name__ == "__main__":
    main()
