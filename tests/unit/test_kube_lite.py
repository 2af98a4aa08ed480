"""The configuration netctl reads itself (:func:`~netctl.kubeapi.lite.netctl_access`): which
kubeconfigs and in-cluster accounts it reads (no kubernetes-asyncio, no aiohttp), what it
takes from them (a proxy too), which it leaves to kubernetes-asyncio's loaders; its token
read again on a 401 and by age; and a daemon's connection that loads neither library for
such a configuration (in a fresh interpreter), and the loaders for the others."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from netctl.kubeapi.errors import KubeSettings
from netctl.kubeapi.lite import TOKEN_REREAD, in_cluster, netctl_access


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
    config = netctl_access(KubeSettings(kubeconfig(tmp_path, {"token": "abc"})))
    assert config is not None and config.credentials.authorization == "Bearer abc"
    e = config.endpoint
    assert (e.host, e.port, e.tls is not None, e.proxy) == ("api.example", 6443, True, None)
    (tmp_path / "tok").write_text("from-file\n")  # relative to the kubeconfig's directory
    config = netctl_access(KubeSettings(kubeconfig(tmp_path, {"tokenFile": "tok"}, name="c2")))
    assert config is not None and config.credentials.authorization == "Bearer from-file"


@pytest.mark.parametrize("user", [
    {"exec": {"command": "aws", "apiVersion": "client.authentication.k8s.io/v1"}},
    {"auth-provider": {"name": "oidc"}},
    {"username": "u", "password": "p"},
])
def test_other_credentials_are_left_to_the_loaders(tmp_path: Path,
                                                   user: dict[str, Any]) -> None:
    assert netctl_access(KubeSettings(kubeconfig(tmp_path, user))) is None


def test_proxies_are_read_here_several_files_are_left_to_the_loaders(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    path = kubeconfig(tmp_path, {"token": "t"}, {"server": "https://a:1",
                                                   "proxy-url": "http://u:p@p:3128"})
    config = netctl_access(KubeSettings(path))
    assert config is not None and config.endpoint.proxy is not None
    assert config.endpoint.proxy.url == "http://p:3128"
    assert dict(config.endpoint.proxy.headers) == {"Proxy-Authorization": "Basic dTpw"}
    socks = kubeconfig(tmp_path, {"token": "t"}, {"server": "https://a:1",
                                                    "proxy-url": "socks5://p:1080"},
                       name="socks")
    assert netctl_access(KubeSettings(socks)) is None
    plain = kubeconfig(tmp_path, {"token": "t"}, name="plain")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert netctl_access(KubeSettings(in_cluster=True)) is None  # no server named
    monkeypatch.setenv("KUBECONFIG", f"{plain}:{path}")
    assert netctl_access(KubeSettings()) is None
    monkeypatch.setenv("KUBECONFIG", plain)
    found = netctl_access(KubeSettings())
    assert found is not None and found.endpoint.proxy is None
    monkeypatch.setenv("HTTPS_PROXY", "http://p:3128")
    found = netctl_access(KubeSettings(plain))
    assert found is not None and found.endpoint.proxy is not None
    assert found.endpoint.proxy.url == "http://p:3128"


def test_client_certificate_data_is_loaded(tmp_path: Path) -> None:
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days",
                    "1", "-subj", "/CN=netctl-test", "-keyout", str(tmp_path / "k.pem"),
                    "-out", str(tmp_path / "c.pem")], check=True, capture_output=True)
    user = {"client-certificate-data": base64.b64encode(
                (tmp_path / "c.pem").read_bytes()).decode(),
            "client-key-data": base64.b64encode((tmp_path / "k.pem").read_bytes()).decode()}
    cluster = {"server": "https://10.0.0.1:6443", "certificate-authority": "c.pem"}
    config = netctl_access(KubeSettings(kubeconfig(tmp_path, user, cluster)))
    assert config is not None and config.credentials.authorization == ""  # no token
    assert config.endpoint.tls is not None


def test_no_kubeconfig_is_none(tmp_path: Path) -> None:
    assert netctl_access(KubeSettings(str(tmp_path / "missing"))) is None


def test_a_netrc_entry_for_the_server_is_read_here(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = kubeconfig(tmp_path, {"token": "t"})
    (tmp_path / "netrc").write_text("machine api.example login joe password secret\n")
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    config = netctl_access(KubeSettings(path))
    assert config is not None and config.basic == "Basic am9lOnNlY3JldA=="
    (tmp_path / "netrc").write_text("machine elsewhere login joe password secret\n")
    config = netctl_access(KubeSettings(path))
    assert config is not None and config.basic == ""


def test_in_cluster_reads_the_service_account(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days",
                    "1", "-subj", "/CN=netctl-test", "-keyout", str(tmp_path / "k.pem"),
                    "-out", str(tmp_path / "ca.crt")], check=True, capture_output=True)
    (tmp_path / "token").write_text("first\n")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    config = in_cluster(tmp_path)
    assert config is not None and config.host == "https://[fd00::1]:443"
    assert (config.endpoint.host, config.endpoint.port) == ("fd00::1", 443)
    assert config.credentials.header() == {"Authorization": "Bearer first"}
    # the token rotates: read again on a 401 (reload), and once it is old
    (tmp_path / "token").write_text("second\n")
    assert config.credentials.header() == {"Authorization": "Bearer first"}  # still young
    config.credentials.read_at = time.monotonic() - TOKEN_REREAD - 1
    assert config.credentials.header() == {"Authorization": "Bearer second"}
    (tmp_path / "token").write_text("third\n")
    config.credentials.reload()
    assert config.credentials.authorization == "Bearer third"
    (tmp_path / "token").unlink()  # unreadable: the old token stays (the 401 tells)
    config.credentials.reload()
    assert config.credentials.authorization == "Bearer third"
    (tmp_path / "ca.crt").unlink()
    assert in_cluster(tmp_path) is None  # the loader says what is missing


def test_a_kubeconfigs_new_token_is_read_on_reload(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path, {"token": "old"})
    config = netctl_access(KubeSettings(path))
    assert config is not None and config.credentials.authorization == "Bearer old"
    kubeconfig(tmp_path, {"token": "new"})  # rewritten in place
    config.credentials.reload()
    assert config.credentials.authorization == "Bearer new"


CONNECT = """
import json, sys, trio, trio_asyncio
from netctl.kubeapi.api import Api, KubeSettings

