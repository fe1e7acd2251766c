"""The kinds a system site's resource files may hold (pure, standard library only: the command line reads it to
check its arguments without loading the site)."""

from __future__ import annotations

__all__ = ["API_VERSION", "KINDS"]

KINDS = ("Site", "Listener", "Connector", "Link", "AccessToken", "RouterAccess")
API_VERSION = "skupper.io/v2alpha1"
