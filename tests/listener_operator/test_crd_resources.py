"""Our custom kinds and the API client construction, against a tiny plain-http API server with a bearer token."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from lightkube.config.kubeconfig import SingleConfig

from listener_operator.constants import mount_label_key
from listener_operator.kinds import LISTENER, LISTENER_CLASS, POD_LISTENERS
from operator_runtime.config import ConfigError, KubeConfig, load_config, make_api

TOKEN = "s3cret-token"


@pytest.fixture
async def api_server(tmp_path: Path) -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    seen: list[dict[str, Any]] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append({"path": request.path, "auth": request.headers.get("Authorization"), "method": request.method})
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return web.json_response({"kind": "Status", "code": 401}, status=401)
        if request.path == "/apis/listeners.stackable.tech/v1alpha1/namespaces/ns1/listeners/web":
            return web.json_response({
                "apiVersion": "listeners.stackable.tech/v1alpha1", "kind": "Listener",
                "metadata": {"name": "web", "namespace": "ns1"}, "spec": {"className": "cluster-internal"}})
        if request.path == "/apis/listeners.stackable.tech/v1alpha1/listenerclasses/cluster-internal":
            return web.json_response({
                "apiVersion": "listeners.stackable.tech/v1alpha1", "kind": "ListenerClass",
                "metadata": {"name": "cluster-internal"}, "spec": {"serviceType": "ClusterIP"}})
        return web.json_response({"kind": "Status", "code": 404}, status=404)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        await runner.cleanup()


def current(config: KubeConfig) -> SingleConfig:
    single = config.get()
    assert single is not None
    return single


def write_kubeconfig(path: Path, server: str, token: str = TOKEN) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "sim",
        "clusters": [{"name": "sim", "cluster": {"server": server}}],
        "users": [{"name": "sim", "user": {"token": token}}],
        "contexts": [{"name": "sim", "context": {"cluster": "sim", "user": "sim", "namespace": "default"}}],
    }))
    return path


async def test_client_reads_custom_resources_over_plain_http_with_bearer_token(
        api_server: tuple[str, list[dict[str, Any]]], tmp_path: Path) -> None:
    url, seen = api_server
    client = make_api(str(write_kubeconfig(tmp_path / "kubeconfig", url)))
    try:
        listener = await client.get(LISTENER, "web", namespace="ns1")
        klass = await client.get(LISTENER_CLASS, "cluster-internal")
    finally:
        await client.close()
    assert listener["spec"]["className"] == "cluster-internal"
    assert klass["spec"]["serviceType"] == "ClusterIP"
    assert [s["auth"] for s in seen] == [f"Bearer {TOKEN}"] * 2


def test_resource_paths_and_scopes() -> None:
    assert LISTENER.api_version.split("/")[0] == "listeners.stackable.tech"
    assert LISTENER.plural == "listeners" and LISTENER.namespaced
    assert LISTENER_CLASS.plural == "listenerclasses" and not LISTENER_CLASS.namespaced
    assert POD_LISTENERS.plural == "podlisteners" and POD_LISTENERS.namespaced
    assert LISTENER.path("ns1", "web", "status") == (
        "/apis/listeners.stackable.tech/v1alpha1/namespaces/ns1/listeners/web/status")


def test_kubeconfig_env_wins_over_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "kc", "http://127.0.0.1:1")
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'missing'}:{path}")
    assert current(load_config()).cluster.server == "http://127.0.0.1:1"


def test_explicit_path_wins_over_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "env", "http://127.0.0.1:1")))
    explicit = write_kubeconfig(tmp_path / "explicit", "http://127.0.0.1:2")
    assert current(load_config(str(explicit))).cluster.server == "http://127.0.0.1:2"


def test_in_cluster_config_when_no_kubeconfig(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("tok")
    (sa / "namespace").write_text("ops")
    (sa / "ca.crt").write_text("")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    config = current(load_config(service_account_dir=sa))
    assert config.cluster.server == "https://10.0.0.1:443"
    assert config.namespace == "ops"
    # KUBERNETES_SERVICE_ACCOUNT_DIR moves the directory (a process outside a container, as kubesim runs Pods)
    monkeypatch.setenv("KUBERNETES_SERVICE_ACCOUNT_DIR", str(sa))
    (sa / "token").write_text("moved")
    config = current(load_config())
    assert config.user.token_file == str(sa / "token") and config.namespace == "ops"
    monkeypatch.setenv("KUBERNETES_SERVICE_ACCOUNT_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(ConfigError, match="no Kubernetes configuration found"):
        load_config()


def test_missing_configuration_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(ConfigError, match="no Kubernetes configuration found"):
        load_config(service_account_dir=tmp_path / "nosa")


def test_mount_label_key() -> None:
    key = mount_label_key("0b1c2d3e-aaaa-bbbb-cccc-1234567890ab")
    assert key == "listener.stackable.tech/mnt.0b1c2d3eaaaabbbbcccc1234567890ab"
    assert len(key.split("/", 1)[1]) == 36
    with pytest.raises(ValueError):
        mount_label_key("../etc")
    with pytest.raises(ValueError):
        mount_label_key("")
