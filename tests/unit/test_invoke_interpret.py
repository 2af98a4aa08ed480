"""We test these aspects of reading a finished plugin run (``interpret``, pure):

- a CNI error printed on stdout with a non-zero exit keeps the plugin's own code;
- a crash (killed by a signal) or a non-zero exit without a CNI error is code 102,
  and says which, with the tail of stderr in its details (never in the message, which
  the daemon may log);
- malformed or non-object JSON is code 103;
- DEL/CHECK may print nothing; ADD must print a result.
"""

from __future__ import annotations

import json

import pytest

from netctl.cni.invoke import PluginError, interpret
from netctl.errors import DELEGATE_BAD_OUTPUT, DELEGATE_CRASHED

RESULT = {"cniVersion": "1.0.0", "ips": [{"address": "10.1.0.5/24"}]}


def test_add_result() -> None:
    assert interpret("ADD", 0, json.dumps(RESULT).encode(), b"") == RESULT


def test_cni_error_on_stdout() -> None:
    err = {"cniVersion": "1.0.0", "code": 11, "msg": "try again", "details": "busy"}
    with pytest.raises(PluginError) as info:
        interpret("ADD", 1, json.dumps(err).encode(), b"some log line\n")
    assert (info.value.code, info.value.msg, info.value.details) == (11, "try again", "busy")
    assert info.value.stderr == b"some log line\n"


def test_cni_error_without_details() -> None:
    out = b'{"cniVersion": "0.4.0", "code": 7, "msg": "bad bridge name"}'
    with pytest.raises(PluginError) as info:
        interpret("DEL", 1, out, b"")
    assert (info.value.code, info.value.msg, info.value.details) == (7, "bad bridge name", "")


def test_cni_error_with_exit_zero_on_add() -> None:
    with pytest.raises(PluginError) as info:
        interpret("ADD", 0, b'{"code": 4, "msg": "no netns"}', b"")
    assert info.value.code == 4


@pytest.mark.parametrize("signum", [9, 11, 15])
def test_killed_by_signal(signum: int) -> None:
    with pytest.raises(PluginError) as info:
        interpret("ADD", -signum, b"", b"panic: runtime error\ngoroutine 1 [running]")
    assert info.value.code == DELEGATE_CRASHED
    assert f"killed by signal {signum}" in info.value.msg
    assert "goroutine 1 [running]" in info.value.details
    assert "goroutine" not in info.value.msg


def test_exit_2_without_output() -> None:
    with pytest.raises(PluginError) as info:
        interpret("ADD", 2, b"", b"")
    assert info.value.code == DELEGATE_CRASHED
    assert info.value.msg == "exited with status 2 without a CNI error"


@pytest.mark.parametrize("out", [b"garbage", b'{"msg": "no code"}', b'{"code": "7", "msg": "x"}',
                                 b"[1]"])
def test_nonzero_exit_with_something_else_on_stdout(out: bytes) -> None:
    with pytest.raises(PluginError) as info:
        interpret("CHECK", 1, out, b"")
    assert info.value.code == DELEGATE_CRASHED
    assert "exited with status 1" in info.value.msg


def test_stderr_tail_is_bounded() -> None:
    with pytest.raises(PluginError) as info:
        interpret("ADD", 3, b"", b"x" * 5000 + b"END")
    assert info.value.details.endswith("END") and len(info.value.details) < 500
    assert len(info.value.stderr) == 5003


@pytest.mark.parametrize("command", ["ADD", "CHECK"])
def test_malformed_json(command: str) -> None:
    with pytest.raises(PluginError) as info:
        interpret(command, 0, b'{"cniVersion": "1.0.0",', b"")
    assert info.value.code == DELEGATE_BAD_OUTPUT
    assert f"malformed JSON on {command}" in info.value.msg


def test_empty_add_output_is_malformed() -> None:
    with pytest.raises(PluginError) as info:
        interpret("ADD", 0, b"", b"")
    assert info.value.code == DELEGATE_BAD_OUTPUT


@pytest.mark.parametrize(("out", "kind"), [(b"[]", "list"), (b'"ok"', "str"), (b"42", "int"),
                                           (b"null", "NoneType")])
def test_non_object_json(out: bytes, kind: str) -> None:
    with pytest.raises(PluginError) as info:
        interpret("ADD", 0, out, b"")
    assert info.value.code == DELEGATE_BAD_OUTPUT
    assert f"printed a JSON {kind} on ADD, not an object" in info.value.msg


@pytest.mark.parametrize("command", ["DEL", "CHECK", "GC", "STATUS"])
@pytest.mark.parametrize("out", [b"", b"\n", b"  \n"])
def test_empty_output_without_add(command: str, out: bytes) -> None:
    assert interpret(command, 0, out, b"") is None


def test_version_output() -> None:
    out = b'{"cniVersion": "1.0.0", "supportedVersions": ["0.3.1", "0.4.0", "1.0.0"]}'
    result = interpret("VERSION", 0, out, b"")
    assert result is not None and result["supportedVersions"][-1] == "1.0.0"


def test_add_result_of_the_wrong_shape_is_bad_output_naming_the_field() -> None:
    with pytest.raises(PluginError) as exc:
        interpret("ADD", 0, b'{"cniVersion": "1.0.0", "ips": "10.0.0.2/24"}', b"")
    assert exc.value.code == 103 and "ips" in exc.value.msg


def test_add_result_naming_a_missing_interface_is_bad_output() -> None:
    out = b'{"cniVersion": "1.0.0", "interfaces": [{"name": "eth0"}],' \
          b' "ips": [{"address": "10.0.0.2/24", "interface": 3}]}'
    with pytest.raises(PluginError) as exc:
        interpret("ADD", 0, out, b"")
    assert exc.value.code == 103 and "interface index 3" in exc.value.msg


def test_add_result_keeps_fields_netctl_does_not_know() -> None:
    out = (b'{"cniVersion": "1.1.0", "interfaces": [{"name": "eth0", "mtu": 1400,'
           b' "x-vendor": 1}], "ips": [{"address": "fd00::2/64", "interface": 0}],'
           b' "custom": {"a": 1}}')
    result = interpret("ADD", 0, out, b"")
    assert result is not None
    assert result["custom"] == {"a": 1} and result["interfaces"][0]["x-vendor"] == 1
