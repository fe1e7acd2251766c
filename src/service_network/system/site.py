"""A system site on this host (I/O): its files, its router process, token redemption, statuses.

Layout (as upstream's system sites), under ``$XDG_DATA_HOME/skupper/namespaces/<namespace>/`` (default
``~/.local/share``):

- ``input/resources/*.yaml``: the user's resources (Site, Listener, Connector, Link, AccessToken);
- ``input/certs/<name>/{ca.crt,tls.crt,tls.key}``: TLS credentials the user provides (Listener/Connector
  ``tlsCredentials``, Link credentials made elsewhere);
- ``runtime/``: what the site made: ``site-id``, ``certs/<name>/`` (credentials from redeemed tokens),
  ``resources/links/`` (their Links), ``resources/status/<Kind>-<name>.yaml`` (each resource with its status),
  ``router/router.json`` (the router document; the router reloads it when it changes), ``router/state/`` (the
  router's own state), ``router.pid`` and ``logs/router.log``.

The router runs as a user process (``service-network router --config ...``), started in its own session by
``skupper system start`` (and ``setup``), stopped with SIGTERM by ``stop``; no systemd unit is written here.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import io
import itertools
import json
import os
import shlex
import shutil
import signal
import socket
import sys
import tarfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from operator_runtime.objects import JsonDict, mapping, meta

from ..crd.models import AccessTokenSpec
from ..router.dataplane import control_socket_path
from ..router.names import CONTROL_SNI, KEY_SNI_WILDCARD
from ..site import pki
from ..site.access import endpoint_hosts
from ..site.grants import AnswerProblem, link_objects
from ..site.grants import parse_answer as parse_grant_answer
from ..site.redeem import post_redemption
from ..site.site_keys import ANNOTATION_SITE_BINDING
from .compose import AccessPlan, SystemPlan, compose_system, router_access
from .container import (
    APP_LABEL,
    SITE_ID_LABEL,
    ContainerRouter,
    RouterContainer,
    docker_group_id,
    extra_mounts,
    router_image,
)
from .container import STOP_SECONDS as CONTAINER_STOP_SECONDS
from .engine import runtime_dir
from .names import SECRET, TLS_FILES
from .platform import CONTAINER_PLATFORMS, read_platform
from .platform import DEFAULT as DEFAULT_PLATFORM
from .process import spawn
from .resources import (
    DNS1123_SUBDOMAIN,
    MAX_FILE,
    ResourceFile,
    load_resources,
    one_of_each,
    secret_files,
    split_documents,
)
from .site_key import BINDING_FILE, SystemSiteKey
from .status import (
    Key,
    RouterAnswer,
    RouterProcess,
    SiteView,
    TokenRecord,
    observe,
    parse_answer,
    probe_targets,
)
from .watch import Watcher, input_fingerprint, record_loaded, watch_command

__all__ = ["BundleRefused", "Loaded", "RouterUnreachable", "SystemSite", "data_home", "namespaces"]

#: the bundle's installer: copies what it carries into the site's input directory and sets the site up
INSTALL_SCRIPT = """#!/bin/sh
# Installs the skupper system site @NAMESPACE@ on this host: copies resources/ and certs/ into
# ${XDG_DATA_HOME:-$HOME/.local/share}/skupper/namespaces/@NAMESPACE@/input/ and runs "skupper system setup" on the
# platform of the site it was made of (@PLATFORM@), or SKUPPER_PLATFORM.
# Needs the skupper command (pip install listener-operator), or SKUPPER=/path/to/skupper.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
base="${XDG_DATA_HOME:-$HOME/.local/share}/skupper/namespaces/@NAMESPACE@/input"
mkdir -p "$base/resources" "$base/certs"
[ -d "$here/resources" ] && cp -R "$here/resources/." "$base/resources/"
[ -d "$here/certs" ] && cp -R "$here/certs/." "$base/certs/"
exec "${SKUPPER:-skupper}" system setup -n @NAMESPACE@ --platform "${SKUPPER_PLATFORM:-@PLATFORM@}"
"""
#: ``generate-bundle --type shell-script``: the tarball follows the marker line, base64-encoded
BUNDLE_SCRIPT = """#!/bin/sh
# Installs the skupper system site @NAMESPACE@ on this host: unpacks the bundle below to a temporary directory and
# runs its install.sh (SKUPPER=/path/to/skupper names the command); exits with its exit code.
set -eu
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
sed '1,/^__SKUPPER_BUNDLE__$/d' "$0" | base64 -d | tar -xzf - -C "$dir"
code=0
sh "$dir/install.sh" || code=$?
exit "$code"
__SKUPPER_BUNDLE__
"""
SITE_CA = "skupper-site-ca"
STOP_SECONDS = 10.0
ASK_SECONDS = 2.0                 # how long the router's control socket may take to answer
MAX_ANSWER = 16 * 1024 * 1024
SETTLE_SECONDS = 10.0             # how long setup, start, reload and apply wait for the router's first report
POLL_SECONDS = 0.2


class RouterUnreachable(Exception):
    """The router's control socket did not give an answer (the message says why)."""


