"""Pure pieces of the host-process runtime: container views and path translation, command lines and programs, the
container environment, ConfigMap/Secret/projected volume files, node file systems and sidecar flags."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
from pathlib import Path
from typing import Any

import pytest

from kubesim.cluster.base.nodefs import HostPathError, NodeFilesystem, check_host_path_type
from kubesim.cluster.csi.sidecars import parse_flags
from kubesim.cluster.runtime.env import EnvError, container_env, expand, referenced_objects
from kubesim.cluster.runtime.hostprocess import (
    HostImage,
    ProgramNotFound,
    container_argv,
    host_path_variable,
    resolve_program,
)
from kubesim.cluster.runtime.registry import ContainerSpec
from kubesim.cluster.runtime.view import ContainerView
from kubesim.cluster.volumes.volumefiles import VolumeError, volume_files

NODE_PLUGIN_POD = {
    "metadata": {"name": "node-driver-x", "namespace": "ops", "uid": "u1"},
    "spec": {"nodeName": "node-1", "volumes": [
        {"name": "plugin-dir", "hostPath": {"path": "/var/lib/kubelet/plugins/d.example/"}},
        {"name": "pods-dir", "hostPath": {"path": "/var/lib/kubelet/pods/"}},
        {"name": "scratch", "emptyDir": {}},
        {"name": "config", "emptyDir": {}},
    ]},
}
NODE_PLUGIN = {"name": "plugin", "volumeMounts": [
    {"name": "plugin-dir", "mountPath": "/csi"},
    {"name": "pods-dir", "mountPath": "/var/lib/kubelet/pods"},
    {"name": "scratch", "mountPath": "/scratch"},
    {"name": "config", "mountPath": "/scratch/config"},  # below another mount point
]}


def node_plugin_view(tmp_path: Path) -> tuple[ContainerView, Path]:
    kubelet = tmp_path / "state" / "kubelet" / "node-1"
    pod_dir = kubelet / "pods" / "u1" / "volumes" / "kubernetes.io~empty-dir"
    volumes = {"plugin-dir": kubelet / "plugins" / "d.example", "pods-dir": kubelet / "pods",
               "scratch": pod_dir / "scratch", "config": pod_dir / "config"}
    for directory in volumes.values():
        directory.mkdir(parents=True, exist_ok=True)
    spec = ContainerSpec(pod=NODE_PLUGIN_POD, container=NODE_PLUGIN, pod_ip="127.9.128.4", node_name="node-1",
                         volumes=volumes, run_dir=tmp_path / "r" / "1")
    view = ContainerView(spec, tmp_path / "r" / "1")
    view.build()
    return view, kubelet


def test_container_paths_translate_through_the_view(tmp_path: Path) -> None:
    view, kubelet = node_plugin_view(tmp_path)
    root = str(tmp_path / "r" / "1")
    assert view.translate("/csi/csi.sock") == f"{root}/csi/csi.sock"
    assert view.translate("unix:///csi/csi.sock") == f"unix://{root}/csi/csi.sock"
    assert view.translate("--csi-address=/csi/csi.sock") == f"--csi-address={root}/csi/csi.sock"
    assert os.path.realpath(f"{root}/csi") == str(kubelet / "plugins" / "d.example")
    # the kubelet directory around a same-path hostPath mount is the node's own directory
    assert view.translate("/var/lib/kubelet") == str(kubelet)
    assert view.translate("/var/lib/kubelet/pods/u9/volumes") == f"{root}/var/lib/kubelet/pods/u9/volumes"
    assert view.translate("/var/lib") == "/var/lib"  # not the node's: unchanged
    # a mount point below another has no link of its own: its host directory directly
    assert view.translate("/scratch/config/a.yaml") == str(kubelet / "pods" / "u1" / "volumes" /
                                                          "kubernetes.io~empty-dir" / "config" / "a.yaml")
    assert not (Path(root) / "scratch" / "config").is_symlink()
    # the image's own files and other values stay as written; wildcard addresses become the Pod IP
    assert view.translate("/etc/ssl/certs") == "/etc/ssl/certs"
    assert view.translate("0.0.0.0:8081") == "127.9.128.4:8081"
    assert view.translate("[::]:9000") == "127.9.128.4:9000"
    assert view.translate("--http-address=0.0.0.0:8080") == "--http-address=127.9.128.4:8080"
    assert view.translate("0.0.0.0") == "127.9.128.4"
    assert view.translate("true") == "true" and view.translate("cluster.local") == "cluster.local"
    assert view.path("relative/path") is None
    view.build()  # idempotent: a restarted container reuses its view


def test_command_lines_follow_entrypoint_and_cmd_rules(tmp_path: Path) -> None:
    image = HostImage(entrypoint=("/opt/app/bin/app",), cmd=("--help",), programs={"/opt/app/bin": tmp_path})
    assert container_argv(image, [], []) == ["/opt/app/bin/app", "--help"]
    assert container_argv(image, [], ["run", "node"]) == ["/opt/app/bin/app", "run", "node"]
    assert container_argv(image, ["tool"], []) == ["tool"]
    assert container_argv(image, ["tool"], ["-v"]) == ["tool", "-v"]
    (tmp_path / "app").write_text("#!/bin/sh\n")
    (tmp_path / "tool").write_text("#!/bin/sh\n")
    assert resolve_program(image, "/opt/app/bin/app", "/usr/bin") == tmp_path / "app"
    assert resolve_program(image, "tool", "/usr/bin:/opt/app/bin") == tmp_path / "tool"
    with pytest.raises(ProgramNotFound, match="executable file not found in \\$PATH"):
        resolve_program(image, "tool", "/usr/bin")
    with pytest.raises(ProgramNotFound, match="no such file"):
        resolve_program(image, "/usr/bin/env", "/usr/bin")
    with pytest.raises(ProgramNotFound, match="relative"):
        resolve_program(image, "bin/app", "/usr/bin")
    assert host_path_variable(image, "/opt/app/bin:/usr/bin") == f"{tmp_path}:/usr/bin"


POD: dict[str, Any] = {"metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"a": "b"}},
                       "spec": {"nodeName": "n1", "serviceAccountName": "sa"}}


def test_the_environment_is_built_in_the_kubelets_order() -> None:
    container = {
        "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}, {"secretRef": {"name": "s"}},
                    {"configMapRef": {"name": "absent", "optional": True}}],
        "env": [
            {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "GREETING", "value": "hi $(NAME) in $(CM_zone), $$(NAME), $(UNKNOWN)"},
            {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "s", "key": "password"}}},
            {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu", "divisor": "1m"}}},
            {"name": "MEMORY", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "ACCOUNT", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}},
            {"name": "MAYBE", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "nope", "optional": True}}},
            {"name": "KUBERNETES_SERVICE_PORT", "value": "override"},
        ],
        "resources": {"requests": {"cpu": "250m"}},
    }
    assert referenced_objects(container) == ({"cm", "absent"}, {"s"})
    env = container_env(
        POD, container, service_env={"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "6443"},
        pod_ip="127.1.128.9", host_ip="127.1.1.1",
        config_maps={"cm": {"data": {"zone": "eu", "bad key": "x"}}, "absent": None},
        secrets={"s": {"data": {"password": base64.b64encode(b"s3cret").decode(), "user": "YWRtaW4="}}},
        allocatable={"memory": "8Gi", "cpu": "4"})
    assert env["GREETING"] == "hi p in eu, $(NAME), $(UNKNOWN)"
    assert (env["CM_zone"], env["user"], env["PASSWORD"]) == ("eu", "admin", "s3cret")
    assert "CM_bad key" not in env
    assert (env["CPU"], env["MEMORY"]) == ("250", str(8 * 2**30))  # no limit: the node's allocatable
    assert (env["IP"], env["ACCOUNT"], env["KUBERNETES_SERVICE_HOST"]) == ("127.1.128.9", "sa", "127.0.0.1")
    assert env["KUBERNETES_SERVICE_PORT"] == "override" and "MAYBE" not in env
    assert expand("$(A)$(B)$$", {"A": "1"}) == "1$(B)$"


@pytest.mark.parametrize(("entry", "message"), [
    ({"configMapKeyRef": {"name": "cm", "key": "k"}}, 'configmap "cm" not found'),
    ({"secretKeyRef": {"name": "s", "key": "k"}}, "couldn't find key k in Secret ns/s"),
    ({"fieldRef": {"fieldPath": "status.phase"}}, "unsupported fieldRef fieldPath 'status.phase'"),
    ({"resourceFieldRef": {"resource": "limits.gpu"}}, "unsupported container resource"),
])
def test_missing_sources_are_named(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(EnvError, match=message):
        container_env(POD, {"env": [{"name": "X", "valueFrom": entry}]}, service_env={}, pod_ip="", host_ip="",
                      config_maps={"cm": None}, secrets={"s": {"data": {}}}, allocatable={})


def test_configmap_secret_and_projected_volume_files() -> None:
    config_maps = {"cm": {"data": {"a.conf": "A", "b.conf": "B"}, "binaryData": {"c.bin": "AAE="}}}
    secrets = {"tls": {"data": {"tls.crt": base64.b64encode(b"CERT").decode()}}}
    files = volume_files(POD, {"configMap": {"name": "cm", "defaultMode": 0o600}}, config_maps=config_maps,
                         secrets={}, tokens={})
    assert files == {"a.conf": (b"A", 0o600), "b.conf": (b"B", 0o600), "c.bin": (b"\x00\x01", 0o600)}
    files = volume_files(POD, {"secret": {"secretName": "tls", "items": [
        {"key": "tls.crt", "path": "certs/server.crt", "mode": 0o400}, {"key": "x", "path": "../escape"}]}},
        config_maps={}, secrets=secrets, tokens={})
    assert files == {"certs/server.crt": (b"CERT", 0o400)}  # unsafe paths never written
    projected = {"projected": {"sources": [
        {"serviceAccountToken": {"path": "token"}},
        {"configMap": {"name": "cm", "items": [{"key": "a.conf", "path": "conf/a"}]}},
        {"secret": {"name": "tls"}},
        {"downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}}]}}
    files = volume_files(POD, projected, config_maps=config_maps, secrets=secrets, tokens={0: "tok"})
    assert {path: content for path, (content, _) in files.items()} == {
        "token": b"tok", "conf/a": b"A", "tls.crt": b"CERT", "labels": b'a="b"'}
    with pytest.raises(VolumeError, match='configmap "gone" not found'):
        volume_files(POD, {"configMap": {"name": "gone"}}, config_maps={"gone": None}, secrets={}, tokens={})
    assert volume_files(POD, {"configMap": {"name": "gone", "optional": True}}, config_maps={"gone": None},
                        secrets={}, tokens={}) == {}
    with pytest.raises(VolumeError, match="configmap references non-existent config key: zz"):
        volume_files(POD, {"configMap": {"name": "cm", "items": [{"key": "zz", "path": "z"}]}},
                     config_maps=config_maps, secrets={}, tokens={})


def test_node_paths_map_to_each_nodes_directories(tmp_path: Path) -> None:
    fs = NodeFilesystem("node-2", tmp_path / "kubelet" / "node-2", tmp_path / "nodefs" / "node-2")
    assert fs.host_path("/var/lib/kubelet") == tmp_path / "kubelet" / "node-2"
    assert fs.host_path("/var/lib/kubelet/plugins/x/") == tmp_path / "kubelet" / "node-2" / "plugins" / "x"
    assert fs.host_path("/var/lib/kubelet-other") == tmp_path / "nodefs" / "node-2" / "var" / "lib" / "kubelet-other"
    assert fs.host_path("/var/lib/kubelet/../../../etc/passwd") == tmp_path / "nodefs" / "node-2" / "etc" / "passwd"
    with pytest.raises(ValueError, match="not an absolute path"):
        fs.host_path("var/lib")
    k0s = NodeFilesystem("n", tmp_path / "k", tmp_path / "o", kubelet_root="/var/lib/k0s/kubelet")
    assert k0s.host_path("/var/lib/k0s/kubelet/pods") == tmp_path / "k" / "pods"
    check_host_path_type(tmp_path / "new" / "dir", "/new/dir", "DirectoryOrCreate")
    assert (tmp_path / "new" / "dir").is_dir()
    check_host_path_type(tmp_path / "f", "/f", "FileOrCreate")
    with pytest.raises(HostPathError, match="hostPath type check failed: /f is not a directory"):
        check_host_path_type(tmp_path / "f", "/f", "Directory")
    with pytest.raises(HostPathError, match="/missing is not a directory"):
        check_host_path_type(tmp_path / "missing", "/missing", "Directory")
    with pytest.raises(HostPathError, match="is not a socket"):
        check_host_path_type(tmp_path / "f", "/f", "Socket")


def test_sidecar_flags_as_go_parses_them() -> None:
    assert parse_flags(["--csi-address=/csi/csi.sock", "-v", "5", "--leader-election", "--x", "--extra=a=b"]) == {
        "csi-address": "/csi/csi.sock", "v": "5", "leader-election": "true", "x": "true", "extra": "a=b"}


async def test_a_task_that_swallows_a_cancellation_is_cancelled_again_until_it_ends() -> None:
    """A readiness loop whose library shrugs off one cancellation (Python 3.11's wait_for) must not hold its
    container's shutdown: the runner cancels until the task is done."""
    from kubesim.cluster.runtime.supervisor import _cancel_until_done  # the runner's helper

    swallowed = 0

    async def stubborn() -> None:
        nonlocal swallowed
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                if swallowed >= 2:
                    raise
                swallowed += 1
                asyncio.current_task().uncancel()    # type: ignore[union-attr]

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    await asyncio.wait_for(_cancel_until_done(task), 10)
    assert task.cancelled() and swallowed == 2


async def test_a_stop_step_that_never_ends_is_abandoned_and_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """A component whose stop swallows its cancellation cannot hang a teardown: the step is abandoned after the
    bound and named in the error."""
    import kubesim.cluster.cluster as cluster_module

    monkeypatch.setattr(cluster_module, "STOP_STEP_SECONDS", 0.2)
    release = asyncio.Event()

    async def stubborn() -> None:
        while not release.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await release.wait()

    async def quick() -> None:
        return None

    stuck: list[str] = []
    await cluster_module._bounded("the stubborn kubelet", stubborn(), stuck)
    await cluster_module._bounded("a quick controller", quick(), stuck)
    assert stuck == ["the stubborn kubelet"]
    release.set()
