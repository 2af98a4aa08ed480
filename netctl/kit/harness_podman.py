"""A throwaway podman for the tests and ``netctl bench podman``: Debian's podman 4.3 with its
CNI backend, on temporary storage and configuration, netctl's installed plugin beside the
real CNI plugins, and a busybox image imported from a local tar (no registry).

How it works: nothing global is configured. ``CONTAINERS_CONF`` names a containers.conf in
the run's own dir (``network_backend = "cni"``, the run's ``cni_plugin_dirs`` and
``network_config_dir``, runc, cgroupfs, file locks and events, ``default_ulimits`` no higher
than this process's hard limits), and ``CONTAINERS_STORAGE_CONF`` a storage.conf there (the
``vfs`` driver: no overlay mounts to undo). The image is a tar of ``/bin/busybox`` (Debian's
busybox-static) with a link per applet, given to ``podman import``.

What podman 4.3 and the CNI plugins still leave on the host, and :meth:`Podman.remove`
takes back, compared with a :class:`HostSnapshot` taken before the run: the containers and
their netns (``/run/netns/netns-*``), processes naming the run's dir (conmon, ``podman
container cleanup``), mounts under it, the bridges of networks podman created (``podman
network rm``), host-local's lease dirs of those networks and libcni's cache dirs under
``/var/lib/cni``, the iptables chains portmap and firewall create and never delete
(``CNI-HOSTPORT-*``, ``CNI-FORWARD``, ``CNI-ADMIN``) once nothing uses them, and the
``libpod_parent`` cgroups. Only what appeared during the run is removed.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import re
import resource
import shlex
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from netctl_kit import harness
from netctl_kit.harness import PATH, HarnessError, wait_for

IMAGE = "localhost/netctl-busybox:latest"
BUSYBOX = "/bin/busybox"  # Debian's busybox-static: runs in an empty rootfs
ROOTFS_DIRS = ("bin", "dev", "etc", "proc", "sys", "tmp", "run", "var", "root")
CNI_VERSION = "1.0.0"  # podman 4.3's libcni refuses 1.1.0 results
# What podman may pass to the netctl-cni entry of a conflist (it sends --ip, --mac-address and
# network reload's old address as IP=/MAC= in CNI_ARGS; runtimeConfig only carries -p).
CAPABILITIES = {"portMappings": True, "ips": True, "mac": True}
ULIMIT_CAP = 1024  # files and processes a test container may have
TIMEOUT = 120.0
CNI_STATE = Path("/var/lib/cni")
CNI_STATE_DIRS = (CNI_STATE, CNI_STATE / "results", CNI_STATE / "networks")
CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_PARENT = "libpod_parent"  # podman's cgroup parent under cgroupfs
IPTABLES_TABLES = ("nat", "filter")
# Chains portmap and firewall create once and keep; any other CNI-… chain is per container.
SHARED_CHAINS = {"CNI-HOSTPORT-DNAT", "CNI-HOSTPORT-MASQ", "CNI-HOSTPORT-SETMARK",
                 "CNI-FORWARD", "CNI-ADMIN"}
# Rules in the shared chains that are there whoever uses them (the rest: a container's).
STANDING_RULE = re.compile(r"--mark 0x2000/0x2000 -j MASQUERADE|-j MARK --set-xmark 0x2000|"
                           r"-j CNI-ADMIN$")


def preflight() -> str | None:
    """Why podman cannot be driven here, or None."""
    why = harness.preflight(("bridge", "host-local", "portmap", "firewall", "tuning"))
    if why:
        return why
    for tool in ("podman", "runc", "iptables"):
        if shutil.which(tool, path=PATH) is None:
            return f"needs {tool} (Debian: apt-get install podman runc iptables)"
    if not os.access(BUSYBOX, os.X_OK):
        return f"needs {BUSYBOX} (Debian: apt-get install busybox-static)"
    return None


def ulimits() -> list[str]:
    """``default_ulimits`` no higher than this process's hard limits: podman's own default
    (1048576) would need CAP_SYS_RESOURCE to raise them, which a sandbox may not have."""
    out = []
    for name, res in (("nofile", resource.RLIMIT_NOFILE), ("nproc", resource.RLIMIT_NPROC)):
        hard = resource.getrlimit(res)[1]
        n = ULIMIT_CAP if hard == resource.RLIM_INFINITY else min(hard, ULIMIT_CAP)
        out.append(f"{name}={n}:{n}")
    return out


def write_rootfs_tar(path: Path) -> None:
    """A tar of a root file system: busybox and one link per applet in /bin."""
    listed = subprocess.run([BUSYBOX, "--list"], capture_output=True, text=True, check=True,
                            timeout=30).stdout.split()
    with tarfile.open(path, "w") as tar:
        for d in ROOTFS_DIRS:
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755
            tar.addfile(info)
        tar.add(BUSYBOX, "bin/busybox")
        for applet in sorted(set(listed) - {"busybox"}):
            info = tarfile.TarInfo(f"bin/{applet}")
            info.type, info.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(info)


def _goarch() -> str:
    machine = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def _rootfs_layer(scratch: Path, files: Mapping[str, str]) -> bytes:
    """An uncompressed tar: busybox with a link per applet in /bin (podman's test
    image, :func:`write_rootfs_tar`), and ``files``."""
    write_rootfs_tar(scratch)
    try:
        with tarfile.open(scratch, "a") as tar:
            for d in sorted({str(Path(f).parent) for f in files} - {".", *ROOTFS_DIRS}):
                info = tarfile.TarInfo(d)
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            for name, text in sorted(files.items()):
                data = text.encode()
                info = tarfile.TarInfo(name)
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
        return scratch.read_bytes()
    finally:
        scratch.unlink(missing_ok=True)


def write_image_tar(path: Path, name: str, cmd: Sequence[str],
                    files: Mapping[str, str] | None = None) -> None:
    """A one-layer image named ``name`` running ``cmd``, as ``docker save`` writes it
    (``manifest.json``, the config, the layer), for ``ctr images import``."""
    layer = _rootfs_layer(path.with_name(f"{path.name}.layer"), files or {})
    diff_id = hashlib.sha256(layer).hexdigest()
    config = json.dumps({
        "architecture": _goarch(), "os": "linux",
        "config": {"Cmd": list(cmd), "Env": ["PATH=/bin"], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
    }).encode()
    config_name = f"{hashlib.sha256(config).hexdigest()}.json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [name],
                            "Layers": [f"{diff_id}/layer.tar"]}]).encode()
    with tarfile.open(path, "w") as tar:
        for member, data in ((f"{diff_id}/layer.tar", layer), (config_name, config),
                             ("manifest.json", manifest)):
            info = tarfile.TarInfo(member)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))


def netctl_conflist(socket: str, cluster: str, name: str = "netctl",
                    **extra: Any) -> dict[str, Any]:
    """The conflist podman reads for a netctl network: one ``netctl-cni`` entry at
    :data:`CNI_VERSION` declaring :data:`CAPABILITIES`, ``cluster`` its cluster network."""
    return {"cniVersion": CNI_VERSION, "name": name, "plugins": [{
        "type": "netctl-cni", "socket": socket, "clusterNetwork": cluster,
        "capabilities": dict(CAPABILITIES), **extra}]}


# -- what the host had before ----------------------------------------------------------------


def _iptables_rules(table: str) -> list[str]:
    proc = subprocess.run(["iptables", "-w", "5", "-t", table, "-S"], capture_output=True,
                          text=True, check=False, timeout=30, env={"PATH": PATH})
    return proc.stdout.splitlines() if proc.returncode == 0 else []


def _cni_chains(rules: Iterable[str]) -> set[str]:
    return {line.split()[1] for line in rules if line.startswith("-N CNI-")}


def cni_chains(table: str) -> set[str]:
    """The CNI chains of iptables' ``table`` now."""
    return _cni_chains(_iptables_rules(table))


