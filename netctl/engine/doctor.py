"""``netctl doctor`` (docs/operating.md, "The doctor"): a runtime hands the netctl-cni entry
only the ``runtimeConfig`` values whose capabilities it declares, so one the cluster
network's plugins declare and the entry does not is lost. :func:`diagnose` decides, pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import msgspec

from netctl.cni.confdir import ConfFile, capabilities
from netctl.cni.config import Chain
from netctl.engine.choice import Resolver
from netctl.engine.conf import NetctlConf
from netctl.engine.networks import inline
from netctl.errors import CNIError

PLUGIN_TYPE = "netctl-cni"
NAMESPACE = "default"  # a bare network name is looked up as the daemon does for such a pod
OLD_RUNTIMES = ("containerd 1.x, CRI-O before 1.31 and podman before 5.2 (libcni older "
                "than v1.2.0)")
WHY = {
    "portMappings": "published ports (podman run -p, a pod's hostPort) silently do nothing",
    "bandwidth": "the pod's bandwidth limits are silently not applied",
    "ips": "requested addresses are silently ignored",
    "mac": "requested MAC addresses are silently ignored",
    "io.kubernetes.cri.pod-annotations": "the plugins never see the pod's annotations",
}


@dataclass(frozen=True)
class Finding:
    path: str
    kind: str
    message: str
    level: str = "warning"  # or "note": said, but no reason to fail
    details: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _wanted(chain: Chain) -> dict[str, list[str]]:
    """capability → the plugin types of ``chain`` that declare it."""
    out: dict[str, list[str]] = {}
    for plugin in chain.plugins:
        for cap in sorted(capabilities(plugin)):
            out.setdefault(cap, []).append(str(plugin.get("type")))
    return out


def _entries(conf: dict[str, Any]) -> list[dict[str, Any]]:
    """The netctl-cni entries of a conf or conflist, with the list's ``name`` and
    ``cniVersion`` as libcni gives them."""
    if "plugins" not in conf:
        return [conf] if conf.get("type") == PLUGIN_TYPE else []
    plugins = conf["plugins"] if isinstance(conf["plugins"], list) else []
    return [{**p, "name": conf.get("name"), "cniVersion": conf.get("cniVersion")}
            for p in plugins if isinstance(p, dict) and p.get("type") == PLUGIN_TYPE]


def _check_entry(path: str, entry: dict[str, Any], networks: Resolver) -> list[Finding]:
    try:
        conf = msgspec.convert(entry, NetctlConf)
    except msgspec.ValidationError as exc:
        return [Finding(path, "invalid", f"{path}: the netctl-cni entry cannot be decoded: "
                        f"{exc}")]
    if not conf.delegates and not conf.clusterNetwork:
        return [Finding(path, "invalid", f"{path}: the netctl-cni entry names no network: "
                        "set 'clusterNetwork' or 'delegates' (every ADD is refused)")]
    found: list[Finding] = []
    refs: list[tuple[str, str | dict[str, Any]]] = []
    if conf.delegates:
        refs += [(f"delegates[{i}]", d) for i, d in enumerate(conf.delegates)]
    else:
        refs.append(("clusterNetwork", conf.clusterNetwork))
        refs += [(f"defaultNetworks[{i}]", r) for i, r in enumerate(conf.defaultNetworks)]
    declared = capabilities(entry)
    for i, (where, ref) in enumerate(refs):  # the first is the cluster network
        try:
            if isinstance(ref, dict):
                net = inline(ref, i)
                name = f"{where} ({net.chain.name})"
            else:
                net = networks.resolve(ref, NAMESPACE)
                name = f"{where} {net.key}"
        except CNIError as exc:
            found.append(Finding(path, "unknown-network", f"{path}: {where}: {exc.msg}",
                                 details={"network": where}))
            continue
        for cap, types in _wanted(net.chain).items():
            by = f"{', '.join(types)} of {name}"
            if i == 0 and cap not in declared:
                why = WHY.get(cap, f"the plugins never get runtimeConfig.{cap}")
                found.append(Finding(
                    path, "missing-capability",
                    f"{path}: capability {cap!r} is declared by {by} but not by the "
                    f"netctl-cni entry: the runtime drops runtimeConfig.{cap} before netctl "
                    f"sees it, so {why}; add \"capabilities\": {{\"{cap}\": true}} to the "
                    "netctl-cni entry", details={"capability": cap, "network": name}))
            elif i > 0:
                found.append(Finding(
                    path, "capability-not-passed",
                    f"{path}: capability {cap!r} is declared by {by}: netctl passes the "
                    "runtime's runtimeConfig to the cluster network only, so this network "
                    f"gets {cap} only from a pod's JSON network selection", level="note",
                    details={"capability": cap, "network": name}))
    return found


def diagnose(files: Sequence[ConfFile], networks: Resolver, conf_dir: str = "") -> list[Finding]:
    """Every finding about the runtime's conf files (see the module docstring)."""
    found: list[Finding] = []
    seen = False
    for f in files:
        if f.conf is None:
            found.append(Finding(f.path, "unreadable", f"{f.path}: {f.error}"))
            continue
        entries = _entries(f.conf)
        seen = seen or bool(entries)
        if entries and f.conf.get("cniVersion") == "1.1.0":
            found.append(Finding(
                f.path, "cni-version",
                f"{f.path}: cniVersion 1.1.0: {OLD_RUNTIMES} refuse its results (\"unsupported "
                "CNI result version\"); use 1.0.0 unless every runtime on the node accepts "
                "1.1.0 (it only adds GC and STATUS)"))
        for entry in entries:
            found.extend(_check_entry(f.path, entry, networks))
    if not seen:
        found.append(Finding(conf_dir, "no-netctl-conf", f"{conf_dir}: no conf or conflist "
                             f"has a {PLUGIN_TYPE} plugin: the runtime does not use netctl"))
    return found
