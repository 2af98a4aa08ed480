"""A small CRI client and a throw-away containerd for tests: drive the runtime as kubelet
does, over its unix socket, with no generated code.

The CRI messages are protobuf; the few a test needs are encoded and decoded by
field number (:mod:`netctl.devices.proto`, which the daemon's PodResources client
uses too), and sent through grpcio with identity serializers. :class:`Containerd`
starts Debian's containerd 1.6 as a child process with its own config and temporary
root, state and socket (runc; ``restrict_oom_score_adj``: root here lacks
CAP_SYS_RESOURCE), its CRI plugin reading CNI configs from ``conf_dir`` and plugins from
``bin_dir``; it stops and removes everything on exit, even after a failure.

What is wrapped: ``RuntimeService/Status`` (:meth:`CRIClient.status`: its
``NetworkReady`` condition and, verbose, the ``cniconfig`` info, which lists the
networks the CRI plugin has loaded from its conf dir); the pod sandbox's life as kubelet
drives it — ``RunPodSandbox`` with a :class:`SandboxConfig` (metadata, labels,
annotations, port mappings), ``PodSandboxStatus`` (:class:`SandboxStatus`: state, the
pod IPs, the netns from the verbose info), ``StopPodSandbox``, ``RemovePodSandbox``,
``ListPodSandbox``; and ``ImageService/ImageStatus``. The sandbox ("pause") image is
built here (:func:`write_image_tar`: a docker-archive tar of busybox-static, no
registry) and imported with ``ctr`` (:meth:`Containerd.import_image`) into the
``native`` snapshotter, which needs no overlay mounts.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from netctl_kit import protoencode
from netctl_kit.harness_podman import (  # noqa: F401  (tests call cri.write_image_tar)
    BUSYBOX,
    write_image_tar,
)

from netctl.devices import proto

CONTAINERD = shutil.which("containerd") or "/usr/bin/containerd"
CTR = shutil.which("ctr") or "/usr/bin/ctr"
RUNC = shutil.which("runc") or "/usr/sbin/runc"
K8S_NAMESPACE = "k8s.io"  # the containerd namespace the CRI plugin works in
PROTOCOLS = {"TCP": 0, "UDP": 1, "SCTP": 2}

Fields = protoencode.Fields
encode, decode = protoencode.encode, proto.decode
_str, _int, _msgs = proto.text, protoencode.integer, proto.messages


def _map(entries: dict[str, str]) -> list[Fields]:
    """A ``map<string, string>``'s entries, each its own message (key 1, value 2)."""
    return [[(1, k), (2, v)] for k, v in sorted(entries.items())]


def _read_map(msg: proto.Message, num: int) -> dict[str, str]:
    """A ``map<string, string>`` field."""
    return {_str(kv, 1): _str(kv, 2) for kv in _msgs(msg, num)}


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


@dataclass(frozen=True)
class PortMapping:
    container_port: int
    host_port: int
    protocol: str = "TCP"
    host_ip: str = ""


@dataclass(frozen=True)
class SandboxConfig:
    """``PodSandboxConfig`` as kubelet fills it for a pod: its metadata (name,
    namespace, uid, attempt), hostname, labels (kubelet adds the ``io.kubernetes.pod.*``
    ones), the pod's annotations and its ports with a ``hostPort``."""

    name: str
    namespace: str
    uid: str
    attempt: int = 0
    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    port_mappings: Sequence[PortMapping] = ()

    def fields(self) -> Fields:
        labels = {"io.kubernetes.pod.name": self.name,
                  "io.kubernetes.pod.namespace": self.namespace,
                  "io.kubernetes.pod.uid": self.uid, **self.labels}
        out: Fields = [(1, [(1, self.name), (2, self.uid), (3, self.namespace),
                            (4, self.attempt)]),
                       (2, self.name)]
        out += [(5, [(1, PROTOCOLS[p.protocol]), (2, p.container_port), (3, p.host_port),
                     (4, p.host_ip)]) for p in self.port_mappings]
        out += [(6, entry) for entry in _map(labels)]
        out += [(7, entry) for entry in _map(self.annotations)]
        return out


@dataclass(frozen=True)
class SandboxStatus:
    """What ``PodSandboxStatus`` (verbose) says of a sandbox."""

    id: str
    name: str
    namespace: str
    uid: str
    ready: bool  # state SANDBOX_READY (else NOTREADY)
    ips: list[str]  # the pod IPs: network.ip, then network.additional_ips
    info: dict[str, Any]  # the verbose "info" document

    @property
    def netns(self) -> str:
        """The path of the sandbox's network namespace ("" once it is gone)."""
        for ns in self.info.get("runtimeSpec", {}).get("linux", {}).get("namespaces", []):
            if ns.get("type") == "network":
                return str(ns.get("path", ""))
        return ""


