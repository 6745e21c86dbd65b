#!/usr/bin/env bash
# make demo-down: removes exactly what the demo recorded in $DEMO_DIR/created, newest
# first: its objects (a binding it added a subject to loses just that subject), the
# host it started (by recorded PID and start time, never by name) and, if the demo
# started it, the local control plane. Objects that existed before the demo stay.
#   --keep-cluster  all but the control plane (scripts/demo.sh, before it runs again)
# shellcheck disable=SC2046 # $(nsflag NS) splits on purpose: into nothing or `-n NS`
set -euo pipefail
# shellcheck source=scripts/demo-lib.sh
source "$(dirname "$0")/demo-lib.sh"
keep_cluster=false
[ "${1:-}" = --keep-cluster ] && keep_cluster=true
if [ ! -f "$state_file" ]; then
  echo "Nothing to remove: no $D/created (no demo ran, or demo-down already removed it)."
  exit 0
fi
export KUBECONFIG
KUBECONFIG=$(sed -n 's/^kubeconfig //p' "$state_file" | head -1)
cluster=$(sed -n 's/^cluster //p' "$state_file" | head -1)
failed=()

stop_pid() { # PID START_TIME PROGRAM
  if [ "$(start_time "$1")" != "$2" ]; then
    echo "(pid $1, $3: no longer running)"
    return
  fi
  printf '$ kill %s   # %s\n' "$1" "$3"
  kill "$1" 2>/dev/null || true
  # SIGTERM lets in-flight reconciles finish (--shutdown-grace-seconds, 25 s by default).
  for _ in $(seq 300); do
    [ "$(start_time "$1")" = "$2" ] || return 0
    sleep 0.1
  done
  printf '$ kill -KILL %s   # still running after 30 s\n' "$1"
  kill -KILL "$1" 2>/dev/null || true
}

namespaces=()
# The namespaces the demo created: what is in them goes with them.
doomed=" $(sed -n 's/^object Namespace - //p' "$state_file" | tr '\n' ' ')"
delete_object() { # KIND NAMESPACE|- NAME
  if [ "$1" = Namespace ]; then # last, and waited for together (see below)
    namespaces+=("$3")
    return
  fi
  printf '$ kubectl delete %s %s%s\n' "$1" "$3" "$([ "$2" = - ] || echo " -n $2")"
  if ! kubectl delete "$1" "$3" $(nsflag "$2") --ignore-not-found --timeout=30s >/dev/null; then
    # A finalizer whose controller is gone would hold it (and its namespace) forever.
    kubectl patch "$1" "$3" $(nsflag "$2") --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1 || true
    kubectl delete "$1" "$3" $(nsflag "$2") --ignore-not-found --timeout=30s >/dev/null || failed+=("object $1 $2 $3")
  fi
  # The Events the demo's host recorded about it (a cluster-scoped object's are in
  # `default`), unless its namespace goes anyway.
  [[ $doomed == *" $2 "* ]] && return
  kubectl delete events $([ "$2" = - ] && echo -A || nsflag "$2") --ignore-not-found \
    --field-selector "involvedObject.kind=$1,involvedObject.name=$3" >/dev/null || true
}

remove_subject() { # KIND NAMESPACE|- NAME WHO SUBJECT_JSON
  local index
  index=$(kubectl get "$1" "$3" $(nsflag "$2") -o json 2>/dev/null | python3 -c '
import json, sys
subjects = json.load(sys.stdin).get("subjects") or []
want = json.loads(sys.argv[1])
print(next((i for i, s in enumerate(subjects) if s == want), ""))' "$5" || true)
  [ -n "$index" ] || return 0
  printf '$ kubectl patch %s %s --type=json -p ...   # removes subject %s\n' "$1" "$3" "$4"
  kubectl patch "$1" "$3" $(nsflag "$2") --type=json \
    -p "[{\"op\": \"test\", \"path\": \"/subjects/$index\", \"value\": $5}, {\"op\": \"remove\", \"path\": \"/subjects/$index\"}]" \
    >/dev/null || failed+=("subject $1 $2 $3 $4 $5")
}

if [ -n "$cluster" ] && ! $keep_cluster && [ "$KUBECONFIG" = "$cluster/kubeconfig" ]; then
  echo "Stopping what the demo started: the host, then the local control plane (and everything in it)"
  while read -r kind a b c; do
    [ "$kind" = pid ] && stop_pid "$a" "$b" "$c"
  done < <(tac "$state_file")
  show tests/cluster/down "$cluster"
  rm -f "$state_file"
  exit 0
fi

echo "Removing what the demo created (KUBECONFIG=$KUBECONFIG), newest first"
while read -r kind a b c d; do
  case $kind in
  object) delete_object "$a" "$b" "$c" ;;
  subject) remove_subject "$a" "$b" "$c" "${d%% *}" "${d#* }" ;;
  pid) stop_pid "$a" "$b" "$c" ;;
  esac
done < <(tac "$state_file")
for n in "${namespaces[@]}"; do
  show kubectl delete namespace "$n" --ignore-not-found --wait=false
done
for n in "${namespaces[@]}"; do
  kubectl wait --for=delete "namespace/$n" --timeout=120s >/dev/null 2>&1 || failed+=("object Namespace - $n")
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "Could not remove (kept in $D/created; run demo-down again):" >&2
  printf '  %s\n' "${failed[@]}" >&2
  { [ -z "$cluster" ] || echo "cluster $cluster"; echo "kubeconfig $KUBECONFIG"; printf '%s\n' "${failed[@]}"; } >"$state_file"
  exit 1
fi
if [ -n "$cluster" ]; then
  if $keep_cluster; then
    echo "cluster $cluster" >"$state_file"
    echo "Done: nothing the demo created is left but the local control plane."
    exit 0
  fi
  show tests/cluster/down "$cluster"
fi
rm -f "$state_file"
echo "Done: nothing the demo created is left."
