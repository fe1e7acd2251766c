"""The API client's own HTTP transport against small local servers: TLS with a cluster CA and a client certificate
(files and ``-data`` fields), a rotated token file, an exec credential plugin, and failures that name their cause."""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from operator_runtime.config import make_api
from operator_runtime.errors import ApiUnreachable, NotFound, Unauthorized
from operator_runtime.kinds import NAMESPACE

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def issue(directory: Path, name: str, *, ca: str | None, extension: str | None = None) -> None:
    """An EC key and a certificate for ``name`` (self-signed when ``ca`` is None), valid for one day."""
    key_args = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", f"{name}.key"]
    if ca is None:
        openssl("req", "-x509", *key_args, "-out", f"{name}.crt", "-subj", f"/CN={name}", "-days", "1", cwd=directory)
        return
    openssl("req", *key_args, "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=directory)
    sign = ["x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key", "-CAcreateserial",
            "-out", f"{name}.crt", "-days", "1"]
    if extension:
        (directory / f"{name}.ext").write_text(extension)
        sign += ["-extfile", f"{name}.ext"]
    openssl(*sign, cwd=directory)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("pki")
    issue(directory, "ca", ca=None)
    issue(directory, "other-ca", ca=None)
    issue(directory, "server", ca="ca", extension="subjectAltName=IP:127.0.0.1\n")
    issue(directory, "operator", ca="ca")
    return directory


async def serve(handler: Handler, ssl_context: ssl.SSLContext | None = None) -> tuple[str, web.AppRunner]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context).start()
    port = runner.addresses[0][1]
    return f"{'https' if ssl_context else 'http'}://127.0.0.1:{port}", runner


