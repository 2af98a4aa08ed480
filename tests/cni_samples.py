"""Primary CNI configs shaped like the ones network plugins write into
``/etc/cni/net.d`` (their names, cniVersions, plugin chains and capabilities), for the
auto-config tests. Each: (file name, JSON object)."""

from __future__ import annotations

from typing import Any

CALICO: tuple[str, dict[str, Any]] = ("10-calico.conflist", {
    "name": "k8s-pod-network",
    "cniVersion": "0.3.1",
    "plugins": [
        {"type": "calico", "log_level": "info", "datastore_type": "kubernetes",
         "log_file_path": "/var/log/calico/cni/cni.log", "nodename": "node-1", "mtu": 0,
         "ipam": {"type": "calico-ipam"}, "policy": {"type": "k8s"},
         "kubernetes": {"kubeconfig": "/etc/cni/net.d/calico-kubeconfig"}},
        {"type": "portmap", "snat": True, "capabilities": {"portMappings": True}},
        {"type": "bandwidth", "capabilities": {"bandwidth": True}},
    ],
})

FLANNEL: tuple[str, dict[str, Any]] = ("10-flannel.conflist", {
    "name": "cbr0",
    "cniVersion": "0.3.1",
    "plugins": [
        {"type": "flannel", "delegate": {"hairpinMode": True, "isDefaultGateway": True}},
        {"type": "portmap", "capabilities": {"portMappings": True}},
    ],
})

CILIUM: tuple[str, dict[str, Any]] = ("05-cilium.conflist", {
    "cniVersion": "1.0.0",
    "name": "cilium",
    "plugins": [
        {"type": "cilium-cni", "enable-debug": False,
         "log-file": "/var/run/cilium/cilium-cni.log"},
    ],
})

# A single-plugin .conf (no "plugins" list), as ovn-kubernetes writes it.
OVN_CONF: tuple[str, dict[str, Any]] = ("10-ovn-kubernetes.conf", {
    "cniVersion": "0.4.0",
    "name": "ovn-kubernetes",
    "type": "ovn-k8s-cni-overlay",
    "ipam": {},
    "dns": {},
    "logFile": "/var/log/ovn-kubernetes/ovn-k8s-cni-overlay.log",
    "logLevel": "4",
})

# A primary that runs here: a bridge with host-local (the Debian plugins), port mappings.
BRIDGE: tuple[str, dict[str, Any]] = ("10-bridge.conflist", {
    "cniVersion": "1.0.0",
    "name": "nct-primary",
    "plugins": [
        {"type": "bridge", "bridge": "nctprim0", "isGateway": True, "ipMasq": False,
         "ipam": {"type": "host-local", "subnet": "10.182.0.0/24"}},
        {"type": "portmap", "capabilities": {"portMappings": True}},
    ],
})
