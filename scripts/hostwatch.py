"""What a benchmark watches of a host process it started: the memory cgroup it runs
in, its RSS, its series count on /metrics and the CPU each of its threads spends.
Used by `scripts/bench-abuse.py`, which must show that none of them grows without
bound under attack (issue 18)."""

import os, sys, threading, time, urllib.request

from benchlib import cpu_seconds


def cgroup(limit):
    """A new memory cgroup of `limit` bytes (swap included) under this process's own, or None
    with the reason printed when the controller is not writable here."""
    try:
        mine = next(l.split(":", 2)[2].strip() for l in open("/proc/self/cgroup") if l.split(":")[1] == "memory")
        path = f"/sys/fs/cgroup/memory{mine.rstrip('/')}/wasmop-abuse-{os.getpid()}"
        os.mkdir(path)
        open(f"{path}/memory.limit_in_bytes", "w").write(str(limit))
        try:
            open(f"{path}/memory.memsw.limit_in_bytes", "w").write(str(limit))
        except OSError:
            pass  # no swap accounting: there is no swap to escape to either
        return path
    except (OSError, StopIteration) as e:
        print(f"no writable memory cgroup ({e}): relying on the host's budget flag alone", file=sys.stderr)
        return None


def cg_read(cg, name):
    try:
        text = open(f"{cg}/{name}").read()
    except (OSError, TypeError):
        return 0
    if name == "memory.oom_control":
        return int(next((l.split()[1] for l in text.splitlines() if l.startswith("oom_kill ")), 0))
    return int(text)


def vm(pid, field):
    """A /proc/PID/status field in MiB (None once the process is gone)."""
    try:
        line = next(l for l in open(f"/proc/{pid}/status") if l.startswith(field + ":"))
        return int(line.split()[1]) / 1024
    except (OSError, StopIteration):
        return None


def settle(pid, limit=90):
    """Until the host has been idle for a second (its background Cranelift tier-ups
    done): alone must not be measured beside the host's own compiles."""
    end = time.time() + limit
    while time.time() < end:
        before = cpu_seconds(pid)
        time.sleep(1)
        if cpu_seconds(pid) - before < 0.05:
            return
    print(f"the host was still busy after {limit} s; measuring anyway", file=sys.stderr)


def scrape(metrics):
    """The sample lines on /metrics, or None if the host does not answer."""
    try:
        text = urllib.request.urlopen(f"http://{metrics}/metrics", timeout=5).read().decode()
    except Exception:
        return None
    return [l for l in text.splitlines() if l and not l.startswith("#")]


def series(metrics):
    """Sample lines on /metrics: one per series."""
    lines = scrape(metrics)
    return None if lines is None else len(lines)


def value(metrics, sample):
    """One series' value (`name{labels}` as the host writes it): 0 while it is absent,
    None if the host does not answer."""
    lines = scrape(metrics)
    if lines is None:
        return None
    return next((float(l.rsplit(" ", 1)[1]) for l in lines if l.rsplit(" ", 1)[0] == sample), 0.0)


class Watch(threading.Thread):
    """Samples the host's RSS (4/s) and its series count (every 2 s) into the current
    phase's peaks, until `stop` or the host's exit."""

    def __init__(self, host, metrics):
        super().__init__(daemon=True)
        self.host, self.metrics, self.phase, self.peaks = host, metrics, "start", {}
        self.stop = threading.Event()
        # CPU seconds per thread name, per phase: which of the host's threads did the
        # work (the runtime's worker, compiles, aside calls, sources, ...).
        self.threads, self.ticks, self.window = {}, {}, "start"

    def sample_threads(self):
        hz, per = os.sysconf("SC_CLK_TCK"), self.threads.setdefault(self.window, {})
        try:
            tids = os.listdir(f"/proc/{self.host.pid}/task")
        except OSError:
            return
        for tid in tids:
            try:
                stat = open(f"/proc/{self.host.pid}/task/{tid}/stat").read()
            except OSError:
                continue
            name, f = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
            ticks = int(f[11]) + int(f[12])
            per[name] = per.get(name, 0) + (ticks - self.ticks.get(tid, ticks if self.window == "start" else 0)) / hz
            self.ticks[tid] = ticks

    def sample(self, n):
        self.sample_threads()
        peak = self.peaks.setdefault(self.phase, [0, 0])
        rss = vm(self.host.pid, "VmRSS")
        if rss is not None:
            peak[0] = max(peak[0], rss)
        if n % 8 == 0 and (s := series(self.metrics)) is not None:
            peak[1] = max(peak[1], s)

    def run(self):
        n = 0
        while not self.stop.wait(0.25) and self.host.poll() is None:
            self.sample(n)
            n += 1
