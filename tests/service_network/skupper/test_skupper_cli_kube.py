"""The command line's own API client (``service_network.skupper.kube``): the kubeconfig read as kubectl reads it
(the file's search, the context, relative paths, token files, exec plugins, kubectl's words for what is missing),
and its HTTP/1.1 (answers with a length, chunked, or up to the end of the connection; a kept-alive connection the
server closed is opened again once)."""

from __future__ import annotations

import json
import socket
import stat
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from operator_runtime.errors import ApiUnreachable
from service_network.skupper.kube import BlockingTransport, Credentials, Endpoint, KubeconfigError, load
from service_network.skupper.main import drive


def kubeconfig(path: Path, user: dict[str, object], *, contexts: int = 1, namespace: str | None = "team") -> Path:
    context: dict[str, object] = {"cluster": "c", "user": "u"}
    if namespace:
        context["namespace"] = namespace
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "first",
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": n, "context": context} for n in ("first", "second")[:contexts]]}))
    return path


def test_the_kubeconfig_is_found_and_read_as_kubectl_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(KubeconfigError) as missing:
        load(None, None)
    assert str(missing.value) == ("invalid configuration: no configuration has been provided, try setting "
                                  "KUBERNETES_MASTER environment variable")
    with pytest.raises(KubeconfigError) as missing:
        load(str(tmp_path / "nope"), None)
    assert str(missing.value) == f"stat {tmp_path}/nope: no such file or directory"
    (tmp_path / "token").write_text("secret-token\n")
    path = kubeconfig(tmp_path / "config", {"tokenFile": "token"}, contexts=2)
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'missing'}:{path}")     # the first file that exists
    endpoint = load(None, None)
    assert (endpoint.server, endpoint.namespace) == ("http://127.0.0.1:1", "team")
    assert endpoint.credentials.header() == "Bearer secret-token"          # relative to the kubeconfig
    assert load(None, "second").namespace == "team"
    with pytest.raises(KubeconfigError) as missing:
        load(None, "third")
    assert str(missing.value) == 'context "third" does not exist'
    assert load(str(kubeconfig(tmp_path / "plain", {"token": "t"}, namespace=None)), None).namespace == "default"
    basic = load(str(kubeconfig(tmp_path / "basic", {"username": "a", "password": "b"})), None)
    assert basic.credentials.header() == "Basic YTpi"


def test_an_exec_plugin_gives_the_token(tmp_path: Path) -> None:
    plugin = tmp_path / "plugin"
    plugin.write_text(f"#!{sys.executable}\nimport json, os\n"
                      "assert json.loads(os.environ['KUBERNETES_EXEC_INFO'])['kind'] == 'ExecCredential'\n"
                      "print(json.dumps({'status': {'token': 'from-' + os.environ['WHO']}}))\n")
    plugin.chmod(plugin.stat().st_mode | stat.S_IEXEC)
    path = kubeconfig(tmp_path / "config", {"exec": {"apiVersion": "client.authentication.k8s.io/v1",
                                                     "command": str(plugin), "env": [{"name": "WHO", "value": "me"}]}})
    assert load(str(path), None).credentials.header() == "Bearer from-me"


class Server:
    """An HTTP server on loopback that answers each request with the next of ``answers`` (raw bytes); an answer
    ``None`` closes the connection without answering."""

    def __init__(self, answers: list[bytes | None]) -> None:
        self.answers = answers
        self.requests: list[bytes] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        while self.answers:
            connection, _ = self.listener.accept()
            with connection:
                while self.answers:
                    request = b""
                    while b"\r\n\r\n" not in request:
                        chunk = connection.recv(65536)
                        if not chunk:
                            break
                        request += chunk
                    if not request:
                        break
                    self.requests.append(request)
                    answer = self.answers.pop(0)
                    if answer is None:
                        break
                    connection.sendall(answer)
                    if b"Connection: close" in answer:
                        break


@pytest.fixture
def server_factory() -> Iterator[list[Server]]:
    servers: list[Server] = []
    yield servers
    for server in servers:
        server.listener.close()


def transport(server: Server) -> BlockingTransport:
    return BlockingTransport(Endpoint(f"http://127.0.0.1:{server.port}", "default", Credentials("Bearer t")))


