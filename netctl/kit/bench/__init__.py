"""``netctl bench``: benchmarks on real namespaces and real plugins, one module each
(:mod:`~netctl_kit.bench.churn`, :mod:`~netctl_kit.bench.ipam`,
:mod:`~netctl_kit.bench.journal`, :mod:`~netctl_kit.bench.crash`,
:mod:`~netctl_kit.bench.events`, :mod:`~netctl_kit.bench.podman`,
:mod:`~netctl_kit.bench.kube`, :mod:`~netctl_kit.bench.hotplug`,
:mod:`~netctl_kit.bench.devices`,
:mod:`~netctl_kit.bench.sticky`, :mod:`~netctl_kit.bench.cluster` with its baseline
:mod:`~netctl_kit.bench.whereabouts`, :mod:`~netctl_kit.bench.query`,
:mod:`~netctl_kit.bench.scale`,
:mod:`~netctl_kit.bench.density`: ``node-density`` on a real node) on the shared
driver and base of :mod:`~netctl_kit.bench.common` (over :mod:`netctl_kit.harness`, which
the tests use too) and the one renderer of :mod:`~netctl_kit.bench.render`. Its command line is
:mod:`~netctl_kit.bench.cli`, which ``netctl`` loads through an entry point.
"""

from __future__ import annotations

import argparse
import sys


def main(args: argparse.Namespace) -> int:
    if args.bench == "churn":
        from netctl_kit.bench.churn import run_churn

        return run_churn(args)
    if args.bench == "ipam":
        from netctl_kit.bench.ipam import run_ipam

        return run_ipam(args)
    if args.bench == "journal" and args.lifecycles:
        from netctl_kit.bench.retention import run_retention

        return run_retention(args)
    if args.bench == "journal":
        from netctl_kit.bench.journal import run_journal

        return run_journal(args)
    if args.bench == "crash":
        from netctl_kit.bench.crash import run_crash

        return run_crash(args)
    if args.bench == "events":
        from netctl_kit.bench.events import run_events

        return run_events(args)
    if args.bench == "kube":
        from netctl_kit.bench.kube import run_kube

        return run_kube(args)
    if args.bench == "hotplug":
        from netctl_kit.bench.hotplug import run_hotplug

        return run_hotplug(args)
    if args.bench == "devices":
        from netctl_kit.bench.devices import run_devices

        return run_devices(args)
    if args.bench == "cluster":
        from netctl_kit.bench.cluster import run_cluster

        return run_cluster(args)
    if args.bench == "sticky":
        from netctl_kit.bench.sticky import run_sticky

        return run_sticky(args)
    if args.bench == "scale":
        from netctl_kit.bench.scale import run_scale

        return run_scale(args)
    if args.bench == "query":
        from netctl_kit.bench.query import run_query

        return run_query(args)
    if args.bench == "node-density":
        from netctl_kit.bench.density import run_density

        return run_density(args)
    if args.bench == "podman":
        from netctl_kit.bench.podman import run_podman

        return run_podman(args)
    print(f"netctl bench: no bench {args.bench!r}", file=sys.stderr)
    return 2
