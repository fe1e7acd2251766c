"""The Helm chart deploy/helm/listener-operator: lint, what each value does to the rendered objects (the service
network's site controller included), refusals of bad values, offline schema validation (Kubernetes 1.33 and 1.37),
kubectl apply --dry-run=server of every value set and helm install/upgrade/uninstall against kubesim, deploy/manifests/
being exactly the chart's render and the chart's service-network RBAC file exactly what the site controller's code
needs."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from rendered_install import CHART_DIR, MANIFESTS_DIR, REPO, granted_rules, one

from service_network.rbac import chart_rbac_yaml, cluster_role_rules, leader_election_rules

BIN = Path(sys.executable).parent
HELM = str(BIN / "helm")
KUBECTL = str(BIN / "kubectl")
NAMESPACE = "listener-operator"
CRD_RULE = {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
            "verbs": ["list", "watch", "create", "patch"]}

VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "stable-nodes": {"preset": "stable-nodes"},
    "maintenance-off": {"maintenance": {"customResourceDefinitions": {"maintain": False}}},
    "microk8s": {"kubeletDir": "/var/snap/microk8s/common/var/lib/kubelet"},
    "k0s": {"kubeletDir": "/var/lib/k0s/kubelet"},
    "existing-service-account": {"serviceAccount": {"create": False, "name": "platform-operators"}},
    "customised": {
        "image": {"repository": "registry.example.com/platform/listener-operator", "tag": "0.1.0-rc1",
                  "pullPolicy": "Always"},
        "labels": {"team": "platform", "stackable.tech/vendor": "Stackable"},
        "kubernetesClusterDomain": "corp.example",
        "telemetry": {"consoleLog": {"level": "DEBUG", "format": "json"}},
        "csiProvisioner": {
            "replicas": 3, "priorityClassName": "system-cluster-critical",
            "podAnnotations": {"prometheus.io/scrape": "true"}, "nodeSelector": {"node-role/infra": "true"},
            "tolerations": [{"key": "infra", "operator": "Exists", "effect": "NoSchedule"}],
            "controllerService": {"resources": {"requests": {"cpu": "200m", "memory": "300Mi"},
                                                "limits": {"memory": "300Mi"}}}},
        "csiNodeDriver": {
            "priorityClassName": "system-node-critical", "podSecurityContext": {"fsGroup": 0},
            "tolerations": [{"operator": "Exists"}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}]}}},
            "nodeService": {"resources": {"requests": {"cpu": "50m", "memory": "96Mi"},
                                          "limits": {"cpu": None, "memory": "96Mi"}}}},
    },
    "pull-secrets": {"image": {"pullSecrets": [{"name": "regcred"}]}},
    "service-network": {"serviceNetwork": {"enabled": True}},
    "service-network-customised": {
        "maintenance": {"customResourceDefinitions": {"maintain": False}},
        "image": {"repository": "registry.example.com/platform/listener-operator", "tag": "0.1.0-rc1",
                  "pullPolicy": "Always", "pullSecrets": [{"name": "regcred"}]},
        "telemetry": {"consoleLog": {"level": "DEBUG"}},
        "serviceNetwork": {
            "enabled": True, "serviceAccount": {"create": False, "name": "skupper-controller"},
            "grantServer": {"enabled": True, "port": 9443, "url": "https://grants.example.com:443",
                            "service": {"type": "LoadBalancer"}},
            "controller": {"replicas": 2, "watchNamespace": "apps", "priorityClassName": "system-cluster-critical",
                           "tolerations": [{"operator": "Exists"}], "securityContext": {"runAsUser": None},
                           "resources": {"limits": {"memory": "512Mi"}}}},
    },
}
SITE_CONTROLLER = "listener-operator-service-network-controller"


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([HELM, *args], capture_output=True, text=True, timeout=60, check=False)


def values_file(tmp_path: Path, values: dict[str, Any]) -> str:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return str(path)


def render(tmp_path: Path, values: dict[str, Any], *extra: str) -> list[dict[str, Any]]:
    result = helm("template", "listener-operator", str(CHART_DIR), "--namespace", NAMESPACE,
                  "--values", values_file(tmp_path, values), *extra)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def refusal(tmp_path: Path, values: dict[str, Any]) -> str:
    result = helm("template", "listener-operator", str(CHART_DIR), "--values", values_file(tmp_path, values))
    assert result.returncode != 0, f"helm template accepted {values}"
    return result.stderr


def pods(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {kind: one(objects, kind)["spec"]["template"] for kind in ("Deployment", "DaemonSet")}


def container(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [c for c in one(objects, kind)["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    return found


def env(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container(objects, kind, name)["env"]}


@pytest.mark.parametrize("name", VALUE_SETS)
def test_helm_lint_passes(name: str, tmp_path: Path) -> None:
    result = helm("lint", "--strict", str(CHART_DIR), "--values", values_file(tmp_path, VALUE_SETS[name]))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


@pytest.mark.parametrize("version", ["1.33", "1.37"])
@pytest.mark.parametrize("name", VALUE_SETS)
def test_rendered_objects_validate_strictly(name: str, version: str, tmp_path: Path) -> None:
    objects = render(tmp_path, VALUE_SETS[name])
    assert {o["kind"] for o in objects} >= {"Deployment", "DaemonSet", "CSIDriver", "StorageClass", "ClusterRole",
                                            "ClusterRoleBinding", "Role", "RoleBinding"}
    for obj in objects:
        kubernetes_validate.validate(obj, version, strict=True)


def test_deploy_manifests_are_the_default_render(tmp_path: Path) -> None:
    out = tmp_path / "manifests"
    result = subprocess.run([str(REPO / "scripts" / "render-manifests"), str(out)], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    fresh = {p.name: p.read_text() for p in out.glob("*.yaml")}
    committed = {p.name: p.read_text() for p in MANIFESTS_DIR.glob("*.yaml")}
    assert fresh.keys() == committed.keys()
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert stale == [], f"deploy/manifests/{stale} differ from the chart: run scripts/render-manifests"
    # the service network's objects, for `kubectl apply -f deploy/manifests/service-network/` after the rest
    (fresh_network,) = (out / "service-network").glob("*.yaml")
    committed_network = MANIFESTS_DIR / "service-network" / fresh_network.name
    assert fresh_network.read_text() == committed_network.read_text(), "run scripts/render-manifests"
    kinds = sorted(doc["kind"] for doc in yaml.safe_load_all(committed_network.read_text()) if doc)
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "Deployment", "Role", "RoleBinding", "ServiceAccount"]


def test_the_chart_rbac_file_is_what_the_site_controller_code_needs() -> None:
    committed = (CHART_DIR / "files" / "service-network-rbac.yaml").read_text()
    assert committed == chart_rbac_yaml(), "files/service-network-rbac.yaml is stale: run scripts/render-manifests"


def network_objects(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The objects serviceNetwork.enabled adds, by kind."""
    added = [o for o in objects if o["metadata"]["name"].startswith("listener-operator-service-network-")]
    found = {o["kind"]: o for o in added}
    assert len(found) == len(added), "one object per kind"
    return found


