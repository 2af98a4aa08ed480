#!/usr/bin/env bash
# netctl demo (`make demo`): the main job, end to end, on real network namespaces.
#
# Run as root from the repository root, after `make setup`. It starts a standalone
# daemon on a temporary state dir, attaches three pods (network namespaces) to a
# bridge network and a macvlan network at once through the installed thin plugin,
# both with addresses from netctl's central IPAM (netctl-ipam, allocations kept in the
# journal), shows what each pod got and that two pods reach each other, shows the
# journal, removes every pod and checks that nothing is left behind (no interface, no
# live allocation), asks the allocation history who held pod2's address while it was
# up, then stops the daemon with SIGTERM. A last act runs Kubernetes mode: a fake API
# server (netctl/kit/kubefake, as a process: `python -m netctl.kit.kubefake`) and two daemons as
# two nodes, pods whose networks are named in their annotations (both forms), the
# network-status each node writes back, a pod deleted through the API whose attachments
# its node DELetes, and an API outage (ADD code 11, DEL completes). Every check that
# fails stops the demo with a message and exit 1.
# Every question about the journal goes to netctl's commands (`netctl journal`, `netctl
# ipam`, `netctl status`, `netctl reconcile`, with --json), never to its database.
# A trap removes everything the demo made (daemon, netns, links, temp dir) on any
# exit. All host names it makes start with "ndemo-"; all traffic stays inside the
# demo's own bridge.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$(pwd)
# This checkout's code, also when .venv is another checkout's (a git worktree's symlink):
# a no-op after `make setup` here, which installs this checkout in editable mode.
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
NETCTL="$REPO/.venv/bin/netctl"
PYTHON="$REPO/.venv/bin/python"
CNI_BIN=/usr/lib/cni

BRIDGE=ndemo-br0            # the bridge network's Linux bridge
PARENT=ndemo-par0           # the macvlan network's parent: a host veth …
PARENT_PEER=ndemo-par1      # … and its peer
BRIDGE_NET=demo-bridge      # NAD names (namespace "default")
MACVLAN_NET=demo-macvlan
BRIDGE_SUBNET=10.250.1.0/24
MACVLAN_SUBNET=10.250.2.0/24
POD_NAMESPACE=demo
PODS=(pod1 pod2 pod3)
CHURN=(churn1 churn2 churn3 churn4 churn5 churn6)   # pods of the crash scene
READY_TIMEOUT=30            # seconds for the daemon to answer `netctl status`
STOP_TIMEOUT=40             # seconds for the daemon to exit after SIGTERM

# The Kubernetes act: two nodes, each its own daemon, state, socket and cluster network
# (its own bridge and subnet, as a node's primary CNI gives it a pod CIDR: netctl-ipam's
# pools are per node until the cluster-wide IPAM); NADs in namespace $KUBE_NS.
KUBE_NS=demo
KUBE_NODES=(node-a node-b)
declare -A KUBE_BRIDGE=([node-a]=ndemo-ka0 [node-b]=ndemo-kb0)
declare -A KUBE_SUBNET=([node-a]=10.250.10.0/24 [node-b]=10.250.11.0/24)
declare -A NAD_BRIDGE=([blue]=ndemo-kblue [green]=ndemo-kgreen [red]=ndemo-kred)
declare -A NAD_SUBNET=([blue]=10.250.12.0/24 [green]=10.250.13.0/24 [red]=10.250.14.0/24)
KUBE_PODS=(web db late)     # late: ADDed during the outage, never created in the API
declare -A KUBE_POD_NODE=([web]=node-a [db]=node-b [late]=node-b)
declare -A KUBE_PID=()      # node → its daemon's pid
declare -A POD_UID=()       # pod → the uid the API server gave it
FAKE_PID=""                 # the fake API server's process
# the Kubernetes act's API server: "fake" (netctl/kit/kubefake), or "real": a real kube-apiserver
# and etcd (`NETCTL_DEMO_API_SERVER=real make demo`; README, "Testing")
DEMO_API_SERVER=${NETCTL_DEMO_API_SERVER:-fake}
POD_DELETED_GRACE=1         # seconds (the default, 10, suits kubelet; the demo is shorter)

TMP=""
DAEMON_PID=""
POD2_ADDR=""                # pod2's bridge address, asked about after the pods are gone
POD2_AT=""                  # a time (ISO 8601) while pod2 held it
declare -A CONTAINER        # pod → container id
declare -A HOST_VETHS=()    # host-side veths seen on the bridge while pods were up

# --- output -------------------------------------------------------------------

if [[ -t 1 ]]; then BOLD=$'\033[1m' PLAIN=$'\033[0m'; else BOLD="" PLAIN=""; fi
step() { printf '\n%s==> %s%s\n' "$BOLD" "$*" "$PLAIN"; }
ok() { printf '    ok: %s\n' "$*"; }
FAIL_LOGS=()                # the daemon logs a failure shows the end of
fail() {
    local log
    printf '\ndemo: FAILED: %s\n' "$*" >&2
    for log in "${FAIL_LOGS[@]}"; do
        [[ -s "$log" ]] || continue
        printf -- '--- last lines of the daemon log (%s) ---\n' "$log" >&2
        tail -n 30 "$log" >&2 || true
    done
    exit 1
}

netns_of() { echo "ndemo-$1"; }

# --- clean-up (also run before starting, for leftovers of an interrupted run) ----

stop_daemon_hard() {
    [[ -n "$DAEMON_PID" ]] || return 0
    if kill -0 "$DAEMON_PID" 2>/dev/null; then
        kill -TERM "$DAEMON_PID" 2>/dev/null || true
        for _ in $(seq 100); do
            kill -0 "$DAEMON_PID" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$DAEMON_PID" 2>/dev/null || true
    fi
    wait "$DAEMON_PID" 2>/dev/null || true
    DAEMON_PID=""
}

stop_kube_hard() {
    local node
    for node in "${!KUBE_PID[@]}"; do
        DAEMON_PID=${KUBE_PID[$node]}
        stop_daemon_hard
        unset "KUBE_PID[$node]"
    done
    if [[ -n "$FAKE_PID" ]]; then
        kill -TERM "$FAKE_PID" 2>/dev/null || true
        wait "$FAKE_PID" 2>/dev/null || true
        FAKE_PID=""
    fi
}