def test_answers_with_a_length_chunked_or_until_the_connection_ends(server_factory: list[Server]) -> None:
    body = json.dumps({"items": []}).encode()
    server = Server([
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body),
        b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;x=y\r\n world\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nto the end"])
    server_factory.append(server)
    client = transport(server)
    assert drive(client.request("GET", "/api/v1/pods", params={"labelSelector": "a=b"})) == (200, body)
    assert drive(client.request("POST", "/x", body=b"{}")) == (404, b"hello world")
    assert drive(client.request("GET", "/y")) == (200, b"to the end")
    first, second, _ = server.requests
    assert first.startswith(b"GET /api/v1/pods?labelSelector=a%3Db HTTP/1.1\r\nHost: 127.0.0.1:")
    assert b"\r\nAuthorization: Bearer t\r\n" in first
    assert b"\r\nContent-Type: application/json\r\n" in second and second.endswith(b"Content-Length: 2\r\n\r\n{}")
    drive(client.close())


def test_a_kept_alive_connection_the_server_closed_is_opened_again_and_a_refusal_is_said_as_kubectl(server_factory: list[Server]) -> None:
    server = Server([b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", None,
                     b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nagain"])
    server_factory.append(server)
    client = transport(server)
    assert drive(client.request("GET", "/a")) == (200, b"ok")
    assert drive(client.request("GET", "/b")) == (200, b"again")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    refused = BlockingTransport(Endpoint(f"http://127.0.0.1:{port}", "default", Credentials()))
    with pytest.raises(ApiUnreachable) as unreachable:
        drive(refused.request("GET", "/c"))
    assert str(unreachable.value) == (f'Get "http://127.0.0.1:{port}/c": dial tcp 127.0.0.1:{port}: connect: '
                                      "connection refused")          # client-go's words


KUBECTL_CONFIG = """apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: LS0tLS1CRUdJTg==
    server: https://127.0.0.1:6443
  name: kind-kind
contexts:
- context:
    cluster: kind-kind
    namespace: team-a
    user: kind-kind
  name: kind-kind
current-context: kind-kind
kind: Config
preferences: {}
users:
- name: kind-kind
  user:
    client-certificate-data: LS0tLS1CRUdJTg==
    client-key-data: LS0tLS1CRUdJTg==
"""
HAND_WRITTEN = """# written by hand
apiVersion: v1
kind: "Config"
current-context: 'it''s'
clusters:
  - name: c
    cluster:
      server: "https://example.com:443"
      insecure-skip-tls-verify: true
      proxy-url:
users:
  - name: u
    user:
      exec:
        apiVersion: client.authentication.k8s.io/v1
        command: /usr/bin/aws-iam
        args:
          - eks
          - --cluster-name
          - x-1
        env:
        - name: AWS_PROFILE
          value: prod
contexts:
- name: "it's"
  context: {}
"""


@pytest.mark.parametrize("text", [
    KUBECTL_CONFIG, HAND_WRITTEN,
    *(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "current-context": "kubesim",
                      "clusters": [{"name": "kubesim", "cluster": {"server": "https://127.0.0.1:43211",
                                                                    "certificate-authority-data": "LS0tLS1C"}}],
                      "users": [{"name": "kubesim", "user": {"token": "Zx9kLmN0-abc_DEF", "username": "a b"}}],
                      "contexts": [{"name": "kubesim", "context": {"cluster": "kubesim", "user": "kubesim"}}],
                      "preferences": {}}, sort_keys=sort, indent=indent)
      for sort in (True, False) for indent in (2, 4)),
])
def test_block_yaml_reads_kubeconfigs_as_pyyaml_does(text: str) -> None:
    from service_network.skupper import blockyaml
    assert blockyaml.read(text) == yaml.safe_load(text)


@pytest.mark.parametrize("text", [
    "token: 3f2a\n", "a: 12:30\n", "a: 1.5\n", "a: 2001-12-14\n", "a: yes\n", "a: Off\n", "a: .inf\n", "a: -.5\n",
    "a: &x 1\nb: *x\n", "a: !!str 1\n", "a: |\n  x\n", "a: >\n  x\n", "a: [1, 2]\n", "a: {b: 1}\n",
    "a: b # comment\n", 'a: "x\\ny"\n', "a: b\n  c\n", "a:\n\t- b\n", "---\na: 1\n---\nb: 2\n", "a:b\n",
    "- - a\n", "  a: 1\n", "",
])
def test_block_yaml_leaves_anything_else_to_pyyaml(text: str) -> None:
    from service_network.skupper import blockyaml
    assert blockyaml.read(text) is None
