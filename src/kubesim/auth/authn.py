"""Authentication (static bearer tokens, then ServiceAccount tokens) and the authorization interface: who the user is
(``User``), what a request asks (``RequestAttributes``), ``Authorizer`` and ``AllowAll``. The authorizers that
evaluate RBAC rules (``RbacAuthorizer`` over the stored RBAC objects, the API server's default, and
``ClusterRoleAuthorizer``, a fixed list of rules for tests) are in ``kubesim.auth.rbac``, which builds on this module."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class RequestAttributes:
    """What an authorizer decides on, as in the apiserver's `authorizer.Attributes`."""

    user: User
    verb: str  # get, list, watch, create, update, patch, delete, deletecollection
    group: str
    resource: str  # plural
    subresource: str | None
    namespace: str | None
    name: str | None


class Authorizer(Protocol):
    def authorize(self, attrs: RequestAttributes) -> str | None:
        """None to allow; a reason to deny (answered as 403 Forbidden)."""


class AllowAll:
    def authorize(self, attrs: RequestAttributes) -> str | None:
        return None


class TokenSource(Protocol):
    def authenticate(self, token: str) -> User | None: ...


class TokenAuthenticator:
    """Static bearer tokens -> users (the kubeconfig's token maps to a cluster admin), then the ``dynamic`` sources
    (ServiceAccount tokens) in order."""

    def __init__(self, tokens: dict[str, User], dynamic: list[TokenSource] | None = None) -> None:
        self.tokens = dict(tokens)
        self.dynamic = list(dynamic or [])

    def authenticate(self, authorization: str | None) -> User | None:
        if not authorization:
            return None
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer":
            return None
        token = token.strip()
        user = self.tokens.get(token)
        for source in self.dynamic:
            if user is not None:
                break
            user = source.authenticate(token)
        return user
