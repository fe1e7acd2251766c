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
import io
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from operator_runtime.objects import JsonDict, mapping, meta

from ..crd.models import AccessTokenSpec
from ..router.names import CONTROL_SNI, KEY_SNI_WILDCARD
from ..site import pki
from ..site.access import endpoint_hosts
from ..site.grants import AnswerProblem, link_objects, parse_answer
from ..site.redeem import post_redemption
from .compose import (
    MAX_FILE,
    AccessPlan,
    ResourceFile,
    SystemPlan,
    compose_system,
    load_resources,
    router_access,
)

__all__ = ["SystemSite", "data_home"]

TLS_FILES = ("ca.crt", "tls.crt", "tls.key")
#: the bundle's installer: copies what it carries into the site's input directory and sets the site up
INSTALL_SCRIPT = """#!/bin/sh
# Installs the skupper system site @NAMESPACE@ on this host: copies resources/ and certs/ into
# ${XDG_DATA_HOME:-$HOME/.local/share}/skupper/namespaces/@NAMESPACE@/input/ and runs "skupper system setup".
# Needs the skupper command (pip install listener-operator), or SKUPPER=/path/to/skupper.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
base="${XDG_DATA_HOME:-$HOME/.local/share}/skupper/namespaces/@NAMESPACE@/input"
mkdir -p "$base/resources" "$base/certs"
[ -d "$here/resources" ] && cp -R "$here/resources/." "$base/resources/"
[ -d "$here/certs" ] && cp -R "$here/certs/." "$base/certs/"
exec "${SKUPPER:-skupper}" system setup -n @NAMESPACE@
"""
SITE_CA = "skupper-site-ca"
STOP_SECONDS = 10.0


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


