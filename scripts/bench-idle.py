#!/usr/bin/env python3
"""What an idle host costs: CPU and wake-ups per 20 s with both shipped plugins
loaded, configured as deployed (leader election, the webhook server, the compiled-code
cache), once every plugin's code is optimized and nothing changes in the cluster.

Why wake-ups: an idle process that wakes a hundred times a second costs little CPU
on one node, yet keeps a core out of its deep idle states and shows up as the
difference beside an idle kruise-manager or controller-runtime manager (issue 26's
reference: Kruise's manager idles at 0.07 s of CPU per 20 s). Each row names the
threads that woke, so a new periodic wake-up shows where it comes from.

Usage: scripts/bench-idle.py [RUNS]  (needs `make plugins` and a control plane).
WASMOP_BENCH_HOST=PATH: measure that host binary (A/B runs of two builds)."""

import collections, os, statistics, subprocess, sys, tempfile, time

from benchlib import ENV, HOST, ROOT, build, cpu_seconds, grant_dir, kubectl, wait_ready

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
QUICK = os.environ.get("WASMOP_BENCH_PROFILE") == "dev"
WINDOW = 2 if QUICK else 20
PLUGINS = ["memcached", "sidecarset"]


def threads(pid):
    """{thread name: wake-ups (voluntary context switches)}, summed by name."""
    out = collections.Counter()
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            name = open(f"/proc/{pid}/task/{t}/comm").read().strip()
            out[name] += sum(int(l.split()[1]) for l in open(f"/proc/{pid}/task/{t}/status") if l.startswith("voluntary_ctxt_switches"))
        except OSError:
            continue
    return out


def window(pid):
    """[CPU seconds, wake-ups, {thread: wake-ups}] over one WINDOW."""
    t0, c0 = threads(pid), cpu_seconds(pid)
    time.sleep(WINDOW)
    t1, c1 = threads(pid), cpu_seconds(pid)
    by = {n: t1[n] - t0.get(n, 0) for n in t1}
    return [c1 - c0, sum(by.values()), by]


def main():
    build()
    for crd in ("memcached.yaml", "sidecarset.yaml"):
        kubectl("apply", "--server-side", "-f", os.path.join(ROOT, "deploy", "crds", crd))
    with tempfile.TemporaryDirectory() as tmp:
        plugins = os.path.join(tmp, "plugins")
        os.mkdir(plugins)
        for p in PLUGINS:
            subprocess.run(["cp", os.path.join(ROOT, "target", "plugins", f"{p}.wasm"), plugins], check=True)
        load = build("admission_load")
        subprocess.run([load, "certs", tmp], check=True)
        identity = grant_dir(plugins)
        log = os.path.join(tmp, "host.log")
        host = subprocess.Popen(
            [HOST, "run", "--plugins-dir", plugins, *identity, "--metrics-bind-address", "127.0.0.1:0",
             "--leader-elect", "--leader-election-namespace", "default", "--leader-election-id", "bench-idle",
             "--webhooks", "--webhook-bind-address", "127.0.0.1:0",
             "--webhook-cert-file", os.path.join(tmp, "tls.crt"), "--webhook-key-file", os.path.join(tmp, "tls.key"),
             "--compile-cache-dir", os.path.join(tmp, "cache")],
            env=dict(ENV, WASMOP_LOG="info"), stdout=open(log, "w"), stderr=subprocess.STDOUT)
        try:
            wait_ready(log)
            # Idle means after the background tier-ups, which are work, not idling.
            end = time.time() + 120
            while sum("plugin code optimized" in l for l in open(log)) < len(PLUGINS) and time.time() < end:
                time.sleep(0.5)
            time.sleep(2)
            rows = [window(host.pid) for _ in range(RUNS)]
        finally:
            host.terminate()
            host.wait(timeout=30)
    cpu = statistics.median(r[0] for r in rows)
    wakes = statistics.median(r[1] for r in rows)
    names = sorted({n for r in rows for n in r[2]})
    per = ", ".join(f"{n} {statistics.median(r[2].get(n, 0) for r in rows):.0f}" for n in names)
    print(f"| {' + '.join(PLUGINS)}, leader, webhooks, no objects | {cpu:.2f} s | {wakes:.0f} | {per} | {RUNS} × {WINDOW} s |")


if __name__ == "__main__":
    main()