def test_the_service_network_is_off_by_default(tmp_path: Path) -> None:
    objects = render(tmp_path, {})
    assert network_objects(objects) == {}
    assert [o["metadata"]["name"] for o in objects if o["kind"] == "Deployment"] == ["listener-operator-csi-provisioner"]


def test_service_network_adds_the_site_controller_with_its_own_account_and_roles(tmp_path: Path) -> None:
    objects = network_objects(render(tmp_path, VALUE_SETS["service-network"]))
    assert sorted(objects) == ["ClusterRole", "ClusterRoleBinding", "Deployment", "Role", "RoleBinding",
                               "ServiceAccount"]   # no grant Service by default
    deployment = objects["Deployment"]
    assert (deployment["metadata"]["namespace"], deployment["spec"]["replicas"]) == (NAMESPACE, 1)
    template = deployment["spec"]["template"]
    assert template["metadata"]["labels"]["app.kubernetes.io/role"] == "service-network-controller"
    assert template["spec"]["serviceAccountName"] == SITE_CONTROLLER == objects["ServiceAccount"]["metadata"]["name"]
    (controller,) = template["spec"]["containers"]
    assert controller["image"] == "localhost/listener-operator:0.1.0"   # the same image as the operator
    assert (controller["command"], controller["args"]) == (["service-network"], ["run", "controller"])
    assert {e["name"]: e.get("value", e.get("valueFrom")) for e in controller["env"]} == {
        "ROUTER_IMAGE": "localhost/listener-operator:0.1.0", "ROUTER_IMAGE_PULL_POLICY": "IfNotPresent",
        "POD_NAME": {"fieldRef": {"fieldPath": "metadata.name"}},
        "POD_NAMESPACE": {"fieldRef": {"fieldPath": "metadata.namespace"}}, "HTTP_ADDRESS": "0.0.0.0:8082"}
    assert controller["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert controller["securityContext"]["runAsNonRoot"] is True
    # The roles are the controller's code: CONTROLLER_RULES without the Lease rule plus CRD maintenance's rule
    # cluster-wide, the Lease rule in the release namespace only.
    assert objects["ClusterRole"]["rules"] == cluster_role_rules(maintain_crds=True)
    assert (objects["Role"]["metadata"]["namespace"], objects["Role"]["rules"]) == (NAMESPACE, leader_election_rules())
    for binding, role in (("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")):
        assert objects[binding]["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": role,
                                               "name": objects[role]["metadata"]["name"]}
        assert objects[binding]["subjects"] == [{"kind": "ServiceAccount", "name": SITE_CONTROLLER,
                                                 "namespace": NAMESPACE}]


def test_service_network_values_reach_the_site_controller(tmp_path: Path) -> None:
    all_objects = render(tmp_path, VALUE_SETS["service-network-customised"])
    objects = network_objects(all_objects)
    assert "ServiceAccount" not in objects   # an existing one, named
    spec = objects["Deployment"]["spec"]
    assert spec["replicas"] == 2
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == "skupper-controller"
    assert (pod["imagePullSecrets"], pod["tolerations"], pod["priorityClassName"]) == (
        [{"name": "regcred"}], [{"operator": "Exists"}], "system-cluster-critical")
    (controller,) = pod["containers"]
    image = "registry.example.com/platform/listener-operator:0.1.0-rc1"
    assert (controller["image"], controller["imagePullPolicy"]) == (image, "Always")
    env = {e["name"]: e.get("value") for e in controller["env"]}
    assert (env["ROUTER_IMAGE"], env["ROUTER_IMAGE_PULL_POLICY"]) == (image, "Always")
    assert (env["WATCH_NAMESPACE"], env["DISABLE_CRD_MAINTENANCE"], env["CONSOLE_LOG_LEVEL"]) == (
        "apps", "true", "DEBUG")
    assert "runAsUser" not in controller["securityContext"]   # null removes a default (OpenShift)
    # the grant server: listening on the Pod's port, publishing the URL other sites reach, behind a LoadBalancer
    assert (env["GRANT_SERVER_ADDRESS"], env["GRANT_SERVER_URL"]) == ("0.0.0.0:9443", "https://grants.example.com:443")
    assert {"name": "grants", "containerPort": 9443} in controller["ports"]
    service = objects["Service"]["spec"]
    assert (service["type"], service["ports"]) == ("LoadBalancer", [{"name": "grants", "port": 9443,
                                                                     "targetPort": "grants"}])
    assert service["selector"] == spec["selector"]["matchLabels"]
    assert controller["resources"]["limits"] == {"cpu": "500m", "memory": "512Mi"}
    # CRD maintenance off: the controller only waits for the CRDs
    assert objects["ClusterRole"]["rules"] == cluster_role_rules(maintain_crds=False)
    for binding in ("ClusterRoleBinding", "RoleBinding"):
        assert objects[binding]["subjects"] == [{"kind": "ServiceAccount", "name": "skupper-controller",
                                                 "namespace": NAMESPACE}]


def test_defaults(tmp_path: Path) -> None:
    objects = render(tmp_path, {})
    controller = container(objects, "Deployment", "csi-controller-service")
    assert controller["image"] == "localhost/listener-operator:0.1.0"
    assert controller["args"] == ["run", "controller"]
    assert controller["securityContext"] == {"runAsUser": 0, "seLinuxOptions": {"type": "spc_t"}}
    assert "privileged" not in controller["securityContext"]
    assert env(objects, "Deployment", "csi-controller-service") == {
        "CSI_ENDPOINT": "/csi/csi.sock", "LISTENER_CLASS_PRESET": "ephemeral-nodes",
        "POD_NAME": {"fieldRef": {"fieldPath": "metadata.name"}},
        "POD_NAMESPACE": {"fieldRef": {"fieldPath": "metadata.namespace"}}, "HTTP_ADDRESS": "0.0.0.0:8080"}
    provisioner = container(objects, "Deployment", "external-provisioner")
    assert provisioner["image"] == "registry.k8s.io/sig-storage/csi-provisioner:v5.3.0"
    assert provisioner["args"][:3] == ["--csi-address=/csi/csi.sock", "--feature-gates=Topology=true",
                                       "--extra-create-metadata"]
    assert "--leader-election" in provisioner["args"]
    assert one(objects, "Deployment")["spec"]["replicas"] == 2
    node = container(objects, "DaemonSet", "csi-node-service")
    assert node["args"] == ["run", "node"]
    assert env(objects, "DaemonSet", "csi-node-service") == {
        "CSI_ENDPOINT": "/csi/csi.sock", "KUBERNETES_NODE_NAME": {"fieldRef": {"fieldPath": "spec.nodeName"}},
        "KUBELET_DIR": "/var/lib/kubelet", "HTTP_ADDRESS": "0.0.0.0:8081"}
    registrar = container(objects, "DaemonSet", "node-driver-registrar")
    assert registrar["image"] == "registry.k8s.io/sig-storage/csi-node-driver-registrar:v2.15.0"
    assert registrar["args"] == ["--csi-address=/csi/csi.sock",
                                 "--kubelet-registration-path=/var/lib/kubelet/plugins/listeners.stackable.tech/csi.sock"]
    volumes = {v["name"]: v["hostPath"]["path"] for v in one(objects, "DaemonSet")["spec"]["template"]["spec"]["volumes"]}
    assert volumes == {"plugin-dir": "/var/lib/kubelet/plugins/listeners.stackable.tech/",
                       "pods-dir": "/var/lib/kubelet/pods/", "registration-dir": "/var/lib/kubelet/plugins_registry"}
    mounts = {m["name"]: m["mountPath"] for m in node["volumeMounts"]}
    assert mounts == {"plugin-dir": "/csi", "pods-dir": "/var/lib/kubelet/pods"}
    assert CRD_RULE in one(objects, "ClusterRole")["rules"]
    assert one(objects, "ServiceAccount")["metadata"]["name"] == "listener-operator-serviceaccount"
    for template in pods(objects).values():
        assert template["metadata"]["labels"]["stackable.tech/vendor"] == "Stackable"
        assert "imagePullSecrets" not in template["spec"]
        assert "tolerations" not in template["spec"]
    # no OpenShift object unless the cluster serves security.openshift.io
    assert all(o["kind"] != "SecurityContextConstraints" for o in objects)


def test_preset_stable_nodes(tmp_path: Path) -> None:
    objects = render(tmp_path, VALUE_SETS["stable-nodes"])
    assert env(objects, "Deployment", "csi-controller-service")["LISTENER_CLASS_PRESET"] == "stable-nodes"


def test_crd_maintenance_off_drops_the_crd_writes_and_tells_the_controller(tmp_path: Path) -> None:
    objects = render(tmp_path, VALUE_SETS["maintenance-off"])
    assert env(objects, "Deployment", "csi-controller-service")["DISABLE_CRD_MAINTENANCE"] == "true"
    rules = [rule for rule in one(objects, "ClusterRole")["rules"] if "apiextensions.k8s.io" in rule["apiGroups"]]
    # still enough to wait until the CRDs (installed by the administrator) are Established
    assert rules == [{"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
                      "verbs": ["list", "watch"]}]
    assert "DISABLE_CRD_MAINTENANCE" not in env(render(tmp_path, {}), "Deployment", "csi-controller-service")


@pytest.mark.parametrize("name", ["microk8s", "k0s"])
def test_kubelet_dir_moves_every_host_path(name: str, tmp_path: Path) -> None:
    kubelet_dir = VALUE_SETS[name]["kubeletDir"]
    objects = render(tmp_path, VALUE_SETS[name])
    spec = one(objects, "DaemonSet")["spec"]["template"]["spec"]
    assert {v["hostPath"]["path"] for v in spec["volumes"]} == {
        f"{kubelet_dir}/plugins/listeners.stackable.tech/", f"{kubelet_dir}/pods/", f"{kubelet_dir}/plugins_registry"}
    node = container(objects, "DaemonSet", "csi-node-service")
    assert {"name": "pods-dir", "mountPath": f"{kubelet_dir}/pods"} in node["volumeMounts"]
    assert env(objects, "DaemonSet", "csi-node-service")["KUBELET_DIR"] == kubelet_dir
    registrar = container(objects, "DaemonSet", "node-driver-registrar")
    assert f"--kubelet-registration-path={kubelet_dir}/plugins/listeners.stackable.tech/csi.sock" in registrar["args"]
    assert "/var/lib/kubelet" not in yaml.safe_dump(spec).replace(kubelet_dir, "")


def test_existing_service_account(tmp_path: Path) -> None:
    objects = render(tmp_path, VALUE_SETS["existing-service-account"])
    assert all(o["kind"] != "ServiceAccount" for o in objects)
    for template in pods(objects).values():
        assert template["spec"]["serviceAccountName"] == "platform-operators"
    for binding in (one(objects, "ClusterRoleBinding"), one(objects, "RoleBinding")):
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "platform-operators",
                                        "namespace": NAMESPACE}]
    assert granted_rules(None, objects) == one(objects, "ClusterRole")["rules"]


