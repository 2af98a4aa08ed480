"""The real API server's launcher (:mod:`netctl.kit.kubefake.real`) says what is missing and how
to provide it, so a clone without ``../shared`` skips the real-server runs with that line."""

from __future__ import annotations

from pathlib import Path

import pytest

from netctl.kit.kubefake import real


def test_a_missing_kube_apiserver_is_named_with_how_to_provide_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("NETCTL_KUBE_APISERVER", str(tmp_path / "nowhere.gz"))
    reason = real.unavailable()
    assert reason is not None
    assert str(tmp_path / "nowhere.gz") in reason and "NETCTL_KUBE_APISERVER" in reason


def test_a_missing_etcd_is_named_with_how_to_provide_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    apiserver = tmp_path / "kube-apiserver"
    apiserver.write_bytes(b"")
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
