"""What netctl keeps of the Kubernetes objects it watches, and the names it reads. Pure.

:class:`Pod` and :class:`Nad` are msgspec structs decoded straight from the API's JSON
(the informer's lists and watch events, one GET) keeping only the fields netctl needs:
a pod's identity, the annotations it reads, resourceVersion, deletionTimestamp and node, and
the names of its DRA ResourceClaims (:func:`pod_claims`); a NetworkAttachmentDefinition's
identity, resourceVersion and ``spec.config``. A pod listed for the addresses it holds
(:class:`PodWithStatus`, the cluster IPAM's adoption) keeps its network-status too. An
IPAMBlock of the cluster IPAM is a :class:`Block`, or a :class:`Borrow` when its spec
names the block it borrows an address of: :func:`decode_block` reads each as what it is. The
annotation names Kubernetes mode reads and writes, and the reasons of the Events it
posts, are here too.

Like :mod:`netctl.journal.records`, this module is the pure part of its package: the
engine's decisions (:mod:`netctl.kube.select`, :mod:`netctl.kube.nads`) import
it, and it imports nothing that talks to the API.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, TypeAlias

import msgspec

from netctl.cni import request

# The annotations Kubernetes mode reads and writes.
NETWORKS = "k8s.v1.cni.cncf.io/networks"  # the pod's network selection (both forms)
DEFAULT_NETWORK = "v1.multus-cni.io/default-network"  # replaces the cluster network
NETWORK_STATUS = "k8s.v1.cni.cncf.io/network-status"  # written after a successful ADD
# on a NAD: its delegate gets a device of this resource allocated to the pod (by the
# kubelet through a device plugin, or through a ResourceClaim: netctl/devices/)
RESOURCE_NAME = "k8s.v1.cni.cncf.io/resourceName"
CONFIG_SOURCE = "kubernetes.io/config.source"  # "api", or "file"/"http" for static pods
# a pod's opt-in to an attached network's attributes changed by detach + attach (hot-plug)
HOTPLUG_REPLACE = "netctl.dev/hotplug-replace"
# the runtimeConfig capability under which CRI-O and containerd pass a pod's annotations
RUNTIME_ANNOTATIONS = request.POD_ANNOTATIONS
# sticky addresses (netctl/ipam/sticky.py): the identity a pod names, and a KubeVirt
# virt-launcher pod's label naming its VM
STICKY_KEY = "netctl.dev/sticky-key"
KUBEVIRT_VM = "vm.kubevirt.io/name"

# The reasons of the Warning Events netctl posts on a pod whose networks it refuses
# (:class:`netctl.errors.Refusal`).
REASON_BAD_ANNOTATION = "InvalidNetworkAnnotation"  # a malformed selection
REASON_NOT_FOUND = "NoNetworkFound"  # no such NAD (Multus' reason)
REASON_FORBIDDEN = "NetworkNotAllowed"  # namespaceIsolation
REASON_BAD_NAD = "InvalidNetworkConfig"  # a NAD whose spec.config netctl cannot run
REASON_OTHER_NODE = "PodOfAnotherNode"  # a sandbox ADDed here for a pod bound elsewhere
# Hot-plug's Events (:mod:`netctl.kube.hotplug`): Normal on success, Warning otherwise.
REASON_ATTACHED = "NetworkAttached"
REASON_DETACHED = "NetworkDetached"
REASON_ATTACH_FAILED = "NetworkAttachFailed"
REASON_DETACH_FAILED = "NetworkDetachFailed"
REASON_HOTPLUG_REFUSED = "NetworkChangeRefused"  # hostNetwork, an attribute change …
# DRA (netctl/kubeapi/dra.py): a claim's networkData the API server did not take
REASON_NETWORK_DATA_REFUSED = "NetworkDataNotWritten"

# The only annotations kept in memory: a pod's other annotations (often kilobytes:
# kubectl's last-applied-configuration, the network-status netctl itself writes) are
# dropped as the object is decoded.
KEPT_ANNOTATIONS = frozenset({NETWORKS, DEFAULT_NETWORK, CONFIG_SOURCE, HOTPLUG_REPLACE,
                              STICKY_KEY})
KEPT_LABELS = frozenset({KUBEVIRT_VM})  # a pod's only labels kept


class Meta(msgspec.Struct, forbid_unknown_fields=False, omit_defaults=True):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    resourceVersion: str = ""
    annotations: dict[str, str] = {}
    labels: dict[str, str] = {}
    deletionTimestamp: str | None = None
    kept: ClassVar[frozenset[str]] = KEPT_ANNOTATIONS
    kept_labels: ClassVar[frozenset[str]] = KEPT_LABELS

    def __post_init__(self) -> None:
        if self.annotations and not self.annotations.keys() <= self.kept:
            self.annotations = {k: v for k, v in self.annotations.items() if k in self.kept}
        if self.labels and not self.labels.keys() <= self.kept_labels:
            self.labels = {k: v for k, v in self.labels.items() if k in self.kept_labels}


class MetaWithStatus(Meta):
    """A pod's metadata with its network-status kept (:class:`PodWithStatus`)."""

    kept: ClassVar[frozenset[str]] = KEPT_ANNOTATIONS | {NETWORK_STATUS}


