"""What the benchmark harnesses share: the build they measure, kubectl against the
bench cluster, and waiting for a host (started with `--metrics-bind-address
127.0.0.1:0`) to report ready.

WASMOP_BENCH_PROFILE picks the cargo profile: `bench` (default: what `cargo bench`
uses, optimized) for figures, `dev` for `make bench-smoke`, which only proves the
harnesses still run and so reuses the debug build the tests made."""

import contextlib, os, shutil, subprocess, time, urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
PROFILE = os.environ.get("WASMOP_BENCH_PROFILE", "bench")
# `--profile bench` writes to target/release, `dev` to target/debug.
OUT = os.path.join(TARGET, "debug" if PROFILE == "dev" else "release")
# WASMOP_BENCH_HOST: another host binary to measure (A/B runs of two builds), not built here.
HOST = os.environ.get("WASMOP_BENCH_HOST") or os.path.join(OUT, "wasmop")
ENV = dict(os.environ)
ENV.setdefault("KUBECONFIG", os.path.join(ROOT, "target", "cluster", "kubeconfig"))
# The JavaScript engine `make engines` built, whichever host binary is measured.
ENV.setdefault("WASMOP_JS_ENGINE", os.path.join(ROOT, "target", "plugins", "wasmop-js-engine.wasm"))


def kubectl(*args, stdin=None, check=True):
    return subprocess.run(["kubectl", *args], input=stdin, env=ENV, check=check, capture_output=True, text=True)


def metrics_addr(log):
    """Where the host whose log is at `log` serves /metrics and /readyz (None until it says)."""
    return next((l.split("addr=")[1].split()[0] for l in open(log) if "serving /metrics" in l), None)


def wait_ready(log, timeout=300):
    """Until the host whose log is at `log` answers 200 on /readyz; returns its metrics address."""
    end = time.time() + timeout
    while time.time() < end:
        addr = metrics_addr(log)
        if addr:
            try:
                if urllib.request.urlopen(f"http://{addr}/readyz", timeout=2).status == 200:
                    return addr
            except Exception:
                pass
        time.sleep(0.2)
    raise RuntimeError("host not ready: " + open(log).read()[-2000:])


def build(example=None):
    """The host (or one of its examples) in the chosen profile; returns the binary.
    WASMOP_BENCH_EXAMPLES=DIR: the examples (load generators) already built there, with
    WASMOP_BENCH_HOST, so that an A/B run builds nothing while the sources change."""
    if not example and os.environ.get("WASMOP_BENCH_HOST"):
        return HOST
    if example and os.environ.get("WASMOP_BENCH_EXAMPLES"):
        return os.path.join(os.environ["WASMOP_BENCH_EXAMPLES"], example)
    # --workspace, as everywhere: the same dependency features as the tests' build. The
    # host and every example in one build, whichever is asked for: `--bins` alone
    # unifies dependency features without the examples' dev-dependencies, so asking
    # for the two in turn would rebuild half the dependency tree each time.
    args = ["cargo", "build", "-q", "--workspace", "--profile", PROFILE, "--bins", "--examples"]
    # Said aloud: after a source change this is a full optimized build (~10 min here),
    # which looked like a hung benchmark.
    print(f"building the {PROFILE} profile (minutes after a source change): {' '.join(args)}", flush=True)
    subprocess.run(args, cwd=ROOT, check=True)
    return os.path.join(OUT, "examples", example) if example else HOST


# Where the ServiceAccounts of --plugins-dir plugins live in the benchmarks.
ACCOUNTS = "default"


def grant(wasm, name, settings_file=None, namespace=ACCOUNTS):
    """What a cluster admin does before a plugin runs: `wasmop rbac` for it, applied.
    The host then acts as the plugin's own ServiceAccount, as deployed."""
    args = [HOST, "rbac", wasm, "--name", name, "--namespace", namespace]
    if settings_file and os.path.exists(settings_file):
        args.append(f"--settings={settings_file}")
    rbac = subprocess.run(args, env=ENV, check=True, capture_output=True, text=True).stdout
    kubectl("apply", "-f", "-", stdin=rbac)
    if name == "sidecarset":
        # Where it keeps each SidecarSet's versions by default (Kruise's namespace);
        # without it the controller records no revision and rolls nothing.
        kubectl("apply", "-f", "-", stdin="apiVersion: v1\nkind: Namespace\nmetadata:\n  name: kruise-system\n")


