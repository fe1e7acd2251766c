"""The shipped ClusterRole allows every request the CSI services make.

The CSI servers talk to kubesim as the operator's ServiceAccount, and kubesim authorizes that user with the rules the
rendered install (``deploy/manifests/``, the Helm chart with default values) binds to it cluster-wide. The flows below cover every kind of request the Controller and Node
services send (reads, the bounded-wait watch, applies, merge patches, creates, Events); a rule missing from the
manifest makes a request fail with 403, which these tests report by name.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from csi_support import (
    CRD,
    MOUNT,
    NODE_NAME,
    CsiEndpoint,
    close_endpoint,
    expect_code,
    listener_class_object,
    node_object,
    open_endpoint,
    pod_object,
    pv_object,
    pvc_object,
)
from rendered_install import granted_rules, operator_service_account

from csi_proto import csi_pb2
from kubesim.auth.authn import RequestAttributes, User
from kubesim.sim import KubeSim, write_kubeconfig
from kubesim.store.store import Store
from listener_operator.constants import (
    ANNOTATION_LISTENER_CLASS,
    ANNOTATION_LISTENER_NAME,
    TOPOLOGY_KEY_HOSTNAME,
)
from listener_operator.crd.generate import all_crds
from listener_operator.kinds import LISTENER, LISTENER_CLASS
from operator_runtime.api import KubeApi
from operator_runtime.config import make_api
from operator_runtime.kinds import NODE, POD, PV, PVC

SERVICE_ACCOUNT = "system:serviceaccount:{}:{}".format(*operator_service_account())
NS = "default"


def cluster_role_rules() -> list[Mapping[str, Any]]:
    """What the install grants the ServiceAccount everywhere (its namespaced Role only covers leader election)."""
    return list(granted_rules(None))


def allows(rules: list[Mapping[str, Any]], verb: str, group: str, resource: str) -> bool:
    """RBAC's rule match for resource requests (no resourceNames in this role)."""
    return any((group in rule.get("apiGroups", []) or "*" in rule.get("apiGroups", []))
               and (resource in rule.get("resources", []) or "*" in rule.get("resources", []))
               and (verb in rule.get("verbs", []) or "*" in rule.get("verbs", []))
               for rule in rules)


@dataclass
class RoleAuthorizer:
    """Admits the test's admin user; judges the ServiceAccount by the ClusterRole and records what it asked.

    As in a real API server, a server-side apply that creates the object needs ``create`` as well as ``patch``.
    """

    rules: list[Mapping[str, Any]]
    store: Store
    used: set[tuple[str, str, str]] = field(default_factory=set)
    denied: list[str] = field(default_factory=list)

    def _exists(self, attrs: RequestAttributes) -> bool:
        kind = self.store.registry.by_key(f"{attrs.resource}.{attrs.group}" if attrs.group else attrs.resource)
        return kind is not None and attrs.name is not None and \
            self.store.find(kind, attrs.namespace, attrs.name) is not None

    def authorize(self, attrs: RequestAttributes) -> str | None:
        if attrs.user.name != SERVICE_ACCOUNT:
            return None
        resource = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
        verbs = [attrs.verb]
        if attrs.verb == "patch" and not attrs.subresource and not self._exists(attrs):
            verbs.append("create")
        for verb in verbs:
            self.used.add((verb, attrs.group, resource))
            if not allows(self.rules, verb, attrs.group, resource):
                self.denied.append(f"{verb} {resource}.{attrs.group}")
                return "not allowed by the ClusterRole in deploy/manifests/"
        return None


@dataclass
class AsOperator:
    admin: KubeApi
    csi: CsiEndpoint
    authorizer: RoleAuthorizer


@pytest.fixture
async def as_operator(kubesim: KubeSim, short_dir: Path) -> AsyncIterator[AsOperator]:
    role_authorizer = RoleAuthorizer(cluster_role_rules(), kubesim.store)
    token = secrets.token_hex(16)
    kubesim.server.authenticator.tokens[token] = User(SERVICE_ACCOUNT, ("system:serviceaccounts",))
    kubesim.server.authorizer = role_authorizer
    kubeconfig = short_dir / "operator.kubeconfig"
    write_kubeconfig(kubeconfig, kubesim.url, token, kubesim.ca_pem)
    admin = make_api(str(kubesim.kubeconfig_path))
    for crd in all_crds():
        await admin.create(CRD, crd)
    operator_api = make_api(str(kubeconfig))
    server, channel, endpoint = await open_endpoint(operator_api, short_dir, listener_wait_seconds=0.3)
    yield AsOperator(admin, endpoint, role_authorizer)
    await close_endpoint(server, channel, endpoint)
    await operator_api.close()
    await admin.close()


def create_request(pvc: str, name: str) -> csi_pb2.CreateVolumeRequest:
    return csi_pb2.CreateVolumeRequest(
        name=name, volume_capabilities=[MOUNT],
        parameters={"csi.storage.k8s.io/pvc/name": pvc, "csi.storage.k8s.io/pvc/namespace": NS},
        accessibility_requirements=csi_pb2.TopologyRequirement(
            preferred=[csi_pb2.Topology(segments={TOPOLOGY_KEY_HOSTNAME: NODE_NAME})]))


async def volume(env: AsOperator, pod: dict[str, Any], claim: str, pv: str, annotations: dict[str, str]
                 ) -> csi_pb2.NodePublishVolumeRequest:
    """PVC and PV of one of ``pod``'s volumes, and the publish request kubelet would send for it."""
    await env.admin.create(PVC, pvc_object(NS, claim, annotations), NS)
    await env.admin.create(PV, pv_object(pv, NS, claim, annotations))
    uid = pod["metadata"]["uid"]
    context = {"csi.storage.k8s.io/pod.name": pod["metadata"]["name"], "csi.storage.k8s.io/pod.namespace": NS,
               "csi.storage.k8s.io/pod.uid": uid, **annotations}
    return csi_pb2.NodePublishVolumeRequest(volume_id=pv, target_path=env.csi.target(uid, pv),
                                            volume_capability=MOUNT, volume_context=context)


