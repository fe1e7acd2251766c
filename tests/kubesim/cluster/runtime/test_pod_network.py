"""A network namespace per Pod (``HostImage(network="pod")``, ``runtime.podnet``): two Pods whose program binds the
same fixed ports on every address (as upstream Skupper's router and kube-adaptor do) run side by side; inside each,
``localhost`` is the Pod's own; each is reached on its Pod IP from outside (probes, clients), on its declared ports
and on those it listens on undeclared, and reaches the API server, Services, load balancers and other Pods at their
cluster addresses."""

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
from traffichelpers import NS, container, eventually, pod, ready_pod, refuses, service

from kubesim.cluster.runtime.podnet import listening_ports, outbound_rules, pod_ports
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
    opened = {}
    class Public(Quiet):
        def do_GET(self):
            if self.path.startswith("/fetch/"):  # a connection from inside the Pod to http://<rest>/
                try:
                    self.answer(urllib.request.urlopen("http://%s/" % self.path[7:], timeout=5).read().decode())
                except OSError as error:
                    self.answer("failed: %s" % error)
                return
            if self.path.startswith("/listen/"):  # a port the spec does not declare, opened and closed
                port = int(self.path[8:])
                opened[port] = http.server.HTTPServer(("0.0.0.0", port), Local)
                threading.Thread(target=opened[port].serve_forever, daemon=True).start()
                self.answer("listening")
                return
            if self.path.startswith("/close/"):
                server = opened.pop(int(self.path[7:]))
                server.shutdown()
                server.server_close()
                self.answer("closed")
                return
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


async def fetch_inside(pod_ip: str, address: str) -> str:
    """What the Pod's program got dialling ``http://<address>/`` from inside its namespace."""
    status, body = await http_get(pod_ip, 8080, f"/fetch/{address}")
    assert status == 200, body
    return body


@needs_root
async def test_a_pod_in_its_namespace_reaches_services_load_balancers_and_other_pods(sim: KubeSim) -> None:
    """Outbound: Service ClusterIPs (made before and after the Pod started), a LoadBalancer ingress address and
    another Pod's IP, dialled from inside a Pod's namespace, answer as on the host."""
    await sim.api.create("serviceaccounts", {"apiVersion": "v1", "kind": "ServiceAccount",
                                             "metadata": {"name": "serve", "namespace": NS}}, NS)
    await sim.api.create("pods", serve_pod("backend"), NS)
    before = await sim.api.create("services", service("before", {"app": "backend"}, [{"port": 80, "targetPort": 8080}]),
                                  NS)
    await sim.api.create("pods", serve_pod("client"), NS)
    backend = await ready_pod(sim.api, "backend")
    client = await ready_pod(sim.api, "client")
    client_ip, backend_ip = client["status"]["podIP"], backend["status"]["podIP"]

    def from_backend(body: str) -> bool:
        return body.startswith("{") and json.loads(body)["name"] == "backend"

    assert from_backend(await fetch_inside(client_ip, f"{backend_ip}:8080"))  # another Pod's IP
    address = f"{before['spec']['clusterIP']}:80"
    assert from_backend(await eventually(lambda: _answer(client_ip, address, from_backend), 20, "the Service"))
    # a Service made after the Pod started, a LoadBalancer: reached as soon as kube-proxy serves it on the host
    after = await sim.api.create("services", service("after", {"app": "backend"}, [{"port": 81, "targetPort": 8080}],
                                                     type="LoadBalancer"), NS)
    address = f"{after['spec']['clusterIP']}:81"
    assert from_backend(await eventually(lambda: _answer(client_ip, address, from_backend), 20, "the new Service"))

    async def ingress_ip() -> str:
        found = await sim.api.get("services", "after", NS)
        ingress = ((found.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
        return str(ingress[0].get("ip", "")) if ingress else ""

    address = f"{await eventually(ingress_ip, 20, 'a LoadBalancer ingress IP')}:81"
    assert from_backend(await eventually(lambda: _answer(client_ip, address, from_backend), 20, "the LoadBalancer"))
    # the Pod's own localhost stays its own (not relayed out): its 127.0.0.1:5672
    assert await fetch_inside(client_ip, "127.0.0.1:5672") == "client"


async def _answer(pod_ip: str, address: str, good: Any) -> str:
    body = await fetch_inside(pod_ip, address)
    return body if good(body) else ""


@needs_root
async def test_a_port_the_spec_does_not_declare_is_relayed_while_it_listens(sim: KubeSim) -> None:
    await sim.api.create("serviceaccounts", {"apiVersion": "v1", "kind": "ServiceAccount",
                                             "metadata": {"name": "serve", "namespace": NS}}, NS)
    await sim.api.create("pods", serve_pod("router"), NS)
    pod_ip = (await ready_pod(sim.api, "router"))["status"]["podIP"]
    assert await refuses(pod_ip, 9999)
    assert await refuses(pod_ip, 5672)  # listened on the Pod's localhost only: never relayed
    assert (await http_get(pod_ip, 8080, "/listen/9999"))[1] == "listening"

    await eventually(lambda: _answers_on(pod_ip, 9999), 10, "the undeclared port relayed from the Pod IP")
    assert (await http_get(pod_ip, 8080, "/close/9999"))[1] == "closed"
    await eventually(lambda: refuses(pod_ip, 9999), 10, "the relay of the closed port to go")
    assert await refuses(pod_ip, 5672)
    # the relays end with the Pod
    assert (await http_get(pod_ip, 8080, "/listen/9998"))[1] == "listening"
    await eventually(lambda: _answers_on(pod_ip, 9998), 10, "the second undeclared port")
    await sim.api.delete("pods", "router", NS)
    await eventually(lambda: refuses(pod_ip, 9998), 30, "the Pod's relays to close with it")
    assert await refuses(pod_ip, 8080)


async def _answers_on(pod_ip: str, port: int) -> bool:
    return await http_get(pod_ip, port, "/") == (200, "router")


def test_listening_ports_from_the_namespaces_tcp_tables() -> None:
    header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    tcp = header + "".join([
        "   0: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1\n",  # *:8080
        "   1: 0100007F:1628 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2\n",  # lo:5672
        "   2: 0580057F:270F 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 3\n",  # pod:9999
        "   3: 0580057F:D431 0100007F:1628 01 00000000:00000000 00:00000000 00000000     0        0 4\n",  # a client
    ])
    tcp6 = header + (
        "   0: 00000000000000000000000000000000:2382 00000000000000000000000000000000:0000 0A 00000000:00000000 "
        "00:00000000 00000000     0        0 5\n")  # [::]:9090
    assert listening_ports([tcp, tcp6], "127.5.128.5") == {8080, 9999, 9090}
    assert listening_ports([tcp], "127.5.128.6") == {8080}


def test_the_namespaces_rules_send_the_cluster_and_the_api_server_out_and_keep_its_own_ip() -> None:
    rules = outbound_rules("127.5.128.5", 40000, ("127.0.0.7", 6443)).splitlines()
    assert rules == ["*nat", "-A OUTPUT -p tcp -d 127.5.128.5/32 -j RETURN",
                     "-A OUTPUT -p tcp -d 127.5.0.0/16 -j REDIRECT --to-ports 40000",
                     "-A OUTPUT -p tcp -d 127.0.0.7/32 --dport 6443 -j REDIRECT --to-ports 40000", "COMMIT"]
    assert len(outbound_rules("127.5.128.5", 40000, ("127.5.0.1", 6443)).splitlines()) == 4  # inside the block
