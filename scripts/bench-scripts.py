#!/usr/bin/env python3
"""What a script plugin costs the host: resident memory per extra JavaScript plugin
loaded (the engine's code is compiled once and shared, so a script plugin should cost
its text, its manifest and its watches), beside the same figure for compiled plugins
(each version's code is its own).

One host, plugins dropped into its --plugins-dir: first one plugin, then N-1 more,
each a distinct script (the Memcached operator renamed, watching a namespace of its
own, so every one has its own watches too); RSS is read once the host has loaded them
and been idle for a few seconds. The same for compiled plugins (memcached.wasm with a
custom section making each one distinct bytes, so each is compiled). The plugins act
as the host's identity (--plugin-identity host): granting each its own ServiceAccount
is not what is measured.

Usage: scripts/bench-scripts.py [N_SCRIPTS [N_COMPILED]]  (default 100 10; needs
`make plugins` and a control plane)."""

import os, subprocess, sys, tempfile, time

from benchlib import ENV, HOST, ROOT, build, wait_ready

N_JS = int(sys.argv[1]) if len(sys.argv) > 1 else 100
N_WASM = int(sys.argv[2]) if len(sys.argv) > 2 else 10
PLUGINS = os.path.join(ROOT, "target", "plugins")
SETTLE = 3 if os.environ.get("WASMOP_BENCH_PROFILE") == "dev" else 8


def rss_mib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def loaded(log):
    return sum("plugin loaded plugin=" in l for l in open(log, errors="replace"))


def wait_loaded(log, n, timeout):
    end = time.time() + timeout
    while loaded(log) < n:
        if time.time() > end:
            raise RuntimeError(f"{loaded(log)} of {n} plugins loaded: " + open(log).read()[-3000:])
        time.sleep(0.1)


def custom_section(wasm, text):
    name = b"wasmop-bench"
    payload = bytes([len(name)]) + name + text.encode()
    assert len(payload) < 128
    return wasm + b"\x00" + bytes([len(payload)]) + payload


def variant(kind, i):
    """(file name, bytes) of the i-th distinct plugin of `kind`."""
    if kind == "script":
        js = open(os.path.join(PLUGINS, "memcached-js.js")).read()
        return f"js{i}.js", js.replace('name: "memcached-js"', f'name: "js{i}"').encode() + f"\n// {i}\n".encode()
    wasm = open(os.path.join(PLUGINS, "memcached.wasm"), "rb").read()
    return f"wasm{i}.wasm", custom_section(wasm, f"variant {i}")


def measure(kind, n):
    work = tempfile.mkdtemp()
    plugins = os.path.join(work, "plugins")
    os.makedirs(plugins)
    log = os.path.join(work, "host.log")

    def drop(i):
        name, data = variant(kind, i)
        # Settings first: the directory source reads them with the plugin.
        open(os.path.join(plugins, name.rsplit(".", 1)[0] + ".settings.yaml"), "w").write(f"namespace: bench-scripts-{kind}-{i}\n")
        open(os.path.join(plugins, name), "wb").write(data)

    drop(0)
    host = subprocess.Popen([HOST, "run", "--plugins-dir", plugins, "--plugin-identity", "host",
                             "--metrics-bind-address", "127.0.0.1:0"], env=ENV, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    try:
        wait_ready(log)
        wait_loaded(log, 1, 120)
        time.sleep(SETTLE)
        one = rss_mib(host.pid)
        t0 = time.time()
        for i in range(1, n):
            drop(i)
        wait_loaded(log, n, 600)
        took = time.time() - t0
        time.sleep(SETTLE)
        many = rss_mib(host.pid)
        return one, many, took
    finally:
        host.terminate()
        host.wait()


def main():
    build()
    print("| plugins loaded | host RSS with 1 | with N | per extra plugin | loading the N-1 took |")
    print("|---|---|---|---|---|")
    for kind, n in [("script", N_JS), ("compiled", N_WASM)]:
        one, many, took = measure(kind, n)
        label = "JavaScript (memcached-js variants)" if kind == "script" else "compiled (memcached.wasm variants)"
        print(f"| {n} {label} | {one:.1f} MiB | {many:.1f} MiB | {(many - one) / max(n - 1, 1):.2f} MiB | {took:.1f} s |")


if __name__ == "__main__":
    main()
