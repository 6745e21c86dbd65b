#!/usr/bin/env python3
"""Hot reload: ConfigMap apply → new version serving, with a release build of the host.

For each plugin, N rounds of: make new bytes (the plugin with a custom section naming
the round, so the sha256 differs and the code must be compiled), `wasmop pack |
kubectl apply --server-side`, and time from just before the apply until the host logs
`plugin loaded` for it (the host's own timestamp); the next round starts once the
host has finished that version's background tier-up, as a reload on an idle host. A second series changes only the
settings (same code: the compile cache answers). The script plugin memcached-js is
measured the same way: a new version is its text with a comment naming the round (it
runs on the engine compiled once, so nothing is compiled and there is no tier-up).
Prints Markdown table rows.

Usage: scripts/bench-reload.py [ROUNDS]  (needs `make plugins` and a running control
plane: tests/cluster/up)."""

import datetime, os, re, subprocess, sys, tempfile, time

from benchlib import ENV, HOST, ROOT, build, grant, kubectl

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 5
NS = "bench-reload"
# WASMOP_PLUGIN_COMPILER=optimizing measures Cranelift-only loads for comparison.
TIERED = os.environ.get("WASMOP_PLUGIN_COMPILER", "tiered") == "tiered"
# More than twice the least reload interval (1 s, registry::compiling).
QUIET = 2.5


def leb(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def with_custom_section(wasm, text):
    name = b"wasmop-bench"
    payload = leb(len(name)) + name + text.encode()
    return wasm + b"\x00" + leb(len(payload)) + payload


def loaded_times(log, plugin):
    out = []
    for line in open(log, encoding="utf-8", errors="replace"):
        if f"plugin loaded plugin={plugin} " in line:
            ts = line.split()[0].rstrip("Z")
            out.append(datetime.datetime.fromisoformat(ts[:26]).replace(tzinfo=datetime.timezone.utc).timestamp())
    return out


def count(log, text):
    return sum(text in line for line in open(log, encoding="utf-8", errors="replace"))


def wait_optimized(log, before, timeout=20):
    deadline = time.time() + timeout
    while count(log, "plugin code optimized") <= before and time.time() < deadline:
        time.sleep(0.05)


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def main():
    build()
    subprocess.run(f"kubectl create namespace {NS} --dry-run=client -o yaml | kubectl apply -f -", shell=True, env=ENV, check=True, capture_output=True)
    work = tempfile.mkdtemp()
    log = os.path.join(work, "host.log")
    host = subprocess.Popen([HOST, "run", "--plugins-configmaps", "--plugins-namespace", NS, "--metrics-bind-address", "127.0.0.1:0"],
                            env=ENV, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    try:
        time.sleep(1)
        rows = []
        # BENCH_RELOAD_PLUGINS=a,b: only those.
        chosen = os.environ.get("BENCH_RELOAD_PLUGINS", "probe,memcached,sidecarset,memcached-js").split(",")
        for plugin in chosen:
            script = plugin.endswith("-js")
            ext = "js" if script else "wasm"
            src = open(os.path.join(ROOT, "target", "plugins", f"{plugin}.{ext}"), "rb").read()
            for series in ["new code", "settings only"]:
                samples = []
                # A script's first load compiles the engine (once per host, or read from
                # the code cache): that round is not a new version of a script, and is
                # not counted.
                warmup = 1 if script and series == "new code" else 0
                for r in range(ROUNDS + warmup):
                    mark = f"{series} {r}" if series == "new code" else "fixed"
                    wasm = src + f"\n// {mark}\n".encode() if script else with_custom_section(src, mark)
                    path = os.path.join(work, f"{plugin}.{ext}")
                    open(path, "wb").write(wasm)
                    settings = os.path.join(work, "s.yaml")
                    open(settings, "w").write(f"namespace: {NS}\nround: {series} {r}\n")
                    if r == 0:
                        grant(path, plugin, settings, NS)
                    cm = subprocess.run([HOST, "pack", path, "--name", f"bench-{plugin}", "--namespace", NS, "--settings", f"{plugin}={settings}"],
                                        check=True, capture_output=True, text=True).stdout
                    before = len(loaded_times(log, plugin))
                    optimized_before = count(log, "plugin code optimized")
                    t0 = time.time()
                    kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=cm)
                    while len(loaded_times(log, plugin)) <= before:
                        time.sleep(0.005)
                    samples.append(loaded_times(log, plugin)[-1] - t0)
                    # Measure a reload on an idle host, as in use: let this round's
                    # background tier-up (Cranelift) finish before the next apply.
                    if series == "new code" and TIERED and not script:
                        wait_optimized(log, optimized_before)
                    # An edit after a quiet spell, as an author makes them: versions
                    # that arrive within twice the source's reload interval are held
                    # back on purpose (the interval doubles up to 16 s, see
                    # sources::driver), which is not what is measured here.
                    time.sleep(QUIET)
                samples = samples[warmup:]
                rows.append((plugin, len(src), series, median(samples), min(samples), max(samples)))
                kubectl("delete", "configmap", f"bench-{plugin}", "-n", NS)
                time.sleep(0.5)
        for plugin, size, series, med, lo, hi in rows:
            print(f"| {plugin} ({size // 1024} KiB) | {series} | {med * 1000:.0f} ms | {lo * 1000:.0f}–{hi * 1000:.0f} ms |")
    finally:
        host.terminate()
        host.wait()
        subprocess.run(["kubectl", "delete", "namespace", NS], env=ENV, capture_output=True)


if __name__ == "__main__":
    main()
