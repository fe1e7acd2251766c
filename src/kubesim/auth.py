"""Authentication (bearer tokens) and an authorization hook shaped so RBAC can be plugged in later."""

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


class TokenAuthenticator:
    """Static bearer tokens -> users (the kubeconfig's token maps to a cluster admin)."""

    def __init__(self, tokens: dict[str, User]) -> None:
        self.tokens = dict(tokens)

    def authenticate(self, authorization: str | None) -> User | None:
        if not authorization:
            return None
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer":
            return None
        return self.tokens.get(token.strip())