@dataclass(frozen=True)
class HostSnapshot:
    """The host state podman's CNI backend changes, before a run."""

    chains: frozenset[tuple[str, str]]  # (table, chain) of every CNI-… chain
    cni_dirs: frozenset[Path]  # which of CNI_STATE_DIRS existed
    cgroups: frozenset[Path]  # hierarchies that had CGROUP_PARENT

    @classmethod
    def take(cls) -> HostSnapshot:
        return cls(
            frozenset((t, c) for t in IPTABLES_TABLES for c in _cni_chains(_iptables_rules(t))),
            frozenset(d for d in CNI_STATE_DIRS if d.exists()),
            frozenset(h for h in _cgroup_hierarchies() if (h / CGROUP_PARENT).is_dir()))

    def restore(self, host_local_networks: Iterable[str] = ()) -> list[str]:
        """Remove what the run left: host-local's dirs of ``host_local_networks`` (the run's
        networks), libcni's dirs, the CNI chains of those networks and the shared chains
        nothing uses any more (:func:`_remove_new_chains`), empty ``libpod_parent``
        cgroups. Returns what could not be removed."""
        problems: list[str] = []
        networks = list(host_local_networks)
        for net in networks:
            shutil.rmtree(CNI_STATE / "networks" / net, ignore_errors=True)
        for d in sorted(set(CNI_STATE_DIRS) - self.cni_dirs, key=lambda p: -len(p.parts)):
            try:
                d.rmdir()
            except FileNotFoundError:
                pass
            except OSError as exc:
                problems.append(f"{d}: {exc.strerror}")
        for table in IPTABLES_TABLES:
            problems += _remove_new_chains(table, {c for t, c in self.chains if t == table},
                                           networks)
        for hierarchy in set(_cgroup_hierarchies()) - self.cgroups:
            problems += _remove_empty_cgroups(hierarchy / CGROUP_PARENT)
        return problems


