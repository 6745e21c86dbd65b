#!/usr/bin/env python3
"""Admission throughput and latency: Pod-injection AdmissionReviews against the
SidecarSet plugin's `inject-pod` handler.

The host runs pinned to one core (`taskset -c 0`, one tokio worker) with a release
build; the load generator (`host/examples/admission_load.rs`) is a second process on
the other core, posting over TLS on keep-alive connections. Each review injects two
sidecars (the SidecarSet is read from the plugin's watch cache, as on a leader; it was
defaulted by the plugin's own webhook on its way in, as in a deployment).
Three rows, each the median of RUNS runs: throughput with every connection sending back
to back (closed loop); latency with the goal's 5,000 reviews/s offered, evenly spaced
(open loop); and the same rate as a Poisson process, as traffic from many independent
clients arrives (bursts included). Each row also gives the host's CPU per review.

Each row also gives p99.9, the slowest review (the longest stall) and the steal time on
the host's core: on a shared VM the hypervisor can take half of that core for other
guests, and a run that saw much steal measured the neighbours (BENCHMARKS.md, issue 23).
Timing starts once the plugin's code is optimized (the Cranelift tier-up).

Usage: scripts/bench-admission.py [--quick]  (needs `make plugins` and a control plane).
BENCH_RUNS=N: N runs instead of 5; BENCH_SECS=S: runs of S s instead of 10;
WASMOP_BENCH_HOST=PATH: measure that host binary; WASMOP_BENCH_PLUGIN=PATH: that sidecarset.wasm; BENCH_HOST_LOG=FILE: keep the host's log;
ADMISSION_LOAD_DUMP=PREFIX: every review of run N in PREFIX.N (`scripts/admission-stalls.py`);
BENCH_TRACE=DIR: the runs' reviews and a scheduler trace of every core (perf) in DIR, for
`scripts/admission-stall-causes.py DIR`; BENCH_PROFILE=FILE: the host's call stacks
(perf, kernel stacks whole, the host's own by frame pointer) through the closed-loop
runs, for `perf report -i FILE`; BENCH_HALT_POLL_NS=N: the guest's halt polling
set to N ns for the invocation (root, haltpoll driver; `scripts/wakeups.py`). Below the
rows: how late this machine wakes an idle core (`wakeups.describe`), the floor a VM puts
under every stall before any code of ours runs, and how much the same work's CPU time
swings on it (`corespeed.describe`; BENCHMARKS.md, issue 23);
BENCH_BUSY=1: two more rows, the same rate while the host has other work (`busy`): the
Memcached plugin (WASMOP_BENCH_MEMCACHED, else target/plugins/memcached.wasm) reconciles
a burst of 100 new Memcacheds and the SidecarSet plugin is hot-reloaded, in every run
(BENCH_BUSY=burst or =reload: only that one). BENCH_RELOAD_EDIT=FILE: the reloads
alternate between FILE (another build of the plugin, say with one message changed) and
the plugin, so each brings changed code, not only a new custom section: the host's
compile reuses what did not change (`runtime::reuse`), all of it for the same code."""

import base64, contextlib, os, shutil, signal, socket, statistics, subprocess, sys, tempfile, threading, time

import corespeed, wakeups
from benchlib import ENV, HOST, build, control_plane_on, control_plane_pids, cpu_seconds, grant_dir, kubectl, steal_on, thread_cpu, thread_cpu_since, wait_ready

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUICK = "--quick" in sys.argv
RUNS, SECS, CONNS = (1, 2, 4) if QUICK else (int(os.environ.get("BENCH_RUNS", 5)), int(os.environ.get("BENCH_SECS", 10)), 8)
# The goal's rate, offered for the latency row (BENCH_RATE to try another).
RATE = 200 if QUICK else int(os.environ.get("BENCH_RATE", 5000))
BUSY = {"1": {"burst", "reload"}, "burst": {"burst"}, "reload": {"reload"}}.get(os.environ.get("BENCH_BUSY", ""), set())
# BENCH_LOAD_NICE=-10: the load generator at that nice value (root only).
LOAD_NICE = ["nice", "-n", os.environ["BENCH_LOAD_NICE"]] if os.environ.get("BENCH_LOAD_NICE") else []
WITH = " and a ".join({"burst": f"burst of {10 if QUICK else 100} Memcacheds", "reload": "hot reload"}[b] for b in sorted(BUSY))