remove_host_objects() {
    local pod link
    for pod in "${PODS[@]}" "${CHURN[@]}" "${KUBE_PODS[@]/#/k}"; do
        ip netns del "$(netns_of "$pod")" 2>/dev/null || true
    done
    for link in "$BRIDGE" "$PARENT" "${KUBE_BRIDGE[@]}" "${NAD_BRIDGE[@]}"; do
        ip link del "$link" 2>/dev/null || true   # a veth takes its peer with it
    done
}

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    stop_daemon_hard
    stop_kube_hard
    remove_host_objects
    [[ -n "$TMP" ]] && rm -rf "$TMP"
    exit "$rc"
}

# --- set-up -------------------------------------------------------------------

check_prerequisites() {
    [[ $(id -u) -eq 0 ]] || fail "run as root (network namespaces and links need it)"
    [[ -x "$NETCTL" ]] || fail "$NETCTL missing: run 'make setup' first"
    # netctl-ipam is served inside the daemon: it hands each delegate a `static` IPAM section
    [[ -x "$CNI_BIN/bridge" && -x "$CNI_BIN/macvlan" && -x "$CNI_BIN/static" ]] \
        || fail "the CNI plugins are missing from $CNI_BIN: apt-get install containernetworking-plugins"
    if ! command -v ping >/dev/null; then
        echo "installing iputils-ping (for the connectivity check)"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iputils-ping >/dev/null \
            || fail "ping is missing and iputils-ping could not be installed"
    fi
}

make_tmp() {
    TMP=$(mktemp -d /tmp/netctl-demo.XXXXXX)
    FAIL_LOGS=("$TMP/daemon.log")
    mkdir -p "$TMP/nets" "$TMP/run" "$TMP/bin" "$TMP/out" "$TMP/net.d"
    echo "temp dir: $TMP"
}

make_parent_link() {
    ip link add "$PARENT" type veth peer name "$PARENT_PEER" \
        || fail "cannot create the veth pair $PARENT/$PARENT_PEER"
    ip link set "$PARENT" up
    ip link set "$PARENT_PEER" up
    echo "macvlan parent: host veth $PARENT (peer $PARENT_PEER), both up"
}

# write_nad FILE NAME CONFIG: a NetworkAttachmentDefinition with spec.config = CONFIG
write_nad() {
    local file=$1 name=$2 config=$3
    {
        echo "apiVersion: k8s.cni.cncf.io/v1"
        echo "kind: NetworkAttachmentDefinition"
        echo "metadata:"
        echo "  name: $name"
        echo "  namespace: default"
        echo "spec:"
        echo "  config: |"
        sed 's/^/    /' <<<"$config"
    } >"$TMP/nets/$file"
}

# Both networks take their addresses from netctl's central IPAM (netctl-ipam): the daemon
# allocates inside the journal transaction of the step that uses the address. No gateway:
# the pods reach each other on the bridge's own subnet, and nothing is routed via the host.
write_networks() {
    write_nad "$BRIDGE_NET.yaml" "$BRIDGE_NET" "{
  \"cniVersion\": \"1.0.0\",
  \"name\": \"$BRIDGE_NET\",
  \"plugins\": [{
    \"type\": \"bridge\",
    \"bridge\": \"$BRIDGE\",
    \"ipam\": {\"type\": \"netctl-ipam\", \"range\": \"$BRIDGE_SUBNET\"}
  }]
}"
    write_nad "$MACVLAN_NET.yaml" "$MACVLAN_NET" "{
  \"cniVersion\": \"1.0.0\",
  \"name\": \"$MACVLAN_NET\",
  \"plugins\": [{
    \"type\": \"macvlan\",
    \"master\": \"$PARENT\",
    \"mode\": \"bridge\",
    \"ipam\": {\"type\": \"netctl-ipam\", \"range\": \"$MACVLAN_SUBNET\"}
  }]
}"
    echo "networks in $TMP/nets:"
    ls -1 "$TMP/nets" | sed 's/^/    /'
    sed 's/^/    | /' "$TMP/nets/$BRIDGE_NET.yaml"
}

install_plugin() {
    "$NETCTL" install-cni --bin-dir "$TMP/bin" || fail "netctl install-cni failed"
    [[ -x "$TMP/bin/netctl-cni" ]] || fail "install-cni did not install $TMP/bin/netctl-cni"
}

# The runtime's conf dir ($TMP/net.d) holds the conf the demo's runtime passes on stdin;
# `netctl doctor` checks it against the networks (capabilities, cniVersion).
write_runtime_conf() {
    netctl_conf >"$TMP/net.d/10-netctl.conf"
    echo "    netctl doctor --cni-conf-dir $TMP/net.d --networks-dir $TMP/nets"
    "$NETCTL" doctor --cni-conf-dir "$TMP/net.d" --networks-dir "$TMP/nets" \
        >"$TMP/out/doctor" 2>&1 || fail "netctl doctor warns: $(cat "$TMP/out/doctor")"
    sed 's/^/    | /' "$TMP/out/doctor"
}

start_daemon() {
    "$NETCTL" daemon --state-dir "$TMP/state" --socket "$TMP/run/netctl.sock" \
        --networks-dir "$TMP/nets" --cni-bin-dir "$CNI_BIN" >"$TMP/daemon.log" 2>&1 &
    DAEMON_PID=$!
    echo "daemon pid $DAEMON_PID, log $TMP/daemon.log"
}

wait_daemon_ready() {
    local deadline=$((SECONDS + READY_TIMEOUT))
    until "$NETCTL" status --socket "$TMP/run/netctl.sock" --cni-conf-dir "$TMP/net.d" \
            --degraded-ok >"$TMP/out/status" 2>&1; do
        kill -0 "$DAEMON_PID" 2>/dev/null || fail "the daemon exited during start-up"
        ((SECONDS < deadline)) || fail "the daemon did not answer within ${READY_TIMEOUT}s"
        sleep 0.1
    done
    sed 's/^/    /' "$TMP/out/status"
}

# --- the pods -----------------------------------------------------------------

# The runtime's conf, at cniVersion 1.0.0 as deploy/netctl.conflist (older runtimes refuse
# 1.1.0 results; the demo needs neither GC nor STATUS).
netctl_conf() {
    cat <<EOF
{
  "cniVersion": "1.0.0",
  "name": "netctl",
  "type": "netctl-cni",
  "socket": "$TMP/run/netctl.sock",
  "clusterNetwork": "$BRIDGE_NET"
}
EOF
}

