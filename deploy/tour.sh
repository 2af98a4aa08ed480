#!/usr/bin/env bash
# netctl operator's tour (`make tour`): every admin command once, on a real daemon, with
# its real output — docs/operating.md's "Operating netctl" guide is this script's output.
#
# Run as root from the repository root, after `make setup`. A standalone daemon on a
# temporary state dir serves one bridge network (netctl-ipam) with metrics on a loopback
# port and logfmt logs; three pods (network namespaces) are ADDed through the installed
# thin plugin; one pod is DELeted; one pod's netns is deleted without a DEL (a runtime
# that crashed). Kernel-event reconciling is off so that leak stays visible until
# `netctl reconcile` cleans it. Then a pod of a network with a typo in its NAD (macvlan on a
# master link that does not exist, sharing the bridge network's pool) fails its ADD and its
# DEL: the daemon is degraded, its address is released once its netns is gone, and
# `netctl forget` ends the stuck attachment. Each command is printed with `$ ` before its
# output and its exit status after it. A trap removes everything the tour made (daemon, netns,
# bridge, temp dir) on any exit. Host names start with "ntour-". The waits and the rest of
# the scaffolding are the kit's (`python -m netctl_kit.demo STEP`, netctl/kit/demo.py).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$(pwd)
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
NETCTL="$REPO/.venv/bin/netctl"
PYTHON="$REPO/.venv/bin/python"
BRIDGE=ntour-br0
NET=tour-bridge
SUBNET=10.251.0.0/28
PODS=(web-1 web-2 web-3)
TYPO=tour-typo
METRICS=""                  # 127.0.0.1 and a free port
TMP=""
DAEMON_PID=""

kit() { "$PYTHON" -m netctl_kit.demo "$@"; }

cleanup() {
    if [[ -n "$DAEMON_PID" ]] && kill -0 "$DAEMON_PID" 2>/dev/null; then
        kill -TERM "$DAEMON_PID" 2>/dev/null || true
        wait "$DAEMON_PID" 2>/dev/null || true
    fi
    kit remove ntour- || true  # the pods' netns and the bridge
    if [[ -n "$TMP" ]]; then rm -rf "$TMP"; fi
}
trap cleanup EXIT
cleanup

TMP=$(mktemp -d /tmp/netctl-tour.XXXXXX)
METRICS=127.0.0.1:$(kit free-port)
mkdir -p "$TMP/nets" "$TMP/net.d" "$TMP/bin"

# show CMD…: print the command as an operator types it (paths shortened), run it, print
# its output and its exit status.
show() {
    local status=0
    printf '\n$ %s\n' "$(sed -e "s#$REPO/.venv/bin/##g" -e "s#$TMP#\$TOUR#g" <<<"$*")"
    "$@" 2>&1 | sed -e "s#$TMP#\$TOUR#g" || status=${PIPESTATUS[0]}
    printf '(exit %s)\n' "$status"
}

# nad NAME PLUGIN: a NAD file for a one-plugin network on the tour's pool
nad() {
    cat >"$TMP/nets/$1.yaml" <<EOF
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: $1
  namespace: default
spec:
  config: |
    {"cniVersion": "1.0.0", "name": "$1",
     "plugins": [{$2, "ipam": {"type": "netctl-ipam", "range": "$SUBNET"}}]}
EOF
}
nad "$NET" "\"type\": \"bridge\", \"bridge\": \"$BRIDGE\""
nad "$TYPO" '"type": "macvlan", "master": "ntour-eht1"'  # a typo: no such link
cat >"$TMP/daemon.yaml" <<EOF
state-dir: $TMP/state
socket: $TMP/run/netctl.sock
networks-dir: $TMP/nets
cni-bin-dir: /usr/lib/cni
metrics-addr: "$METRICS"
log-format: logfmt
reconcile-events: false
reconcile-interval: 0
reconcile-grace: 0
EOF
CONF="{\"cniVersion\": \"1.0.0\", \"name\": \"netctl\", \"type\": \"netctl-cni\",
 \"socket\": \"$TMP/run/netctl.sock\", \"clusterNetwork\": \"$NET\"}"
echo "$CONF" >"$TMP/net.d/10-netctl.conf"
"$NETCTL" install-cni --bin-dir "$TMP/bin" >/dev/null

# cni VERB POD [CONF]: the thin plugin, as a runtime execs it.
cni() {
    echo "${3:-$CONF}" | env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin CNI_COMMAND="$1" \
        CNI_CONTAINERID="tour-$2-0123456789ab" CNI_NETNS="/var/run/netns/ntour-$2" \
        CNI_IFNAME=eth0 CNI_PATH="$TMP/bin" \
        CNI_ARGS="K8S_POD_NAMESPACE=tour;K8S_POD_NAME=$2" "$TMP/bin/netctl-cni" \
        >"$TMP/$2.$1.json"
}

