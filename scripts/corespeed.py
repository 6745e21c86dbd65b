"""How steadily this machine's core runs the same work: what a throughput figure, or
the tail at a fixed offered rate, depends on before any code of ours runs.

Why: on this project's VMs the CPU time one admission review costs swings by up to 2x
from one second to the next with no steal time and nothing else running: every part
of a review (plugin code, host, libc, kernel) slows by the same factor at once
(`scripts/admission-speed.py`; BENCHMARKS.md, issue 23), as when a neighbour shares
the core's other hyperthread or its caches, which the guest cannot see. At 5,000
reviews/s on one core a slow spell turns into a backlog of hundreds of milliseconds.

`probe(core, secs)` measures it with work of a review's kind, not ours: a JSON round
trip (parse, then serialize) of the benchmark's own Pod review, in CPU time (so that
time other tasks take from the core does not count), per quarter second."""

import os, subprocess, sys

REVIEW = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "host", "examples", "pod-review.json")

# Its own process, so that it can be pinned without pinning the caller.
PROBE = """
import json, sys, time
text, secs = open(sys.argv[1]).read(), float(sys.argv[2])
per, end = [], time.monotonic() + secs
while time.monotonic() < end:
    t, c, n = time.monotonic(), time.process_time(), 0
    while time.monotonic() - t < 0.25:
        for _ in range(20):
            json.dumps(json.loads(text))
        n += 20
    per.append(1e6 * (time.process_time() - c) / n)
per.sort()
print(per[0], per[len(per) // 2], per[len(per) * 9 // 10], per[-1])
"""


def probe(core, secs):
    """The probe's µs of CPU per round trip on `core` over `secs`, per quarter second:
    (fastest, median, p90, slowest)."""
    out = subprocess.run(["taskset", "-c", str(core), sys.executable, "-c", PROBE, REVIEW, str(secs)],
                         check=True, capture_output=True, text=True).stdout.split()
    return tuple(float(x) for x in out)


def describe(core, secs):
    """One line for a benchmark's output."""
    fast, med, p90, slow = probe(core, secs)
    return (f"machine: core {core} ran the same work (a JSON round trip of the review) in {fast:.0f} µs of CPU at "
            f"its fastest quarter second, {med:.0f} median, {p90:.0f} p90, {slow:.0f} slowest over {secs:g} s "
            f"({slow / fast:.2f}x): throughput and tails here move with it")


if __name__ == "__main__":
    core, secs = (int(sys.argv[1]), float(sys.argv[2])) if len(sys.argv) > 2 else (0, 10.0)
    print(describe(core, secs))
