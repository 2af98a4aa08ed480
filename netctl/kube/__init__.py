"""Kubernetes mode, all of it (docs/architecture.md lists its modules): on the engine and
the reconciler; what it reads and writes in the API is :mod:`netctl.kubeapi`, below the
engine."""
