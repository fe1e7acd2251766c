"""The protocol of a kubeconfig ``exec`` credential plugin (``client.authentication.k8s.io``): what the plugin is
told and what its answer means. The operators' transport (asynchronous) and the ``skupper`` command's blocking client
run the plugin each their own way and share this; standard library only, as the command line imports it."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable
from datetime import datetime

__all__ = ["API_VERSIONS", "plugin_environment", "read_answer"]

#: the ExecCredential versions a plugin may be configured with, as client-go's
API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1",
                "client.authentication.k8s.io/v1alpha1")


def plugin_environment(api_version: str, extra: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The plugin's environment: ours, the kubeconfig's ``env`` entries, and ``KUBERNETES_EXEC_INFO`` (not
    interactive)."""
    env = dict(os.environ)
    env.update(extra)
    env["KUBERNETES_EXEC_INFO"] = json.dumps({"apiVersion": api_version, "kind": "ExecCredential",
                                              "spec": {"interactive": False}})
    return env


def read_answer(stdout: bytes) -> tuple[str, float | None]:
    """The token of the plugin's answer and when it expires (seconds since the epoch; None when the answer does not
    say, or says it in a form that cannot be read). ValueError when the answer holds no ``status.token``."""
    try:
        status = json.loads(stdout)["status"]
        token = str(status["token"])
    except (ValueError, KeyError, TypeError):
        raise ValueError("no status.token") from None
    expires = status.get("expirationTimestamp")
    expiry = None
    if expires:
        with contextlib.suppress(ValueError):
            expiry = datetime.fromisoformat(str(expires).replace("Z", "+00:00")).timestamp()
    return token, expiry
