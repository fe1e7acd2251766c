"""The plain-kubectl install in ``deploy/manifests/`` (the Helm chart rendered with default values), as tests read it.

Besides the objects themselves: the RBAC rules the install grants the operator's ServiceAccount, resolved through
its ClusterRoleBindings (everywhere) and RoleBindings (in their namespace only), as the RBAC authorizer does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
MANIFESTS_DIR = REPO / "deploy" / "manifests"
CHART_DIR = REPO / "deploy" / "helm" / "listener-operator"


def rendered_objects(directory: Path = MANIFESTS_DIR) -> list[dict[str, Any]]:
    """Every object of the YAML files in ``directory``, in file and document order."""
    objects: list[dict[str, Any]] = []
    for path in sorted(directory.glob("*.yaml")):
        objects.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc)
    return objects


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    """The single object of ``kind`` (an AssertionError names the kind when there are none or several)."""
    found = [obj for obj in objects if obj["kind"] == kind]
    assert len(found) == 1, f"expected exactly one {kind}, found {len(found)}"
    return found[0]


def operator_service_account(objects: list[dict[str, Any]] | None = None) -> tuple[str, str]:
    """(namespace, name) of the ServiceAccount the controller Deployment runs as."""
    objects = rendered_objects() if objects is None else objects
    deployment = one(objects, "Deployment")
    return deployment["metadata"]["namespace"], deployment["spec"]["template"]["spec"]["serviceAccountName"]


def _bound_to(binding: dict[str, Any], account: tuple[str, str]) -> bool:
    return any(subject.get("kind") == "ServiceAccount" and (subject.get("namespace"), subject.get("name")) == account
               for subject in binding.get("subjects") or [])


def granted_rules(namespace: str | None, objects: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The rules that authorize the operator's requests in ``namespace`` (None: cluster-scoped requests)."""
    objects = rendered_objects() if objects is None else objects
    account = operator_service_account(objects)
    roles = {(obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"]): obj for obj in objects
             if obj["kind"] in ("ClusterRole", "Role")}
    rules: list[dict[str, Any]] = []
    for binding in objects:
        if binding["kind"] not in ("ClusterRoleBinding", "RoleBinding") or not _bound_to(binding, account):
            continue
        if binding["kind"] == "RoleBinding" and binding["metadata"]["namespace"] != namespace:
            continue
        ref = binding["roleRef"]
        role_namespace = binding["metadata"]["namespace"] if ref["kind"] == "Role" else None
        role = roles.get((ref["kind"], role_namespace, ref["name"]))
        assert role is not None, f"{binding['kind']} {binding['metadata']['name']} refers to a missing {ref}"
        rules.extend(role["rules"])
    return rules