@dataclass
class SystemSite:
    namespace: str

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
        out: list[ResourceFile] = []
        for directory in (self.resources_dir, self.runtime / "resources" / "links"):
            for path in sorted(directory.glob("*.y*ml")) if directory.is_dir() else []:
                if path.stat().st_size > MAX_FILE:
                    out.append(ResourceFile(path, None, f"{path.name}: larger than {MAX_FILE} bytes"))
                    continue
                try:
                    text = path.read_text(encoding="utf-8")
                except (OSError, UnicodeDecodeError) as e:
                    out.append(ResourceFile(path, None, f"{path.name}: cannot be read: {e}"))
                    continue
                out += load_resources(path, text)
        return out

    def certs(self) -> tuple[dict[str, Path], dict[str, frozenset[str]]]:
        """TLS credentials by name (input first, then those redeemed tokens gave) and the files each has."""
        found: dict[str, Path] = {}
        for directory in (self.runtime / "certs", self.input_certs):
            for sub in sorted(directory.iterdir()) if directory.is_dir() else []:
                if sub.is_dir():
                    found[sub.name] = sub
        return found, {n: frozenset(f for f in TLS_FILES if (d / f).is_file()) for n, d in found.items()}

    def apply_file(self, source: Path) -> list[str]:
        """Copy the resources of ``source`` into ``input/resources`` (one file each, ``<Kind>-<name>.yaml``); the
        problems of the documents that could not be used (nothing of those is written)."""
        if source.stat().st_size > MAX_FILE:
            return [f"{source.name}: larger than {MAX_FILE} bytes"]
        loaded = load_resources(source, source.read_text(encoding="utf-8"))
        problems = [r.problem for r in loaded if r.problem]
        if problems:
            return problems
        self.ensure()
        for resource in loaded:
            assert resource.obj is not None
            target = self.resources_dir / f"{resource.obj['kind']}-{meta(resource.obj).name}.yaml"
            target.write_text(yaml.safe_dump(resource.obj, sort_keys=False), encoding="utf-8")
        return []

    def delete_resource(self, kind: str, name: str) -> bool:
        found = False
        for resource in self.read_resources():
            if resource.obj is not None and resource.obj.get("kind") == kind and meta(resource.obj).name == name \
                    and resource.path.parent == self.resources_dir:
                resource.path.unlink(missing_ok=True)
                found = True
        (self.runtime / "resources" / "status" / f"{kind}-{name}.yaml").unlink(missing_ok=True)
        return found

    # ---- tokens ------------------------------------------------------------------------------------------------
    async def redeem_tokens(self, resources: list[JsonDict], site_id: str) -> dict[str, str]:
        """Redeem the AccessTokens not redeemed yet; token name -> the problem of those that failed."""
        problems: dict[str, str] = {}
        for token in (r for r in resources if r.get("kind") == "AccessToken"):
            name = meta(token).name
            if (self.runtime / "certs" / name).is_dir():
                continue       # redeemed (a token is used once)
            try:
                spec = AccessTokenSpec.model_validate(dict(mapping(token, "spec")))
                text = await post_redemption(spec.url, spec.ca, spec.code, name, site_id)
                answer = parse_answer(text)
            except AnswerProblem as e:
                problems[name] = f"the answer of the grant server is not usable: {e}"
                continue
            except Exception as e:    # pydantic's ValidationError and the redeemer's refusals, with their words
                problems[name] = str(e)[:500]
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
            staging.rename(directory)
        return problems

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
                "spec": {"endpoints": [{"name": "inter-router", "host": host, "port": str(access.port)}],
                         "tlsCredentials": name, "cost": 1}}
        secret = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls", "metadata": {"name": name},
                  "data": {"ca.crt": base64.b64encode(ca.cert).decode(), "tls.crt": base64.b64encode(pair.cert).decode(),
                           "tls.key": base64.b64encode(pair.key).decode()}}
        return [secret, link]

    # ---- compose and statuses ------------------------------------------------------------------------------------
    async def refresh(self) -> SystemPlan:
        """Redeem new tokens, write the router document and the statuses; the plan."""
        self.ensure()
        site_id = self.site_id()
        files = self.read_resources()
        resources = [r.obj for r in files if r.obj is not None]
        token_problems = await self.redeem_tokens(resources, site_id)
        files = self.read_resources()
        resources = [r.obj for r in files if r.obj is not None]
        access, _ = router_access(resources)
        if access is not None:
            self.ensure_access_credentials(access, site_id)
        certs, keys = self.certs()
        plan = compose_system(site_id, self.namespace, resources, certs, keys)
        plan.problems = [r.problem for r in files if r.problem] + plan.problems
        if plan.document is not None:
            text = json.dumps(plan.document, indent=2)
            if not self.router_config.exists() or self.router_config.read_text(encoding="utf-8") != text:
                staging = self.router_config.with_suffix(".new")
                staging.write_text(text, encoding="utf-8")
                staging.replace(self.router_config)
        status_dir = self.runtime / "resources" / "status"
        for stale in status_dir.glob("*.yaml"):
            stale.unlink()
        for obj in resources:
            kind, name = str(obj.get("kind")), meta(obj).name
            if kind == "AccessToken":
                redeemed = (self.runtime / "certs" / name).is_dir()
                status = {"status": "Ready" if redeemed else "Error", "redeemed": redeemed,
                          "message": "OK" if redeemed else token_problems.get(name, "not redeemed yet")}
            else:
                state = plan.states.get((kind, name))
                status = {"status": state.reason if state else "Pending",
                          "message": state.message if state else "no Site"}
            (status_dir / f"{kind}-{name}.yaml").write_text(
                yaml.safe_dump({**obj, "status": status}, sort_keys=False), encoding="utf-8")
        return plan

    def statuses(self) -> list[JsonDict]:
        status_dir = self.runtime / "resources" / "status"
        out = []
        for path in sorted(status_dir.glob("*.yaml")) if status_dir.is_dir() else []:
            with contextlib.suppress(OSError, yaml.YAMLError):
                loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
                if isinstance(loaded, dict):
                    out.append(loaded)
        return out

    # ---- the router process ------------------------------------------------------------------------------------
    def router_pid(self) -> int | None:
        """The running router's pid (checked: the process runs our router with this site's state)."""
        try:
            pid = int(self.pid_file.read_text(encoding="utf-8").strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except (OSError, ValueError):
            return None
        return pid if str(self.router_config) in cmdline else None

    def start_router(self) -> int:
        running = self.router_pid()
        if running is not None:
            return running
        log = (self.runtime / "logs" / "router.log").open("ab")
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", "service_network.cli", "router", "--config", str(self.router_config),
                 "--state-dir", str(self.runtime / "router" / "state")],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, cwd=self.runtime)
        finally:
            log.close()
        self.pid_file.write_text(f"{process.pid}\n", encoding="utf-8")
        return process.pid

    async def stop_router(self) -> bool:
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

    def network(self) -> dict[str, Any] | None:
        path = self.runtime / "router" / "state" / "network.json"
        with contextlib.suppress(OSError, ValueError):
            loaded = json.loads(path.read_text(encoding="utf-8"))
            return loaded if isinstance(loaded, dict) else None
        return None

    # ---- systemd and bundles -------------------------------------------------------------------------------------
    @property
    def unit_name(self) -> str:
        return f"skupper-{self.namespace}.service"

    @property
    def unit_path(self) -> Path:
        config = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
        return config / "systemd" / "user" / self.unit_name

    def systemd_unit(self) -> str:
        """A systemd user unit running this site's router (restarted when it fails)."""
        command = " ".join(shlex.quote(part) for part in self.router_command())
        return (f"[Unit]\nDescription=Skupper system site {self.namespace} (service network router)\n"
                f"After=network-online.target\n\n[Service]\nType=simple\nExecStart={command}\n"
                f"WorkingDirectory={self.runtime}\nRestart=on-failure\nRestartSec=2\n\n"
                f"[Install]\nWantedBy=default.target\n")

    def router_command(self) -> list[str]:
        return [sys.executable, "-m", "service_network.cli", "router", "--config", str(self.router_config),
                "--state-dir", str(self.runtime / "router" / "state")]

    def write_bundle(self, target: Path) -> list[str]:
        """A gzip'd tarball that sets this site up on another host: ``install.sh``, the resources and the
        credentials of ``input/`` (the other host makes its own site id, CA and runtime); the names packed."""
        names = []
        with tarfile.open(target, "w:gz") as tar:
            script = INSTALL_SCRIPT.replace("@NAMESPACE@", self.namespace).encode()
            info = tarfile.TarInfo("install.sh")
            info.size, info.mode = len(script), 0o755
            tar.addfile(info, io.BytesIO(script))
            names.append("install.sh")
            for root in (self.resources_dir, self.input_certs):
                for path in sorted(root.rglob("*")) if root.is_dir() else []:
                    if path.is_file():
                        arcname = f"{root.name}/{path.relative_to(root)}"
                        tar.add(path, arcname=arcname, recursive=False)
                        names.append(arcname)
        return names

    async def uninstall(self) -> None:
        await self.stop_router()
        if self.unit_path.exists():
            await systemctl("disable", "--now", self.unit_name)
            self.unit_path.unlink(missing_ok=True)
            await systemctl("daemon-reload")
        shutil.rmtree(self.base, ignore_errors=True)
