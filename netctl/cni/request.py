"""The socket's messages, and one CNI invocation decoded once at the edge.

A frame is a :class:`Request` (what the thin plugin read from its environment and stdin,
unchanged but for the netns path) or an admin call, told apart by ``kind``
(:class:`Envelope`). The server turns a ``Request`` into an :class:`Invocation` exactly once
— CNI_ARGS split, the pod named, stdin decoded — and nothing deeper parses them again. A
stdin that is a JSON object comes verbatim as ``config``, anything else as the string
``stdin``. A DEL's config loses ``runtimeConfig[POD_ANNOTATIONS]`` before anything journals
it: a DEL reads nothing from it, and a pod's annotations can be megabytes.

The plugin and the daemon are replaced at different moments of a rolling upgrade, so a
frame says its protocol (``proto``) and every answer the daemon's (:data:`PROTO`). A newer
frame is refused with code 11 (:func:`protocol_refusal`): the plugin then records a DEL as
when the daemon is down (:mod:`netctl.reconcile.pending`). Any older one is served.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Literal, TypeVar

import msgspec

from netctl.cni import validate, versions
from netctl.errors import DECODE_FAILURE, INVALID_CONFIG, TRY_AGAIN_LATER, CNIError

C = TypeVar("C", bound=msgspec.Struct)

# the runtimeConfig capability under which CRI-O and containerd pass the pod's annotations
POD_ANNOTATIONS = "io.kubernetes.cri.pod-annotations"
# A DEL is served up to this size whatever max-request-bytes says (netctl.daemon.server); the
# plugin's DEL records (netctl.reconcile.pending) are read up to it too.
DEL_CEILING = 16 << 20
# The frame protocol this daemon speaks: 1, the frame without "proto" (the Python plugin's);
# 2, the same fields and "proto" (the static plugin's).
PROTO = 2


class Request(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What the plugin read from its environment and stdin, unchanged but for the netns path."""

    kind: Literal["cni"] = "cni"
    proto: int = 1  # the plugin's frame protocol; a frame without it is version 1
    command: str = ""
    container_id: str = ""
    netns: str = ""
    ifname: str = ""
    args: str = ""
    path: str = ""
    stdin: str = ""  # stdin as a string: when it is not a JSON object, or from an older plugin
    config: msgspec.Raw = msgspec.Raw()  # stdin verbatim, when it is a JSON object
    plugin: str = "netctl-cni"  # which executable name the runtime ran


class Envelope(msgspec.Struct, forbid_unknown_fields=False):
    """Just enough of a frame to tell which message it is."""

    kind: str = "cni"


