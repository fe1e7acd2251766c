"""The generated CRDs and presets against the kubesim API server, through the API client as the operator uses them."""

from __future__ import annotations

import asyncio
import re
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
        {"address": "192.0.2.11", "addressType": "IP", "ports": {"http": 31000}}],
        "conditions": [{"type": "Ready", "status": "True", "reason": "AddressesPublished", "message": "ok",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
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
    assert header.split() == ["NAME", "CLASS", "SERVICE", "ADDRESS", "READY", "REASON", "AGE"]
    assert row.split()[:6] == ["web", "external-unstable", "web", "192.0.2.10", "True", "AddressesPublished"]


def _kubectl() -> str:
    venv_kubectl = Path(sys.executable).with_name("kubectl")
    found = str(venv_kubectl) if venv_kubectl.exists() else shutil.which("kubectl")
    assert found, "kubectl is part of the dev environment"
    return found


async def _kubectl_apply(sim: KubeSim, manifest: str, tmp_path: Path) -> tuple[int, str]:
    path = tmp_path / "listener.yaml"
    path.write_text(manifest)
    proc = await asyncio.create_subprocess_exec(
        _kubectl(), "--kubeconfig", str(sim.kubeconfig_path), "--cache-dir", str(tmp_path / "cache"),
        "apply", "-f", str(path), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


def _listener_manifest(ports: str, name: str = "web") -> str:
    return f"""apiVersion: listeners.stackable.tech/v1alpha1
kind: Listener
metadata:
  name: {name}
  namespace: default
spec:
  className: cluster-internal
  ports:
{ports}
"""


# Bad Listeners that no Service could serve, and the field path kubectl must print (behaviour.md "Admission").
BAD_LISTENERS = [
    ("  - {name: HTTP, port: 80}", r'spec\.ports\[0\]\.name: Invalid value: "HTTP"'),
    ("  - {name: http_alt, port: 80}", r'spec\.ports\[0\]\.name: Invalid value: "http_alt"'),
    ("  - {name: -http, port: 80}", r'spec\.ports\[0\]\.name: Invalid value: "-http"'),
    (f"  - {{name: {'p' * 64}, port: 80}}", r"spec\.ports\[0\]\.name: Too long"),
    ("  - {name: http, port: 0}", r"spec\.ports\[0\]\.port: Invalid value: 0"),
    ("  - {name: http, port: 65536}", r"spec\.ports\[0\]\.port: Invalid value: 65536"),
    ("  - {name: http, port: 80, protocol: HTTP}", r'spec\.ports\[0\]\.protocol: Invalid value: "HTTP"'),
    ("  - {name: http, port: 80, protocol: tcp}", r'spec\.ports\[0\]\.protocol: Invalid value: "tcp"'),
    ("  - {name: http, port: 80}\n  - {name: http, port: 8080}",
     r'spec\.ports\[1\]: Duplicate value: map\[string\]interface \{\}\{"name":"http"\}'),
    ("  - {name: http, port: 80, protocol: TCP}\n  - {name: http, port: 80, protocol: UDP}",
     r"spec\.ports\[1\]: Duplicate value"),
]


@pytest.mark.parametrize(("ports", "expected"), BAD_LISTENERS)
async def test_kubectl_apply_of_a_bad_listener_fails_at_admission_with_the_field_path(
        kubesim: KubeSim, tmp_path: Path, ports: str, expected: str) -> None:
    await install_crds(kubesim)
    code, output = await _kubectl_apply(kubesim, _listener_manifest(ports), tmp_path)
    assert code != 0, output
    assert re.search(r'The Listener "web" is invalid: .*' + expected, output), output
    items, _ = await kubesim.api.list("listeners.listeners.stackable.tech", "default")
    assert items == []


async def test_kubectl_apply_of_a_listener_whose_name_cannot_name_a_service_fails(kubesim: KubeSim,
                                                                                   tmp_path: Path) -> None:
    await install_crds(kubesim)
    for name in ("l" * 64, "9lives", "web.example"):
        code, output = await _kubectl_apply(kubesim, _listener_manifest("  - {name: http, port: 80}", name),
                                            tmp_path)
        assert code != 0 and "metadata.name: " in output, output


async def test_every_port_upstream_accepts_and_a_service_serves_is_still_accepted(kubesim: KubeSim,
                                                                                   tmp_path: Path) -> None:
    """Names and numbers a real Service takes (DNS-1123 labels, digits first included; 1-65535; TCP/UDP/SCTP or
    no protocol, also an explicit null) keep working."""
    await install_crds(kubesim)
    ports = "\n".join([
        "  - {name: http, port: 80}",
        "  - {name: 9092, port: 9092}",
        "  - {name: a, port: 1, protocol: UDP}",
        f"  - {{name: {'p' * 63}, port: 65535, protocol: SCTP}}",
        "  - {name: kafka-tls, port: 9093, protocol: TCP}",
        "  - {name: metrics, port: 8080, protocol: null}",
    ])
    code, output = await _kubectl_apply(kubesim, _listener_manifest(ports.replace("name: 9092", "name: '9092'")),
                                        tmp_path)
    assert code == 0, output
    stored = await kubesim.api.get("listeners.listeners.stackable.tech", "web", "default")
    assert [port["name"] for port in stored["spec"]["ports"]] == [
        "http", "9092", "a", "p" * 63, "kafka-tls", "metrics"]