def test_customised_values_reach_the_pods(tmp_path: Path) -> None:
    values = VALUE_SETS["customised"]
    objects = render(tmp_path, values)
    for obj in objects:
        assert obj["metadata"]["labels"]["team"] == "platform", obj["kind"]
    deployment, daemonset = one(objects, "Deployment"), one(objects, "DaemonSet")
    assert deployment["spec"]["selector"]["matchLabels"]["team"] == "platform"
    assert deployment["spec"]["replicas"] == 3
    template = deployment["spec"]["template"]
    assert template["metadata"]["annotations"] == {"prometheus.io/scrape": "true"}
    assert template["spec"]["nodeSelector"] == {"node-role/infra": "true"}
    assert template["spec"]["tolerations"] == values["csiProvisioner"]["tolerations"]
    assert template["spec"]["priorityClassName"] == "system-cluster-critical"
    controller = container(objects, "Deployment", "csi-controller-service")
    assert controller["image"] == "registry.example.com/platform/listener-operator:0.1.0-rc1"
    assert controller["imagePullPolicy"] == "Always"
    # Helm merges a values file into the defaults: the default CPU limit stays unless set to null
    assert controller["resources"] == {"requests": {"cpu": "200m", "memory": "300Mi"},
                                       "limits": {"cpu": "500m", "memory": "300Mi"}}
    controller_env = env(objects, "Deployment", "csi-controller-service")
    assert controller_env["KUBERNETES_CLUSTER_DOMAIN"] == "corp.example"
    assert (controller_env["CONSOLE_LOG_LEVEL"], controller_env["CONSOLE_LOG_FORMAT"]) == ("DEBUG", "json")
    node_template = daemonset["spec"]["template"]
    assert node_template["spec"]["tolerations"] == [{"operator": "Exists"}]
    assert node_template["spec"]["affinity"] == values["csiNodeDriver"]["affinity"]
    assert node_template["spec"]["securityContext"] == {"fsGroup": 0}
    assert node_template["spec"]["priorityClassName"] == "system-node-critical"
    node = container(objects, "DaemonSet", "csi-node-service")
    assert node["image"] == controller["image"]
    assert node["resources"] == {"requests": {"cpu": "50m", "memory": "96Mi"}, "limits": {"memory": "96Mi"}}
    assert env(objects, "DaemonSet", "csi-node-service")["CONSOLE_LOG_FORMAT"] == "json"