def grant_dir(plugins_dir, namespace=ACCOUNTS):
    """Grants every plugin of a --plugins-dir; returns the host flags that go with it."""
    for f in sorted(os.listdir(plugins_dir)):
        if f.endswith(".wasm"):
            name = f[: -len(".wasm")]
            grant(os.path.join(plugins_dir, f), name, os.path.join(plugins_dir, f"{name}.settings.yaml"), namespace)
    return ["--plugins-dir-service-account-namespace", namespace]


def plugins_dir_with(tmp, wasm, name):
    """A --plugins-dir in `tmp` holding `wasm` as plugin `name`, granted: (the dir, the
    host flags that go with it)."""
    plugins = os.path.join(tmp, "plugins")
    os.mkdir(plugins)
    shutil.copy(wasm, os.path.join(plugins, f"{name}.wasm"))
    return plugins, grant_dir(plugins)


def control_plane_pids():
    """The local control plane's processes (tests/cluster: etcd, apiserver,
    controller-manager, scheduler, kwok), found by their binary."""
    binary = os.path.join(ROOT, "tests", "cluster", "bin", "cluster") + " "
    pids = []
    for p in os.listdir("/proc"):
        try:
            if p.isdigit() and open(f"/proc/{p}/cmdline", "rb").read().replace(b"\0", b" ").decode().startswith(binary):
                pids.append(int(p))
        except OSError:
            pass
    return pids


@contextlib.contextmanager
def control_plane_on(cores):
    """Every thread of the local control plane confined to `cores` (a taskset list)
    meanwhile, then back on every core. Why: on a two-core machine an apiserver that an
    attack keeps busy (1 MiB ConfigMap writes, say) would otherwise take the host's own
    core too, and the figures would measure the apiserver, not the host; on a real
    node the control plane runs elsewhere."""
    pids = control_plane_pids()
    every = f"0-{os.cpu_count() - 1}"
    try:
        for p in pids:
            subprocess.run(["taskset", "-a", "-p", "-c", cores, str(p)], capture_output=True)
        yield
    finally:
        for p in pids:
            subprocess.run(["taskset", "-a", "-p", "-c", every, str(p)], capture_output=True)


def cpu_ticks(cpu):
    """The /proc/stat times of one core so far: (all, steal), in ticks."""
    for line in open("/proc/stat"):
        if line.startswith(f"cpu{cpu} "):
            v = [int(x) for x in line.split()[1:]]
            return sum(v[:8]), v[7]
    return 0, 0


@contextlib.contextmanager
def steal_on(cpu, into):
    """Appends to `into` the share of core `cpu`'s time that the hypervisor took for
    other guests (steal) while the block ran. On a shared VM that time is lost to
    whatever runs on the core: a run with much steal measures the neighbours, not us."""
    all0, steal0 = cpu_ticks(cpu)
    try:
        yield
    finally:
        all1, steal1 = cpu_ticks(cpu)
        into.append((steal1 - steal0) / max(all1 - all0, 1))


def cpu_seconds(pid):
    """User and system CPU time of process `pid` so far (all its threads)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_cpu(pid):
    """User and system CPU time of each thread of process `pid` so far: {tid: (name, s)}."""
    out = {}
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            name, rest = open(f"/proc/{pid}/task/{t}/stat").read().split("(", 1)[1].rsplit(")", 1)
        except OSError:
            continue  # ended meanwhile
        fields = rest.split()
        out[t] = (name, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"))
    return out


def thread_cpu_since(before, after, total):
    """The CPU each thread name took between two `thread_cpu` readings, threads of one
    name (a runtime's workers) together, each under the name it has at the end. A thread
    is matched by id, not name: a pool thread renamed for a compile, or one that ended
    (tokio's blocking threads end after 10 s idle), would otherwise make a name's sum
    drop. What threads that ended meanwhile took (`total`, the process's CPU over the
    same span, less the rest) is given as one more name."""
    out = {}
    for tid, (name, s) in after.items():
        out[name] = out.get(name, 0.0) + s - before.get(tid, (name, 0.0))[1]
    ended = total - sum(out.values())
    if ended >= 0.05:  # both are counted in clock ticks: less is rounding
        out["(threads ended meanwhile)"] = ended
    return out


def review_dump(path):
    """An ADMISSION_LOAD_DUMP file (`host/examples/admission_load.rs`): its start as Unix
    time and each review's (send time in s from the start, latency in ms)."""
    lines = open(path).read().splitlines()
    start = float(lines[0].split()[2]) if lines and lines[0].startswith("# start") else 0.0
    return start, [(float(t), float(ms)) for t, ms in (l.split() for l in lines if not l.startswith("#"))]
