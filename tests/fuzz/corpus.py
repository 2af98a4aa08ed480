"""The fuzz targets' seed corpus (tests/fuzz/corpus/<target>/), made from the plugin tests'
own inputs: the stdins and daemon replies that ``tests/unit/test_plugin_frame.py``
parametrizes its tests with (read from its marks, so a case added there is a seed here),
the configs it and ``tests/cni_samples.py`` build, the environment
``tests/framerecorder.py`` execs the plugin with, and replies as the daemon encodes them
(its ``Response`` and ``CNIError``, a result in each cniVersion by ``convert_result``).

Each seed is a file named by the SHA-1 of its bytes (as libFuzzer names what it adds), at
most ``MAX_SEED`` bytes: a larger input is cut there. ``python -m tests.fuzz.corpus``
writes the seeds that are missing and removes none (inputs kept as regression tests sit
beside them, named ``regress-…``); ``--check`` only lists the missing ones, exiting 1 if
any (the fuzz test runs it so, and the corpus never falls behind the tests).

A seed of ``frame`` is one byte (the command's index in ``COMMANDS``; 8 added: run as
netctl-ipam), CNI_CONTAINERID, CNI_NETNS, CNI_IFNAME, CNI_ARGS and CNI_PATH each ended
by a NUL, then stdin (tests/fuzz/fuzz_frame.c reads it so).
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from netctl.cni.request import PROTO, Response
from netctl.cni.versions import SUPPORTED, convert_result
from netctl.errors import CNIError
from tests import cni_samples
from tests.unit import test_plugin_frame as plugin_tests

CORPUS = Path(__file__).resolve().parent / "corpus"
MAX_SEED = 4096
COMMANDS = ("ADD", "DEL", "CHECK", "VERSION", "GC", "STATUS", "", "del")
SOCKET = "/run/netctl/netctl.sock"
PLAIN = json.dumps({"cniVersion": "1.0.0", "name": "n", "socket": SOCKET}).encode()
IPAM_CONF = json.dumps({"cniVersion": "1.0.0", "name": "n", "type": "bridge",
                        "socket": "/elsewhere.sock",
                        "ipam": {"type": "netctl-ipam", "socket": SOCKET}}).encode()
# tests/framerecorder.py's exec_plugin: the CNI_* variables the plugin tests exec it with
ENV = ("c1", "/var/run/netns/x", "eth0", "K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web",
       "/opt/cni/bin")
RESULT: dict[str, Any] = {
    "cniVersion": "1.1.0",
    "interfaces": [{"name": "eth0", "mac": "0a:58:0a:70:00:05", "mtu": 1500,
                    "sandbox": "/var/run/netns/x", "socketPath": "", "pciID": ""},
                   {"name": "net1", "mac": "0a:58:0a:71:00:07", "sandbox": "/var/run/netns/x"}],
    "ips": [{"address": "10.112.0.5/24", "gateway": "10.112.0.1", "interface": 0},
            {"address": "fd00:112::5/64", "interface": 0}],
    "routes": [{"dst": "0.0.0.0/0", "gw": "10.112.0.1"}],
    "dns": {"nameservers": ["10.96.0.10"], "search": ["shop.svc.cluster.local"]},
}


def parametrized(argname: str) -> Iterator[Any]:
    """Every value the plugin tests give the parameter ``argname`` (the first item of a
    tuple of parameters)."""
    for name in dir(plugin_tests):
        for mark in getattr(getattr(plugin_tests, name), "pytestmark", []):
            if mark.name != "parametrize":
                continue
            names = [n.strip() for n in mark.args[0].split(",")]
            if argname in names:
                for values in mark.args[1]:
                    yield values[names.index(argname)] if len(names) > 1 else values


def stdins() -> list[bytes]:
    """The configs and non-configs the plugin tests put on stdin."""
    out = [s for s in parametrized("stdin") if isinstance(s, bytes)]
    for escape in parametrized("escape"):
        out.append(('{"cniVersion":"1.0.0","name":"n","socket":"' + SOCKET + '","x":"'
                    + escape + '","runtimeConfig":{"' + plugin_tests.POD_ANNOTATIONS
                    + '":{"a":"b"}}}').encode())
    conf = plugin_tests.containerd_conf(SOCKET, annotation_bytes=64)
    out += [plugin_tests.go_json(conf), json.dumps(conf, indent=1).encode(),
            b" \n\t" + json.dumps(conf).encode() + b"\r\n"]
    out += [json.dumps({"cniVersion": v, "name": "n", "socket": SOCKET}).encode()
            for v in SUPPORTED]
    out.append(IPAM_CONF)
    out.append(json.dumps({"cniVersion": "1.0.0", "name": "n", "socket": SOCKET,
                           "mtu": 1500, "rate": 0.25, "big": 10 ** 30, "tiny": -1.5e-300,
                           "runtimeConfig": {plugin_tests.POD_ANNOTATIONS: {"a": "b"},
                                             "bandwidth": {"ingressRate": 1e9}}}).encode())
    out.append(('{"cniVersion":"1.0.0","socket":"/nowhere","soc\\u006bet":"'
                + SOCKET.replace("/", "\\/") + '"}').encode())
    out.append(b'{"socket":"' + SOCKET.encode() + b'","deep":' + b"[" * 300 + b"]" * 300
               + b"}")
    out += [b"[" * MAX_SEED, b'{"a":' * (MAX_SEED // 5)]
    out += [json.dumps(conf).encode() for _, conf in (
        cni_samples.CALICO, cni_samples.FLANNEL, cni_samples.CILIUM, cni_samples.OVN_CONF,
        cni_samples.BRIDGE)]
    return out


def replies() -> list[bytes]:
    """Answers as the daemon encodes them, and those the plugin tests answer with."""
    out = []
    for version in SUPPORTED:
        result = json.dumps(convert_result(RESULT, version))
        out.append(msgspec.json.encode(Response(output=result, proto=PROTO)))
        error = CNIError(7, 'network "br": no such network (networks dir /etc/netctl)')
        out.append(msgspec.json.encode(Response(
            status=1, output=json.dumps(error.to_json(version)), proto=PROTO)))
    out.append(msgspec.json.encode(Response(output="", warning="look: é 😀 \u2028",
                                            proto=PROTO)))
    out.append(msgspec.json.encode(Response(status=1, output=json.dumps(CNIError(
        11, "netctl-cni sent a frame of protocol 2; this daemon speaks 1").to_json("1.0.0")),
        proto=1)))
    out.append(msgspec.json.encode(Response(output="{}")))  # a daemon older than "proto"
    out.append(json.dumps({"status": 0, "output": 'é 😀 \u2028 <&> \\ " \t\x00 end',
                           "warning": "\ud800 alone \udc00"}).encode())
    out += [reply for reply in parametrized("reply") if isinstance(reply, bytes)]
    out.append(b'{"output": "\xff\xc3(", "unknown": {"a": [1, "\\ud800"]}, "Status": 1,'
               b' "warning": "w", "warning": null}')
    return out


def frame_seed(command: str, stdin: bytes, env: tuple[str | bytes, ...] = ENV,
               ipam: bool = False) -> bytes:
    head = bytes([COMMANDS.index(command) | (8 if ipam else 0)])
    fields = b"".join((f if isinstance(f, bytes) else f.encode()) + b"\0" for f in env)
    return head + fields + stdin


def seeds() -> dict[str, list[bytes]]:
    confs, answers = stdins(), replies()
    frames = [frame_seed(command, stdin) for stdin in confs for command in ("ADD", "DEL")]
    frames += [frame_seed(command, PLAIN) for command in COMMANDS]
    frames.append(frame_seed("ADD", IPAM_CONF, ipam=True))
    frames.append(frame_seed("ADD", PLAIN, env=(  # bytes that are not UTF-8
        "c1", "ns/x", b"eth\xed\xa0\x80", b"A=\xff;B=\xc3(;C=\xc3\xa9\xe2\x80\xa8", "")))
    return {"json": confs + answers, "reply": answers, "frame": frames}


def missing() -> list[tuple[Path, bytes]]:
    out = []
    for target, inputs in seeds().items():
        for data in inputs:
            data = data[:MAX_SEED]
            path = CORPUS / target / hashlib.sha1(data).hexdigest()
            if not path.exists():
                out.append((path, data))
    return out


def main(argv: list[str]) -> int:
    todo = missing()
    if "--check" in argv:
        for path, _ in todo:
            print(f"missing seed: {path} (python -m tests.fuzz.corpus writes it)")
        return 1 if todo else 0
    for path, data in todo:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    print(f"{len(todo)} seeds written under {CORPUS}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
