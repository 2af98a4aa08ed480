"""The real API server's launcher (:mod:`netctl_kit.kubefake.real`) and the finder of the real
binaries (:mod:`netctl_kit.kubebins`) say what is missing and where they looked, so a machine
without them skips the real-server and real-node runs with that line; the versions found are
told apart and chosen as ``NETCTL_KUBE_VERSIONS`` says."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from netctl_kit import kubebins, realnode
from netctl_kit.kubefake import real


def fake_version(root: Path, version: str, names: tuple[str, ...] = kubebins.NODE_BINARIES
                 ) -> Path:
    """A version's directory with executables by those names (never run: found only)."""
    d = root / version
    d.mkdir(parents=True)
    for name in names:
        (d / name).write_text("#!/bin/sh\nexit 1\n")
        (d / name).chmod(0o755)
    return d


@pytest.fixture
def kube_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for var in ("NETCTL_KUBE_DIR", "NETCTL_KUBE_VERSIONS", "NETCTL_KUBE_APISERVER"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NETCTL_KUBE_ROOT", str(tmp_path / "kube"))
    return tmp_path / "kube"


def test_no_binaries_is_one_line_naming_where_they_were_looked_for(kube_root: Path) -> None:
    reason = kubebins.missing()
    assert str(kube_root) in reason and "NETCTL_KUBE_ROOT" in reason
    assert "docs/testing.md" in reason and "\n" not in reason
    assert realnode.versions() == [None]
    assert realnode.unavailable() == reason
    assert real.unavailable() == kubebins.missing(names=kubebins.SERVER_BINARIES)


def test_versions_are_found_by_directory_and_ordered_by_number(
        kube_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_version(kube_root, "v1.36.2")
    fake_version(kube_root, "v1.9.1")
    fake_version(kube_root, "v1.24.0")
    (kube_root / "notes").mkdir()  # not a version: ignored
    fake_version(kube_root, "v1.30.0", names=())  # no kube-apiserver: not a version here
    assert [v.version for v in kubebins.found()] == ["v1.9.1", "v1.24.0", "v1.36.2"]
    newest = kubebins.pick()
    assert newest is not None and newest.version == "v1.36.2" and newest.minor == 36
    assert real.apiserver_binary() == kube_root / "v1.36.2" / "kube-apiserver"
    assert [str(v) for v in realnode.versions()] == ["v1.36.2"]  # the newest, by default
    monkeypatch.setenv("NETCTL_KUBE_VERSIONS", "all")
    assert [str(v) for v in realnode.versions()] == ["v1.9.1", "v1.24.0", "v1.36.2"]


@pytest.mark.parametrize(("want", "chosen"), [
    ("all", ["v1.24.0", "v1.36.2"]), ("newest", ["v1.36.2"]), ("v1.24", ["v1.24.0"]),
    ("v1.36.2", ["v1.36.2"]), ("v1.3", []), ("v1.24.0, v1.36", ["v1.24.0", "v1.36.2"]),
])
def test_netctl_kube_versions_chooses_among_them(
        kube_root: Path, monkeypatch: pytest.MonkeyPatch, want: str, chosen: list[str]) -> None:
    fake_version(kube_root, "v1.24.0")
    fake_version(kube_root, "v1.36.2")
    monkeypatch.setenv("NETCTL_KUBE_VERSIONS", want)
    assert [v.version for v in kubebins.selected()] == chosen


def test_a_minimum_version_or_a_lacking_binary_is_said(
        kube_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_version(kube_root, "v1.24.0")
    fake_version(kube_root, "v1.36.2", names=("kube-apiserver", "kubectl"))
    monkeypatch.setenv("NETCTL_KUBE_VERSIONS", "all")
    assert kubebins.pick(min_minor=34) is None
    reason = kubebins.missing(min_minor=34)
    assert "v1.34+" in reason and "v1.36.2 (lacks kube-controller-manager, kube-scheduler, " \
        "kubelet)" in reason and "v1.24.0" in reason
    node, server = kubebins.pick(), kubebins.pick(names=kubebins.SERVER_BINARIES)
    assert node is not None and node.version == "v1.24.0"
    assert server is not None and server.version == "v1.36.2"
    assert [str(v) for v in realnode.versions()] == ["v1.24.0"]


def test_netctl_kube_dir_is_one_version_read_from_its_apiserver(
        kube_root: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    d = tmp_path / "mine"
    d.mkdir()
    apiserver = d / "kube-apiserver"
    apiserver.write_text("#!/bin/sh\necho 'Kubernetes v1.31.4'\n")
    apiserver.chmod(0o755)
    fake_version(kube_root, "v1.36.2")  # not looked at: NETCTL_KUBE_DIR names the one
    monkeypatch.setenv("NETCTL_KUBE_DIR", str(d))
    assert [(v.version, v.dir) for v in kubebins.found()] == [("v1.31.4", d)]
    assert "NETCTL_KUBE_DIR" in kubebins.missing()  # it lacks the node's binaries


def test_a_missing_kube_apiserver_is_named_with_how_to_provide_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("NETCTL_KUBE_APISERVER", str(tmp_path / "nowhere"))
    reason = real.unavailable()
    assert reason is not None
    assert str(tmp_path / "nowhere") in reason and "NETCTL_KUBE_APISERVER" in reason


def test_a_missing_etcd_is_named_with_how_to_provide_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    apiserver = tmp_path / "kube-apiserver"
    apiserver.write_bytes(b"")
    apiserver.chmod(0o755)
    monkeypatch.setenv("NETCTL_KUBE_APISERVER", str(apiserver))
    monkeypatch.setenv("NETCTL_ETCD", str(tmp_path / "no-etcd"))
    reason = real.unavailable()
    assert reason is not None and "etcd" in reason and "make setup" in reason


def test_the_paths_of_a_resource_are_the_api_servers() -> None:
    kube = real.RealKube.__new__(real.RealKube)  # no server: the path maths only
    kube.registry = real.Registry([*real.BUILTIN, real.IPAMBLOCKS])
    pods = kube.registry.named("pods")
    nads = kube.registry.named("network-attachment-definitions")
    blocks = kube.registry.named("ipamblocks")
    assert kube.path(pods, "default", "p", "status") == "/api/v1/namespaces/default/pods/p/status"
    assert kube.path(pods, None) == "/api/v1/pods"
    assert kube.path(nads, "kube-system") == \
        "/apis/k8s.cni.cncf.io/v1/namespaces/kube-system/network-attachment-definitions"
    assert kube.path(blocks, "ignored", "b") == "/apis/ipam.netctl.dev/v1/ipamblocks/b"


def test_one_real_cluster_at_a_time_on_a_machine(kube_root: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A second cluster's lock is refused at once, naming the holder (each has the node
    network 10.216.0.0/24); taken once freed."""
    monkeypatch.setattr(realnode, "LOCK", tmp_path / "lock")
    version = kubebins.KubeVersion((1, 36, 2), "v1.36.2", fake_version(kube_root, "v1.36.2"))
    first = realnode.ControlPlane(version, "nrcaaa")
    second = realnode.ControlPlane(version, "nrcbbb")
    try:
        first._lock()
        with pytest.raises(realnode.NodeError, match=r"another real cluster runs on this "
                           rf"machine \(pid {os.getpid()}, links nrcaaa\*;"):
            second._lock()
        first.close()
        second._lock()
    finally:
        first.close()
        second.close()