def kubeconfig(path: Path, server: str, *, cluster: dict[str, Any] | None = None,
               user: dict[str, Any] | None = None) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": server, **(cluster or {})}}],
        "users": [{"name": "u", "user": user or {}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    return path


def namespace(name: str) -> web.Response:
    return web.json_response({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


def unauthorized() -> web.Response:
    return web.json_response({"kind": "Status", "code": 401, "reason": "Unauthorized", "message": "bad token"},
                             status=401)


@pytest.fixture
async def tls_server(pki: Path) -> AsyncIterator[str]:
    """An HTTPS server that requires a client certificate from our CA and answers with the client's CN."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pki / "server.crt", pki / "server.key")
    context.load_verify_locations(pki / "ca.crt")
    context.verify_mode = ssl.CERT_REQUIRED

    async def handler(request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        subject = dict(item[0] for item in (peer or {}).get("subject", ()))
        return namespace(subject.get("commonName", "anonymous"))

    url, runner = await serve(handler, context)
    yield url
    await runner.cleanup()


async def test_tls_with_ca_and_client_certificate_files(pki: Path, tls_server: str) -> None:
    # relative paths are relative to the kubeconfig, as kubectl reads them
    config = kubeconfig(pki / "files.yaml", tls_server, cluster={"certificate-authority": "ca.crt"},
                        user={"client-certificate": "operator.crt", "client-key": "operator.key"})
    api = make_api(str(config))
    try:
        assert (await api.get(NAMESPACE, "any"))["metadata"]["name"] == "operator"
    finally:
        await api.close()


async def test_tls_with_inline_certificate_data(pki: Path, tls_server: str, tmp_path: Path) -> None:
    def data(name: str) -> str:
        return base64.b64encode((pki / name).read_bytes()).decode()

    config = kubeconfig(tmp_path / "data.yaml", tls_server, cluster={"certificate-authority-data": data("ca.crt")},
                        user={"client-certificate-data": data("operator.crt"),
                              "client-key-data": data("operator.key")})
    api = make_api(str(config))
    try:
        assert (await api.get(NAMESPACE, "any"))["metadata"]["name"] == "operator"
    finally:
        await api.close()


async def test_a_server_certificate_from_another_ca_is_refused(pki: Path, tls_server: str) -> None:
    config = kubeconfig(pki / "wrong.yaml", tls_server, cluster={"certificate-authority": "other-ca.crt"},
                        user={"client-certificate": "operator.crt", "client-key": "operator.key"})
    api = make_api(str(config))
    try:
        with pytest.raises(ApiUnreachable, match="certificate verify failed"):
            await api.get(NAMESPACE, "any")
    finally:
        await api.close()


async def test_a_rotated_token_file_is_read_again_after_a_401(tmp_path: Path) -> None:
    accepted = {"Bearer first"}
    seen: list[str | None] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        return namespace("ok") if request.headers.get("Authorization") in accepted else unauthorized()

    url, runner = await serve(handler)
    token = tmp_path / "token"
    token.write_text("first\n")
    api = make_api(str(kubeconfig(tmp_path / "kc", url, user={"tokenFile": str(token)})))
    try:
        await api.get(NAMESPACE, "a")
        token.write_text("second\n")  # kubelet rotated the projected token; the server accepts only the new one
        accepted = {"Bearer second"}
        await api.get(NAMESPACE, "b")
        accepted = set()
        with pytest.raises(Unauthorized):
            await api.get(NAMESPACE, "c")
    finally:
        await api.close()
        await runner.cleanup()
    assert seen[:3] == ["Bearer first", "Bearer first", "Bearer second"]
    assert len(seen) == 5  # the refused request was tried once more with a fresh read, then given up


async def test_exec_credential_plugin_runs_once_until_its_token_is_refused(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    token = tmp_path / "token"
    token.write_text("exec-1")
    plugin = ("import json, pathlib, sys; "
              f"pathlib.Path({str(runs)!r}).open('a').write('x'); "
              "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', 'kind': 'ExecCredential', "
              f"'status': {{'token': pathlib.Path({str(token)!r}).read_text()}}}}))")
    accepted = {"Bearer exec-1"}

    async def handler(request: web.Request) -> web.Response:
        if request.headers.get("Authorization") not in accepted:
            return unauthorized()
        if request.match_info["tail"].endswith("missing"):
            return web.json_response({"kind": "Status", "code": 404, "reason": "NotFound", "message": "gone"},
                                     status=404)
        return namespace("ok")

    url, runner = await serve(handler)
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                     "args": ["-c", plugin]}}
    api = make_api(str(kubeconfig(tmp_path / "kc", url, user=user)))
    try:
        await api.get(NAMESPACE, "a")
        with pytest.raises(NotFound):
            await api.get(NAMESPACE, "missing")
        assert runs.read_text() == "x"
        token.write_text("exec-2")
        accepted = {"Bearer exec-2"}
        await api.get(NAMESPACE, "b")
        assert runs.read_text() == "xx"
    finally:
        await api.close()
        await runner.cleanup()


async def test_an_unreachable_server_is_a_named_failure(tmp_path: Path) -> None:
    api = make_api(str(kubeconfig(tmp_path / "kc", "http://127.0.0.1:9")))
    try:
        with pytest.raises(ApiUnreachable, match=r"127\.0\.0\.1:9"):
            await api.get(NAMESPACE, "a")
    finally:
        await api.close()


async def test_watch_lines_longer_than_the_read_buffer_arrive_whole(tmp_path: Path) -> None:
    big = {"type": "ADDED", "object": {"apiVersion": "v1", "kind": "Namespace",
                                       "metadata": {"name": "big", "annotations": {"blob": "x" * 300_000}}}}

    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        payload = json.dumps(big).encode() + b"\n"
        for start in range(0, len(payload), 7_000):  # many small chunks, as a proxy might send them
            await response.write(payload[start:start + 7_000])
        await response.write(b'{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}}\n')
        await response.write_eof()
        return response

    url, runner = await serve(handler)
    api = make_api(str(kubeconfig(tmp_path / "kc", url)))
    try:
        events = [event async for event in api.watch(NAMESPACE, resource_version="1")]
    finally:
        await api.close()
        await runner.cleanup()
    assert [kind for kind, _ in events] == ["ADDED", "BOOKMARK"]
    assert events[0][1] == big["object"]
