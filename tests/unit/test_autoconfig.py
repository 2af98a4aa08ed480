"""We test the pure decision of ``netctl install-cni --auto-config``
(:func:`netctl.cni.autoconfig.decide`) on conf dirs shaped like calico's, flannel's,
cilium's and ovn-kubernetes' (a single-plugin ``.conf``):

- the first file in load order after ``00-netctl.conflist`` becomes ``clusterNetwork``
  as its path; its cniVersion is carried over, and the capabilities of all its plugins
  land on the netctl-cni entry, with the pod-annotations capability netctl reads;
- netctl's own file and other netctl confs are passed over; only netctl's own (or
  nothing) → wait; a half-written first candidate → wait, naming it;
- a file that sorts before ``00-netctl.conflist`` (Multus' ``00-multus.conf``) and a
  primary netctl cannot run (cniVersion, name) are refused with the reason;
- the generated entry is what the daemon decodes (``NetctlConf``), its clusterNetwork
  resolves through the daemon's own lookup, and ``netctl doctor`` finds nothing to say;
- the writer's temporary name is one no runtime loads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from netctl.cni.autoconfig import (
    CONF_NAME,
    POD_ANNOTATIONS,
    Generated,
    Refused,
    Waiting,
    decide,
    render,
    tmp_name,
)
from netctl.cni.confdir import ConfFile, loaded, read_conf_dir
from netctl.engine.conf import NetctlConf
from netctl.engine.doctor import diagnose
from netctl.engine.networks import NetworkDir
from tests.cni_samples import CALICO, CILIUM, FLANNEL, OVN_CONF

SOCKET = "/run/netctl/netctl.sock"
D = "/etc/cni/net.d"


def files(*samples: tuple[str, dict[str, Any] | None]) -> list[ConfFile]:
    """ConfFiles as read_conf_dir gives them: sorted by name."""
    return [ConfFile(f"{D}/{name}", conf, "" if conf is not None else "is not valid JSON")
            for name, conf in sorted(samples, key=lambda s: s[0])]


def generated(decision: object) -> Generated:
    assert isinstance(decision, Generated), decision
    return decision


def entry(decision: Generated) -> dict[str, Any]:
    (plugin,) = decision.conflist["plugins"]
    assert isinstance(plugin, dict)
    return plugin


@pytest.mark.parametrize("sample, version, caps", [
    (CALICO, "0.3.1", {"portMappings", "bandwidth"}),
    (FLANNEL, "0.3.1", {"portMappings"}),
    (CILIUM, "1.0.0", set()),
    (OVN_CONF, "0.4.0", set()),
])
def test_the_primary_becomes_cluster_network(sample: tuple[str, dict[str, Any]], version: str,
                                             caps: set[str]) -> None:
    d = generated(decide(files(sample), SOCKET))
    assert d.primary == f"{D}/{sample[0]}"
    assert d.conflist == {
        "cniVersion": version, "name": "netctl",
        "plugins": [{"type": "netctl-cni", "socket": SOCKET, "clusterNetwork": d.primary,
                     "capabilities": {c: True for c in sorted(caps | {POD_ANNOTATIONS})}}]}
    assert json.loads(render(d.conflist)) == d.conflist


def test_first_in_load_order_wins_and_netctls_own_files_are_passed_over() -> None:
    own = generated(decide(files(FLANNEL), SOCKET)).conflist
    standalone = {"cniVersion": "1.0.0", "name": "netctl",
                  "plugins": [{"type": "netctl-cni", "clusterNetwork": "pod-net"}]}
    d = generated(decide(files((CONF_NAME, own), ("01-netctl-standalone.conflist", standalone),
                               CILIUM, CALICO, ("99-loopback.conf", {
                                   "cniVersion": "0.3.1", "name": "lo", "type": "loopback"})),
                         SOCKET))
    assert d.primary == f"{D}/05-cilium.conflist"
    assert d.skipped == ((f"{D}/01-netctl-standalone.conflist",
                          "a netctl config (netctl cannot be its own cluster network)"),)
    # regenerating over a dir that holds the result gives the same bytes
    again = decide(files((CONF_NAME, d.conflist), CILIUM, CALICO), SOCKET)
    assert render(generated(again).conflist) == render(d.conflist)


def test_capabilities_declared_false_or_malformed_are_not_carried() -> None:
    name, conf = FLANNEL
    conf = json.loads(json.dumps(conf))
    conf["plugins"][1]["capabilities"] = {"portMappings": False}
    conf["plugins"][0]["capabilities"] = ["bandwidth"]
    d = generated(decide(files((name, conf)), SOCKET))
    assert entry(d)["capabilities"] == {POD_ANNOTATIONS: True}


@pytest.mark.parametrize("present", [
    [],
    [(CONF_NAME, {"cniVersion": "0.3.1", "name": "netctl", "plugins": [
        {"type": "netctl-cni", "clusterNetwork": f"{D}/10-gone.conflist"}]})],
])
def test_nothing_but_netctl_means_wait(present: list[tuple[str, dict[str, Any]]]) -> None:
    d = decide(files(*present), SOCKET)
    assert isinstance(d, Waiting) and "no primary CNI config yet" in d.reason


def test_a_half_written_first_candidate_means_wait_not_the_next_one() -> None:
    d = decide(files(("10-calico.conflist", None), FLANNEL), SOCKET)
    assert isinstance(d, Waiting)
    assert d.reason.startswith(f"{D}/10-calico.conflist is not valid JSON")


def test_a_file_sorting_before_netctls_is_refused() -> None:
    multus = {"cniVersion": "0.3.1", "name": "multus-cni-network", "type": "multus-shim"}
    d = decide(files(("00-multus.conf", multus), CALICO), SOCKET)
    assert isinstance(d, Refused)
    assert d.reason.startswith(f"{D}/00-multus.conf sorts before {CONF_NAME}")
    assert "uninstall Multus" in d.reason
    d = decide(files((".hidden.conf", None), CALICO), SOCKET)  # libcni loads hidden files
    assert isinstance(d, Refused) and ".hidden.conf sorts before" in d.reason


@pytest.mark.parametrize("change, says", [
    ({"cniVersion": "0.2.0"}, "cniVersion 0.2.0 is not supported"),
    ({"cniVersion": None}, "'cniVersion' is missing"),
    ({"name": ""}, "'name' is missing"),
    ({"plugins": []}, "'plugins' must be a non-empty list"),
])
def test_a_primary_netctl_cannot_run_is_refused(change: dict[str, Any], says: str) -> None:
    name, conf = CALICO
    conf = {k: v for k, v in {**conf, **change}.items() if v is not None}
    d = decide(files((name, conf)), SOCKET)
    assert isinstance(d, Refused), d
    assert says in d.reason and f"{D}/{name}" in d.reason


def test_the_daemon_accepts_what_is_generated(tmp_path: Path) -> None:
    """Decoded as the daemon decodes its config; clusterNetwork resolved by the daemon's
    lookup (a path); ``netctl doctor`` over the dir: nothing to warn about."""
    for name, conf in (CALICO, FLANNEL):
        (tmp_path / name).write_text(json.dumps(conf))
    d = generated(decide(read_conf_dir(str(tmp_path)), SOCKET))
    (tmp_path / CONF_NAME).write_bytes(render(d.conflist))
    plugin = {**entry(d), "name": d.conflist["name"], "cniVersion": d.conflist["cniVersion"]}
    conf = msgspec.convert(plugin, NetctlConf)
    assert conf.clusterNetwork == str(tmp_path / CALICO[0]) and conf.socket == SOCKET
    net = NetworkDir(str(tmp_path / "no-networks")).resolve(conf.clusterNetwork, "default")
    assert net.chain.name == "k8s-pod-network" and net.chain.types == [
        "calico", "portmap", "bandwidth"]
    assert diagnose(read_conf_dir(str(tmp_path)), NetworkDir(str(tmp_path / "none")),
                    str(tmp_path)) == []


def test_the_temporary_name_is_never_loaded() -> None:
    assert not loaded(tmp_name(4242)) and tmp_name(4242).startswith(".")
    assert loaded(CONF_NAME)


def test_replace_multus_takes_its_place_and_nothing_else() -> None:
    """With ``replace_multus``, Multus' configs in front (its thin or thick type, a conf or
    a conflist) are to be renamed away and the primary is the next file; any other file in
    front is still refused."""
    shim = {"cniVersion": "0.3.1", "name": "multus-cni-network", "type": "multus-shim"}
    thin = {"cniVersion": "0.3.1", "name": "multus", "plugins": [{"type": "multus"}]}
    d = decide(files(("00-multus.conf", shim), ("00-m2.conflist", thin), CALICO), SOCKET,
               replace_multus=True)
    assert isinstance(d, Generated) and d.primary == f"{D}/{CALICO[0]}"
    assert d.replaces == (f"{D}/00-m2.conflist", f"{D}/00-multus.conf")
    refused = decide(files(("00-multus.conf", shim), CALICO), SOCKET)
    assert isinstance(refused, Refused) and "--replace-multus" in refused.reason
    other = decide(files(("00-aaa.conf", CALICO[1]), CALICO), SOCKET, replace_multus=True)
    assert isinstance(other, Refused) and "00-aaa.conf sorts before" in other.reason
    assert decide(files(CALICO), SOCKET, replace_multus=True).replaces == ()  # type: ignore[union-attr]
