# shellcheck shell=bash disable=SC2034,SC2046
# (SC2034: the settings are used by the scripts that source this; SC2046: $(nsflag NS)
# is meant to split, into nothing or `-n NS`.)
# Sourced by scripts/demo.sh and scripts/demo-down.sh: the demo's settings, how it
# prints its steps, and the record of everything it creates ($DEMO_DIR/created), which
# is what `make demo-down` removes, and nothing else.
#
# Settings (environment; `make demo VAR=VALUE` passes them on):
#   DEMO_CLUSTER           local (default): the local control plane in $CLUSTER_STATE (default
#                          target/cluster), started unless running; existing: the cluster in
#                          KUBECONFIG, and no control plane is started
#   DEMO_NAMESPACE         wasmop-demo: the Memcached, the Deployment that gets sidecars, and
#                          the only namespace the demo's webhooks see
#   DEMO_SYSTEM_NAMESPACE  wasmop-system: the plugins' ConfigMaps and ServiceAccounts
#   DEMO_DIR               target/demo: the host's log, generated files, and `created`
#   DEMO_WEBHOOK_HOST      127.0.0.1: the address at which the apiserver reaches this
#                          machine's webhook server (the host runs here, not in the cluster)
#   WASMOP_BIN, WASMOP_PLUGINS  the host binary and the plugins' directory (default: the
#                          debug build and target/plugins, which `make demo` builds)

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1
target=${CARGO_TARGET_DIR:-$root/target}
DEMO_CLUSTER=${DEMO_CLUSTER:-local}
DEMO_NAMESPACE=${DEMO_NAMESPACE:-wasmop-demo}
DEMO_SYSTEM_NAMESPACE=${DEMO_SYSTEM_NAMESPACE:-wasmop-system}
DEMO_DIR=${DEMO_DIR:-$root/target/demo}
DEMO_WEBHOOK_HOST=${DEMO_WEBHOOK_HOST:-127.0.0.1}
wasmop_bin=${WASMOP_BIN:-$target/debug/wasmop}
plugins=${WASMOP_PLUGINS:-$root/target/plugins}
cluster_state=$(realpath -m "${CLUSTER_STATE:-$root/target/cluster}")
state_file=$DEMO_DIR/created
ns=$DEMO_NAMESPACE
sys=$DEMO_SYSTEM_NAMESPACE

