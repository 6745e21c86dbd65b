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
import json
import sys

NOT_THE_OPERATOR = ("kubectl/", "cluster/", "kwok/")


def main():
    path, start, end, ns, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
    counts = collections.Counter()
    conflicts = collections.Counter()
    with open(path, "rb") as f:
        f.seek(start)
        for line in f.read(max(0, end - start)).splitlines():
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
