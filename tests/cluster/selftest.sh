#!/usr/bin/env bash
# Brings a control plane up from a cold, separate state folder, checks it, takes it
# down, and fails if any of its processes is left.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
state=$(mktemp -d /tmp/wasmop-cluster-selftest.XXXXXX)
rmdir "$state"
cleanup() { "$here/down" "$state" >/dev/null 2>&1 || true; }
trap cleanup EXIT
"$here/up" "$state" >/dev/null
pids=$(python3 -c "import json,sys; print(' '.join(str(p) for p in json.load(open('$state/state.json'))['pids'].values()))")
KUBECONFIG=$state/kubeconfig kubectl get --raw /readyz | grep -qx ok
KUBECONFIG=$state/kubeconfig kubectl get nodes --no-headers | grep -q ' Ready '
"$here/up" "$state" 2>&1 >/dev/null | grep -q 'reusing the healthy cluster'
"$here/down" "$state" >/dev/null
left=""
# A zombie (state Z) has exited and only waits for its parent to reap it: not running.
for p in $pids; do
  if [ -r "/proc/$p/stat" ] && [ "$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null)" != "Z" ]; then left="$left $p"; fi
done
if [ -n "$left" ] || [ -d "$state" ]; then
  echo "cluster-selftest: FAILED: processes left:$left; state folder left: $([ -d "$state" ] && echo yes || echo no)" >&2
  exit 1
fi
echo "cluster-selftest: 1 passed, 0 failed (cold up, readyz ok, node Ready, idempotent up, down leaves nothing)"
