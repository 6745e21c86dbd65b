#!/usr/bin/env python3
"""Requests an operator sent to the apiserver, per primary object, by verb and resource,
from the local control plane's audit log (one JSON event per line).

Usage: audit-requests.py AUDIT_LOG FROM_BYTE TO_BYTE NAMESPACE N
Counts the events written between the two byte offsets (the log's size when a phase
began and ended) for requests in NAMESPACE made by the operator: not by kubectl (the
benchmark's own applies and polls) and not by the control plane's own components
(controller-manager and scheduler, user agent `cluster/`; the fake kubelet, `kwok/`),
and prints one Markdown row: requests per object in all, then
each verb/resource pair with its per-object count and, where some were refused with
409, how many. Watches are counted as requests when they start (their list included).
"""
import collections
import glob
import json
import os
import sys


def lines(path, start, end):
    """The log's lines between the two offsets. The apiserver rotates its audit log at
    --audit-log-maxsize (100 MB here, tests/cluster/launcher.go): a log smaller at the
    end than at the start was rotated meanwhile, and the phase began in the newest
    rotated file (audit-TIMESTAMP.log beside it)."""
    if end >= start:
        with open(path, "rb") as f:
            f.seek(start)
            return f.read(end - start).splitlines()
    base, ext = os.path.splitext(path)
    rotated = sorted(glob.glob(base + "-*" + ext), key=os.path.getmtime)
    if not rotated:
        sys.exit(f"{path} shrank from {start} to {end} bytes and no rotated log is beside it")
    with open(rotated[-1], "rb") as f:
        f.seek(start)
        before = f.read()
    with open(path, "rb") as f:
        after = f.read(end)
    return before.splitlines() + after.splitlines()

NOT_THE_OPERATOR = ("kubectl/", "cluster/", "kwok/")


def main():
    path, start, end, ns, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
    counts = collections.Counter()
    conflicts = collections.Counter()
    for line in lines(path, start, end):
        try:
            e = json.loads(line)
        except ValueError:
            continue
        ref = e.get("objectRef") or {}
        if ref.get("namespace") != ns or e.get("userAgent", "").startswith(NOT_THE_OPERATOR):
            continue
        key = (e.get("verb", "?"), ref.get("resource", "?") + ("/" + ref["subresource"] if ref.get("subresource") else ""))
        counts[key] += 1
        if (e.get("responseStatus") or {}).get("code") == 409:
            conflicts[key] += 1
    total = sum(counts.values())
    parts = []
    for (verb, resource), c in sorted(counts.items(), key=lambda kv: -kv[1]):
        extra = f" ({conflicts[(verb, resource)] / n:.2f} refused 409)" if conflicts[(verb, resource)] else ""
        parts.append(f"{verb} {resource} {c / n:.2f}{extra}")
    print(f"| {n} | {total / n:.2f} | {', '.join(parts)} |")


if __name__ == "__main__":
    main()
