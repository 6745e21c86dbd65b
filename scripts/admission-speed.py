#!/usr/bin/env python3
"""How fast the host's core ran, second by second, in a traced admission run: for
each second of each run of `BENCH_TRACE=DIR scripts/bench-admission.py`, the reviews
answered, the share of core 0 the host held, and its CPU per review split by where
it ran: the plugin's compiled code, the host binary, libc and the kernel (from the
trace's 2 kHz clock samples on core 0, the host's core).

What it tells apart: when every part costs more per review by the same factor, the
same work ran on a slower core (this VM's speed drifts with no steal time: a
neighbour on the core's other hyperthread, or on its caches, is invisible to the
guest; BENCHMARKS.md, issue 23); when one part alone grows, that part did more work.
A backlog at a fixed offered rate starts where the host's share reaches 100 %.

Usage: scripts/admission-speed.py [--whole] DIR  (DIR as given to BENCH_TRACE; needs
perf). --whole: one line per run instead of one per second."""

import bisect, collections, glob, os, re, subprocess, sys

from benchlib import review_dump

SAMPLE = re.compile(r"^\s*(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+cpu-clock\S*\s+[0-9a-f]+\s+\((.*)\)$")
PERIOD = 0.5e-3  # the harness samples each core at 2 kHz
PARTS = ("plugin", "host", "libc", "kernel")


def part(dso):
    """Where a sample ran: the plugin's code is the host's anonymous executable memory
    (perf names it /tmp/perf-PID.map, or unknown without a map)."""
    if "kallsyms" in dso:
        return "kernel"
    if "libc.so" in dso:
        return "libc"
    if dso.startswith("/tmp/perf-") or dso in ("unknown", "[unknown]") or "JIT" in dso:
        return "plugin"
    return "host"


def samples(d, host):
    """Core 0's clock samples of the host's threads: sorted (Unix time, part)."""
    off = float(open(os.path.join(d, "offset")).read())
    out = []
    for data in sorted(glob.glob(os.path.join(d, "perf-*.data"))):
        text = subprocess.run(["perf", "script", "-i", data, "-F", "pid,cpu,time,event,ip,dso"],
                              capture_output=True, text=True, check=True).stdout
        for line in text.splitlines():
            m = SAMPLE.match(line)
            if m and int(m[1]) == host and m[2] == "000":
                out.append((float(m[3]) + off, part(m[4])))
    return sorted(out)


def line(label, held, answered, span):
    per = {p: 1e6 * PERIOD * held[p] / answered for p in PARTS} if answered else {}
    split = "  ".join(f"{p} {per[p]:5.1f}" for p in PARTS) if per else "no reviews answered"
    total = sum(per.values()) if per else 0.0
    busy = PERIOD * sum(held.values()) / span
    print(f"{label:>22}  {answered / span:7.0f} reviews/s  host {100 * busy:5.1f} % of core 0  "
          f"{total:5.0f} µs/review: {split}")


def main():
    args = sys.argv[1:]
    whole = args[:1] == ["--whole"]
    d = args[-1]
    host = int(open(os.path.join(d, "host.pid")).read())
    got = samples(d, host)
    times = [t for t, _ in got]
    for dump in sorted(glob.glob(os.path.join(d, "reviews.*")), key=lambda p: int(p.rsplit(".", 1)[1])):
        start, reviews = review_dump(dump)
        done = sorted(start + t + ms / 1e3 for t, ms in reviews)
        end = done[-1] if done else start
        step = end - start if whole else 1.0
        a = start
        while a + step / 2 < end:
            b = a + step
            held = collections.Counter(p for _, p in got[bisect.bisect_left(times, a):bisect.bisect_left(times, b)])
            answered = bisect.bisect_left(done, b) - bisect.bisect_left(done, a)
            line(f"{os.path.basename(dump)} +{a - start:4.0f} s", held, answered, b - a)
            a = b
        if not whole:
            print()


if __name__ == "__main__":
    main()
