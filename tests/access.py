"""What netctl may do in the Kubernetes API, and why: one table.

The DaemonSet's ClusterRole (``deploy/kubernetes/rbac.yaml``) grants exactly these rules,
one ClusterRole rule per row with its reason as the comment above it; a test holds the
manifest to the table. The Kubernetes client's calls are to be checked against the same table
(:func:`allowed`), so a call the role does not grant fails in the tests, not on a node
with a 403. Least privilege: nothing is granted that no code path needs, and each row
says which path needs it.
"""

from __future__ import annotations

from dataclasses import dataclass

CORE = ""  # the core API group (pods, events, nodes)
NAD_GROUP = "k8s.cni.cncf.io"
IPAM_GROUP = "ipam.netctl.dev"
WHEREABOUTS_GROUP = "whereabouts.cni.cncf.io"  # whereabouts' CRDs: read for a takeover
COORDINATION_GROUP = "coordination.k8s.io"  # leases: one holder among the daemons
DRA_GROUP = "resource.k8s.io"  # DRA: claims read, their status written, slices watched
AUTHN_GROUP = "authentication.k8s.io"
AUTHZ_GROUP = "authorization.k8s.io"


@dataclass(frozen=True)
class Rule:
    api_group: str
    resource: str
    verbs: tuple[str, ...]
    reason: str


RULES: tuple[Rule, ...] = (
    Rule(CORE, "pods", ("get", "list", "watch"),
         "the pod cache: this node's pods only (field selector spec.nodeName), listed, then "
         "watched from the list's resourceVersion; one GET for a pod the cache has not seen "
         "yet when its sandbox is ADDed; whereabouts takeover: one GET per pod (any node) "
         "that a whereabouts reservation names, to hold its address while it exists; "
         "cluster IPAM: one LIST of a gone node's pods before its blocks are taken over, "
         "and of this node's pods (their network-status) when its journal lost its blocks"),
    Rule(CORE, "pods", ("patch",),
         "write the k8s.v1.cni.cncf.io/network-status annotation after a successful ADD"),
    Rule(NAD_GROUP, "network-attachment-definitions", ("get", "list", "watch"),
         "the NetworkAttachmentDefinition cache, cluster-wide: the networks pods select, "
         "clusterNetwork and defaultNetworks"),
    Rule(CORE, "events", ("create", "patch"),
         "tell a pod why its networks were refused (a malformed annotation, an unknown or "
         "forbidden NAD); patch counts a repeated event instead of creating another"),
    Rule(CORE, "nodes", ("get", "list", "watch"),
         "this node's own Node (field selector metadata.name), listed then watched: not "
         "ready while --node-name names no Node; cluster IPAM: the holder of the gone-nodes "
         "lease alone watches every Node (their metadata), to find the nodes that are "
         "gone, whose address blocks are reclaimed after a grace period"),
    Rule(COORDINATION_GROUP, "leases", ("get", "create", "update"),
         "cluster IPAM: one daemon holds the Lease kube-system/netctl-ipam-gone-nodes and "
         "alone takes over gone nodes' blocks; the holder renews it, the others read it "
         "once per lease duration and take it when it is not renewed"),
    Rule(IPAM_GROUP, "ipamblocks",
         ("create", "get", "list", "watch", "update", "delete"),
         "cluster IPAM: claim a node's address block by creating it (AlreadyExists: taken), "
         "read one whose claim was not answered, hand a gone node's block over with an "
         "update under its resourceVersion, delete it (with preconditions) when it has "
         "been empty for block-idle seconds"),
    Rule(WHEREABOUTS_GROUP, "ippools", ("list",),
         "whereabouts takeover (ipam-takeover: [whereabouts]): the addresses whereabouts' "
         "IPPools hand out, held until their pods are gone; listed, never written"),
    Rule(WHEREABOUTS_GROUP, "overlappingrangeipreservations", ("list",),
         "whereabouts takeover: the addresses of whereabouts' overlapping-range "
         "reservations, held until their pods are gone; listed, never written"),
    Rule(DRA_GROUP, "resourceclaims", ("get",),
         "device networks through DRA: a pod's ResourceClaims, read at its ADD (never "
         "listed or watched: a pod's claims are its own)"),
    Rule(DRA_GROUP, "resourceclaims/status", ("patch",),
         "DRA: each attached device's networkData and Ready condition in its claim's status"),
    Rule(DRA_GROUP, "resourceclaims/driver", ("associated-node:patch",),
         "DRA, Kubernetes 1.36 and later: changing a claim's status.devices also needs this "
         "synthetic permission, per driver (resourceNames would name drivers; any network "
         "driver is served, so none are named); associated-node: only for claims allocated "
         "on the node the daemon's pod-bound token names, never arbitrary-node"),
    Rule(DRA_GROUP, "resourceslices", ("list", "watch"),
         "DRA: this node's ResourceSlices (field selector spec.nodeName), listed then watched "
         "from the first pod with claims: which device is which network's"),
    Rule(AUTHN_GROUP, "tokenreviews", ("create",),
         "query-addr: whose is the bearer token a kubectl netctl caller sent (a "
         "TokenReview; nothing is stored)"),
    Rule(AUTHZ_GROUP, "subjectaccessreviews", ("create",),
         "query-addr: may that caller get nodes/netctl-journal of this node (a "
         "SubjectAccessReview; nothing is stored)"),
)


def grants() -> set[tuple[str, str, str]]:
    """Every (api group, resource, verb) the table grants."""
    return {(r.api_group, r.resource, verb) for r in RULES for verb in r.verbs}


def allowed(api_group: str, resource: str, verb: str) -> bool:
    return (api_group, resource, verb) in grants()