def test_image_pinned_by_digest(tmp_path: Path) -> None:
    digest = "sha256:" + "0123456789abcdef" * 4
    objects = render(tmp_path, {"image": {"tag": f"0.1.0@{digest}"}})
    for name in ("csi-controller-service", "csi-node-service"):
        kind = "Deployment" if name == "csi-controller-service" else "DaemonSet"
        assert container(objects, kind, name)["image"] == f"localhost/listener-operator:0.1.0@{digest}"


def test_pull_secrets_in_both_workloads(tmp_path: Path) -> None:
    objects = render(tmp_path, VALUE_SETS["pull-secrets"])
    for template in pods(objects).values():
        assert template["spec"]["imagePullSecrets"] == [{"name": "regcred"}]


def test_openshift_gets_security_context_constraints(tmp_path: Path) -> None:
    objects = render(tmp_path, {}, "--api-versions", "security.openshift.io/v1")
    scc = one(objects, "SecurityContextConstraints")
    assert (scc["allowPrivilegedContainer"], scc["runAsUser"]) == (False, {"type": "MustRunAs", "uid": 0})
    assert {"apiGroups": ["security.openshift.io"], "resources": ["securitycontextconstraints"],
            "resourceNames": [scc["metadata"]["name"]], "verbs": ["use"]} in one(objects, "ClusterRole")["rules"]