class NadMeta(Meta):
    """A NAD's metadata: its resourceName annotation is the only one kept."""

    kept: ClassVar[frozenset[str]] = frozenset({RESOURCE_NAME})


class PodClaim(msgspec.Struct, forbid_unknown_fields=False, omit_defaults=True):
    """One of a pod's ``spec.resourceClaims``: the pod's name for a claim, and either the
    ResourceClaim it names directly or the ResourceClaimTemplate a claim is made from."""

    name: str = ""
    resourceClaimName: str | None = None
    resourceClaimTemplateName: str | None = None


class PodSpec(msgspec.Struct, forbid_unknown_fields=False, omit_defaults=True):
    nodeName: str = ""
    hostNetwork: bool = False
    resourceClaims: list[PodClaim] = []  # DRA: the claims the pod names (Pod.claims)


class ClaimStatus(msgspec.Struct, forbid_unknown_fields=False, omit_defaults=True):
    """One of a pod's ``status.resourceClaimStatuses``: the pod's name for a claim made
    from a template, and the ResourceClaim made (None: the pod needs none for it)."""

    name: str = ""
    resourceClaimName: str | None = None


class RequestMapping(msgspec.Struct, forbid_unknown_fields=False, omit_defaults=True):
    """Which request of the extended-resource claim serves which container's extended
    resource (``status.extendedResourceClaimStatus.requestMappings[]``)."""

    containerName: str = ""
    resourceName: str = ""
    requestName: str = ""


class ExtendedClaimStatus(msgspec.Struct, forbid_unknown_fields=False, omit_defaults=True):
    """A pod's ``status.extendedResourceClaimStatus`` (Kubernetes 1.34 and later): the
    claim the scheduler made for the pod's extended resources that a DRA DeviceClass
    serves (its ``extendedResourceName``), and which of its requests is which resource."""

    resourceClaimName: str = ""
    requestMappings: list[RequestMapping] = []


class PodStatus(msgspec.Struct, forbid_unknown_fields=False, omit_defaults=True):
    """The only part of a pod's status kept: the names of its ResourceClaims (DRA)."""

    resourceClaimStatuses: list[ClaimStatus] = []
    extendedResourceClaimStatus: ExtendedClaimStatus | None = None


def pod_claims(spec: PodSpec, status: PodStatus) -> list[str]:
    """The names of a pod's ResourceClaims, in the order the pod names them, each once:

    - a claim its spec names directly (``resourceClaimName``) — the API server never lists
      it in ``status.resourceClaimStatuses``;
    - a claim made from a template (``resourceClaimTemplateName``): the one
      ``status.resourceClaimStatuses`` names for that entry (none yet, or None: no claim);
    - the claim made for its extended resources (``status.extendedResourceClaimStatus``).
    """
    made = {c.name: c.resourceClaimName for c in status.resourceClaimStatuses}
    out: list[str] = []
    for ref in spec.resourceClaims:
        name = ref.resourceClaimName if ref.resourceClaimName is not None else \
            made.get(ref.name) if ref.resourceClaimTemplateName is not None else None
        if name and name not in out:
            out.append(name)
    extended = status.extendedResourceClaimStatus
    if extended is not None and extended.resourceClaimName and \
            extended.resourceClaimName not in out:
        out.append(extended.resourceClaimName)
    return out


class Pod(msgspec.Struct, forbid_unknown_fields=False, omit_defaults=True):
    """What netctl keeps of a pod."""

    metadata: Meta = msgspec.field(default_factory=Meta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)
    status: PodStatus = msgspec.field(default_factory=PodStatus)

    @property
    def claims(self) -> list[str]:
        """The names of the ResourceClaims the pod has (DRA; :func:`pod_claims`)."""
        return pod_claims(self.spec, self.status)

    @property
    def extended_requests(self) -> dict[str, str]:
        """The extended-resource claim's request names → the extended resource each
        serves (``{}``: the pod has no such claim)."""
        extended = self.status.extendedResourceClaimStatus
        if extended is None:
            return {}
        return {m.requestName: m.resourceName for m in extended.requestMappings
                if m.requestName and m.resourceName}

    @property
    def ref(self) -> request.Pod:
        """Its identity, the shape a request and the journal name a pod with."""
        meta = self.metadata
        return request.Pod(namespace=meta.namespace, name=meta.name, uid=meta.uid)


