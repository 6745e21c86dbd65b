#!/usr/bin/env python3
"""How long work arriving as a Poisson process waits on a core that a CPU-bound thread
shares, by that thread's scheduling class: the kernel-level question behind issue 23's
busy rows (a reload's Cranelift compile beside the reviews on the host's one core).

A nice-0 stand-in for the host's review thread serves requests that arrive as a
Poisson process at RATE/s, each SERVICE_US of CPU, one at a time (an open loop: a
request that arrives while another is served waits in the queue), on core 0; it
records each request's response time (its end minus its arrival). Beside it on the
same core a busy loop stands in for the compile (a compile is CPU and nothing else),
in each of the classes below in turn, SECS seconds each, plus a phase with nothing
beside. A hog that gets the core while a request waits shows as a stall.

Usage: scripts/poisson-beside.py [RATE SERVICE_US SECS [CLASSES]]   (default 5000 105
20: the goal's rate and a review's CPU on this machine class on a good day; CLASSES
default nothing,nice:10,nice:19,batch:10,batch:19,idle). Beside each row: the share of
the core the hog got (what a compile would get, so how much longer it takes)."""

import os, random, sys, time

POLICY = {"nice": os.SCHED_OTHER, "batch": os.SCHED_BATCH, "idle": os.SCHED_IDLE}


def classes(spec):
    """`nothing,nice:10,batch:19,idle` → (name, (policy, nice) or None) each."""
    out = []
    for c in spec.split(","):
        kind, _, nice = c.partition(":")
        if kind == "nothing":
            out.append(("nothing", None))
        else:
            nice = int(nice or 19)
            name = {"nice": f"nice {nice}", "batch": f"SCHED_BATCH, nice {nice}", "idle": "SCHED_IDLE"}[kind]
            out.append((name, (POLICY[kind], nice)))
    return out


def hog(policy, nice):
    os.sched_setaffinity(0, {0})
    os.setpriority(os.PRIO_PROCESS, 0, nice)
    os.sched_setscheduler(0, policy, os.sched_param(0))
    x = 0
    while True:
        x += 1


def serve(rate, service, secs, seed):
    """Response times (ms) of the requests that arrived within `secs`, and how much
    CPU the server used, as a fraction of the span."""
    rng = random.Random(seed)
    out = []
    start = time.monotonic() + 0.05
    arrival = start
    end = start + secs
    cpu0 = time.thread_time()
    while arrival < end:
        now = time.monotonic()
        if now < arrival:
            time.sleep(arrival - now)
        s = time.thread_time()
        while time.thread_time() - s < service:
            pass
        out.append(1e3 * (time.monotonic() - arrival))
        arrival += rng.expovariate(rate)
    return out, (time.thread_time() - cpu0) / (time.monotonic() - start)


def main():
    rate, service_us, secs = (float(a) for a in sys.argv[1:4]) if len(sys.argv) > 3 else (5000.0, 105.0, 20.0)
    rows_of = classes(sys.argv[4] if len(sys.argv) > 4 else "nothing,nice:10,nice:19,batch:10,batch:19,idle")
    os.sched_setaffinity(0, {0})
    print(f"Poisson arrivals at {rate:g}/s, {service_us:g} µs of CPU each, on core 0; {secs:g} s per row")
    print()
    print("| beside the server | requests | server CPU | its CPU | response p50 | p99 | p99.9 | slowest | ≥ 4 ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    for i, (name, cls) in enumerate(rows_of):
        child = None
        if cls:
            child = os.fork()
            if child == 0:
                hog(*cls)
                os._exit(0)
            time.sleep(0.5)
        t = time.monotonic()
        rows, cpu = serve(rate, service_us / 1e6, secs, i)
        hog_cpu = "–"
        if child:
            os.kill(child, 9)
            _, _, use = os.wait4(child, 0)
            hog_cpu = f"{100 * (use.ru_utime + use.ru_stime) / (time.monotonic() - t + 0.5):.0f} %"
        x = sorted(rows)
        q = lambda p: x[min(len(x) - 1, int(p * len(x)))]
        print(f"| {name} | {len(x)} | {100 * cpu:.0f} % | {hog_cpu} | {q(.5):.2f} ms | {q(.99):.2f} ms | {q(.999):.2f} ms | "
              f"{x[-1]:.2f} ms | {sum(v >= 4 for v in x)} |", flush=True)


if __name__ == "__main__":
    main()
