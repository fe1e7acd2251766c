"""``skupper debug dump`` names its files as upstream's (issue 49, item 8): AccessGrants as ``Accessgrant-<name>``,
AccessTokens as ``AccessTokens-<name>``, each object also as ``.yaml.txt``, and it holds what upstream's holds about
the router: its Role, RoleBinding and ReplicaSets, and ``crds.txt`` (the cluster's CRD names). The cluster is
kubesim's API server holding the objects a site has; the archive is read as a user unpacks it."""

from __future__ import annotations

import tarfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_support import cli_cluster
from cli_support import run_in as skupper

from kubesim.sim import KubeSim

ROUTER = {"skupper.io/component": "router", "application": "skupper-router"}


@pytest.fixture
async def sim(tmp_path: Path) -> AsyncIterator[KubeSim]:
    async with cli_cluster(tmp_path / "kubeconfig") as server:
        yield server


def obj(api_version: str, kind: str, name: str, **rest: Any) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "namespace": "west",
                                                                  "labels": ROUTER}, **rest}


async def test_the_dump_has_upstreams_file_names_and_the_routers_rbac_and_replica_sets(
        sim: KubeSim, tmp_path: Path) -> None:
    api = sim.api
    await api.create("sites.skupper.io", obj("skupper.io/v2alpha1", "Site", "west", spec={}), "west")
    await api.create("accessgrants.skupper.io", obj("skupper.io/v2alpha1", "AccessGrant", "g", spec={}), "west")
    await api.create("accesstokens.skupper.io", obj("skupper.io/v2alpha1", "AccessToken", "t", spec={
        "url": "https://127.0.0.1:1/x", "code": "c" * 24, "ca": "none"}), "west")
    template = {"metadata": {"labels": ROUTER}, "spec": {"containers": [{"name": "router", "image": "r:1"}]}}
    await api.create("deployments.apps", obj("apps/v1", "Deployment", "skupper-router", spec={
        "selector": {"matchLabels": ROUTER}, "template": template}), "west")
    await api.create("replicasets.apps", obj("apps/v1", "ReplicaSet", "skupper-router-5d8f", spec={
        "selector": {"matchLabels": ROUTER}, "template": template}), "west")
    await api.create("roles.rbac.authorization.k8s.io", obj(
        "rbac.authorization.k8s.io/v1", "Role", "skupper-router",
        rules=[{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]), "west")
    await api.create("rolebindings.rbac.authorization.k8s.io", obj(
        "rbac.authorization.k8s.io/v1", "RoleBinding", "skupper-router",
        subjects=[{"kind": "ServiceAccount", "name": "skupper-router", "namespace": "west"}],
        roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "skupper-router"}), "west")

    code, out, err = await skupper("debug", "dump", "d", sim=sim, cwd=tmp_path)
    assert code == 0, out + err
    archive = tmp_path / out.split("archive:  ")[1].strip()
    with tarfile.open(archive) as tar:
        files = {m.name.lstrip("/"): m for m in tar.getmembers()}
        resources = "site-namespace/resources/"
        for name in ("Accessgrant-g", "AccessTokens-t", "Site-west", "Role-skupper-router",
                     "RoleBinding-skupper-router", "ReplicaSet-skupper-router-5d8f", "Deployment-skupper-router"):
            assert f"{resources}{name}.yaml" in files and f"{resources}{name}.yaml.txt" in files, sorted(files)
        role = tar.extractfile(files[f"{resources}Role-skupper-router.yaml"])
        assert role is not None and yaml.safe_load(role.read())["rules"][0]["resources"] == ["configmaps"]
        crds = tar.extractfile(files[f"{resources}crds.txt"])
        assert crds is not None and "sites.skupper.io" in yaml.safe_load(crds.read())
    assert not any(n.startswith(f"{resources}AccessGrant-") or n.startswith(f"{resources}AccessToken-")
                   for n in files), sorted(files)
