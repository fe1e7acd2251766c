"""Support for tests and demos that run on kubesim (never imported by kubesim itself).

Modules: ``pytest_plugin`` (the ``kubesim`` fixture, registered through the ``pytest11`` entry point),
``patience`` (load-stretched waits), ``rawhttp`` (a raw-HTTP client: status codes and bodies) and ``traffic``
(which Pod answers at a published address; loopback only).
"""
