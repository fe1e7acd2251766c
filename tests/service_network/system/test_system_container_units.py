"""The pure parts of container system sites (issue 44), without an engine: the engine's endpoint as upstream picks
it, the router container's create request (upstream's name, labels, host network, restart policy, users), the
platform a verb uses and upstream's refusal of another one, the log framing of the engine's API, and the systemd
unit and scripts written for a container site."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from service_network.system.container import RouterContainer, extra_mounts, router_image, router_spec
from service_network.system.engine import Engine, EngineUnavailable, NotFound, default_endpoint, demultiplex
from service_network.system.platform import (
    PlatformMismatch,
    check_same,
    chosen,
    read_platform,
    write_platform,
)
from service_network.system.site import SystemSite


def spec(platform: str = "podman", uid: int = 0) -> RouterContainer:
    runtime = Path("/data/ns/west/runtime")
    return RouterContainer(namespace="west", site_id="6e79", image="localhost/listener-operator:1", platform=platform,
                           config=runtime / "router" / "router.json", state_dir=runtime / "router" / "state",
                           mounts=(runtime, Path("/data/ns/west/input/certs")), uid=uid, gid=1000)


def test_the_endpoint_is_upstreams() -> None:
    assert default_endpoint("podman", {}, uid=0) == "unix:///run/podman/podman.sock"
    assert default_endpoint("podman", {"XDG_RUNTIME_DIR": "/run/user/1000"}, uid=1000) == \
        "unix:///run/user/1000/podman/podman.sock"
    assert default_endpoint("docker", {}, uid=1000) == "unix:///run/docker.sock"
    assert default_endpoint("docker", {"CONTAINER_ENDPOINT": "unix:///x.sock"}, uid=0) == "unix:///x.sock"


def test_the_router_container_is_named_and_labelled_as_upstreams() -> None:
    body = router_spec(spec())
    assert body["Labels"] == {"application": "skupper-v2", "skupper.io/v2-component": "router",
                              "skupper.io/site-id": "6e79"}
    assert body["HostConfig"]["NetworkMode"] == "host"
    assert body["HostConfig"]["RestartPolicy"] == {"Name": "always"}
    assert body["HostConfig"]["Binds"] == ["/data/ns/west/runtime:/data/ns/west/runtime:z",
                                           "/data/ns/west/input/certs:/data/ns/west/input/certs:z"]
    assert body["Cmd"] == ["router", "--config", "/data/ns/west/runtime/router/router.json", "--state-dir",
                           "/data/ns/west/runtime/router/state"]
    assert spec().name == "west-skupper-router"
    assert "UsernsMode" not in body["HostConfig"] and body["User"] == "0:1000"
    rootless = router_spec(spec(uid=1000))
    assert rootless["HostConfig"]["UsernsMode"] == "keep-id" and rootless["User"] == "1000:1000"
    docker = RouterContainer(**{**spec("docker", uid=1000).__dict__, "docker_gid": 999})
    assert router_spec(docker)["User"] == "0:999" and "UsernsMode" not in router_spec(docker)["HostConfig"]


def test_the_image_is_upstreams_variable_or_this_versions() -> None:
    assert router_image({"SKUPPER_ROUTER_IMAGE": "quay.io/x/router:2"}) == "quay.io/x/router:2"
    assert router_image({}).startswith("localhost/listener-operator:")


def test_a_long_state_path_mounts_the_temporary_directory_too(tmp_path: Path) -> None:
    assert extra_mounts(tmp_path / "runtime" / "router" / "state" / "router.sock", tmp_path / "runtime") == ()
    assert extra_mounts(Path("/tmp/service-network-router-ab.sock"), tmp_path / "runtime") == (Path("/tmp"),)


def test_the_platform_asked_for_recorded_or_default(tmp_path: Path) -> None:
    assert chosen("", tmp_path, {}) == "linux"
    assert chosen("", tmp_path, {"SKUPPER_PLATFORM": "docker"}) == "docker"
    assert chosen("kubernetes", tmp_path, {}) == "linux"
    write_platform(tmp_path, "podman")
    assert (tmp_path / "internal" / "platform.yaml").read_text() == "platform: podman\n"
    assert read_platform(tmp_path) == "podman" and chosen("", tmp_path, {}) == "podman"
    assert chosen("docker", tmp_path, {}) == "docker"
    with pytest.raises(ValueError, match='platform "bsd" is not one of podman, docker, linux'):
        chosen("bsd", tmp_path, {})
    check_same("podman", tmp_path, "west")
    check_same("", tmp_path, "west")
    with pytest.raises(PlatformMismatch, match='existing namespace uses "podman" platform and it cannot change to '
                                               '"linux"'):
        check_same("linux", tmp_path, "west")


def test_log_frames_are_joined() -> None:
    framed = b"\x01\0\0\0\0\0\0\x06hello\n" + b"\x02\0\0\0\0\0\0\x04oops"
    assert demultiplex(framed) == b"hello\noops"
    assert demultiplex(b"plain text (a terminal's log)") == b"plain text (a terminal's log)"


def test_a_missing_socket_names_it(tmp_path: Path) -> None:
    with pytest.raises(EngineUnavailable, match=f"endpoint - unix://{tmp_path}/none.sock: no such socket "
                                                r"\(is podman's API service running\?"):
        Engine(f"unix://{tmp_path}/none.sock", "podman").version()
    with pytest.raises(ValueError, match="is not a Unix socket"):
        Engine("tcp://127.0.0.1:2375", "docker")


def test_an_engine_refusal_is_typed(tmp_path: Path) -> None:
    """A 404 is ``NotFound`` (inspect: None), another refusal ``EngineError`` with the engine's message."""
    path = tmp_path / "e.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(4)
    answers = [b'{"message": "no such container"}', b'{"message": "no such container"}']

    def serve() -> None:
        for body in answers:
            connection, _ = server.accept()
            connection.recv(65536)
            connection.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: "
                               + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
            connection.close()
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    engine = Engine(f"unix://{path}", "docker")
    assert engine.inspect("gone") is None
    with pytest.raises(NotFound, match=r"no such container \(HTTP 404\)"):
        engine.start("gone")
    thread.join(5)
    server.close()


def test_a_container_sites_unit_and_scripts_are_upstreams(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    site = SystemSite("west", "podman")
    site.ensure()
    site_id = site.site_id()
    unit = site.systemd_unit()
    scripts = site.base / "internal" / "scripts"
    assert f"ExecStart=/bin/sh {scripts}/start.sh\nExecStop=/bin/sh {scripts}/stop.sh\n" in unit
    assert "RemainAfterExit=yes" in unit and "WantedBy=default.target" in unit
    site.write_scripts()
    start = (scripts / "start.sh").read_text()
    assert (f"podman container ls --all --filter label=application=skupper-v2 --filter label=skupper.io/site-id="
            f"{site_id} --format '{{{{.Names}}}}'") in start and 'podman start "$name"' in start
    assert 'podman stop -t 10 "$name"' in (scripts / "stop.sh").read_text()
