"""Everything that talks to the Kubernetes API (see docs/architecture.md)."""
