"""Readiness of the node plugin (``run node``'s ``/readyz``): the CSI socket is served and the API server answers.

The node plugin keeps no caches; what it needs to publish a volume is its socket (kubelet and the registrar call it)
and a working connection to the API server with credentials allowed to read Nodes. The API check reads this node's
own Node object, which the driver reads on every publish anyway, so RBAC and authentication are proven too. Its
result is kept for a few seconds so that frequent probes or scrapes cost at most one API request per interval.
"""

from __future__ import annotations

import asyncio
import os
import stat
import time
from pathlib import Path

from listener_operator.csi_server.errors import error_chain
from operator_runtime.api import KubeApi
from operator_runtime.errors import ApiFailure, ApiUnreachable, NotFound
from operator_runtime.kinds import NODE

__all__ = ["NodeReadiness"]

#: How long one API check's answer is reused.
API_CHECK_CACHE_SECONDS = 5.0
#: How long the API server gets to answer before the plugin counts as not ready (kubelet's probe default is 1 s,
#: the DaemonSet raises it).
API_CHECK_TIMEOUT_SECONDS = 3.0


class NodeReadiness:
    """``await check()`` says whether the plugin can serve mounts; ``detail`` says why not."""

    def __init__(self, api: KubeApi, node_name: str, socket_path: Path, *,
                 cache_seconds: float = API_CHECK_CACHE_SECONDS,
                 timeout_seconds: float = API_CHECK_TIMEOUT_SECONDS) -> None:
        self._api = api
        self._node_name = node_name
        self._socket_path = socket_path
        self._cache_seconds = cache_seconds
        self._timeout = timeout_seconds
        self._lock = asyncio.Lock()
        self._checked_at: float | None = None
        self._api_problem: str | None = None
        #: set by ``run node`` once the gRPC server is bound and serving
        self.csi_serving = False
        self.detail = "CSI server not started yet"

    async def check(self) -> bool:
        problem = self._socket_problem() or await self._cached_api_problem()
        self.detail = problem or "ok"
        return problem is None

    def _socket_problem(self) -> str | None:
        if not self.csi_serving:
            return "CSI server not started yet"
        try:
            mode = os.stat(self._socket_path, follow_symlinks=False).st_mode
        except FileNotFoundError:
            return f"CSI socket {self._socket_path} was removed"
        if not stat.S_ISSOCK(mode):
            return f"{self._socket_path} is no longer a socket"
        return None

    async def _cached_api_problem(self) -> str | None:
        async with self._lock:  # concurrent probes share one request
            now = time.monotonic()
            if self._checked_at is None or now - self._checked_at >= self._cache_seconds:
                self._api_problem = await self._api_problem_now()
                self._checked_at = time.monotonic()
            return self._api_problem

    async def _api_problem_now(self) -> str | None:
        try:
            async with asyncio.timeout(self._timeout):
                await self._api.get(NODE, self._node_name)
        except TimeoutError:
            return f"API server did not answer within {self._timeout:g}s"
        except NotFound:
            return None  # the API answered with our credentials: connectivity and authentication work
        except ApiUnreachable as error:
            return f"API server unreachable: {error_chain(error)}"
        except ApiFailure as error:
            return f"API server refused to read Node {self._node_name}: {error_chain(error)}"
        return None
