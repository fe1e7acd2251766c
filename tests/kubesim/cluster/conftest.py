"""Fixtures for the simulated-cluster tests (bodies live in ``clusterhelpers``)."""

from clusterhelpers import env

__all__ = ["env"]
