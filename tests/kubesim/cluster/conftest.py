"""Fixtures for the simulated-cluster tests (bodies live in ``clusterhelpers`` and ``traffichelpers``)."""

from clusterhelpers import env
from traffichelpers import sim

__all__ = ["env", "sim"]
