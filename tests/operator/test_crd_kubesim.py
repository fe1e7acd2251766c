"""The generated CRDs and presets against the kubesim API server, through the API client as the operator uses them."""

from __future__ import annotations

import asyncio
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from kubesim.sim import KubeSim
from listener_operator.crd.generate import all_crds
from listener_operator.kinds import LISTENER, LISTENER_CLASS
from listener_operator.presets import ensure_presets
from operator_runtime.config import make_api
from operator_runtime.errors import ApiFailure

CRD_RESOURCE = "customresourcedefinitions.apiextensions.k8s.io"


async def install_crds(sim: KubeSim) -> None:
    for crd in all_crds():
        await sim.api.create(CRD_RESOURCE, crd)


async def test_crds_are_accepted_and_serve_defaults(kubesim: KubeSim) -> None:
    await install_crds(kubesim)
    client = make_api(str(kubesim.kubeconfig_path))
    try:
        assert await ensure_presets(client, "ephemeral-nodes") == [
            "cluster-internal", "external-unstable", "external-stable"]
        assert await ensure_presets(client, "ephemeral-nodes") == []
        stored = await client.get(LISTENER_CLASS, "external-stable")
        spec: dict[str, Any] = stored["spec"]
        assert spec["serviceType"] == "LoadBalancer"
        assert spec["preferredAddressType"] == "HostnameConservative"
        assert spec["loadBalancerAllocateNodePorts"] is True
        assert spec["serviceOverrides"] == {"apiVersion": "v1", "kind": "Service", "metadata": {}}

        created = await client.create(LISTENER, {
            "apiVersion": LISTENER.api_version, "kind": LISTENER.kind,
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"className": "cluster-internal", "ports": [{"name": "http", "port": 80}]}}, "default")
        assert created["spec"]["publishNotReadyAddresses"] is True
        assert created["spec"]["objectOverrides"] == []
    finally:
        await client.close()


async def test_invalid_listener_is_rejected_by_the_schema(kubesim: KubeSim) -> None:
    await install_crds(kubesim)
    client = make_api(str(kubesim.kubeconfig_path))
    try:
        with pytest.raises(ApiFailure) as info:
            await client.create(LISTENER, {"apiVersion": LISTENER.api_version, "kind": LISTENER.kind,
                                           "metadata": {"name": "bad", "namespace": "default"},
                                           "spec": {"ports": [{"name": "http", "port": "eighty"}]}}, "default")
        assert info.value.code == 422
    finally:
        await client.close()


async def test_listener_status_subresource_accepts_conditions(kubesim: KubeSim) -> None:
    await install_crds(kubesim)
    client = make_api(str(kubesim.kubeconfig_path))
    try:
        await client.create(LISTENER, {"apiVersion": LISTENER.api_version, "kind": LISTENER.kind,
                                       "metadata": {"name": "web", "namespace": "default"},
                                       "spec": {"className": "c", "ports": [{"name": "http", "port": 80}]}},
                            "default")
        status = {"serviceName": "web", "observedGeneration": 1,
                  "ingressAddresses": [{"address": "web.default.svc.cluster.local", "addressType": "Hostname",
                                        "ports": {"http": 80}}],
                  "conditions": [{"type": "Ready", "status": "True", "observedGeneration": 1,
                                  "lastTransitionTime": "2026-01-01T00:00:00Z", "reason": "AddressesPublished",
                                  "message": "1 address published"}]}
        await client.apply(LISTENER, {"apiVersion": "listeners.stackable.tech/v1alpha1", "kind": "Listener",
                                      "metadata": {"name": "web", "namespace": "default"}, "status": status},
                           name="web", namespace="default", field_manager="listeners.stackable.tech/listener",
                           force=True, subresource="status")
        stored = await client.get(LISTENER, "web", namespace="default")
        assert stored["status"] == status
    finally:
        await client.close()


async def test_kubectl_get_listeners_shows_class_service_and_first_address(kubesim: KubeSim) -> None:
    """The printer columns upstream lacks, as a user sees them."""
    await install_crds(kubesim)
    await kubesim.api.create("listeners.listeners.stackable.tech", {
        "apiVersion": "listeners.stackable.tech/v1alpha1", "kind": "Listener",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"className": "external-unstable", "ports": [{"name": "http", "port": 80}]}}, "default")
    listener = await kubesim.api.get("listeners.listeners.stackable.tech", "web", "default")
    listener["status"] = {"serviceName": "web", "ingressAddresses": [
        {"address": "192.0.2.10", "addressType": "IP", "ports": {"http": 31000}},
        {"address": "192.0.2.11", "addressType": "IP", "ports": {"http": 31000}}]}
    await kubesim.api.update("listeners.listeners.stackable.tech", listener, subresource="status")

    venv_kubectl = Path(sys.executable).with_name("kubectl")
    kubectl = str(venv_kubectl) if venv_kubectl.exists() else shutil.which("kubectl")
    assert kubectl, "kubectl is part of the dev environment"
    proc = await asyncio.create_subprocess_exec(
        kubectl, "--kubeconfig", str(kubesim.kubeconfig_path), "get", "listeners", "-n", "default",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    header, row = out.decode().splitlines()
    assert header.split() == ["NAME", "CLASS", "SERVICE", "ADDRESS", "AGE"]
    assert row.split()[:4] == ["web", "external-unstable", "web", "192.0.2.10"]