@pytest.mark.parametrize(("values", "message"), [
    ({"preset": "stable"}, "at '/preset': value must be one of 'none', 'ephemeral-nodes', 'stable-nodes'"),
    ({"kubeletdir": "/x"}, "additional properties 'kubeletdir' not allowed"),
    ({"kubeletDir": "var/lib/kubelet"}, "kubeletDir must be an absolute path"),
    ({"kubeletDir": "/var/lib/kubelet/"}, "kubeletDir must be an absolute path"),
    ({"kubeletDir": "/var/lib/../kubelet"}, "kubeletDir must not contain '.' or '..' components"),
    ({"kubeletDir": "/var/lib/kubelet\n  - name: x"}, "kubeletDir must be an absolute path"),
    ({"kubeletDir": "/" + "k" * 70}, "kubeletDir is too long"),
    ({"serviceAccount": {"create": False}}, "serviceAccount.name must name an existing ServiceAccount"),
    ({"image": {"pullPolicy": "Sometimes"}}, "at '/image/pullPolicy'"),
    ({"image": {"repository": "evil\nkind: Secret"}}, "at '/image/repository'"),
    ({"image": {"tag": "0.1.0@sha256:1234"}}, "at '/image/tag'"),
    ({"maintenance": {"customResourceDefinitions": {"maintain": "no"}}}, "maintain"),
    ({"csiProvisioner": {"replicas": 0}}, "at '/csiProvisioner/replicas'"),
    ({"serviceNetwork": {"enabled": "yes"}}, "at '/serviceNetwork/enabled'"),
    ({"serviceNetwork": {"enable": True}}, "additional properties 'enable' not allowed"),
    ({"serviceNetwork": {"controller": {"watchNamespace": "Apps\nkind: Secret"}}},
     "at '/serviceNetwork/controller/watchNamespace'"),
    ({"serviceNetwork": {"grantServer": {"url": "http://grants.example.com"}}},
     "at '/serviceNetwork/grantServer/url'"),
    ({"serviceNetwork": {"grantServer": {"port": 0}}}, "at '/serviceNetwork/grantServer/port'"),
    ({"serviceNetwork": {"enabled": True, "serviceAccount": {"create": False}}},
     "serviceNetwork.serviceAccount.name must name an existing ServiceAccount"),
    ({"kubernetesClusterDomain": "Corp Example"}, "at '/kubernetesClusterDomain'"),
])
def test_bad_values_are_refused_with_the_key(values: dict[str, Any], message: str, tmp_path: Path) -> None:
    assert message in refusal(tmp_path, values)


