"""Real Kubernetes clusters on this machine, for end-to-end tests and benches: a control
plane and one node (:class:`RealNode` alone) or several (:class:`RealCluster`), as
``../shared/kube/README.md`` says it works here.

- The control plane (:class:`ControlPlane`), on the machine: etcd and kube-apiserver
  (:class:`~netctl_kit.kubefake.real.RealKube`, the ServiceAccount admission plugin on)
  listening on the node network's gateway (:data:`GATEWAY`), kube-controller-manager
  (service-account tokens, the root CA, certificate signing) and kube-scheduler, each with a
  kubeconfig holding the admin token. The node network: a bridge on the machine
  (``PREFIXn0``) holding the gateway.
- Each node in a **network namespace of its own** (named ``PREFIXns`` on the machine): its
  ``eth0`` a veth on the node network at ``NODE_NETWORK[10 + index]`` (its InternalIP,
  which the API server reaches its kubelet at), its default route the gateway; its pods'
  primary network a bridge with host-local on ``10.217.<index>.0/24``. Pods on different
  nodes reach each other over networks hung on ``eth0`` (macvlan).
- Each node in a **mount namespace of its own** (``unshare -m`` in its netns, held open by
  a ``sleep``; every node process is started with ``nsenter -t HOLDER -m -n``): ``/`` made
  rshared (netctl's DaemonSet mounts the host's ``/`` and ``/run/netns`` HostToContainer),
  a fresh tmpfs on ``/run``, overlays on ``/var/lib`` and ``/opt`` whose upper dirs are
  under the node's temporary dir, fresh dirs bound on
  ``/var/lib/{containerd,kubelet,cni,netctl}``, ``/opt/cni/bin`` (Debian's plugins copied
  in), ``/etc/cni/net.d`` (the primary CNI) and ``/var/log``, an ``/etc/hosts`` naming the
  node, ``/sys/class/net`` as its netns has it, and the machine-wide ``/proc/sys`` files
  kubelet would write covered by files of their own.
- Debian's containerd 1.6 (its root, state and socket the node's, runc,
  ``restrict_oom_score_adj``, a pause image built from busybox-static as ``sandbox_image``)
  and kubelet (cgroupfs, no QoS cgroups, no iptables chains, kubeAPIQPS 50, low eviction
  thresholds; authentication and authorization open). No kube-proxy, no cluster DNS.

:func:`install_netctl` (:meth:`RealNode.install_netctl`, :meth:`RealCluster.install_netctl`)
then installs netctl as ``docs/kubernetes.md`` says: ``make image``, the image saved by
podman and imported into each node with ``ctr -n k8s.io images import``, the
``netctl-api-server`` ConfigMap (the `kubernetes` Service's address is not routed here: the
API server's own), ``kubectl apply -f deploy/crds/ -f deploy/kubernetes/rbac.yaml -f
deploy/kubernetes/daemonset.yaml``, and waits for the DaemonSet to be Ready.

Helpers: :meth:`~RealNode.kubectl`, :meth:`~RealNode.apply`, :meth:`~RealNode.wait_ready`,
:meth:`~RealNode.import_image`, :meth:`~RealNode.network_status`,
:meth:`~RealNode.in_pod_netns`, :meth:`~RealNode.bridge_ports` and :meth:`~RealNode.links`
(in the node's netns), :meth:`~RealNode.stop_node` / :meth:`~RealNode.start_node` (a
reboot, or a node that died: everything on the node stopped, its ``/run`` replaced, so the
pods' netns are gone, its links but ``eth0`` too), :meth:`~RealNode.kill_kubelet`,
:meth:`~RealNode.kill_containerd`, :meth:`~RealNode.kill_daemon`;
:meth:`RealCluster.add_node`, :meth:`RealCluster.node_of` (a pod's node).
:func:`unavailable` says in one line what is missing.

``close`` takes everything back, also after a failure: the containers killed through
``ctr`` before containerd stops, then every process of the node by PID, kubelet's mounts,
the namespace's, the node's netns (its links with it), the control plane, the machine's
links named with the prefix (the node network's bridge), the cgroups of its containers and
the temporary dirs. One real cluster runs on a machine at a time (:data:`LOCK`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import ipaddress
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml

from . import kubebins
from .harness import HarnessError, bridge_ports, host_links, wait_for
from .harness_podman import BUSYBOX, write_image_tar
from .kubebins import KubeVersion
from .kubefake import real as realkube
from .kubefake.real import ROOT, RealKube, free_port
from .lifecycle import Opened

T = TypeVar("T")

CONTAINERD = "/usr/bin/containerd"
CTR = "/usr/bin/ctr"
RUNC = "/usr/sbin/runc"
SYSTEM_CNI = Path("/usr/lib/cni")  # Debian's plugins
SOCKET = "/run/containerd/containerd.sock"  # in the node's mount namespace
K8S_NS = "k8s.io"  # containerd's namespace for the CRI plugin
PAUSE_IMAGE = "localhost/netctl-node-pause:1"
BUSYBOX_IMAGE = "localhost/netctl-node-busybox:1"
MANIFESTS = ROOT / "deploy" / "kubernetes"
CRDS = ROOT / "deploy" / "crds"
PODMAN_ENV = ROOT / "deploy" / "image" / "podman-env"
DEVMOVE = ROOT / "tests" / "plugins" / "devmove"  # the SR-IOV-like test delegate
DEVMOVE_RECORD = "/var/lib/netctl-devmove"  # where it records what each call saw, on the node
NETWORKS = "k8s.v1.cni.cncf.io/networks"
NETWORK_STATUS = "k8s.v1.cni.cncf.io/network-status"
PRIMARY_CONF = "/etc/cni/net.d/10-primary.conflist"
PRIMARY_SUBNET = "10.217.0.0/16"  # the pods' primary network: 10.217.<node's index>.0/24
# the node network: a bridge on the machine (the control plane's address on it, the
# gateway), each node's eth0 in its own network namespace at .10, .11, …
NODE_NETWORK = ipaddress.IPv4Network("10.216.0.0/24")
GATEWAY = NODE_NETWORK[1]
# what kubelet writes on a node (vm/overcommit_memory 1, kernel/panic 10,
# kernel/panic_on_oops 1), the machine's (not its network namespace's): files of the
# node's own are bound over them, so the machine's settings stay as they are
SYSCTLS = {"vm/overcommit_memory": "1", "kernel/panic": "10", "kernel/panic_on_oops": "1"}
# node dirs bound fresh over the overlays (the machine's own content is not the node's)
# one real cluster at a time on a machine: each has the node network NODE_NETWORK
LOCK = Path("/run/lock/netctl-realnode.lock")
FRESH = ("/var/lib/containerd", "/var/lib/kubelet", "/var/lib/cni", "/var/lib/netctl",
         "/opt/cni/bin")


class NodeError(RuntimeError):
    pass


# -- the binaries --------------------------------------------------------------------------


def podman_env() -> dict[str, str]:
    """The environment ``make image`` runs podman with (``deploy/image/podman-env``)."""
    env = dict(os.environ)
    for line in PODMAN_ENV.read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            env[key] = value.replace("$(ROOT)", str(ROOT))
    conf = env.get("CONTAINERS_CONF")
    if conf and not Path(conf).exists():  # written by `make image` (deploy/image/lib.sh)
        del env["CONTAINERS_CONF"]
    return env


def netctl_image() -> str:
    """The image the DaemonSet names (``localhost/netctl:VERSION``)."""
    for doc in yaml.safe_load_all((MANIFESTS / "daemonset.yaml").read_text()):
        if doc and doc.get("kind") == "DaemonSet":
            return str(doc["spec"]["template"]["spec"]["containers"][0]["image"])
    raise NodeError("deploy/kubernetes/daemonset.yaml has no DaemonSet")


@functools.cache
def build_image() -> str:
    """``make image`` in this checkout (seconds when only netctl changed); the image's
    name. Once per process: the real-node modules of one test session share the build
    (a failed build is not remembered: the next call tries again)."""
    image = netctl_image()
    proc = subprocess.run(["make", "-C", str(ROOT), "image", f"IMAGE={image}"],
                          capture_output=True, text=True, timeout=1800, check=False)
    if proc.returncode != 0:
        raise NodeError(f"make image: {proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return image


def versions() -> list[KubeVersion | None]:
    """The Kubernetes versions a real-node test module runs on, oldest first: those
    :func:`netctl_kit.kubebins.selected` has with every node binary; ``[None]`` when there
    are none (the module's fixture then skips with :func:`unavailable`'s line)."""
    found = [v for v in kubebins.selected() if not v.lacks()]
    return list(found) if found else [None]


def unavailable(image: str | None = None, kube: KubeVersion | None = None) -> str | None:
    """Why a real node cannot run here, in one line (None when it can): no Kubernetes
    version (``kube``, else any selected one) with every binary
    (:mod:`netctl_kit.kubebins`), no etcd, no containerd…; with ``image``, also when
    podman's store lacks that image."""
    if os.geteuid() != 0:
        return "a real node needs root"
    if kube is not None and kube.lacks():
        return f"Kubernetes {kube} in {kube.dir} lacks {', '.join(kube.lacks())}"
    reason = (kube is None and kubebins.missing()) or realkube.unavailable()
    if reason:
        return reason
    for path, package in ((CONTAINERD, "containerd"), (CTR, "containerd"), (RUNC, "runc"),
                          (BUSYBOX, "busybox-static"), ("/usr/bin/unshare", "util-linux"),
                          ("/usr/bin/nsenter", "util-linux"), ("/usr/bin/podman", "podman"),
                          (str(SYSTEM_CNI / "bridge"), "containernetworking-plugins")):
        if not os.access(path, os.X_OK):
            return f"no {path}: apt-get install {package}"
    if not Path("/etc/cni/net.d").is_dir():
        return "no /etc/cni/net.d on the machine (the node binds its own there)"
    if image is not None:
        proc = subprocess.run(["podman", "image", "exists", image], env=podman_env(),
                              capture_output=True, timeout=120, check=False)
        if proc.returncode != 0:
            return f"no image {image} in podman's store: `make image` builds it"
    return None


