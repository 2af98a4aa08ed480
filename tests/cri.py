"""A small CRI client and a throw-away containerd for tests: drive the runtime as kubelet
does, over its unix socket, with no generated code.

The CRI messages are protobuf; the few a test needs are encoded and decoded here by
hand (:func:`encode`, :func:`decode`: field number → values, nested messages decoded
on demand), and sent through grpcio with identity serializers. :class:`Containerd`
starts Debian's containerd 1.6 as a child process with its own config and temporary
root, state and socket (runc; ``restrict_oom_score_adj``: root here lacks
CAP_SYS_RESOURCE), its CRI plugin reading CNI configs from ``conf_dir`` and plugins from
``bin_dir``; it stops and removes everything on exit, even after a failure.

Only ``RuntimeService/Status`` is wrapped so far (:meth:`CRIClient.status`): its
``NetworkReady`` condition and, verbose, the ``cniconfig`` info, which lists the
networks the CRI plugin has loaded from its conf dir.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CONTAINERD = shutil.which("containerd") or "/usr/bin/containerd"
RUNC = shutil.which("runc") or "/usr/sbin/runc"

Fields = list[tuple[int, "int | bool | str | bytes | Fields"]]


# --- protobuf, the little that is needed ------------------------------------------


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode(fields: Fields) -> bytes:
    """Fields in order: ints and bools as varints, str/bytes/nested lists
    length-delimited."""
    out = bytearray()
    for num, value in fields:
        if isinstance(value, bool | int):
            out += _varint(num << 3) + _varint(int(value))
        else:
            raw = value.encode() if isinstance(value, str) else \
                value if isinstance(value, bytes) else encode(value)
            out += _varint(num << 3 | 2) + _varint(len(raw)) + raw
    return bytes(out)


def _read_varint(buf: bytes, i: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        byte = buf[i]
        i += 1
        n |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return n, i


def decode(buf: bytes) -> dict[int, list[int | bytes]]:
    """field number → its values (varints as int, length-delimited as bytes)."""
    out: dict[int, list[int | bytes]] = {}
    i = 0
    while i < len(buf):
        key, i = _read_varint(buf, i)
        num, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, i = _read_varint(buf, i)
        elif wire == 2:
            size, i = _read_varint(buf, i)
            value, i = buf[i:i + size], i + size
        elif wire == 1:
            value, i = int.from_bytes(buf[i:i + 8], "little"), i + 8
        elif wire == 5:
            value, i = int.from_bytes(buf[i:i + 4], "little"), i + 4
        else:
            raise ValueError(f"protobuf wire type {wire} not handled")
        out.setdefault(num, []).append(value)
    return out


def _text(v: int | bytes) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


# --- CRI ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RuntimeStatus:
    conditions: dict[str, tuple[bool, str, str]]  # type → (status, reason, message)
    info: dict[str, str]

    @property
    def network_ready(self) -> bool:
        return self.conditions.get("NetworkReady", (False, "", ""))[0]

    def cni_networks(self) -> list[dict[str, Any]]:
        """The networks the CRI plugin loaded (verbose ``cniconfig``): each
        ``{"name", "cniVersion", "plugins": [plugin entry, …], "source"}``."""
        conf = json.loads(self.info.get("cniconfig", "{}"))
        out = []
        for net in conf.get("Networks") or []:
            cfg = net.get("Config") or {}
            out.append({"name": cfg.get("Name"), "cniVersion": cfg.get("CNIVersion"),
                        "plugins": [p.get("Network") for p in cfg.get("Plugins") or []],
                        "source": cfg.get("Source", "")})
        return out


class CRIClient:
    """CRI ``runtime.v1`` over a unix socket (containerd 1.6 serves v1 and v1alpha2)."""

    def __init__(self, socket_path: str) -> None:
        import grpc  # a test dependency only

        self._grpc = grpc
        self._channel = grpc.insecure_channel(f"unix://{socket_path}")

    def call(self, method: str, request: bytes, timeout: float = 10.0) -> bytes:
        fn = self._channel.unary_unary(f"/runtime.v1.RuntimeService/{method}",
                                       request_serializer=lambda b: b,
                                       response_deserializer=lambda b: b)
        return bytes(fn(request, timeout=timeout))

    def status(self, verbose: bool = True) -> RuntimeStatus:
        msg = decode(self.call("Status", encode([(1, verbose)])))
        conditions: dict[str, tuple[bool, str, str]] = {}
        for raw in msg.get(1, []):  # RuntimeStatus
            assert isinstance(raw, bytes)
            for cond_raw in decode(raw).get(1, []):  # repeated RuntimeCondition
                assert isinstance(cond_raw, bytes)
                c = decode(cond_raw)
                conditions[_text(c.get(1, [b""])[0])] = (
                    bool(c.get(2, [0])[0]), _text(c.get(3, [b""])[0]),
                    _text(c.get(4, [b""])[0]))
        info = {}
        for entry in msg.get(2, []):  # map<string, string>
            assert isinstance(entry, bytes)
            kv = decode(entry)
            info[_text(kv.get(1, [b""])[0])] = _text(kv.get(2, [b""])[0])
        return RuntimeStatus(conditions, info)

    def close(self) -> None:
        self._channel.close()


# --- containerd, started for one test ---------------------------------------------


def unavailable() -> str:
    """Why a containerd cannot be started here ("" when it can)."""
    if os.geteuid() != 0:
        return "containerd needs root"
    if not os.access(CONTAINERD, os.X_OK):
        return "containerd is not installed (Debian: apt-get install containerd)"
    if not os.access(RUNC, os.X_OK):
        return "runc is not installed (Debian: apt-get install runc)"
    try:
        import grpc  # noqa: F401
    except ImportError:
        return "grpcio is not installed (the dev extra has it)"
    return ""


class Containerd:
    """A containerd child process whose CRI plugin uses ``conf_dir`` and ``bin_dir``."""

    def __init__(self, conf_dir: Path, bin_dir: Path) -> None:
        self.conf_dir, self.bin_dir = conf_dir, bin_dir
        self.tmp = Path(tempfile.mkdtemp(prefix="nct-containerd-"))
        self.socket = str(self.tmp / "containerd.sock")
        self.log_path = self.tmp / "containerd.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.client: CRIClient | None = None

    def config(self) -> str:
        t = self.tmp
        cri = '[plugins."io.containerd.grpc.v1.cri"'
        return f"""version = 2