async def test_every_value_set_is_accepted_by_the_api_server(kubesim: Any, tmp_path: Path) -> None:
    """kubectl apply --dry-run=server of each render (after the namespace exists, as helm --create-namespace does)."""
    kubectl = [KUBECTL, "--kubeconfig", str(kubesim.kubeconfig_path), "--cache-dir", str(tmp_path / "cache")]
    await kubesim.api.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    for name, values in VALUE_SETS.items():
        rendered = tmp_path / f"{name}.yaml"
        rendered.write_text(yaml.safe_dump_all(render(tmp_path, values)))
        process = await asyncio.create_subprocess_exec(
            *kubectl, "apply", "--server-side", "--dry-run=server", "-f", str(rendered),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(process.communicate(), 90)
        assert process.returncode == 0, f"{name}: {err.decode()}"
        assert "deployment.apps/listener-operator-csi-provisioner serverside-applied (server dry run)" in out.decode()
    # dry runs persist nothing
    deployments, _ = await kubesim.api.list("deployments.apps", NAMESPACE)
    assert deployments == []


async def test_helm_installs_upgrades_and_uninstalls_the_release_in_kubesim(kubesim: Any, tmp_path: Path) -> None:
    """What a user runs: helm install (into a namespace it creates), helm upgrade with a value, helm uninstall."""
    async def helm_against_kubesim(*args: str) -> str:
        process = await asyncio.create_subprocess_exec(
            HELM, "--kubeconfig", str(kubesim.kubeconfig_path), *args, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
        out, err = await asyncio.wait_for(process.communicate(), 90)
        assert process.returncode == 0, err.decode()
        return out.decode()

    installed = await helm_against_kubesim("install", "listener-operator", str(CHART_DIR), "--namespace", "ops",
                                           "--create-namespace")
    assert "STATUS: deployed" in installed and "kubectl get listenerclasses" in installed  # NOTES.txt
    deployment = await kubesim.api.get("deployments.apps", "listener-operator-csi-provisioner", "ops")
    assert deployment["spec"]["replicas"] == 2
    await kubesim.api.get("daemonsets.apps", "listener-operator-csi-node-driver", "ops")
    binding = await kubesim.api.get("clusterrolebindings.rbac.authorization.k8s.io",
                                    "listener-operator-clusterrolebinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "listener-operator-serviceaccount",
                                    "namespace": "ops"}]

    upgraded = await helm_against_kubesim("upgrade", "listener-operator", str(CHART_DIR), "--namespace", "ops",
                                          "--set", "preset=stable-nodes", "--set", "serviceNetwork.enabled=true")
    deployment = await kubesim.api.get("deployments.apps", "listener-operator-csi-provisioner", "ops")
    controller = deployment["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "LISTENER_CLASS_PRESET", "value": "stable-nodes"} in controller["env"]
    await kubesim.api.get("deployments.apps", SITE_CONTROLLER, "ops")   # the service network, enabled
    assert "The service network is enabled" in upgraded and "kubectl get sites" in upgraded  # NOTES.txt

    # Purging the release's Secrets sends protobuf DeleteOptions (tests/kubesim/server/codecs/test_server_protobuf.py).
    await helm_against_kubesim("uninstall", "listener-operator", "--namespace", "ops")
    deployments, _ = await kubesim.api.list("deployments.apps", "ops")
    drivers, _ = await kubesim.api.list("csidrivers.storage.k8s.io")
    assert deployments == [] and drivers == []
    releases, _ = await kubesim.api.list("secrets", "ops", label_selector="owner=helm")
    assert releases == []
