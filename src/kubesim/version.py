"""The one Kubernetes version kubesim claims to be: the API server's ``/version``, every simulated kubelet's
``kubeletVersion``, the probes' ``User-Agent`` and the built-in schemas it publishes all come from here, so clients
see one cluster version (the pinned kubectl's)."""

from __future__ import annotations

__all__ = ["GIT_VERSION", "MAJOR", "MINOR", "PATCH"]

MAJOR, MINOR, PATCH = 1, 37, 1
#: ``gitVersion`` of the API server and ``kubeletVersion`` of the nodes (a distribution suffix, as vendors add one).
GIT_VERSION = f"v{MAJOR}.{MINOR}.{PATCH}-kubesim"
