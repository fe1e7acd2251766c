"""The real-cluster manifests in deploy/: valid Kubernetes objects, consistent with the package, and appliable."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from listener_operator.crd.generate import all_crds
from listener_operator.manifests import csi_driver, storage_class

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "deploy" / "manifests"
KUBECTL = str(Path(sys.executable).parent / "kubectl")


def deploy_objects() -> list[dict[str, Any]]:
    objects = []
    for path in sorted(MANIFESTS.glob("*.yaml")):
        objects.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc)
    return objects


@pytest.mark.parametrize("obj", deploy_objects(), ids=lambda obj: f"{obj['kind']}/{obj['metadata']['name']}")
def test_every_deploy_manifest_is_a_valid_kubernetes_object(obj: dict[str, Any]) -> None:
    kubernetes_validate.validate(obj, "1.33", strict=True)


def test_deploy_csidriver_and_storageclass_match_what_local_up_installs() -> None:
    by_kind = {obj["kind"]: obj for obj in deploy_objects()}
    assert by_kind["CSIDriver"] == csi_driver()
    assert by_kind["StorageClass"] == storage_class()


def test_rbac_covers_the_kinds_the_operator_writes() -> None:
    role = next(obj for obj in deploy_objects() if obj["kind"] == "ClusterRole")
    granted = {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
               for resource in rule["resources"] for verb in rule["verbs"]}
    needed = [
        ("", "services", "create"), ("", "services", "patch"), ("", "services", "delete"), ("", "services", "watch"),
        ("listeners.stackable.tech", "listeners/status", "patch"), ("listeners.stackable.tech", "listeners", "patch"),
        ("listeners.stackable.tech", "podlisteners", "create"), ("listeners.stackable.tech", "podlisteners", "patch"),
        ("listeners.stackable.tech", "listenerclasses", "create"), ("", "pods", "patch"),
        ("", "persistentvolumes", "patch"), ("discovery.k8s.io", "endpointslices", "watch"), ("", "nodes", "watch"),
        ("events.k8s.io", "events", "create"), ("coordination.k8s.io", "leases", "update"),
    ]
    assert [need for need in needed if need not in granted] == []


async def test_kubectl_applies_the_crds_and_deploy_manifests_to_kubesim(kubesim: Any, tmp_path: Path) -> None:
    crd_file = tmp_path / "crds.yaml"
    crd_file.write_text(yaml.safe_dump_all(all_crds()))
    kubectl = [KUBECTL, "--kubeconfig", str(kubesim.kubeconfig_path), "--cache-dir", str(tmp_path / "cache")]
    for target in (crd_file, MANIFESTS):
        process = await asyncio.create_subprocess_exec(*kubectl, "apply", "--server-side", "-f", str(target),
                                                       stdout=asyncio.subprocess.PIPE,
                                                       stderr=asyncio.subprocess.PIPE)
        _, err = await asyncio.wait_for(process.communicate(), 90)
        assert process.returncode == 0, err.decode()
    deployment = await kubesim.api.get("deployments.apps", "listener-operator-csi-provisioner", "listener-operator")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["args"] == ["run", "controller"]
    daemonset = await kubesim.api.get("daemonsets.apps", "listener-operator-csi-node-driver", "listener-operator")
    assert daemonset["spec"]["template"]["spec"]["containers"][0]["args"] == ["run", "node"]
    driver = await kubesim.api.get("csidrivers.storage.k8s.io", "listeners.stackable.tech")
    assert driver["spec"]["podInfoOnMount"] is True