SIDECARSET = """apiVersion: apps.kruise.io/v1alpha1
kind: SidecarSet
metadata: {name: bench-sidecars}
spec:
  namespace: bench-admission
  selector: {matchLabels: {app: web}}
  containers:
  - {name: proxy, image: envoy:1.31, transferEnv: [{sourceContainerName: app, envName: TZ}]}
  - {name: logs, image: busybox:1.36, podInjectPolicy: AfterAppContainer, shareVolumePolicy: {type: enabled}}
"""

DEFAULTING = """apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {{name: bench-admission}}
webhooks:
- name: default-sidecarset.sidecarset.wasmop.io
  clientConfig: {{url: "https://127.0.0.1:{port}/sidecarset/default-sidecarset", caBundle: {ca}}}
  rules: [{{apiGroups: [apps.kruise.io], apiVersions: [v1alpha1], operations: [CREATE, UPDATE], resources: [sidecarsets]}}]
  sideEffects: None
  admissionReviewVersions: [v1]
  failurePolicy: Fail
"""


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def main():
    LOAD = build("admission_load")
    build()
    kubectl("apply", "--server-side", "-f", os.path.join(ROOT, "deploy", "crds", "sidecarset.yaml"))
    subprocess.run([os.path.join(ROOT, "scripts", "wait-crd.sh"), "sidecarsets.apps.kruise.io"], env=ENV, check=True)
    kubectl("create", "namespace", "bench-admission", check=False)
    with tempfile.TemporaryDirectory() as tmp:
        plugins = os.path.join(tmp, "plugins")
        os.mkdir(plugins)
        plugin = os.environ.get("WASMOP_BENCH_PLUGIN") or os.path.join(ROOT, "target", "plugins", "sidecarset.wasm")
        subprocess.run(["cp", plugin, os.path.join(plugins, "sidecarset.wasm")], check=True)
        if BUSY:
            memcached = os.environ.get("WASMOP_BENCH_MEMCACHED") or os.path.join(ROOT, "target", "plugins", "memcached.wasm")
            subprocess.run(["cp", memcached, os.path.join(plugins, "memcached.wasm")], check=True)
            kubectl("apply", "--server-side", "-f", os.path.join(ROOT, "deploy", "crds", "memcached.yaml"))
            subprocess.run([os.path.join(ROOT, "scripts", "wait-crd.sh"), "memcacheds.cache.example.com"], env=ENV, check=True)
        subprocess.run([LOAD, "certs", tmp], check=True)
        port = free_port()
        log = open(os.path.join(tmp, "host.log"), "w")
        identity = grant_dir(plugins)
        host = subprocess.Popen(
            ["taskset", "-c", "0", HOST, "run", "--plugins-dir", plugins, *identity, "--metrics-bind-address", "127.0.0.1:0",
             "--webhooks", "--webhook-bind-address", f"127.0.0.1:{port}",
             "--webhook-cert-file", os.path.join(tmp, "tls.crt"), "--webhook-key-file", os.path.join(tmp, "tls.key")],
            env=dict(ENV, TOKIO_WORKER_THREADS="1", WASMOP_LOG="warn,wasmop::cli=info,wasmop::registry=info,wasmop::runtime=info,"
                       "wasmop::runtime::host=warn,wasmop::runtime::output=warn,wasmop::runtime::script=warn"),
            stdout=log, stderr=log)
        try:
            wait_ready(os.path.join(tmp, "host.log"))
            # As deployed, the SidecarSet goes through the plugin's defaulting webhook
            # (which stores its version hashes) on its way in: the apiserver calls this
            # host for it on loopback. Only that one handler is registered, not all of
            # `wasmop webhook-config`'s: its inject-pod entry would route every Pod the
            # cluster creates through the host being measured.
            ca = base64.b64encode(open(os.path.join(tmp, "ca.crt"), "rb").read()).decode()
            kubectl("apply", "-f", "-", stdin=DEFAULTING.format(port=port, ca=ca))
            kubectl("apply", "-f", "-", stdin=SIDECARSET)
            hashed = kubectl("get", "sidecarset", "bench-sidecars", "-o",
                             "jsonpath={.metadata.annotations.kruise\\.io/sidecarset-hash}").stdout
            if not hashed:
                raise RuntimeError("the SidecarSet was not defaulted by the host's webhook")
            # Reviews are timed on the optimized code only: until the background tier-up
            # (Cranelift, on the host's one core) has replaced the baseline code, runs
            # would measure Winch's code and the compile beside it.
            tiered_up(os.path.join(tmp, "host.log"))
            url = f"https://127.0.0.1:{port}/sidecarset/inject-pod"
            load = ["taskset", "-c", "1", *LOAD_NICE, LOAD, "run", url, os.path.join(tmp, "ca.crt"), str(CONNS)]
            warm_env = {k: v for k, v in ENV.items() if k != "ADMISSION_LOAD_DUMP"}
            subprocess.run(load + ["2"], check=True, capture_output=True, env=warm_env)  # warm-up, not dumped
            # Throughput: each connection sends as soon as it is answered. Latency: the
            # goal's 5,000 reviews/s offered, evenly and at random (see admission_load.rs).
            with control_plane_paused():
                machine = wakeups.describe(0, 2 if QUICK else 10) + "\n" + corespeed.describe(0, 1 if QUICK else 10)
            with traced(host.pid), control_plane_paused():
                with profiled(host.pid):
                    closed = [measure(host.pid, load + [str(SECS)]) for _ in range(RUNS)]
                opened = [measure(host.pid, load + [str(SECS), str(RATE)]) for _ in range(RUNS)]
                poisson = [measure(host.pid, load + [str(SECS), f"poisson:{RATE}"]) for _ in range(RUNS)]
            # The busy rows need the apiserver; it runs on the load's core, as it would
            # run off the host's node.
            busy_even, busy_poisson = [], []
            if BUSY:
                with traced(host.pid, "busy"), control_plane_on("1"):
                    for rows, rate in ((busy_even, str(RATE)), (busy_poisson, f"poisson:{RATE}")):
                        rows += [measure(host.pid, load + [str(SECS), rate], beside=busy(plugins, plugin)) for _ in range(RUNS)]
        finally:
            # The bursts' Memcacheds carry the plugin's finalizer: removed while this
            # host still runs, so that no namespace is left terminating.
            kubectl("delete", "namespace", "-l", "bench=admission-burst", "--timeout=120s", check=False)
            host.terminate()
            host.wait(timeout=30)
            if os.environ.get("BENCH_HOST_LOG"):
                shutil.copy(os.path.join(tmp, "host.log"), os.environ["BENCH_HOST_LOG"])
            kubectl("delete", "mutatingwebhookconfiguration", "bench-admission", check=False)
            kubectl("delete", "sidecarset", "bench-sidecars", "--wait=false", check=False)
    report(f"{CONNS} connections, host on 1 core, closed loop", closed)
    report(f"{CONNS} connections, host on 1 core, {RATE:,} reviews/s offered, evenly spaced", opened)
    report(f"{CONNS} connections, host on 1 core, {RATE:,} reviews/s offered, Poisson arrivals", poisson)
    if BUSY:
        report(f"same, evenly spaced, with a {WITH}", busy_even)
        report(f"same, Poisson, with a {WITH}", busy_poisson)
        names = sorted({n for r in BUSY_THREADS for n in r}, key=lambda n: -statistics.median(r.get(n, 0) for r in BUSY_THREADS))
        print("\nbusy runs, the host's CPU by thread (median s per run; range): " + ", ".join(
            f"{n} {statistics.median(r.get(n, 0) for r in BUSY_THREADS):.2f} "
            f"({min(r.get(n, 0) for r in BUSY_THREADS):.2f}–{max(r.get(n, 0) for r in BUSY_THREADS):.2f})"
            for n in names if max(r.get(n, 0) for r in BUSY_THREADS) >= 0.01))
    print(f"\n{machine}")


