"""A network namespace per Pod (``HostImage(network="pod")``, ``runtime.podnet``): two Pods whose program binds the
same fixed ports on every address (as upstream Skupper's router and kube-adaptor do) run side by side; inside each,
``localhost`` is the Pod's own; each is reached on its Pod IP from outside (probes, clients) and reaches the API
server at the address the kubelet gives it."""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from imagehelpers import script_image_cluster
from traffichelpers import NS, container, pod, ready_pod

from kubesim.cluster.runtime.podnet import pod_ports
from kubesim.sim import KubeSim
from kubesim.testing.traffic import http_get

SERVE = textwrap.dedent('''\
    #!/usr/bin/python3
    import http.server, json, os, ssl, threading, urllib.error, urllib.request
    NAME = os.environ["HOSTNAME"]
    ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
    class Quiet(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass
        def answer(self, body):
            data = body.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
    class Local(Quiet):
        def do_GET(self):
            self.answer(NAME)
    def api_status():
        url = "https://%s:%s/api/v1/namespaces/default/pods" % (
            os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"])
        request = urllib.request.Request(url, headers={"Authorization": "Bearer " + open(ACCOUNT + "/token").read()})
        context = ssl.create_default_context(cafile=ACCOUNT + "/ca.crt")
        context.check_hostname = False
        try:
            return urllib.request.urlopen(request, context=context, timeout=5).status
        except urllib.error.HTTPError as error:
            return error.code
        except OSError as error:
            return str(error)
    class Public(Quiet):
        def do_GET(self):
            local = urllib.request.urlopen("http://localhost:5672/", timeout=5).read().decode()
            self.answer(json.dumps({"name": NAME, "localhost": local, "api": api_status()}))
    local = http.server.HTTPServer(("127.0.0.1", 5672), Local)
    threading.Thread(target=local.serve_forever, daemon=True).start()
    http.server.HTTPServer(("0.0.0.0", 8080), Public).serve_forever()
''')

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="network and mount namespaces need root (CI runs as root)")


@pytest_asyncio.fixture
async def sim(tmp_path: Path) -> AsyncIterator[KubeSim]:
    async with script_image_cluster(tmp_path, "example.test/fixed-ports", "serve", SERVE, network="pod") as running:
        yield running


def serve_pod(name: str) -> dict[str, Any]:
    return pod(name, container("serve", "example.test/fixed-ports:1", ports=[("http", 8080)],
                               readinessProbe={"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1}),
               serviceAccountName="serve")


@needs_root
async def test_two_pods_bind_the_same_fixed_ports_and_each_has_its_own_localhost(sim: KubeSim) -> None:
    await sim.api.create("serviceaccounts", {"apiVersion": "v1", "kind": "ServiceAccount",
                                             "metadata": {"name": "serve", "namespace": NS}}, NS)
    for name in ("first", "second"):
        await sim.api.create("pods", serve_pod(name), NS)
    for name in ("first", "second"):
        running = await ready_pod(sim.api, name)  # its readiness probe reached it through its Pod IP
        status, body = await http_get(running["status"]["podIP"], 8080, "/")
        assert status == 200, body
        answer = json.loads(body)
        assert answer["name"] == name and answer["localhost"] == name  # its own localhost:5672
        assert answer["api"] == 403  # the API server reached through the relay, the Pod's ServiceAccount denied


def test_the_ports_relayed_into_a_pod() -> None:
    spec = {"spec": {"containers": [
        {"ports": [{"containerPort": 5671}, {"containerPort": 9090, "protocol": "TCP"},
                   {"containerPort": 53, "protocol": "UDP"}],
         "readinessProbe": {"httpGet": {"port": 9090}}},
        {"ports": [{"containerPort": 9000}], "readinessProbe": {"httpGet": {"port": 9191}},
         "livenessProbe": {"tcpSocket": {"port": "named"}}}]}}
    assert pod_ports(spec) == [5671, 9090, 9000, 9191]