class BundleRefused(Exception):
    """A bundle cannot be made of this site as it is (the message lists the files that cannot be used)."""


@dataclass
class Loaded:
    """The site's files as read now, and what composing them gives."""

    files: list[ResourceFile]
    plan: SystemPlan

    @property
    def resources(self) -> list[JsonDict]:
        return [f.obj for f in self.files if f.obj is not None]

    def source(self, kind: str, name: str) -> ResourceFile | None:
        return next((f for f in self.files if f.obj is not None and (f.kind, f.name) == (kind, name)), None)


@dataclass
class Bundle:
    """What a bundle holds (archive name -> bytes) and the tokens left out of it, with why."""

    members: dict[str, bytes] = field(default_factory=dict)
    left_out: list[str] = field(default_factory=list)


def _proc_cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()[:65536]
    except OSError:
        return []
    return raw.decode(errors="replace").split("\0")


def _proc_parent(pid: int) -> int | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text(errors="replace")
        return int(text.rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def probe_bind(host: str, port: int) -> str | None:
    """What binding ``host:port`` here (as the router binds: ``SO_REUSEADDR``) says: the error, or None when the
    address could be bound (it is released at once)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as e:
            return e.strerror or str(e)
    return None


async def systemctl(*args: str) -> bool:
    """``systemctl --user ARGS``; whether it succeeded (False where there is no systemd user manager)."""
    if shutil.which("systemctl") is None:
        return False
    try:
        process = await asyncio.create_subprocess_exec(
            "systemctl", "--user", *args, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
        async with asyncio.timeout(30):
            return await process.wait() == 0
    except (OSError, TimeoutError):
        return False


def data_home() -> Path:
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")


def _fingerprint(token: JsonDict) -> str:
    """What identifies a token's grant and code (a changed token of the same name is another token)."""
    spec = mapping(token, "spec")
    return hashlib.sha256(f"{spec.get('url')}\n{spec.get('code')}".encode()).hexdigest()


def read_file(path: Path, shown: str) -> list[ResourceFile]:
    """The resources of one file, each naming the file as ``shown``; a file that cannot be read is one problem."""
    try:
        if path.stat().st_size > MAX_FILE:
            return [ResourceFile(path, None, f"{shown}: larger than {MAX_FILE} bytes", shown)]
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        return [ResourceFile(path, None, f"{shown}: cannot be read: {e}", shown)]
    return load_resources(path, text, shown)


@dataclass
class SystemSite:
    namespace: str
    platform: str = DEFAULT_PLATFORM     # linux: the router as a process; podman, docker: in the engine's container
    endpoint: str | None = None          # the engine's API (None: $CONTAINER_ENDPOINT or upstream's default)

    @property
    def in_container(self) -> bool:
        return self.platform in CONTAINER_PLATFORMS

    @property
    def base(self) -> Path:
        return data_home() / "skupper" / "namespaces" / self.namespace

    @property
    def resources_dir(self) -> Path:
        return self.base / "input" / "resources"

    @property
    def input_certs(self) -> Path:
        return self.base / "input" / "certs"

    @property
    def runtime(self) -> Path:
        return self.base / "runtime"

    @property
    def router_config(self) -> Path:
        return self.runtime / "router" / "router.json"

    @property
    def pid_file(self) -> Path:
        return self.runtime / "router.pid"

    # ---- files -------------------------------------------------------------------------------------------------
    def ensure(self) -> None:
        for directory in (self.resources_dir, self.input_certs, self.runtime / "certs",
                          self.runtime / "resources" / "links", self.runtime / "resources" / "status",
                          self.runtime / "router" / "state", self.runtime / "logs"):
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)

    def site_id(self) -> str:
        path = self.runtime / "site-id"
        if not path.exists():
            path.write_text(str(uuid.uuid4()) + "\n", encoding="utf-8")
        return path.read_text(encoding="utf-8").strip()

    def read_resources(self) -> list[ResourceFile]:
        """The resources of ``input/resources`` and of the Links redeemed tokens gave. A Secret document of
        ``input/resources`` is a TLS credential: it is stored as ``input/certs/<name>/`` (:meth:`store_secret`) and
        not listed (unless it cannot be used: then its problem is). Of two resources of a kind and name, one is
        used (:func:`one_of_each`), the other listed as a problem."""
        out: list[ResourceFile] = []
        for directory in (self.resources_dir, self.runtime / "resources" / "links"):
            for path in sorted(directory.glob("*.y*ml")) if directory.is_dir() else []:
                for resource in read_file(path, str(path)):
                    if resource.obj is not None and resource.kind == SECRET:
                        if directory == self.resources_dir:
                            self.store_secret(resource.obj)
                        continue
                    out.append(resource)
        return one_of_each(out)

    def store_secret(self, secret: JsonDict) -> Path:
        """A Secret's TLS files as ``input/certs/<name>/`` (what Listeners', Connectors' and Links'
        ``tlsCredentials`` name): the files that changed are written (keys readable by this user only), the TLS
        files the Secret does not hold are removed."""
        directory = self.input_certs / meta(secret).name
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        binding = meta(secret).annotations.get(ANNOTATION_SITE_BINDING)
        if binding:                     # where this site proves its key to the credential's issuer
            (directory / BINDING_FILE).write_text(binding, encoding="utf-8")
        files = secret_files(secret)
        for name in TLS_FILES:
            path = directory / name
            if name not in files:
                path.unlink(missing_ok=True)
            elif not path.is_file() or path.read_bytes() != files[name]:
                staging = path.with_name(f".{name}.new")
                staging.unlink(missing_ok=True)
                fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as handle:
                    handle.write(files[name])
                staging.replace(path)
        return directory

    def certs(self) -> tuple[dict[str, Path], dict[str, frozenset[str]]]:
        """TLS credentials by name (input first, then those redeemed tokens gave) and the files each has."""
        found: dict[str, Path] = {}
        for directory in (self.runtime / "certs", self.input_certs):
            for sub in sorted(directory.iterdir()) if directory.is_dir() else []:
                if sub.is_dir():
                    found[sub.name] = sub
        return found, {n: frozenset(f for f in TLS_FILES if (d / f).is_file()) for n, d in found.items()}

    def apply_file(self, source: Path, shown: str) -> tuple[list[Key], list[str]]:
        """Copy the resources of ``source`` into ``input/resources`` (one file each, ``<Kind>-<name>.yaml``): the
        resources written, or (nothing written) the problems of the documents that cannot be used, each naming
        ``shown``, the line and the field."""
        return self._apply(read_file(source, shown))

    def apply_text(self, text: str, shown: str) -> tuple[list[Key], list[str]]:
        """As :meth:`apply_file`, for what standard input gave (``skupper system apply -f -``)."""
        if len(text.encode()) > MAX_FILE:
            return [], [f"{shown}: larger than {MAX_FILE} bytes"]
        return self._apply(load_resources(Path(shown), text, shown))

    def _apply(self, loaded: list[ResourceFile]) -> tuple[list[Key], list[str]]:
        problems = [r.problem for r in loaded if r.problem]
        if problems:
            return [], problems
        self.ensure()
        written = []
        for resource in loaded:
            assert resource.obj is not None
            if resource.kind == SECRET:                 # a credential: stored where credentials are
                self.store_secret(resource.obj)
                written.append((resource.kind, resource.name))
                continue
            target = self.resources_dir / f"{resource.kind}-{resource.name}.yaml"
            target.write_text(yaml.safe_dump(resource.obj, sort_keys=False), encoding="utf-8")
            written.append((resource.kind, resource.name))
        return written, []

    def delete_resource(self, kind: str, name: str) -> list[Path]:
        """Remove the resource from the file that holds it (``input/resources``, or ``runtime/resources/links``
        for the Links a redeemed token gave): the file goes when it held nothing else; a Secret's stored
        credential (``input/certs/<name>``) goes too. The files changed."""
        changed = []
        if kind == SECRET and DNS1123_SUBDOMAIN.fullmatch(name) and (self.input_certs / name).is_dir():
            shutil.rmtree(self.input_certs / name)
            changed.append(self.input_certs / name)
        for directory in (self.resources_dir, self.runtime / "resources" / "links"):
            for path in sorted(directory.glob("*.y*ml")) if directory.is_dir() else []:
                resources = read_file(path, str(path))
                if not any(r.obj is not None and (r.kind, r.name) == (kind, name) for r in resources):
                    continue
                kept = [text for text, r in zip(split_documents(path.read_text(encoding="utf-8")), resources,
                                                strict=False)
                        if r.obj is None or (r.kind, r.name) != (kind, name)]
                if kept:
                    path.write_text("---\n".join(kept), encoding="utf-8")
                else:
                    path.unlink()
                changed.append(path)
        if changed:
            (self.runtime / "resources" / "status" / f"{kind}-{name}.yaml").unlink(missing_ok=True)
        return changed

    # ---- tokens ------------------------------------------------------------------------------------------------
    def _redemption_file(self, name: str) -> Path:
        return self.runtime / "redemptions" / f"{name}.json"

    def token_record(self, token: JsonDict) -> TokenRecord:
        """How this site's redemption of ``token`` went: redeemed, or the last failure (of this token: a changed
        token under the same name has not been tried yet)."""
        name, fingerprint = meta(token).name, _fingerprint(token)
        redeemed = self.runtime / "certs" / name
        with contextlib.suppress(OSError):
            if redeemed.is_dir() and (not (redeemed / "token").exists()
                                      or (redeemed / "token").read_text(encoding="utf-8") == fingerprint):
                return TokenRecord(True)
        with contextlib.suppress(OSError, ValueError):
            loaded = json.loads(self._redemption_file(name).read_text(encoding="utf-8"))
            if isinstance(loaded, dict) and loaded.get("token") == fingerprint:
                return TokenRecord(False, str(loaded.get("problem") or "")[:1000] or None,
                                   bool(loaded.get("refused")))
        return TokenRecord(False)

    def _record_failure(self, token: JsonDict, problem: str, refused: bool) -> None:
        path = self._redemption_file(meta(token).name)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        path.write_text(json.dumps({"problem": problem, "refused": refused, "token": _fingerprint(token)}),
                        encoding="utf-8")

    async def redeem_tokens(self, resources: list[JsonDict], site_id: str) -> None:
        """Redeem the AccessTokens not redeemed yet (a token is used once); each failure is recorded with the
        grant server's words (:meth:`token_record`)."""
        for token in (r for r in resources if r.get("kind") == "AccessToken"):
            name = meta(token).name
            if self.token_record(token).redeemed:
                continue
            try:
                spec = AccessTokenSpec.model_validate(dict(mapping(token, "spec")))
                keys = SystemSiteKey(self.runtime)
                text = await post_redemption(spec.url, spec.ca, spec.code, name, site_id,
                                             proof=keys.proof(site_id, spec.url, int(time.time())))
                answer = parse_grant_answer(text)
                keys.keep(name, site_id, answer.voucher)
            except AnswerProblem as e:
                self._record_failure(token, f"the answer of the grant server is not usable: {e}", False)
                continue
            except Exception as e:    # pydantic's ValidationError and the redeemer's refusals, with their words
                self._record_failure(token, str(e)[:500], not getattr(e, "retry", True))
                continue
            objects = link_objects(self.namespace, name, answer, cost=spec.link_cost or 1, annotations={})
            secret, links = objects[0], objects[1:]
            directory = self.runtime / "certs" / name
            staging = directory.with_name(f".{name}.new")
            staging.mkdir(parents=True, exist_ok=True, mode=0o700)
            for key in TLS_FILES:
                (staging / key).write_bytes(base64.b64decode(mapping(secret, "data")[key]))
                (staging / key).chmod(0o600)
            for link in links:
                body = {"apiVersion": link["apiVersion"], "kind": "Link", "metadata": {"name": meta(link).name},
                        "spec": link["spec"]}
                (self.runtime / "resources" / "links" / f"Link-{meta(link).name}.yaml").write_text(
                    yaml.safe_dump(body, sort_keys=False), encoding="utf-8")
            (staging / "token").write_text(_fingerprint(token), encoding="utf-8")
            if directory.exists():           # a changed token of the same name: its credentials replace the old
                shutil.rmtree(directory)
            staging.rename(directory)
            self._redemption_file(name).unlink(missing_ok=True)

    # ---- link access ---------------------------------------------------------------------------------------------
    def _write_pair(self, name: str, pair: pki.KeyPair, ca: bytes, marker: str = "") -> None:
        directory = self.runtime / "certs" / name
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        for key, data in (("ca.crt", ca), ("tls.crt", pair.cert), ("tls.key", pair.key)):
            (directory / key).write_bytes(data)
            (directory / key).chmod(0o600)
        (directory / "names").write_text(marker, encoding="utf-8")

    def site_ca(self) -> pki.KeyPair:
        """The site CA: the user's (``input/certs/skupper-site-ca``) or the one this site made once."""
        for directory in (self.input_certs / SITE_CA, self.runtime / "certs" / SITE_CA):
            if (directory / "tls.crt").is_file() and (directory / "tls.key").is_file():
                return pki.KeyPair((directory / "tls.crt").read_bytes(), (directory / "tls.key").read_bytes())
        pair = pki.new_ca(SITE_CA)
        self._write_pair(SITE_CA, pair, pair.cert)
        return pair

    def ensure_access_credentials(self, access: AccessPlan, site_id: str) -> None:
        """The router access's server certificate (site CA, the site's id as common name, the SNI names routers
        use and the access's names), issued again when those names change; a user's credentials are kept."""
        if (self.input_certs / access.credentials).is_dir():
            return
        dns, ips = endpoint_hosts(access.names)
        marker = ",".join(sorted({KEY_SNI_WILDCARD, CONTROL_SNI, *dns, *ips})) + f"|{site_id}"
        names_file = self.runtime / "certs" / access.credentials / "names"
        if names_file.is_file() and names_file.read_text(encoding="utf-8") == marker:
            return
        ca = self.site_ca()
        pair = pki.issue(ca, site_id, dns=[KEY_SNI_WILDCARD, CONTROL_SNI, *dns], ips=ips, server=True)
        self._write_pair(access.credentials, pair, ca.cert, marker)

    def generate_link(self, subject: str, name: str) -> list[JsonDict]:
        """The Link and Secret a remote site applies to link to this one: a client certificate for ``subject``
        (the remote Site's id: its routers speak only as that) signed by the site CA."""
        files = self.read_resources()
        access, _ = router_access([r.obj for r in files if r.obj is not None])
        if access is None:
            raise ValueError("this site has no RouterAccess: remote sites cannot link to it")
        ca = self.site_ca()
        pair = pki.issue(ca, subject, client=True)
        host = access.host if access.host != "0.0.0.0" else access.names[0]
        link = {"apiVersion": "skupper.io/v2alpha1", "kind": "Link", "metadata": {"name": name},
                "spec": {"endpoints": [{"name": role, "host": host, "port": str(port)} for role, port in access.roles()],
                         "tlsCredentials": name, "cost": 1}}
        secret = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls", "metadata": {"name": name},
                  "data": {"ca.crt": base64.b64encode(ca.cert).decode(), "tls.crt": base64.b64encode(pair.cert).decode(),
                           "tls.key": base64.b64encode(pair.key).decode()}}
        return [secret, link]

    # ---- compose and statuses ------------------------------------------------------------------------------------
    def load(self) -> Loaded:
        """The site's files and the plan they make (no redemption, nothing written)."""
        files = self.read_resources()
        resources = [r.obj for r in files if r.obj is not None]
        certs, keys = self.certs()
        plan = compose_system(self.site_id(), self.namespace, resources, certs, keys)
        return Loaded(files, plan)

    async def refresh(self, *, redeem: bool = True) -> Loaded:
        """Redeem new tokens (unless not ``redeem``), make the router access's certificate, write the router
        document (the running router applies it); the files and the plan."""
        self.ensure()
        inputs = input_fingerprint(self.base)     # before any file is read: a later change is seen as one
        site_id = self.site_id()
        if redeem:
            await self.redeem_tokens([r.obj for r in self.read_resources() if r.obj is not None], site_id)
        files = self.read_resources()
        if redeem:     # generated credentials: this site proves its key where each was issued (once)
            for problem in await SystemSiteKey(self.runtime).bind_links(
                    [r.obj for r in files if r.obj is not None and r.kind == "Link"], self.certs()[0], site_id):
                print(problem, file=sys.stderr)
        access, _ = router_access([r.obj for r in files if r.obj is not None])
        if access is not None:
            self.ensure_access_credentials(access, site_id)
        loaded = self.load()
        if loaded.plan.document is not None:
            text = json.dumps(loaded.plan.document, indent=2)
            if not self.router_config.exists() or self.router_config.read_text(encoding="utf-8") != text:
                staging = self.router_config.with_suffix(".new")
                staging.write_text(text, encoding="utf-8")
                staging.replace(self.router_config)
        record_loaded(self.runtime, inputs)
        return loaded

    async def view(self, loaded: Loaded) -> SiteView:
        """Each resource's state now, from the router process and what the router reports (an address the router
        should be bound to and is not is bound here for a moment, to tell why)."""
        tokens = {r.name: self.token_record(r.obj) for r in loaded.files if r.kind == "AccessToken" and r.obj}
        process = self.process()
        answer: RouterAnswer | None = None
        problem: str | None = None
        probes: dict[Key, str | None] = {}
        if process.state == "running":
            try:
                answer = await self.router_answer()
                targets = probe_targets(loaded.plan, answer)
                probes = {(t.kind, t.name): probe_bind(t.host, t.port) for t in targets}
                if any(probes.values()):      # bound by the router meanwhile? ask again before saying it failed
                    answer = await self.router_answer()
                    still = {(t.kind, t.name) for t in probe_targets(loaded.plan, answer)}
                    probes = {k: v for k, v in probes.items() if k in still}
            except RouterUnreachable as e:
                answer, problem = None, str(e)
        return observe(loaded.plan, loaded.resources, tokens, process, answer, router_problem=problem,
                       probes=probes)

    async def settle(self, loaded: Loaded, within: float = SETTLE_SECONDS) -> SiteView:
        """:meth:`view`, again until every state has settled (the router answered, bound or failed to bind each
        Listener it can, reported each Link) or ``within`` seconds passed."""
        deadline = time.monotonic() + within
        while True:
            view = await self.view(loaded)
            if view.settled or time.monotonic() >= deadline:
                return view
            await asyncio.sleep(POLL_SECONDS)

    def write_statuses(self, loaded: Loaded, view: SiteView) -> None:
        """``runtime/resources/status/<Kind>-<name>.yaml``: each resource with its status as of ``view``."""
        status_dir = self.runtime / "resources" / "status"
        status_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        states = {(o.kind, o.name): o.state for o in view.observed}
        for stale in status_dir.glob("*.yaml"):
            stale.unlink()
        for resource in loaded.files:
            if resource.obj is None:
                continue
            state = states.get((resource.kind, resource.name))
            status: JsonDict = {"status": state.reason if state else "Pending",
                                "message": state.message if state else "no Site"}
            if resource.kind == "AccessToken":
                status["redeemed"] = self.token_record(resource.obj).redeemed
            (status_dir / f"{resource.kind}-{resource.name}.yaml").write_text(
                yaml.safe_dump({**resource.obj, "status": status}, sort_keys=False), encoding="utf-8")

    # ---- the router process ------------------------------------------------------------------------------------
    def _ours(self, pid: int) -> bool:
        """Whether ``pid`` runs this site's router (``service-network router --config <this site's document>``)."""
        args = _proc_cmdline(pid)
        return any(a == "--config" and b == str(self.router_config) for a, b in itertools.pairwise(args))

    def router_pid(self) -> int | None:
        """The running router's pid: the one ``start`` recorded, else one a systemd unit runs (checked: the
        process runs our router with this site's document); on a container platform, the main process of the
        router's running container."""
        if self.in_container:
            found = self.container_router().container()
            return found.pid if found is not None and found.running and found.pid else None
        with contextlib.suppress(OSError, ValueError):
            recorded = int(self.pid_file.read_text(encoding="utf-8").strip())
            if self._ours(recorded):
                return recorded
        return next((pid for pid in _pids() if pid != os.getpid() and self._ours(pid)), None)

    def process(self) -> RouterProcess:
        """The router process: running (with the pid of the ``service-network-router`` it runs), stopped, or
        crashed (the pid ``start`` recorded is gone, and no ``stop`` removed it; its container is there and does
        not run)."""
        pid = self.router_pid()
        if pid is not None:
            inner = next((c for c in _pids() if _proc_parent(c) == pid and "--control-socket" in _proc_cmdline(c)),
                         None)
            return RouterProcess("running", pid, inner, self.container_router().spec.name if self.in_container
                                 else None)
        if self.in_container:           # (stop removes the container: one that is there has ended by itself)
            found = self.container_router().container()
            return (RouterProcess("stopped") if found is None else
                    RouterProcess("crashed", container=found.name, container_state=found.state))
        with contextlib.suppress(OSError, ValueError):
            return RouterProcess("crashed", int(self.pid_file.read_text(encoding="utf-8").strip()))
        return RouterProcess("stopped")

    @property
    def control_socket(self) -> Path:
        """The router's control socket (as its adaptor places it: in the state directory unless that path is too
        long for a Unix socket)."""
        return control_socket_path(self.runtime / "router" / "state")

    async def ask_router(self, op: str) -> dict[str, Any]:
        """One request over the router's control socket; ``RouterUnreachable`` saying why there is no answer."""
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_unix_connection(str(self.control_socket), limit=MAX_ANSWER), ASK_SECONDS)
        except TimeoutError:
            raise RouterUnreachable(f"its control socket {self.control_socket} does not accept connections "
                                    f"(timed out)") from None
        except OSError as e:
            raise RouterUnreachable(f"its control socket {self.control_socket} does not accept connections "
                                    f"({e.strerror or e})") from None
        try:
            writer.write(json.dumps({"op": op}).encode() + b"\n")
            await writer.drain()
            line = await asyncio.wait_for(reader.readline(), ASK_SECONDS)
            answer = json.loads(line)
        except (OSError, TimeoutError, ValueError) as e:
            raise RouterUnreachable(f"no answer on its control socket: {str(e)[:200] or type(e).__name__}") from None
        finally:
            writer.close()
        if not isinstance(answer, dict):
            raise RouterUnreachable("its control socket answered something else than a JSON object")
        if answer.get("ok") is False:
            problems = answer.get("problems") or ["refused"]
            raise RouterUnreachable("; ".join(str(p)[:200] for p in problems[:3]))
        return answer

    async def router_answer(self) -> RouterAnswer:
        network = await self.ask_router("network")
        addresses = await self.ask_router("addresses")
        try:
            return parse_answer(network, addresses)
        except ValueError as e:
            raise RouterUnreachable(str(e)) from None

    def start_router(self) -> int:
        """Start the router process (unless it runs) and record its pid; returns once the process shows its
        command line (a process just started shows none for a moment, and would not be recognised as ours)."""
        if self.in_container:
            return self.container_router().start().pid
        running = self.router_pid()
        if running is not None:
            return running
        return spawn(self.router_command(), log=self.runtime / "logs" / "router.log", cwd=self.runtime,
                     pid_file=self.pid_file, ours=self._ours)

    def container_router(self) -> ContainerRouter:
        """The router's container (``podman`` and ``docker`` platforms): this site's names and mounts."""
        mounts = (self.runtime, self.input_certs, *extra_mounts(self.control_socket, self.runtime))
        return ContainerRouter(RouterContainer(
            namespace=self.namespace,
            site_id=self.site_id() if (self.runtime / "site-id").exists() else "", image=router_image(), config=self.router_config,
            state_dir=self.runtime / "router" / "state", mounts=mounts, uid=os.getuid(), gid=os.getgid(),
            platform=self.platform, docker_gid=docker_group_id() if self.platform == "docker" else 0), self.endpoint)

    async def stop_router(self) -> bool:
        if self.in_container:       # as upstream's stop: the container goes (start makes it again)
            router = self.container_router()
            running = await asyncio.to_thread(router.stop)
            await asyncio.to_thread(router.remove)
            return running
        pid = self.router_pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_SECONDS
        while time.monotonic() < deadline:
            if self.router_pid() is None:   # (a zombie has no command line: it counts as stopped)
                break
            await asyncio.sleep(0.1)
        if self.router_pid() is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        self.pid_file.unlink(missing_ok=True)
        return True

    # ---- systemd and bundles -------------------------------------------------------------------------------------
    @property
    def unit_name(self) -> str:
        return f"skupper-{self.namespace}.service"

    @property
    def unit_path(self) -> Path:
        config = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
        return config / "systemd" / "user" / self.unit_name

    def systemd_unit(self) -> str:
        """A systemd user unit running this site's router (restarted when it fails); on a container platform,
        upstream's unit: it starts and stops the site's containers (``internal/scripts/``), the engine restarts
        them."""
        if self.in_container:
            scripts = self.base / "internal" / "scripts"
            return (f"[Unit]\nDescription={self.unit_name}\nWants=network-online.target\n"
                    f"After=network-online.target\nRequiresMountsFor={runtime_dir(os.getuid())}/containers\n\n"
                    f"[Service]\nTimeoutStopSec=70\nRemainAfterExit=yes\nExecStart=/bin/sh {scripts / 'start.sh'}\n"
                    f"ExecStop=/bin/sh {scripts / 'stop.sh'}\nType=simple\n\n[Install]\nWantedBy=default.target\n")
        command = " ".join(shlex.quote(part) for part in self.router_command())
        return (f"[Unit]\nDescription=Skupper system site {self.namespace} (service network router)\n"
                f"After=network-online.target\n\n[Service]\nType=simple\nExecStart={command}\n"
                f"WorkingDirectory={self.runtime}\nRestart=on-failure\nRestartSec=2\n\n"
                f"[Install]\nWantedBy=default.target\n")

    def write_scripts(self) -> None:
        """``internal/scripts/start.sh`` and ``stop.sh`` (container platforms): the engine's command starting or
        stopping every container labelled with this site's id, as upstream's unit runs them."""
        scripts = self.base / "internal" / "scripts"
        scripts.mkdir(parents=True, exist_ok=True)
        engine = "docker" if self.platform == "docker" else "podman"
        listing = (f"{engine} container ls --all --filter label={APP_LABEL[0]}={APP_LABEL[1]} "
                   f"--filter label={SITE_ID_LABEL}={self.site_id()} --format '{{{{.Names}}}}'")
        for name, verb in (("start.sh", "start"), ("stop.sh", f"stop -t {CONTAINER_STOP_SECONDS}")):
            (scripts / name).write_text(f"#!/bin/sh\nset -eu\nfor name in $({listing}); do\n"
                                        f"    {engine} {verb} \"$name\"\ndone\n", encoding="utf-8")
            (scripts / name).chmod(0o755)

    def router_command(self) -> list[str]:
        return [sys.executable, "-m", "service_network.cli", "router", "--config", str(self.router_config),
                "--state-dir", str(self.runtime / "router" / "state")]

    def bundle(self, source: Path | None = None) -> Bundle:
        """What a bundle of this site holds: ``install.sh``, the files of ``input/resources`` and ``input/certs``,
        without the AccessTokens this site redeemed (a token is redeemed once, so every host installing the bundle
        would be refused) or whose redemption was refused here (used, expired or wrong): those are listed in
        ``left_out``. ``BundleRefused`` when a file of ``input/resources`` cannot be used (it would fail on every
        host too). ``source``: a directory of resource files to take instead of ``input/`` (its Secrets are the
        credentials)."""
        bundle = Bundle({"install.sh": INSTALL_SCRIPT.replace("@NAMESPACE@", self.namespace)
                         .replace("@PLATFORM@", self.platform).encode()})
        broken = []
        inputs = source or self.resources_dir
        for path in sorted(inputs.glob("*")) if inputs.is_dir() else []:
            if not path.is_file():
                continue
            resources = read_file(path, str(path)) if path.suffix in (".yaml", ".yml") else []
            broken += [str(r.problem) for r in resources if r.problem]
            used = {r.name: why for r in resources if r.kind == "AccessToken"
                    and r.obj is not None and (why := self._used_token(r.obj)) is not None}
            bundle.left_out += [f'AccessToken "{name}" ({path}) is not in the bundle: {why}'
                                for name, why in used.items()]
            if not used:
                bundle.members[f"resources/{path.name}"] = path.read_bytes()
                continue
            kept = [text for text, r in zip(split_documents(path.read_text(encoding="utf-8")), resources,
                                            strict=False) if not (r.kind == "AccessToken" and r.name in used)]
            if kept:
                bundle.members[f"resources/{path.name}"] = "---\n".join(kept).encode()
        if broken:
            raise BundleRefused("\n".join(broken))
        for path in sorted(self.input_certs.rglob("*")) if source is None and self.input_certs.is_dir() else []:
            if path.is_file():
                bundle.members[f"certs/{path.relative_to(self.input_certs)}"] = path.read_bytes()
        return bundle

    def _used_token(self, token: JsonDict) -> str | None:
        record = self.token_record(token)
        if record.redeemed:
            return ("this site redeemed it, and a token is redeemed once (apply a token of its own on each host: "
                    "skupper token issue, once per host)")
        if record.refused:
            return f"its redemption was refused here: {record.problem}"
        return None

    def write_bundle(self, target: Path, bundle: Bundle, *, script: bool = False) -> None:
        """A gzip'd tarball of ``bundle`` (``install.sh`` executable); ``script``: a shell script holding it, which
        unpacks it to a temporary directory and runs its ``install.sh`` (upstream's ``--type shell-script``)."""
        packed = io.BytesIO()
        with tarfile.open(fileobj=packed, mode="w:gz") as tar:
            for name, data in bundle.members.items():
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(data), 0o755 if name == "install.sh" else 0o600, time.time()
                tar.addfile(info, io.BytesIO(data))
        if not script:
            target.write_bytes(packed.getvalue())
            return
        encoded = base64.encodebytes(packed.getvalue()).decode()
        target.write_text(BUNDLE_SCRIPT.replace("@NAMESPACE@", self.namespace) + encoded, encoding="utf-8")
        target.chmod(0o700)

    @property
    def watcher(self) -> Watcher:
        """The process that reloads the site when its files change (``install --reload-type auto``)."""
        return Watcher(self.namespace, self.runtime)

    @property
    def reload_unit_name(self) -> str:
        return f"skupper-{self.namespace}-reload.service"

    def systemd_reload_unit(self) -> str:
        """A systemd user unit running the site's watcher (``--reload-type auto``)."""
        command = " ".join(shlex.quote(part) for part in watch_command(self.namespace))
        return (f"[Unit]\nDescription=Skupper system site {self.namespace} (reloads it when its input files "
                f"change)\n\n[Service]\nType=simple\nExecStart={command}\nWorkingDirectory={self.runtime}\n"
                f"Restart=on-failure\nRestartSec=2\n\n[Install]\nWantedBy=default.target\n")

    def active(self) -> bool:
        """Whether the site runs here: its router or its watcher runs, or a systemd unit of it is installed."""
        return (self.unit_path.exists() or self.unit_path.with_name(self.reload_unit_name).exists()
                or self.router_pid() is not None or self.watcher.pid() is not None)

    async def remove_unit(self, name: str | None = None) -> None:
        """Disable and remove the router's systemd unit (or the unit ``name``)."""
        name = name or self.unit_name
        path = self.unit_path.with_name(name)
        if path.exists():
            await systemctl("disable", "--now", name)
            path.unlink(missing_ok=True)
            await systemctl("daemon-reload")

    async def remove(self) -> None:
        """Stop the router and the watcher, remove the systemd units and the namespace's directory (inputs
        included); the ``namespaces`` directory goes too when no other namespace is left."""
        self.watcher.stop()
        await self.stop_router()
        await self.remove_unit(self.reload_unit_name)
        await self.remove_unit()
        shutil.rmtree(self.base, ignore_errors=True)
        with contextlib.suppress(OSError):
            self.base.parent.rmdir()


def namespaces() -> list[SystemSite]:
    """Every system site of this user (a directory of ``$XDG_DATA_HOME/skupper/namespaces``), on the platform it
    records."""
    base = data_home() / "skupper" / "namespaces"
    return [SystemSite(p.name, read_platform(p) or DEFAULT_PLATFORM) for p in sorted(base.iterdir())
            if p.is_dir()] if base.is_dir() else []
