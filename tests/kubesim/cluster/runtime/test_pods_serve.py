"""Pods that serve: the runtime registry starts built-in servers on the Pod IP, and the Pod status follows them."""

from __future__ import annotations

import asyncio

from clusterhelpers import wait_for
from traffichelpers import (
    NS,
    container,
    eventually,
    pod,
    ready_pod,
    refuses,
    serve_hostname,
)

from kubesim.cluster.runtime.status import SIMULATED_CONDITION
from kubesim.sim import KubeSim
from kubesim.testing.traffic import http_get, who_answers


async def _udp(host: str, port: int, message: bytes) -> bytes:
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[bytes] = loop.create_future()

    class Client(asyncio.DatagramProtocol):
        def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
            if not answer.done():
                answer.set_result(data)

    transport, _ = await loop.create_datagram_endpoint(Client, remote_addr=(host, port))
    try:
        transport.sendto(message)
        return await asyncio.wait_for(answer, 5)
    finally:
        transport.close()


def _condition(p: dict, kind: str) -> dict | None:
    return next((c for c in p["status"].get("conditions") or [] if c["type"] == kind), None)


async def test_serve_hostname_answers_with_the_pod_name_on_its_ip(sim: KubeSim) -> None:
    http = container("http", args=["serve-hostname", "--port", "9376"], ports=[9376])
    tcp = container("tcp", args=["serve-hostname", "--http=false", "--tcp", "--udp", "--port=9377"], ports=[9377])
    await sim.api.create("pods", pod("hello", http, tcp), NS)
    running = await ready_pod(sim.api, "hello")
    ip = running["status"]["podIP"]
    assert ip.startswith(f"127.{sim.address_block.index}.128.")
    assert await who_answers(ip, 9376) == "hello"
    reader, writer = await asyncio.open_connection(ip, 9377)
    assert await reader.read() == b"hello"  # --tcp: the hostname, then the server closes
    writer.close()
    assert await _udp(ip, 9377, b"anything") == b"hello"
    assert _condition(running, SIMULATED_CONDITION) is None
    statuses = {s["name"]: s for s in running["status"]["containerStatuses"]}
    assert statuses["http"]["ready"] and statuses["http"]["restartCount"] == 0
    assert "running" in statuses["tcp"]["state"]


async def test_netexec_endpoints_and_udp(sim: KubeSim) -> None:
    netexec = container(args=["netexec", "--http-port=8080", "--udp-port=8081"], ports=[8080, ("udp", 8081, "UDP")])
    await sim.api.create("pods", pod("netexec", netexec), NS)
    ip = (await ready_pod(sim.api, "netexec"))["status"]["podIP"]
    assert await who_answers(ip, 8080, path="/hostname") == "netexec"
    assert await http_get(ip, 8080, "/echo?msg=hi%20there") == (200, "hi there")
    client = sim.address_block.client_ip(7)
    status, peer = await http_get(ip, 8080, "/clientip", source=client)
    assert status == 200 and peer.startswith(f"{client}:")
    assert (await http_get(ip, 8080, "/healthz"))[0] == 200
    assert (await http_get(ip, 8080, "/nothing"))[0] == 404
    assert (await http_get(ip, 8080, "/"))[1].startswith("NOW: ")
    assert await _udp(ip, 8081, b"hostname") == b"netexec"
    assert await _udp(ip, 8081, b"echo ping") == b"ping"


async def test_nginx_serves_its_volumes_and_the_pod_name(sim: KubeSim) -> None:
    web = container(
        "web",
        image="nginxinc/nginx-unprivileged:1.27",
        ports=[("http", 8080)],
        volumeMounts=[{"name": "podinfo", "mountPath": "/usr/share/nginx/html/info"}],
    )
    podinfo = {"downwardAPI": {"items": [
        {"path": "pod-name", "fieldRef": {"fieldPath": "metadata.name"}},
        {"path": "../escape", "fieldRef": {"fieldPath": "metadata.name"}},
    ]}}
    await sim.api.create("pods", pod("web-0", web, volumes=[{"name": "podinfo", **podinfo}]), NS)
    ip = (await ready_pod(sim.api, "web-0"))["status"]["podIP"]
    assert await http_get(ip, 8080, "/info/pod-name") == (200, "web-0")  # upstream's smoke check, literally
    assert await who_answers(ip, 8080) == "web-0"  # no index.html: the Pod's name instead of a welcome page
    assert (await http_get(ip, 8080, "/info/../../../../etc/passwd"))[0] == 404
    assert (await http_get(ip, 8080, "/escape"))[0] == 404
    assert await refuses(ip, 80)  # it listens on the declared port only


async def test_unknown_image_waits_and_says_so(sim: KubeSim) -> None:
    await sim.api.create("pods", pod("mystery", container("main", image="example.com/broker:1.0", ports=[9092])), NS)
    waiting = await wait_for(sim.api, "pods", "mystery", NS, lambda p: bool(p) and _condition(p, SIMULATED_CONDITION)
                             is not None)
    assert waiting is not None
    condition = _condition(waiting, SIMULATED_CONDITION)
    assert condition is not None and condition["status"] == "True" and condition["reason"] == "NoRuntimeHandler"
    assert "main (example.com/broker:1.0)" in condition["message"]
    assert "never run" in condition["message"]
    assert waiting["status"]["phase"] == "Pending"
    [status] = waiting["status"]["containerStatuses"]
    assert status["state"]["waiting"]["reason"] == "ImagePullBackOff" and not status["ready"]