class CRIClient:
    """CRI ``runtime.v1`` over a unix socket (containerd 1.6 serves v1 and v1alpha2)."""

    def __init__(self, socket_path: str) -> None:
        import grpc  # a test dependency only

        self._grpc = grpc
        self._channel = grpc.insecure_channel(f"unix://{socket_path}")
        self.netns_seen: set[str] = set()  # every sandbox netns a status named

    def call(self, method: str, request: bytes, timeout: float = 10.0,
             service: str = "RuntimeService") -> bytes:
        fn = self._channel.unary_unary(f"/runtime.v1.{service}/{method}",
                                       request_serializer=lambda b: b,
                                       response_deserializer=lambda b: b)
        return bytes(fn(request, timeout=timeout))

    def run_pod_sandbox(self, config: SandboxConfig, timeout: float = 120.0) -> str:
        """``RunPodSandbox``: the sandbox's id, once its network is up (the CNI ADD is
        part of the call)."""
        msg = decode(self.call("RunPodSandbox", encode([(1, config.fields())]), timeout))
        return _str(msg, 1)

    def pod_sandbox_status(self, sandbox_id: str) -> SandboxStatus:
        msg = decode(self.call("PodSandboxStatus", encode([(1, sandbox_id), (2, True)])))
        (status,) = _msgs(msg, 1)
        (meta,) = _msgs(status, 2) or [{}]
        net = (_msgs(status, 5) or [{}])[0]
        ips = [ip for ip in [_str(net, 1)] if ip] + [_str(p, 1) for p in _msgs(net, 2)]
        info = _read_map(msg, 2).get("info", "{}")
        found = SandboxStatus(_str(status, 1), _str(meta, 1), _str(meta, 3), _str(meta, 2),
                              _int(status, 3) == 0, ips, json.loads(info))
        if found.netns:
            self.netns_seen.add(found.netns)
        return found

    def stop_pod_sandbox(self, sandbox_id: str, timeout: float = 120.0) -> None:
        """``StopPodSandbox``: its containers killed, the network torn down (CNI DEL)."""
        self.call("StopPodSandbox", encode([(1, sandbox_id)]), timeout)

    def remove_pod_sandbox(self, sandbox_id: str, timeout: float = 120.0) -> None:
        self.call("RemovePodSandbox", encode([(1, sandbox_id)]), timeout)

    def list_pod_sandboxes(self) -> list[str]:
        """The ids of every sandbox the runtime has, ready or not."""
        msg = decode(self.call("ListPodSandbox", b""))
        return [_str(item, 1) for item in _msgs(msg, 1)]

    def image_id(self, image: str) -> str:
        """``ImageService/ImageStatus``: the image's id, "" when the runtime lacks it."""
        msg = decode(self.call("ImageStatus", encode([(1, [(1, image)])]),
                               service="ImageService"))
        return next((_str(img, 1) for img in _msgs(msg, 1)), "")

    def status(self, verbose: bool = True) -> RuntimeStatus:
        msg = decode(self.call("Status", encode([(1, verbose)])))
        conditions: dict[str, tuple[bool, str, str]] = {}
        for status in _msgs(msg, 1):  # RuntimeStatus
            for c in _msgs(status, 1):  # repeated RuntimeCondition
                conditions[_str(c, 1)] = (bool(_int(c, 2)), _str(c, 3), _str(c, 4))
        info = _read_map(msg, 2)
        return RuntimeStatus(conditions, info)

    def close(self) -> None:
        self._channel.close()


# --- a sandbox image, from busybox-static -----------------------------------------


# --- containerd, started for one test ---------------------------------------------


def unavailable(sandboxes: bool = False) -> str:
    """Why a containerd cannot be started here ("" when it can); with ``sandboxes``,
    also why it could not run pod sandboxes of :func:`write_image_tar`'s image."""
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
    if sandboxes and not os.access(CTR, os.X_OK):
        return "ctr is not installed (Debian: apt-get install containerd)"
    if sandboxes and not os.access(BUSYBOX, os.X_OK):
        return f"{BUSYBOX} is missing (Debian: apt-get install busybox-static)"
    return ""


def _argv(pid: str) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return [a.decode(errors="replace") for a in fh.read().split(b"\0")]
    except OSError:
        return []


def _mounts_under(top: Path) -> list[str]:
    """Mount points at or below ``top``, deepest first."""
    points = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            point = line.split()[4].replace("\\040", " ")
            if point == str(top) or point.startswith(f"{top}/"):
                points.append(point)
    return sorted(points, key=len, reverse=True)


