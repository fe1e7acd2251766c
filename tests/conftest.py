"""Shared pytest configuration. Fixtures for kubesim come from the `kubesim.testing.pytest_plugin` entry point."""

from __future__ import annotations

from typing import Any

import pytest
import pytest_timeout

from kubesim.testing.patience import patience


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> object:
    """pytest-timeout's watchdog (``timeout`` in pyproject.toml, or a test's ``timeout`` mark) only turns a hang
    into a failure; like every other deadline of the suite it is stretched by the machine's load when the test
    starts (``kubesim.testing.patience``), so that a busy or slow machine does not miss it."""
    if not settings.timeout or settings.timeout <= 0:
        return None
    return pytest_timeout.pytest_timeout_set_timer(item, settings._replace(timeout=patience(settings.timeout)))
