"""We test the proxies and ``.netrc`` of the one HTTP client (:mod:`netctl.kubeapi.http`),
end to end: the fake API server behind a forwarding HTTP proxy scripted here on loopback.
A call goes through the proxy the kubeconfig's ``proxy-url`` names, or the environment's
(``HTTP_PROXY``, its user and password sent as ``Proxy-Authorization``); ``NO_PROXY`` is
honoured (the call goes straight to the server); a ``.netrc`` entry for the server gives
basic auth where the user has no token, and a token wins over it. netctl reads each of
these configurations itself (no kubernetes-asyncio loader)."""

from __future__ import annotations

import base64
import json
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
import yaml
from netctl_kit.kubefake import FakeKube, pod

from netctl.kubeapi.api import Api, KubeSettings


async def forward(seen: list[bytes], client: trio.SocketStream) -> None:
    """A forwarding proxy's connection: the first request's head recorded, then every
    byte both ways between the client and the server its absolute-form target names."""
    head = b""
    while b"\r\n\r\n" not in head:
        data = await client.receive_some(65536)
        if not data:
            return
        head += data
    seen.append(head.partition(b"\r\n\r\n")[0])
    target = head.split(b" ", 2)[1].decode()  # http://HOST:PORT/path
    host, _, port = target.split("/")[2].rpartition(":")
    async with await trio.open_tcp_stream(host, int(port)) as server:
        await server.send_all(head)

        async def pipe(src: trio.abc.Stream, dst: trio.abc.Stream) -> None:
            try:
                while data := await src.receive_some(65536):
                    await dst.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            nursery.cancel_scope.cancel()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(pipe, client, server)
            nursery.start_soon(pipe, server, client)


def call_through(kube: FakeKube, kubeconfig: Path, seen: list[bytes]) -> dict[str, Any]:
    """A GET and a list through :class:`Api` while the proxy runs; its port is
    ``PROXY_PORT`` in the kubeconfig and the environment."""
    async def main() -> dict[str, Any]:
        async with trio.open_nursery() as nursery:
            api = await Api.connect(KubeSettings(kubeconfig=str(kubeconfig)))
            try:
                got = json.loads(await api.get("/api/v1/namespaces/default/pods/a") or b"")
                await api.list("/api/v1/pods", [])
            finally:
                await api.close()
            nursery.cancel_scope.cancel()
        return {"got": got["metadata"]["name"], "full": api.full}
    return trio.run(main)


@pytest.fixture
def proxied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """(kube, kubeconfig, seen, run): ``run(proxy_url | None)`` makes the calls with a
    proxy on loopback listening, ``proxy_url``'s PORT replaced by its port."""
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "NO_PROXY",
                 "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    with FakeKube() as kube:
        kube.create("pods", pod("a", node="n1"))
        seen: list[bytes] = []

        def run(config: Path, env: dict[str, str]) -> dict[str, Any]:
            async def main() -> dict[str, Any]:
                async with trio.open_nursery() as nursery:
                    listeners = await nursery.start(partial(
                        trio.serve_tcp, partial(forward, seen), 0, host="127.0.0.1"))
                    port = listeners[0].socket.getsockname()[1]
                    for name, value in env.items():
                        monkeypatch.setenv(name, value.replace("PORT", str(port)))
                    await trio.to_thread.run_sync(point_at, config, port)
                    out = await trio.to_thread.run_sync(call_through, kube, config, seen)
                    nursery.cancel_scope.cancel()
                return out
            return trio.run(main)
        yield kube, tmp_path, seen, run


def point_at(config: Path, port: int) -> None:
    config.write_text(config.read_text().replace("PROXY_PORT", str(port)))


def kubeconfig_of(kube: FakeKube, path: Path, cluster: dict[str, Any] | None = None,
                  user: dict[str, Any] | None = None) -> Path:
    kube.kubeconfig(path)
    doc = yaml.safe_load(path.read_text())
    doc["clusters"][0]["cluster"].update(cluster or {})
    if user is not None:
        doc["users"][0]["user"] = user
    path.write_text(yaml.safe_dump(doc))
    return path


def test_the_kubeconfigs_proxy_url_carries_the_calls(proxied: Any) -> None:
    kube, tmp, seen, run = proxied
    config = kubeconfig_of(kube, tmp / "kc", {"proxy-url": "http://127.0.0.1:PROXY_PORT"})
    out = run(config, {})
    assert out == {"got": "a", "full": False}
    assert len(seen) == 1  # one kept-alive connection to the proxy for both calls
    assert seen[0].startswith(b"GET http://127.0.0.1:")  # the absolute form: forwarded
    assert kube.count("get", "pods") == 1 and kube.count("list", "pods") == 1


def test_the_environments_proxy_is_used_with_its_credentials(proxied: Any) -> None:
    kube, tmp, seen, run = proxied
    config = kubeconfig_of(kube, tmp / "kc")
    out = run(config, {"HTTP_PROXY": "http://joe:s%40cret@127.0.0.1:PORT"})
    assert out["got"] == "a" and out["full"] is False
    basic = base64.b64encode(b"joe:s@cret").decode()
    assert f"\r\nProxy-Authorization: Basic {basic}".encode() in seen[0]


@pytest.mark.parametrize("no_proxy", ["127.0.0.1", "*"])
def test_no_proxy_is_honoured(proxied: Any, no_proxy: str) -> None:
    kube, tmp, seen, run = proxied
    config = kubeconfig_of(kube, tmp / "kc")
    out = run(config, {"HTTP_PROXY": "http://127.0.0.1:PORT", "NO_PROXY": no_proxy})
    assert out["got"] == "a" and seen == []  # straight to the server


def test_a_netrc_entry_gives_basic_auth_where_there_is_no_token(
        proxied: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kube, tmp, seen, run = proxied
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login joe password secret\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    basic = b"Authorization: Basic " + base64.b64encode(b"joe:secret")
    bare = kubeconfig_of(kube, tmp / "bare", {"proxy-url": "http://127.0.0.1:PROXY_PORT"},
                         user={})
    assert run(bare, {})["got"] == "a"  # (the fake asks for no token)
    assert b"\r\n" + basic in seen[0]
    token = kubeconfig_of(kube, tmp / "token", {"proxy-url": "http://127.0.0.1:PROXY_PORT"},
                          user={"token": "t0k"})
    run(token, {})
    assert b"\r\nAuthorization: Bearer t0k" in seen[1] and basic not in seen[1]