class PodWithStatus(Pod):
    """A pod as listed for the addresses it holds: its network-status annotation kept
    (:func:`netctl.kubeapi.netstatus.addresses` reads it)."""

    metadata: MetaWithStatus = msgspec.field(default_factory=MetaWithStatus)


class NadSpec(msgspec.Struct, forbid_unknown_fields=False, omit_defaults=True):
    config: str = ""


class Nad(msgspec.Struct, forbid_unknown_fields=False, omit_defaults=True):
    """What netctl keeps of a NetworkAttachmentDefinition."""

    metadata: NadMeta = msgspec.field(default_factory=NadMeta)
    spec: NadSpec = msgspec.field(default_factory=NadSpec)


class BlockOwner(msgspec.Struct, forbid_unknown_fields=False, omit_defaults=True):
    """An earlier owner of a block: which node held it, from when until when (RFC 3339)."""

    node: str
    since: str = ""
    until: str = ""


class StickyEntry(msgspec.Struct, forbid_unknown_fields=False, omit_defaults=True):
    """An address of a block reserved for a sticky identity (netctl/ipam/sticky.py) by the
    node that released it, until ``until`` (seconds since the epoch)."""

    address: str
    identity: str
    ifname: str = ""
    until: float = 0.0
    node: str = ""


class TransferAsk(msgspec.Struct, forbid_unknown_fields=False, omit_defaults=True):
    """Another node asks the node of a borrow for it: the address is reserved there for a
    sticky identity that came back on ``node``; ``refused`` is the answer when it is not
    (granting it is handing the borrow over)."""

    node: str
    identity: str
    ifname: str = ""
    refused: bool = False


class BlockSpec(msgspec.Struct, forbid_unknown_fields=False, omit_defaults=True):
    """A node's block of a pool: the addresses of ``cidr`` that ``node`` hands out, and
    the sticky reservations of them it publishes (``reserved``)."""

    pool: str = ""  # the pool's key: [network_name/]range
    scope: str = ""  # the uniqueness scope the block's addresses are unique in
    range: str = ""  # the pool's range (its key without network_name)
    networkName: str = ""
    poolSize: int = 0  # assignable addresses in the pool
    prefix: int = 0  # the range's prefix length: the leases' (a pod gets 10.1.0.5/16)
    cidr: str = ""
    node: str = ""  # the owner
    claimedAt: str = ""  # when the owner claimed it (RFC 3339)
    history: list[BlockOwner] = []  # the owners before
    reserved: list[StickyEntry] = []  # sticky reservations of its addresses, by its node


class BorrowSpec(BlockSpec, kw_only=True):
    """A borrow: the single-address block ``cidr`` inside another node's block
    (``parent``), asked for by ``node`` (a requested address); the parent's node grants
    or refuses it (``grant``). Asked for a sticky identity's reserved address, it names
    the identity and its interface; another node may ask for it (``transfer``)."""

    parent: str  # the name of the block it lies in
    grant: str = ""  # "" (asked) | granted | refused
    identity: str = ""
    ifname: str = ""
    transfer: TransferAsk | None = None


BLOCK_GROUP = "ipam.netctl.dev"
BLOCK_API_VERSION = f"{BLOCK_GROUP}/v1"
BLOCK_KIND = "IPAMBlock"


# the labels a block object carries, so that each node watches only what concerns it
# (label selectors): who holds it, its uniqueness scope (a digest: a scope is no label
# value), and for a borrow object the node whose block it asks an address of
BLOCK_NODE_LABEL = f"{BLOCK_GROUP}/node"
BLOCK_SCOPE_LABEL = f"{BLOCK_GROUP}/scope"
BLOCK_LENDER_LABEL = f"{BLOCK_GROUP}/lender"


class BlockMeta(Meta):
    """A block's metadata: the labels netctl selects blocks by are kept."""

    kept_labels: ClassVar[frozenset[str]] = frozenset({
        BLOCK_NODE_LABEL, BLOCK_SCOPE_LABEL, BLOCK_LENDER_LABEL})


class Block(msgspec.Struct, forbid_unknown_fields=False, omit_defaults=True):
    """An IPAMBlock (``ipam.netctl.dev/v1``, cluster-scoped): one node's block of a pool,
    or a :class:`Borrow`. Decoded by :func:`decode_block`."""

    metadata: BlockMeta = msgspec.field(default_factory=BlockMeta)
    spec: BlockSpec = msgspec.field(default_factory=BlockSpec)
    apiVersion: str = BLOCK_API_VERSION
    kind: str = BLOCK_KIND


class Borrow(Block, kw_only=True):
    """An IPAMBlock whose spec names a ``parent``: a :class:`BorrowSpec`."""

    spec: BorrowSpec


