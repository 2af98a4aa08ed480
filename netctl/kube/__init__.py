"""Kubernetes mode, all of it.

- :mod:`~netctl.kube.mode`: the mode's wiring — the caches, network-status, Events, pods
  deleted, the cluster IPAM's loop, device networks' sources; run by the daemon;
- :mod:`~netctl.kube.hotplug`: a running pod's networks annotation followed;
- :mod:`~netctl.kube.queryserver` and :mod:`~netctl.kube.clusterquery`: the read-only query
  endpoint on each node, and ``kubectl netctl`` asking every node;
- :mod:`~netctl.kube.select` and :mod:`~netctl.kube.nads`: which networks a pod gets (its
  annotations, the NADs) — what the engine is given in this mode;
All of it stands on the engine and the reconciler; what netctl reads and writes in the API
(the client, the informers, the objects, network-status, Events, blocks, claims) is
:mod:`netctl.kubeapi`, below the engine (``pyproject.toml``'s layer contract)."""
