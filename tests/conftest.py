"""Shared pytest configuration. Fixtures for kubesim come from the `kubesim.pytest_plugin` entry point."""