async def test_without_a_probe_a_container_is_ready_once_started(sim: KubeSim) -> None:
    # As the kubelet has it: no readinessProbe, Ready when the container started, whatever ports it declares. A
    # busybox that sleeps serves nothing on its declared port, and is Ready all the same.
    sleeper = container("sleeper", image="busybox:1.36", command=["sleep", "3600"], ports=[8080])
    await sim.api.create("pods", pod("sleeper", sleeper), NS)
    ready = await ready_pod(sim.api, "sleeper")
    assert _condition(ready, "Ready")["status"] == "True"
    [status] = ready["status"]["containerStatuses"]
    assert status["ready"] and status["started"] and "running" in status["state"]
    assert await refuses(ready["status"]["podIP"], 8080)  # Ready, though nothing listens there

    # a built-in server is Ready once it started, and it started once it listens: the first connection is answered
    served = container(args=["serve-hostname"], ports=[9376])
    await sim.api.create("pods", pod("served", served), NS)
    first = await ready_pod(sim.api, "served")
    assert await who_answers(first["status"]["podIP"], 9376) == "served"


async def test_readiness_probes_follow_the_server(sim: KubeSim) -> None:
    web = container(
        "web",
        image="nginx:1.27",
        ports=[80],
        volumeMounts=[{"name": "html", "mountPath": "/usr/share/nginx/html"}],
        readinessProbe={"httpGet": {"path": "/ready", "port": 80}, "periodSeconds": 1, "failureThreshold": 1},
    )
    await sim.api.create("pods", pod("probed", web, volumes=[{"name": "html", "emptyDir": {}}]), NS)
    running = await wait_for(sim.api, "pods", "probed", NS, lambda p: bool(p) and bool(p["status"].get("podIP")))
    assert running is not None
    html = sim.cluster.kubelet_dir(running["spec"]["nodeName"]) / "pods" / running["metadata"]["uid"] / "volumes"
    html = html / "kubernetes.io~empty-dir" / "html"
    await eventually(lambda: _async(html.is_dir()), what="emptyDir")
    (html / "ready").write_text("ok")  # as `touch /usr/share/nginx/html/ready` inside the container would
    await ready_pod(sim.api, "probed")
    (html / "ready").unlink()
    not_ready = await wait_for(
        sim.api, "pods", "probed", NS, lambda p: bool(p) and _condition(p, "Ready")["status"] == "False"
    )
    assert not_ready is not None
    events, _ = await sim.api.list("events", NS)
    assert any(
        e["reason"] == "Unhealthy" and "HTTP probe failed with statuscode: 404" in e["message"] for e in events
    )

    tcp = container(ports=[9376], args=["serve-hostname"], readinessProbe={"tcpSocket": {"port": 9999}, "periodSeconds": 1})
    await sim.api.create("pods", pod("tcp-probed", tcp), NS)
    message = await eventually(lambda: _unhealthy(sim, "tcp-probed"), what="Unhealthy event for tcp-probed")
    assert "9999" in message and "connection refused" in message
    current = await sim.api.get("pods", "tcp-probed", NS)
    assert _condition(current, "Ready")["status"] == "False"

    # an HTTP probe of a port nothing listens on: the kubelet's words, not the HTTP client's
    http = container(ports=[9376], args=["serve-hostname"],
                     readinessProbe={"httpGet": {"path": "/healthz", "port": 9998}, "periodSeconds": 1})
    await sim.api.create("pods", pod("http-probed", http), NS)
    message = await eventually(lambda: _unhealthy(sim, "http-probed"), what="Unhealthy event for http-probed")
    ip = (await sim.api.get("pods", "http-probed", NS))["status"]["podIP"]
    assert message == (f'Readiness probe failed: Get "http://{ip}:9998/healthz": dial tcp {ip}:9998: connect: '
                       f"connection refused")


async def _unhealthy(sim: KubeSim, name: str) -> str | None:
    events, _ = await sim.api.list("events", NS)
    return next(
        (e["message"] for e in events if e["reason"] == "Unhealthy" and e["involvedObject"]["name"] == name), None
    )


async def _async(value: object) -> object:
    return value


async def test_pod_deletion_and_cluster_stop_stop_the_servers(sim: KubeSim) -> None:
    await sim.api.create("pods", pod("short", serve_hostname()), NS)
    await sim.api.create("pods", pod("long", serve_hostname()), NS)
    short_ip = (await ready_pod(sim.api, "short"))["status"]["podIP"]
    long_ip = (await ready_pod(sim.api, "long"))["status"]["podIP"]
    assert await who_answers(short_ip, 9376) == "short"
    await sim.api.delete("pods", "short", NS)
    await wait_for(sim.api, "pods", "short", NS, lambda p: p is None)
    assert await refuses(short_ip, 9376)
    assert await who_answers(long_ip, 9376) == "long"
    await sim.cluster.stop()
    assert await refuses(long_ip, 9376)


async def test_agnhost_usage_errors_exit_non_zero(sim: KubeSim) -> None:
    never = container(args=["no-such-command"])
    await sim.api.create("pods", pod("bad", never, restartPolicy="Never"), NS)
    failed = await wait_for(sim.api, "pods", "bad", NS, lambda p: bool(p) and p["status"].get("phase") == "Failed")
    assert failed is not None
    terminated = failed["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 1 and terminated["reason"] == "Error"
    log = sim.cluster.kubelet_dir(failed["spec"]["nodeName"]) / "pods" / failed["metadata"]["uid"] / "logs" / "app.log"
    assert 'unknown command "no-such-command" for "agnhost"' in log.read_text()
