"""We test netctl's HTTP client (:mod:`netctl.kubeapi.http`) against servers
scripted here over real TCP on loopback: a connection kept alive and reused; one the
server closed while idle dropped before use, the request then made on a new one; a GET
whose reused connection the server drops as it arrives sent again once; an answer in
chunks, read as it comes; an informational (1xx) answer before the answer, in the same
read or not; a body that ends with the connection; a header or path with a line break
never sent; a server that answers bytes that are not HTTP, never answers, or hangs up
half-way through an answer, or is not there: each one :class:`ApiError` with status 0
through :class:`Api`, in time. The fake API server drives it with :class:`Api` end to end: the
counts per connection and the 401 that makes the client re-read its token."""

from __future__ import annotations

import json
import ssl
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
import trio_asyncio
from netctl_kit.kubefake import FakeKube, pod
from trio.testing import wait_all_tasks_blocked

from netctl.kubeapi.api import Api, ApiError, KubeSettings
from netctl.kubeapi.http import Endpoint, Http, HttpError

Handler = Callable[[trio.SocketStream, int], Awaitable[None]]


async def read_request(stream: trio.SocketStream, buf: bytearray) -> bytes:
    """One request's head (and its body, by Content-Length) from ``buf`` + the stream;
    b"" when the client closed."""
    while b"\r\n\r\n" not in buf:
        data = await stream.receive_some(65536)
        if not data:
            return b""
        buf += data
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(rest) < length:
        rest += await stream.receive_some(65536)
    buf[:] = rest[length:]
    return head


def answer(body: bytes, status: str = "200 OK", close: bool = False) -> bytes:
    extra = b"Connection: close\r\n" if close else b""
    return (f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n").encode() + extra + b"\r\n" + body


async def serving(handler: Handler, test: Callable[[Http, list[int]], Awaitable[None]]
                  ) -> None:
    """Run ``handler`` for each connection to a loopback port (its number in the order
    accepted) while ``test`` runs with a :class:`Http` to it."""
    accepted: list[int] = []

    async def one(stream: trio.SocketStream) -> None:
        accepted.append(len(accepted))
        n = accepted[-1]
        try:
            await handler(stream, n)
        except trio.BrokenResourceError:
            pass
        finally:
            await trio.aclose_forcefully(stream)

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, one, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        client = Http(Endpoint("127.0.0.1", port, "", f"127.0.0.1:{port}", None,
                             "127.0.0.1"), bearer)
        try:
            await test(client, accepted)
        finally:
            await client.aclose()
            nursery.cancel_scope.cancel()


async def bearer() -> dict[str, str]:
    return {"Authorization": "Bearer t"}


def run(handler: Handler, test: Callable[[Http, list[int]], Awaitable[None]]) -> None:
    trio.run(serving, handler, test)


async def echo_path(stream: trio.SocketStream, n: int) -> None:
    """Answer each request with its path and this connection's number."""
    buf = bytearray()
    while head := await read_request(stream, buf):
        path = head.split(b" ")[1].decode()
        await stream.send_all(answer(json.dumps({"path": path, "conn": n}).encode()))


def test_a_connection_is_kept_alive_and_reused() -> None:
    async def test(client: Http, accepted: list[int]) -> None:
        for i in range(5):
            got = await client.request("GET", f"/x/{i}", {}, None, 5)
            assert got.status == 200
            assert json.loads(got.body) == {"path": f"/x/{i}", "conn": 0}
        assert client.opened == 1 and accepted == [0]
    run(echo_path, test)


def test_one_closed_by_the_server_while_idle_is_dropped_and_a_new_one_made() -> None:
    hung_up_send, hung_up = trio.open_memory_channel[int](10)

    async def close_after_one(stream: trio.SocketStream, n: int) -> None:
        buf = bytearray()
        if await read_request(stream, buf):
            await stream.send_all(answer(json.dumps({"conn": n}).encode()))
        # then hang up, as an API server ends an idle keep-alive connection
        await trio.aclose_forcefully(stream)
        await hung_up_send.send(n)

    async def test(client: Http, accepted: list[int]) -> None:
        for i in range(3):
            got = await client.request("PATCH", "/p", {}, b"{}", 5)
            assert json.loads(got.body) == {"conn": i}
            assert await hung_up.receive() == i  # closed while the connection idles
        assert client.opened == 3
    run(close_after_one, test)


async def drop_the_second_on_the_first(stream: trio.SocketStream, n: int) -> None:
    """The first connection's second request is read and never answered: it goes (as a
    server ending an idle connection just as the request arrives); the rest are answered
    with their connection's number."""
    buf = bytearray()
    first = True
    while await read_request(stream, buf):
        if n == 0 and not first:
            return
        first = False
        await stream.send_all(answer(json.dumps({"conn": n}).encode()))


def test_a_get_on_a_reused_connection_dropped_as_it_arrives_is_sent_again_once() -> None:
    async def test(client: Http, accepted: list[int]) -> None:
        assert json.loads((await client.request("GET", "/a", {}, None, 5)).body) == {"conn": 0}
        assert json.loads((await client.request("GET", "/a", {}, None, 5)).body) == {"conn": 1}
        assert client.opened == 2
    run(drop_the_second_on_the_first, test)


def test_a_patch_on_a_connection_dropped_as_it_arrives_is_not_sent_again() -> None:
    async def test(client: Http, accepted: list[int]) -> None:
        await client.request("PATCH", "/p", {}, b"{}", 5)
        with pytest.raises(HttpError):
            await client.request("PATCH", "/p", {}, b"{}", 5)
        assert accepted == [0]  # no second connection: the write may have been applied
    run(drop_the_second_on_the_first, test)


def test_an_answer_in_chunks_is_read_as_it_comes() -> None:
    sent = trio.Event()
    resume = trio.Event()

    async def chunked(stream: trio.SocketStream, n: int) -> None:
        await read_request(stream, bytearray())
        await stream.send_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for part in (b'{"a":', b'1}\n{"b"', b":2}\n"):
            await stream.send_all(f"{len(part):x}\r\n".encode() + part + b"\r\n")
        sent.set()
        await resume.wait()
        await stream.send_all(b"0\r\n\r\n")

    async def test(client: Http, accepted: list[int]) -> None:
        stream = await client.open_stream("GET", "/w", {}, 5)
        try:
            assert stream.status == 200
            got = b""
            await sent.wait()
            while got.count(b"\n") < 2:  # all before the end of the answer
                got += await stream.receive()
            assert got == b'{"a":1}\n{"b":2}\n'
            resume.set()
            assert await stream.receive() == b""
        finally:
            await stream.aclose()
    run(chunked, test)


def test_a_server_that_never_answers_times_out() -> None:
    async def silent(stream: trio.SocketStream, n: int) -> None:
        await read_request(stream, bytearray())
        await trio.sleep_forever()

    async def test(client: Http, accepted: list[int]) -> None:
        with trio.fail_after(5):
            with pytest.raises(HttpError, match="timeout"):
                await client.request("GET", "/slow", {}, None, 0.3)
    run(silent, test)


def test_a_server_that_hangs_up_half_way_through_an_answer() -> None:
    async def half(stream: trio.SocketStream, n: int) -> None:
        if n:
            return await echo_path(stream, n)
        await read_request(stream, bytearray())
        await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"partial\"")

    async def test(client: Http, accepted: list[int]) -> None:
        with pytest.raises(HttpError, match=r"reading the answer from 127\.0\.0\.1"):
            await client.request("GET", "/half", {}, None, 5)
        await next_on_a_new_connection(client)
    run(half, test)


