"""We test these aspects: every kind of bad input gets its CNI code and a message that
says what was wrong, nothing runs for it, and the daemon serves a good ADD/DEL afterwards.

Covered: a missing or invalid CNI_COMMAND / CNI_CONTAINERID / CNI_IFNAME / CNI_ARGS,
a netns that does not exist (4); stdin that is not JSON, answered by the thin plugin
or by the daemon, and malformed request frames on the raw socket (6); a plugin
``type`` like ``../bridge`` in a NAD, an inline delegate or an ipam section (7,
and a canary at that path never runs); an unknown network (7, named); a request
over ``max-request-bytes`` (105, but a DEL is served); a caller uid not allowed on
the socket (104); a daemon that is not running (ADD/CHECK 11 at once naming the
socket, DEL rc 0 with a warning, STATUS 50, VERSION answered).

Subnets: 10.112.0.0/24.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from netctl_kit import journaldb

from tests.conftest import NETCTL, CNIResult, Daemon, bridge_conf, bridge_ports, netns_links

pytestmark = pytest.mark.netns


def setup(daemon: Daemon, start: bool = True) -> str:
    br = daemon.name("b")
    daemon.add_network("br", bridge_conf("br", br, "10.112.0.0/24", ipam_dir=daemon.ipam_dir))
    if start:
        daemon.start()
    return br


def assert_serves(daemon: Daemon, ns: str, bridge: str) -> None:
    """A good ADD and DEL still work."""
    conf = daemon.conf("br")
    res = daemon.cni("ADD", "good1", ns, conf)
    assert res.rc == 0, res.stdout + res.stderr
    assert len(bridge_ports(bridge)) == 1
    res = daemon.cni("DEL", "good1", ns, conf)
    assert res.rc == 0, res.stdout + res.stderr
    assert bridge_ports(bridge) == []
    assert netns_links(ns) == ["lo"]


def assert_error(res: CNIResult, code: int, *fragments: str) -> str:
    assert res.rc == 1, res.stdout + res.stderr
    assert res.out is not None, res.stdout
    assert res.out["code"] == code, res.out
    assert res.out["cniVersion"] == "1.1.0", res.out
    for fragment in fragments:
        assert fragment in res.out["msg"], res.out
    msg: str = res.out["msg"]
    return msg


def nothing_ran(daemon: Daemon) -> None:
    assert daemon.read(journaldb.row_counts, ("operations", "steps")) == {
        "operations": 0, "steps": 0}


# -- the CNI_* environment ---------------------------------------------------------------

ENV_CASES: dict[str, tuple[dict[str, Any], str]] = {
    "no-command": ({"env": {"CNI_COMMAND": None}}, "CNI_COMMAND is missing"),
    "bad-command": ({"env": {"CNI_COMMAND": "ATTACH"}}, "CNI_COMMAND 'ATTACH' is not one of"),
    "no-containerid": ({"env": {"CNI_CONTAINERID": None}}, "CNI_CONTAINERID is missing"),
    "containerid-slash": ({"container": "../etc"}, "CNI_CONTAINERID '../etc' is invalid"),
    "containerid-space": ({"container": "a b"}, "CNI_CONTAINERID 'a b' is invalid"),
    "no-ifname": ({"env": {"CNI_IFNAME": None}}, "CNI_IFNAME is missing"),
    "ifname-16-chars": ({"ifname": "e" * 16}, f"CNI_IFNAME '{'e' * 16}' is invalid"),
    "ifname-slash": ({"ifname": "eth/0"}, "CNI_IFNAME 'eth/0' is invalid"),
    "ifname-dotdot": ({"ifname": ".."}, "CNI_IFNAME '..' is invalid"),
    "bad-cni-args": ({"env": {"CNI_ARGS": "K8S_POD_NAME"}}, "CNI_ARGS entry 'K8S_POD_NAME'"),
    "no-netns": ({"env": {"CNI_NETNS": None}}, "CNI_NETNS is missing"),
    "netns-not-there": ({"netns": "/var/run/netns/nct-there-is-no-such-netns"},
                        "CNI_NETNS /var/run/netns/nct-there-is-no-such-netns does not exist"),
}


@pytest.mark.parametrize("case", list(ENV_CASES))
def test_invalid_environment_is_code_4(daemon: Daemon, netns, case: str) -> None:
    br = setup(daemon)
    how, fragment = ENV_CASES[case]
    ns = netns()
    res = daemon.cni("ADD", how.get("container", "bad1"), how.get("netns", ns),
                     daemon.conf("br"), ifname=how.get("ifname", "eth0"), env=how.get("env"))
    assert_error(res, 4, fragment)
    assert netns_links(ns) == ["lo"]
    nothing_ran(daemon)
    assert_serves(daemon, ns, br)


# -- stdin and frames that do not decode ------------------------------------------------

def test_stdin_not_json_is_code_6_from_the_plugin(daemon: Daemon, netns) -> None:
    """Without a config there is no socket to ask: the thin plugin answers itself."""
    br = setup(daemon)
    ns = netns()
    assert_error(daemon.cni("ADD", "bad1", ns, b"{not json"), 6, "stdin is not valid")
    assert_error(daemon.cni("ADD", "bad1", ns, b"\xff\xfe"), 6, "stdin is not valid")
    assert_error(daemon.cni("CHECK", "bad1", ns, b"[1, 2]"), 6, "not a JSON object")
    nothing_ran(daemon)
    assert_serves(daemon, ns, br)


def test_stdin_the_daemon_cannot_decode_is_code_6(daemon: Daemon, netns) -> None:
    """JSON Python's json accepts but strict JSON does not (NaN): code 6, naming NaN."""
    br = setup(daemon)
    ns = netns()
    raw = json.dumps(daemon.conf("br"))[:-1] + ', "mtu": NaN}'
    assert_error(daemon.cni("ADD", "bad1", ns, raw), 6, "not valid", "NaN")
    nothing_ran(daemon)
    assert_serves(daemon, ns, br)