def tiered_up(log, timeout=120):
    """Until the host at `log` says its plugin code was optimized (a tiered host's
    Cranelift tier-up, TIER_UP_DELAY after the load; seconds for the sidecarset plugin).
    A host that never tiers up (WASMOP_PLUGIN_COMPILER other than tiered, or a binary
    from before the log line) is measured as it is, with a warning, after `timeout`."""
    if os.environ.get("WASMOP_PLUGIN_COMPILER", "tiered") != "tiered":
        return
    end = time.time() + timeout
    while time.time() < end:
        if "plugin code optimized" in open(log).read():
            return
        time.sleep(0.2)
    print(f"warning: the host did not log 'plugin code optimized' within {timeout} s; timing the code it has",
          file=sys.stderr)


@contextlib.contextmanager
def traced(pid, name="quiet", d=None):
    """With BENCH_TRACE=DIR (or `d`), every core's context switches, wake-ups and a 2 kHz clock
    sample recorded meanwhile (perf, in DIR/perf-NAME.data), with what
    `admission-stall-causes.py` needs to line them up with the reviews: the host's pid
    and the monotonic clock's offset from Unix time (perf stamps events with the one,
    the load's dumps with the other)."""
    d = d or os.environ.get("BENCH_TRACE")
    if not d:
        yield
        return
    os.makedirs(d, exist_ok=True)
    open(os.path.join(d, "host.pid"), "w").write(str(pid))
    open(os.path.join(d, "offset"), "w").write(repr(time.time() - time.clock_gettime(time.CLOCK_MONOTONIC)))
    data = os.path.join(d, f"perf-{name}.data")
    with perf_meanwhile(["record", "-q", "-k", "mono", "-a", "-e", "sched:sched_switch,sched:sched_waking",
                         "-e", "cpu-clock/period=500000/", "-o", data]):
        yield


