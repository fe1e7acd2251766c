"""Deadlines stretch with the machine's load and a configured factor, never shrink, and are capped."""

from __future__ import annotations

import os

import pytest

from kubesim.testing import patience as module


def test_deadlines_stretch_with_load_per_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.delenv(module.ENV, raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert module.patience(10) == 10
    monkeypatch.setattr(os, "getloadavg", lambda: (4.0, 0.0, 0.0))     # two other jobs per CPU
    assert module.patience(10) == 30
    monkeypatch.setattr(os, "getloadavg", lambda: (100.0, 0.0, 0.0))
    assert module.patience(10) == 10 * module.MAX_STRETCH
    monkeypatch.setenv(module.ENV, "2")
    assert module.patience(10) == 20 * module.MAX_STRETCH
    monkeypatch.setenv(module.ENV, "0.1")                               # never shorter than asked
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert module.patience(10) == 10
