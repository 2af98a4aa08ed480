"""netctl's kit: what tests, benches and demos the product, never shipped to a node.

``netctl_kit.harness`` starts real daemons in real namespaces; ``netctl_kit.kubefake`` is
the fake Kubernetes API server; ``netctl_kit.bench`` is ``netctl bench`` (offered by
``netctl`` through the ``netctl.commands`` entry point, when the kit is installed);
``netctl_kit.demo`` is the scaffolding of ``deploy/demo.sh`` and ``deploy/tour.sh``.
Nothing in the rest of ``netctl`` imports it (a ``lint-imports`` contract).
"""
