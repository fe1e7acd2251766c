"""Construction of the lightkube client used by every operator mode."""

from __future__ import annotations

import os
from pathlib import Path

import lightkube
from lightkube.config.kubeconfig import DEFAULT_KUBECONFIG, SERVICE_ACCOUNT, KubeConfig
from lightkube.core.exceptions import ConfigError


def load_config(kubeconfig: str | None = None, *, service_account_dir: str | os.PathLike[str] = SERVICE_ACCOUNT
                ) -> KubeConfig:
    """Find the cluster configuration: explicit path, else ``$KUBECONFIG``, else in-cluster, else ``~/.kube/config``.

    lightkube's own ``KubeConfig.from_env`` tries in-cluster *before* ``$KUBECONFIG``; we want an explicitly
    configured file to win (as kubectl does), hence this small resolver.
    """
    if kubeconfig:
        return KubeConfig.from_file(kubeconfig)
    env_path = os.environ.get("KUBECONFIG")
    if env_path:
        # kubectl allows a colon-separated list; lightkube reads one file, so take the first existing one.
        for candidate in env_path.split(os.pathsep):
            if candidate and Path(candidate).expanduser().is_file():
                return KubeConfig.from_file(candidate)
        raise ConfigError(f"no kubeconfig file found in KUBECONFIG={env_path!r}")
    if os.environ.get("KUBERNETES_SERVICE_HOST") and Path(service_account_dir, "token").is_file():
        return KubeConfig.from_service_account(service_account_dir)
    default = Path(DEFAULT_KUBECONFIG).expanduser()
    if default.is_file():
        return KubeConfig.from_file(default)
    raise ConfigError("no Kubernetes configuration found: pass --kubeconfig, set KUBECONFIG, "
                      f"run in a cluster, or create {DEFAULT_KUBECONFIG}")


def make_client(kubeconfig: str | None = None, *, field_manager: str | None = None) -> lightkube.AsyncClient:
    """An async lightkube client for the configuration found by :func:`load_config`.

    Works with plain-http servers and bearer tokens (the kubesim test server), as well as TLS clusters.
    """
    return lightkube.AsyncClient(load_config(kubeconfig), field_manager=field_manager)
