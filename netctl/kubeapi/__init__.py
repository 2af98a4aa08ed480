"""What netctl reads and writes in the Kubernetes API: the client (:mod:`.api` over
:mod:`.http`; the configuration read by :mod:`.lite`, else by :mod:`.full`), the watched
caches (:mod:`.informer`, :mod:`.pods`), the objects as netctl keeps them (:mod:`.objects`),
network-status (:mod:`.netstatus`, :mod:`.statuswrites`), Events, this node's Node, the
cluster IPAM's blocks, whereabouts' records, DRA claims and slices (:mod:`.dra`). Below the
engine: it knows no request and no chain."""
