"""We test these aspects of ``netctl doctor`` (:mod:`netctl.engine.doctor`) on temporary
CNI conf dirs and networks dirs, the decision pure, the command through ``cli.main``:

- a cluster network whose portmap declares ``portMappings`` and a netctl-cni entry that
  does not: a warning naming the capability, the plugin, the network and the fix; the
  same for an inline first delegate; declared: nothing; ``false`` counts as undeclared;
- a default network's capability is a note (netctl passes the runtime's values to the
  cluster network only), not a warning;
- a netctl conf (conflist or single conf) at cniVersion 1.1.0: a warning; a foreign
  conflist at 1.1.0: nothing;
- an unknown network, an entry that names no network, a file that is not JSON, a dir
  with no netctl conf: warnings;
- ``deploy/netctl.conflist`` with ``deploy/pod-net.yaml`` has no finding at all;
- the command: exit 1 with warnings (0 with notes alone), ``--json`` one document, a
  missing conf dir exits 1 naming it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from netctl.cni.confdir import ConfFile, read_conf_dir
from netctl.commands import cli
from netctl.engine.doctor import Finding, diagnose
from netctl.engine.networks import NetworkDir

REPO = Path(__file__).resolve().parents[2]
ALL_CAPS = {"portMappings": True, "ips": True, "mac": True, "bandwidth": True,
            "io.kubernetes.cri.pod-annotations": True}


def nad(netdir: Path, name: str, plugins: list[dict[str, Any]]) -> None:
    config = json.dumps({"cniVersion": "1.0.0", "name": name, "plugins": plugins})
    (netdir / f"{name}.json").write_text(json.dumps({
        "apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": name}, "spec": {"config": config}}))


BRIDGE = {"type": "bridge", "bridge": "br-x", "ipam": {"type": "netctl-ipam",
                                                      "range": "10.9.0.0/24"}}
PORTMAP = {"type": "portmap", "capabilities": {"portMappings": True}}
BANDWIDTH = {"type": "bandwidth", "capabilities": {"bandwidth": True}}


@pytest.fixture
def netdir(tmp_path: Path) -> NetworkDir:
    d = tmp_path / "networks.d"
    d.mkdir()
    nad(d, "pod-net", [BRIDGE, PORTMAP])
    nad(d, "plain", [BRIDGE])
    nad(d, "shaped", [BRIDGE, BANDWIDTH, PORTMAP])
    return NetworkDir(str(d))


def conflist(version: str = "1.0.0", **entry: Any) -> dict[str, Any]:
    return {"cniVersion": version, "name": "netctl", "plugins": [
        {"type": "netctl-cni", "socket": "/run/netctl/netctl.sock", **entry}]}


def kinds(found: list[Finding]) -> list[tuple[str, str, str]]:
    return [(f.kind, f.level, f.details.get("capability", "")) for f in found]


def test_cluster_capability_not_declared(netdir: NetworkDir) -> None:
    found = diagnose([ConfFile("/n/10-netctl.conflist", conflist(clusterNetwork="pod-net"))],
                     netdir)
    assert kinds(found) == [("missing-capability", "warning", "portMappings")]
    msg = found[0].message
    assert msg.startswith("/n/10-netctl.conflist: capability 'portMappings' is declared by "
                          "portmap of clusterNetwork default/pod-net but not by the netctl-cni "
                          "entry")
    assert "published ports" in msg and '"capabilities": {"portMappings": true}' in msg
    assert found[0].details["network"] == "clusterNetwork default/pod-net"


def test_declared_capabilities_are_quiet(netdir: NetworkDir) -> None:
    ok = conflist(clusterNetwork="shaped", capabilities=ALL_CAPS)
    assert diagnose([ConfFile("/n/a.conflist", ok)], netdir) == []
    half = conflist(clusterNetwork="shaped",
                    capabilities={"portMappings": True, "bandwidth": False})
    assert kinds(diagnose([ConfFile("/n/a.conflist", half)], netdir)) == [
        ("missing-capability", "warning", "bandwidth")]


def test_default_networks_capabilities_are_notes(netdir: NetworkDir) -> None:
    conf = conflist(clusterNetwork="plain", defaultNetworks=["pod-net"],
                    capabilities={"portMappings": True})
    found = diagnose([ConfFile("/n/a.conflist", conf)], netdir)
    assert kinds(found) == [("capability-not-passed", "note", "portMappings")]
    assert "defaultNetworks[0] default/pod-net" in found[0].message
    assert "cluster network only" in found[0].message


def test_inline_delegates(netdir: NetworkDir) -> None:
    first = {"cniVersion": "1.0.0", "name": "inl", "plugins": [BRIDGE, PORTMAP]}
    second = {"cniVersion": "1.0.0", "name": "inl2", "plugins": [BRIDGE, BANDWIDTH]}
    found = diagnose([ConfFile("/n/a.conflist", conflist(delegates=[first, second]))], netdir)
    assert kinds(found) == [("missing-capability", "warning", "portMappings"),
                            ("capability-not-passed", "note", "bandwidth")]
    assert "delegates[0] (inl)" in found[0].message


def test_cni_version_1_1_0(netdir: NetworkDir) -> None:
    newer = conflist("1.1.0", clusterNetwork="plain")
    single = {"cniVersion": "1.1.0", "name": "netctl", "type": "netctl-cni",
              "clusterNetwork": "plain"}
    foreign = {"cniVersion": "1.1.0", "name": "podman", "plugins": [BRIDGE]}
    found = diagnose([ConfFile("/n/a.conflist", newer), ConfFile("/n/b.conf", single),
                      ConfFile("/n/c.conflist", foreign)], netdir)
    assert [(f.path, f.kind) for f in found] == [("/n/a.conflist", "cni-version"),
                                                 ("/n/b.conf", "cni-version")]
    assert "unsupported CNI result version" in found[0].message
    assert "use 1.0.0" in found[0].message


def test_what_cannot_be_checked(netdir: NetworkDir) -> None:
    files = [ConfFile("/n/a.conflist", conflist(clusterNetwork="nosuch")),
             ConfFile("/n/b.conflist", conflist()),
             ConfFile("/n/c.conflist", conflist(clusterNetwork=["not", "a", "name"])),
             ConfFile("/n/d.conf", None, "is not valid JSON: truncated")]
    found = diagnose(files, netdir)
    assert [(f.path, f.kind) for f in found] == [
        ("/n/a.conflist", "unknown-network"), ("/n/b.conflist", "invalid"),
        ("/n/c.conflist", "invalid"), ("/n/d.conf", "unreadable")]
    assert "network 'nosuch' not found" in found[0].message
    assert "names no network" in found[1].message


def test_no_netctl_conf(netdir: NetworkDir) -> None:
    foreign = {"cniVersion": "1.0.0", "name": "podman", "plugins": [BRIDGE, PORTMAP]}
    found = diagnose([ConfFile("/n/87-podman.conflist", foreign)], netdir, "/n")
    assert [(f.path, f.kind, f.level) for f in found] == [("/n", "no-netctl-conf", "warning")]


def test_the_deploy_examples_are_clean(tmp_path: Path) -> None:
    conf_dir, nets = tmp_path / "net.d", tmp_path / "networks.d"
    conf_dir.mkdir()
    nets.mkdir()
    shutil.copy(REPO / "deploy" / "netctl.conflist", conf_dir / "10-netctl.conflist")
    shutil.copy(REPO / "deploy" / "pod-net.yaml", nets / "pod-net.yaml")
    assert diagnose(read_conf_dir(str(conf_dir)), NetworkDir(str(nets)), str(conf_dir)) == []


def test_read_conf_dir(tmp_path: Path) -> None:
    (tmp_path / "10-a.conflist").write_text(json.dumps(conflist(clusterNetwork="x")))
    (tmp_path / "20-b.conf").write_text("{")
    (tmp_path / "30-c.json").write_text("[]")
    (tmp_path / "README").write_text("not a conf")
    (tmp_path / "40-d.conf").mkdir()
    files = read_conf_dir(str(tmp_path))
    assert [(Path(f.path).name, f.conf is not None) for f in files] == [
        ("10-a.conflist", True), ("20-b.conf", False), ("30-c.json", False)]
    assert "not valid JSON" in files[1].error and "not a JSON object" in files[2].error
    missing = tmp_path / "missing"
    with pytest.raises(FileNotFoundError, match=f"no CNI config dir at {missing}"):
        read_conf_dir(str(missing))


def doctor(capsys: pytest.CaptureFixture[str], conf_dir: Path, nets: Path,
           *extra: str) -> tuple[int, str, str]:
    code = cli.main(["doctor", "--cni-conf-dir", str(conf_dir), "--networks-dir", str(nets),
                     *extra])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_command(tmp_path: Path, netdir: NetworkDir,
                     capsys: pytest.CaptureFixture[str]) -> None:
    conf_dir, nets = tmp_path / "net.d", Path(netdir.directory)
    conf_dir.mkdir()
    path = conf_dir / "10-netctl.conflist"
    path.write_text(json.dumps(conflist(clusterNetwork="pod-net")))
    code, out, _ = doctor(capsys, conf_dir, nets)
    assert code == 1
    assert out.splitlines()[0].startswith(f"warning: {path}: capability 'portMappings'")
    assert out.splitlines()[-1] == f"1 warning in {conf_dir} (networks from {nets})"
    code, out, _ = doctor(capsys, conf_dir, nets, "--json")
    report = json.loads(out)
    assert code == 1 and report["cni_conf_dir"] == str(conf_dir)
    assert [(f["kind"], f["level"], f["path"]) for f in report["findings"]] == [
        ("missing-capability", "warning", str(path))]

    path.write_text(json.dumps(conflist(clusterNetwork="plain", defaultNetworks=["pod-net"])))
    code, out, _ = doctor(capsys, conf_dir, nets)  # a note alone does not fail
    assert code == 0 and out.startswith("note: ") and "0 warnings" in out

    code, out, err = doctor(capsys, tmp_path / "absent", nets)
    assert code == 1 and out == "" and "no CNI config dir at" in err
