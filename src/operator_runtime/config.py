"""Finding the cluster configuration and making the one API client of a process from it.

The configuration is parsed by lightkube's public ``KubeConfig`` (kubeconfig files with contexts, relative paths and
``-data`` fields, and the in-cluster service account); only the order in which sources are tried is ours, and the
connection is made by :mod:`.transport`.
"""

from __future__ import annotations

import os
from pathlib import Path

from lightkube.config.kubeconfig import DEFAULT_KUBECONFIG, SERVICE_ACCOUNT, KubeConfig
from lightkube.core.exceptions import ConfigError

from .api import KubeApi, RequestHook
from .transport import DEFAULT_TIMEOUT, HttpTransport

__all__ = ["SERVICE_ACCOUNT_DIR_ENV", "ConfigError", "KubeConfig", "default_service_account_dir", "load_config",
           "make_api", "own_namespace"]

#: Where the in-cluster credentials are when not at Kubernetes' fixed path: a process that is not in a container
#: (kubesim runs Pods as host processes) cannot see ``/var/run/secrets/kubernetes.io/serviceaccount``.
SERVICE_ACCOUNT_DIR_ENV = "KUBERNETES_SERVICE_ACCOUNT_DIR"


def default_service_account_dir() -> str:
    """The directory of the in-cluster token, ``ca.crt`` and ``namespace``: ``$KUBERNETES_SERVICE_ACCOUNT_DIR``,
    else Kubernetes' ``/var/run/secrets/kubernetes.io/serviceaccount``."""
    return os.environ.get(SERVICE_ACCOUNT_DIR_ENV) or SERVICE_ACCOUNT


def own_namespace(*variables: str) -> str:
    """The first of the environment ``variables`` that is set, else the namespace of the Pod's service account
    (``namespace`` in :func:`default_service_account_dir`), else ``default``."""
    for name in variables:
        if value := os.environ.get(name):
            return value
    try:
        namespace = (Path(default_service_account_dir()) / "namespace").read_text(encoding="utf-8").strip()
    except OSError:
        namespace = ""
    return namespace or "default"


def load_config(kubeconfig: str | os.PathLike[str] | None = None, *,
                service_account_dir: str | os.PathLike[str] | None = None) -> KubeConfig:
    """Find the cluster configuration: explicit path, else ``$KUBECONFIG``, else in-cluster, else ``~/.kube/config``.

    lightkube's own ``KubeConfig.from_env`` tries in-cluster *before* ``$KUBECONFIG``; we want an explicitly
    configured file to win (as kubectl does), hence this small resolver. In-cluster means
    ``$KUBERNETES_SERVICE_HOST`` and a token in ``service_account_dir`` (default:
    :func:`default_service_account_dir`).
    """
    if service_account_dir is None:
        service_account_dir = default_service_account_dir()
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


def make_api(config: str | os.PathLike[str] | KubeConfig | None = None, *, on_request: RequestHook | None = None,
             timeout: float = DEFAULT_TIMEOUT, context: str | None = None) -> KubeApi:
    """The API client for a kubeconfig path (or an already loaded configuration; None: :func:`load_config`'s
    search), with its current context or ``context``. Works with plain-http servers and bearer tokens (kubesim) as
    well as TLS clusters.

    The caller closes it with ``await api.close()``.
    """
    loaded = config if isinstance(config, KubeConfig) else load_config(config)
    if context is not None and context not in loaded.contexts:
        raise ConfigError(f"context {context!r} does not exist in the kubeconfig")
    single = loaded.get(context_name=context) if context is not None else loaded.get()
    if single is None:
        raise ConfigError("the kubeconfig has no current context")
    return KubeApi(HttpTransport.from_config(single, timeout=timeout), on_request=on_request)
