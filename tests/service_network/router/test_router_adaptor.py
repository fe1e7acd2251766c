"""The adaptor as a user runs it: a configuration file watched for changes, metrics per Listener and target, and
the ``service-network router`` command (signals, clear errors, no stray processes)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from router_support import (
    alive,
    document,
    free_port,
    loopback,
    readyz,
    refused,
    router_pid,
    target_connectors,
    wait_until,
    who,
)

from kubesim.testing.patience import patience
from service_network.router.rust_adaptor import RustAdaptor
from service_network.router.sources import ConfigSnapshot, FileConfigSource


def _write(path: Path, doc: dict) -> None:
    """Write as editors and kubelet do: a new file renamed over the old one."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(doc))
    tmp.replace(path)


def _scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


async def _scrape_async(port: int) -> dict[str, float]:
    return await asyncio.to_thread(_scrape, port)


async def test_file_changes_are_applied_and_metrics_count_connections_and_bytes(state_dir, start_backend, tmp_path):
    host = loopback()
    port = free_port(host)
    config_file = tmp_path / "router.json"
    listener = {"name": "backend", "routingKey": "backend", "host": host, "port": port}
    _write(config_file, document(listeners=[listener]))
    adaptor = RustAdaptor(FileConfigSource(config_file), state_dir, metrics_address=("127.0.0.1", 0))
    stop = asyncio.Event()
    task = asyncio.create_task(adaptor.run(stop))
    try:
        await wait_until(lambda: adaptor.metrics_port, what="adaptor started")
        assert await refused(host, port)

        pod = await start_backend("pod-a")
        t0 = time.monotonic()
        _write(config_file, document(listeners=[listener], connectors=target_connectors("backend", [pod])))
        name, reader, writer = await wait_until(lambda: _try_who(host, port), within=2.0, what="target applied")
        assert name == "pod-a" and time.monotonic() - t0 < patience(2.0)     # stretched on a busy machine

        writer.write(b"x" * 1000)
        assert await asyncio.wait_for(reader.readexactly(1000), 5) == b"x" * 1000
        labels = '{listener="backend",routing_key="backend"}'
        target = '{connector="c-pod-a",target="pod-a",routing_key="backend"}'

        async def open_counted() -> dict[str, float] | None:   # the apply may still be finishing its bookkeeping
            m = await _scrape_async(adaptor.metrics_port)
            return m if m.get(f"service_network_connector_connections_open{target}") == 1 else None
        m = await wait_until(open_counted, what="open connection counted")
        assert m[f"service_network_listener_connections_open{labels}"] == 1
        assert m[f"service_network_listener_accepting{labels}"] == 1
        writer.close()

        async def counted() -> dict[str, float] | None:
            m = await _scrape_async(adaptor.metrics_port)
            done = m[f"service_network_listener_connections_open{labels}"] == 0 and \
                m[f"service_network_listener_bytes_received_total{labels}"] >= 1000
            return m if done else None
        m = await wait_until(counted, what="closed connection counted")
        assert m[f"service_network_listener_connections_total{labels}"] == 1
        assert m[f"service_network_listener_bytes_received_total{labels}"] == 1000
        assert m[f"service_network_listener_bytes_sent_total{labels}"] == 1000 + len("pod-a\n")
        assert m[f"service_network_connector_connections_total{target}"] == 1
        assert m[f"service_network_connector_bytes_sent_total{target}"] == 1000
        assert m[f"service_network_connector_bytes_received_total{target}"] == 1000 + len("pod-a\n")
        assert m["service_network_router_up"] == 1

        # an invalid document is reported and the running configuration stays
        adaptor.applied.clear()
        config_file.write_text('{"version": 1, "site": {"id": "x", "name": "y"}, "listeners": [{"name": 1}]}')
        await asyncio.wait_for(adaptor.applied.wait(), 5)
        assert adaptor.config_errors == 1
        assert (await who(host, port))[0] == "pod-a"
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
    assert await refused(host, port)


async def _try_who(host: str, port: int):
    try:
        return await who(host, port)
    except OSError:
        return None


async def _run_cli(*args: str, env: dict[str, str] | None = None) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "service_network.cli", "router", *args, env={**os.environ, **(env or {})},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)


async def test_cli_without_the_router_binary_says_how_to_build_it(tmp_path, state_dir):
    config_file = tmp_path / "router.json"
    _write(config_file, document())
    proc = await _run_cli("--config", str(config_file), "--state-dir", str(state_dir),
                          env={"ROUTER_BIN": str(tmp_path / "missing" / "service-network-router")})
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 3
    assert "service-network-router not found: build it with cargo build --release --locked" in err.decode()
    assert "Traceback" not in err.decode()


async def test_cli_invalid_config_exits_with_field_paths(tmp_path, state_dir):
    config_file = tmp_path / "router.json"
    _write(config_file, document(listeners=[{"name": "l", "routingKey": "k", "host": "0.0.0.0 ssl", "port": 99999}]))
    proc = await _run_cli("--config", str(config_file), "--state-dir", str(state_dir))
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2
    text = err.decode()
    assert "listeners[0].port" in text and "Traceback" not in text


async def test_cli_runs_until_sigterm_and_leaves_no_process(tmp_path, state_dir, start_backend):
    host = loopback()
    port = free_port(host)
    pod = await start_backend("pod")
    config_file = tmp_path / "router.json"
    _write(config_file, document(listeners=[{"name": "l", "routingKey": "k", "host": host, "port": port}],
                                 connectors=target_connectors("k", [pod])))
    proc = await _run_cli("--config", str(config_file), "--state-dir", str(state_dir))
    try:
        name = await wait_until(lambda: _name_or_none(host, port), within=15, what="router serving")
        assert name == "pod"
        router = router_pid(state_dir)
        assert router is not None
        # SIGHUP re-reads the file (here unchanged): still serving
        proc.send_signal(signal.SIGHUP)
        assert (await who(host, port))[0] == "pod"
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 30)
        assert proc.returncode == 0
        await wait_until(lambda: not alive(router), what="the router process gone")
        assert await refused(host, port)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        if proc.returncode not in (0, None):
            print((await proc.stderr.read()).decode()[-3000:])


