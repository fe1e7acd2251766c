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

from .config import CONFIG_VERSION, RouterConfig, parse_config
from .dataplane import DataPlane
from .errors import ConfigError, RouterBinaryNotFound, RouterError
from .options import AdaptorOptions
from .rust_adaptor import RustAdaptor, adaptor_for, run_adaptor
from .sources import ConfigSnapshot, ConfigSource, FileConfigSource
from .tls import FileTlsResolver, ProfileFiles, TlsMaterial, TlsProblem, TlsResolver

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
