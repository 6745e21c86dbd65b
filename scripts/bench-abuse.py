#!/usr/bin/env python3
"""The host stays up under abuse (issue 18): a healthy SidecarSet injection load,
alone and then beside every attack at once, with the host in a 1 GiB memory cgroup.

The host runs as in `scripts/bench-admission.py` (pinned to core 0, one tokio worker,
SidecarSet's `inject-pod` measured by `host/examples/admission_load.rs` from core 1),
plus two copies of the hostile plugin and a third plugin delivered in ConfigMaps. The
attacks (`host/examples/abuse_load.rs`, also on core 1, loopback only) run together,
each bounded in count and stopped at a deadline:

- 500 connections that never send a ClientHello, reopened when dropped;
- 200 concurrent POSTs of Content-Length 8 MiB bodies, the last byte held back 15 s;
- 10,000 POSTs to random /x-N/y-N paths over 4 keep-alive connections;
- 50 concurrent reviews of the hostile `grab` handler (120 MiB each), back to back;
- two hostile plugins, each with four ConfigMaps in `hold` mode (120 MiB for ~2 s,
  again 1 s later);
- the third plugin's ConfigMap rewritten every 100 ms with a fresh ~1 MiB component.

The first two hold connections: they start anew beside each healthy run, once its
connections are up (an apiserver's keep-alive connections are there before an attack
begins); whether a client arriving mid-attack still gets in is probed and printed
apart. The control plane keeps running in every phase (the attacks need it), confined
to core 1 with the load and the attacks (core 0 is the host's alone), so the alone
figures are below bench-admission's, which pauses it. Phases: alone; under attack;
after (attacks over, holds deleted). Each prints closed-loop throughput and the host's
CPU meanwhile (short of its one core, the load's core was the limit), latency at RATE
reviews/s offered (open loop) with its p99 and longest review, errors, how many of
the healthy plugin's calls went long (into the long lane, `runtime/cpu.rs`), the
host's peak RSS and the number of series on /metrics; then whether the host survived
and cgroup OOM kills, and how much the same work's CPU time swung on the host's core
before and after (`corespeed`: the ratio cannot be steadier than the machine).

Usage: scripts/bench-abuse.py [--quick]   (needs `make plugins` and a control plane;
KUBECONFIG names it). --quick: tiny counts, a few seconds of attack: proves the harness
runs (`make bench-smoke`), no figure. Exits 1 if the host died. When the host's `run
--help` has the memory budget flags they get ABUSE_BUDGET_MIB and ABUSE_SHARE_PERCENT
(default 640 and 25, the host's defaults: 384 MiB of the 1 GiB is left to its own
heap). WASMOP_BENCH_HOST=PATH: measure that host binary. ABUSE_CYCLES=N: N rounds of
alone and under attack, each attack phase judged against the alone phases either side.
ABUSE_PERF=DIR: a CPU profile of the host in each closed-loop run (see `profiled`); the
table of CPU per host thread is printed always. ABUSE_DUMP=DIR: each run's reviews.
ABUSE_TRACE=DIR: the open-loop runs under attack traced for
`scripts/admission-stall-causes.py DIR`. ABUSE_LOAD_NICE=N or ABUSE_LOAD_FIFO=N: the
load generator's rank on the core it shares with the attacks (see below)."""

import contextlib, gzip, importlib, itertools, os, re, signal, socket, ssl, shutil, statistics, subprocess, sys, tempfile, time

import corespeed
from benchlib import ENV, HOST, build, control_plane_on, cpu_seconds, grant, grant_dir, kubectl, wait_ready
from hostwatch import Watch, cg_read, cgroup, settle, value, vm

