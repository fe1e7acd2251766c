"""The plain-kubectl install in deploy/manifests/: valid Kubernetes objects, consistent with the package, appliable."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from rendered_install import MANIFESTS_DIR, granted_rules, one, rendered_objects

from listener_operator.crd.generate import all_crds
from listener_operator.manifests import csi_driver, storage_class

KUBECTL = str(Path(sys.executable).parent / "kubectl")


@pytest.mark.parametrize("version", ["1.33", "1.37"])
@pytest.mark.parametrize("obj", rendered_objects(), ids=lambda obj: f"{obj['kind']}/{obj['metadata']['name']}")
def test_every_deploy_manifest_is_a_valid_kubernetes_object(obj: dict[str, Any], version: str) -> None:
    kubernetes_validate.validate(obj, version, strict=True)


def test_deploy_csidriver_and_storageclass_match_what_local_up_installs() -> None:
    objects = rendered_objects()
    driver, storage = one(objects, "CSIDriver"), one(objects, "StorageClass")
    assert driver["metadata"]["name"] == csi_driver()["metadata"]["name"]
    assert driver["spec"] == csi_driver()["spec"]
    assert {k: v for k, v in storage.items() if k != "metadata"} == \
        {k: v for k, v in storage_class().items() if k != "metadata"}


def test_rbac_covers_the_kinds_the_operator_writes() -> None:
    everywhere = granted_rules(None)
    in_release_namespace = granted_rules("listener-operator")

    def granted(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
        return {(group, resource, verb) for rule in rules for group in rule["apiGroups"]
                for resource in rule["resources"] for verb in rule["verbs"]}

    needed = [
        ("", "services", "create"), ("", "services", "patch"), ("", "services", "delete"), ("", "services", "watch"),
        ("listeners.stackable.tech", "listeners/status", "patch"), ("listeners.stackable.tech", "listeners", "patch"),
        ("listeners.stackable.tech", "podlisteners", "create"), ("listeners.stackable.tech", "podlisteners", "patch"),
        ("listeners.stackable.tech", "listenerclasses", "create"), ("", "pods", "patch"),
        ("", "persistentvolumes", "patch"), ("discovery.k8s.io", "endpointslices", "watch"), ("", "nodes", "watch"),
        ("events.k8s.io", "events", "create"),
    ]
    assert [need for need in needed if need not in granted(everywhere)] == []
    lease = [("coordination.k8s.io", "leases", verb) for verb in ("get", "create", "update")]
    assert [need for need in lease if need not in granted(in_release_namespace)] == []
    # Leases are granted in the release namespace only, not cluster-wide.
    assert not any(need in granted(everywhere) for need in lease)


async def test_kubectl_applies_the_deploy_manifests_to_kubesim(kubesim: Any, tmp_path: Path) -> None:
    crd_file = tmp_path / "crds.yaml"
    crd_file.write_text(yaml.safe_dump_all(all_crds()))
    kubectl = [KUBECTL, "--kubeconfig", str(kubesim.kubeconfig_path), "--cache-dir", str(tmp_path / "cache")]
    for target in (crd_file, MANIFESTS_DIR):
        process = await asyncio.create_subprocess_exec(*kubectl, "apply", "--server-side", "-f", str(target),
                                                       stdout=asyncio.subprocess.PIPE,
                                                       stderr=asyncio.subprocess.PIPE)
        _, err = await asyncio.wait_for(process.communicate(), 90)
        assert process.returncode == 0, err.decode()
    namespace = await kubesim.api.get("namespaces", "listener-operator")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    deployment = await kubesim.api.get("deployments.apps", "listener-operator-csi-provisioner", "listener-operator")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "listener-operator-serviceaccount"
    assert pod["containers"][0]["args"] == ["run", "controller"]
    daemonset = await kubesim.api.get("daemonsets.apps", "listener-operator-csi-node-driver", "listener-operator")
    assert daemonset["spec"]["template"]["spec"]["containers"][0]["args"] == ["run", "node"]
    driver = await kubesim.api.get("csidrivers.storage.k8s.io", "listeners.stackable.tech")
    assert driver["spec"]["podInfoOnMount"] is True
    account = await kubesim.api.get("serviceaccounts", "listener-operator-serviceaccount", "listener-operator")
    assert account["metadata"]["namespace"] == "listener-operator"
    role = await kubesim.api.get("roles.rbac.authorization.k8s.io", "listener-operator-leader-election",
                                 "listener-operator")
    assert role["rules"][0]["resources"] == ["leases"]
