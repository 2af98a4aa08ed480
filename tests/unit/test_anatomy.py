"""The kit's anatomy: what it counts of a request's path and of the product's size."""

from netctl_kit import anatomy

LAYERS = [["netctl.commands.cli"], ["netctl.daemon.run"], ["netctl.daemon.server"],
          ["netctl.engine"], ["netctl.journal", "netctl.cni"], ["netctl.logs"]]


def test_the_path_counts_what_the_server_reaches_and_the_calls_back_up() -> None:
    edges = [["netctl.daemon.server", "netctl.daemon.run"],  # a handler the daemon gave: up
             ["netctl.daemon.run", "netctl.engine.engine"],
             ["netctl.engine.engine", "netctl.journal.store"],
             ["netctl.journal.store", "netctl.logs"],
             ["netctl.cni.request", "netctl.engine.plan"],    # not reached from the server
             ["netctl.commands.cli", "netctl.engine.chains"],  # a task's first frame: no edge
             ["netctl.engine.engine", "netctl.engine.chains"]]
    got = anatomy.summarize(edges, LAYERS)
    assert got["modules"] == ["netctl.daemon.run", "netctl.daemon.server", "netctl.engine.chains",
                              "netctl.engine.engine", "netctl.journal.store", "netctl.logs"]
    assert got["calls"] == 5
    assert got["climbs"] == ["netctl.daemon.server -> netctl.daemon.run"]


def test_the_layers_are_read_from_the_import_contract() -> None:
    layers = anatomy._layers()
    flat = [name for line in layers for name in line]
    assert flat.index("netctl.commands") < flat.index("netctl.daemon") < \
        flat.index("netctl.journal")
    assert anatomy._layer("netctl.journal.store", layers) > \
        anatomy._layer("netctl.daemon.server", layers)


def test_sizes_split_the_product_from_the_kit() -> None:
    got = anatomy.sizes()
    assert got["product_lines"] > 1000 and got["kit_lines"] > 1000
    span, where = got["longest_functions"][0]
    assert span >= got["longest_functions"][-1][0] and not where.startswith("netctl/kit/")