async def _name_or_none(host: str, port: int) -> str | None:
    try:
        return (await who(host, port))[0] or None
    except OSError:
        return None


class _LateSource:
    """A configuration source whose first document arrives only when the test says so."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.release = asyncio.Event()

    async def snapshots(self):  # type: ignore[no-untyped-def]
        await self.release.wait()
        yield ConfigSnapshot(self.text, "late source")
        await asyncio.Event().wait()

    def refresh(self) -> None:
        pass

    def watch_paths(self, paths) -> None:  # type: ignore[no-untyped-def]
        pass


async def test_a_cancelled_run_starts_nothing_afterwards(state_dir) -> None:
    """Cancelling ``run`` (not setting ``stop``) while it waits for its first document: when the document comes
    later, no router process is started behind the caller's back."""
    host = loopback()
    source = _LateSource(json.dumps(document(
        listeners=[{"name": "l", "routingKey": "k", "host": host, "port": free_port(host)}],
        connectors=[{"name": "c", "routingKey": "k", "port": 9, "targets": [{"host": "127.0.0.1"}]}])))
    adaptor = RustAdaptor(source, state_dir)
    run = asyncio.create_task(adaptor.run(asyncio.Event()))
    await asyncio.sleep(0.2)
    run.cancel()
    done, _ = await asyncio.wait({run}, timeout=5)
    assert done and run.cancelled()
    source.release.set()
    await asyncio.sleep(1.0)
    assert adaptor.plane.pid is None, "the router process started after run() was cancelled"
    assert not [t for t in asyncio.all_tasks() if t.get_name() in ("router-start", "config-follow")]


async def _stop(adaptor_run: asyncio.Task[None], stop: asyncio.Event) -> None:
    stop.set()
    await asyncio.wait_for(adaptor_run, 15)


async def test_a_restarted_adaptor_serves_its_last_document_before_the_source_answers(
        state_dir: Path, start_backend: Any) -> None:
    """``warm_start`` (a router Pod's container restarted, its state directory kept): the router listens again and
    ``/readyz`` says ready with the document it ran before, while the configuration source has not answered (the
    API server is slow); the source's document is applied when it comes, and then kept for the next start."""
    host = loopback()
    ports = [free_port(host), free_port(host)]
    pod = await start_backend("pod-a")
    listeners = [{"name": f"l{i}", "routingKey": "backend", "host": host, "port": port}
                 for i, port in enumerate(ports)]
    before = document(listeners=listeners[:1], connectors=target_connectors("backend", [pod]))

    first_source = _LateSource(json.dumps(before))
    first_source.release.set()
    first = RustAdaptor(first_source, state_dir, warm_start=True)
    stop = asyncio.Event()
    run = asyncio.create_task(first.run(stop))
    assert (await wait_until(lambda: _try_who(host, ports[0]), what="the first adaptor serving"))[0] == "pod-a"
    await _stop(run, stop)
    assert await refused(host, ports[0])

    late = _LateSource(json.dumps(document(listeners=listeners, connectors=target_connectors("backend", [pod]))))
    second = RustAdaptor(late, state_dir, metrics_address=("127.0.0.1", 0), warm_start=True)
    stop = asyncio.Event()
    run = asyncio.create_task(second.run(stop))
    try:
        name, _, writer = await wait_until(lambda: _try_who(host, ports[0]), what="the stored document served")
        writer.close()
        assert name == "pod-a"
        await wait_until(lambda: second.metrics_port, what="readiness served")
        assert await readyz(second) == (200, "ready\n")
        assert second.document is None and not late.release.is_set()   # the source has not answered
        assert await refused(host, ports[1])

        late.release.set()
        name, _, writer = await wait_until(lambda: _try_who(host, ports[1]), what="the source's document applied")
        writer.close()
        assert name == "pod-a"
        stored = json.loads((state_dir / "document.json").read_text())
        assert [x["name"] for x in stored["document"]["listeners"]] == ["l0", "l1"]
    finally:
        await _stop(run, stop)


async def test_without_warm_start_nothing_runs_before_the_source_answers(state_dir: Path, start_backend: Any) -> None:
    """The file command's adaptor (no ``warm_start``) keeps no document and starts its router from the source only:
    a configuration file edited while it was stopped is never preceded by the old one."""
    host = loopback()
    port = free_port(host)
    pod = await start_backend("pod-a")
    doc = document(listeners=[{"name": "l", "routingKey": "backend", "host": host, "port": port}],
                   connectors=target_connectors("backend", [pod]))
    source = _LateSource(json.dumps(doc))
    source.release.set()
    adaptor = RustAdaptor(source, state_dir)
    stop = asyncio.Event()
    run = asyncio.create_task(adaptor.run(stop))
    assert (await wait_until(lambda: _try_who(host, port), what="serving"))[0] == "pod-a"
    await _stop(run, stop)
    assert not (state_dir / "document.json").exists()

    again = RustAdaptor(_LateSource(json.dumps(doc)), state_dir)
    stop = asyncio.Event()
    run = asyncio.create_task(again.run(stop))
    try:
        await asyncio.sleep(1.0)
        assert again.plane.pid is None and await refused(host, port)
    finally:
        await _stop(run, stop)
