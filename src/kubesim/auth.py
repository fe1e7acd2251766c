"""Authentication (static bearer tokens, then ServiceAccount tokens) and the authorization hook: ``AllowAll``,
``ClusterRoleAuthorizer`` (a fixed list of rules for every user, for tests) and the RBAC authorizer over the stored
RBAC objects (``kubesim.rbac.RbacAuthorizer``, the API server's default)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from kubesim.rbac import rules_allow

if TYPE_CHECKING:
    from kubesim.store.store import Store


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


class ClusterRoleAuthorizer:
    """Allows exactly what a list of RBAC `PolicyRule`s grants (as a ClusterRole bound to the user would).

    Evaluated like the RBAC authorizer: `apiGroups`, `resources` (`plural` or `plural/subresource`), `verbs` and
    optional `resourceNames`, each with the `*` wildcard. A PATCH of an object that does not exist yet (a server-side
    apply that creates) needs `create` as well. Decisions are recorded in `used` and `denied` for tests.
    """

    def __init__(self, rules: list[dict[str, Any]], store: Store | None = None) -> None:
        self.rules = rules
        self.store = store
        self.used: set[tuple[str, str, str]] = set()
        self.denied: list[tuple[str, str, str, str | None]] = []

    def allows(self, verb: str, group: str, resource: str, name: str | None = None) -> bool:
        return rules_allow(self.rules, verb, group, resource, name)

    def _exists(self, attrs: RequestAttributes) -> bool:
        if self.store is None or attrs.name is None:
            return True
        rt = self.store.registry.by_url_key(attrs.group, attrs.resource)
        return rt is None or self.store.find(rt, attrs.namespace, attrs.name) is not None

    def authorize(self, attrs: RequestAttributes) -> str | None:
        resource = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
        verbs = [attrs.verb]
        if attrs.verb == "patch" and not attrs.subresource and not self._exists(attrs):
            verbs.append("create")
        for verb in verbs:
            if not self.allows(verb, attrs.group, resource, attrs.name):
                self.denied.append((verb, attrs.group, resource, attrs.name))
                return f"no rule allows {verb} on {resource}"
            self.used.add((verb, attrs.group, resource))
        return None
