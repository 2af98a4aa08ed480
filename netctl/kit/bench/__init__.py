"""``netctl bench``: benchmarks on real namespaces and real plugins, one module each
(:mod:`~netctl.kit.bench.churn`, :mod:`~netctl.kit.bench.ipam`,
:mod:`~netctl.kit.bench.journal`, :mod:`~netctl.kit.bench.crash`,
:mod:`~netctl.kit.bench.events`, :mod:`~netctl.kit.bench.podman`,
:mod:`~netctl.kit.bench.kube`, :mod:`~netctl.kit.bench.hotplug`,
:mod:`~netctl.kit.bench.devices`,
:mod:`~netctl.kit.bench.sticky`, :mod:`~netctl.kit.bench.cluster` with its baseline
:mod:`~netctl.kit.bench.whereabouts`, :mod:`~netctl.kit.bench.query`,
:mod:`~netctl.kit.bench.scale`,
:mod:`~netctl.kit.bench.density`: ``node-density`` on a real node) on the shared
driver and base of :mod:`~netctl.kit.bench.common` (over :mod:`netctl.kit.harness`, which
the tests use too) and the one renderer of :mod:`~netctl.kit.bench.render`. Its command line is
:mod:`~netctl.kit.bench.cli`, which ``netctl`` loads through an entry point.
"""

from __future__ import annotations

import argparse
import sys


def main(args: argparse.Namespace) -> int:
    if args.bench == "churn":
        from netctl.kit.bench.churn import run_churn

        return run_churn(args)
    if args.bench == "ipam":
        from netctl.kit.bench.ipam import run_ipam

        return run_ipam(args)
    if args.bench == "journal" and args.lifecycles:
        from netctl.kit.bench.retention import run_retention

        return run_retention(args)
    if args.bench == "journal":
        from netctl.kit.bench.journal import run_journal

        return run_journal(args)
    if args.bench == "crash":
        from netctl.kit.bench.crash import run_crash

        return run_crash(args)
    if args.bench == "events":
        from netctl.kit.bench.events import run_events

        return run_events(args)
    if args.bench == "kube":
        from netctl.kit.bench.kube import run_kube

        return run_kube(args)
    if args.bench == "hotplug":
        from netctl.kit.bench.hotplug import run_hotplug

        return run_hotplug(args)
    if args.bench == "devices":
        from netctl.kit.bench.devices import run_devices

        return run_devices(args)
    if args.bench == "cluster":
        from netctl.kit.bench.cluster import run_cluster

        return run_cluster(args)
    if args.bench == "sticky":
        from netctl.kit.bench.sticky import run_sticky

        return run_sticky(args)
    if args.bench == "scale":
        from netctl.kit.bench.scale import run_scale

        return run_scale(args)
    if args.bench == "query":
        from netctl.kit.bench.query import run_query

        return run_query(args)
    if args.bench == "node-density":
        from netctl.kit.bench.density import run_density

        return run_density(args)
    if args.bench == "podman":
        from netctl.kit.bench.podman import run_podman

        return run_podman(args)
    print(f"netctl bench: no bench {args.bench!r}", file=sys.stderr)
    return 2
