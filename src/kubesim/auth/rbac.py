"""RBAC: who may do what, from the Roles, ClusterRoles and their bindings stored in kubesim (as kube-apiserver's RBAC
authorizer decides).

A request is allowed when a rule bound to the user allows it: rules of ClusterRoles bound by ClusterRoleBindings
apply everywhere, rules of Roles and ClusterRoles bound by a RoleBinding apply in that binding's namespace. Subjects
match by ``User`` name, ``Group`` name or ``ServiceAccount`` (namespace and name, i.e. the user
``system:serviceaccount:<namespace>:<name>``). Rules match on ``apiGroups``, ``resources`` (``plural`` or
``plural/subresource``), ``verbs`` and optional ``resourceNames``, each with the ``*`` wildcard. Members of
``system:masters`` may do everything. A PATCH of an object that does not exist yet (a server-side apply that
creates) needs ``create`` as well. Aggregated ClusterRoles (``aggregationRule``) and non-resource URLs are not
evaluated (every authenticated user may read discovery).

Decisions about users other than ``system:masters`` members are recorded per user (``used``: what was allowed;
``denied``: the most recent refusals) so tests can compare what a component did with what its role grants.
``ClusterRoleAuthorizer`` evaluates a fixed list of rules for every user instead (tests of one component's role).
Both read the objects they need through the store's ``StoreReader`` interface.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from kubesim.auth.authn import RequestAttributes, User
from kubesim.store.hooks import StoreReader

SUPERUSER_GROUP = "system:masters"
RBAC_GROUP = "rbac.authorization.k8s.io"
DENIED_KEPT = 1000


def _match(values: Any, wanted: str) -> bool:
    return isinstance(values, list) and ("*" in values or wanted in values)


def rule_allows(rule: Mapping[str, Any], verb: str, group: str, resource: str, name: str | None) -> bool:
    """One PolicyRule: ``resource`` is ``plural`` or ``plural/subresource``."""
    names = rule.get("resourceNames") or []
    return (_match(rule.get("apiGroups"), group) and _match(rule.get("resources"), resource)
            and _match(rule.get("verbs"), verb) and (not names or (name is not None and name in names)))


def rules_allow(rules: Iterable[Mapping[str, Any]], verb: str, group: str, resource: str, name: str | None) -> bool:
    return any(rule_allows(rule, verb, group, resource, name) for rule in rules)


def subject_matches(subject: Mapping[str, Any], user: User, binding_namespace: str = "") -> bool:
    """Whether ``subject`` of a binding names ``user``. A ServiceAccount subject without ``namespace`` in a
    RoleBinding is the account of the binding's own namespace, as Kubernetes' RBAC authorizer reads it (upstream
    Skupper's namespace-scope manifest relies on it)."""
    kind = subject.get("kind")
    if kind == "User":
        return subject.get("name") == user.name
    if kind == "Group":
        return subject.get("name") in user.groups
    if kind == "ServiceAccount":
        namespace = subject.get("namespace") or binding_namespace
        return user.name == f"system:serviceaccount:{namespace}:{subject.get('name', '')}"
    return False


class RbacAuthorizer:
    """The RBAC authorizer over the RBAC objects in ``store`` (read on every decision: they are few)."""

    def __init__(self, store: StoreReader) -> None:
        self.store = store
        self.used: dict[str, set[tuple[str, str, str]]] = {}
        self.denied: deque[tuple[str, str, str, str, str | None, str | None]] = deque(maxlen=DENIED_KEPT)

    def _objects(self, plural: str, namespace: str | None = None) -> list[dict[str, Any]]:
        rt = self.store.registry.by_key(f"{plural}.{RBAC_GROUP}")
        return [] if rt is None else list(self.store.objects.iter_objects(rt, namespace))

    def _role_rules(self, ref: Mapping[str, Any], namespace: str | None) -> list[Mapping[str, Any]]:
        rt = self.store.registry.by_key("clusterroles." + RBAC_GROUP if ref.get("kind") == "ClusterRole"
                                        else "roles." + RBAC_GROUP)
        if rt is None or ref.get("apiGroup", RBAC_GROUP) != RBAC_GROUP:
            return []
        role = self.store.find(rt, None if ref.get("kind") == "ClusterRole" else namespace, str(ref.get("name", "")))
        return [rule for rule in (role or {}).get("rules") or [] if isinstance(rule, dict)]

    def rules_for(self, user: User, namespace: str | None) -> list[Mapping[str, Any]]:
        """Every rule that applies to ``user`` for a request in ``namespace`` (None: cluster-scoped or all)."""
        rules: list[Mapping[str, Any]] = []
        for binding in self._objects("clusterrolebindings"):
            if any(subject_matches(s, user) for s in binding.get("subjects") or []):
                ref = binding.get("roleRef") or {}
                if ref.get("kind") == "ClusterRole":
                    rules += self._role_rules(ref, None)
        if namespace:
            for binding in self._objects("rolebindings", namespace):
                if any(subject_matches(s, user, namespace) for s in binding.get("subjects") or []):
                    rules += self._role_rules(binding.get("roleRef") or {}, namespace)
        return rules

    def _exists(self, attrs: RequestAttributes) -> bool:
        if attrs.name is None:
            return True
        rt = self.store.registry.by_url_key(attrs.group, attrs.resource)
        return rt is None or self.store.find(rt, attrs.namespace, attrs.name) is not None

    def authorize(self, attrs: RequestAttributes) -> str | None:
        user = attrs.user
        if SUPERUSER_GROUP in user.groups:
            return None
        resource = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
        verbs = [attrs.verb]
        if attrs.verb == "patch" and not attrs.subresource and not self._exists(attrs):
            verbs.append("create")
        rules = self.rules_for(user, attrs.namespace)
        for verb in verbs:
            if not rules_allow(rules, verb, attrs.group, resource, attrs.name):
                self.denied.append((user.name, verb, attrs.group, resource, attrs.namespace, attrs.name))
                return "no RBAC policy matched"
            self.used.setdefault(user.name, set()).add((verb, attrs.group, resource))
        return None

    def denied_for(self, user_name: str) -> list[tuple[str, str, str, str | None, str | None]]:
        """(verb, group, resource, namespace, name) of the recorded refusals of one user."""
        return [entry[1:] for entry in self.denied if entry[0] == user_name]


class ClusterRoleAuthorizer:
    """Allows exactly what a list of RBAC `PolicyRule`s grants (as a ClusterRole bound to the user would).

    Evaluated like the RBAC authorizer: `apiGroups`, `resources` (`plural` or `plural/subresource`), `verbs` and
    optional `resourceNames`, each with the `*` wildcard. A PATCH of an object that does not exist yet (a server-side
    apply that creates) needs `create` as well. Decisions are recorded in `used` and `denied` for tests.
    """

    def __init__(self, rules: list[dict[str, Any]], store: StoreReader | None = None) -> None:
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
