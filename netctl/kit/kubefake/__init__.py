"""A fake Kubernetes API server for the tests and ``netctl bench kube``, with the semantics
netctl depends on, spoken over real HTTP so that the real kubernetes-asyncio client (and
netctl daemons in other processes, through a kubeconfig) can drive it. It lives in the
package so that the bench can run it from an installed netctl; nothing that runs on a
node imports it (``lint-imports`` holds it), and it imports nothing of netctl but
:mod:`netctl_kit.kubebins` (where the real servers' binaries are, for :mod:`.real`).

- :mod:`.server`: :class:`FakeKube`, the server on its own thread and loop, and the
  controls a test holds (outage, compaction, dropped watches, request counts, latency).
- :mod:`.store`: the objects, the global resourceVersion, the history, the write rules
  (409/404/422) and the watch fan-out; no HTTP.
- :mod:`.selectors`, :mod:`.patching`: label/field selectors and merge/JSON patches, pure.
- :mod:`.resources`: the served kinds (pods, events, nodes, namespaces, leases,
  NetworkAttachmentDefinitions, and CRDs declared with :func:`crd`) and discovery.
- :mod:`.errors`: the ``Status`` failures, with the real server's reasons and messages.
- :mod:`.dra`: what the real server refuses in DRA writes (pods' claims, claims' device
  status and its per-driver authorization), pure.
- :mod:`.objects`: builders of minimal valid pods, NADs, nodes, ResourceSlices and
  ResourceClaims.
"""

from .errors import ApiError
from .objects import claim_allocation, nad, node, pod, resource_claim, resource_slice
from .resources import IPAMBLOCKS, IPPOOLS, RESERVATIONS, Resource, crd
from .server import FakeKube

__all__ = ["IPAMBLOCKS", "IPPOOLS", "RESERVATIONS", "ApiError", "FakeKube", "Resource",
           "claim_allocation", "crd", "nad", "node", "pod", "resource_claim", "resource_slice"]
