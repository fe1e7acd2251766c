"""A router Pod's restarted container (``early.py``): its router runs the document it ran before, and ``/readyz``
says ready, from a process that has not imported what the adaptor needs later (pydantic, aiohttp, lightkube,
prometheus_client, cryptography): those imports were most of the container's start, and the kubelet probes
readiness at the start and then every second."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from router_support import document, free_port, loopback, target_connectors, wait_until, who

from service_network.router.rust_adaptor import RustAdaptor
from service_network.router.sources import ConfigSnapshot

HEAVY = ("pydantic", "aiohttp", "lightkube", "prometheus_client", "cryptography", "service_network.router.config")

#: the container's first moments, as ``service-network run router`` has them: ``early.start_early``, then its own
#: ``/readyz`` asked over HTTP as the kubelet does; the router is kept running until stdin closes
EARLY = f"""
import asyncio, json, sys
from pathlib import Path
from service_network.router.early import start_early

async def main():
    state, host, port = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    early = await start_early(state, host, None, (host, port))
    answer = b""
    if early is not None:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(b"GET /readyz HTTP/1.1\\r\\nHost: probe\\r\\nUser-Agent: kube-probe/1.31\\r\\n\\r\\n")
        await writer.drain()
        answer = await reader.read()
    print(json.dumps({{"started": early is not None, "answer": answer.decode(),
                      "imported": sorted(m for m in {HEAVY!r} if m in sys.modules)}}), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    if early is not None:
        early.abort()

asyncio.run(main())
"""


class _Source:
    def __init__(self, text: str) -> None:
        self.text = text

    async def snapshots(self):  # type: ignore[no-untyped-def]
        yield ConfigSnapshot(self.text, "test")
        await asyncio.Event().wait()

    def refresh(self) -> None:
        pass

    def watch_paths(self, paths: Any) -> None:
        pass


async def _early(state_dir: Path, host: str, port: int) -> tuple[asyncio.subprocess.Process, dict[str, Any]]:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", EARLY, str(state_dir), host, str(port),
                                                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 60)
    return proc, json.loads(line)


async def _end(proc: asyncio.subprocess.Process) -> None:
    assert proc.stdin is not None
    proc.stdin.close()
    await asyncio.wait_for(proc.wait(), 30)


async def test_a_restarted_container_serves_and_is_ready_before_the_adaptors_imports(
        state_dir: Path, start_backend: Any) -> None:
    host = loopback()
    listener_port, http_port = free_port(host), free_port(host)
    pod = await start_backend("pod-a")
    doc = document(listeners=[{"name": "l", "routingKey": "k", "host": "", "port": listener_port}],
                   connectors=target_connectors("k", [pod]))
    # the container before its crash: the Pod's adaptor, bound to the Pod IP, ran the document
    adaptor = RustAdaptor(_Source(json.dumps(doc)), state_dir, bind_host=host, warm_start=True)
    stop = asyncio.Event()
    run = asyncio.create_task(adaptor.run(stop))
    assert (await wait_until(lambda: _who(host, listener_port), what="the router serving"))[0] == "pod-a"
    await wait_until(lambda: adaptor.status, what="its network status kept")
    stop.set()
    await asyncio.wait_for(run, 15)

    proc, seen = await _early(state_dir, host, http_port)
    try:
        assert seen["started"] and seen["imported"] == []
        assert seen["answer"].startswith("HTTP/1.1 200 ") and seen["answer"].endswith("\r\n\r\nready\n")
        name, _, writer = await who(host, listener_port)
        writer.close()
        assert name == "pod-a"
    finally:
        await _end(proc)


async def test_without_a_stored_document_nothing_starts_early(state_dir: Path) -> None:
    """A new Pod (an empty state directory), or a document kept for another Pod IP: the adaptor starts as on a
    first start, from its ConfigMap."""
    host = loopback()
    proc, seen = await _early(state_dir, host, free_port(host))
    await _end(proc)
    assert seen == {"started": False, "answer": "", "imported": []}
    (state_dir / "document.json").write_text(json.dumps({"bindHost": "127.9.9.9", "document": document()}))
    proc, seen = await _early(state_dir, host, free_port(host))
    await _end(proc)
    assert seen["started"] is False


async def _who(host: str, port: int) -> tuple[str, Any, Any] | None:
    try:
        name, reader, writer = await who(host, port)
    except OSError:
        return None
    writer.close()
    return name, reader, writer