class Response(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The daemon's answer: ``output`` to print on stdout, and the exit status."""

    status: int = 0
    output: str = ""
    warning: str = ""
    proto: int = 0  # the daemon's frame protocol (PROTO), in every answer to a CNI request


class Pod(msgspec.Struct, frozen=True, kw_only=True, order=True):
    """Who a container belongs to (``K8S_POD_*`` in CNI_ARGS; empty for podman's): the one
    shape of a pod's identity from the request to the reconciler. The engine, the journal,
    the reconciler and the Kubernetes layer's writes name a pod with it; the API's pod
    (:class:`netctl.kubeapi.objects.Pod`) gives its own as ``ref``."""

    namespace: str = ""
    name: str = ""
    uid: str = ""

    @property
    def key(self) -> str:
        """``namespace/name``, as messages and the API's paths name the pod."""
        return f"{self.namespace}/{self.name}"

    @classmethod
    def from_args(cls, args: dict[str, str]) -> Pod:
        return cls(namespace=args.get("K8S_POD_NAMESPACE", ""),
                   name=args.get("K8S_POD_NAME", ""), uid=args.get("K8S_POD_UID", ""))


class Invocation(msgspec.Struct, kw_only=True):
    """One CNI request, decoded once: every layer below the server reads this."""

    verb: str
    plugin: str
    container_id: str
    netns: str
    ifname: str
    args: dict[str, str]
    pod: Pod
    stdin: bytes  # a DEL's without the pod's annotations (see the module's docstring)
    conf: dict[str, Any] | None  # stdin as a JSON object; None when it is not one
    conf_error: str = ""  # why ``conf`` is None
    args_error: CNIError | None = None  # why ``args`` is empty (CNI_ARGS malformed)
    caller_version: str = versions.LATEST  # the stdin's cniVersion when it is one we serve

    @property
    def conf_name(self) -> str:
        name = (self.conf or {}).get("name")
        return name if isinstance(name, str) else ""


def protocol_refusal(req: Request) -> CNIError | None:
    """Why this daemon cannot serve a frame of ``req.proto``; None when it can."""
    if req.proto <= PROTO:
        return None
    who = req.plugin if req.plugin in ("netctl-cni", "netctl-ipam") else "the netctl plugin"
    return CNIError(TRY_AGAIN_LATER, f"{who} sent a frame of protocol {req.proto}, newer than "
                    f"this netctl daemon's protocol {PROTO}: the node is half-way through an "
                    "upgrade (the plugin binary on the host is newer than the daemon); finish "
                    "upgrading the daemon, or install its own plugin (netctl install-cni); "
                    "try again later")


def decode(req: Request) -> Invocation:
    """Split a request into its typed parts. Only the verb is validated here; the
    engine's verb table says which other parts a verb needs."""
    verb = validate.command(req.command)
    raw = bytes(req.config) if len(req.config) else req.stdin.encode()
    conf: dict[str, Any] | None = None
    error = ""
    try:
        obj = msgspec.json.decode(raw)
        if isinstance(obj, dict):
            conf = obj
        else:
            error = "not a JSON object"
    except msgspec.DecodeError as exc:
        error = str(exc)
    if verb == "DEL" and conf is not None:
        slim = without_pod_annotations(conf)
        if slim is not None:
            conf, raw = slim, msgspec.json.encode(slim)
    version = (conf or {}).get("cniVersion")
    caller = version if isinstance(version, str) and version in versions.SUPPORTED \
        else versions.LATEST
    args: dict[str, str] = {}
    args_error: CNIError | None = None
    try:
        args = validate.parse_cni_args(req.args)
    except CNIError as exc:
        args_error = exc  # refused by the verbs that read CNI_ARGS
    return Invocation(verb=verb, plugin=req.plugin, container_id=req.container_id,
                      netns=req.netns, ifname=req.ifname, args=args, args_error=args_error,
                      pod=Pod.from_args(args), stdin=raw, conf=conf, conf_error=error,
                      caller_version=caller)


def without_pod_annotations(conf: dict[str, Any]) -> dict[str, Any] | None:
    """``conf`` without ``runtimeConfig[POD_ANNOTATIONS]``; None when it has none."""
    runtime = conf.get("runtimeConfig")
    if not isinstance(runtime, dict) or POD_ANNOTATIONS not in runtime:
        return None
    return {**conf, "runtimeConfig": {k: v for k, v in runtime.items()
                                      if k != POD_ANNOTATIONS}}


def conf_as(inv: Invocation, kind: type[C], what: str, any_case: Collection[str] = ()) -> C:
    """The invocation's stdin as ``kind``, with a supported cniVersion: code 6 when it
    is not a JSON object, 7 when it does not fit, 1 for a version netctl does not serve.

    Keys named in ``any_case`` match in any letter case, as Go's encoding/json matches
    them (Multus' ``readinessindicatorfile`` is written ``readinessIndicatorFile`` too);
    the exact spelling wins when both are there."""
    if inv.conf is None:
        raise CNIError(DECODE_FAILURE, f"{what} on stdin is not valid JSON: {inv.conf_error}")
    obj = inv.conf
    if any_case:
        exact = {name.lower(): name for name in any_case}
        obj = dict(obj)
        for key, value in inv.conf.items():
            name = exact.get(key.lower())
            if name is not None and name not in inv.conf:
                obj[name] = value
    try:
        conf = msgspec.convert(obj, kind)
    except msgspec.ValidationError as exc:
        raise CNIError(INVALID_CONFIG, f"{what}: {exc}") from None
    versions.check_supported(str(getattr(conf, "cniVersion", "")))
    return conf


class GCList(msgspec.Struct, kw_only=True, forbid_unknown_fields=False):
    """A GC request's list of valid attachments, under either of its names."""

    valid_attachments: list[Any] | None = msgspec.field(
        default=None, name="cni.dev/valid-attachments")
    # the key's name before libcni 1.2.3 renamed it; some runtimes still send only this
    old_valid_attachments: list[Any] | None = msgspec.field(
        default=None, name="cni.dev/attachments")

    def valid_list(self) -> set[tuple[str, str]] | None:
        """The valid (container id, ifname) pairs; None when the request carries no list."""
        items = self.valid_attachments if self.valid_attachments is not None \
            else self.old_valid_attachments
        if items is None:
            return None
        return {(str(v.get("containerID")), str(v.get("ifname"))) for v in items
                if isinstance(v, dict)}
