#!/usr/bin/env python3
"""How late a thread that wakes often runs while a compile shares its core: the
controlled test behind BENCHMARKS.md's "Issue 23: two ways to make a reload's compile
give up its core sooner".

A nice-0 stand-in for the host's review thread runs SPIN ms and sleeps SLEEP ms in a
loop on core 0, recording how late each wake-up ran; beside it, on the same core at
nice 10, `compile_time` (host/examples/compile_time.rs) compiles PLUGIN three times with
each of its compilers in turn. The wake-ups are split into those compilers' phases by
the compile times it prints (the three times per column are its minimum, median and
maximum, so they sum to the column's span).

Usage: scripts/compile-beside.py PLUGIN [SLEEP_MS SPIN_MS]   (default 0.5 0.3, a 37 %
duty; 0.2 0.9 is 82 %). Needs a bench build of the compile_time example
(`cargo build --profile bench -p wasmop --example compile_time`)."""

import os, re, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def stand_in(secs, sleep, spin, path):
    with open(path, "w") as out:
        end = time.monotonic() + secs
        while time.monotonic() < end:
            t = time.monotonic()
            time.sleep(sleep)
            w = time.monotonic()
            out.write(f"{w:.6f} {1e3 * (w - t - sleep):.3f}\n")
            s = time.monotonic()
            while time.monotonic() - s < spin:
                pass


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    plugin = sys.argv[1]
    sleep, spin = (float(sys.argv[2]) / 1e3, float(sys.argv[3]) / 1e3) if len(sys.argv) > 3 else (0.0005, 0.0003)
    log = f"/tmp/compile-beside-{os.getpid()}.log"
    child = os.fork()
    if child == 0:
        os.sched_setaffinity(0, {0})
        stand_in(1e9, sleep, spin, log)  # until killed
        os._exit(0)
    time.sleep(2)
    start = time.monotonic()
    out = subprocess.run(["taskset", "-c", "0", "nice", "-n", "10", os.path.join(ROOT, "target/release/examples/compile_time"), plugin],
                         capture_output=True, text=True, check=True).stdout
    end = time.monotonic()
    time.sleep(2)
    os.kill(child, 15)
    os.waitpid(child, 0)
    print(out)
    head = [c.strip() for c in out.splitlines()[0].strip("|").split("|")][2:]
    row = [c.strip() for c in out.splitlines()[2].strip("|").split("|")][2:]
    rows = [tuple(map(float, l.split())) for l in open(log) if len(l.split()) == 2]

    def stats(name, a, b):
        x = sorted(late for w, late in rows if a <= w < b)
        if not x:
            return
        q = lambda p: x[min(len(x) - 1, int(p * len(x)))]
        print(f"| {name} | {len(x)} | {q(.5):.2f} ms | {q(.99):.2f} ms | {q(.999):.2f} ms | {x[-1]:.2f} ms | {sum(v >= 4 for v in x)} |")

    print(f"| beside the stand-in ({1e3 * spin:g} ms run, {1e3 * sleep:g} ms sleep) | wake-ups | late: p50 | p99 | p99.9 | most | ≥ 4 ms |")
    print("|---|---|---|---|---|---|---|")
    stats("nothing", start - 1.5, start)
    t = start
    for name, cell in zip(head, row):
        span = sum(int(v) for v in re.findall(r"\d+", cell)[:3]) / 1e3
        stats(name, t + 0.2, t + span - 0.2)
        t += span
    print(f"(compiles {end - start:.1f} s in all; the phases above sum to {t - start:.1f} s)")
    os.unlink(log)


if __name__ == "__main__":
    main()