adm = importlib.import_module("bench-admission")  # its SidecarSet, webhook and helpers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLUGINS = os.path.join(ROOT, "target", "plugins")
QUICK = "--quick" in sys.argv
# Healthy runs per phase (closed + open each), seconds per run, connections, offered rate.
RUNS, SECS, CONNS, RATE = (1, 2, 4, 200) if QUICK else (int(os.environ.get("ABUSE_RUNS", 2)), 11, 8, 1000)
LONG_CALLS = 'wasmop_plugin_calls_long_total{plugin="sidecarset"}'
# ABUSE_CYCLES=N: N rounds of alone then under attack, and alone once more at the end,
# so that each attack phase is judged against the alone phases either side of it, a
# minute away, not against one alone phase minutes before: this VM's speed drifts by
# ±40 % over minutes (BENCHMARKS.md, issue 18, eighth part).
CYCLES = 1 if QUICK else int(os.environ.get("ABUSE_CYCLES", 1))
# Attack window, and the counts of issue 18 (tiny for --quick, where a debug host must
# survive them today).
ATTACK_SECS = 6 if QUICK else 60
HANDSHAKES, BODIES, PATHS, GRABS, HOLDS = (20, 3, 300, 2, 1) if QUICK else (500, 200, 10_000, 50, 4)
CHURN_MS = 100
LIMIT = 1 << 30
# ABUSE_ATTACKS=grab,holds,...: only these (diagnosis: which attack costs what).
ATTACKS = ("handshake", "bodies", "paths", "grab", "holds", "churn")
ONLY = set(os.environ.get("ABUSE_ATTACKS", ",".join(ATTACKS)).split(","))
# ABUSE_LOAD_NICE=-10: the healthy load generator at that nice value (root only), so that
# the attack clients and the control plane sharing its core do not starve it: the figure
# is then the host's, where otherwise all attacks at once measure core 1 (the host has
# idle time left). Off by default, as every figure before it was taken.
LOAD_RANK = ["nice", "-n", os.environ["ABUSE_LOAD_NICE"]] if os.environ.get("ABUSE_LOAD_NICE") else []
# ABUSE_LOAD_FIFO=N: the load generator at real-time priority N (`chrt -f`, root only)
# instead: a fair-class thread, however high its weight, waits for the next tick when
# an attack client holds core 1 as a response arrives; a FIFO one runs at once, so
# core 0's idle moments under attack are the host's, not its client's.
if os.environ.get("ABUSE_LOAD_FIFO"):
    LOAD_RANK = ["chrt", "-f", os.environ["ABUSE_LOAD_FIFO"]]
assert ONLY <= set(ATTACKS), f"ABUSE_ATTACKS: pick from {ATTACKS}"
NS, HOSTILE = "abuse-plugins", ["hostile-a", "hostile-b"]
TRACED = itertools.count(1)


def drain(pid):
    """Between an attack and the next alone phase: the last holds and bodies drain,
    then the host settles."""
    time.sleep(2 if QUICK else 5)
    settle(pid, 10 if QUICK else 90)