# Paths as the commands show them: relative to the repository when inside it.
rel() { case $1 in "$root"/*) echo "${1#"$root"/}" ;; *) echo "$1" ;; esac; }
P=$(rel "$plugins")
D=$(rel "$DEMO_DIR")
# So that a shown command reads `wasmop ...` and runs exactly as shown.
wasmop() { "$wasmop_bin" "$@"; }

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
note() { printf '   %s\n' "$*"; }
# show CMD ARGS...: prints the command, then runs it.
show() { printf '$ %s\n' "$*"; "$@"; }
# run 'PIPELINE': prints a command line with pipes or redirections, then runs it.
run() { printf '$ %s\n' "$1"; eval "$1"; }

# Waits up to $1 seconds for the command to succeed (quietly); fails with $what.
wait_for() {
  local secs=$1 what=$2
  shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
      echo "timed out after ${secs}s waiting for: $what" >&2
      return 1
    fi
    sleep 0.3
  done
}

## The record. One line per thing the demo made, in the order it made them:
##   cluster STATE_DIR                  a local control plane the demo started
##   pid PID START_TIME PROGRAM         a process (killed only if still that process)
##   object KIND NAMESPACE|- NAME       an object that did not exist before
##   subject KIND NAMESPACE|- NAME NS/NAME JSON   a subject added to an existing binding
record() { echo "$*" >>"$state_file"; }

# The start time of process $1 (field 22 of /proc/PID/stat), to tell it from a later
# process that reuses the PID; nothing when it is gone (or a zombie).
start_time() { sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | awk '$1 != "Z" { print $20 }'; }

nsflag() { [ "$1" = - ] || printf -- '-n\n%s\n' "$1"; }

# Python: `objects(text)`, the objects of `kubectl create --dry-run=client -o json`
# output (one JSON document per object, or a List).
py_objects='import json, sys
def objects(text):
    out, i, dec = [], 0, json.JSONDecoder()
    while text[i:].strip():
        while text[i].isspace():
            i += 1
        o, i = dec.raw_decode(text, i)
        out.extend(o["items"] if o.get("kind") == "List" else [o])
    return out
key = lambda o: " ".join([o["kind"], o["metadata"].get("namespace") or "-", o["metadata"]["name"]])
'

# The objects of a manifest file, one "KIND NAMESPACE|- NAME" per line.
objects_of() {
  kubectl create --dry-run=client -o json -f "$1" | python3 -c "$py_objects"'
for o in objects(sys.stdin.read()):
    print(key(o))'
}

exists() { kubectl get "$1" "$3" $(nsflag "$2") >/dev/null 2>&1; }

# install FILE [KUBECTL_APPLY_FLAGS...]: applies the objects of FILE and records the
# ones it creates. An object that is already in the cluster is left as it is, except a
# (Cluster)RoleBinding, which gets the file's subjects added (recorded, and removed again
# by demo-down): the demo never takes over what it did not create.
install() {
  local file=$1 objects kind namespace name
  shift
  local -a fresh=() there=()
  objects=$(objects_of "$file")
  while read -r kind namespace name; do
    if exists "$kind" "$namespace" "$name"; then there+=("$kind $namespace $name"); else fresh+=("$kind $namespace $name"); fi
  done <<<"$objects"
  for o in "${fresh[@]}"; do record "object $o"; done
  if [ ${#there[@]} -eq 0 ]; then
    show kubectl apply "$@" -f "$(rel "$file")"
    return
  fi
  for o in "${there[@]}"; do note "already in the cluster, left as it is: ${o/ - / }"; done
  if [ ${#fresh[@]} -gt 0 ]; then
    printf '$ kubectl apply %s-f -   # the objects of %s that are not there yet\n' "${*:+$* }" "$(rel "$file")"
    only_objects "$file" "${fresh[@]}" | kubectl apply "$@" -f -
  fi
  for o in "${there[@]}"; do
    # shellcheck disable=SC2086 # "KIND NS NAME" is three arguments
    case $o in RoleBinding\ * | ClusterRoleBinding\ *) add_subjects "$file" $o ;; esac
  done
}

# only_objects FILE "KIND NS NAME"...: the named objects of FILE, as a JSON List.
only_objects() {
  local file=$1
  shift
  kubectl create --dry-run=client -o json -f "$file" | python3 -c "$py_objects"'
want = set(sys.argv[1:])
items = [o for o in objects(sys.stdin.read()) if key(o) in want]
print(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))' "$@"
}

# add_subjects FILE KIND NS NAME: adds the subjects FILE gives binding NAME to the one
# in the cluster (which must bind the same role), each recorded.
add_subjects() {
  local file=$1 kind=$2 namespace=$3 name=$4 missing who subject
  missing=$(kubectl get "$kind" "$name" $(nsflag "$namespace") -o json | python3 -c '
import json, sys
want = json.load(open(sys.argv[1]))["items"][0]
have = json.load(sys.stdin)
if have.get("roleRef") != want.get("roleRef"):
    sys.exit("%s %s exists and binds another role: %s" % (want["kind"], want["metadata"]["name"], have.get("roleRef")))
for s in want.get("subjects") or []:
    if s not in (have.get("subjects") or []):
        print(s.get("namespace", "-") + "/" + s["name"], json.dumps(s, separators=(",", ":")))' \
    <(only_objects "$file" "$kind $namespace $name"))
  while read -r who subject; do
    [ -n "$who" ] || continue
    note "adding $who to the subjects of $kind $name"
    record "subject $kind $namespace $name $who $subject"
    kubectl patch "$kind" "$name" $(nsflag "$namespace") --type=json \
      -p "[{\"op\": \"add\", \"path\": \"/subjects/-\", \"value\": $subject}]" >/dev/null
  done <<<"$missing"
}
