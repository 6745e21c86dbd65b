#!/usr/bin/env python3
"""Where the slow reviews of an admission run fall: reads ADMISSION_LOAD_DUMP files
(`host/examples/admission_load.rs`) and groups reviews slower than THRESHOLD ms into
stalls — reviews answered within 5 ms of each other after waiting — printing for each
its wall-clock time (UTC, to line up with the host's log), its length (the slowest
review's wait) and how many reviews it held up.

Usage: scripts/admission-stalls.py [--threshold MS] DUMP..."""

import datetime, sys

from benchlib import review_dump


def stalls(path, threshold):
    start, reviews = review_dump(path)
    slow = sorted((t + ms / 1e3, ms) for t, ms in reviews if ms >= threshold)
    groups = []
    for answered, ms in slow:
        if groups and answered - groups[-1][1] < 0.005:
            g = groups[-1]
            groups[-1] = (g[0], answered, max(g[2], ms), g[3] + 1)
        else:
            groups.append((answered, answered, ms, 1))
    return start, groups


def main():
    args = sys.argv[1:]
    threshold = 5.0
    if args[:1] == ["--threshold"]:
        threshold, args = float(args[1]), args[2:]
    for path in args:
        start, groups = stalls(path, threshold)
        print(f"{path}: {len(groups)} stalls of {threshold:g} ms or more")
        for first, last, worst, n in groups:
            at = datetime.datetime.fromtimestamp(start + first, datetime.timezone.utc).strftime("%H:%M:%S.%f")[:-3]
            print(f"  {at}Z  +{first:7.3f} s  longest wait {worst:7.2f} ms  reviews held {n}")


if __name__ == "__main__":
    main()
