#!/usr/bin/env bash
# Usage: scripts/wait-crd.sh NAME — waits (up to 30 s) until the apiserver serves the
# CRD NAME. `kubectl wait --for=condition=Established` alone is not enough: on a CRD so
# new that status.conditions is still null it fails at once instead of waiting.
set -euo pipefail
for _ in $(seq 150); do
  established=$(kubectl get crd "$1" -o 'jsonpath={.status.conditions[?(@.type=="Established")].status}' 2>/dev/null || true)
  [ "$established" = True ] && exit 0
  sleep 0.2
done
echo "CRD $1 is not established after 30 s" >&2
exit 1