async def next_on_a_new_connection(client: Http) -> None:
    """The next request goes on a new connection: the last one was never kept for reuse."""
    got = json.loads((await client.request("GET", "/next", {}, None, 5)).body)
    assert got == {"path": "/next", "conn": 1} and client.opened == 2


def test_an_informational_answer_then_the_answer_in_the_same_and_in_later_reads() -> None:
    async def early_hints(stream: trio.SocketStream, n: int) -> None:
        buf = bytearray()
        await read_request(stream, buf)  # the 1xx and the answer in one write
        await stream.send_all(b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
                              + answer(b'{"one":1}'))
        await read_request(stream, buf)  # the 1xx alone, the answer in a later write
        await stream.send_all(b"HTTP/1.1 103 Early Hints\r\n\r\n")
        await wait_all_tasks_blocked()  # the client has read it and waits for more
        await stream.send_all(answer(b'{"two":2}', status="201 Created"))

    async def test(client: Http, accepted: list[int]) -> None:
        one = await client.request("GET", "/1", {}, None, 5)
        assert (one.status, one.reason, one.body) == (200, "OK", b'{"one":1}')
        two = await client.request("GET", "/2", {}, None, 5)
        assert (two.status, two.reason, two.body) == (201, "Created", b'{"two":2}')
        assert client.opened == 1  # kept alive across both
    run(early_hints, test)


def test_an_answer_whose_body_ends_with_the_connection_is_read_whole() -> None:
    async def until_close(stream: trio.SocketStream, n: int) -> None:
        if n:
            return await echo_path(stream, n)
        await read_request(stream, bytearray())
        await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n"
                              b'{"all":')
        await wait_all_tasks_blocked()  # the client has read it and waits for more
        await stream.send_all(b'"of it"}')
        # and hangs up: that ends the body

    async def test(client: Http, accepted: list[int]) -> None:
        got = await client.request("GET", "/x", {}, None, 5)
        assert json.loads(got.body) == {"all": "of it"}
        await next_on_a_new_connection(client)  # closed: never reused
    run(until_close, test)


def test_bytes_that_are_not_http_are_a_wire_error() -> None:
    async def garbage(stream: trio.SocketStream, n: int) -> None:
        if n:
            return await echo_path(stream, n)
        await read_request(stream, bytearray())
        await stream.send_all(b"SSH-2.0-OpenSSH_9.2\r\n\r\n")
        await trio.sleep_forever()

    async def test(client: Http, accepted: list[int]) -> None:
        with trio.fail_after(5):
            with pytest.raises(HttpError, match=r"waiting for the answer from 127.0.0.1:\d+: "
                               r"illegal status line"):
                await client.request("PATCH", "/p", {}, b"{}", 5)
        await next_on_a_new_connection(client)
    run(garbage, test)