def _remove_new_chains(table: str, before: set[str], networks: Iterable[str]) -> list[str]:
    """Delete what this run left in ``table``: the CNI chains not in ``before`` whose rules
    name one of ``networks`` (portmap's and firewall's comments carry the network's name),
    the rules jumping to them, and the shared chains that appeared with the run once no
    other container's rule is left in them. Chains another runtime made meanwhile are not
    this run's: left alone. What failed."""
    rules = _iptables_rules(table)
    new = _cni_chains(rules) - before
    marks = [f'name: \\"{net}\\"' for net in networks]

    def chain_of(line: str) -> str:
        return line.split()[1]

    ours = {c for c in new - SHARED_CHAINS
            if any(chain_of(line) == c and any(m in line for m in marks)
                   for line in rules if line.startswith("-A "))}

    def leads_to_ours(line: str) -> bool:
        return any(line.endswith(f"-j {c}") for c in ours)

    idle = {c for c in new & SHARED_CHAINS
            if not any(line.startswith(f"-A {c} ") and not STANDING_RULE.search(line)
                       and not leads_to_ours(line) for line in rules)}
    if idle:  # only idle once nothing jumps to them either
        idle -= {chain_of(line) for line in rules if line.startswith("-A ")
                 and chain_of(line) not in idle and any(line.endswith(f"-j {c}") for c in idle)}
    gone = ours | idle
    steps = [["-D", *shlex.split(line)[1:]] for line in rules
             if line.startswith("-A ") and chain_of(line) not in gone
             and any(line.endswith(f"-j {c}") for c in gone)]
    steps += [["-F", c] for c in sorted(gone)] + [["-X", c] for c in sorted(gone)]
    problems = []
    for step in steps:
        proc = subprocess.run(["iptables", "-w", "5", "-t", table, *step], capture_output=True,
                              text=True, check=False, timeout=30, env={"PATH": PATH})
        if proc.returncode != 0:
            problems.append(f"iptables -t {table} {shlex.join(step)}: {proc.stderr.strip()}")
    return problems