root = "{t}/root"
state = "{t}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
                    "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "{self.socket}"
[ttrpc]
  address = "{self.socket}.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{t}/opt"
{cri}]
  restrict_oom_score_adj = true
{cri}.cni]
  bin_dir = "{self.bin_dir}"
  conf_dir = "{self.conf_dir}"
  max_conf_num = 1
{cri}.containerd]
  default_runtime_name = "runc"
{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
"""

    def __enter__(self) -> Containerd:
        try:
            cfg = self.tmp / "config.toml"
            cfg.write_text(self.config())
            with open(self.log_path, "wb") as log:
                self.proc = subprocess.Popen(
                    [CONTAINERD, "--config", str(cfg), "--log-level", "debug"],
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    start_new_session=True)
            self.client = CRIClient(self.socket)
            deadline = time.monotonic() + 30
            while True:  # serving once Status answers
                if self.proc.poll() is not None:
                    raise RuntimeError(f"containerd exited {self.proc.returncode}: "
                                       f"{self.log_tail()}")
                try:
                    self.client.status()
                    return self
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                time.sleep(0.05)
        except BaseException:
            self.__exit__(None, None, None)
            raise

    def status(self) -> RuntimeStatus:
        assert self.client is not None
        return self.client.status()

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def __exit__(self, *exc: object) -> None:
        if self.client is not None:
            self.client.close()
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)
