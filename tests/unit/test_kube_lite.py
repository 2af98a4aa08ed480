"""``kubectl netctl``'s light client: which kubeconfigs it reads itself (no
kubernetes-asyncio), what it takes from them, and which it leaves to the full client."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from netctl.kube.client.errors import KubeSettings
from netctl.kube.client.lite import lite


def kubeconfig(tmp_path: Path, user: dict[str, Any], cluster: dict[str, Any] | None = None,
               name: str = "config") -> str:
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
           "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
           "clusters": [{"name": "k", "cluster": cluster or {
               "server": "https://api.example:6443", "insecure-skip-tls-verify": True}}],
           "users": [{"name": "u", "user": user}]}
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_a_token_or_a_token_file_is_read_here(tmp_path: Path) -> None:
    api = lite(KubeSettings(kubeconfig(tmp_path, {"token": "abc"})))
    assert api is not None and api.authorization == "Bearer abc"
    e = api.wire.endpoint
    assert (e.host, e.port, e.tls is not None) == ("api.example", 6443, True)
    (tmp_path / "tok").write_text("from-file\n")  # relative to the kubeconfig's directory
    api = lite(KubeSettings(kubeconfig(tmp_path, {"tokenFile": "tok"}, name="c2")))
    assert api is not None and api.authorization == "Bearer from-file"


@pytest.mark.parametrize("user", [
    {"exec": {"command": "aws", "apiVersion": "client.authentication.k8s.io/v1"}},
    {"auth-provider": {"name": "oidc"}},
    {"username": "u", "password": "p"},
])
def test_other_credentials_are_left_to_the_full_client(tmp_path: Path,
                                                       user: dict[str, Any]) -> None:
    assert lite(KubeSettings(kubeconfig(tmp_path, user))) is None


def test_a_proxy_several_files_or_in_cluster_are_left_to_the_full_client(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = kubeconfig(tmp_path, {"token": "t"}, {"server": "https://a:1",
                                                   "proxy-url": "http://p:3128"})
    assert lite(KubeSettings(path)) is None
    plain = kubeconfig(tmp_path, {"token": "t"}, name="plain")
    assert lite(KubeSettings(in_cluster=True)) is None
    monkeypatch.setenv("KUBECONFIG", f"{plain}:{path}")
    assert lite(KubeSettings()) is None
    monkeypatch.setenv("KUBECONFIG", plain)
    assert lite(KubeSettings()) is not None
    monkeypatch.setenv("HTTPS_PROXY", "http://p:3128")
    assert lite(KubeSettings(plain)) is None


def test_client_certificate_data_is_loaded(tmp_path: Path) -> None:
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days",
                    "1", "-subj", "/CN=netctl-test", "-keyout", str(tmp_path / "k.pem"),
                    "-out", str(tmp_path / "c.pem")], check=True, capture_output=True)
    user = {"client-certificate-data": base64.b64encode(
                (tmp_path / "c.pem").read_bytes()).decode(),
            "client-key-data": base64.b64encode((tmp_path / "k.pem").read_bytes()).decode()}
    cluster = {"server": "https://10.0.0.1:6443", "certificate-authority": "c.pem"}
    api = lite(KubeSettings(kubeconfig(tmp_path, user, cluster)))
    assert api is not None and api.authorization == ""  # no token: the daemons need one
    assert api.wire.endpoint.tls is not None


def test_no_kubeconfig_is_none(tmp_path: Path) -> None:
    assert lite(KubeSettings(str(tmp_path / "missing"))) is None