def _cgroup_hierarchies() -> list[Path]:
    """Each mounted cgroup hierarchy (v1 controllers, the v2 tree), or the root alone."""
    if (CGROUP_ROOT / "cgroup.procs").exists():
        return [CGROUP_ROOT]
    try:
        return [p for p in CGROUP_ROOT.iterdir() if (p / "cgroup.procs").exists()]
    except OSError:
        return []


def _remove_empty_cgroups(top: Path) -> list[str]:
    """rmdir ``top`` and the cgroups under it, deepest first, when no process is left in
    them (the kernel refuses otherwise)."""
    if not top.is_dir():
        return []
    dirs = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
    problems = []
    for d in [*dirs, top]:
        try:
            d.rmdir()
        except FileNotFoundError:
            pass
        except OSError as exc:
            problems.append(f"cgroup {d}: {exc.strerror}")
    return problems


# -- podman ---------------------------------------------------------------------------------------


@dataclass
class Podman:
    """podman on its own config and storage under ``root`` (made by :meth:`create`), with the
    CNI plugins of ``plugin_dirs``."""

    root: Path
    plugin_dirs: list[str]
    before: HostSnapshot
    networks: list[str] = field(default_factory=list)  # those podman created (host-local)

    @classmethod
    def create(cls, plugin_dirs: Sequence[str], prefix: str = "netctl") -> Podman:
        """Its config and storage in a new temporary dir (a short path: conmon's sockets
        live under it), the host's state noted first."""
        before = HostSnapshot.take()
        root = Path(tempfile.mkdtemp(prefix=f"{prefix}-podman-"))
        pm = cls(root, list(plugin_dirs), before)
        pm.write_config()
        return pm

    @property
    def conf_dir(self) -> Path:
        """podman's ``network_config_dir``: a conflist per network."""
        return self.root / "net.d"

    def write_config(self) -> None:
        self.conf_dir.mkdir(parents=True, exist_ok=True)

        def toml(values: Iterable[str]) -> str:
            return "[" + ", ".join(json.dumps(v) for v in values) + "]"

        (self.root / "containers.conf").write_text(f"""\
[containers]
default_ulimits = {toml(ulimits())}

[network]
network_backend = "cni"
cni_plugin_dirs = {toml(self.plugin_dirs)}
network_config_dir = {json.dumps(str(self.conf_dir))}

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = {json.dumps(str(self.root / "events.log"))}
tmp_dir = {json.dumps(str(self.root / "tmp"))}
lock_type = "file"
""")
        (self.root / "storage.conf").write_text(f"""\
[storage]
driver = "vfs"
graphroot = {json.dumps(str(self.root / "storage"))}
runroot = {json.dumps(str(self.root / "run"))}
""")

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {"PATH": PATH, "HOME": os.environ.get("HOME", "/root"),
                "CONTAINERS_CONF": str(self.root / "containers.conf"),
                "CONTAINERS_STORAGE_CONF": str(self.root / "storage.conf"), **(extra or {})}

    def run(self, *args: str, env: dict[str, str] | None = None, check: bool = True,
            timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:
        """``podman ARGS…`` (``env`` on top of its own); with ``check``, a non-zero exit
        raises :class:`HarnessError` with podman's message."""
        proc = subprocess.run(["podman", *args], capture_output=True, text=True, check=False,
                              timeout=timeout, env=self.env(env), start_new_session=True)
        if check and proc.returncode != 0:
            raise HarnessError(f"podman {shlex.join(args)} exited {proc.returncode}: "
                               f"{harness.tail(proc.stderr, 600)}")
        return proc

    def start_image(self) -> str | None:
        """Import the busybox image and run it once without a network: why podman cannot
        run containers here, or None."""
        tar = self.root / "rootfs.tar"
        write_rootfs_tar(tar)
        try:
            self.run("import", "--quiet", str(tar), IMAGE)
        except HarnessError as exc:
            return str(exc)
        finally:
            tar.unlink()
        proc = self.run("run", "--rm", "--pull=never", "--network", "none", IMAGE, "true",
                        check=False)
        if proc.returncode != 0:
            return f"podman run exited {proc.returncode}: {harness.tail(proc.stderr, 600)}"
        return None

    def add_conflist(self, conflist: dict[str, Any]) -> None:
        """A network podman knows by the conflist's ``name``."""
        (self.conf_dir / f"{conflist['name']}.conflist").write_text(json.dumps(conflist))

    def create_network(self, name: str, subnet: str) -> dict[str, Any]:
        """``podman network create --subnet``: podman's own bridge network (bridge with
        host-local, portmap, firewall, tuning; a bridge ``cni-podmanN``); its conflist."""
        self.networks.append(name)
        self.run("network", "create", "--subnet", subnet, name)
        conf: dict[str, Any] = json.loads((self.conf_dir / f"{name}.conflist").read_text())
        return conf

    def inspect(self, container: str) -> dict[str, Any]:
        out = json.loads(self.run("container", "inspect", container).stdout)
        if not isinstance(out, list) or not out:
            raise HarnessError(f"podman container inspect {container}: {out!r}")
        first: dict[str, Any] = out[0]
        return first

    def containers(self) -> list[str]:
        """The ids of every container it has."""
        return self.run("ps", "--all", "--quiet", "--no-trunc", check=False).stdout.split()

    def processes(self) -> list[int]:
        """Live processes naming this podman's dir in their command line (conmon, ``podman
        container cleanup``), except this one."""
        mark = str(self.root).encode()
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    if mark in fh.read():
                        found.append(int(entry))
            except OSError:
                continue
        return found

    def remove(self) -> list[str]:
        """Remove every container, network, image, process, mount and file of this podman,
        then what it left on the host (see :meth:`HostSnapshot.restore`); return what
        could not be removed."""
        problems: list[str] = []
        sandboxes = []
        for cid in self.containers():
            try:
                key = self.inspect(cid).get("NetworkSettings", {}).get("SandboxKey", "")
            except (HarnessError, ValueError):
                key = ""
            if key:
                sandboxes.append(key)
        steps = [("rm", "--all", "--force", "--time", "0"), ("network", "rm", "--force",
                 *self.networks), ("rmi", "--all", "--force")]
        for step in steps:
            if step[0] == "network" and not self.networks:
                continue
            proc = self.run(*step, check=False)
            if proc.returncode != 0:
                problems.append(f"podman {' '.join(step)}: {harness.tail(proc.stderr)}")
        try:
            wait_for(lambda: not self.processes(), 15, "podman's conmon and clean-up to exit")
        except HarnessError:
            left = self.processes()
            harness.kill_processes(left)
            problems.append(f"killed processes left running: {left}")
        for key in sandboxes:
            if os.path.exists(key):
                problems.append(f"netns {key} left by podman; removed")
                harness.netns_del(os.path.basename(key))
        problems += _unmount_under(self.root)
        problems += self.before.restore(self.networks)
        shutil.rmtree(self.root, ignore_errors=True)
        if self.root.exists():
            problems.append(f"could not remove {self.root}")
        return problems


def _unmount_under(root: Path) -> list[str]:
    """Detach every mount under ``root`` (podman's shm mounts of containers it could not
    remove), deepest first; report each."""
    top = str(root) + "/"
    with open("/proc/self/mountinfo") as fh:
        points = [line.split()[4] for line in fh]
    problems = []
    for point in sorted({p for p in points if p.startswith(top)}, key=len, reverse=True):
        problems.append(f"mount {point} left by podman; detached")
        subprocess.run(["umount", "-l", point], capture_output=True, check=False, timeout=30,
                       env={"PATH": PATH})
    return problems

