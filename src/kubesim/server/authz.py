"""Who may do what over HTTP: bearer-token authentication of every non-public path, the configured authorizer's
decision on each resource request (a 403 worded like the RBAC authorizer's), and ``SelfSubjectAccessReview``
(``kubectl auth can-i``)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from kubesim import errors
from kubesim.auth.authn import Authorizer, RequestAttributes, TokenAuthenticator, User
from kubesim.errors import ApiError
from kubesim.selectors import parse_field_selector
from kubesim.server import wire
from kubesim.server.routing import Target

USER_KEY = web.RequestKey("user", User)
ACCESS_REVIEW = "selfsubjectaccessreviews.authorization.k8s.io"
_PUBLIC = {"version", "healthz", "readyz", "livez"}


def authenticate(authenticator: TokenAuthenticator, request: web.Request) -> None:
    """Put the requester on the request (``request[USER_KEY]``); 401 without a known token, except on public
    paths."""
    first = request.path.strip("/").split("/", 1)[0]
    if first in _PUBLIC:
        return
    user = authenticator.authenticate(request.headers.get("Authorization"))
    if user is None:
        raise errors.unauthorized()
    request[USER_KEY] = user


def authorize(authorizer: Authorizer, user: User, verb: str, t: Target, field_selector: str | None = None) -> None:
    """403 Forbidden unless ``authorizer`` allows ``user`` to ``verb`` the target. A list or watch whose
    ``field_selector`` requires ``metadata.name`` to be one value is authorized for that name, as the apiserver's
    RequestInfo does, so ``resourceNames`` rules can allow watching one object."""
    name = t.name
    if name is None and verb in ("list", "watch") and field_selector:
        name = _exact_name(field_selector)
    denied = authorizer.authorize(
        RequestAttributes(user, verb, t.rt.group, t.rt.plural, t.subresource, t.namespace, name)
    )
    if denied is not None:
        raise _forbidden(user, verb, t, denied)


def _exact_name(field_selector: str) -> str | None:
    try:
        selector = parse_field_selector(field_selector)
    except ValueError:
        return None   # the handler answers 400
    names = [r.value for r in selector.requirements if r.field == "metadata.name" and r.operator != "!="]
    return names[0] if len(names) == 1 else None


def _forbidden(user: User, verb: str, t: Target, reason: str) -> ApiError:
    """403 worded like the RBAC authorizer's denial."""
    rt = t.rt
    subject = f'{errors.qualified(rt.plural, rt.group)} "{t.name}"' if t.name else errors.qualified(rt.plural, rt.group)
    resource = f"{rt.plural}/{t.subresource}" if t.subresource else rt.plural
    scope = f'in the namespace "{t.namespace}"' if t.namespace else "at the cluster scope"
    message = f'{subject} is forbidden: User "{user.name}" cannot {verb} resource "{resource}" in API group "{rt.group}" {scope}'
    if reason:
        message += f": {reason}"
    details: dict[str, Any] = {"group": rt.group, "kind": rt.plural}
    if t.name:
        details["name"] = t.name
    return ApiError(403, "Forbidden", message, details=details)


async def access_review(authorizer: Authorizer, request: web.Request, user: User) -> web.Response:
    """`kubectl auth can-i`: ask the configured authorizer about the requester's own access."""
    review = await wire.json_body(request)
    if not isinstance(review, dict) or not isinstance(review.get("spec"), dict):
        raise errors.bad_request("a SelfSubjectAccessReview needs a spec")
    attrs = review["spec"].get("resourceAttributes")
    if isinstance(attrs, dict):
        denied = authorizer.authorize(
            RequestAttributes(
                user,
                str(attrs.get("verb", "")),
                str(attrs.get("group", "")),
                str(attrs.get("resource", "")),
                attrs.get("subresource") or None,
                attrs.get("namespace") or None,
                attrs.get("name") or None,
            )
        )
    else:
        denied = None  # non-resource URLs: everyone authenticated may read them here
    status: dict[str, Any] = {"allowed": denied is None}
    if denied is not None:
        status["reason"] = denied
    out = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "metadata": {},
        "spec": review["spec"],
        "status": status,
    }
    return wire.json_response(out, 201)
