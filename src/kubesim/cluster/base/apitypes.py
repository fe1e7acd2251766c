"""The API client the simulated cluster's components take: kubesim's in-process ``ApiClient``.

One name for it here so that ``cluster/`` modules import it from their own base rather than reaching for
``kubesim.api`` each; it is the class itself (a Protocol repeating every signature would have to follow each change).
"""

from __future__ import annotations

from kubesim.api import ApiClient as Api

__all__ = ["Api"]