# -- images without a registry -------------------------------------------------------------


def save_image(image: str, tar: Path) -> None:
    """podman's ``image`` saved as a docker-archive (what ``ctr images import`` takes)."""
    proc = subprocess.run(["podman", "save", "--format", "docker-archive", "-o", str(tar),
                           image], env=podman_env(), capture_output=True, text=True,
                          timeout=600, check=False)
    if proc.returncode != 0:
        raise NodeError(f"podman save {image}: {proc.stderr[-2000:]}")


# -- processes -------------------------------------------------------------------------------


def _mnt_ns(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return ""


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _argv(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return [a.decode(errors="replace") for a in fh.read().split(b"\0") if a]
    except OSError:
        return []


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _stop(proc: subprocess.Popen[bytes] | None, grace: float = 15) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


def _rmdir(path: str) -> bool:
    """Removed (or gone): True; still busy: False; non-empty or in use: True (left)."""
    try:
        os.rmdir(path)
    except FileNotFoundError:
        return True
    except OSError as exc:
        return exc.errno != errno.EBUSY
    return True


def _tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


def kubelet_by_version(minor: int) -> tuple[dict[str, Any], list[str]]:
    """What the kubelet of v1.``minor`` needs beyond the settings every version takes: more
    KubeletConfiguration fields, and flags.

    - Up to v1.26 the runtime is named by flags (``--container-runtime=remote``,
      ``--container-runtime-endpoint``), the pause image too
      (``--pod-infra-container-image``); v1.27 removed the first, later versions the
      last, and the endpoint is ``containerRuntimeEndpoint`` in the configuration (the
      pause image is then containerd's ``sandbox_image`` alone).
    - From v1.31 the kubelet refuses a host on cgroup v1 (these machines are) unless
      ``failCgroupV1: false``; it then runs, and warns with a ``CgroupV1`` Node event.
    """
    if minor < 27:
        return {}, ["--container-runtime=remote", f"--container-runtime-endpoint=unix://{SOCKET}",
                    f"--pod-infra-container-image={PAUSE_IMAGE}"]
    config: dict[str, Any] = {"containerRuntimeEndpoint": f"unix://{SOCKET}"}
    if minor >= 31:
        config["failCgroupV1"] = False
    return config, []


class _Api(Opened):
    """kubectl and the API as the cluster's admin: what a control plane and its nodes
    share (``kube``, ``admin_kubeconfig``, ``binary`` are theirs)."""

    kube: RealKube | None
    kube_version: KubeVersion

    @property
    def admin_kubeconfig(self) -> Path:
        raise NotImplementedError

    def describe(self) -> str:
        return ""

    def alive(self) -> bool:
        return True

    def binary(self, name: str) -> Path:
        """The cluster's Kubernetes version's ``name`` (kubelet, kubectl, …)."""
        path = self.kube_version.binary(name)
        if path is None:
            raise NodeError(f"{self.kube_version.dir} has no {name}")
        return path

    def kubectl(self, *args: str, data: str | None = None, timeout: float = 120,
                check: bool = True) -> str:
        """The real kubectl with the admin's kubeconfig; its stdout."""
        kubectl = self.binary("kubectl")
        proc = subprocess.run([str(kubectl), f"--kubeconfig={self.admin_kubeconfig}", *args],
                              input=data, capture_output=True, text=True, timeout=timeout,
                              check=False)
        if check and proc.returncode != 0:
            raise NodeError(f"kubectl {' '.join(args)}: exit {proc.returncode}: "
                            f"{proc.stderr[-2000:]}")
        return proc.stdout

    def apply(self, manifest: str | Path | Sequence[Mapping[str, Any]]) -> str:
        """``kubectl apply``: a file or dir, YAML text, or documents."""
        if isinstance(manifest, Path):
            return self.kubectl("apply", "-f", str(manifest))
        if isinstance(manifest, str):
            if "\n" not in manifest and Path(manifest).exists():
                return self.kubectl("apply", "-f", manifest)
            return self.kubectl("apply", "-f", "-", data=manifest)
        return self.kubectl("apply", "-f", "-", data=yaml.safe_dump_all(list(manifest)))

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """An object through the API (``kind``: a plural of the core or apps group)."""
        assert self.kube is not None
        found: dict[str, Any] | None = self.kube.request(
            "GET", _path(kind, namespace, name), ok_missing=True)
        return found

    def kube_list(self, kind: str, namespace: str | None = None,
                  selector: str = "") -> list[dict[str, Any]]:
        assert self.kube is not None
        path = _path(kind, namespace)
        if selector:
            path += f"?labelSelector={urllib.parse.quote(selector)}"
        items: list[dict[str, Any]] = self.kube.request("GET", path)["items"]
        return items

    def ready(self, kind: str, name: str, namespace: str | None = "default") -> bool:
        obj = self.get(_plural(kind), name, namespace)
        return obj is not None and is_ready(kind, obj)

    def wait_ready(self, kind: str, name: str, namespace: str | None = "default",
                   timeout: float = 120) -> None:
        """Until the object is Ready: a pod or node its condition; a Deployment or a
        StatefulSet all its replicas ready and updated (and no others); a DaemonSet every
        scheduled pod ready."""
        try:
            wait_for(lambda: self.alive() and self.ready(kind, name, namespace), timeout,
                     f"{kind} {namespace}/{name} Ready", interval=0.25)
        except HarnessError as exc:
            raise NodeError(f"{exc}\n{self.kubectl('get', 'pods', '-A', '-o', 'wide')}\n"
                            f"{self.kubectl('get', 'events', '-A', check=False)[-4000:]}\n"
                            f"{self.describe()}") from exc

    def wait_pods_gone(self, namespace: str, selector: str, timeout: float = 120) -> None:
        wait_for(lambda: self.alive() and not self.kube_list("pods", namespace, selector),
                 timeout, f"pods {selector} in {namespace} gone", interval=0.25)

    def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return self.kube_list("pods", namespace, selector)


def _spawn(procs: dict[str, subprocess.Popen[bytes]], logs: Path, name: str,
           argv: Sequence[str]) -> None:
    with open(logs / f"{name}.log", "ab") as log, realkube.signals_unblocked():
        procs[name] = subprocess.Popen(list(argv), stdout=log, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, start_new_session=True)


def _check_running(procs: Mapping[str, subprocess.Popen[bytes]], logs: Path,
                   name: str) -> None:
    proc = procs.get(name)
    if proc is not None and proc.poll() is not None:
        raise NodeError(f"{name} exited {proc.returncode}:\n{_tail(logs / f'{name}.log')}")


def _machine_links(prefix: str) -> None:
    """The machine's links named ``prefix…`` deleted, ports left on them first."""
    out = subprocess.run(["ip", "-j", "link", "show"], capture_output=True, text=True,
                         timeout=30, check=True).stdout
    links = json.loads(out)
    ours = {link["ifname"] for link in links if link["ifname"].startswith(prefix)}
    for link in links:
        if link.get("master") in ours:
            subprocess.run(["ip", "link", "del", link["ifname"]], capture_output=True,
                           timeout=30, check=False)
    for name in ours:
        subprocess.run(["ip", "link", "del", name], capture_output=True, timeout=30,
                       check=False)


def _stale_clusters() -> None:
    """What a cluster killed before its close left on the machine (the lock is held: no
    other cluster runs): its nodes' network namespaces and its node network's bridge (the
    gateway's address on a second bridge would take the nodes' traffic)."""
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                           timeout=30, check=False).stdout.split()
    for name in names:
        if re.fullmatch(r"nr[cn][0-9a-f]+\d?ns", name):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30,
                           check=False)
    out = subprocess.run(["ip", "-j", "addr", "show"], capture_output=True, text=True,
                         timeout=30, check=False).stdout
    for link in json.loads(out or "[]"):
        if re.fullmatch(r"nr[cn][0-9a-f]+n0", link["ifname"]) and any(
                a.get("local") == str(GATEWAY) for a in link.get("addr_info", [])):
            _machine_links(link["ifname"])


