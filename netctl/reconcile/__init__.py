"""Reconcile: finishing what a previous run left unfinished, and (later) leak clean-up."""