echo "# the daemon is not running yet"
show "$NETCTL" status --socket "$TMP/run/netctl.sock"

"$NETCTL" daemon --config "$TMP/daemon.yaml" >"$TMP/daemon.log" 2>&1 &
DAEMON_PID=$!
kit wait-ready "$TMP/run/netctl.sock" --pid "$DAEMON_PID" --quiet

echo
echo "# a daemon on \$TOUR/daemon.yaml:"
sed 's/^/#   /' <<<"$(sed "s#$TMP#\$TOUR#g" "$TMP/daemon.yaml")"
show "$NETCTL" status --socket "$TMP/run/netctl.sock" --cni-conf-dir "$TMP/net.d"
show "$NETCTL" doctor --cni-conf-dir "$TMP/net.d" --networks-dir "$TMP/nets"

for pod in "${PODS[@]}"; do
    ip netns add "ntour-$pod"
    cni ADD "$pod"
done
sleep 1
WEB2_AT=$(date -u +%Y-%m-%dT%H:%M:%SZ)  # a second after the ADDs: web-2 held its address
WEB2_IP=$(ip -n ntour-web-2 -4 -o addr show dev eth0 | awk '{split($4, a, "/"); print a[1]}')
sleep 1
cni DEL web-2
ip netns del ntour-web-2
echo
echo "# three pods ADDed; web-2 DELeted; now web-3's netns goes without a DEL"
ip netns del ntour-web-3

show "$NETCTL" ipam pools --state-dir "$TMP/state"
show "$NETCTL" ipam show "$NET" --state-dir "$TMP/state"
show "$NETCTL" journal --state-dir "$TMP/state" --pod tour/web-2
show "$NETCTL" journal --state-dir "$TMP/state" --ip "$WEB2_IP" --at "$WEB2_AT"
show "$NETCTL" journal --state-dir "$TMP/state" --ip "$WEB2_IP" \
    --at "$(TZ=Etc/GMT-1 date -d "$WEB2_AT" +%Y-%m-%dT%H:%M:%S%:z)"
show "$NETCTL" journal --state-dir "$TMP/state" --ip "$WEB2_IP" --at "${WEB2_AT%Z}"
show "$NETCTL" ipam leaks --state-dir "$TMP/state"
show "$NETCTL" reconcile --socket "$TMP/run/netctl.sock" --dry-run
show "$NETCTL" reconcile --socket "$TMP/run/netctl.sock"
show "$NETCTL" ipam leaks --state-dir "$TMP/state"
show "$NETCTL" journal --state-dir "$TMP/state" --pod tour/web-3
show env TZ=Europe/Paris "$NETCTL" journal --state-dir "$TMP/state" --namespace tour --local
show "$NETCTL" status --socket "$TMP/run/netctl.sock" --cni-conf-dir "$TMP/net.d" --json
TYPO_CONF="{\"cniVersion\": \"1.0.0\", \"name\": \"netctl\", \"type\": \"netctl-cni\",
 \"socket\": \"$TMP/run/netctl.sock\", \"clusterNetwork\": \"$TYPO\"}"
ip netns add ntour-db-1
cni ADD db-1 "$TYPO_CONF" || true
cni DEL db-1 "$TYPO_CONF" || true
echo
echo "# db-1's network $TYPO names master ntour-eht1, a link that does not exist: its ADD and"
echo "# then kubelet's DEL fail, and the attachment is stuck, holding an address of the pool"
show "$NETCTL" status --socket "$TMP/run/netctl.sock"
show "$NETCTL" forget --socket "$TMP/run/netctl.sock" --container tour-db-1
ip netns del ntour-db-1
echo
echo "# the runtime removed db-1's sandbox: the address is no one's any more"
show "$NETCTL" reconcile --socket "$TMP/run/netctl.sock"
show "$NETCTL" forget --socket "$TMP/run/netctl.sock" --container tour-db-1 \
    --why "NAD tour-typo names master ntour-eht1; fixed in the NAD"
show "$NETCTL" status --socket "$TMP/run/netctl.sock"
show "$NETCTL" journal --state-dir "$TMP/state" --container tour-db-1
echo
echo "\$ curl -s http://$METRICS/metrics | grep -v '^#' | grep -v ' 0.0\$'   # (excerpt)"
kit metrics "http://$METRICS/metrics"
echo
echo "\$ cat \$TOUR/daemon.log   # (logfmt)"
sed "s#$TMP#\$TOUR#g" "$TMP/daemon.log"

cni DEL web-1
ip netns del ntour-web-1
kill -TERM "$DAEMON_PID"
wait "$DAEMON_PID" || true
DAEMON_PID=""
echo
echo "# the daemon stopped (SIGTERM)"
show "$NETCTL" status --socket "$TMP/run/netctl.sock"