class ControlPlane(_Api):
    """The cluster's control plane on the machine — etcd, kube-apiserver (listening on
    the node network's gateway, :data:`GATEWAY`), kube-controller-manager and
    kube-scheduler — and the node network: the bridge ``PREFIXn0`` holding the gateway,
    which each node's ``eth0`` hangs on. Takes the machine's :data:`LOCK`."""

    def __init__(self, kube: KubeVersion, prefix: str) -> None:
        self.kube_version = kube
        self.prefix = prefix
        self.bridge = f"{prefix}n0"
        self.dir = Path(tempfile.mkdtemp(prefix="netctl-cluster-"))
        self.logs = self.dir / "logs"
        self.kube: RealKube | None = None
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._lock_fd: int | None = None
        self.timings: dict[str, float] = {}

    @property
    def admin_kubeconfig(self) -> Path:
        return self.dir / "admin.kubeconfig"

    @property
    def image_tar(self) -> Path:
        """netctl's image as installed (:func:`install_netctl`), for nodes added later."""
        return self.dir / "netctl-image.tar"

    def _open(self) -> None:
        t0 = time.monotonic()
        self._lock()
        self.logs.mkdir()
        _stale_clusters()
        for args in (("link", "add", self.bridge, "type", "bridge"),
                     ("addr", "add", f"{GATEWAY}/{NODE_NETWORK.prefixlen}", "dev",
                      self.bridge),
                     ("link", "set", self.bridge, "up")):
            subprocess.run(["ip", *args], capture_output=True, timeout=30, check=True)
        self.kube = RealKube(service_accounts=True, address=str(GATEWAY),
                             kube=self.kube_version)
        self.kube.open()
        self.kube.kubeconfig(self.admin_kubeconfig, token=self.kube.admin_token,
                             namespace="default")
        self._start_controllers()
        self.timings["control plane"] = time.monotonic() - t0

    def close(self) -> None:
        errors: list[str] = []
        for name in ("kube-scheduler", "kube-controller-manager"):  # no state: no grace
            _stop(self._procs.pop(name, None), 1)
        if self.kube is not None:
            try:
                self.kube.close()
            except Exception as exc:
                errors.append(f"the API server: {exc}")
            self.kube = None
        try:
            _machine_links(self.prefix)
        except Exception as exc:
            errors.append(f"links: {exc}")
        shutil.rmtree(self.dir, ignore_errors=True)
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # the flock goes with the descriptor
            self._lock_fd = None
        if errors:
            raise NodeError("; ".join(errors))

    def _lock(self) -> None:
        """The machine's real-cluster lock (:data:`LOCK`), held until :meth:`close`;
        another cluster open on the machine is an error naming its holder, not a wait."""
        LOCK.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip()
            os.close(fd)
            raise NodeError(f"another real cluster runs on this machine ({holder or 'unknown'}; "
                            f"{LOCK}): each has the node network {NODE_NETWORK}, so one at "
                            "a time") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}, links {self.prefix}*\n".encode(), 0)
        self._lock_fd = fd

    def check_running(self, name: str) -> None:
        _check_running(self._procs, self.logs, name)

    def alive(self) -> bool:
        for name in ("kube-controller-manager", "kube-scheduler"):
            self.check_running(name)
        return True

    def describe(self) -> str:
        return f"--- kube-controller-manager:\n" \
               f"{_tail(self.logs / 'kube-controller-manager.log', 2000)}"

    def _start_controllers(self) -> None:
        assert self.kube is not None
        k = self.kube.dir
        config = str(self.admin_kubeconfig)
        _spawn(self._procs, self.logs, "kube-controller-manager", [
            str(self.binary("kube-controller-manager")), f"--kubeconfig={config}",
            f"--authentication-kubeconfig={config}", f"--authorization-kubeconfig={config}",
            "--bind-address=127.0.0.1", f"--secure-port={free_port()}",
            f"--cert-dir={self.dir / 'cm-certs'}", "--leader-elect=false",
            f"--service-account-private-key-file={k}/sa.key", f"--root-ca-file={k}/ca.crt",
            f"--cluster-signing-cert-file={k}/ca.crt", f"--cluster-signing-key-file={k}/ca.key",
            "--use-service-account-credentials=false",
            "--controllers=*,-nodeipam,-cloud-node-lifecycle,-service,-route", "--v=1"])
        _spawn(self._procs, self.logs, "kube-scheduler", [
            str(self.binary("kube-scheduler")), f"--kubeconfig={config}",
            f"--authentication-kubeconfig={config}", f"--authorization-kubeconfig={config}",
            "--bind-address=127.0.0.1", f"--secure-port={free_port()}",
            f"--cert-dir={self.dir / 'sched-certs'}", "--leader-elect=false", "--v=1"])


