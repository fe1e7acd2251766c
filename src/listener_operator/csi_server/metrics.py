"""Prometheus metrics of the CSI services: calls by method and gRPC code, call latency, mounts waiting
(behaviour.md "Metrics").

The metrics live on the registry the process already exposes (``observability``), so ``run controller`` shows them
next to the reconcile metrics and ``run node`` on its own ``/metrics``. Recording happens in one grpc.aio server
interceptor rather than in each servicer, so that every registered RPC is covered, including the ones answered by
the generated base classes (UNIMPLEMENTED) and failures that escape a servicer.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["CsiMetrics", "CsiMetricsInterceptor", "rpc_method_name"]

#: CSI calls range from microseconds (Identity) to the bounded wait for a Listener address (seconds) and whatever
#: a slow API server adds on top; kubelet gives up after about two minutes.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)

_Behavior = Callable[..., Any]


class CsiMetrics:
    """The CSI metric families, registered on ``registry`` (the one the process serves on ``/metrics``)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter("listener_operator_csi_requests", "CSI calls answered, by method and gRPC status code",
                                ["method", "code"], registry=registry)
        self.duration = Histogram("listener_operator_csi_request_duration_seconds",
                                  "Time from receiving a CSI call to its answer, by method", ["method"],
                                  registry=registry, buckets=LATENCY_BUCKETS)
        self.mounts_waiting = Gauge("listener_operator_csi_mounts_waiting",
                                    "NodePublishVolume calls currently waiting for their Listener to get an address",
                                    registry=registry)

    def observe(self, method: str, code: grpc.StatusCode, seconds: float) -> None:
        self.requests.labels(method, code.name).inc()
        self.duration.labels(method).observe(seconds)


def rpc_method_name(full_method: str) -> str:
    """``/csi.v1.Node/NodePublishVolume`` -> ``NodePublishVolume`` (CSI method names are unique across services)."""
    return full_method.rpartition("/")[2]


class CsiMetricsInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Times every unary CSI call and counts it under the status code the client receives.

    Only methods the server has a handler for are recorded: the method label comes from the caller, and counting
    unknown names would let any client create label values without bound (gRPC answers those UNIMPLEMENTED itself).
    """

    def __init__(self, metrics: CsiMetrics) -> None:
        self._metrics = metrics
        # Handlers are fixed once the server runs: wrap each method once, not on every call.
        self._wrapped: dict[str, grpc.RpcMethodHandler] = {}

    async def intercept_service(  # type: ignore[override]  # the stubs say never None; gRPC returns None
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        full_method = str(handler_call_details.method)
        if (cached := self._wrapped.get(full_method)) is not None:
            return cached
        handler = await continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler  # unknown method, or a streaming one (CSI has none)
        wrapped = grpc.unary_unary_rpc_method_handler(
            self._observed(rpc_method_name(full_method), handler.unary_unary),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
        self._wrapped[full_method] = wrapped
        return wrapped

    def _observed(self, method: str, behavior: _Behavior) -> _Behavior:
        metrics = self._metrics

        async def observed(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            started = time.perf_counter()
            code = grpc.StatusCode.UNKNOWN
            try:
                # the generated base classes answer unimplemented methods with plain (non-async) functions
                result = behavior(request, context)
                if inspect.isawaitable(result):
                    result = await result
                code = context.code() or grpc.StatusCode.OK
                return result
            except asyncio.CancelledError:
                code = grpc.StatusCode.CANCELLED  # the client went away or the server is stopping
                raise
            except BaseException:
                # context.abort(...) sets the code before raising; anything else reaches the client as UNKNOWN
                code = context.code() or grpc.StatusCode.UNKNOWN
                raise
            finally:
                metrics.observe(method, code, time.perf_counter() - started)

        return observed