# run_plugin VERB OUT CONTAINER NETNS CNI_ARGS: exec the installed thin plugin exactly as a
# runtime would, its conf on stdin; its stdout goes to OUT.json, its stderr to OUT.err, and
# its exit status is returned.
run_plugin() {
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin CNI_COMMAND="$1" CNI_CONTAINERID="$3" \
        CNI_NETNS="/var/run/netns/$4" CNI_IFNAME=eth0 CNI_PATH="$TMP/bin" CNI_ARGS="$5" \
        "$TMP/bin/netctl-cni" >"$2.json" 2>"$2.err"
}

# cni VERB POD: the plugin for POD (standalone: its extra network in NETCTL_NETWORKS);
# its stdout goes to $TMP/out/POD.VERB.json, and its exit status is returned.
cni() {
    local verb=$1 pod=$2
    netctl_conf | run_plugin "$verb" "$TMP/out/$pod.$verb" "${CONTAINER[$pod]}" \
        "$(netns_of "$pod")" \
        "K8S_POD_NAMESPACE=$POD_NAMESPACE;K8S_POD_NAME=$pod;NETCTL_NETWORKS=$MACVLAN_NET"
}

create_pods() {
    local pod
    for pod in "${PODS[@]}"; do
        ip netns add "$(netns_of "$pod")" || fail "cannot create netns $(netns_of "$pod")"
        CONTAINER[$pod]=$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')
        echo "netns $(netns_of "$pod") for $POD_NAMESPACE/$pod, container ${CONTAINER[$pod]}"
    done
}

add_pods() {
    local pod
    for pod in "${PODS[@]}"; do
        cni ADD "$pod" || fail "ADD of $pod exited $?: $(cat "$TMP/out/$pod.ADD.json" \
            "$TMP/out/$pod.ADD.err")"
        echo "ADD $pod: $("$PYTHON" -c '
import json, sys
r = json.load(open(sys.argv[1]))
print("cniVersion", r["cniVersion"], "|", ", ".join(
    r["interfaces"][ip["interface"]]["name"] + " " + ip["address"] for ip in r["ips"]))
' "$TMP/out/$pod.ADD.json")"
    done
}

# addr_of POD IFNAME: the IPv4 address (no prefix) of IFNAME inside POD's netns
addr_of() {
    ip -n "$(netns_of "$1")" -4 -o addr show dev "$2" 2>/dev/null \
        | awk '{split($4, a, "/"); print a[1]; exit}'
}

# json_py CODE ARGS…: Python CODE with the JSON document on stdin as `doc` (ARGS in sys.argv)
json_py() {
    local code=$1
    shift
    "$PYTHON" -c "import json, sys
doc = json.load(sys.stdin)
$code" "$@"
}

# allocations [--all]: the central allocator's live allocations (with --all, its whole
# history), one line each: "CONTAINER IFNAME ADDRESS/PREFIX POOL RELEASED_BY_OP|-"
# (`netctl ipam pools`, then `netctl ipam show POOL` of each); STATE_DIR says whose
allocations() {
    local pool state=${STATE_DIR:-$TMP/state}
    for pool in $("$NETCTL" ipam pools --state-dir "$state" --json \
                  | json_py 'print(*(p["key"] for p in doc["pools"]))'); do
        "$NETCTL" ipam show "$pool" --state-dir "$state" --json "$@" | json_py '
for a in doc["allocations"]:
    print(a["container"], a["ifname"], a["address"], a["pool"], a["released_op"] or "-")'
    done
}

# show_pods: each pod's interfaces as read inside its netns, next to what the central
# allocator (netctl-ipam, in the journal) holds for that container and interface
show_pods() {
    local pod line cid ifname addr pool
    local -A alloc=()
    while read -r cid ifname addr pool _; do
        alloc["$cid/$ifname"]="$addr  (pool $pool)"
    done < <(allocations)
    printf '    %-6s %-9s %-6s %-15s %s\n' POD INTERFACE STATE "IN THE NETNS" \
        "ALLOCATED BY netctl-ipam"
    for pod in "${PODS[@]}"; do
        while read -r line; do
            # shellcheck disable=SC2086 # split the `ip -br` columns
            set -- $line
            [[ $1 == lo ]] && continue
            ifname=${1%@*}
            printf '    %-6s %-9s %-6s %-15s %s\n' "$pod" "$ifname" "$2" "${3:-}" \
                "${alloc["${CONTAINER[$pod]}/$ifname"]:-none}"
        done < <(ip -n "$(netns_of "$pod")" -br -4 addr)
    done
}

show_ipam_pools() {
    echo "    netctl ipam pools"
    "$NETCTL" ipam pools --state-dir "$TMP/state" | sed 's/^/    /' \
        || fail "netctl ipam pools failed"
}

