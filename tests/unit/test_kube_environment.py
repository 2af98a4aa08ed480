"""We test that the API client reads the environment once (:func:`environment_read_once`):
the proxy the environment names for the API server becomes the client's own proxy
setting, ``NO_PROXY`` is honoured, the aiohttp session stops looking at the environment
on every request, and a ``.netrc`` entry for the API server's host leaves the session as
kubernetes-asyncio made it. netctl's own HTTP (:mod:`netctl.kube.client.wire`) carries the calls
only when neither a proxy nor a ``.netrc`` entry applies. Each case runs in a fresh
interpreter with its own environment (a proxy setting is read when the client is made)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """
import json
import trio, trio_asyncio
from netctl.kube.client.api import Api, KubeSettings
from netctl.kube.client.session import client

async def main():
    async with trio_asyncio.open_loop():
        async def make():
            conf = client.Configuration()
            conf.host = "https://api.example.test:6443"
            return client.ApiClient(configuration=conf)
        api = Api(await trio_asyncio.aio_as_trio(make)(), KubeSettings())
        rest = api._api.rest_client
        print(json.dumps({"proxy": rest.proxy, "headers": rest.proxy_headers,
                          "trust_env": rest.pool_manager.trust_env,
                          "wire": api.wire is not None}))
        await api.close()

trio.run(main)
"""


def run(env: dict[str, str]) -> dict[str, object]:
    clean = {k: v for k, v in os.environ.items()
             if k.lower() not in ("https_proxy", "http_proxy", "no_proxy", "netrc")}
    out = subprocess.run([sys.executable, "-c", SCRIPT], env={**clean, **env},
                         capture_output=True, text=True, timeout=60, check=True)
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_no_proxy_in_the_environment_and_the_session_stops_looking(tmp_path: Path) -> None:
    assert run({"NETRC": str(tmp_path / "none")}) == {
        "proxy": None, "headers": None, "trust_env": False, "wire": True}


def test_the_environments_proxy_is_read_once_with_its_credentials(tmp_path: Path) -> None:
    got = run({"HTTPS_PROXY": "http://joe:secret@proxy.example.test:3128",
               "NETRC": str(tmp_path / "none")})
    assert got["proxy"] == "http://proxy.example.test:3128"
    assert got["headers"] == {"Proxy-Authorization": "Basic am9lOnNlY3JldA=="}
    assert got["trust_env"] is False
    assert got["wire"] is False  # through the proxy: the client's session carries it


@pytest.mark.parametrize("no_proxy", ["api.example.test", ".example.test", "*"])
def test_no_proxy_is_honoured(tmp_path: Path, no_proxy: str) -> None:
    got = run({"HTTPS_PROXY": "http://proxy.example.test:3128", "NO_PROXY": no_proxy,
               "NETRC": str(tmp_path / "none")})
    assert got == {"proxy": None, "headers": None, "trust_env": False, "wire": True}


def test_a_netrc_entry_for_the_api_server_keeps_the_session_as_it_was(tmp_path: Path
                                                                        ) -> None:
    netrc = tmp_path / "netrc"
    netrc.write_text("machine api.example.test login joe password secret\n")
    netrc.chmod(0o600)
    got = run({"NETRC": str(netrc), "HTTPS_PROXY": "http://proxy.example.test:3128"})
    assert got == {"proxy": None, "headers": None, "trust_env": True, "wire": False}