async def main():
    async with trio_asyncio.open_loop():
        api = await Api.connect(KubeSettings(kubeconfig=sys.argv[1]))
        out = {"full": api.full}
        await api.close()
    out["loaded"] = sorted({m.split(".")[0] for m in sys.modules}
                           & {"kubernetes_asyncio", "aiohttp", "yarl"})
    print(json.dumps(out))

trio.run(main)
"""


@pytest.mark.parametrize("user, full", [
    ({"token": "t"}, False),
    ({"exec": {"command": "CREDENTIAL", "apiVersion": "client.authentication.k8s.io/v1"}},
     True),
])
def test_a_daemons_connection_loads_the_full_client_only_when_needed(
        tmp_path: Path, user: dict[str, Any], full: bool) -> None:
    credential = tmp_path / "credential"  # an exec credential plugin: prints a token
    credential.write_text("#!/bin/sh\necho '{\"apiVersion\": \"client.authentication.k8s.io/v1\", "
                          "\"kind\": \"ExecCredential\", \"status\": {\"token\": \"x\"}}'\n")
    credential.chmod(0o755)
    if "exec" in user:
        user = {"exec": {**user["exec"], "command": str(credential)}}
    path = kubeconfig(tmp_path, user, {"server": "http://127.0.0.1:9"})
    done = subprocess.run([sys.executable, "-c", CONNECT, path], capture_output=True,
                          text=True, timeout=120, check=True)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["full"] is full
    assert out["loaded"] == (["aiohttp", "kubernetes_asyncio", "yarl"] if full else [])
