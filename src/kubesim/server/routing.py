"""Resource URLs: ``[watch/][namespaces/<ns>/]<plural>[/<name>[/<subresource>]]`` after the group-version,
parsed into a ``Target``, and the verb an HTTP method means for it (as RBAC names verbs)."""

from __future__ import annotations

from dataclasses import dataclass

from kubesim import errors
from kubesim.kinds.resources import Registry, ResourceType
from kubesim.registry.scale import SCALABLE


@dataclass
class Target:
    """A parsed resource URL."""

    rt: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None
    watch_path: bool = False


def parse_target(registry: Registry, group: str, version: str, rest: list[str]) -> Target:
    """The resource a URL names; 404 for anything the server does not serve."""
    watch_path = False
    if rest and rest[0] == "watch":
        watch_path = True
        rest = rest[1:]
    ns: str | None = None
    if (
        len(rest) >= 3
        and rest[0] == "namespaces"
        and not (len(rest) == 3 and rest[2] in ("status", "finalize"))
    ):
        ns = rest[1]
        rest = rest[2:]
    if not rest or len(rest) > 3:
        raise errors.no_such_resource()
    rt = registry.by_url(group, version, rest[0])
    if rt is None:
        raise errors.no_such_resource()
    if ns is not None and not rt.namespaced:
        raise errors.no_such_resource()
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    if (
        sub is not None
        and not (sub == "status" and rt.has_status)
        and not (sub == "scale" and rt.key in SCALABLE)
        and not (sub == "token" and rt.key == "serviceaccounts")
        and not (sub == "log" and rt.key == "pods")
        and not (sub in ("exec", "portforward", "binding") and rt.key == "pods")
    ):
        raise errors.no_such_resource()
    return Target(rt, ns, name, sub, watch_path)


def verb_of(method: str, t: Target, watch: bool) -> str:
    """The request's verb (``get``, ``list``, ``watch``, ``create``, ...); 405 where the method does not fit."""
    if t.subresource in ("exec", "portforward"):  # a WebSocket GET or a SPDY POST; RBAC asks for create
        if method not in ("GET", "POST"):
            raise errors.method_not_allowed()
        return "create"
    if method == "GET":
        verb = "watch" if watch else ("get" if t.name else "list")
    elif method == "POST":
        verb = "create"
    elif method == "PUT":
        verb = "update"
    elif method == "PATCH":
        verb = "patch"
    elif method == "DELETE":
        verb = "delete" if t.name else "deletecollection"
    else:
        raise errors.method_not_allowed()
    creates_subresource = verb == "create" and t.subresource in ("token", "binding")  # TokenRequest, Binding
    if (verb == "create" and t.name is not None and not creates_subresource) or (
        verb in ("update", "patch") and t.name is None
    ):
        raise errors.method_not_allowed()
    if creates_subresource:
        return verb
    if t.subresource in ("token", "binding") or (t.subresource == "log" and verb != "get"):
        raise errors.method_not_allowed()
    if verb not in t.rt.verbs:
        raise errors.method_not_allowed()
    return verb
