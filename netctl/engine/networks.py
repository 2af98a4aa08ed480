"""Networks in standalone mode: NetworkAttachmentDefinition files in a directory
(``*.yaml``, ``*.yml``, ``*.json``), re-read only when a file changed (mtime and size); a
broken file is kept aside with its error, for the lookup of that network to name.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from typing import Any

import msgspec
import msgspec.yaml

from netctl.cni.confdir import MAX_CONF_BYTES
from netctl.cni.config import Chain, parse_chain
from netctl.cni.hostroot import HostRoot
from netctl.errors import INVALID_CONFIG, CNIError
from netctl.kubeapi.objects import RESOURCE_NAME, Nad

_SUFFIXES = (".yaml", ".yml", ".json")


@dataclass(frozen=True)
class Network:
    key: str  # "ns/name" of its NAD, or the file path
    chain: Chain
    resource: str = ""  # the NAD's resourceName: a device network (netctl/engine/devices.py)


@dataclass
class NetworkDir:
    directory: str
    root: HostRoot = field(default_factory=HostRoot)  # where a network given by path is read
    _stamp: tuple[tuple[str, int, int], ...] = ()
    _by_key: dict[str, Network] = field(default_factory=dict)
    _by_chain_name: dict[str, Network] = field(default_factory=dict)
    _broken: dict[str, str] = field(default_factory=dict)  # file → error

    def _scan(self) -> None:
        try:
            names = sorted(n for n in os.listdir(self.directory) if n.endswith(_SUFFIXES))
        except FileNotFoundError:
            names = []
        stamp = []
        for name in names:
            try:
                st = os.stat(os.path.join(self.directory, name))
            except OSError:
                continue
            stamp.append((name, st.st_mtime_ns, st.st_size))
        if tuple(stamp) == self._stamp:
            return
        by_key: dict[str, Network] = {}
        by_chain: dict[str, Network] = {}
        broken: dict[str, str] = {}
        for name, _, _ in stamp:
            path = os.path.join(self.directory, name)
            try:
                with open(path, "rb") as fh:
                    raw = fh.read()
                nad = (msgspec.json.decode(raw, type=Nad) if name.endswith(".json")
                       else msgspec.yaml.decode(raw, type=Nad))
                key = f"{nad.metadata.namespace or 'default'}/{nad.metadata.name}"
                if not nad.metadata.name:
                    raise CNIError(INVALID_CONFIG, "metadata.name is empty")
                if not nad.spec.config:
                    raise CNIError(INVALID_CONFIG, "spec.config is empty")
                chain = parse_chain(nad.spec.config, f"network {key}")
            except (OSError, msgspec.MsgspecError, CNIError) as exc:
                broken[name] = str(exc)
                continue
            # a device network (its resourceName) is refused in this mode: no kubelet here
            net = Network(key=key, chain=chain, resource=nad.metadata.annotations.get(
                RESOURCE_NAME, "").strip())
            by_key[key] = net
            by_chain.setdefault(chain.name, net)
        self._stamp = tuple(stamp)
        self._by_key, self._by_chain_name, self._broken = by_key, by_chain, broken

    def resolve(self, ref: str, namespace: str) -> Network:
        """Find a network by ``ns/name``, NAD name in ``namespace`` or ``default``,
        chain name, or an absolute path to a conf/conflist file."""
        if ref.startswith("/"):
            return from_file(ref, self.root)
        self._scan()
        candidates = lookups(ref, namespace)
        for key in candidates:
            if key in self._by_key:
                return self._by_key[key]
        if "/" not in ref and ref in self._by_chain_name:
            return self._by_chain_name[ref]
        raise CNIError(INVALID_CONFIG, not_found(ref, candidates, self.directory,
                                                 self._broken))

    def all(self) -> list[Network]:
        self._scan()
        return list(self._by_key.values())

    async def wait_listed(self) -> None:
        """Nothing to wait for: the directory is read at each lookup."""


def from_file(path: str, root: HostRoot = HostRoot()) -> Network:
    """A network given by the absolute path of its conf or conflist file (its key), read in
    the host ``root``."""
    seen, named = root.host(path), root.describe(path)
    try:
        st = os.stat(seen)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_CONF_BYTES:
            raise CNIError(INVALID_CONFIG, f"network file {named} is not a regular file "
                           f"of at most {MAX_CONF_BYTES} bytes")
        with open(seen, "rb") as fh:
            raw = fh.read(MAX_CONF_BYTES + 1)
    except OSError as exc:
        raise CNIError(INVALID_CONFIG, f"network file {named}: {exc.strerror}") from exc
    return Network(key=path, chain=parse_chain(raw, f"network file {named}"))


def lookups(ref: str, namespace: str) -> list[str]:
    """The NAD keys a reference is looked up as, in order, each once: ``ns/name`` as
    given; a bare name in the pod's namespace, then in ``default``."""
    if "/" in ref:
        return [ref]
    return list(dict.fromkeys([f"{namespace}/{ref}", f"default/{ref}"]))


def not_found(ref: str, candidates: list[str], directory: str, broken: dict[str, str]) -> str:
    """What was looked for and where, and the files that could not be read."""
    looked = f"no NetworkAttachmentDefinition {' or '.join(candidates)}"
    if "/" not in ref:
        looked += f" and no network whose CNI name is {ref!r}"
    msg = f"network {ref!r} not found in {directory}: {looked}"
    if broken:
        msg += "; unreadable files: " + "; ".join(
            f"{name}: {err}" for name, err in sorted(broken.items()))
    return msg


def inline(obj: dict[str, Any], index: int) -> Network:
    """A delegate given inline in the netctl conf (``delegates``)."""
    chain = parse_chain(obj, f"delegates[{index}]")
    return Network(key=f"delegate:{chain.name}", chain=chain)