check_attached() {
    local pod a b
    for pod in "${PODS[@]}"; do
        a=$(addr_of "$pod" eth0)
        b=$(addr_of "$pod" net1)
        [[ $a == 10.250.1.* ]] || fail "$pod has no $BRIDGE_NET address on eth0 (got '$a')"
        [[ $b == 10.250.2.* ]] || fail "$pod has no $MACVLAN_NET address on net1 (got '$b')"
    done
    ok "every pod has eth0 on $BRIDGE_NET and net1 on $MACVLAN_NET"
    local want got
    want=$(for pod in "${PODS[@]}"; do
        echo "${CONTAINER[$pod]} eth0 $(addr_of "$pod" eth0)"
        echo "${CONTAINER[$pod]} net1 $(addr_of "$pod" net1)"
    done | sort)
    got=$(allocations | awk '{split($3, a, "/"); print $1, $2, a[1]}' | sort)
    [[ $got == "$want" ]] || fail "the central allocator's live allocations are not the \
pods' addresses; allocator:
$got
pods:
$want"
    ok "each pod address is netctl-ipam's live allocation for that container and interface" \
        "($(wc -l <<<"$got") allocations, no other)"
    local ports
    ports=$(bridge_ports)
    [[ $(wc -w <<<"$ports") -eq ${#PODS[@]} ]] \
        || fail "expected ${#PODS[@]} ports on $BRIDGE, found: $ports"
    for a in $ports; do HOST_VETHS[$a]=1; done
    ok "$BRIDGE has ${#PODS[@]} ports: $ports"
}

check_ping() {
    local target
    target=$(addr_of pod2 eth0)
    POD2_ADDR=$target
    echo "    ip netns exec $(netns_of pod1) ping -c1 -W1 $target"
    ip netns exec "$(netns_of pod1)" ping -c1 -W1 "$target" | sed 's/^/    | /' \
        || fail "pod1 cannot reach pod2 at $target over $BRIDGE"
    ok "pod1 reaches pod2 ($target) over $BRIDGE"
    POD2_AT=$(now_iso)   # pod2 holds $target now: asked about after the pods are gone
}

now_iso() { date +%Y-%m-%dT%H:%M:%S.%6N%:z; }

show_journal() {
    "$NETCTL" journal --state-dir "$TMP/state" "$@" | sed 's/^/    /' \
        || fail "netctl journal $* failed"
}

# held_at ADDR AT FILE: `netctl journal --ip ADDR --at AT --json` into FILE; print the pods
# it names (from the attachments' results and the allocation history), space-separated
held_at() {
    "$NETCTL" journal --state-dir "$TMP/state" --ip "$1" --at "$2" --json >"$3" \
        || fail "netctl journal --ip $1 --at $2 --json failed"
    json_py 'print(" ".join(sorted({a["pod"] for a in doc["attachments"] + doc["allocations"]})))' \
        <"$3"
}

# who_had_ip POD ADDR AT: after the fact, ask the journal which pod held ADDR at time AT
# (while POD was up), and check the answer against the central allocator's history, where
# an allocation is released, never deleted, and the operations that allocated and
# released it (`netctl journal --container`)
who_had_ip() {
    local pod=$1 addr=$2 at=$3 holder now
    echo "    netctl journal --ip $addr --at $at"
    show_journal --ip "$addr" --at "$at"
    holder=$(held_at "$addr" "$at" "$TMP/out/held.json") || exit 1
    [[ $holder == "$POD_NAMESPACE/$pod" ]] \
        || fail "the journal says $addr was held at $at by '$holder', not $POD_NAMESPACE/$pod"
    ok "the journal answers: at $at, $addr was held by $POD_NAMESPACE/$pod"
    "$NETCTL" journal --state-dir "$TMP/state" --container "${CONTAINER[$pod]}" --json \
        >"$TMP/out/ops.json" || fail "netctl journal --container --json failed"
    "$PYTHON" - "$TMP/out/held.json" "$TMP/out/ops.json" "$addr" "$at" "$POD_NAMESPACE/$pod" \
        "${CONTAINER[$pod]}" <<'EOF' || fail "the allocation history disagrees"
import json, sys
from datetime import datetime
held, ops, addr, at, want, container = sys.argv[1:]
allocs = json.load(open(held))["allocations"]
ops = {op["id"]: op for op in json.load(open(ops))["operations"]}
if len(allocs) != 1:
    sys.exit(f"demo: {len(allocs)} allocations held {addr} at {at}, expected 1: {allocs}")
a = allocs[0]
add, rm = ops.get(a["allocated_op"], {}), ops.get(a["released_op"], {})
def fmt(t):
    return datetime.fromtimestamp(t).astimezone().isoformat(timespec="milliseconds")
print(f"    allocation {a['address']} (pool {a['pool']}) held by {a['pod']}, "
      f"container {a['container']}, {a['ifname']}:")
print(f"        allocated {fmt(a['since'])} by its {add.get('verb', '-')}, released "
      f"{fmt(a['until']) if a['until'] else '(never)'} by {rm.get('verb', '-')} "
      f"({rm.get('origin', '-')})")
got = (a["pod"], a["container"], add.get("verb"), rm.get("verb"), rm.get("origin"))
if got != (want, container, "ADD", "DEL", "runtime"):
    sys.exit(f"demo: the allocation of {addr} at {at} is {got}; expected {want}'s,"
             " allocated by its ADD and released by the runtime's DEL")
EOF
    ok "the allocation history agrees: $POD_NAMESPACE/$pod's, allocated by its ADD," \
        "released by its DEL"
    now=$(now_iso)
    holder=$(held_at "$addr" "$now" "$TMP/out/held-now.json") || exit 1
    [[ -z $holder ]] || fail "the journal says $addr is held now (after the DELs), by '$holder'"
    ok "and now ($now) nobody holds $addr"
}

del_pods() {
    local pod
    for pod in "${PODS[@]}"; do
        cni DEL "$pod" || fail "DEL of $pod exited $?: $(cat "$TMP/out/$pod.DEL.json" \
            "$TMP/out/$pod.DEL.err")"
        echo "DEL $pod: ok"
    done
}

# --- checks that nothing is left ------------------------------------------------

# bridge_ports_of BRIDGE: its ports, space-separated
bridge_ports_of() {
    ip -o link show master "$1" 2>/dev/null | awk -F': ' '{sub(/@.*/, "", $2); print $2}' | xargs
}

bridge_ports() { bridge_ports_of "$BRIDGE"; }

check_clean() {
    local pod links veth
    for pod in "${PODS[@]}"; do
        links=$(ip -n "$(netns_of "$pod")" -o link show | awk -F': ' '{print $2}' | xargs)
        [[ $links == lo ]] || fail "$(netns_of "$pod") still has interfaces: $links"
    done
    ok "no interface but lo in any pod netns"
    links=$(bridge_ports)
    [[ -z $links ]] || fail "$BRIDGE still has ports: $links"
    ok "no port left on $BRIDGE"
    for veth in "${!HOST_VETHS[@]}"; do
        ! ip link show "$veth" >/dev/null 2>&1 || fail "host veth $veth is still there"
    done
    ok "none of the pods' host veths is left (${!HOST_VETHS[*]})"
    local live
    live=$(allocations)
    [[ -z $live ]] || fail "the central allocator still holds addresses:
$live"
    allocations --all >"$TMP/out/history" || fail "netctl ipam show --all failed"
    "$NETCTL" journal --state-dir "$TMP/state" --json >"$TMP/out/journal.json" \
        || fail "netctl journal --json failed"
    "$PYTHON" - "$TMP/out/journal.json" "$TMP/out/history" "${#PODS[@]}" <<'EOF' \
        || fail "the journal disagrees"
import json, sys
journal = json.load(open(sys.argv[1]))
want = 2 * int(sys.argv[3])
dels = {str(op["id"]) for op in journal["operations"] if op["verb"] == "DEL"}
released = [line for line in open(sys.argv[2]) if line.split()[4] in dels]
if len(released) != want:
    sys.exit(f"demo: {len(released)} allocations released by a DEL, expected {want}")
atts = journal["attachments"]
if len(atts) != want:
    sys.exit(f"demo: the journal has {len(atts)} attachments, expected {want}")
live = [a for a in atts if a["state"] != "removed" or a["until"] is None]
if live:
    sys.exit("demo: attachments not removed: " + ", ".join(
        f"{a['pod']} {a['network']} {a['ifname']} ({a['state']})" for a in live))
EOF
    ok "no live allocation (all $((2 * ${#PODS[@]})) released by the DELs, kept as history)"
    ok "the journal shows all $((2 * ${#PODS[@]})) attachments removed"
}

# stop_daemon [SOCKET [NAME]]: SIGTERM to $DAEMON_PID, which must exit 0 and remove its socket
stop_daemon() {
    local pid=$DAEMON_PID sock=${1:-$TMP/run/netctl.sock} name=${2:-the daemon} rc
    local deadline=$((SECONDS + STOP_TIMEOUT))
    kill -TERM "$pid"
    while kill -0 "$pid" 2>/dev/null; do
        ((SECONDS < deadline)) || fail "$name did not exit within ${STOP_TIMEOUT}s of SIGTERM"
        sleep 0.1
    done
    rc=0
    wait "$pid" || rc=$?
    DAEMON_PID=""
    [[ $rc -eq 0 ]] || fail "$name exited with status $rc after SIGTERM"
    [[ ! -e "$sock" ]] || fail "$name left its socket behind"
    ok "$name exited 0 after SIGTERM"
}

# --- a crash in the middle of a churn ------------------------------------------

# running [VERB]: the operations the journal has in flight right now (`netctl journal
# --running`): with VERB, how many of that verb; without, "ADD 2, DEL 1" or "none"
running() {
    "$NETCTL" journal --state-dir "$TMP/state" --running --json | json_py '
from collections import Counter
verbs = Counter(op["verb"] for op in doc["operations"])
print(verbs[sys.argv[1]] if sys.argv[1:] else ", ".join(
    f"{verb} {n}" for verb, n in sorted(verbs.items())) or "none")' "$@"
}

# churn POD: what a runtime does with a pod that comes and goes: ADD, DEL, ADD, … until
# a call fails (the daemon is gone: ADD answers code 11; a DEL is recorded by the plugin)
churn() {
    while cni ADD "$1" && cni DEL "$1"; do :; done
}

crash_mid_churn() {
    local pod pids=() deadline=$((SECONDS + READY_TIMEOUT))
    for pod in "${CHURN[@]}"; do
        ip netns add "$(netns_of "$pod")" || fail "cannot create netns $(netns_of "$pod")"
        CONTAINER[$pod]=$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')
    done
    cni ADD churn1 || fail "ADD of churn1 failed: $(cat "$TMP/out/churn1.ADD.json")"
    echo "churn1 attached; now the other $((${#CHURN[@]} - 1)) churn at once (ADD, DEL, ADD, …)," \
        "and the daemon is SIGKILLed while ADDs are in flight"
    for pod in "${CHURN[@]:1}"; do
        churn "$pod" &
        pids+=($!)
    done
    until [[ $(running ADD) -gt 0 ]]; do
        ((SECONDS < deadline)) || fail "no ADD was ever seen in flight"
    done
    kill -KILL "$DAEMON_PID"
    wait "$DAEMON_PID" 2>/dev/null || true
    DAEMON_PID=""
    echo "    killed the daemon with these operations in flight (journal: running): $(running)"
    for pod in "${pids[@]}"; do wait "$pod" || true; done
    for pod in "${CHURN[@]:1}"; do
        echo "    $pod: its last ADD: $(json_py 'print("code", doc["code"], "-", doc["msg"][:60]
    if "code" in doc else "attached")' <"$TMP/out/$pod.ADD.json" 2>/dev/null || echo "no answer")"
    done
    ip netns del "$(netns_of churn1)"
    echo "    and churn1's sandbox vanished while the daemon was down (no DEL will come)"
}

restart_and_reconcile() {
    start_daemon
    wait_daemon_ready
    "$NETCTL" status --socket "$TMP/run/netctl.sock" --cni-conf-dir "$TMP/net.d" --json \
        >"$TMP/out/status.json"
    "$PYTHON" - "$TMP/out/status.json" <<'EOF' || fail "the start-up replay did not run"
import json, sys
r = json.load(open(sys.argv[1]))["replay"]
print(f"    start-up replay: {r['operations']} unfinished operation(s) closed, "
      f"{r['attachments']} half-done attachment(s) of {r['containers']} container(s) undone")
if r["failed"]:
    sys.exit(f"demo: replay failures: {r['failed']}")
EOF
    [[ $(running) == none ]] || fail "operations still running after the restart: $(running)"
    ok "no operation is left running: the replay finished or undid every one the kill cut"
    echo "    netctl reconcile --dry-run"
    "$NETCTL" reconcile --socket "$TMP/run/netctl.sock" --dry-run | sed 's/^/    | /'
    "$NETCTL" reconcile --socket "$TMP/run/netctl.sock" --json >"$TMP/out/reconcile.json" \
        || fail "netctl reconcile failed: $(cat "$TMP/out/reconcile.json")"
    "$NETCTL" journal --state-dir "$TMP/state" --container "${CONTAINER[churn1]}" --json \
        >"$TMP/out/churn1.journal.json"
    "$PYTHON" - "$TMP/out/reconcile.json" "${CONTAINER[churn1]}" "$TMP/out/churn1.journal.json" \
        <<'EOF' || fail "the reconciler did not clean what the crash left"
import json, sys
plan = json.load(open(sys.argv[1]))["plan"]
gone = [a for a in plan["attachments"] if a["container"] == sys.argv[2]]
print(f"    reconcile: {len(plan['attachments'])} attachment(s) DELeted, "
      f"{len(plan['allocations'])} allocation(s) released, {len(plan['links'])} link(s) removed")
if not gone:
    # the daemon's own first round, right after its start-up replay, or a reconcile on
    # the kernel's events, usually DELetes churn1 before anyone asks
    journal = json.load(open(sys.argv[3]))
    live = [a for a in journal["attachments"] if a["state"] != "removed"]
    by = {op["origin"] for op in journal["operations"] if op["verb"] == "DEL"} \
        & {"reconcile", "event"}
    if live or not by:
        sys.exit("demo: the reconciler did not DEL churn1, whose netns vanished")
    print(f"    (churn1 was DELeted already, before it was asked: by "
          f"{' and '.join(sorted(by)).replace('reconcile', 'the first round after the replay').replace('event', 'the kernel events')})")
EOF
    ok "the reconciler found churn1's vanished sandbox and released what it held"
}

del_churn_and_check() {
    local pod
    for pod in "${CHURN[@]:1}"; do
        cni DEL "$pod" || fail "DEL of $pod failed: $(cat "$TMP/out/$pod.DEL.json")"
    done
    for pod in "${CHURN[@]:1}"; do
        [[ $(ip -n "$(netns_of "$pod")" -o link show | wc -l) -eq 1 ]] \
            || fail "interfaces left in $(netns_of "$pod")"
    done
    [[ -z $(ip -o link show master "$BRIDGE" 2>/dev/null) ]] \
        || fail "ports left on $BRIDGE: $(ip -o link show master "$BRIDGE")"
    [[ -z $(allocations) ]] || fail "live allocations left: $(allocations)"
    ok "after the runtime's DELs: no interface, no bridge port, no live allocation left"
    "$NETCTL" ipam leaks --state-dir "$TMP/state" | sed 's/^/    | /'
}

# --- Kubernetes mode: a fake API server, two nodes ------------------------------

# wait_until SECONDS WHAT COMMAND…: run COMMAND until it succeeds, for at most SECONDS
wait_until() {
    local limit=$1 what=$2 deadline=$((SECONDS + $1))
    shift 2
    until "$@"; do
        ((SECONDS < deadline)) || fail "timed out after ${limit}s waiting for $what"
        sleep 0.1
    done
}

# kube_api METHOD PATH [BODY]: a request to the API server over its real HTTP API, as any
# client makes it (URL, token and CA from the administrator's kubeconfig); the answer on
# stdout; an error fails
kube_api() {
    "$PYTHON" - "$TMP/kube/kubeconfig.admin" "$@" <<'EOF'
import ssl, sys, urllib.error, urllib.request
import yaml
config, method, path, *body = sys.argv[1:]
doc = yaml.safe_load(open(config))
cluster, user = doc["clusters"][0]["cluster"], doc["users"][0]["user"]
headers = {"Content-Type": "application/json"}
if user.get("token"):
    headers["Authorization"] = f"Bearer {user['token']}"
request = urllib.request.Request(cluster["server"] + path, method=method,
                                 data=body[0].encode() if body else None, headers=headers)
tls = ssl.create_default_context(cafile=cluster.get("certificate-authority"))
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),  # loopback only
                                     urllib.request.HTTPSHandler(context=tls))
try:
    with opener.open(request, timeout=10) as answer:
        print(answer.read().decode())
except urllib.error.HTTPError as exc:
    sys.exit(f"demo: {method} {path}: {exc.code} {exc.read().decode()}")
EOF
}

