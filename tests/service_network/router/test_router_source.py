"""``FileConfigSource``: the current document first, then one snapshot per change (in-place write, rename over,
Kubernetes-style ``..data`` symlink swap, a watched TLS file), ``refresh()`` on demand, nothing otherwise."""

from __future__ import annotations

import asyncio
import os

from service_network.router.sources import FileConfigSource


class Snapshots:
    """Consumes the source in a task (as the adaptor does) into a queue the test reads with deadlines."""

    def __init__(self, source: FileConfigSource) -> None:
        self.queue: asyncio.Queue = asyncio.Queue()
        self.task = asyncio.create_task(self._consume(source))

    async def _consume(self, source: FileConfigSource) -> None:
        async for snap in source.snapshots():
            self.queue.put_nowait(snap)

    async def aclose(self) -> None:
        self.task.cancel()


async def _next(it: Snapshots, within: float = 5.0):
    return await asyncio.wait_for(it.queue.get(), within)


async def _quiet(it: Snapshots, within: float = 0.3) -> bool:
    """No snapshot arrives within ``within`` seconds (nothing relevant changed)."""
    await asyncio.sleep(within)
    return it.queue.empty()


async def test_file_source_follows_changes(tmp_path):
    path = tmp_path / "router.json"
    path.write_text("one")
    source = FileConfigSource(path, settle=0.02)
    it = Snapshots(source)
    try:
        assert (await _next(it)).text == "one"
        path.write_text("two")                      # in place
        assert (await _next(it)).text == "two"
        tmp = tmp_path / ".router.json.new"
        tmp.write_text("three")
        tmp.replace(path)                           # rename over
        assert (await _next(it)).text == "three"
        (tmp_path / "unrelated").write_text("x")    # other files in the directory do not count
        assert await _quiet(it)
        source.refresh()
        assert (await _next(it)).text == "three"
        path.unlink()
        snap = await _next(it)
        assert snap.text is None and snap.problem == "does not exist"
    finally:
        await it.aclose()


async def test_kubelet_style_symlink_swap_and_tls_files(tmp_path):
    mount = tmp_path / "mount"
    mount.mkdir()
    (mount / "..v1").mkdir()
    (mount / "..v1" / "router.json").write_text("v1")
    os.symlink("..v1", mount / "..data")
    os.symlink("..data/router.json", mount / "router.json")
    tls = tmp_path / "tls"
    tls.mkdir()
    source = FileConfigSource(mount / "router.json", settle=0.02)
    it = Snapshots(source)
    try:
        assert (await _next(it)).text == "v1"
        (mount / "..v2").mkdir()
        (mount / "..v2" / "router.json").write_text("v2")
        os.symlink("..v2", mount / "..data_tmp")
        os.replace(mount / "..data_tmp", mount / "..data")
        assert (await _next(it)).text == "v2"
        source.watch_paths([tls / "tls.crt"])
        assert await _quiet(it)
        (tls / "tls.crt").write_text("cert")
        assert (await _next(it)).text == "v2"
    finally:
        await it.aclose()
