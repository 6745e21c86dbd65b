#!/usr/bin/env python3
"""The ring benchmark of wasm-operator (CloudNet 2022), like for like.

One ring plugin loaded N times under different names (`ring-0` … `ring-N-1`), member i
watching ConfigMap `ring` in namespace `ringb-i` and writing the nonce into
`ringb-(i+1 mod N)`. Reports, per N:

- idle host RSS once every member is loaded and its watch synced (median of samples
  over 5 s, after 10 s of quiet);
- lap time: a nonce written into ringb-0 until it reaches ringb-(N-1), i.e. N-1 hops,
  timed by two `kubectl get -w` watchers (same delivery delay at both ends); median of
  LAPS laps, and per hop.

Then the marginal RSS of distinct plugins: memcached, sidecarset, probe, hostile added
one by one beside one ring member.

Usage: scripts/bench-ring.py [--quick]   (needs `make plugins` and a control plane in
target/cluster; KUBECONFIG overrides it). Prints Markdown tables. RING_SIZES=10,50
measures only those rings (and skips the marginal RSS table)."""

import os, shutil, statistics, subprocess, sys, tempfile, threading, time

from benchlib import ENV, HOST, build, grant, grant_dir, kubectl, wait_ready

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLUGINS = os.path.join(ROOT, "target", "plugins")
QUICK = "--quick" in sys.argv
LAPS = 1 if QUICK else 7
# RING_SIZES=10,50: only these ring sizes.
SIZES = [int(n) for n in os.environ["RING_SIZES"].split(",")] if os.environ.get("RING_SIZES") else None


def rss_mib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Host:
    def __init__(self, plugins_dir):
        self.log = open(os.path.join(plugins_dir, "..", "host.log"), "w")
        self.p = subprocess.Popen(
            [HOST, "run", "--plugins-dir", plugins_dir, *grant_dir(plugins_dir), "--metrics-bind-address", "127.0.0.1:0"],
            env=dict(ENV, WASMOP_LOG="warn,wasmop::cli=info"), stdout=self.log, stderr=self.log)
        self.logpath = self.log.name

    def wait_ready(self, timeout=300):
        wait_ready(self.logpath, timeout)

    def idle_rss(self):
        time.sleep(3 if QUICK else 10)
        samples = []
        for _ in range(5 if QUICK else 10):
            samples.append(rss_mib(self.p.pid))
            time.sleep(0.5)
        return statistics.median(samples)

    def stop(self):
        self.p.terminate()
        self.p.wait(timeout=30)


P = "ringb"


def ring_setup(n, d):
    global P
    P = f"ringb{n}-{os.getpid() % 10000}"
    docs = []
    for i in range(n):
        docs.append(f"apiVersion: v1\nkind: Namespace\nmetadata: {{name: {P}-{i}}}\n")
        docs.append(f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: ring, namespace: {P}-{i}}}\ndata: {{nonce: '0'}}\n")
    kubectl("apply", "-f", "-", stdin="---\n".join(docs))
    wasm = os.path.join(PLUGINS, "ring.wasm")
    for i in range(n):
        shutil.copy(wasm, os.path.join(d, f"ring-{i}.wasm"))
        with open(os.path.join(d, f"ring-{i}.settings.yaml"), "w") as f:
            f.write(f"namespace: {P}-{i}\nnext: {P}-{(i + 1) % n}\n")


class Watch:
    """`kubectl get -w` on one ConfigMap: the monotonic time each nonce arrived."""

    def __init__(self, ns):
        self.seen = {}
        self.p = subprocess.Popen(
            ["kubectl", "get", "configmap", "ring", "-n", ns, "-w", "-o", "jsonpath={.data.nonce}{\"\\n\"}"],
            env=ENV, stdout=subprocess.PIPE, text=True)
        threading.Thread(target=self.read, daemon=True).start()

    def read(self):
        for line in self.p.stdout:
            self.seen.setdefault(line.strip(), time.monotonic())

    def stop(self):
        self.p.kill()


def laps(n):
    first, last = Watch(f"{P}-0"), Watch(f"{P}-{n - 1}")
    time.sleep(2)
    out = []
    for lap in range(LAPS):
        nonce = f"{time.time_ns()}"
        kubectl("patch", "configmap", "ring", "-n", f"{P}-0", "--type=merge", "-p", f'{{"data":{{"nonce":"{nonce}"}}}}')
        end = time.time() + 60
        while nonce not in last.seen and time.time() < end:
            time.sleep(0.005)
        if nonce in last.seen and nonce in first.seen:
            out.append(last.seen[nonce] - first.seen[nonce])
        time.sleep(0.5)
    first.stop()
    last.stop()
    return out


def cleanup(n):
    kubectl("delete", "namespace", *[f"{P}-{i}" for i in range(n)], "--wait=false", check=False)


def main():
    build()
    for crd in ("memcached", "sidecarset"):
        kubectl("apply", "--server-side", "-f", os.path.join(ROOT, "deploy", "crds", f"{crd}.yaml"))
    sizes = SIZES or ([1, 10] if QUICK else [1, 10, 50, 100])
    print("| members | idle host RSS | lap (N-1 hops) median | per hop | laps |")
    print("|---|---|---|---|---|")
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            d = os.path.join(tmp, "plugins")
            os.mkdir(d)
            ring_setup(n, d)
            h = Host(d)
            try:
                h.wait_ready()
                rss = h.idle_rss()
                ls = laps(n) if n > 1 else []
                if n > 1 and not ls:
                    # A ring that does not go round is a broken benchmark, not a figure.
                    raise RuntimeError(f"no lap completed with {n} members; host log:\n" + open(h.logpath).read()[-3000:])
            finally:
                h.stop()
                cleanup(n)
            if ls:
                med = statistics.median(ls)
                print(f"| {n} | {rss:.1f} MiB | {med * 1000:.0f} ms | {med * 1000 / (n - 1):.2f} ms | {len(ls)} |")
            else:
                print(f"| {n} | {rss:.1f} MiB | – | – | – |")
            sys.stdout.flush()
    if SIZES:
        return

    print()
    print("| plugins loaded | idle host RSS | marginal |")
    print("|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        d = os.path.join(tmp, "plugins")
        os.mkdir(d)
        ring_setup(1, d)
        kubectl("create", "namespace", f"ringd-{os.getpid() % 10000}", check=False)
        h = Host(d)
        try:
            h.wait_ready()
            prev = h.idle_rss()
            print(f"| ring | {prev:.1f} MiB | |")
            names = ["ring"]
            for p in ["memcached", "sidecarset", "probe", "hostile"]:
                shutil.copy(os.path.join(PLUGINS, f"{p}.wasm"), os.path.join(d, f"{p}.wasm"))
                settings = f"namespace: ringd-{os.getpid() % 10000}\n"
                with open(os.path.join(d, f"{p}.settings.yaml"), "w") as f:
                    f.write(settings)
                grant(os.path.join(d, f"{p}.wasm"), p, os.path.join(d, f"{p}.settings.yaml"))
                names.append(p)
                time.sleep(5)
                h.wait_ready()
                now = h.idle_rss()
                print(f"| {' + '.join(names)} | {now:.1f} MiB | +{now - prev:.1f} MiB ({os.path.getsize(os.path.join(PLUGINS, p + '.wasm')) // 1024} KiB wasm) |")
                prev = now
                sys.stdout.flush()
        finally:
            h.stop()
            cleanup(1)
            kubectl("delete", "namespace", f"ringd-{os.getpid() % 10000}", "--wait=false", check=False)


if __name__ == "__main__":
    main()