@contextlib.contextmanager
def profiled(pid):
    """With BENCH_PROFILE=FILE, the host's call stacks sampled at 1 kHz meanwhile."""
    out = os.environ.get("BENCH_PROFILE")
    if not out:
        yield
        return
    with perf_meanwhile(["record", "-q", "-g", "-F", "1000", "-p", str(pid), "-o", out]):
        yield


@contextlib.contextmanager
def perf_meanwhile(args):
    """`perf ARGS` running while the block runs (started a second before it)."""
    perf = subprocess.Popen(["perf", *args], stdout=subprocess.DEVNULL)
    time.sleep(1)
    try:
        yield
    finally:
        perf.send_signal(signal.SIGINT)
        perf.wait()


@contextlib.contextmanager
def control_plane_paused():
    """The local control plane's processes (tests/cluster) stopped while reviews are
    timed. This machine has two cores, one for the host and one for the load; the
    apiserver, etcd, controller-manager, scheduler and kwok would share both, as they
    would not on a real node (their timer wake-ups and GC cost the host about a quarter
    of its throughput and put their pauses into p99). Once the SidecarSet is in the
    host's watch cache, reviews need none of them. BENCH_PAUSE_CLUSTER=0 leaves them."""
    pids = control_plane_pids() if os.environ.get("BENCH_PAUSE_CLUSTER", "1") != "0" else []
    try:
        for p in pids:
            os.kill(p, signal.SIGSTOP)
        yield
    finally:
        for p in pids:
            os.kill(p, signal.SIGCONT)


RUN = iter(range(1, 1 << 20))
# Each busy run's host CPU by thread name (seconds), for the line below the rows.
BUSY_THREADS = []

MEMCACHED = "apiVersion: cache.example.com/v1alpha1\nkind: Memcached\nmetadata: {{name: m{i}, namespace: {ns}}}\nspec: {{size: 1}}\n"
BURSTS = iter(range(1, 1 << 20))


