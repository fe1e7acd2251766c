"""The service network's router: HAProxy as the data plane, configured from a declarative document.

Public API (what the site controller and the router Pod use):

- ``parse_config(text) -> RouterConfig`` (``config.py``): validate a router document; ``ConfigError.problems``.
- ``RouterConfig(...).to_json()``: the document the controller writes into the router ConfigMap.
- ``render_config(config, layout, profiles={}) -> str``: haproxy.cfg for a config (pure; see ``spec.compose`` and
  ``haproxy_config.render`` for the two steps).
- ``Router(layout, haproxy=..., tls_resolver=...)``: ``await start(config)``, ``await apply(config) -> ApplyResult``,
  ``await stats()``, ``await stop()``.
- ``ConfigSource`` (``sources.py``) and ``TlsResolver`` (``tls.py``): the two interfaces a Kubernetes adaptor
  implements (ConfigMap watch, Secret material); ``FileConfigSource`` and ``FileTlsResolver`` are the file ones.
- ``run_adaptor(source, AdaptorOptions(...), stop)``: the whole adaptor (apply loop, crash restart, metrics).
"""

from __future__ import annotations

from collections.abc import Mapping

from .adaptor import AdaptorOptions, RouterAdaptor, run_adaptor
from .config import CONFIG_VERSION, RouterConfig, parse_config
from .errors import ConfigError, HaproxyNotFound, RouterError
from .haproxy_config import render
from .router import ApplyResult, Router
from .sources import ConfigSnapshot, ConfigSource, FileConfigSource
from .spec import StateLayout, compose
from .tls import FileTlsResolver, ProfileFiles, TlsMaterial, TlsProblem, TlsResolver

__all__ = [
    "CONFIG_VERSION",
    "AdaptorOptions",
    "ApplyResult",
    "ConfigError",
    "ConfigSnapshot",
    "ConfigSource",
    "FileConfigSource",
    "FileTlsResolver",
    "HaproxyNotFound",
    "ProfileFiles",
    "Router",
    "RouterAdaptor",
    "RouterConfig",
    "RouterError",
    "StateLayout",
    "TlsMaterial",
    "TlsProblem",
    "TlsResolver",
    "parse_config",
    "render_config",
    "run_adaptor",
]


def render_config(config: RouterConfig, layout: StateLayout,
                  profiles: Mapping[str, ProfileFiles] | None = None) -> str:
    """haproxy.cfg for ``config`` (entities whose TLS profile is not in ``profiles`` are left out)."""
    spec, _ = compose(config, profiles or {}, layout)
    return render(spec)
