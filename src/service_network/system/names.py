"""The kinds a system site's resource files may hold (pure, standard library only: the command line reads it to
check its arguments without loading the site): ``skupper.io`` resources, and Secrets holding TLS credentials."""

from __future__ import annotations

__all__ = ["API_VERSION", "KINDS", "SECRET", "TLS_FILES"]

KINDS = ("Site", "Listener", "Connector", "Link", "AccessToken", "RouterAccess")
API_VERSION = "skupper.io/v2alpha1"
#: a ``v1`` Secret (a link's credential, as ``skupper link generate`` prints it): stored as ``input/certs/<name>/``
SECRET = "Secret"
TLS_FILES = ("ca.crt", "tls.crt", "tls.key")