@contextlib.contextmanager
def profiled(pid, name):
    """With ABUSE_PERF=DIR: the host's threads sampled at 999 Hz (perf, on core 1 with
    the load) into DIR/NAME.data while the block runs; `perf report -i ... --sort
    comm,sym` then says what each thread spent its time on. Otherwise nothing."""
    if not os.environ.get("ABUSE_PERF"):
        yield
        return
    os.makedirs(os.environ["ABUSE_PERF"], exist_ok=True)
    data = os.path.join(os.environ["ABUSE_PERF"], name.replace(" ", "-").replace(",", "") + ".data")
    perf = subprocess.Popen(["taskset", "-c", "1", "perf", "record", "-q", "-e", "cpu-clock", "-F", "999", "-p", str(pid),
                             "-o", data], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        perf.send_signal(signal.SIGINT)
        perf.wait()


def healthy(pid, load, rate=None, beside=None, name="run"):
    """One run of the healthy load, with `beside` (a context manager) entered once it
    has connected: [reviews/s, p50, p99, errors, host CPU in the run as a share of its
    one core, the longest review in ms]. A run that could not even connect (the host dead, or its connection
    slots all taken) counts as errors = -1. ABUSE_DUMP=DIR: every review of the run in
    DIR/NAME (`scripts/admission-stalls.py` says where the slow ones fell)."""
    cpu, t = cpu_seconds(pid), time.monotonic()
    env = dict(os.environ)
    if os.environ.get("ABUSE_DUMP"):
        os.makedirs(os.environ["ABUSE_DUMP"], exist_ok=True)
        env["ADMISSION_LOAD_DUMP"] = os.path.join(os.environ["ABUSE_DUMP"], re.sub(r"[^A-Za-z0-9.]+", "-", name))
    # ABUSE_TRACE=DIR: the open-loop runs under attack traced as bench-admission's
    # BENCH_TRACE traces its rows, so that `scripts/admission-stall-causes.py DIR` names
    # what held each stall (which thread had the core, whether the review thread was
    # runnable meanwhile).
    trace = os.environ.get("ABUSE_TRACE") if rate and beside else None
    if trace:
        n = next(TRACED)
        env["ADMISSION_LOAD_DUMP"] = os.path.join(trace, f"reviews.{n}")
    with adm.traced(pid, f"attack-{n}", trace) if trace else contextlib.nullcontext():
        p = subprocess.Popen(load + [str(SECS)] + ([str(rate)] if rate else []), stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True, env=env)
        with beside() if beside else contextlib.nullcontext():
            out = p.communicate(timeout=SECS + 60)[0]
    try:
        busy = (cpu_seconds(pid) - cpu) / (time.monotonic() - t)
    except OSError:
        busy = float("nan")
    if p.returncode != 0:
        return [0.0, float("nan"), float("nan"), -1, busy, float("nan")]
    fields = [float(x) for x in out.split()]
    return fields[:4] + [busy, fields[5]]


def phase(name, watch, load, beside=None):
    """RUNS closed-loop and RUNS open-loop runs, alternating: medians, errors summed.
    `busy` is the host's CPU in the closed-loop runs: below its one core, the load (or
    the core it shares with the attacks) is what limits throughput, not the host."""
    watch.phase = name
    # The healthy plugin's calls that went long (aside, and into the long lane's turns,
    # `runtime/cpu.rs`): one that does waits behind the other plugins' long calls.
    long_before = value(watch.metrics, LONG_CALLS)
    closed, opened = [], []
    for _ in range(RUNS):
        watch.window = f"{name}, closed loop"
        with profiled(watch.host.pid, watch.window):
            closed.append(healthy(watch.host.pid, load, None, beside, watch.window))
        watch.window = f"{name}, {RATE:,}/s"
        opened.append(healthy(watch.host.pid, load, RATE, beside, watch.window))
    watch.window = "between phases"
    med = lambda rows, i: statistics.median(r[i] for r in rows)
    failed = sum(1 for r in closed + opened if r[3] < 0)
    errors = sum(int(r[3]) for r in closed + opened if r[3] >= 0)
    long_after = value(watch.metrics, LONG_CALLS)
    went_long = long_after - long_before if None not in (long_before, long_after) else float("nan")
    return {"name": name, "rps": med(closed, 0), "p50": med(opened, 1), "p99": med(opened, 2),
            "errors": errors, "failed": failed, "alive": watch.host.poll() is None, "busy": med(closed, 4),
            # A run that could not connect has no longest review (nan), which max() would
            # keep or drop by its place in the list.
            "longest": max((r[5] for r in opened if r[5] == r[5]), default=float("nan")), "long": went_long}


def new_connection(port, ca):
    """Whether a client arriving now completes a TLS handshake with the host."""
    ctx = ssl.create_default_context(cafile=ca)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=3) as s, \
                ctx.wrap_socket(s, server_hostname="127.0.0.1") as t:
            t.do_handshake()
            return True
    except (OSError, ssl.SSLError):
        return False


