"""The service network's router: the Rust router process (``service-network-router``, built from ``router/``) is
the data plane; this package is its adaptor, configured from a declarative document.

Public API (what the site controller, the router Pod and the commands use):

- ``parse_config(text) -> RouterConfig`` (``config.py``): validate a router document; ``ConfigError.problems``.
- ``RouterConfig(...).to_json()``: the document the controller writes into the router ConfigMap.
- ``ConfigSource`` (``sources.py``) and ``TlsResolver`` (``tls.py``): the two interfaces a Kubernetes adaptor
  implements (ConfigMap watch, Secret material: ``kube.py``); ``FileConfigSource`` and ``FileTlsResolver`` are the
  file ones.
- ``run_adaptor(source, AdaptorOptions(...), stop)`` (``rust_adaptor.py``): the whole adaptor (TLS material
  resolved to files, documents handed to the router process, crash restart, network status, metrics);
  ``RustAdaptor`` for a caller that wants the adaptor itself.
- ``DataPlane`` (``dataplane.py``): one router process and its control socket, without an adaptor.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import CONFIG_VERSION, RouterConfig, parse_config
    from .dataplane import DataPlane
    from .errors import ConfigError, RouterBinaryNotFound, RouterError
    from .options import AdaptorOptions
    from .rust_adaptor import RustAdaptor, adaptor_for, run_adaptor
    from .sources import ConfigSnapshot, ConfigSource, FileConfigSource
    from .tls import FileTlsResolver, ProfileFiles, TlsMaterial, TlsProblem, TlsResolver

#: where each public name lives: imported on first use, so that importing a module of this package (the router
#: Pod's command, ``early.py``) does not import them all (pydantic, aiohttp: most of a restarted container's start)
_HOMES = {
    "CONFIG_VERSION": "config", "RouterConfig": "config", "parse_config": "config",
    "DataPlane": "dataplane",
    "ConfigError": "errors", "RouterBinaryNotFound": "errors", "RouterError": "errors",
    "AdaptorOptions": "options",
    "RustAdaptor": "rust_adaptor", "adaptor_for": "rust_adaptor", "run_adaptor": "rust_adaptor",
    "ConfigSnapshot": "sources", "ConfigSource": "sources", "FileConfigSource": "sources",
    "FileTlsResolver": "tls", "ProfileFiles": "tls", "TlsMaterial": "tls", "TlsProblem": "tls", "TlsResolver": "tls",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{home}", __name__), name)


__all__ = [
    "CONFIG_VERSION",
    "AdaptorOptions",
    "ConfigError",
    "ConfigSnapshot",
    "ConfigSource",
    "DataPlane",
    "FileConfigSource",
    "FileTlsResolver",
    "ProfileFiles",
    "RouterBinaryNotFound",
    "RouterConfig",
    "RouterError",
    "RustAdaptor",
    "TlsMaterial",
    "TlsProblem",
    "TlsResolver",
    "adaptor_for",
    "parse_config",
    "run_adaptor",
]
