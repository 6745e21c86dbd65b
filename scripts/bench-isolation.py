#!/usr/bin/env python3
"""A healthy plugin's reconcile throughput with and without hostile neighbours.

Healthy: the probe plugin; each run creates N ConfigMaps at once and times until all N
ServiceAccounts it makes exist (release host). Hostile, in the same host: the hostile
plugin with ConfigMaps that spin until the deadline (4), grab memory (4), flood logs
and Events (2), panic (1) and send 100 MiB payloads (1), all retried with backoff while
the healthy run goes on. Runs alternate (quiet, hostile, quiet, ...) so drift on the
shared machine hits both; reports medians and the ratio.

Usage: scripts/bench-isolation.py [RUNS] [N]   (needs `make plugins` and a control plane)."""

import os, shutil, statistics, subprocess, sys, tempfile, time

from benchlib import ENV, HOST, build, grant_dir, kubectl

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLUGINS = os.path.join(ROOT, "target", "plugins")
RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
N = int(sys.argv[2]) if len(sys.argv) > 2 else 150
HOSTILE = ["loop"] * 4 + ["grab"] * 4 + ["flood"] * 2 + ["panic", "huge"]


def count_sas(ns):
    out = kubectl("get", "serviceaccounts", "-n", ns, "-o", "name", check=False).stdout
    return sum(1 for l in out.splitlines() if l.endswith("-probe"))


def run(hostile, i):
    ns, hns = f"iso-{i}", f"iso-h-{i}"
    for n in (ns, hns):
        kubectl("create", "namespace", n, check=False)
    with tempfile.TemporaryDirectory() as tmp:
        d = os.path.join(tmp, "plugins")
        os.mkdir(d)
        shutil.copy(os.path.join(PLUGINS, "probe.wasm"), d)
        open(os.path.join(d, "probe.settings.yaml"), "w").write(f"namespace: {ns}\n")
        if hostile:
            shutil.copy(os.path.join(PLUGINS, "hostile.wasm"), d)
            open(os.path.join(d, "hostile.settings.yaml"), "w").write(f"namespace: {hns}\n")
            docs = [f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: h{j}, namespace: {hns}, labels: {{hostile: 'true'}}}}\ndata: {{mode: {m}}}\n"
                    for j, m in enumerate(HOSTILE)]
            kubectl("apply", "-f", "-", stdin="---\n".join(docs))
        log = open(os.path.join(tmp, "host.log"), "w")
        identity = grant_dir(d)
        h = subprocess.Popen([HOST, "run", "--plugins-dir", d, *identity, "--metrics-bind-address", "127.0.0.1:0"],
                             env=dict(ENV, WASMOP_LOG="warn"), stdout=log, stderr=log)
        try:
            # Let the neighbours get going (and the probe's watch sync) before the clock starts.
            time.sleep(8)
            docs = [f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c{j}, namespace: {ns}, labels: {{probe: 'true'}}}}\ndata: {{value: v}}\n"
                    for j in range(N)]
            t0 = time.monotonic()
            kubectl("apply", "-f", "-", stdin="---\n".join(docs))
            while count_sas(ns) < N and time.monotonic() - t0 < 300:
                time.sleep(0.2)
            elapsed = time.monotonic() - t0
            cpu = sum(int(x) for x in open(f"/proc/{h.pid}/stat").read().split(")")[1].split()[11:13]) / os.sysconf("SC_CLK_TCK")
        finally:
            h.terminate()
            h.wait(timeout=60)
    kubectl("delete", "namespace", ns, hns, "--wait=false", check=False)
    return elapsed, cpu


def main():
    build()
    quiet, noisy = [], []
    for r in range(RUNS):
        quiet.append(run(False, f"q{r}-{os.getpid()}"))
        noisy.append(run(True, f"n{r}-{os.getpid()}"))
    q = statistics.median(x[0] for x in quiet)
    n = statistics.median(x[0] for x in noisy)
    print(f"| alone | {N / q:.1f} reconciles/s | {q:.2f} s | {statistics.median(x[1] for x in quiet):.1f} s | |")
    print(f"| beside 12 hostile objects | {N / n:.1f} reconciles/s | {n:.2f} s | {statistics.median(x[1] for x in noisy):.1f} s | {100 * (q / n):.0f} % of alone |")


if __name__ == "__main__":
    main()
