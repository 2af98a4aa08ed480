"""``netctl bench``: benchmarks on real namespaces and real plugins, one module each
(:mod:`~netctl.bench.churn`, :mod:`~netctl.bench.ipam`, :mod:`~netctl.bench.journal`,
:mod:`~netctl.bench.crash`, :mod:`~netctl.bench.events`, :mod:`~netctl.bench.podman`,
:mod:`~netctl.bench.kube`, :mod:`~netctl.bench.cluster` with its baseline
:mod:`~netctl.bench.whereabouts`) on the shared driver and base of :mod:`~netctl.bench.common`
(over :mod:`netctl.harness`, which the tests use too) and the one renderer of
:mod:`~netctl.bench.render`.
"""

from __future__ import annotations

import argparse
import sys


def main(args: argparse.Namespace) -> int:
    if args.bench == "churn":
        from netctl.bench.churn import run_churn

        return run_churn(args)
    if args.bench == "ipam":
        from netctl.bench.ipam import run_ipam

        return run_ipam(args)
    if args.bench == "journal" and args.lifecycles:
        from netctl.bench.retention import run_retention

        return run_retention(args)
    if args.bench == "journal":
        from netctl.bench.journal import run_journal

        return run_journal(args)
    if args.bench == "crash":
        from netctl.bench.crash import run_crash

        return run_crash(args)
    if args.bench == "events":
        from netctl.bench.events import run_events

        return run_events(args)
    if args.bench == "kube":
        from netctl.bench.kube import run_kube

        return run_kube(args)
    if args.bench == "cluster":
        from netctl.bench.cluster import run_cluster

        return run_cluster(args)
    if args.bench == "podman":
        from netctl.bench.podman import run_podman

        return run_podman(args)
    print(f"netctl bench: no bench {args.bench!r}", file=sys.stderr)
    return 2