def hold_cm(ns, i, mode="hold"):
    return (f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: hold-{i}, namespace: {ns}, labels: {{hostile: \"true\"}}}}\n"
            f"data: {{mode: {mode}}}\n")


def pack(tmp, wasm, name, settings, gz="auto"):
    """Plugin `name` (code `wasm`) in ConfigMap `name` of NS, granted its RBAC first."""
    file, sfile = os.path.join(tmp, f"{name}.wasm"), os.path.join(tmp, f"{name}.settings.yaml")
    shutil.copy(wasm, file)
    open(sfile, "w").write(settings)
    grant(file, name, sfile, NS)
    out = subprocess.run([HOST, "pack", file, "--name", name, "--namespace", NS, f"--settings={name}={sfile}",
                          f"--gzip={gz}"], env=ENV, check=True, capture_output=True, text=True).stdout
    kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=out)


def budget_flags():
    """The host's memory budget flags, when this binary has them (sized to fit 1 GiB)."""
    help = subprocess.run([HOST, "run", "--help"], capture_output=True, text=True).stdout
    flags = []
    if "--plugin-memory-budget-mib" in help:
        flags += ["--plugin-memory-budget-mib", os.environ.get("ABUSE_BUDGET_MIB", "640")]
    if "--plugin-memory-share-percent" in help:
        flags += ["--plugin-memory-share-percent", os.environ.get("ABUSE_SHARE_PERCENT", "25")]
    return flags


def churn_base():
    """The largest test plugin that still fits a ConfigMap gzipped: the ~1 MiB new
    version the churn writes ten times a second."""
    fits = [p for p in ("memcached.wasm", "probe.wasm") if len(gzip.compress(open(os.path.join(PLUGINS, p), "rb").read(), 1)) < 900 << 10]
    return os.path.join(PLUGINS, max(fits, key=lambda p: os.path.getsize(os.path.join(PLUGINS, p))))


def main():
    load_bin, attack_bin = build("admission_load"), build("abuse_load")
    build()
    kubectl("apply", "--server-side", "-f", os.path.join(ROOT, "deploy", "crds", "sidecarset.yaml"))
    subprocess.run([os.path.join(ROOT, "scripts", "wait-crd.sh"), "sidecarsets.apps.kruise.io"], env=ENV, check=True)
    for ns in ["bench-admission", NS, "abuse-churn", *(f"abuse-{h[-1]}" for h in HOSTILE)]:
        kubectl("create", "namespace", ns, check=False)
    flags = budget_flags()
    print(f"host: {HOST}; memory budget flags: {' '.join(flags) or 'absent from this binary'}"
          + (f"; load generator at {'FIFO priority' if LOAD_RANK[0] == 'chrt' else 'nice'} {LOAD_RANK[2]}" if LOAD_RANK else ""))
    cg = cgroup(LIMIT)
    print(f"memory cgroup: {cg + ' (1 GiB, swap included)' if cg else 'none'}")
    # Core 0 is the host's alone (see benchlib.control_plane_on); the load, the attacks
    # and the control plane share core 1.
    with tempfile.TemporaryDirectory() as tmp, control_plane_on("1"):
        plugins = os.path.join(tmp, "plugins")
        os.mkdir(plugins)
        shutil.copy(os.path.join(PLUGINS, "sidecarset.wasm"), plugins)
        subprocess.run([load_bin, "certs", tmp], check=True)
        for h in HOSTILE:
            pack(tmp, os.path.join(PLUGINS, "hostile.wasm"), h, f"namespace: abuse-{h[-1]}\n")
        base = churn_base()
        pack(tmp, base, "churn", "namespace: abuse-churn\n", gz="always")
        if "memcached" in base:
            kubectl("apply", "--server-side", "-f", os.path.join(ROOT, "deploy", "crds", "memcached.yaml"))
        port = adm.free_port()
        log_path = os.path.join(tmp, "host.log")
        log = open(log_path, "w")
        cmd = ["taskset", "-c", "0", HOST, "run", "--plugins-dir", plugins, *grant_dir(plugins),
               "--plugins-configmaps", "--plugins-namespace", NS, "--metrics-bind-address", "127.0.0.1:0",
               "--webhooks", "--webhook-bind-address", f"127.0.0.1:{port}", *flags,
               "--webhook-cert-file", os.path.join(tmp, "tls.crt"), "--webhook-key-file", os.path.join(tmp, "tls.key")]
        # Joins the cgroup before it becomes the host (exec keeps the PID), so that every
        # byte the host ever maps is counted against the limit.
        if cg:
            cmd = ["sh", "-c", f'echo $$ > {cg}/cgroup.procs && exec "$@"', "sh", *cmd]
        host = subprocess.Popen(cmd, env=dict(ENV, TOKIO_WORKER_THREADS="1", WASMOP_LOG="warn,wasmop::cli=info,wasmop::registry=info"),
                                stdout=log, stderr=log)
        watch, rows, attacks, machine = None, [], "", []
        try:
            metrics = wait_ready(log_path)
            watch = Watch(host, metrics)
            watch.start()
            ca = os.path.join(tmp, "ca.crt")
            setup_sidecarset(port, ca)
            load = ["taskset", "-c", "1", *LOAD_RANK, load_bin, "run", f"https://127.0.0.1:{port}/sidecarset/inject-pod", ca, str(CONNS)]
            subprocess.run(load + ["2"], capture_output=True)  # warm-up
            settle(host.pid, 10 if QUICK else 90)
            # How much this VM's speed swings at all, with the host idle: the ratio
            # below cannot be steadier than that (`corespeed`).
            machine.append("before: " + corespeed.describe(0, 2 if QUICK else 10))
            for n in range(CYCLES):
                if n:
                    drain(host.pid)
                suffix = f" {n + 1}" if CYCLES > 1 else ""
                rows.append(phase("alone" + suffix, watch, load))
                rows.append(under_attack(watch, load, host, attack_bin, port, ca, base, suffix))
                attacks += rows[-1].pop("attacks")
                if host.poll() is not None:
                    break
            if host.poll() is None:
                drain(host.pid)
                rows.append(phase("after", watch, load))
                machine.append("after: " + corespeed.describe(0, 2 if QUICK else 10))
            hwm = vm(host.pid, "VmHWM")
            # What the churn cost the host: versions loaded and Cranelift tier-ups.
            lines = open(log_path).readlines()
            attacks += (f"the churn plugin: {sum('plugin loaded' in l and 'plugin=churn ' in l for l in lines)} versions "
                        f"loaded, {sum('rejected' in l and 'plugin=churn ' in l for l in lines)} rejected; "
                        f"{sum('plugin code optimized' in l for l in lines)} tier-ups in all\n")
            if os.environ.get("ABUSE_KEEP_LOG"):
                shutil.copy(log_path, os.environ["ABUSE_KEEP_LOG"])
        finally:
            if watch:
                watch.stop.set()
            alive = host.poll() is None
            code = host.returncode
            if alive:
                host.terminate()
                host.wait(timeout=60)
            oom, failcnt = cg_read(cg, "memory.oom_control"), cg_read(cg, "memory.failcnt")
            cg_max = cg_read(cg, "memory.max_usage_in_bytes") / (1 << 20)
            for h in HOSTILE:
                kubectl("delete", "configmap", "-n", f"abuse-{h[-1]}", "-l", "hostile=true", "--wait=false", check=False)
            kubectl("delete", "configmap", "-n", NS, "-l", "wasmop.io/plugin=true", "--wait=false", check=False)
            kubectl("delete", "mutatingwebhookconfiguration", "bench-abuse", check=False)
            kubectl("delete", "sidecarset", "bench-abuse-sidecars", "--wait=false", check=False)
            if not alive:
                print(f"HOST DIED (exit {code}); its log ends:\n" + "".join(open(log_path).readlines()[-15:]), file=sys.stderr)
            if cg:
                for _ in range(50):
                    try:
                        os.rmdir(cg)
                        break
                    except OSError:
                        time.sleep(0.2)
    report(rows, watch.peaks if watch else {}, watch.threads if watch else {}, attacks, alive, oom, failcnt, cg_max, hwm if alive else None)
    print("".join(f"\n{m}" for m in machine))
    sys.exit(0 if alive else 1)


def setup_sidecarset(port, ca_file):
    """bench-admission's SidecarSet, defaulted by the host's own webhook on its way in."""
    ca = __import__("base64").b64encode(open(ca_file, "rb").read()).decode()
    config = adm.DEFAULTING.replace("{name: bench-admission}", "{name: bench-abuse}")
    kubectl("apply", "-f", "-", stdin=config.format(port=port, ca=ca))
    kubectl("apply", "-f", "-", stdin=adm.SIDECARSET.replace("bench-sidecars", "bench-abuse-sidecars"))
    if not kubectl("get", "sidecarset", "bench-abuse-sidecars", "-o",
                   "jsonpath={.metadata.annotations.kruise\\.io/sidecarset-hash}").stdout:
        raise RuntimeError("the SidecarSet was not defaulted by the host's webhook")
    time.sleep(1)


def under_attack(watch, load, host, attack_bin, port, ca, base, suffix=""):
    """Every attack at once. Reviews, holds and churn run through the whole window; the
    connection-holding attacks (handshakes, bodies) start anew beside each healthy run
    once its connections are up, as an apiserver's keep-alive connections are there
    before an attack begins. Whether a client arriving mid-attack gets in is probed
    and reported apart."""
    holds = "".join(hold_cm(f"abuse-{h[-1]}", i) + "---\n" for h in HOSTILE for i in range(HOLDS))
    if "holds" in ONLY:
        kubectl("apply", "-f", "-", stdin=holds)
    run = lambda secs, *attacks: subprocess.Popen(
        ["taskset", "-c", "1", attack_bin, f"127.0.0.1:{port}", ca, str(secs), *attacks],
        env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    pick = lambda pairs: [a for name, a in pairs if name in ONLY]
    steady = run(ATTACK_SECS, "none", *pick([("paths", f"paths:{PATHS}"), ("grab", f"grab:{GRABS}:/hostile-a/grab:abuse-a"),
                                     ("churn", f"churn:{NS}/churn/churn.wasm.gz:{base}:{CHURN_MS}")]))
    waves, probes = [], []
    holding = pick([("handshake", f"handshake:{HANDSHAKES}"), ("bodies", f"bodies:{BODIES}:/sidecarset/inject-pod")])

    @contextlib.contextmanager
    def wave():
        time.sleep(0.3)  # admission_load connects within its first 100 ms
        if not holding:
            yield
            return
        w = run(SECS - 0.5, *holding)
        try:
            time.sleep(SECS / 2)
            probes.append(new_connection(port, ca))
            yield
        finally:
            waves.append(w.communicate(timeout=60)[0])
    try:
        time.sleep(1 if QUICK else 3)
        row = phase(("under attack" if ONLY == set(ATTACKS) else "under " + "+".join(a for a in ATTACKS if a in ONLY)) + suffix,
                    watch, load, wave)
        out = steady.communicate(timeout=ATTACK_SECS + 120)[0]
    finally:
        for p in [steady]:
            if p.poll() is None:
                p.kill()
        kubectl("delete", "-f", "-", "--wait=false", stdin=holds, check=False)
    row["alive"] = host.poll() is None
    row["attacks"] = out + "".join(waves) + f"a new client mid-attack completed its TLS handshake {sum(probes)} of {len(probes)} times\n"
    return row


def report(rows, peaks, threads, attacks, alive, oom, failcnt, cg_max, hwm):
    print("\nAttacks (abuse_load):\n" + "".join(f"- {l}\n" for l in attacks.strip().splitlines()))
    print(f"| phase | closed loop ({CONNS} conns) | host CPU then | {RATE:,}/s offered: p50 | p99 | longest | errors | "
          "healthy calls gone long | host peak RSS | metric series (peak) | host alive |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        rss, n = peaks.get(r["name"], [0, 0])
        errors = f"{r['errors']}" + (f" + {r['failed']} runs could not connect" if r["failed"] else "")
        per = r["busy"] / r["rps"] * 1e6 if r["rps"] else float("nan")
        print(f"| {r['name']} | {r['rps']:.0f} reviews/s | {r['busy']:.0%}, {per:.0f} µs/review | {r['p50']:.2f} ms | {r['p99']:.2f} ms | "
              f"{r['longest']:.1f} ms | {errors} | {r['long']:.0f} | {rss:.0f} MiB | {n} | {'yes' if r['alive'] else 'NO'} |")
    print(f"\nhost alive at the end: {'yes' if alive else 'NO'}; peak RSS (VmHWM): "
          f"{f'{hwm:.0f} MiB' if hwm else 'n/a (host gone)'}; cgroup peak usage {cg_max:.0f} MiB, "
          f"limit hit {failcnt} times, OOM kills {oom}")
    print("\nthe host's CPU seconds per thread name, in each phase's healthy runs (sampled 4/s; a thread named for"
          " its work while it does it, as compiles are, counts under that name):")
    for name, per in threads.items():
        print(f"- {name}: " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(per.items(), key=lambda kv: -kv[1]) if v >= 0.05))
    if CYCLES > 1:
        # Each attack phase against the mean of the alone phases either side of it.
        ratios = [r["rps"] * 2 / (rows[i - 1]["rps"] + rows[i + 1]["rps"])
                  for i, r in enumerate(rows) if r["name"].startswith("under ") and i + 1 < len(rows)]
        p99s = [r["p99"] for r in rows if r["name"].startswith("under ")]
        longest = [r["longest"] for r in rows if r["name"].startswith("under ")]
        median = statistics.median(ratios) if ratios else float("nan")
        print(f"under attack, each against the alone phases either side: {', '.join(f'{x:.0%}' for x in ratios)}; "
              f"median {median:.0%} (goal ≥ 90 %); p99 {', '.join(f'{x:.2f}' for x in p99s)} ms (goal < 10 ms); "
              f"longest review {', '.join(f'{x:.1f}' for x in longest)} ms")
        return
    alone = next((r for r in rows if r["name"] == "alone"), None)
    hit = next((r for r in rows if r["name"].startswith("under ")), None)
    if alone and hit and alone["rps"]:
        ratio = hit["rps"] / alone["rps"]
        after = next((r for r in rows if r["name"] == "after"), None)
        # This shared VM's throughput drifts between phases (±30 % seen): the phase
        # after the attack is a second baseline.
        also = f" ({hit['rps'] / after['rps']:.0%} of after's)" if after and after["rps"] else ""
        print(f"under attack: {ratio:.0%} of the alone throughput{also} (goal ≥ 90 %), "
              f"p99 {hit['p99']:.2f} ms (goal < 10 ms)")


if __name__ == "__main__":
    main()
