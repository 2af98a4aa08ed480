"""Everything that talks to the Kubernetes API (see ARCHITECTURE.md)."""
