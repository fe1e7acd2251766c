"""``skupper token issue|redeem`` (Kubernetes): upstream's flags, checks, the AccessGrant it creates and the
AccessToken file it writes, and its messages."""

from __future__ import annotations

import datetime
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from operator_runtime.objects import JsonDict, mapping, meta

from ..constants import GROUP_VERSION
from ..kinds import ACCESS_GRANT, ACCESS_TOKEN, SITE
from .cmdline import Args, Command, Flag
from .common import CliError, Invalid, Session, api_call, condition, find, list_kind, pause, resource
from .formats import encode, go_duration
from .options import check_timeout, timeout_flag
from .validate import duration_at_least, file_name_problem, number_problem

__all__ = ["command", "token_document"]

MIN_EXPIRATION = datetime.timedelta(minutes=1)
MAX_TOKEN_FILE = 1024 * 1024


def command() -> Command:
    return Command(
        "token", "Security mechanism for creating connections between Skupper sites",
        long="A token holds what a remote site needs to link to this one (an address, a one-time code and a CA): "
             "issued here, redeemed there.",
        example="skupper token issue ~/token.yaml\nskupper token redeem ~/token.yaml",
        children=[
            Command("issue <fileName>", "issue a token",
                    long="Issue a token file redeemable for a link to the current site.",
                    example="skupper token issue ~/token1.yaml",
                    flags=(Flag("redemptions-allowed", "int", 1, "The number of times an access token for this "
                                "grant can be redeemed."),
                           Flag("expiration-window", "duration", datetime.timedelta(minutes=15),
                                "The period of time in which an access token for this grant can be redeemed."),
                           timeout_flag("60s"),
                           Flag("cost", "string", "1", 'the configured "expense" of sending traffic over the link.')),
                    run=issue, positional="file"),
            Command("redeem <filename>", "redeem a token",
                    long="Redeem a token file in order to create a link to a remote site.",
                    example="skupper token redeem ~/token1.yaml", flags=(timeout_flag("60s"),), run=redeem,
                    positional="file"),
        ])


def _file_problems(files: list[str], missing: str) -> list[str]:
    if not files:
        return [missing]
    if len(files) > 1:
        return ["only one argument is allowed for this command"]
    if not files[0]:
        return ["file name must not be empty"]
    if problem := file_name_problem(files[0]):
        return [f"token file name is not valid: {problem}"]
    return []


