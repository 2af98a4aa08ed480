"""The daemon's two doors: a frame classified (pure) as a CNI request, an admin call, or the
CNI error it gets; the admin verb table serves every call the frame's type allows; the one
admin client encodes the call's kind whatever else it leaves out."""

from __future__ import annotations

import dataclasses
import typing

import msgspec
import pytest
import trio

from netctl.cni.request import Request
from netctl.daemon.admin import AdminHandlers, AdminRequest, dispatch
from netctl.daemon.server import classify
from netctl.errors import DECODE_FAILURE, REQUEST_TOO_LARGE, CNIError

LIMIT = 1000


def test_a_frame_is_a_cni_request_or_an_admin_call() -> None:
    admin = msgspec.json.encode(AdminRequest(call="reconcile", dry_run=True))
    got = classify(admin, len(admin), LIMIT)
    assert isinstance(got, AdminRequest) and got.call == "reconcile" and got.dry_run
    cni = msgspec.json.encode(Request(command="ADD", container_id="c1"))
    got = classify(cni, len(cni), LIMIT)
    assert isinstance(got, Request) and got.command == "ADD"
    # the admin call's kind is its tag: there even when every other field is a default
    assert msgspec.json.decode(msgspec.json.encode(AdminRequest())) == {"kind": "admin"}


def test_what_a_frame_cannot_be_is_its_cni_error() -> None:
    with pytest.raises(CNIError) as bad:
        classify(b"[1, 2", 5, LIMIT)
    assert bad.value.code == DECODE_FAILURE and "malformed request frame" in bad.value.msg
    with pytest.raises(CNIError) as unknown_call:
        classify(b'{"kind": "admin", "call": "reboot"}', 35, LIMIT)
    assert unknown_call.value.code == DECODE_FAILURE
    big_add = msgspec.json.encode(Request(command="ADD", args="x" * 2000))
    with pytest.raises(CNIError) as large:
        classify(big_add, len(big_add), LIMIT)
    assert large.value.code == REQUEST_TOO_LARGE
    big_del = msgspec.json.encode(Request(command="DEL", args="x" * 2000))
    assert isinstance(classify(big_del, len(big_del), LIMIT), Request)  # no DEL refused


def test_every_admin_call_has_its_handler() -> None:
    calls = typing.get_args(typing.get_type_hints(AdminRequest)["call"])
    assert {f.name for f in dataclasses.fields(AdminHandlers)} == set(calls)
    seen: list[tuple[str, object]] = []

    async def record(name: str, arg: object = None) -> dict[str, object]:
        seen.append((name, arg))
        return {"call": name}

    handlers = AdminHandlers(
        status=lambda req: record("status"),
        reconcile=lambda req: record("reconcile", req.dry_run),
        forget=lambda req: record("forget", req.who), attach=lambda req: record("attach"),
        detach=lambda req: record("detach"))

    async def main() -> None:
        for call in calls:
            doc = await dispatch(handlers, AdminRequest(call=call, who="ops", dry_run=True),
                                 (42, 0))
            assert doc == {"call": call}

    trio.run(main)
    assert ("reconcile", True) in seen
    assert ("forget", "ops (uid 0, pid 42)") in seen  # the kernel's word for who asked
