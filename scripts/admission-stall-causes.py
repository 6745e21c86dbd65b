#!/usr/bin/env python3
"""Why each stall of a traced admission run happened: lines up the review dumps of
`BENCH_TRACE=DIR scripts/bench-admission.py` with the scheduler trace the harness
recorded beside them (perf, every core: context switches, wake-ups, and a 2 kHz
clock sample on each core).

A stall here is a gap of at least THRESHOLD ms (default 4) in which no review was
answered while at least one was waiting. Each gets the first cause that covers over
half of it:
  core N did not run      no clock sample on core N for that long: the hypervisor ran
                          something else (a halted core whose timer fired late, or
                          a running one taken away)
  late wake-up of core N  a thread was woken for core N while it was idle and ran
                          that much later: the wake-up interrupt reached the halted
                          core late
  host busy (thread)      the host's threads were on its core, longest the one named
                          (our code); "review thread runnable" when that was not the
                          review thread and the review thread spent over half the gap
                          switched out runnable (preempted with work to do, not asleep)
  other task on core N    something else held the core the host or load waited for
  unexplained             none of these

Usage: scripts/admission-stall-causes.py [--threshold MS] DIR  (DIR as given to
BENCH_TRACE; needs perf)."""

import bisect, collections, glob, os, re, subprocess, sys

from benchlib import review_dump

HEAD = re.compile(r"^\s*(.+?)\s+(\d+)/(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+(\S+):\s*(.*)$")
SWITCH = re.compile(r"prev_pid=(\d+) .*prev_state=(\S+) ==> next_comm=(.+?) next_pid=(\d+)")
WAKING = re.compile(r"pid=(\d+) .*target_cpu=(\d+)")


def trace(d):
    """(samples per core, [(t, core, next tid)] switches, late wake-ups, tid -> pid,
    tid -> thread name, [(t, tid, runnable)] every switch-out) from every
    DIR/perf-*.data (the harness's quiet and busy rows)."""
    off = float(open(os.path.join(d, "offset")).read())
    samples, switches, late, pid_of, names, preempted = collections.defaultdict(list), [], [], {0: 0}, {}, []
    for data in sorted(glob.glob(os.path.join(d, "perf-*.data"))):
        out = subprocess.run(["perf", "script", "-i", data, "-F", "comm,pid,tid,cpu,time,event,trace"],
                             capture_output=True, text=True, check=True).stdout
        read(out, off, samples, switches, late, pid_of, names, preempted)
    for ts in samples.values():
        ts.sort()
    switches.sort()
    return samples, switches, sorted(late), pid_of, names, sorted(preempted)


def read(out, off, samples, switches, late, pid_of, names, preempted):
    """One perf script's events into the lists of `trace`."""
    running, pending = collections.defaultdict(int), {}
    for line in out.splitlines():
        m = HEAD.match(line)
        if not m:
            continue
        pid, tid, core, t, ev, rest = int(m[2]), int(m[3]), int(m[4]), float(m[5]) + off, m[6], m[7]
        pid_of[tid] = pid
        if ev.startswith("cpu-clock"):
            samples[core].append(t)
        elif ev == "sched:sched_waking":
            w = WAKING.search(rest)
            woken, target = int(w[1]), int(w[2])
            # Idle at the wake-up: nothing but the idle task on the target core.
            pending.setdefault(woken, (t, target, running[target] == 0))
        elif ev == "sched:sched_switch":
            s = SWITCH.search(rest)
            nxt = int(s[4])
            names[nxt] = s[3]
            preempted.append((t, int(s[1]), s[2].startswith("R")))
            running[core] = nxt
            switches.append((t, core, nxt))
            if nxt in pending:
                t0, target, idle = pending.pop(nxt)
                if idle and t - t0 > 1e-3:
                    late.append((t0, t, core))


# The thread that serves reviews (and reconciles): tokio's worker.
REVIEWS = "tokio-rt-worker"


def gaps(dump, threshold):
    """(start, end) of every gap in the dump's answers while a review waited: from the
    later of the last answer and the first waiting review's arrival, to the next answer.
    (Until 2026-12-07 a gap counted only when a review already waited as it began, so a
    stall that began on an idle host, the first review arriving into it, went unseen.)"""
    start, dumped = review_dump(dump)
    reviews = sorted((start + t, start + t + ms / 1e3) for t, ms in dumped)
    answers = sorted(b for _, b in reviews)
    out = []
    for a, b in zip(answers, answers[1:]):
        if b - a < threshold / 1e3:
            continue
        waiting = [s for s, e in reviews[:bisect.bisect_left(reviews, (b,))] if e >= b]
        if waiting and b - max(a, min(waiting)) >= threshold / 1e3:
            out.append((max(a, min(waiting)), b))
    return start, out