def raw_request(path: str, frame: bytes, shut: bool = False) -> dict[str, Any] | None:
    """Send ``frame`` as is on the daemon's socket; its decoded answer, or None if none."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(15)
        s.connect(path)
        s.sendall(frame)
        if shut:
            s.shutdown(socket.SHUT_WR)
        head = s.recv(4, socket.MSG_WAITALL)
        if len(head) < 4:
            return None
        (size,) = struct.unpack(">I", head)
        body = s.recv(size, socket.MSG_WAITALL)
    reply: dict[str, Any] = json.loads(body)
    return reply


def frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


@pytest.mark.parametrize("body", [b"{not json", b"", b"[]", b'{"command": 7}'],
                         ids=["garbage", "empty", "array", "wrong-type"])
def test_malformed_frame_is_code_6(daemon: Daemon, netns, body: bytes) -> None:
    br = setup(daemon)
    reply = raw_request(daemon.socket, frame(body))
    assert reply is not None and reply["status"] == 1, reply
    out = json.loads(reply["output"])
    assert out["code"] == 6 and "malformed request frame" in out["msg"], out
    # A frame cut short, and a connection that says nothing, are dropped without an answer.
    assert raw_request(daemon.socket, frame(b'{"command": "ADD"}')[:10], shut=True) is None
    assert raw_request(daemon.socket, b"", shut=True) is None
    nothing_ran(daemon)
    assert_serves(daemon, netns(), br)


# -- configs the daemon refuses ---------------------------------------------------------

def traversal_canary(daemon: Daemon) -> Path:
    """A bin dir first in the daemon's list with a ``../bridge`` and ``../host-local``
    next to it that would leave a mark if anything ever ran them."""
    base = daemon.root / "cni"
    (base / "bin").mkdir(parents=True)
    marker = base / "ran"
    for name in ("bridge", "host-local"):
        script = base / name
        script.write_text(f"#!/bin/sh\necho {name} >> {marker}\ncat >/dev/null\nexit 1\n")
        script.chmod(0o755)
    daemon.bin_dirs.insert(0, str(base / "bin"))
    return marker


def test_plugin_type_with_a_path_is_refused(daemon: Daemon, netns) -> None:
    br = setup(daemon, start=False)
    marker = traversal_canary(daemon)
    daemon.add_network("evil", {"cniVersion": "1.0.0", "name": "evil",
                                "plugins": [{"type": "../bridge", "bridge": daemon.name("e")}]})
    daemon.start()
    ns = netns()
    # As a NAD: the file is refused when read, and a lookup says why.
    msg = assert_error(daemon.cni("ADD", "bad1", ns, daemon.conf("evil")), 7, "'evil'")
    assert "'../bridge' is not a bare plugin name" in msg
    # As an additional network of a good cluster network.
    assert_error(daemon.cni("ADD", "bad2", ns, daemon.conf("br"), networks="evil"), 7,
                 "'../bridge' is not a bare plugin name")
    # As an inline delegate, and as a delegate's ipam type.
    inline = daemon.conf("", delegates=[{"cniVersion": "1.0.0", "name": "evil2",
                                         "type": "../bridge"}])
    del inline["clusterNetwork"]
    assert_error(daemon.cni("ADD", "bad3", ns, inline), 7, "'../bridge'")
    ipam = daemon.conf("", delegates=[{
        "cniVersion": "1.0.0", "name": "evil3", "type": "bridge", "bridge": daemon.name("e"),
        "ipam": {"type": "../host-local", "subnet": "10.112.9.0/24"}}])
    del ipam["clusterNetwork"]
    assert_error(daemon.cni("ADD", "bad4", ns, ipam), 7, "'../host-local'")
    assert not marker.exists()
    assert netns_links(ns) == ["lo"]
    nothing_ran(daemon)
    assert_serves(daemon, ns, br)
    assert not marker.exists()


def test_unknown_network_is_named(daemon: Daemon, netns) -> None:
    br = setup(daemon)
    ns = netns()
    assert_error(daemon.cni("ADD", "bad1", ns, daemon.conf("nosuchnet")), 7,
                 "network 'nosuchnet' not found")
    assert_error(daemon.cni("ADD", "bad2", ns, daemon.conf("br"), networks="other/nosuch2"),
                 7, "network 'other/nosuch2' not found")
    assert netns_links(ns) == ["lo"]
    nothing_ran(daemon)
    assert_serves(daemon, ns, br)


def test_oversized_request_is_code_105(daemon: Daemon, netns) -> None:
    daemon.settings["max-request-bytes"] = 65536
    br = setup(daemon)
    ns = netns()
    conf = daemon.conf("br", padding="x" * 70000)
    assert_error(daemon.cni("ADD", "big1", ns, conf), 105,
                 "exceeds the daemon's limit of 65536 bytes", "max-request-bytes")
    nothing_ran(daemon)
    # No DEL is refused for its size (more in test_request_size.py).
    res = daemon.cni("DEL", "big1", ns, conf)
    assert res.rc == 0, res.describe()
    assert_serves(daemon, ns, br)


# -- who may talk to the daemon ---------------------------------------------------------

@contextlib.contextmanager
def traversable(path: Path) -> Iterator[None]:
    """Let every user traverse ``path`` and its ancestors; restore their modes after."""
    changed = []
    for p in [path, *path.parents]:
        mode = p.stat().st_mode
        if not mode & stat.S_IXOTH:
            changed.append((p, stat.S_IMODE(mode)))
            p.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)
    try:
        yield
    finally:
        for p, mode in changed:
            p.chmod(mode)


def test_uid_not_allowed_is_code_104(daemon: Daemon, netns) -> None:
    br = setup(daemon)
    public = daemon.root / "public-bin"
    public.mkdir(mode=0o755)
    subprocess.run([NETCTL, "install-cni", "--bin-dir", str(public)], check=True,
                   capture_output=True)
    plugin = public / "netctl-cni"
    run_dir = Path(daemon.socket).parent
    ns = netns()
    env = {"PATH": "/usr/bin:/bin", "CNI_COMMAND": "ADD", "CNI_CONTAINERID": "nobody1",
           "CNI_NETNS": f"/var/run/netns/{ns}", "CNI_IFNAME": "eth0", "CNI_ARGS": "",
           "CNI_PATH": "/nonexistent"}
    with traversable(run_dir):
        os.chmod(daemon.socket, 0o666)
        proc = subprocess.run([str(plugin)], input=json.dumps(daemon.conf("br")).encode(),
                              env=env, capture_output=True, timeout=60, user=65534,
                              group=65534, extra_groups=[])
    out = json.loads(proc.stdout)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert out["code"] == 104, out
    assert "caller uid 65534" in out["msg"] and daemon.socket in out["msg"], out
    assert netns_links(ns) == ["lo"]
    nothing_ran(daemon)
    assert_serves(daemon, ns, br)


# -- no daemon --------------------------------------------------------------------------

def assert_unreachable(daemon: Daemon, ns: str) -> None:
    conf = daemon.conf("br")
    for verb in ("ADD", "CHECK"):
        started = time.monotonic()
        res = daemon.cni(verb, "down1", ns, conf)
        assert time.monotonic() - started < 1.9, f"{verb} waited (connect timeout is 2s)"
        assert_error(res, 11, "netctl daemon not reachable", daemon.socket, "try again later")
    res = daemon.cni("DEL", "down1", ns, conf)
    assert res.rc == 0 and res.stdout == "", res
    assert "warning: netctl daemon not reachable" in res.stderr and daemon.socket in res.stderr
    assert_error(daemon.cni("STATUS", "", None, conf, ifname=""), 50, daemon.socket)
    res = daemon.cni("VERSION", "", None, {"cniVersion": "1.0.0"}, ifname="")
    assert res.rc == 0 and res.out is not None, res
    assert res.out["cniVersion"] == "1.0.0" and "1.1.0" in res.out["supportedVersions"]


def test_daemon_never_started(daemon: Daemon, netns) -> None:
    br = setup(daemon, start=False)
    ns = netns()
    assert_unreachable(daemon, ns)
    daemon.start()
    assert daemon.cni("STATUS", "", None, daemon.conf("br"), ifname="").rc == 0
    assert_serves(daemon, ns, br)


def test_daemon_stopped_and_stale_socket(daemon: Daemon, netns) -> None:
    br = setup(daemon)
    ns = netns()
    assert_serves(daemon, ns, br)
    assert daemon.stop() == 0
    assert not os.path.exists(daemon.socket)
    assert_unreachable(daemon, ns)
    # A socket file nobody listens on (what a SIGKILLed daemon leaves): refused at once.
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as stale:
        stale.bind(daemon.socket)
        assert_unreachable(daemon, ns)
    daemon.start()
    assert_serves(daemon, ns, br)
