#!/usr/bin/env bash
# netctl demo (`make demo`): the main job, end to end, on real network namespaces.
#
# Run as root from the repository root, after `make setup`. It starts a standalone
# daemon on a temporary state dir, attaches three pods (network namespaces) to a
# bridge network and a macvlan network at once through the installed thin plugin,
# both with addresses from netctl's central IPAM (netctl-ipam, allocations kept in the
# journal), shows what each pod got and that two pods reach each other, shows the
# journal, plugs a third network into a running pod and unplugs it (`netctl attach`,
# `netctl detach`), removes every pod and checks that nothing is left behind (no interface, no
# live allocation), asks the allocation history who held pod2's address while it was
# up, then stops the daemon with SIGTERM. A last act runs Kubernetes mode: a fake API
# server (netctl/kit/kubefake, as a process: `python -m netctl_kit.kubefake`) and two
# daemons as two nodes, pods whose networks are named in their annotations (both forms), the
# network-status each node writes back, a running pod's annotation changed (its node
# plugs and unplugs networks in its netns), a pod deleted through the API whose attachments
# its node DELetes, and an API outage (ADD code 11, DEL completes). Every check that
# fails stops the demo with a message and exit 1.
# What a user types and sees is here; the waits, the requests to the API server and the
# checks are the kit's (`python -m netctl_kit.demo STEP`, netctl/kit/demo.py).
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
EXTRA_NET=demo-extra        # plugged into a running pod, then unplugged (netctl attach)
EXTRA_BRIDGE=ndemo-br1
BRIDGE_SUBNET=10.250.1.0/24
MACVLAN_SUBNET=10.250.2.0/24
EXTRA_SUBNET=10.250.3.0/24
POD_NAMESPACE=demo
PODS=(pod1 pod2 pod3)
CHURN=(churn1 churn2 churn3 churn4 churn5 churn6)   # pods of the crash scene
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
KUBE_ADMIN=""               # the administrator's kubeconfig (the demo's requests)
FAKE_PID=""                 # the fake API server's process
# the Kubernetes act's API server: "fake" (netctl/kit/kubefake), or "real": a real
# kube-apiserver and etcd (`NETCTL_DEMO_API_SERVER=real make demo`; docs/testing.md, "Against a real API server")
DEMO_API_SERVER=${NETCTL_DEMO_API_SERVER:-fake}
POD_DELETED_GRACE=1         # seconds (the default, 10, suits kubelet; the demo is shorter)

TMP=""
DAEMON_PID=""
POD2_ADDR=""                # pod2's bridge address, asked about after the pods are gone
POD2_AT=""                  # a time (ISO 8601) while pod2 held it
declare -A CONTAINER        # pod → container id

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

# kit STEP ARGS…: a wait, a request or a check of the kit (netctl/kit/demo.py); one that
# fails has said why, and stops the demo
kit() { "$PYTHON" -m netctl_kit.demo "$@" || fail "$1"; }

netns_of() { echo "ndemo-$1"; }

# pods_args PODS…: "POD=CONTAINER" of each, for the kit's checks
pods_args() {
    local pod
    for pod in "$@"; do echo "$pod=${CONTAINER[$pod]}"; done
}

# --- clean-up (also run before starting, for leftovers of an interrupted run) ----

# stop_hard PID: SIGTERM, then SIGKILL after 10 s
stop_hard() {
    [[ -n "$1" ]] || return 0
    kill -TERM "$1" 2>/dev/null || true
    for _ in $(seq 100); do
        kill -0 "$1" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}