class _Parent(msgspec.Struct, forbid_unknown_fields=False):
    parent: str = ""


class _Kind(msgspec.Struct, forbid_unknown_fields=False):
    spec: _Parent = msgspec.field(default_factory=_Parent)


_KIND = msgspec.json.Decoder(_Kind)
_BLOCK, _BORROW = msgspec.json.Decoder(Block), msgspec.json.Decoder(Borrow)


def decode_block(data: bytes | msgspec.Raw) -> Block:
    """An IPAMBlock's JSON as a :class:`Borrow` when its spec names a ``parent``, else as
    a :class:`Block`: each read as what it is, never one as the other."""
    if _KIND.decode(data).spec.parent:
        return _BORROW.decode(data)
    return _BLOCK.decode(data)


class _Items(msgspec.Struct, forbid_unknown_fields=False):
    items: list[msgspec.Raw] | None = None


def decode_blocks(data: bytes) -> list[Block]:
    """A list of IPAMBlocks (the API's ``IPAMBlockList``), each by :func:`decode_block`."""
    return [decode_block(item) for item in msgspec.json.decode(data, type=_Items).items or ()]


class Status(msgspec.Struct, forbid_unknown_fields=False):
    """The API's ``Status``: the body of a refusal, and the object of a watch's ERROR."""

    code: int = 0
    reason: str = ""
    message: str = ""


class Node(msgspec.Struct, forbid_unknown_fields=False, omit_defaults=True):
    """What netctl keeps of a Node: that it exists."""

    metadata: Meta = msgspec.field(default_factory=Meta)


def key(obj: Pod | Nad) -> str:
    """``namespace/name``."""
    return f"{obj.metadata.namespace}/{obj.metadata.name}"


def is_static(pod: Pod) -> bool:
    """A static pod (from a kubelet manifest): the API holds its mirror, whose UID is not
    the one the kubelet gives the runtime."""
    source = pod.metadata.annotations.get(CONFIG_SOURCE)
    return source is not None and source != "api"


# The DRA device attributes a network device carries (Multus' names): kept, all others
# dropped as a ResourceSlice is decoded (slices of many devices run to hundreds of KB).
SLICE_ATTRIBUTES = frozenset({"k8s.cni.cncf.io/resourceName", "k8s.cni.cncf.io/deviceID"})


_Int: TypeAlias = int  # the attribute's fields are named after these types
_Bool: TypeAlias = bool


class Attribute(msgspec.Struct, forbid_unknown_fields=False, omit_defaults=True):
    """A DRA device attribute: one of its typed values."""

    string: str | None = None
    integer: _Int | None = msgspec.field(default=None, name="int")
    boolean: _Bool | None = msgspec.field(default=None, name="bool")
    version: str | None = None

    def text(self) -> str:
        for value in (self.string, self.version, self.integer, self.boolean):
            if value is not None:
                return str(value)
        return ""


class SliceDevice(msgspec.Struct, forbid_unknown_fields=False, omit_defaults=True):
    name: str = ""
    attributes: dict[str, Attribute] = {}

    def __post_init__(self) -> None:
        if self.attributes and not self.attributes.keys() <= SLICE_ATTRIBUTES:
            self.attributes = {k: v for k, v in self.attributes.items()
                               if k in SLICE_ATTRIBUTES}


class SlicePool(msgspec.Struct, forbid_unknown_fields=False, omit_defaults=True):
    name: str = ""


class SliceSpec(msgspec.Struct, forbid_unknown_fields=False, omit_defaults=True):
    driver: str = ""
    nodeName: str = ""
    pool: SlicePool = msgspec.field(default_factory=SlicePool)
    devices: list[SliceDevice] = []


class Slice(msgspec.Struct, forbid_unknown_fields=False, omit_defaults=True):
    """What netctl keeps of a DRA ResourceSlice (``resource.k8s.io/v1``): its driver,
    pool and devices with their network attributes (:data:`SLICE_ATTRIBUTES`)."""

    metadata: Meta = msgspec.field(default_factory=Meta)
    spec: SliceSpec = msgspec.field(default_factory=SliceSpec)


# -- what happens to this node's pods, as the hot-plug follows it (netctl/kube/hotplug.py) --


@dataclass(frozen=True)
class PodChanged:
    """A pod of this node listed or changed (the watch)."""

    pod: Pod


@dataclass(frozen=True)
class PodChosen:
    """A runtime's ADD of ``container_id`` chose its networks from ``pod`` (the cache's)."""

    container_id: str
    pod: Pod


@dataclass(frozen=True)
class PodAdded:
    """A runtime's ADD of the pod's sandbox ``container_id`` succeeded."""

    pod: request.Pod
    container_id: str


PodEvent = PodChanged | PodChosen | PodAdded  # what the hot-plug follows, in order