def _writable(path: Path) -> str | None:
    if path.is_dir():
        return "token file name is a directory"
    try:
        fd, probe = tempfile.mkstemp(dir=path.expanduser().resolve().parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        return f"invalid token file name: {e.strerror or e}"
    return None


def _ready_site(sites: list[JsonDict]) -> JsonDict | None:
    return next((s for s in sites if (c := condition(s, "Ready")) is not None and c.get("status") == "True"), None)


def token_document(name: str, grant_status: JsonDict, cost: int) -> JsonDict:
    """The AccessToken a grant's status makes (what ``skupper token issue`` writes)."""
    spec: JsonDict = {"url": grant_status.get("url"), "code": grant_status.get("code"), "ca": grant_status.get("ca")}
    if cost:
        spec["linkCost"] = cost
    return resource("AccessToken", name, None, spec)


async def issue(args: Args, session: Session) -> None:
    await list_kind(session, ACCESS_GRANT)
    problems = _file_problems(args.file, "file name must be configured")
    path = Path(args.file[0]) if not problems else Path()
    if not problems and (problem := _writable(path)):
        problems.append(problem)
    sites = await list_kind(session, SITE)
    site = _ready_site(sites)
    if not sites:
        problems.append(f"A site must exist in namespace {session.namespace} before a token can be created")
    elif site is None:
        problems.append("there is no active skupper site in this namespace")
    elif not mapping(site, "status").get("endpoints"):
        problems.append("You must enable link access for this site before you can create a token.")
    grant = f"{meta(site).name}-{uuid.uuid4()}" if site is not None else ""
    if grant and await find(session, ACCESS_GRANT, grant) is not None:
        problems.append(f"There is already a token {grant} created in namespace {session.namespace}")
    if args.redemptions_allowed < 1:
        problems.append("number of redemptions is not valid")
    if problem := duration_at_least(args.expiration_window, MIN_EXPIRATION):
        problems.append(f"expiration time is not valid: {problem}")
    problems += check_timeout(args.timeout)
    cost, problem = number_problem(args.cost)
    if problem:
        problems.append(f"link cost is not valid: {problem}")
    if problems:
        raise Invalid(problems)
    window = go_duration(args.expiration_window)
    await api_call("", session.api.create(ACCESS_GRANT, resource("AccessGrant", grant, session.namespace, {
        "redemptionsAllowed": args.redemptions_allowed, "expirationWindow": window}), session.namespace))
    deadline = time.monotonic() + args.timeout.total_seconds()
    while True:
        obj = await find(session, ACCESS_GRANT, grant)
        ready = condition(obj, "Ready") if obj is not None else None
        if obj is not None and ready is not None and ready.get("status") == "True":
            text = encode(token_document(grant, dict(mapping(obj, "status")), cost or 0), "yaml")
            try:
                path.write_text(text, encoding="utf-8")
                path.chmod(0o644)
                break
            except OSError as e:
                if time.monotonic() >= deadline:
                    raise CliError(f"could not write to file {path}:{e}") from None
        if time.monotonic() >= deadline:
            raise CliError(f'grant "{grant}" not ready yet, check the status for more information')
        await pause()
    print(f'\nGrant "{grant}" is ready\nToken file {path} created\n\n'
          f"Transfer this file to a remote site. At the remote site,\n"
          f'create a link to this site using the "skupper token redeem" command:\n\n'
          f"\tskupper token redeem <file>\n\n"
          f"The token expires after {args.redemptions_allowed} use(s) or after {window}.")


async def redeem(args: Args, session: Session) -> None:
    await list_kind(session, ACCESS_TOKEN)
    problems = _file_problems(args.file, "token file name must be configured")
    sites = await list_kind(session, SITE)
    if not sites:
        problems.append(f"A site must exist in namespace {session.namespace} before a token can be redeemed")
    elif _ready_site(sites) is None:
        problems.append("there is no active skupper site in this namespace")
    path = Path(args.file[0]) if args.file else Path()
    if args.file and args.file[0] and not path.is_file():
        problems.append(f"token file does not exist: stat {args.file[0]}: no such file or directory")
    problems += check_timeout(args.timeout)
    if problems:
        raise Invalid(problems)
    try:
        if path.stat().st_size > MAX_TOKEN_FILE:
            raise CliError(f"unable to read token file - larger than {MAX_TOKEN_FILE} bytes")
        text = path.read_bytes()
    except OSError as e:
        raise CliError(f"unable to read token file - {e.strerror or e}") from None
    body = token_from_file(text, session.namespace)
    name = meta(body).name
    await api_call("", session.api.create(ACCESS_TOKEN, body, session.namespace))
    deadline = time.monotonic() + args.timeout.total_seconds()
    while True:
        obj = await find(session, ACCESS_TOKEN, name)
        redeemed = condition(obj, "Redeemed") if obj is not None else None
        if redeemed is not None and redeemed.get("status") == "True":
            print(f'Token "{name}" has been redeemed')
            return
        if redeemed is not None and mapping(obj, "status").get("status") == "Error" \
                and time.monotonic() >= deadline:
            raise CliError(f'Token "{name}" redeem not ready yet: {redeemed.get("message")}\n')
        if time.monotonic() >= deadline:
            raise CliError(f'Token "{name}" redeem not ready yet, check the status for more information\n')
        await pause()


def token_from_file(text: bytes, namespace: str) -> JsonDict:
    """The AccessToken ``skupper token redeem`` creates from a token file, as upstream's: the file's AccessToken
    (its name, labels, annotations and spec), or, when the file holds none, an AccessToken with no name and an
    empty spec, which the API server refuses with its own words (what upstream prints for such a file)."""
    import yaml
    try:
        loaded: Any = yaml.safe_load(text.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError):
        loaded = None
    if not isinstance(loaded, dict) or loaded.get("kind") != "AccessToken" \
            or loaded.get("apiVersion") != GROUP_VERSION:
        loaded = {}
    metadata: JsonDict = {k: v for k, v in mapping(loaded, "metadata").items()
                          if k in ("name", "generateName", "labels", "annotations")}
    spec: JsonDict = {"url": "", "code": "", "ca": ""}
    spec.update({k: v for k, v in mapping(loaded, "spec").items() if k in ("url", "code", "ca", "linkCost",
                                                                          "settings")})
    return {"apiVersion": GROUP_VERSION, "kind": "AccessToken", "metadata": {**metadata, "namespace": namespace},
            "spec": spec}