cleanup() {
    local rc=$? pid
    trap - EXIT INT TERM
    for pid in "$DAEMON_PID" "${KUBE_PID[@]}" "$FAKE_PID"; do stop_hard "$pid"; done
    "$PYTHON" -m netctl_kit.demo remove ndemo- || true   # netns and links (a veth's peer too)
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
    write_nad "$EXTRA_NET.yaml" "$EXTRA_NET" "{
  \"cniVersion\": \"1.0.0\",
  \"name\": \"$EXTRA_NET\",
  \"plugins\": [{
    \"type\": \"bridge\",
    \"bridge\": \"$EXTRA_BRIDGE\",
    \"ipam\": {\"type\": \"netctl-ipam\", \"range\": \"$EXTRA_SUBNET\"}
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
    kit wait-ready "$TMP/run/netctl.sock" --cni-conf-dir "$TMP/net.d" --pid "$DAEMON_PID"
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

# new_netns POD [BYTES]: POD's netns, and a random container id of BYTES bytes (6) for it
new_netns() {
    ip netns add "$(netns_of "$1")" || fail "cannot create netns $(netns_of "$1")"
    CONTAINER[$1]=$(od -An -N"${2:-6}" -tx1 /dev/urandom | tr -d ' \n')
}

create_pods() {
    local pod
    for pod in "${PODS[@]}"; do
        new_netns "$pod"
        echo "netns $(netns_of "$pod") for $POD_NAMESPACE/$pod, container ${CONTAINER[$pod]}"
    done
}

add_pods() {
    local pod
    for pod in "${PODS[@]}"; do
        cni ADD "$pod" || fail "ADD of $pod exited $?: $(cat "$TMP/out/$pod.ADD.json" \
            "$TMP/out/$pod.ADD.err")"
        echo "ADD $pod: $(kit answer "$TMP/out/$pod.ADD.json")"
    done
}

show_ipam_pools() {
    echo "    netctl ipam pools"
    "$NETCTL" ipam pools --state-dir "$TMP/state" | sed 's/^/    /' \
        || fail "netctl ipam pools failed"
}

check_ping() {
    local target
    target=$(ip -n "$(netns_of pod2)" -4 -o addr show dev eth0 | awk '{split($4, a, "/"); print a[1]}')
    POD2_ADDR=$target
    echo "    ip netns exec $(netns_of pod1) ping -c1 -W1 $target"
    ip netns exec "$(netns_of pod1)" ping -c1 -W1 "$target" | sed 's/^/    | /' \
        || fail "pod1 cannot reach pod2 at $target over $BRIDGE"
    ok "pod1 reaches pod2 ($target) over $BRIDGE"
    POD2_AT=$(date +%Y-%m-%dT%H:%M:%S.%6N%:z)   # pod2 holds $target now: asked about later
}

show_journal() {
    "$NETCTL" journal --state-dir "$TMP/state" "$@" | sed 's/^/    /' \
        || fail "netctl journal $* failed"
}

# addr_on POD IFNAME: POD's IPv4 address (CIDR) on IFNAME, empty when it has none
addr_on() {
    ip -n "$(netns_of "$1")" -4 -o addr show dev "$2" 2>/dev/null | awk '{print $4}'
}

# hotplug_pod1: netctl attach, then netctl detach, on pod1 while it runs
hotplug_pod1() {
    local id=${CONTAINER[pod1]} addr
    echo "    netctl attach --container $id --network $EXTRA_NET"
    "$NETCTL" attach --container "$id" --network "$EXTRA_NET" \
        --socket "$TMP/run/netctl.sock" | sed 's/^/    | /' || fail "netctl attach failed"
    addr=$(addr_on pod1 net2)
    [[ $addr == 10.250.3.* ]] || fail "pod1 has no net2 in $EXTRA_SUBNET after attach: '$addr'"
    ok "pod1 has net2 ($addr) on $EXTRA_NET; eth0 and net1 untouched"
    show_journal --container "$id"
    echo "    netctl detach --container $id --network $EXTRA_NET"
    "$NETCTL" detach --container "$id" --network "$EXTRA_NET" \
        --socket "$TMP/run/netctl.sock" | sed 's/^/    | /' || fail "netctl detach failed"
    [[ -z $(addr_on pod1 net2) ]] || fail "pod1 still has net2 after detach"
    [[ -n $(addr_on pod1 eth0) && -n $(addr_on pod1 net1) ]] \
        || fail "detach touched pod1's eth0 or net1"
    ok "net2 is gone from pod1, its address back in the pool; eth0 and net1 kept"
}

del_pods() {
    local pod
    for pod in "${PODS[@]}"; do
        cni DEL "$pod" || fail "DEL of $pod exited $?: $(cat "$TMP/out/$pod.DEL.json" \
            "$TMP/out/$pod.DEL.err")"
        echo "DEL $pod: ok"
    done
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

# churn POD: what a runtime does with a pod that comes and goes: ADD, DEL, ADD, … until
# a call fails (the daemon is gone: ADD answers code 11; a DEL is recorded by the plugin)
churn() {
    while cni ADD "$1" && cni DEL "$1"; do :; done
}

crash_mid_churn() {
    local pod pids=()
    for pod in "${CHURN[@]}"; do new_netns "$pod"; done
    cni ADD churn1 || fail "ADD of churn1 failed: $(cat "$TMP/out/churn1.ADD.json")"
    echo "churn1 attached; now the other $((${#CHURN[@]} - 1)) churn at once (ADD, DEL, ADD, …)," \
        "and the daemon is SIGKILLed while ADDs are in flight"
    for pod in "${CHURN[@]:1}"; do
        churn "$pod" &
        pids+=($!)
    done
    kit wait-running "$TMP/state" ADD
    kill -KILL "$DAEMON_PID"
    wait "$DAEMON_PID" 2>/dev/null || true
    DAEMON_PID=""
    echo "    killed the daemon with these operations in flight (journal: running):" \
        "$(kit running "$TMP/state")"
    for pod in "${pids[@]}"; do wait "$pod" || true; done
    for pod in "${CHURN[@]:1}"; do
        echo "    $pod: its last ADD: $(kit answer "$TMP/out/$pod.ADD.json" | cut -c1-80)"
    done
    ip netns del "$(netns_of churn1)"
    echo "    and churn1's sandbox vanished while the daemon was down (no DEL will come)"
}

restart_and_reconcile() {
    start_daemon
    kit replay "$TMP/run/netctl.sock"
    kit idle "$TMP/state"
    ok "no operation is left running: the replay finished or undid every one the kill cut"
    echo "    netctl reconcile --dry-run"
    "$NETCTL" reconcile --socket "$TMP/run/netctl.sock" --dry-run | sed 's/^/    | /'
    kit reconciled "$TMP/run/netctl.sock" "$TMP/state" "${CONTAINER[churn1]}"
    ok "the reconciler found churn1's vanished sandbox and released what it held"
}

del_churn_and_check() {
    local pod netns=()
    for pod in "${CHURN[@]:1}"; do
        cni DEL "$pod" || fail "DEL of $pod failed: $(cat "$TMP/out/$pod.DEL.json")"
        netns+=(--netns "$(netns_of "$pod")")
    done
    kit nothing-left "${netns[@]}" --bridge "$BRIDGE" --state "$TMP/state"
    ok "after the runtime's DELs: no interface, no bridge port, no live allocation left"
    "$NETCTL" ipam leaks --state-dir "$TMP/state" | sed 's/^/    | /'
}

# --- Kubernetes mode: a fake API server, two nodes ------------------------------

start_fake_api() {
    local real=()
    [[ "$DEMO_API_SERVER" == real ]] && real=(--real)
    mkdir -p "$TMP/kube"
    "$PYTHON" -m netctl_kit.kubefake "${real[@]}" "$TMP/kube/kubeconfig" >"$TMP/kube/fake.log" 2>&1 &
    FAKE_PID=$!
    KUBE_ADMIN=$TMP/kube/kubeconfig.admin
    kit wait-file "$TMP/kube/kubeconfig"
    echo "    python -m netctl_kit.kubefake ${real[*]} $TMP/kube/kubeconfig (pid $FAKE_PID)"
    sed 's/^/    | /' "$TMP/kube/fake.log"
}

# bridge_net NAME BRIDGE SUBNET: a CNI conflist of one bridge with netctl-ipam
bridge_net() {
    printf '{"cniVersion": "1.0.0", "name": "%s", "plugins": [{"type": "bridge", "bridge": "%s", "ipam": {"type": "netctl-ipam", "range": "%s"}}]}' \
        "$1" "$2" "$3"
}

create_nads() {
    local net
    kit create "$KUBE_ADMIN" namespace "$KUBE_NS"
    for net in blue green red; do
        kit create "$KUBE_ADMIN" nad "$net" --namespace "$KUBE_NS" \
            --spec "$(bridge_net "$net" "${NAD_BRIDGE[$net]}" "${NAD_SUBNET[$net]}")"
        echo "    NAD $KUBE_NS/$net: bridge ${NAD_BRIDGE[$net]}, netctl-ipam ${NAD_SUBNET[$net]}"
    done
}

start_kube_nodes() {
    local node dir
    for node in "${KUBE_NODES[@]}"; do
        dir=$TMP/kube/$node
        mkdir -p "$dir/nets"
        # its Node object, as kubelet registers it: a daemon whose --node-name names no
        # Node is not ready (netctl status says so)
        kit create "$KUBE_ADMIN" node "$node"
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
        kit wait-kube "$TMP/kube/$node/netctl.sock" --nads 3
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
    POD_UID[$1]=$(kit create "$KUBE_ADMIN" pod "$1" --namespace "$KUBE_NS" \
        --node "${KUBE_POD_NODE[$1]}" --spec "$2") || exit 1
    echo "    pod $KUBE_NS/$1 on ${KUBE_POD_NODE[$1]}, uid ${POD_UID[$1]}"
    echo "        k8s.v1.cni.cncf.io/networks: $2"
}

create_kube_pods() {
    local pod
    kube_pod web 'blue,green@data0'
    kube_pod db '[{"name": "red", "interface": "r0", "ips": ["10.250.14.50/24"]}]'
    POD_UID[late]=00000000-0000-4000-8000-000000000001   # never created in the API
    for pod in "${KUBE_PODS[@]}"; do new_netns "k$pod" 32; done
}

add_kube_pods() {
    local pod node
    for pod in web db; do
        kube_cni ADD "$pod" || fail "ADD of $pod on ${KUBE_POD_NODE[$pod]} exited $?: $(cat \
            "$TMP/out/k-$pod.ADD.json" "$TMP/out/k-$pod.ADD.err")"
        echo "    ADD $pod on ${KUBE_POD_NODE[$pod]}: ok"
    done
    # each pod's interfaces ("IFNAME NETWORK ADDRESS-PREFIX") and its network-status in the API
    kit kube-pod "$KUBE_ADMIN" "$KUBE_NS" web "$(netns_of kweb)" "eth0 podnet 10.250.10." \
        "net1 $KUBE_NS/blue 10.250.12." "data0 $KUBE_NS/green 10.250.13."
    kit kube-pod "$KUBE_ADMIN" "$KUBE_NS" db "$(netns_of kdb)" "eth0 podnet 10.250.11." \
        "r0 $KUBE_NS/red 10.250.14.50/24"
    for pod in web db; do
        node=${KUBE_POD_NODE[$pod]}
        kit api-calls "$TMP/kube/$node/netctl.sock" "$node"
    done
    ok "no pod GET for either ADD (the watch's cache answered); one PATCH each (network-status)"
}

# the pod's annotation changed while it runs: node-a plugs and unplugs in its netns
hotplug_web() {
    echo "    kubectl annotate --overwrite pod web k8s.v1.cni.cncf.io/networks=blue,red"
    echo "    (green@data0 removed, red added; as a merge patch through the API)"
    kit annotate "$KUBE_ADMIN" "$KUBE_NS" web 'blue,red'
    kit kube-pod "$KUBE_ADMIN" "$KUBE_NS" web "$(netns_of kweb)" "eth0 podnet 10.250.10." \
        "net1 $KUBE_NS/blue 10.250.12." "net2 $KUBE_NS/red 10.250.14." --wait 30
    kit pod-events "$KUBE_ADMIN" "$KUBE_NS" web NetworkAttached NetworkDetached
    show_kube_journal node-a --container "${CONTAINER[kweb]}"
    ok "node-a detached green (data0) and attached red as net2 in web's running netns," \
        "journaled as hotplug, network-status rewritten, an Event for each"
}

# show_kube_journal NODE ARGS…: netctl journal on NODE's state
show_kube_journal() {
    local node=$1
    shift
    "$NETCTL" journal --state-dir "$TMP/kube/$node/state" "$@" | sed 's/^/    /' \
        || fail "netctl journal $* on $node failed"
}

delete_pod_through_api() {
    kit delete-pod "$KUBE_ADMIN" "$KUBE_NS" web
    echo "    DELETE /api/v1/namespaces/$KUBE_NS/pods/web, gracePeriodSeconds 0 (and no runtime DEL follows)"
    kit deleted-by "$TMP/kube/node-a/state" "${CONTAINER[kweb]}" pod-deleted
    kit nothing-left --netns "$(netns_of kweb)" --state "$TMP/kube/node-a/state"
    ok "node-a saw the deletion in its watch and DELeted web's 3 attachments" \
        "${POD_DELETED_GRACE}s later (journal: origin pod-deleted); only lo is left, and" \
        "node-a holds no address"
}

api_outage() {
    local started ms node answer
    kit outage "$TMP/kube/fake.log" --pid "$FAKE_PID"
    echo "    the API server is down (SIGUSR1 to python -m netctl_kit.kubefake: no listener, connections cut)"
    started=$(date +%s%N)
    if kube_cni ADD late; then
        fail "the ADD of late succeeded with the API server down"
    fi
    ms=$((($(date +%s%N) - started) / 1000000))
    echo "    ADD of $KUBE_NS/late on node-b (a pod node-b has never seen), answered in ${ms} ms:"
    answer=$(kit answer "$TMP/out/k-late.ADD.json" --code 11 --says "API server") || exit 1
    echo "    | $answer"
    ok "ADD answers code 11 (try again later) naming the API server; the runtime retries"
    kube_cni DEL late || fail "the runtime's DEL of late (after its failed ADD) failed"
    kube_cni DEL db || fail "DEL of db failed with the API server down: $(cat \
        "$TMP/out/k-db.DEL.json" "$TMP/out/k-db.DEL.err")"
    kit nothing-left --netns "$(netns_of kdb)" --state "$TMP/kube/node-b/state"
    ok "DEL of db (and of late) completed from node-b's journal: only lo left in db's" \
        "netns, node-b holds no address"
    kill -USR2 "$FAKE_PID"
    echo "    the API server is back (SIGUSR2)"
    for node in "${KUBE_NODES[@]}"; do
        kit wait-kube "$TMP/kube/$node/netctl.sock" --nads 3 --timeout 60
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
    kit nothing-left --bridge "${KUBE_BRIDGE[node-a]}" --bridge "${KUBE_BRIDGE[node-b]}"
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
    "$PYTHON" -m netctl_kit.demo remove ndemo- || fail "leftovers of an earlier run"

    step "Set-up: temp dir, networks, macvlan parent, thin plugin, the runtime's conf"
    make_tmp
    make_parent_link
    write_networks
    install_plugin
    write_runtime_conf

    step "Start the daemon (standalone)"
    start_daemon

    step "ADD ${#PODS[*]} pods, each on $BRIDGE_NET (eth0) and $MACVLAN_NET (net1)"
    create_pods
    add_pods

    step "What each pod has: read inside its netns, and held by the central allocator"
    kit show-pods "$TMP/state" ndemo- $(pods_args "${PODS[@]}")
    kit attached "$TMP/state" ndemo- "$BRIDGE" $(pods_args "${PODS[@]}") \
        --eth0 "$BRIDGE_SUBNET" --net1 "$MACVLAN_SUBNET" --save "$TMP/out/veths"
    show_ipam_pools

    step "Connectivity between two pods"
    check_ping

    step "The journal"
    show_journal

    step "Plug a network into a running pod, and unplug it"
    hotplug_pod1

    step "DEL every pod"
    del_pods

    step "Nothing is left"
    kit clean "$TMP/state" ndemo- "$BRIDGE" $(pods_args "${PODS[@]}") --veths "$TMP/out/veths" \
        --plugged 1   # pod1's net2, attached and detached
    show_ipam_pools
    show_journal

    step "Who had pod2's address while it was up? (asked after every pod is gone)"
    echo "    netctl journal --ip $POD2_ADDR --at $POD2_AT"
    show_journal --ip "$POD2_ADDR" --at "$POD2_AT"
    kit who-had "$TMP/state" "$POD2_ADDR" "$POD2_AT" "$POD_NAMESPACE/pod2" "${CONTAINER[pod2]}"

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

    step "Hot-plug: a running pod's networks annotation changes, its node follows"
    hotplug_web

    step "A pod deleted through the API: its node DELetes its attachments"
    delete_pod_through_api

    step "The API server goes away: ADD answers code 11, DEL still completes"
    api_outage

    step "Stop both daemons with SIGTERM, then the API server"
    stop_kube

    printf '\ndemo: all checks passed\n'
}

main "$@"
