"""``POST .../serviceaccounts/<name>/token`` (TokenRequest, what ``kubectl create token`` sends): a ServiceAccount
token from ``ServiceAccountTokens``, optionally bound to a Pod of the same namespace."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from aiohttp import web

from kubesim import errors
from kubesim.auth.serviceaccounts import DEFAULT_EXPIRATION_SECONDS
from kubesim.server import wire
from kubesim.server.routing import Target

if TYPE_CHECKING:
    from kubesim.server.context import ServerContext


async def token_request(ctx: ServerContext, request: web.Request, t: Target) -> web.StreamResponse:
    assert t.name is not None and t.namespace is not None
    ctx.store.get(t.rt, t.namespace, t.name)  # 404 for an unknown ServiceAccount
    body = await wire.json_body(request)
    if not isinstance(body, dict):
        raise errors.bad_request("a TokenRequest must be an object")
    spec: dict[str, Any] = body.get("spec") if isinstance(body.get("spec"), dict) else {}  # type: ignore[assignment]
    seconds = spec.get("expirationSeconds", DEFAULT_EXPIRATION_SECONDS)
    if not isinstance(seconds, int) or isinstance(seconds, bool):
        raise errors.invalid("TokenRequest", "authentication.k8s.io", t.name, [
            errors.cause("spec.expirationSeconds", "Invalid value: must be an integer")])
    pod_name = pod_uid = None
    bound = spec.get("boundObjectRef")
    if isinstance(bound, dict) and bound:
        if bound.get("kind") != "Pod":
            raise errors.invalid("TokenRequest", "authentication.k8s.io", t.name, [errors.cause(
                "spec.boundObjectRef.kind", f"Unsupported value: {str(bound.get('kind'))[:40]!r}: kubesim binds "
                "tokens to Pods only", "FieldValueNotSupported")])
        pod_rt = ctx.registry.require("pods")
        pod = ctx.store.get(pod_rt, t.namespace, str(bound.get("name", "")))
        if bound.get("uid") and bound["uid"] != pod["metadata"]["uid"]:
            raise errors.conflict("pods", "", pod["metadata"]["name"],
                                  f"the UID in the bound object reference ({str(bound['uid'])[:40]}) does not match "
                                  f"the UID in record ({pod['metadata']['uid']})")
        pod_name, pod_uid = pod["metadata"]["name"], pod["metadata"]["uid"]
    try:
        token = ctx.service_accounts.issue(t.namespace, t.name, pod_name=pod_name, pod_uid=pod_uid,
                                              expiration_seconds=seconds)
    except ValueError as error:
        raise errors.invalid("TokenRequest", "authentication.k8s.io", t.name, [
            errors.cause("spec.expirationSeconds", f"Invalid value: {seconds}: {error}")]) from None
    expires = ctx.service_accounts.expiry(token) or 0.0
    stamp = datetime.datetime.fromtimestamp(expires, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    answer = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "metadata": {"name": t.name, "namespace": t.namespace, "creationTimestamp": None},
        "spec": {"audiences": list(spec.get("audiences") or []), "expirationSeconds": seconds,
                 "boundObjectRef": bound or None},
        "status": {"token": token, "expirationTimestamp": stamp},
    }
    return wire.json_response(answer, 201)