class Containerd:
    """A containerd child process whose CRI plugin uses ``conf_dir`` and ``bin_dir``, and
    ``sandbox_image`` for pod sandboxes (imported with :meth:`import_image`).

    Everything it makes lives under its temporary dir (root, state, runc's root, the
    ``native`` snapshots), except the sandboxes' netns (``/var/run/netns/cni-*``) and
    their shims. Leaving, it stops and removes the sandboxes still there as kubelet
    would, then after containerd has stopped takes back by force what remains: runc
    containers, shims naming its socket, mounts under its dir, and the netns of its
    sandboxes (as ``PodSandboxStatus`` named them) still there."""

    def __init__(self, conf_dir: Path, bin_dir: Path, sandbox_image: str = "") -> None:
        self.conf_dir, self.bin_dir = conf_dir, bin_dir
        self.sandbox_image = sandbox_image
        self.tmp = Path(tempfile.mkdtemp(prefix="nct-containerd-"))
        self.socket = str(self.tmp / "containerd.sock")
        self.log_path = self.tmp / "containerd.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.client: CRIClient | None = None

    def config(self) -> str:
        t = self.tmp
        cri = '[plugins."io.containerd.grpc.v1.cri"'
        sandbox_image = f'\n  sandbox_image = "{self.sandbox_image}"' if self.sandbox_image \
            else ""
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
  restrict_oom_score_adj = true{sandbox_image}
{cri}.cni]
  bin_dir = "{self.bin_dir}"
  conf_dir = "{self.conf_dir}"
  max_conf_num = 1
{cri}.containerd]
  default_runtime_name = "runc"
  snapshotter = "native"
{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
{cri}.containerd.runtimes.runc.options]
  Root = "{t}/runc"
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

    @property
    def cri(self) -> CRIClient:
        assert self.client is not None, "containerd is not running"
        return self.client

    def status(self) -> RuntimeStatus:
        return self.cri.status()

    def import_image(self, tar: Path, name: str, timeout: float = 30) -> str:
        """``ctr images import`` into the CRI plugin's namespace and snapshotter; wait
        until the CRI plugin has it (it learns of images from containerd's events) and
        return its id."""
        proc = subprocess.run([CTR, "--address", self.socket, "--namespace", K8S_NAMESPACE,
                               "images", "import", "--snapshotter", "native", str(tar)],
                              capture_output=True, text=True, timeout=timeout, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"ctr images import exited {proc.returncode}: "
                               f"{proc.stdout} {proc.stderr}")
        deadline = time.monotonic() + timeout
        while not (image_id := self.cri.image_id(name)):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the CRI plugin does not list {name} after "
                                   f"{timeout}s: {self.log_tail()}")
            time.sleep(0.05)
        return image_id

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def _remove_sandboxes(self) -> None:
        """Stop and remove every sandbox, as kubelet would (best effort)."""
        try:
            ids = self.cri.list_pod_sandboxes()
        except Exception:
            return
        for sandbox_id in ids:
            try:
                self.cri.pod_sandbox_status(sandbox_id)  # its netns, to remove if need be
            except Exception:
                pass
            for step in (self.cri.stop_pod_sandbox, self.cri.remove_pod_sandbox):
                try:
                    step(sandbox_id, 30)
                except Exception:
                    break

    def _force_remove(self) -> None:
        """After containerd: runc's containers, the shims, mounts, the sandboxes' netns."""
        runc_root = self.tmp / "runc" / K8S_NAMESPACE
        if runc_root.is_dir():
            for cid in os.listdir(runc_root):
                subprocess.run([RUNC, "--root", str(runc_root), "delete", "--force", cid],
                               capture_output=True, timeout=30, check=False)
        for pid in os.listdir("/proc"):
            if pid.isdigit() and self.socket in _argv(pid):
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except OSError:
                    pass
        netns = sorted(self.client.netns_seen) if self.client is not None else []
        for path in [*_mounts_under(self.tmp), *(p for p in netns if os.path.exists(p))]:
            subprocess.run(["umount", "--lazy", path], capture_output=True, timeout=30,
                           check=False)
            if path in netns:
                Path(path).unlink(missing_ok=True)

    def __exit__(self, *exc: object) -> None:
        try:
            if self.client is not None and self.proc is not None and self.proc.poll() is None:
                self._remove_sandboxes()
        finally:
            if self.client is not None:
                self.client.close()
            if self.proc is not None and self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGTERM)
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                    self.proc.wait()
            self._force_remove()
            shutil.rmtree(self.tmp, ignore_errors=True)
