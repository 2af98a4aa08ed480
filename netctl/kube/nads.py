"""Networks in Kubernetes mode: NetworkAttachmentDefinitions from the Kubernetes client's cache.

:class:`NadResolver` is the engine's :class:`~netctl.engine.choice.Resolver` over a
:class:`NadLookup`, the NAD cache the watch keeps current: a lookup is a dict read, never
an API request. A reference is, as in Multus (``getKubernetesDelegate``,
``getNetDelegate``): ``ns/name``, that NAD alone (a pod's selections, their namespace
filled in by :mod:`netctl.kube.select`); a bare name (``clusterNetwork``,
``defaultNetworks``, in ``multusNamespace``), the NAD of that name, else the conf dir's
CNI config of that network name; an absolute path, that conf or conflist file (a
directory is refused). An empty ``spec.config`` stands for the conf dir's config of the
NAD's name; docs/networks.md has the rest. Files are read at each lookup; a NAD's
``spec.config`` is parsed once per resourceVersion. Faults are
:class:`~netctl.errors.Refusal`.
"""

from __future__ import annotations

from typing import Any, Protocol

import msgspec

from netctl.cni.confdir import read_conf_dir
from netctl.cni.config import parse_chain
from netctl.cni.hostroot import HostRoot
from netctl.engine.networks import Network, from_file
from netctl.errors import INVALID_CONFIG, CNIError, Refusal
from netctl.kubeapi.objects import REASON_BAD_NAD, REASON_NOT_FOUND, RESOURCE_NAME, Nad, key

MULTUS_CONF_DIR = "/etc/cni/multus/net.d"  # Multus' default confDir


class NadLookup(Protocol):
    """The Kubernetes client's NetworkAttachmentDefinition cache
    (:class:`netctl.kubeapi.pods.NadSource`)."""

    def get(self, namespace: str, name: str) -> Nad | None:
        """The cached NAD, or None when the cluster has none of that name. Until the
        first LIST has filled the cache it raises :class:`~netctl.errors.NotListedYet`
        instead: a NAD missing then is not known to be missing."""
        ...

    async def wait_listed(self) -> None:
        """Wait (up to ``pod-wait``) for the first LIST."""
        ...


class NadResolver:
    """NADs from the client's cache, conf files from the conf dir."""

    def __init__(self, nads: NadLookup, conf_dir: str = MULTUS_CONF_DIR,
                 root: HostRoot = HostRoot()) -> None:
        self.nads = nads
        self.conf_dir = conf_dir  # where the daemon reads it: in the host root, if any
        self.root = root  # where a network given by its path is read
        self._parsed: dict[str, tuple[tuple[str, str], Network]] = {}

    def resolve(self, ref: str, namespace: str) -> Network:
        if ref.startswith("/"):
            return from_file(ref, self.root)
        if "/" in ref:
            ns, name = ref.split("/", 1)
            nad = self.nads.get(ns, name)
            if nad is None:
                self._parsed.pop(ref, None)
                raise Refusal(f"no NetworkAttachmentDefinition {ref}", REASON_NOT_FOUND,
                              f"NetworkAttachmentDefinition {ref} not found")
            return self._network(nad)
        nad = self.nads.get(namespace, ref)
        if nad is not None:
            return self._network(nad)
        found = self._from_conf_dir(ref)
        if found is None:
            raise Refusal(f"network {ref!r} not found: no NetworkAttachmentDefinition "
                          f"{namespace}/{ref} and no CNI config named {ref!r} in "
                          f"{self.conf_dir}{self._unreadable()}", REASON_NOT_FOUND,
                          f"network {ref!r} not found (NetworkAttachmentDefinition "
                          f"{namespace}/{ref} or a CNI config in {self.conf_dir})")
        return found

    async def wait_listed(self) -> None:
        await self.nads.wait_listed()

    def _network(self, nad: Nad) -> Network:
        ref, name, config = key(nad), nad.metadata.name, nad.spec.config
        resource = nad.metadata.annotations.get(RESOURCE_NAME, "").strip()
        stamp = (nad.metadata.resourceVersion, config)
        kept = self._parsed.get(ref)
        if kept is not None and kept[0] == stamp:
            return kept[1]
        if not config:
            net = self._from_conf_dir(name)
            if net is None:
                raise Refusal(
                    f"NetworkAttachmentDefinition {ref} has an empty spec.config and "
                    f"{self.conf_dir} has no CNI config named {name!r}"
                    f"{self._unreadable()}", REASON_BAD_NAD,
                    f"NetworkAttachmentDefinition {ref}: empty spec.config and no CNI "
                    f"config named {name!r} in {self.conf_dir}")
            # not kept: the file may change
            return Network(key=ref, chain=net.chain, resource=resource)
        try:
            net = Network(key=ref, chain=parse_chain(_named(config, name), f"network {ref}"),
                          resource=resource)
        except CNIError as exc:
            raise Refusal(f"NetworkAttachmentDefinition {ref}: {exc.msg}", REASON_BAD_NAD,
                          exc.msg, INVALID_CONFIG) from None
        self._parsed[ref] = (stamp, net)
        return net

    def _unreadable(self) -> str:
        """The conf dir's files that are not JSON objects, for a "not found" message."""
        try:
            broken = [f"{f.path} {f.error}" for f in read_conf_dir(self.conf_dir)
                      if f.conf is None]
        except FileNotFoundError:
            return f" (there is no {self.conf_dir})"
        return "; unreadable: " + "; ".join(broken) if broken else ""

    def _from_conf_dir(self, name: str) -> Network | None:
        """The conf dir's first CNI config (in libcni's order) whose network is ``name``:
        a network of the node's own, keyed by its file's path."""
        try:
            files = read_conf_dir(self.conf_dir)
        except FileNotFoundError:
            return None
        for f in files:
            if f.conf is not None and f.conf.get("name") == name:
                return Network(key=f.path, chain=parse_chain(f.conf, f"network file {f.path}"))
        return None


def _named(config: str, name: str) -> str | dict[str, Any]:
    """A NAD's ``spec.config``, given the NAD's ``name`` when it has none of its own."""
    try:
        obj = msgspec.json.decode(config)
    except msgspec.DecodeError:
        return config  # parse_chain says what is wrong with it
    if isinstance(obj, dict) and not obj.get("name"):
        return {**obj, "name": name}
    return config
