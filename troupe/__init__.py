"""Troupe: a standalone secondary scheduler for Kubernetes with gang scheduling."""

__version__ = "0.1.0"