async def exercise_every_csi_request(env: AsOperator) -> None:
    """Provision and publish a class volume (waiting for its address) and a shared NodePort volume, then unpublish."""
    admin = env.admin
    await admin.create(LISTENER_CLASS, listener_class_object("lb", "LoadBalancer"))
    await admin.create(LISTENER_CLASS, listener_class_object("np", "NodePort", pinned=True))
    await admin.create(NODE, node_object(NODE_NAME, external_ip="203.0.113.7"))
    await admin.create(LISTENER, {"apiVersion": LISTENER.api_version, "kind": "Listener",
                                  "metadata": {"name": "shared", "namespace": NS},
                                  "spec": {"className": "np", "ports": [{"name": "http", "port": 80}]}}, NS)
    await admin.merge_patch(LISTENER, {"status": {"serviceName": "shared", "nodePorts": {"http": 31000},
                                                  "ingressAddresses": []}},
                            name="shared", namespace=NS, subresource="status")
    pod = await admin.create(POD, pod_object(NS, "web-0", node=NODE_NAME,
                                             claims={"own": "web-0-own", "shared": "web-0-shared"},
                                             ports=[{"name": "http", "containerPort": 80}]), NS)
    own = await volume(env, pod, "web-0-own", "pvc-own", {ANNOTATION_LISTENER_CLASS: "lb"})
    shared = await volume(env, pod, "web-0-shared", "pvc-shared", {ANNOTATION_LISTENER_NAME: "shared"})
    await admin.create(PVC, pvc_object(NS, "bad", {}), NS)

    controller = env.csi.controller
    await controller.CreateVolume(create_request("web-0-own", "pvc-own"))
    await controller.CreateVolume(create_request("web-0-shared", "pvc-shared"))
    await expect_code(controller.CreateVolume(create_request("bad", "pvc-bad")), grpc.StatusCode.INVALID_ARGUMENT)
    await controller.DeleteVolume(csi_pb2.DeleteVolumeRequest(volume_id="pvc-bad"))

    node = env.csi.node
    # no address yet: Listener apply, PV and Pod labels, Events, the bounded watch, then UNAVAILABLE
    await expect_code(node.NodePublishVolume(own), grpc.StatusCode.UNAVAILABLE)
    await admin.merge_patch(LISTENER, {"status": {"serviceName": "web-0-own", "ingressAddresses": [
        {"address": "198.51.100.1", "addressType": "IP", "ports": {"http": 80}}]}},
                            name="web-0-own", namespace=NS, subresource="status")
    await node.NodePublishVolume(own)  # creates PodListeners
    await node.NodePublishVolume(shared)  # Node and ListenerClass reads, PodListeners merge patch
    # a restarted node plugin finds both volumes (a LIST of the node's Pods, PV reads) and watches their Listeners
    assert env.csi.service is not None
    await env.csi.service.start()
    await node.NodeUnpublishVolume(csi_pb2.NodeUnpublishVolumeRequest(volume_id="pvc-own",
                                                                      target_path=own.target_path))
    await node.NodeUnpublishVolume(csi_pb2.NodeUnpublishVolumeRequest(volume_id="pvc-shared",
                                                                      target_path=shared.target_path))


async def test_cluster_role_covers_every_csi_request(as_operator: AsOperator) -> None:
    await exercise_every_csi_request(as_operator)
    authorizer = as_operator.authorizer
    assert authorizer.denied == []
    # the flows did reach every kind of request the services make (else this test would prove little)
    assert {("get", "", "persistentvolumeclaims"), ("get", "", "persistentvolumes"), ("get", "", "pods"),
            ("get", "", "nodes"), ("get", "listeners.stackable.tech", "listenerclasses"),
            ("get", "listeners.stackable.tech", "listeners"), ("watch", "listeners.stackable.tech", "listeners"),
            ("list", "listeners.stackable.tech", "listeners"), ("list", "", "pods"),
            ("patch", "listeners.stackable.tech", "listeners"), ("create", "listeners.stackable.tech", "listeners"),
            ("patch", "", "persistentvolumes"),
            ("patch", "", "pods"), ("create", "listeners.stackable.tech", "podlisteners"),
            ("patch", "listeners.stackable.tech", "podlisteners"), ("get", "listeners.stackable.tech", "podlisteners"),
            ("create", "events.k8s.io", "events")} <= authorizer.used
    # repeated Events are aggregated into a series by a merge patch after a while
    assert allows(authorizer.rules, "patch", "events.k8s.io", "events")


def without(rules: list[Mapping[str, Any]], group: str, resource: str) -> Iterator[Mapping[str, Any]]:
    for rule in rules:
        if group in rule.get("apiGroups", []) and resource in rule.get("resources", []):
            rest = [r for r in rule["resources"] if r != resource]
            if rest:
                yield {**rule, "resources": rest}
        else:
            yield rule


async def test_a_missing_rule_is_reported(as_operator: AsOperator) -> None:
    """The check above can fail: without the PodListeners rule, the publish fails and the denial is named."""
    authorizer = as_operator.authorizer
    authorizer.rules = list(without(authorizer.rules, "listeners.stackable.tech", "podlisteners"))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await exercise_every_csi_request(as_operator)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "PodListeners" in (caught.value.details() or "")
    assert "get podlisteners.listeners.stackable.tech" in authorizer.denied