def busy(plugins, wasm):
    """What the host does beside one busy run's load: 2 s in, 100 Memcacheds created at
    once in a new namespace (a reconcile burst: each Memcached's Deployment created and
    its status written), and 4 s in, the SidecarSet plugin hot-reloaded: a new build of
    it lands in the plugins directory (the same code with a custom section appended,
    so the host loads, compiles and tiers up new bytes while the old ones serve)."""
    n = next(BURSTS)

    # --quick (runs of 2 s, `make bench-smoke`): the same steps, sooner and smaller.
    first, second, size = (0.5, 1, 10) if QUICK else (2, 4, 100)

    def run():
        time.sleep(first)
        if "burst" in BUSY:
            burst()
        if "reload" in BUSY:
            time.sleep(max(0, second - (time.time() - started)))
            reload()

    def burst():
        # Named per invocation: a namespace of an earlier one may still be terminating.
        ns = f"bench-admission-burst-{os.getpid()}-{n}"
        objects = f"apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}, labels: {{bench: admission-burst}}}}\n---\n" + "---\n".join(
            MEMCACHED.format(i=i, ns=ns) for i in range(size))
        subprocess.run(["taskset", "-c", "1", "kubectl", "apply", "-f", "-"], input=objects, env=ENV, check=True,
                       capture_output=True, text=True)

    def reload():
        name = b"wasmop-bench-reload"
        payload = bytes([len(name)]) + name + str(n).encode()
        section = b"\0" + leb128(len(payload)) + payload
        tmp = os.path.join(plugins, ".sidecarset.wasm.new")
        edit = os.environ.get("BENCH_RELOAD_EDIT")
        with open(tmp, "wb") as f:
            f.write(open(edit if edit and n % 2 else wasm, "rb").read() + section)
        os.replace(tmp, os.path.join(plugins, "sidecarset.wasm"))

    started = time.time()
    return run


def leb128(n):
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def measure(pid, load, beside=None):
    """One run of `load`: [reviews/s, p50 ms, p99 ms, errors, p99.9 ms, slowest ms, host
    CPU µs per review, steal on the host's core].
    With ADMISSION_LOAD_DUMP=PREFIX each run's reviews go to PREFIX.N (see admission_load.rs)."""
    env = dict(ENV)
    dump = os.path.join(os.environ["BENCH_TRACE"], "reviews") if os.environ.get("BENCH_TRACE") else os.environ.get("ADMISSION_LOAD_DUMP")
    if dump:
        env["ADMISSION_LOAD_DUMP"] = f"{dump}.{next(RUN)}"
    cpu, steal, threads = cpu_seconds(pid), [], thread_cpu(pid)
    with steal_on(0, steal):
        other = threading.Thread(target=beside) if beside else None
        if other:
            other.start()
        out = subprocess.run(load, check=True, capture_output=True, text=True, env=env).stdout.split()
        if other:
            other.join()
    cpu = cpu_seconds(pid) - cpu
    if beside:
        BUSY_THREADS.append(thread_cpu_since(threads, thread_cpu(pid), cpu))
    row = [float(x) for x in out]
    # The host's CPU per review: unlike reviews/s, time other tenants of the machine
    # take from the host's core does not count in it.
    return row + [cpu / max(row[0] * SECS, 1) * 1e6, steal[0]]


def report(setup, rows):
    """One table row: medians over runs of reviews/s, p50, p99 (with its range), p99.9
    and the slowest review (the longest any review waited: a stall shows here even
    when it is too short to move p99), host CPU per review, errors, and the most steal
    any run saw on the host's core (time the hypervisor gave other guests: on a shared
    VM, a run with steal times the neighbours as much as the host)."""
    rps, p50, p99, cpu, p999, worst = (statistics.median(r[i] for r in rows) for i in (0, 1, 2, 6, 4, 5))
    errors = sum(int(r[3]) for r in rows)
    # The spread of p99 and of the slowest review too: one run in several can catch a stall.
    spread = lambda i: f" ({min(r[i] for r in rows):.2f}–{max(r[i] for r in rows):.2f})" if len(rows) > 1 else ""
    steal = max(r[7] for r in rows)
    print(f"| {setup} | {rps:.0f} reviews/s | {p50:.2f} ms | {p99:.2f} ms{spread(2)} | {p999:.2f} ms | "
          f"{worst:.2f} ms{spread(5)} | {cpu:.0f} µs | {errors} | {steal:.0%} | {len(rows)} × {SECS} s |")


if __name__ == "__main__":
    with wakeups.halt_poll(int(os.environ["BENCH_HALT_POLL_NS"]) if os.environ.get("BENCH_HALT_POLL_NS") else None):
        main()
