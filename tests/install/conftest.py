"""Markers of the install tests."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: builds or runs the container image (minutes); deselect with -m 'not slow'")