def test_a_header_or_path_with_a_line_break_is_never_sent() -> None:
    heads: list[bytes] = []

    async def record(stream: trio.SocketStream, n: int) -> None:
        buf = bytearray()
        while head := await read_request(stream, buf):
            heads.append(head)
            await stream.send_all(answer(b"{}"))

    async def test(client: Http, accepted: list[int]) -> None:
        for path, headers in (("/p\r\nX-Evil: 1", {}), ("/p", {"X-A": "v\r\nX-Evil: 1"}),
                              ("/p", {"X-A": "v\0"}), ("/p", {"X-A": "vé"})):
            with pytest.raises(HttpError, match=r"the request to 127.0.0.1:\d+: "
                               r"(Illegal|a header or the path is not ASCII)"):
                await client.request("PATCH", path, headers, b"{}", 5)
        await client.request("PATCH", "/p", {"X-A": "v"}, b"{}", 5)
        assert len(heads) == 1 and b"X-Evil" not in heads[0]
        assert heads[0].startswith(b"PATCH /p HTTP/1.1\r\n") and b"\r\nX-A: v" in heads[0]
    run(record, test)


# -- through Api, against the fake API server --------------------------------------------


def api_run(kubeconfig: Path, fn: Callable[[Api], Awaitable[Any]],
            settings: dict[str, Any] | None = None) -> Any:
    async def main() -> Any:
        async with trio_asyncio.open_loop():
            api = await Api.connect(KubeSettings(kubeconfig=str(kubeconfig),
                                                 **(settings or {})))
            try:
                return await fn(api)
            finally:
                await api.close()
    return trio.run(main)


def test_the_fake_api_server_through_api_on_one_kept_connection(tmp_path: Path) -> None:
    with FakeKube() as kube:
        kube.create("pods", pod("a", node="n1"))

        async def calls(api: Api) -> dict[str, Any]:
            got = json.loads(await api.get("/api/v1/namespaces/default/pods/a"))
            missing = await api.get("/api/v1/namespaces/default/pods/nope")
            listed = json.loads(await api.list("/api/v1/pods",
                                               [("fieldSelector", "spec.nodeName=n1")]))
            with pytest.raises(ApiError) as refused:
                await api.request("create", "POST", "/api/v1/namespaces/default/pods",
                                  body=json.dumps(pod("a", node="n1")).encode())
            return {"got": got["metadata"]["name"], "missing": missing,
                    "listed": [p["metadata"]["name"] for p in listed["items"]],
                    "refused": refused.value.status, "opened": api.http.opened,
                    "answers": api.answers}

        out = api_run(kube.kubeconfig(tmp_path / "kubeconfig"), calls)
    assert out["got"] == "a" and out["missing"] is None and out["listed"] == ["a"]
    assert out["refused"] == 409
    assert out["opened"] == 1
    assert out["answers"][("create", "pods", "409")] == 1


def test_a_server_not_there_is_status_0_and_named(tmp_path: Path) -> None:
    with FakeKube() as kube:
        kubeconfig = kube.kubeconfig(tmp_path / "kubeconfig")
    # the fake is gone: its port refuses

    async def call(api: Api) -> tuple[ApiError, str]:
        with pytest.raises(ApiError) as failed:
            await api.get("/api/v1/namespaces/default/pods/a")
        assert api.unreachable.startswith(f"API server {api.host} not reachable")
        return failed.value, api.unreachable

    error, why = api_run(kubeconfig, call, {"api_timeout": 2.0})
    assert error.status == 0 and error.unreachable
    # the address, the step and the errno
    assert f"connecting to 127.0.0.1:{kubeconfig_port(kubeconfig)}: ECONNREFUSED " \
           "(Connection refused)" in why, why


def kubeconfig_port(path: Path) -> int:
    return int(path.read_text().split("server: ")[1].split()[0].rsplit(":", 1)[1])


def test_a_broken_tls_handshake_names_the_address_and_the_step() -> None:
    """A server that accepts and hangs up (what a Service address that nothing serves
    looks like behind some NATs): the step and the address, not an exception's class."""
    async def hang_up(stream: trio.SocketStream) -> None:
        await stream.aclose()

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(partial(trio.serve_tcp, hang_up, 0,
                                                    host="127.0.0.1"))
            port = listeners[0].socket.getsockname()[1]
            client = Http(Endpoint("127.0.0.1", port, "", f"127.0.0.1:{port}",
                                 ssl.create_default_context(), "127.0.0.1"))
            with pytest.raises(HttpError) as failed:
                await client.request("GET", "/api", {}, None, 5)
            nursery.cancel_scope.cancel()
        message = str(failed.value)
        assert message.startswith(f"TLS handshake with 127.0.0.1:{port}: "), message
        assert "BrokenResourceError" not in message
    trio.run(main)
