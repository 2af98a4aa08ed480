"""netctl: a node network controller behind a thin CNI plugin."""

__version__ = "0.1.0"
