"""Central IPAM: pure range maths (:mod:`.ranges`), the allocator and its backends."""