start_fake_api() {
    local real=()
    [[ "$DEMO_API_SERVER" == real ]] && real=(--real)
    mkdir -p "$TMP/kube"
    "$PYTHON" -m netctl.kit.kubefake "${real[@]}" "$TMP/kube/kubeconfig" >"$TMP/kube/fake.log" 2>&1 &
    FAKE_PID=$!
    wait_until 60 "the API server's kubeconfig" test -e "$TMP/kube/kubeconfig"
    echo "    python -m netctl.kit.kubefake ${real[*]} $TMP/kube/kubeconfig (pid $FAKE_PID)"
    sed 's/^/    | /' "$TMP/kube/fake.log"
}

# bridge_net NAME BRIDGE SUBNET: a CNI conflist of one bridge with netctl-ipam
bridge_net() {
    printf '{"cniVersion": "1.0.0", "name": "%s", "plugins": [{"type": "bridge", "bridge": "%s", "ipam": {"type": "netctl-ipam", "range": "%s"}}]}' \
        "$1" "$2" "$3"
}

create_nads() {
    local net body
    kube_api POST /api/v1/namespaces \
        "{\"apiVersion\": \"v1\", \"kind\": \"Namespace\", \"metadata\": {\"name\": \"$KUBE_NS\"}}" >/dev/null
    for net in blue green red; do
        body=$("$PYTHON" -c 'import json, sys
name, ns, config = sys.argv[1:]
print(json.dumps({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
                  "metadata": {"name": name, "namespace": ns}, "spec": {"config": config}}))' \
            "$net" "$KUBE_NS" "$(bridge_net "$net" "${NAD_BRIDGE[$net]}" "${NAD_SUBNET[$net]}")")
        kube_api POST "/apis/k8s.cni.cncf.io/v1/namespaces/$KUBE_NS/network-attachment-definitions" \
            "$body" >/dev/null
        echo "    NAD $KUBE_NS/$net: bridge ${NAD_BRIDGE[$net]}, netctl-ipam ${NAD_SUBNET[$net]}"
    done
}

# kube_status NODE: `netctl status --json` of NODE's daemon
kube_status() {
    "$NETCTL" status --socket "$TMP/kube/$1/netctl.sock" --degraded-ok --json 2>/dev/null
}

# kube_watching NODE: whether NODE's daemon answers ready, watching pods and NADs, 3 NADs
# cached
kube_watching() {
    local status
    status=$(kube_status "$1") || return 1
    json_py 'k = doc["kubernetes"]
sys.exit(not (doc["ready"] and k["pods"]["state"] == k["nads"]["state"] == "watching"
              and k["nads"]["objects"] == 3))' <<<"$status"
}

start_kube_nodes() {
    local node dir
    for node in "${KUBE_NODES[@]}"; do
        dir=$TMP/kube/$node
        mkdir -p "$dir/nets"
        # its Node object, as kubelet registers it: a daemon whose --node-name names no
        # Node is not ready (netctl status says so)
        kube_api POST /api/v1/nodes "{\"apiVersion\": \"v1\", \"kind\": \"Node\", \"metadata\": {\"name\": \"$node\"}}" >/dev/null
        bridge_net podnet "${KUBE_BRIDGE[$node]}" "${KUBE_SUBNET[$node]}" >"$dir/cluster.conflist"
        cat >"$dir/daemon.json" <<EOF
{"state-dir": "$dir/state", "socket": "$dir/netctl.sock", "networks-dir": "$dir/nets",
 "cni-bin-dir": "$CNI_BIN", "kubeconfig": "$TMP/kube/kubeconfig", "node-name": "$node",
 "pod-deleted-grace": $POD_DELETED_GRACE, "pod-wait": 1, "api-timeout": 3}
EOF
        "$NETCTL" daemon --config "$dir/daemon.json" >"$dir/daemon.log" 2>&1 &
        KUBE_PID[$node]=$!
        FAIL_LOGS+=("$dir/daemon.log")
        echo "    $node: netctl daemon --config $dir/daemon.json (pid ${KUBE_PID[$node]});" \
            "cluster network podnet: bridge ${KUBE_BRIDGE[$node]}, ${KUBE_SUBNET[$node]}"
    done
    for node in "${KUBE_NODES[@]}"; do
        wait_until "$READY_TIMEOUT" "$node's watches" kube_watching "$node"
    done
    ok "both daemons ready, watching their node's pods and every NAD (netctl status: watching, 3 NADs)"
}

# kube_conf NODE: the conf NODE's runtime passes (as install-cni --auto-config writes it:
# clusterNetwork the node's primary conflist)
kube_conf() {
    printf '{"cniVersion": "1.0.0", "name": "netctl", "type": "netctl-cni", "socket": "%s", "clusterNetwork": "%s"}' \
        "$TMP/kube/$1/netctl.sock" "$TMP/kube/$1/cluster.conflist"
}

# kube_cni VERB POD: the plugin for POD as containerd execs it on POD's node (kubelet's
# CNI_ARGS); its output in $TMP/out/k-POD.VERB.json, and its exit status is returned
kube_cni() {
    local verb=$1 pod=$2 cid=${CONTAINER[k$2]}
    kube_conf "${KUBE_POD_NODE[$pod]}" | run_plugin "$verb" "$TMP/out/k-$pod.$verb" "$cid" \
        "$(netns_of "k$pod")" "IgnoreUnknown=1;K8S_POD_NAMESPACE=$KUBE_NS;K8S_POD_NAME=$pod;K8S_POD_INFRA_CONTAINER_ID=$cid;K8S_POD_UID=${POD_UID[$pod]}"
}

# kube_pod POD NETWORKS: create POD on its node through the API, NETWORKS its annotation
kube_pod() {
    local body
    body=$("$PYTHON" -c 'import json, sys
name, ns, node, networks = sys.argv[1:]
print(json.dumps({"apiVersion": "v1", "kind": "Pod",
                  "metadata": {"name": name, "namespace": ns,
                               "annotations": {"k8s.v1.cni.cncf.io/networks": networks}},
                  "spec": {"nodeName": node,
                           "containers": [{"name": "main", "image": "registry.k8s.io/pause"}]}}))' \
        "$1" "$KUBE_NS" "${KUBE_POD_NODE[$1]}" "$2")
    POD_UID[$1]=$(kube_api POST "/api/v1/namespaces/$KUBE_NS/pods" "$body" \
        | json_py 'print(doc["metadata"]["uid"])') || fail "cannot create pod $1 in the API"
    echo "    pod $KUBE_NS/$1 on ${KUBE_POD_NODE[$1]}, uid ${POD_UID[$1]}"
    echo "        k8s.v1.cni.cncf.io/networks: $2"
}

create_kube_pods() {
    local pod
    kube_pod web 'blue,green@data0'
    kube_pod db '[{"name": "red", "interface": "r0", "ips": ["10.250.14.50/24"]}]'
    POD_UID[late]=00000000-0000-4000-8000-000000000001   # never created in the API
    for pod in "${KUBE_PODS[@]}"; do
        ip netns add "$(netns_of "k$pod")" || fail "cannot create netns $(netns_of "k$pod")"
        CONTAINER[k$pod]=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
    done
}

# kube_addrs POD: "IFNAME ADDRESS/PREFIX" of each interface but lo inside POD's netns
kube_addrs() {
    ip -n "$(netns_of "k$1")" -4 -o addr show | awk '$2 != "lo" {print $2, $4}'
}

# check_kube_pod POD WANT…: POD's interfaces are WANT ("IFNAME NETWORK ADDRESS-PREFIX"),
# and its network-status in the API names the same networks, interfaces and addresses
check_kube_pod() {
    local pod=$1
    shift
    kube_addrs "$pod" | sed "s/^/    $pod: /"
    kube_api GET "/api/v1/namespaces/$KUBE_NS/pods/$pod" >"$TMP/out/k-$pod.api.json"
    "$PYTHON" - "$TMP/out/k-$pod.api.json" "$(kube_addrs "$pod")" "$@" <<'EOF' \
        || fail "$pod's interfaces or network-status are not what its annotation asks"
import json, sys
pod = json.load(open(sys.argv[1]))
have = dict(line.split() for line in sys.argv[2].splitlines())
want = [w.split() for w in sys.argv[3:]]
if sorted(have) != sorted(i for i, _, _ in want):
    sys.exit(f"demo: interfaces {sorted(have)}, expected {sorted(i for i, _, _ in want)}")
for iface, _, prefix in want:
    if not have[iface].startswith(prefix):
        sys.exit(f"demo: {iface} has {have[iface]}, expected {prefix}…")
text = pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/network-status"]
print("    network-status, as the API server has it:")
print("\n".join("    | " + line for line in text.splitlines()))
got = {(e["interface"], e["name"], tuple(e["ips"]), bool(e.get("default")))
       for e in json.loads(text)}
expected = {(iface, net, (have[iface].split("/")[0],), iface == "eth0")
            for iface, net, _ in want}
if got != expected:
    sys.exit(f"demo: network-status says {sorted(got)}, expected {sorted(expected)}")
EOF
    ok "$pod has $(kube_addrs "$pod" | awk '{print $1}' | xargs | sed 's/ /, /g'), and its" \
        "network-status says so (default: eth0)"
}

add_kube_pods() {
    local pod
    for pod in web db; do
        kube_cni ADD "$pod" || fail "ADD of $pod on ${KUBE_POD_NODE[$pod]} exited $?: $(cat \
            "$TMP/out/k-$pod.ADD.json" "$TMP/out/k-$pod.ADD.err")"
        echo "    ADD $pod on ${KUBE_POD_NODE[$pod]}: ok"
    done
    check_kube_pod web "eth0 podnet 10.250.10." "net1 $KUBE_NS/blue 10.250.12." \
        "data0 $KUBE_NS/green 10.250.13."
    check_kube_pod db "eth0 podnet 10.250.11." "r0 $KUBE_NS/red 10.250.14.50/24"
    for pod in web db; do
        kube_status "${KUBE_POD_NODE[$pod]}" | json_py '
calls = doc["kubernetes"]["api_calls"]
print(f"    API calls of {sys.argv[1]} since it started:",
      ", ".join(f"{what} {n}" for what, n in calls.items()))
reads = {what: n for what, n in calls.items() if what.startswith("get pods")}
patches = calls.get("patch pods", 0)
if reads or patches != 1:
    sys.exit(f"demo: {sys.argv[1]} made pod GETs {reads} and {patches} pod PATCHes;"
             " expected no GET and 1 PATCH")' \
            "${KUBE_POD_NODE[$pod]}" || fail "the ADD's API calls are not 0 reads and 1 write"
    done
    ok "no pod GET for either ADD (the watch's cache answered); one PATCH each (network-status)"
}

# gone NODE POD: every attachment of POD on NODE is removed (`netctl journal --container`)
gone() {
    "$NETCTL" journal --state-dir "$TMP/kube/$1/state" --container "${CONTAINER[k$2]}" \
        --json | json_py 'atts = doc["attachments"]
sys.exit(not atts or any(a["state"] != "removed" for a in atts))'
}

# nothing_left NODE POD: only lo in POD's netns, no address held by NODE
nothing_left() {
    local links live
    links=$(ip -n "$(netns_of "k$2")" -o link show | awk -F': ' '{print $2}' | xargs)
    [[ $links == lo ]] || fail "$(netns_of "k$2") still has interfaces: $links"
    live=$(STATE_DIR=$TMP/kube/$1/state allocations)
    [[ -z $live ]] || fail "$1 still holds addresses: $live"
}

delete_pod_through_api() {
    local origins
    # at once (gracePeriodSeconds 0): no kubelet runs here to finish a graceful deletion
    kube_api DELETE "/api/v1/namespaces/$KUBE_NS/pods/web" \
        '{"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}' >/dev/null
    echo "    DELETE /api/v1/namespaces/$KUBE_NS/pods/web, gracePeriodSeconds 0 (and no runtime DEL follows)"
    wait_until 30 "node-a to DEL web's attachments" gone node-a web
    origins=$("$NETCTL" journal --state-dir "$TMP/kube/node-a/state" --container \
        "${CONTAINER[kweb]}" --json \
        | json_py 'print(*sorted({o["origin"] for o in doc["operations"] if o["verb"] == "DEL"}))')
    [[ $origins == pod-deleted ]] || fail "web's attachments were DELeted by '$origins'"
    nothing_left node-a web
    ok "node-a saw the deletion in its watch and DELeted web's 3 attachments" \
        "${POD_DELETED_GRACE}s later (journal: origin pod-deleted); only lo is left, and" \
        "node-a holds no address"
}

api_outage() {
    local started ms code msg node
    kill -USR1 "$FAKE_PID"
    wait_until 10 "the outage" grep -q "outage" "$TMP/kube/fake.log"
    echo "    the API server is down (SIGUSR1 to python -m netctl.kit.kubefake: no listener, connections cut)"
    started=$(date +%s%N)
    if kube_cni ADD late; then
        fail "the ADD of late succeeded with the API server down"
    fi
    ms=$((($(date +%s%N) - started) / 1000000))
    code=$(json_py 'print(doc.get("code"))' <"$TMP/out/k-late.ADD.json")
    msg=$(json_py 'print(doc.get("msg"))' <"$TMP/out/k-late.ADD.json")
    echo "    ADD of $KUBE_NS/late on node-b (a pod node-b has never seen), answered in ${ms} ms:"
    echo "    | code $code: $msg"
    [[ $code == 11 && $msg == *"API server"* ]] \
        || fail "the ADD of late answered code $code ($msg), not 11 naming the API server"
    ok "ADD answers code 11 (try again later) naming the API server; the runtime retries"
    kube_cni DEL late || fail "the runtime's DEL of late (after its failed ADD) failed"
    kube_cni DEL db || fail "DEL of db failed with the API server down: $(cat \
        "$TMP/out/k-db.DEL.json" "$TMP/out/k-db.DEL.err")"
    nothing_left node-b db
    ok "DEL of db (and of late) completed from node-b's journal: only lo left in db's" \
        "netns, node-b holds no address"
    kill -USR2 "$FAKE_PID"
    echo "    the API server is back (SIGUSR2)"
    for node in "${KUBE_NODES[@]}"; do
        wait_until 60 "$node's watches after the outage" kube_watching "$node"
    done
    ok "both nodes' watches came back by themselves"
}

stop_kube() {
    local node rc=0
    for node in "${KUBE_NODES[@]}"; do
        DAEMON_PID=${KUBE_PID[$node]}
        stop_daemon "$TMP/kube/$node/netctl.sock" "$node's daemon"
        unset "KUBE_PID[$node]"
    done
    for node in "${KUBE_NODES[@]}"; do
        [[ -z $(bridge_ports_of "${KUBE_BRIDGE[$node]}") ]] \
            || fail "ports left on ${KUBE_BRIDGE[$node]}: $(bridge_ports_of "${KUBE_BRIDGE[$node]}")"
    done
    kill -TERM "$FAKE_PID"
    wait "$FAKE_PID" || rc=$?
    FAKE_PID=""
    [[ $rc -eq 0 ]] || fail "the fake API server failed (exit $rc): $(cat "$TMP/kube/fake.log")"
    ok "no port left on either node's bridge; the API server process exited 0 (no error of its own)"
}

main() {
    trap cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    check_prerequisites
    remove_host_objects

    step "Set-up: temp dir, networks, macvlan parent, thin plugin, the runtime's conf"
    make_tmp
    make_parent_link
    write_networks
    install_plugin
    write_runtime_conf

    step "Start the daemon (standalone)"
    start_daemon
    wait_daemon_ready

    step "ADD ${#PODS[*]} pods, each on $BRIDGE_NET (eth0) and $MACVLAN_NET (net1)"
    create_pods
    add_pods

    step "What each pod has: read inside its netns, and held by the central allocator"
    show_pods
    check_attached
    show_ipam_pools

    step "Connectivity between two pods"
    check_ping

    step "The journal"
    show_journal

    step "DEL every pod"
    del_pods

    step "Nothing is left"
    check_clean
    show_ipam_pools
    show_journal

    step "Who had pod2's address while it was up? (asked after every pod is gone)"
    who_had_ip pod2 "$POD2_ADDR" "$POD2_AT"

    step "A crash in the middle of a churn"
    crash_mid_churn

    step "Restart: replay before serving, then the reconciler"
    restart_and_reconcile
    del_churn_and_check

    step "Stop the daemon with SIGTERM"
    stop_daemon

    step "Kubernetes mode: $([[ $DEMO_API_SERVER == real ]] && echo "a real kube-apiserver" \
        || echo "a fake API server") and two nodes, each its own daemon"
    start_fake_api
    create_nads
    start_kube_nodes

    step "Pods name their networks in k8s.v1.cni.cncf.io/networks (both forms)"
    create_kube_pods
    add_kube_pods

    step "A pod deleted through the API: its node DELetes its attachments"
    delete_pod_through_api

    step "The API server goes away: ADD answers code 11, DEL still completes"
    api_outage

    step "Stop both daemons with SIGTERM, then the API server"
    stop_kube

    printf '\ndemo: all checks passed\n'
}

main "$@"