class _OfControl(_Api):
    """The API of a :class:`ControlPlane`'s cluster (a node of it, or the whole)."""

    control: ControlPlane

    @property
    def kube(self) -> RealKube | None:  # type: ignore[override]
        return self.control.kube

    @property
    def admin_kubeconfig(self) -> Path:
        return self.control.admin_kubeconfig


class RealNode(_OfControl):
    """One node — its own kubelet, containerd, mount and network namespaces — of a
    control plane: a :class:`RealCluster`'s, or, without ``control``, one of its own that
    it opens and closes with itself (a single-node cluster). ``open`` starts it (the node
    Ready), ``close`` removes everything it made; :meth:`install_netctl` puts netctl on
    its cluster."""

    def __init__(self, name: str = "", *, prefix: str = "", max_pods: int = 110,
                 kube: KubeVersion | None = None, control: ControlPlane | None = None,
                 index: int = 0, preload: Sequence[Path] = ()) -> None:
        """``kube``: the Kubernetes version (by default the newest selected one,
        :func:`netctl_kit.kubebins.pick`; a ``control`` plane's when given); ``max_pods``:
        kubelet's maxPods (its default 110; the DaemonSet's pod counts); ``index``: the
        node's number in its cluster (its addresses: ``NODE_NETWORK[10 + index]``, pods
        ``10.217.<index>.0/24``); ``preload``: image tars imported before kubelet starts."""
        picked = control.kube_version if control is not None else kube or kubebins.pick()
        if picked is None:
            raise NodeError(kubebins.missing())
        self.kube_version: KubeVersion = picked
        tag = secrets.token_hex(2)
        self.max_pods = max_pods
        self.index = index
        self.name = name or f"netctl-node-{tag}"
        # links the node and its tests make are named prefix… (at most 15 characters: 7
        # here, 8 left): on the machine, close() removes them; in the node's netns, they
        # go with it
        self.prefix = prefix or f"nrn{tag}"
        self.netns = f"{self.prefix}ns"  # the node's network namespace, named on the machine
        self.address = NODE_NETWORK[10 + index]  # its eth0's, its InternalIP
        self.primary_subnet = ipaddress.IPv4Network(f"10.217.{index}.0/24")
        self.primary_bridge = f"{self.prefix}p0"
        self.own_control = control is None
        self.control = control if control is not None else ControlPlane(picked, self.prefix)
        self.dir = Path(tempfile.mkdtemp(prefix="netctl-node-"))  # on disk: overlay uppers
        self.logs = self.dir / "logs"
        self.holder: subprocess.Popen[bytes] | None = None
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self.timings: dict[str, float] = {}
        self._container_ids: set[str] = set()  # seen: their cgroups are removed at close
        self._cgroups_before: set[str] = set()
        self.preload = list(preload)

    # -- life cycle -----------------------------------------------------------------------

    def _open(self) -> None:
        t0 = time.monotonic()
        if self.own_control:
            self.control.open()
            self.timings["control plane"] = self.control.timings["control plane"]
        self.logs.mkdir()
        self._cgroups_before = set(self._cgroup_dirs())
        t2 = time.monotonic()
        self._make_namespace()
        self._write_node_config()
        self._start_containerd()
        for image, cmd in ((PAUSE_IMAGE, ["sleep", "2147483647"]),
                           (BUSYBOX_IMAGE, ["sh"])):
            tar = self.dir / f"{image.rsplit('/', 1)[1].replace(':', '-')}.tar"
            write_image_tar(tar, image, cmd)
            self.import_tar(tar)
            tar.unlink()
        for tar in self.preload:
            self.import_tar(tar)
        self._start_kubelet()
        self.wait_node_ready()
        # pods need their namespace's default ServiceAccount (the controller-manager's)
        wait_for(lambda: self.kube is not None and self.kube.request(
            "GET", "/api/v1/namespaces/default/serviceaccounts/default", ok_missing=True),
            60, "the default ServiceAccount")
        self.timings["node ready"] = time.monotonic() - t2
        self.timings["open"] = time.monotonic() - t0

    def close(self) -> None:
        """Everything of the node stopped and removed, whatever state it is in (and its
        own control plane)."""
        errors: list[str] = []

        def step(what: str, fn: Callable[[], object]) -> None:
            try:
                fn()
            except Exception as exc:  # go on: the rest must be taken back too
                errors.append(f"{what}: {exc}")

        if self.holder is not None:
            step("the node's processes", lambda: self.stop_node_processes(graceful=True))
            step("the node's mounts", self._unmount_node)
            ns = _mnt_ns(self.holder.pid)
            step("the namespace holder", lambda: _stop(self.holder, 5))
            # anything still in the node's namespace (nothing should be)
            step("leftovers", lambda: self._kill_all(lambda: [
                p for p in _pids() if ns and _mnt_ns(p) == ns]))
            self.holder = None
        # its links go with it (eth0's peer on the machine too)
        subprocess.run(["ip", "netns", "del", self.netns], capture_output=True, timeout=30,
                       check=False)
        step("links", functools.partial(_machine_links, self.prefix))
        # the CRI plugin's dirs name every container and sandbox it still knows of
        cri = self.dir / "node" / "fresh-var-lib-containerd" / "io.containerd.grpc.v1.cri"
        for kind in ("containers", "sandboxes"):
            with contextlib.suppress(OSError):
                self._container_ids.update(os.listdir(cri / kind))
        step("cgroups", self._remove_cgroups)
        shutil.rmtree(self.dir, ignore_errors=True)
        if self.own_control:
            step("the control plane", self.control.close)
        if errors:
            raise NodeError("; ".join(errors))

    # -- the namespace ----------------------------------------------------------------------

    def nsenter(self) -> list[str]:
        assert self.holder is not None, "the node is not open"
        return ["nsenter", "-t", str(self.holder.pid), "-m", "-n", "--"]

    def node_path(self, path: str) -> Path:
        """Where the node's ``path`` is seen from the machine (its root, through the
        holder's ``/proc/PID/root``)."""
        assert self.holder is not None, "the node is not open"
        return Path(f"/proc/{self.holder.pid}/root{path}")

    def in_node(self, *argv: str, check: bool = True, timeout: float = 120,
                data: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        """``argv`` run in the node's mount and network namespaces."""
        proc = subprocess.run([*self.nsenter(), *argv], input=data, capture_output=True,
                              timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise NodeError(f"{' '.join(argv[:4])}… exited {proc.returncode}: "
                            f"{proc.stderr.decode(errors='replace')[-2000:]}"
                            f"{proc.stdout.decode(errors='replace')[-500:]}")
        return proc

    def bridge_ports(self, bridge: str) -> list[str]:
        """The ports of a bridge in the node's network namespace."""
        return bridge_ports(bridge, self.netns)

    def links(self) -> list[str]:
        """The links in the node's network namespace."""
        return host_links("", self.netns)

    def _make_network(self) -> None:
        """The node's network namespace (named :attr:`netns` on the machine): ``eth0`` at
        :attr:`address` on the control plane's bridge, its default route the gateway."""
        def ip(*args: str) -> None:
            proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30,
                                  check=False)
            if proc.returncode != 0:
                raise NodeError(f"ip {' '.join(args)}: {proc.stderr.strip()}")
        subprocess.run(["ip", "netns", "del", self.netns], capture_output=True, timeout=30,
                       check=False)  # a run killed before its close
        ip("netns", "add", self.netns)
        host = f"{self.prefix}h0"
        ip("link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", self.netns)
        ip("link", "set", host, "master", self.control.bridge, "up")
        n = ("-n", self.netns)
        ip(*n, "addr", "add", f"{self.address}/{NODE_NETWORK.prefixlen}", "dev", "eth0")
        ip(*n, "link", "set", "lo", "up")
        ip(*n, "link", "set", "eth0", "up")
        ip(*n, "route", "add", "default", "via", str(GATEWAY))

    def _make_namespace(self) -> None:
        d = self.dir
        self._make_network()
        with open(self.logs / "holder.log", "wb") as log, realkube.signals_unblocked():
            self.holder = subprocess.Popen(
                ["nsenter", f"--net=/run/netns/{self.netns}", "--", "unshare", "-m",
                 "--propagation", "private", "--", "sleep", "infinity"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        own = _mnt_ns(os.getpid())
        holder = self.holder
        wait_for(lambda: holder.poll() is None and _mnt_ns(holder.pid) not in ("", own)
                 and _argv(holder.pid)[:1] == ["sleep"], 10, "unshare's mount namespace")
        for sub in ("varlib.upper", "varlib.work", "opt.upper", "opt.work", "net.d", "log",
                    "sys", "sysfs", *(f"fresh{p.replace('/', '-')}" for p in FRESH)):
            (d / "node" / sub).mkdir(parents=True)
        (d / "node" / "hosts").write_text(
            f"127.0.0.1 localhost\n{self.address} {self.name}\n::1 localhost ip6-localhost\n")
        binds = [(str(d / "node" / "net.d"), "/etc/cni/net.d"),
                 (str(d / "node" / "log"), "/var/log"),
                 (str(d / "node" / "hosts"), "/etc/hosts")]
        for key, value in SYSCTLS.items():
            f = d / "node" / "sys" / key.replace("/", "-")
            f.write_text(f"{value}\n")
            binds.append((str(f), f"/proc/sys/{key}"))
        n = d / "node"
        lines = [
            "set -e",
            "mount --make-rshared /",
            "mount -t tmpfs -o mode=0755 tmpfs /run",
            f"mount -t overlay overlay -o lowerdir=/var/lib,upperdir={n}/varlib.upper,"
            f"workdir={n}/varlib.work /var/lib",
            f"mount -t overlay overlay -o lowerdir=/opt,upperdir={n}/opt.upper,"
            f"workdir={n}/opt.work /opt",
        ]
        for p in FRESH:
            lines += [f"mkdir -p {p}", f"mount --bind {n}/fresh{p.replace('/', '-')} {p}"]
        lines += [f"mount --bind {src} {dst}" for src, dst in binds]
        # the network's part of /sys as the node's netns has it (the rest, cgroups among
        # them, the machine's)
        lines += [f"mount -t sysfs sysfs {n}/sysfs",
                  f"mount --bind {n}/sysfs/class/net /sys/class/net",
                  f"mount --bind {n}/sysfs/devices/virtual/net /sys/devices/virtual/net",
                  f"umount {n}/sysfs"]
        self.in_node("sh", "-c", "\n".join(lines))
        for plugin in sorted(os.listdir(SYSTEM_CNI)):
            shutil.copy2(SYSTEM_CNI / plugin, n / "fresh-opt-cni-bin" / plugin)
        (n / "net.d" / "10-primary.conflist").write_text(json.dumps({
            "cniVersion": "1.0.0", "name": "primary", "plugins": [{
                "type": "bridge", "bridge": self.primary_bridge, "isGateway": True,
                "ipam": {"type": "host-local",
                         "ranges": [[{"subnet": str(self.primary_subnet)}]]}}]},
            indent=1) + "\n")

    def _node_mounts(self, under: str) -> list[str]:
        """Mount points at or below ``under`` in the node's namespace, deepest first."""
        assert self.holder is not None
        found = []
        with open(f"/proc/{self.holder.pid}/mountinfo") as fh:
            for line in fh:
                point = line.split()[4].replace("\\040", " ")
                if point == under or point.startswith(under.rstrip("/") + "/"):
                    found.append(point)
        return sorted(found, key=lambda p: p.count("/"), reverse=True)

    def _umount(self, points: Sequence[str]) -> None:
        if points:
            self.in_node("umount", "--lazy", *points, check=False)

    def _unmount_node(self) -> None:
        """kubelet's mounts (its root dir), then the namespace's own, deepest first."""
        if self.holder is None or self.holder.poll() is not None:
            return
        self._umount(self._node_mounts("/var/lib/kubelet"))
        self._umount([p for p in self._node_mounts("/") if p.startswith(
            ("/run", "/var/lib", "/opt", "/etc/cni", "/var/log", "/etc/hosts", "/sys/class/net",
             "/sys/devices/virtual/net",
             *(f"/proc/sys/{k}" for k in SYSCTLS)))])

    # -- the node's runtime and kubelet ---------------------------------------------------------

    def _write_node_config(self) -> None:
        cri = '[plugins."io.containerd.grpc.v1.cri"'
        (self.dir / "containerd.toml").write_text(f"""version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
                    "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "{SOCKET}"
[ttrpc]
  address = "{SOCKET}.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "/opt/containerd"
{cri}]
  restrict_oom_score_adj = true
  sandbox_image = "{PAUSE_IMAGE}"
{cri}.cni]
  bin_dir = "/opt/cni/bin"
  conf_dir = "/etc/cni/net.d"
  max_conf_num = 1
{cri}.containerd]
  default_runtime_name = "runc"
  snapshotter = "overlayfs"
{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
""")
        assert self.kube is not None
        self.kube.kubeconfig(self.dir / "kubelet.kubeconfig", token=self.kube.admin_token)
        (self.dir / "kubelet.yaml").write_text(yaml.safe_dump({
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            # in the node's netns: the API server reaches it at its InternalIP
            "address": str(self.address), "port": 10250, "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1", "healthzPort": 10248,
            "cgroupDriver": "cgroupfs", "cgroupsPerQOS": False, "enforceNodeAllocatable": [],
            "failSwapOn": False, "makeIPTablesUtilChains": False,
            "kubeAPIQPS": 50, "kubeAPIBurst": 100, "maxPods": self.max_pods,
            "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "evictionHard": {"memory.available": "50Mi", "nodefs.available": "1%",
                             "nodefs.inodesFree": "1%", "imagefs.available": "1%"},
            # every image is imported (no registry): never collected
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False, "resolvConf": "/etc/resolv.conf",
            "nodeStatusUpdateFrequency": "4s", "syncFrequency": "10s",
            "fileCheckFrequency": "10s", "staticPodPath": "",
            **kubelet_by_version(self.kube_version.minor)[0],
        }))

    def _start_containerd(self) -> None:
        self._spawn("containerd", [CONTAINERD, "--config", str(self.dir / "containerd.toml"),
                                   "--log-level", "info"])

        def serving() -> bool:
            self._check_running("containerd")
            return self.in_node(CTR, "--address", SOCKET, "version", check=False,
                                timeout=30).returncode == 0
        wait_for(serving, 30, "containerd to answer")

    def _start_kubelet(self) -> None:
        kubelet = self.binary("kubelet")
        self._spawn("kubelet", [
            str(kubelet), f"--config={self.dir / 'kubelet.yaml'}",
            f"--kubeconfig={self.dir / 'kubelet.kubeconfig'}",
            *kubelet_by_version(self.kube_version.minor)[1], "--root-dir=/var/lib/kubelet",
            f"--hostname-override={self.name}", f"--node-ip={self.address}",
            "--register-node=true", "--v=1"])

    def _spawn(self, name: str, argv: Sequence[str]) -> None:
        _spawn(self._procs, self.logs, name, [*self.nsenter(), *argv])

    def _check_running(self, name: str) -> None:
        _check_running(self._procs, self.logs, name)

    def alive(self) -> bool:
        for name in ("kubelet", "containerd"):
            self._check_running(name)
        return self.control.alive()

    def wait_node_ready(self, timeout: float = 90) -> None:
        def ready() -> bool:
            self._check_running("kubelet")
            self._check_running("containerd")
            node = self.get("nodes", self.name)
            conds = {c["type"]: c["status"] for c in
                     ((node or {}).get("status") or {}).get("conditions") or []}
            return conds.get("Ready") == "True"
        try:
            wait_for(ready, timeout, f"node {self.name} Ready", interval=0.25)
        except HarnessError as exc:
            raise NodeError(f"{exc}\n{self.describe()}") from exc

    def describe(self) -> str:
        """The tails of the node's logs, for a failure's message."""
        return "\n".join([*(f"--- {name}:\n{_tail(self.logs / f'{name}.log', 2000)}"
                            for name in ("kubelet", "containerd")), self.control.describe()])

    # -- images ----------------------------------------------------------------------------------

    def import_tar(self, tar: Path) -> None:
        """``ctr -n k8s.io images import`` in the node (a docker-archive or OCI tar)."""
        self.in_node(CTR, "--address", SOCKET, "-n", K8S_NS, "images", "import", str(tar),
                     timeout=600)

    def import_image(self, image: str) -> None:
        """podman's ``image`` into the node's containerd, as docs/kubernetes.md says:
        ``podman save --format docker-archive``, then ``ctr -n k8s.io images import``."""
        tar = self.dir / "image.tar"
        try:
            save_image(image, tar)
            self.import_tar(tar)
        finally:
            tar.unlink(missing_ok=True)

    # -- netctl ---------------------------------------------------------------------------------

    def install_netctl(self, *, build: bool = True,
                       daemonset: Sequence[Mapping[str, Any]] | None = None) -> str:
        """netctl on the node's cluster as docs/kubernetes.md installs it
        (:func:`install_netctl`)."""
        return install_netctl([self], build=build, daemonset=daemonset)

    def daemon_pod(self) -> str:
        """The name of the DaemonSet's running pod on this node."""
        pods = self.kube_list("pods", "kube-system", "app.kubernetes.io/name=netctl")
        running = [p["metadata"]["name"] for p in pods
                   if (p.get("status") or {}).get("phase") == "Running"
                   and p["spec"].get("nodeName") == self.name
                   and not p["metadata"].get("deletionTimestamp")]
        if len(running) != 1:
            raise NodeError(f"netctl's pods running: {running}")
        return str(running[0])

    def netctl(self, *args: str, timeout: float = 60, check: bool = True) -> str:
        """``netctl ARGS`` in the daemon's container (``kubectl exec``): its output. The API
        server reaches the kubelet for an exec, and the kubelet the runtime: while a kubelet
        just restarted (or killed by a test) does not listen yet, or still waits to dial a
        restarted containerd again (kubelet v1.24's runtime connection backs off after
        containerd is killed: "Unavailable … connection refused"), or the daemon's container
        is being restarted after a kill ("container not found"), the exec is tried again,
        up to 30 s."""
        def attempt() -> list[str]:
            try:
                return [self.kubectl("-n", "kube-system", "exec", self.daemon_pod(), "-c",
                                    "netctl", "--", "netctl", *args, timeout=timeout,
                                    check=check)]
            except NodeError as exc:
                if not any(s in str(exc) for s in ("error dialing backend",
                                                   "code = Unavailable",
                                                   "container not found")):
                    raise
                self._check_running("kubelet")
                self._check_running("containerd")
                return []
        return wait_for(attempt, 30, f"kubectl exec netctl {' '.join(args)}", 0.5)[0]

    def pools(self) -> list[dict[str, Any]]:
        """``netctl ipam pools --json`` in the daemon's container: every pool's range,
        size, in_use, reserved, free."""
        pools: list[dict[str, Any]] = json.loads(self.netctl("ipam", "pools", "--json"))["pools"]
        return pools

    def held(self) -> dict[str, int]:
        """Addresses netctl holds on the node: range → in use (the pools holding any)."""
        return {str(p["range"]): int(p["in_use"]) for p in self.pools() if int(p["in_use"])}

    def device_network(self, name: str, namespace: str, resource: str,
                       subnet: ipaddress.IPv4Network) -> None:
        """A device network on the node: ``tests/plugins/devmove`` (it moves the device its
        ``deviceID`` names into the pod, as SR-IOV CNI moves a VF, and records each call
        under :data:`DEVMOVE_RECORD`) copied into ``/opt/cni/bin``, and a NAD ``name`` of
        ``resource`` running it with netctl-ipam on ``subnet``."""
        shutil.copy(DEVMOVE, self.node_path("/opt/cni/bin/devmove"))
        self.apply([{
            "apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": name, "namespace": namespace,
                         "annotations": {"k8s.v1.cni.cncf.io/resourceName": resource}},
            "spec": {"config": json.dumps({"cniVersion": "1.0.0", "name": name, "plugins": [{
                "type": "devmove", "record": DEVMOVE_RECORD,
                "capabilities": {"deviceID": True, "CNIDeviceInfoFile": True},
                "ipam": {"type": "netctl-ipam", "range": str(subnet)}}]})}}])

    # -- pods ----------------------------------------------------------------------------------

    def network_status(self, pod: Mapping[str, Any]) -> list[dict[str, Any]]:
        """A pod's ``k8s.v1.cni.cncf.io/network-status`` ([] when absent)."""
        raw = (pod["metadata"].get("annotations") or {}).get(NETWORK_STATUS)
        return list(json.loads(raw)) if raw else []

    def check_networks(self, pod: Mapping[str, Any], want: Mapping[str, str],
                       subnets: Mapping[str, ipaddress.IPv4Network]) -> dict[str, str]:
        """Assert that the pod's network-status names ``want`` (interface → network:
        ``primary`` for eth0, ``NS/NAD`` for the others, eth0 the default) and says what
        its netns holds: each interface's address in its network's subnet (``subnets``:
        by the network's name without its namespace) and its MAC, no other interface but
        lo, eth0's address the pod's IP. Returns interface → address."""
        name = pod["metadata"]["name"]
        status = self.network_status(pod)
        by_if = {e["interface"]: e for e in status if e.get("interface")}
        assert {i: e["name"] for i, e in by_if.items()} == dict(want), (name, status)
        assert by_if["eth0"].get("default") is True, status
        links = self.pod_links(pod)
        assert set(links) == {"lo", *want}, (name, links)
        out = {}
        for ifname, entry in by_if.items():
            assert sorted(entry.get("ips", [])) == links[ifname]["ips"], (name, ifname, entry,
                                                                         links[ifname])
            assert entry.get("mac", "").lower() == links[ifname]["mac"].lower(), (name, entry)
            (address,) = entry["ips"]
            subnet = subnets[entry["name"].split("/")[-1]]
            assert ipaddress.ip_address(address) in subnet, (name, ifname, address)
            out[ifname] = address
        assert pod["status"]["podIP"] == out["eth0"], (name, pod["status"]["podIP"])
        return out

    def pod_pid(self, pod: Mapping[str, Any]) -> int:
        """The PID (on the machine) of the pod's first container: in its network
        namespace."""
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        cid = next((s["containerID"].split("://", 1)[1] for s in statuses
                    if s.get("containerID") and "running" in (s.get("state") or {})), "")
        if not cid:
            raise NodeError(f"pod {pod['metadata']['name']}: no running container")
        self._container_ids.add(cid)
        pid_file = self.node_path(f"/run/containerd/io.containerd.runtime.v2.task/{K8S_NS}/"
                                  f"{cid}/init.pid")
        return int(pid_file.read_text())

    def in_pod_netns(self, pod: Mapping[str, Any], *argv: str) -> str:
        """``argv`` run (from the machine) in the pod's network namespace; its stdout."""
        proc = subprocess.run(["nsenter", "-t", str(self.pod_pid(pod)), "-n", "--", *argv],
                              capture_output=True, text=True, timeout=60, check=False)
        if proc.returncode != 0:
            raise NodeError(f"{argv} in {pod['metadata']['name']}'s netns: {proc.stderr}")
        return proc.stdout

    def pod_links(self, pod: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
        """interface → ``{"mac", "ips"}`` (its global addresses) in the pod's netns (``ip -j
        addr``)."""
        out: dict[str, dict[str, Any]] = {}
        for link in json.loads(self.in_pod_netns(pod, "ip", "-j", "addr", "show")):
            out[link["ifname"]] = {"mac": link.get("address", ""), "ips": sorted(
                a["local"] for a in link.get("addr_info", []) if a.get("scope") == "global")}
        return out

    def sandbox_netns(self) -> list[str]:
        """The pods' network namespaces the node's ``/run/netns`` holds."""
        try:
            return sorted(os.listdir(self.node_path("/run/netns")))
        except FileNotFoundError:
            return []

    # -- failures ------------------------------------------------------------------------------

    def kill_kubelet(self) -> None:
        """SIGKILL kubelet, then start it again."""
        proc = self._procs.pop("kubelet")
        proc.kill()
        proc.wait()
        self._start_kubelet()

    def kill_containerd(self) -> None:
        """SIGKILL containerd (its shims and containers go on), then start it again."""
        proc = self._procs.pop("containerd")
        proc.kill()
        proc.wait()
        self._start_containerd()

    def daemon_pids(self) -> list[int]:
        """netctl daemon processes of this node (``netctl daemon … --in-cluster``)."""
        return [p for p in self.node_pids() if "daemon" in _argv(p)[:4]
                and "--in-cluster" in _argv(p)]

    def kill_daemon(self) -> int:
        """SIGKILL netctl's daemon (kubelet restarts its container); its PID."""
        (pid,) = self.daemon_pids()
        _kill(pid)
        return pid

    # -- a reboot ------------------------------------------------------------------------------

    def stop_node(self) -> None:
        """Everything on the node stopped (the control plane goes on), its mounts and its
        ``/run`` gone: the pods' netns with them, as after a reboot."""
        self.stop_node_processes(graceful=True)
        self._umount(self._node_mounts("/var/lib/kubelet"))
        self._umount(self._node_mounts("/run"))
        self.in_node("mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", "/run")
        # the links made since it booted go with a reboot: all but lo and eth0
        for name in self.links():
            if name not in ("lo", "eth0"):
                subprocess.run(["ip", "-n", self.netns, "link", "del", name],
                               capture_output=True, timeout=30, check=False)

    @property
    def node_running(self) -> bool:
        """containerd and kubelet are running (not stopped by :meth:`stop_node`)."""
        return all(name in self._procs and self._procs[name].poll() is None
                   for name in ("containerd", "kubelet"))

    def start_node(self, timeout: float = 90) -> None:
        """The node booted again (after :meth:`stop_node`): containerd and kubelet started
        on the fresh ``/run``; Ready."""
        self._start_containerd()
        self._start_kubelet()
        self.wait_node_ready(timeout)

    # -- taking back ---------------------------------------------------------------------------

    def node_pids(self) -> list[int]:
        """Processes of the node: in its mount namespace (but the holder), and their
        descendants (the containers)."""
        if self.holder is None:
            return []
        ns = _mnt_ns(self.holder.pid)
        skip = {self.holder.pid}
        pids = _pids()
        children: dict[int, list[int]] = {}
        for p in pids:
            children.setdefault(_ppid(p), []).append(p)
        found = {p for p in pids if p not in skip and _mnt_ns(p) == ns}
        todo = list(found)
        while todo:
            for child in children.get(todo.pop(), []):
                if child not in found and child not in skip:
                    found.add(child)
                    todo.append(child)
        return sorted(found)

    def _kill_all(self, which: Callable[[], list[int]], timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while pids := which():
            for pid in pids:
                _kill(pid)
            if time.monotonic() > deadline:
                raise NodeError(f"processes still there: {pids}")
            time.sleep(0.05)

    def _containerd_up(self) -> bool:
        proc = self._procs.get("containerd")
        return proc is not None and proc.poll() is None

    def stop_node_processes(self, *, graceful: bool) -> None:
        """kubelet stopped; every container killed and deleted through ``ctr`` while
        containerd runs; containerd stopped; then whatever is left, by PID."""
        _stop(self._procs.pop("kubelet", None), 15 if graceful else 0.1)
        if self._containerd_up():
            ctr = [CTR, "--address", SOCKET, "-n", K8S_NS]
            listed = self.in_node(*ctr, "containers", "ls", "-q", check=False, timeout=30)
            ids = listed.stdout.decode().split()
            self._container_ids.update(ids)
            tasks = self.in_node(*ctr, "tasks", "ls", "-q", check=False, timeout=30)
            for task in tasks.stdout.decode().split():
                self.in_node(*ctr, "tasks", "kill", "-a", "-s", "SIGKILL", task, check=False,
                             timeout=30)
            for task in tasks.stdout.decode().split():
                self.in_node(*ctr, "tasks", "delete", "-f", task, check=False, timeout=30)
        _stop(self._procs.pop("containerd", None), 15)
        self._kill_all(self.node_pids)

    def _cgroup_dirs(self) -> Iterator[str]:
        """Dirs of the cgroup hierarchies named for a container id or kubelet's pods, at
        most three levels down."""
        root = Path("/sys/fs/cgroup")
        if not root.is_dir():
            return
        for top in root.iterdir():
            for dirpath, dirnames, _ in os.walk(top):
                depth = Path(dirpath).relative_to(top).parts
                if len(depth) >= 3:
                    dirnames.clear()
                yield dirpath

    def _remove_cgroups(self) -> None:
        """The cgroups made for this node's containers (named by their ids), deepest
        first; none that was there before."""
        made = [d for d in self._cgroup_dirs() if d not in self._cgroups_before
                and Path(d).name in self._container_ids | {K8S_NS}]
        for d in sorted(made, key=lambda p: p.count("/"), reverse=True):
            # cgroup v1 frees a removed child asynchronously: its parent is busy a moment
            with contextlib.suppress(HarnessError):
                wait_for(functools.partial(_rmdir, d), 5, f"{d} removed", interval=0.02)


# -- netctl on a cluster, a cluster of several nodes -------------------------------------------


def install_netctl(nodes: Sequence[RealNode], *, build: bool = True,
                   daemonset: Sequence[Mapping[str, Any]] | None = None) -> str:
    """netctl on the cluster of ``nodes`` as docs/kubernetes.md installs it: ``make image``
    unless not ``build``, the image saved by podman and imported into each node's
    containerd with ``ctr -n k8s.io images import``, the ``netctl-api-server`` ConfigMap
    (the `kubernetes` Service's address is not routed here: the API server's own), the
    CRDs, ``rbac.yaml``, ``node-reach.yaml`` from v1.30 and ``daemonset.yaml`` (or
    ``daemonset``: these documents instead, an edited copy of it); returns the image's
    name once the DaemonSet is Ready."""
    first = nodes[0]
    kube = first.kube
    assert kube is not None
    image = netctl_image()
    t0 = time.monotonic()
    if build:
        build_image()
        first.timings["make image"] = time.monotonic() - t0
    t1 = time.monotonic()
    tar = first.control.image_tar
    save_image(image, tar)
    for node in nodes:
        node.import_tar(tar)
    first.timings["image import"] = time.monotonic() - t1
    t2 = time.monotonic()
    first.kubectl("-n", "kube-system", "create", "configmap", "netctl-api-server",
                  f"--from-literal=k8sServiceHost={kube.address}",
                  f"--from-literal=k8sServicePort={kube.port}")
    # one node's reach (node-reach.yaml) where the API server has admission policies
    # (v1.30+): every daemon's writes in the real-node tests go through them
    reach = ["-f", str(MANIFESTS / "node-reach.yaml")] \
        if first.kube_version.minor >= 30 else []
    if daemonset is None:
        first.kubectl("apply", "-f", f"{CRDS}/", "-f", str(MANIFESTS / "rbac.yaml"), *reach,
                      "-f", str(MANIFESTS / "daemonset.yaml"))
    else:
        first.kubectl("apply", "-f", f"{CRDS}/", "-f", str(MANIFESTS / "rbac.yaml"), *reach)
        first.apply(daemonset)
    first.wait_ready("daemonset", "netctl", "kube-system", timeout=300)
    first.timings["daemonset ready"] = time.monotonic() - t2
    return image


class RealCluster(_OfControl):
    """A control plane and real nodes on this machine (each a :class:`RealNode`: its own
    kubelet, containerd, mount and network namespaces, ``eth0`` on the node network).
    ``open`` starts the control plane and ``nodes`` nodes; :meth:`add_node` adds one
    (netctl's image imported into it when netctl is installed: the DaemonSet runs there);
    ``close`` removes everything."""

    def __init__(self, nodes: int = 3, *, kube: KubeVersion | None = None,
                 max_pods: int = 110) -> None:
        picked = kube or kubebins.pick()
        if picked is None:
            raise NodeError(kubebins.missing())
        self.kube_version: KubeVersion = picked
        self.prefix = f"nrc{secrets.token_hex(2)[:3]}"  # its nodes' prefixes: this and a digit
        self.control = ControlPlane(picked, self.prefix)
        self.want, self.max_pods = nodes, max_pods
        self.nodes: list[RealNode] = []
        self.image = ""  # netctl's, once installed

    def alive(self) -> bool:
        for node in self.nodes:
            if node.node_running:
                node.alive()
        return self.control.alive()

    def describe(self) -> str:
        return "\n".join(n.describe() for n in self.nodes)

    def _open(self) -> None:
        self.control.open()
        while len(self.nodes) < self.want:
            self.add_node()

    def add_node(self) -> RealNode:
        """One more node, Ready (with netctl's image when netctl is installed)."""
        index = len(self.nodes)
        if index > 9:
            raise NodeError("a real cluster here has at most 10 nodes")
        node = RealNode(f"netctl-{self.prefix}-{index}", prefix=f"{self.prefix}{index}",
                        max_pods=self.max_pods, control=self.control, index=index,
                        preload=[self.control.image_tar] if self.image else [])
        self.nodes.append(node)
        node.open()
        return node

    def install_netctl(self, *, build: bool = True,
                       daemonset: Sequence[Mapping[str, Any]] | None = None) -> str:
        self.image = install_netctl(self.nodes, build=build, daemonset=daemonset)
        return self.image

    def node(self, name: str) -> RealNode:
        (found,) = [n for n in self.nodes if n.name == name]
        return found

    def node_of(self, pod: Mapping[str, Any]) -> RealNode:
        """The node a pod runs on."""
        return self.node(pod["spec"]["nodeName"])

    def close(self) -> None:
        """Every node's containers and processes stopped first (the cgroups they share
        are then free), each node closed, then the control plane."""
        errors: list[str] = []
        for node in self.nodes:
            if node.holder is not None:
                try:
                    node.stop_node_processes(graceful=True)
                except Exception as exc:
                    errors.append(f"{node.name}: {exc}")
        for node in reversed(self.nodes):
            try:
                node.close()
            except NodeError as exc:
                errors.append(f"{node.name}: {exc}")
        self.nodes.clear()
        try:
            self.control.close()
        except NodeError as exc:
            errors.append(str(exc))
        if errors:
            raise NodeError("; ".join(errors))


# -- API paths -------------------------------------------------------------------------------

_APPS = {"deployments", "statefulsets", "daemonsets", "replicasets"}
_CLUSTER = {"nodes", "namespaces"}


def _plural(kind: str) -> str:
    kind = kind.lower()
    return kind if kind.endswith("s") else f"{kind}s"


def _path(kind: str, namespace: str | None, name: str = "") -> str:
    plural = _plural(kind)
    base = "/apis/apps/v1" if plural in _APPS else "/api/v1"
    if plural not in _CLUSTER:
        base += f"/namespaces/{namespace or 'default'}"
    return f"{base}/{plural}/{name}" if name else f"{base}/{plural}"


def is_ready(kind: str, obj: Mapping[str, Any]) -> bool:
    """Whether this one read of an object shows it Ready (see ``RealNode.wait_ready``):
    a caller that goes on to use the object judges the same read it uses."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    meta = obj["metadata"]
    plural = _plural(kind)
    if plural == "pods":
        conds = {c["type"]: c["status"] for c in status.get("conditions") or []}
        return conds.get("Ready") == "True" and not meta.get("deletionTimestamp")
    if plural == "nodes":
        conds = {c["type"]: c["status"] for c in status.get("conditions") or []}
        return conds.get("Ready") == "True"
    if status.get("observedGeneration", 0) < meta.get("generation", 0):
        return False
    if plural == "daemonsets":
        want = status.get("desiredNumberScheduled", 0)
        return bool(want) and status.get("numberReady", 0) == want and \
            status.get("updatedNumberScheduled", 0) == want
    want = spec.get("replicas", 1)
    if status.get("readyReplicas", 0) != want or status.get("replicas", 0) != want:
        return False
    if plural == "statefulsets":
        return bool(status.get("updatedReplicas", 0) == want)
    return bool(status.get("updatedReplicas", 0) == want)