def hole(ts, a, b):
    """The longest span of [a, b] without a timestamp of `ts`."""
    seg = [a] + ts[bisect.bisect_left(ts, a):bisect.bisect_right(ts, b)] + [b]
    return max(y - x for x, y in zip(seg, seg[1:]))


def occupancy(switches, times, core, a, b):
    """Seconds of [a, b] each tid held `core`."""
    i = bisect.bisect_left(times, a)
    prev = next((switches[j] for j in range(i - 1, -1, -1) if switches[j][1] == core), None)
    cur, at, held = (prev[2] if prev else 0), a, collections.Counter()
    for t, c, nxt in switches[i:]:
        if t > b:
            break
        if c == core:
            held[cur] += t - at
            cur, at = nxt, t
    held[cur] += b - at
    return held


def cause(a, b, samples, switches, times, late, pid_of, names, host, preempted):
    span = b - a
    for core in sorted(samples):
        h = hole(samples[core], a, b)
        if h > span / 2:
            return f"core {core} did not run", h
    lo = bisect.bisect_left(late, (a - 0.05,))
    for t0, t1, core in late[lo:]:
        if t0 > b:
            break
        if min(t1, b) - max(t0, a) > span / 2:
            return f"late wake-up of core {core}", t1 - t0
    held = occupancy(switches, times, 0, a, b)  # the harness pins the host to core 0
    mine = {k: v for k, v in held.items() if pid_of.get(k) == host}
    if sum(mine.values()) > span / 2:
        # Named by the thread that held the core longest: the tokio worker (reviews,
        # reconciles) or one of the host's own threads (compiles, the epoch ticker).
        top = max(mine, key=mine.get)
        name = names.get(top, top)
        # Another host thread on the core while a review waited: was the review thread
        # preempted with work to do, or asleep?
        runnable = name != REVIEWS and off_runnable(a, b, switches, times, preempted, pid_of, names, host) > span / 2
        return f"host busy ({name}{'; review thread runnable' if runnable else ''})", sum(mine.values())
    for core in sorted(samples):
        other = max(((v, k) for k, v in occupancy(switches, times, core, a, b).items()
                     if k and pid_of.get(k) != host), default=(0, 0))
        if other[0] > span / 2:
            return f"other task on core {core} ({names.get(other[1], other[1])})", other[0]
    return "unexplained", span


def off_runnable(a, b, switches, times, preempted, pid_of, names, host):
    """Seconds of [a, b] the host's review thread spent switched out while runnable."""
    outs = preempted[bisect.bisect_left(preempted, (a - 0.05,)):bisect.bisect_right(preempted, (b, 1 << 62))]
    ins = switches[bisect.bisect_left(times, a - 0.05):bisect.bisect_right(times, b)]
    total = 0.0
    for t, tid, runnable in outs:
        if not runnable or names.get(tid) != REVIEWS or pid_of.get(tid) != host:
            continue
        back = next((t2 for t2, _, nxt in ins if nxt == tid and t2 > t), b)
        total += max(0.0, min(back, b) - max(t, a))
    return total


def main():
    args = sys.argv[1:]
    threshold = 4.0
    if args[:1] == ["--threshold"]:
        threshold, args = float(args[1]), args[2:]
    d = args[0]
    host = int(open(os.path.join(d, "host.pid")).read())
    samples, switches, late, pid_of, names, preempted = trace(d)
    times = [s[0] for s in switches]
    total = collections.Counter()
    for dump in sorted(glob.glob(os.path.join(d, "reviews.*")), key=lambda p: int(p.rsplit(".", 1)[1])):
        start, found = gaps(dump, threshold)
        kinds = collections.Counter()
        for a, b in found:
            why, ms = cause(a, b, samples, switches, times, late, pid_of, names, host, preempted)
            kinds[why] += 1
            print(f"  {os.path.basename(dump)} +{a - start:6.3f} s  {1e3 * (b - a):5.1f} ms without an answer: {why} ({1e3 * ms:.1f} ms)")
        total.update(kinds)
        print(f"{os.path.basename(dump)}: {len(found)} stalls of {threshold:g} ms or more: {dict(kinds)}")
    print(f"all runs: {sum(total.values())} stalls: {dict(total.most_common())}")


if __name__ == "__main__":
    main()
