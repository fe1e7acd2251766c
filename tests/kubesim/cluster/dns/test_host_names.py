"""Cluster names from the host: DNS queries (UDP and TCP) to the cluster's DNS server answer Services, headless
Services, StatefulSet-style Pod names and Pod IP names; unknown cluster names are NXDOMAIN and other names are
refused (never forwarded); curl through the SOCKS5 proxy reaches a Service by name, and the proxy dials nothing
outside 127.0.0.0/8."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator

import pytest
from dnslib import QTYPE, RCODE, DNSRecord
from traffichelpers import FAST_RESTARTS, NS, container, pod, ready_pod, service, short_state_dir

from kubesim.cluster.dns.hostnames import ClusterDns, SocksProxy
from kubesim.sim import KubeSim


@pytest.fixture
async def cluster() -> AsyncIterator[KubeSim]:
    state = short_state_dir()
    try:
        async with KubeSim(nodes=1, state_dir=state, host_names=True, **FAST_RESTARTS) as sim:
            app = container("web", args=["netexec", "--http-port=8080", "--udp-port=-1"], ports=[("http", 8080)])
            await sim.api.create("pods", pod("web-0", app, labels={"app": "web"}, hostname="web-0",
                                             subdomain="peers"), NS)
            await sim.api.create("services", service("web", {"app": "web"}, [{"port": 80, "targetPort": 8080}]), NS)
            await sim.api.create("services", service("peers", {"app": "web"}, [{"port": 8080}], clusterIP="None"),
                                 NS)
            await ready_pod(sim.api, "web-0", within=30)
            yield sim
    finally:
        shutil.rmtree(state, ignore_errors=True)


async def ask(sim: KubeSim, name: str, qtype: str = "A", tcp: bool = False) -> DNSRecord:
    assert sim.dns_address is not None
    host, port = sim.dns_address
    query = DNSRecord.question(name, qtype)
    raw = await asyncio.to_thread(query.send, host, port, tcp=tcp, timeout=10)
    return DNSRecord.parse(raw)


def addresses(reply: DNSRecord) -> list[str]:
    return [str(rr.rdata) for rr in reply.rr if rr.rtype == QTYPE.A]


async def test_dns_answers_the_names_cluster_dns_publishes(cluster: KubeSim) -> None:
    web = await cluster.api.get("services", "web", NS)
    pod_ip = (await cluster.api.get("pods", "web-0", NS))["status"]["podIP"]
    assert cluster.dns_address is not None and cluster.dns_address[0] == cluster.address_block.dns_ip
    assert addresses(await ask(cluster, "web.default.svc.cluster.local")) == [web["spec"]["clusterIP"]]
    assert addresses(await ask(cluster, "web.default.svc.cluster.local", tcp=True)) == [web["spec"]["clusterIP"]]
    assert addresses(await ask(cluster, "peers.default.svc.cluster.local")) == [pod_ip]
    assert addresses(await ask(cluster, "web-0.peers.default.svc.cluster.local")) == [pod_ip]
    assert addresses(await ask(cluster, f"{pod_ip.replace('.', '-')}.default.pod.cluster.local")) == [pod_ip]
    known_v6 = await ask(cluster, "web.default.svc.cluster.local", "AAAA")
    assert (known_v6.header.rcode, known_v6.rr) == (RCODE.NOERROR, [])
    assert (await ask(cluster, "nothing.default.svc.cluster.local")).header.rcode == RCODE.NXDOMAIN
    assert (await ask(cluster, "example.com")).header.rcode == RCODE.REFUSED


async def curl(*args: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec("curl", "-sS", "--max-time", "30", *args,
                                                   stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 60)
    return process.returncode or 0, (out or err).decode()


async def test_curl_reaches_a_service_by_name_through_the_proxy(cluster: KubeSim) -> None:
    assert cluster.proxy_address is not None
    proxy = "socks5h://{}:{}".format(*cluster.proxy_address)
    assert await curl("--proxy", proxy, "http://web.default.svc.cluster.local/hostname") == (0, "web-0")
    assert await curl("--proxy", proxy, "http://web-0.peers.default.svc.cluster.local:8080/hostname") == (0, "web-0")
    code, said = await curl("--proxy", proxy, "http://nothing.default.svc.cluster.local/")
    assert code == 97 and said.rstrip().endswith("(4)"), said       # SOCKS5 reply 4: host unreachable
    code, said = await curl("--proxy", proxy, "http://192.0.2.1/")     # never dialled: refused by the proxy
    assert code == 97 and said.rstrip().endswith("(2)"), said       # 2: not allowed by ruleset


def test_dns_answers_without_a_cluster() -> None:
    table = {"db.shop.svc.cluster.local": ["127.9.16.5"], "node-1": ["127.9.1.1"], "outside.svc.cluster.local": []}
    dns = ClusterDns(table.get)
    reply = DNSRecord.parse(dns.answer(bytes(DNSRecord.question("DB.shop.svc.cluster.local.").pack())) or b"")
    assert addresses(reply) == ["127.9.16.5"] and reply.header.aa == 1
    assert addresses(DNSRecord.parse(dns.answer(bytes(DNSRecord.question("node-1").pack())) or b"")) == ["127.9.1.1"]
    assert dns.answer(b"\x00\x01garbage") is None
    assert dns.answer(b"") is None


async def test_the_proxy_budget_and_handshake_limits() -> None:
    proxy = SocksProxy({"a.svc.cluster.local": ["10.1.2.3"]}.get, max_connections=1)
    host, port = await proxy.start("127.0.0.1", 0)
    try:
        reader, writer = await asyncio.open_connection(host, port)     # holds the only slot, says nothing
        await asyncio.sleep(0.1)
        second_reader, second_writer = await asyncio.open_connection(host, port)
        assert await asyncio.wait_for(second_reader.read(), 10) == b""  # over budget: closed at once
        second_writer.close()
        writer.write(b"\x05\x01\x00\x05\x01\x00\x03\x13a.svc.cluster.local\x00\x50")
        assert await asyncio.wait_for(reader.read(), 10) == b"\x05\x00" + bytes([5, 2, 0, 1, 0, 0, 0, 0, 0, 0])
        writer.close()
    finally:
        await proxy.stop()
