"""How promptly this machine wakes an idle core: what a latency benchmark's tail depends
on before any code of ours runs.

Why: on a VM, a core with nothing to run halts, and waking it (a timer, or another core
sending it work) is the hypervisor's job. With guest halt polling off (the kernel's
`haltpoll.guest_halt_poll_ns=0`, as on this project's Firecracker machines) every idle
spell ends in a halt, and the hypervisor takes from microseconds to several
milliseconds to run the core again. In a traced admission run (BENCHMARKS.md, issue
23), 61 of 68 quiet-run stalls of 4 ms or more had a core that did not run at all for
most of the stall, and 5 more a wake-up interrupt that reached a halted core 1-8 ms
late. KVM guests poll for 200 µs before halting by default, which hides part of it.

`probe(core, secs)` measures it: one thread on `core` sleeps 1 ms at a time and records
how late each wake-up was. `halt_poll(ns)` sets the guest's halt polling for a block
and restores it after (root only; a machine without the haltpoll driver is left
alone)."""

import contextlib, os, subprocess, sys

HALT_POLL = "/sys/module/haltpoll/parameters/guest_halt_poll_ns"

# The probe runs as its own process so that it can be pinned without pinning the caller.
PROBE = """
import sys, time
secs, gap = float(sys.argv[1]), 1e-3
late, end = [], time.monotonic() + secs
while time.monotonic() < end:
    t = time.monotonic()
    time.sleep(gap)
    late.append(time.monotonic() - t - gap)
late.sort()
n = len(late)
print(late[n // 2] * 1e3, late[min(n - 1, int(n * 0.999))] * 1e3, late[-1] * 1e3, sum(x > 1e-3 for x in late))
"""


def halt_poll_ns():
    """The guest's halt polling in ns, or None where there is no haltpoll driver."""
    try:
        return int(open(HALT_POLL).read())
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def halt_poll(ns):
    """Guest halt polling set to `ns` meanwhile (None: left as it is)."""
    before = halt_poll_ns()
    if ns is None or before is None:
        if ns is not None:
            print("warning: this machine has no haltpoll driver; halt polling left alone", file=sys.stderr)
        yield
        return
    try:
        open(HALT_POLL, "w").write(str(ns))
    except OSError as e:
        print(f"warning: could not set guest halt polling ({e}); left at {before} ns", file=sys.stderr)
        yield
        return
    try:
        yield
    finally:
        open(HALT_POLL, "w").write(str(before))


def probe(core, secs):
    """Wake-ups of an otherwise idle `core` over `secs`: (median, p99.9, longest) lateness
    in ms and how many were over 1 ms late."""
    out = subprocess.run(["taskset", "-c", str(core), sys.executable, "-c", PROBE, str(secs)],
                         check=True, capture_output=True, text=True).stdout.split()
    return float(out[0]), float(out[1]), float(out[2]), int(out[3])


def describe(core, secs):
    """One line for a benchmark's output: the probe's figures and the halt polling."""
    p50, p999, worst, over = probe(core, secs)
    poll = halt_poll_ns()
    poll = "no haltpoll driver" if poll is None else f"guest halt polling {poll // 1000} µs"
    return (f"machine: core {core}'s timer wake-ups over {secs} s idle were late by {p50:.2f} ms median, "
            f"{p999:.2f} ms p99.9, {worst:.2f} ms at most ({over} over 1 ms); {poll}")


if __name__ == "__main__":
    core, secs = (int(sys.argv[1]), float(sys.argv[2])) if len(sys.argv) > 2 else (0, 10.0)
    print(describe(core, secs))
