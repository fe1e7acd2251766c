"""The development environment: the whole system on one machine (``local up``) and the demo.

It is the one place that joins the product (``listener_operator``) and the local cluster (``kubesim``); neither of
those imports it or each other (import-linter contracts in pyproject.toml). Its commands reach the
``listener-operator`` command line through the entry-point group ``listener_operator.commands``.
"""
