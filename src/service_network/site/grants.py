"""Access grants and tokens (pure): a grant's state (its code, the redemptions left, when it expires) and status,
the decision on a redemption, the messages exchanged when a token is redeemed, and the Link and Secret bodies a
redemption creates. No I/O: the grant server (:mod:`.grant_server`) and the token redeemer (:mod:`.redeem`) use
these.

Redemption speaks upstream's protocol: an HTTPS POST to the grant's URL, verified with the token's CA, whose body
is the code (raw bytes) and whose headers ``name`` (the token's name) and ``subject`` (the redeeming Site's uid,
the client certificate's common name) make a :class:`RedeemRequest`; the answer is a YAML stream of a
``kubernetes.io/tls`` Secret (``tls.crt``, ``tls.key``, ``ca.crt``) named after ``name`` and one Link per endpoint
group (:func:`answer_documents`; refusals are a status and a line of text). The redeeming side reads only the
fields it needs from the answer (:func:`parse_answer`, every value validated) and composes its own objects: names,
namespace, annotations and owners are its own, never the answer's.
"""

from __future__ import annotations

import base64
import datetime
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from operator_runtime.objects import JsonDict, mapping, meta

from ..constants import GROUP_VERSION
from ..crd.models import AccessGrantSpec
from . import pki
from .site_keys import MAX_PROOF
from .status import READY, ConditionState, error, pending, ready, set_condition
from .validation import dns1035_label_problem, host_problem, quoted

__all__ = ["ANNOTATION_GRANT", "ANNOTATION_SITE_VOUCHER", "ANNOTATION_TOKEN", "DEFAULT_EXPIRATION_WINDOW",
           "DEFAULT_REDEMPTIONS", "AnswerProblem", "Grant", "LinkEndpoint", "RedeemAnswer", "RedeemRequest", "Redeemed", "Refusal", "answer_documents",
           "check_redemption", "grant_of", "grant_status", "link_names", "link_objects", "parse_answer",
           "parse_duration", "token_status"]

DEFAULT_REDEMPTIONS = 1
#: Upstream's controller: ten minutes from when it first processes the grant (its CRD's text says 15m; the code
#: decides).
DEFAULT_EXPIRATION_WINDOW = datetime.timedelta(minutes=10)
#: On Links (and their Secrets) a redemption created: the token (redeeming site) or grant (link back) uid.
ANNOTATION_TOKEN = "internal.skupper.io/access-token"
#: on the answer's Secret: the granting site's voucher for the redeemer's site key (upstream's redeemer keeps it
#: unread; see :mod:`.site_keys`)
ANNOTATION_SITE_VOUCHER = "internal.skupper.io/site-voucher"
ANNOTATION_GRANT = "internal.skupper.io/access-grant"
REDEEMED = "Redeemed"
MAX_PEM = 16 * 1024
MAX_TEXT = 256

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s|us|µs|ns)")
_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def parse_duration(text: str) -> datetime.timedelta:
    """A Go duration (``15m``, ``1h30m``, ``90s``, ``2.5h``): what ``expirationWindow`` holds. ValueError else."""
    if not text or _DURATION.sub("", text):
        raise ValueError(f"{quoted(text)} is not a duration (e.g. 15m, 1h30m, 90s)")
    return datetime.timedelta(seconds=sum(float(n) * _UNITS[u] for n, u in _DURATION.findall(text)))


def _timestamp(text: str) -> datetime.datetime | None:
    try:
        return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    except ValueError:
        return None


def format_time(when: datetime.datetime) -> str:
    return when.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Grant:
    """What decides a redemption. ``problem``: the spec is unusable (message)."""

    namespace: str
    name: str
    uid: str
    code: str                       # spec.code, else the generated one in status.code ("" until generated)
    allowed: int
    redemptions: int
    expires: datetime.datetime | None
    issuer: str | None
    problem: str | None = None

    def remaining(self) -> int:
        return max(0, self.allowed - self.redemptions)

    def code_matches(self, code: str) -> bool:
        """Whether ``code`` is this grant's (compared in constant time)."""
        return bool(self.code) and hmac.compare_digest(self.code.encode(), code.encode())

    def expired(self, now: datetime.datetime) -> bool:
        return self.expires is not None and now >= self.expires


def grant_of(obj: Mapping[str, Any], first_seen: datetime.datetime | None = None) -> Grant:
    """The grant's state from its object, as upstream: it expires at ``status.expirationTime``, set once when the
    controller first processes it (``first_seen``) to that time + ``expirationWindow`` (default 10 minutes); a
    later change of the window does not move it. ``redemptionsAllowed`` default 1."""
    obj_meta = meta(obj)
    status = mapping(obj, "status")
    redemptions = status.get("redemptions")
    count = redemptions if isinstance(redemptions, int) and not isinstance(redemptions, bool) else 0
    problem = None
    try:
        spec = AccessGrantSpec.model_validate(dict(mapping(obj, "spec")))
    except ValidationError as e:
        first = e.errors(include_input=False)[0]
        spec = AccessGrantSpec()
        problem = f"spec.{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
    window = DEFAULT_EXPIRATION_WINDOW
    if spec.expiration_window:
        try:
            window = parse_duration(spec.expiration_window)
        except ValueError as e:
            problem = problem or f"spec.expirationWindow: {e}"
    allowed = DEFAULT_REDEMPTIONS if spec.redemptions_allowed is None else spec.redemptions_allowed
    if allowed < 0:
        problem = problem or f"spec.redemptionsAllowed: {allowed} is negative"
    expires = _timestamp(str(status.get("expirationTime") or ""))
    if expires is None and first_seen is not None and not problem:
        expires = first_seen + window
    code = spec.code or str(status.get("code") or "")
    return Grant(obj_meta.namespace, obj_meta.name, obj_meta.uid, code, allowed, count, expires, spec.issuer,
                 problem)


@dataclass(frozen=True)
class Refusal:
    """A redemption refused: the HTTP status and the message the token's status shows."""

    http_status: int
    reason: str
    message: str


def wrong_code(namespace: str, name: str) -> Refusal:
    """A code that does not match: upstream's 403 and words, then which grant."""
    return Refusal(403, "WrongCode", f"Redemption of access token refused: AccessGrant {namespace}/{name}: the code "
                                     f"is wrong")


def no_such_claim(why: str) -> Refusal:
    """No grant for the URL (any more): upstream's 404 and words, then why."""
    return Refusal(404, "NotFound", f"No such claim: {why}")


def check_redemption(grant: Grant, code: str, now: datetime.datetime) -> Refusal | None:
    """Whether ``code`` may redeem ``grant`` now; the code is compared in constant time. A refusal's text starts
    with upstream's words for it (its grant server's: ``Redemption of access token refused``, 403; ``No such
    claim``, 404, expired; ``No such access granted``, 404, used up), then says which grant and why."""
    what = f"AccessGrant {grant.namespace}/{grant.name}"
    if grant.problem:
        return Refusal(409, "GrantInvalid", f"{what} is invalid: {grant.problem}")
    if not grant.code_matches(code):
        return wrong_code(grant.namespace, grant.name)
    if grant.expired(now):
        return Refusal(404, "Expired", f"No such claim: {what} expired at {format_time(grant.expires)}"
                       if grant.expires else f"No such claim: {what} expired")
    if grant.remaining() <= 0:
        return Refusal(404, "UsedUp", f"No such access granted: {what} has no redemptions left ({grant.redemptions} "
                                      f"of {grant.allowed} used)")
    return None


def grant_status(previous: Mapping[str, Any] | None, grant: Grant, *, state: ConditionState, url: str | None,
                 ca: str | None, generation: int | None, now: str) -> dict[str, Any]:
    """An AccessGrant's status: ``url``, ``code``, ``ca``, ``expirationTime``, ``status``/``message`` and the
    ``Ready`` condition. ``redemptions`` is kept as it is: only the grant server counts."""
    status: dict[str, Any] = {k: v for k, v in dict(previous or {}).items() if k != "conditions"}
    status["conditions"] = [dict(c) for c in (previous or {}).get("conditions") or [] if isinstance(c, Mapping)]
    for key, value in (("url", url), ("code", grant.code or None), ("ca", ca),
                       ("expirationTime", format_time(grant.expires) if grant.expires else None)):
        if value is None:
            status.pop(key, None)
        else:
            status[key] = value
    set_condition(status, READY, state, generation, now)
    status["status"], status["message"] = state.reason, state.message
    return status


def grant_state(grant: Grant, now: datetime.datetime, *, site_problem: str | None, server: bool) -> ConditionState:
    """Ready once tokens can be redeemed, and so after normal use too: an expired or used-up grant stays Ready
    (as upstream's; ``expirationTime`` and ``redemptions`` say it) and the grant server refuses its redemptions
    (:func:`check_redemption`), so that alerts on Error statuses do not fire for every token used. Else what stops
    tokens: an invalid grant (Error), no site, no link access or no grant server (Pending)."""
    if grant.problem:
        return error(grant.problem)
    if site_problem:
        return pending(site_problem)
    if not server:
        return pending("the grant server is not enabled (service-network run controller --grant-server-address)")
    return ready()


def token_status(previous: Mapping[str, Any] | None, state: ConditionState, *, redeemed: bool,
                 generation: int | None, now: str) -> dict[str, Any]:
    """An AccessToken's status: ``Redeemed`` -> ``Ready``, and ``redeemed``."""
    status: dict[str, Any] = {k: v for k, v in dict(previous or {}).items() if k != "conditions"}
    status["conditions"] = [dict(c) for c in (previous or {}).get("conditions") or [] if isinstance(c, Mapping)]
    set_condition(status, REDEEMED, state, generation, now)
    set_condition(status, READY, state, generation, now)
    status["status"], status["message"] = state.reason, state.message
    if redeemed:
        status["redeemed"] = True
    else:
        status.pop("redeemed", None)
    return status


# ---- messages ---------------------------------------------------------------------------------------------------

class _Message(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


#: documents an answer may hold (a Secret and a Link per endpoint group), and endpoints per Link
MAX_ANSWER_DOCUMENTS = 9
MAX_ENDPOINTS = 8


class LinkEndpoint(_Message):
    name: str = Field(default="inter-router", max_length=64)
    host: str = Field(max_length=253)
    port: int = Field(ge=1, le=65535)
    group: str | None = Field(default=None, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    """Which router of the remote site (an HA site has two)."""

    @field_validator("host")
    @classmethod
    def _host(cls, value: str) -> str:
        if problem := host_problem(value):
            raise ValueError(problem)
        return value

    @classmethod
    def of(cls, endpoint: Mapping[str, Any]) -> LinkEndpoint:
        """From an endpoint of a RouterAccess status."""
        return cls(name=str(endpoint.get("name") or "inter-router"), host=str(endpoint["host"]),
                   port=int(endpoint["port"]), group=endpoint.get("group") or None)

    def as_spec(self) -> JsonDict:
        spec: JsonDict = {"name": self.name, "host": self.host, "port": str(self.port)}
        if self.group is not None:
            spec["group"] = self.group
        return spec


class _Credentials(_Message):
    """A client certificate, its key and the CA of the access it is for (PEM)."""

    ca: str = Field(max_length=MAX_PEM)
    cert: str = Field(max_length=MAX_PEM)
    key: str = Field(max_length=MAX_PEM)

    def problem(self) -> str | None:
        """Why these credentials are unusable: PEM that does not parse, a key of another certificate, a
        certificate the CA did not sign."""
        try:
            pki.load_pair(pki.KeyPair(self.cert.encode(), self.key.encode()), "client certificate")
            if not pki.cert_info(self.ca.encode()).is_ca:
                return "the CA certificate is not a CA"
        except pki.CertificateError as e:
            return str(e)
        if not pki.signed_by(self.cert.encode(), self.ca.encode()):
            return "the client certificate is not signed by the given CA"
        return None


class RedeemRequest(_Message):
    """Upstream's request: the body is the code; the headers ``name`` (the token's name: the Secret and the Links
    the answer names) and ``subject`` (the redeeming Site's uid: the client certificate's common name)."""

    code: str = Field(min_length=1, max_length=MAX_TEXT)
    name: str = Field(min_length=1, max_length=63)
    #: the header ``skupper-site-proof`` of our redeemers (:mod:`.site_keys`); upstream's send none
    proof: str | None = Field(default=None, max_length=MAX_PROOF)
    subject: str = Field(min_length=1, max_length=MAX_TEXT, pattern=r"^[A-Za-z0-9]([-A-Za-z0-9._]*[A-Za-z0-9])?$")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if problem := dns1035_label_problem(value):
            raise ValueError(problem)
        return value


class Redeemed(_Credentials):
    """What the granting site gives for a redemption: its access endpoints and the client certificate it issued."""

    endpoints: list[LinkEndpoint] = Field(min_length=1, max_length=MAX_ENDPOINTS)
    #: this site's voucher for the redeemer's proven site key (JSON), when it proved one
    voucher: str | None = None


class RedeemAnswer(_Credentials):
    """What the redeeming side takes from an answer: the credentials and the endpoints of each Link, in order,
    and the granting site's voucher for the redeemer's site key (unverified here) if it gave one."""

    links: list[list[LinkEndpoint]] = Field(min_length=1, max_length=MAX_ANSWER_DOCUMENTS - 1)
    voucher: str | None = Field(default=None, max_length=MAX_PROOF)


def _groups(endpoints: list[LinkEndpoint]) -> list[list[LinkEndpoint]]:
    """Endpoints by group, in the order groups first appear (an HA site: one group per router)."""
    groups: dict[str | None, list[LinkEndpoint]] = {}
    for endpoint in endpoints:
        groups.setdefault(endpoint.group, []).append(endpoint)
    return list(groups.values())


def link_names(name: str, count: int) -> list[str]:
    """The Links of a redemption: ``name``, then ``name-2``, ``name-3``, ... (shortened to stay a DNS label)."""
    return [name] + [f"{name[:63 - len(str(i)) - 1]}-{i}" for i in range(2, count + 1)]


def _tls_data(credentials: _Credentials) -> dict[str, str]:
    """A ``kubernetes.io/tls`` Secret's data: the certificate, its key and the CA, base64."""
    def b64(text: str) -> str:
        return base64.b64encode(text.encode()).decode()
    return {"ca.crt": b64(credentials.ca), "tls.crt": b64(credentials.cert), "tls.key": b64(credentials.key)}


def answer_documents(name: str, redeemed: Redeemed) -> str:
    """Upstream's answer: a YAML stream of the Secret ``name`` and one Link per endpoint group."""
    secret_meta: JsonDict = {"name": name}
    if redeemed.voucher:
        secret_meta["annotations"] = {ANNOTATION_SITE_VOUCHER: redeemed.voucher}
    documents: list[JsonDict] = [{"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                                  "metadata": secret_meta, "data": _tls_data(redeemed)}]
    groups = _groups(redeemed.endpoints)
    for link_name, group in zip(link_names(name, len(groups)), groups, strict=True):
        documents.append({"apiVersion": GROUP_VERSION, "kind": "Link", "metadata": {"name": link_name},
                          "spec": {"endpoints": [e.as_spec() for e in group], "tlsCredentials": name, "cost": 1}})
    return "".join("---\n" + yaml.safe_dump(d, sort_keys=False) for d in documents)


class AnswerProblem(ValueError):
    """An answer that cannot be used (the message names what is wrong, never echoing more than a little of it)."""


def parse_answer(text: str) -> RedeemAnswer:
    """The credentials and the Links' endpoints of an upstream answer; ``AnswerProblem`` when anything is missing,
    extra or invalid."""
    try:
        documents = []
        for document in yaml.safe_load_all(text):
            if document is None:
                continue
            documents.append(document)
            if len(documents) > MAX_ANSWER_DOCUMENTS:
                raise AnswerProblem(f"more than {MAX_ANSWER_DOCUMENTS} documents")
    except yaml.YAMLError as e:
        raise AnswerProblem(f"not a YAML stream: {str(e)[:120]}") from None
    if not all(isinstance(d, dict) for d in documents):
        raise AnswerProblem("a document is not an object")
    secrets = [d for d in documents if d.get("kind") == "Secret" and d.get("apiVersion") == "v1"]
    links = [d for d in documents if d.get("kind") == "Link" and d.get("apiVersion") == GROUP_VERSION]
    if len(secrets) != 1 or len(secrets) + len(links) != len(documents):
        raise AnswerProblem("expected one Secret and Links only")
    data = secrets[0].get("data")
    if not isinstance(data, dict):
        raise AnswerProblem("the Secret has no data")

    def pem(key: str) -> str:
        value = data.get(key)
        if not isinstance(value, str) or len(value) > 2 * MAX_PEM:
            raise AnswerProblem(f"the Secret has no usable {key}")
        try:
            return base64.b64decode(value, validate=True).decode()
        except (ValueError, UnicodeDecodeError):
            raise AnswerProblem(f"the Secret's {key} is not base64 PEM") from None

    voucher = mapping(secrets[0], "metadata", "annotations").get(ANNOTATION_SITE_VOUCHER)
    try:
        return RedeemAnswer.model_validate({
            "ca": pem("ca.crt"), "cert": pem("tls.crt"), "key": pem("tls.key"),
            "links": [mapping(link, "spec").get("endpoints") for link in links],
            "voucher": voucher if isinstance(voucher, str) else None})
    except ValidationError as e:
        first = e.errors(include_input=False)[0]
        raise AnswerProblem(f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"[:300]) from None


def link_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a Link and its Secret here (a DNS-1035 label keeps both valid), or None."""
    if problem := dns1035_label_problem(name):
        return f"{quoted(name)} cannot name a Link: {problem}"
    return None


def link_objects(namespace: str, name: str, answer: RedeemAnswer, *, cost: int, annotations: Mapping[str, str],
                 owners: list[JsonDict] | None = None) -> list[JsonDict]:
    """The Secret ``name`` (client certificate, key, remote CA) and the Links that use it (``name``, ``name-2``,
    ...), all owned by ``owners`` (the redeeming Site: they go with it)."""
    def metadata(object_name: str) -> JsonDict:
        out: JsonDict = {"name": object_name, "namespace": namespace, "annotations": dict(annotations)}
        if owners:
            out["ownerReferences"] = [dict(o) for o in owners]
        return out

    secret = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls", "metadata": metadata(name),
              "data": _tls_data(answer)}
    links = [{"apiVersion": GROUP_VERSION, "kind": "Link", "metadata": metadata(link_name),
              "spec": {"endpoints": [e.as_spec() for e in endpoints], "tlsCredentials": name, "cost": max(1, cost)}}
             for link_name, endpoints in zip(link_names(name, len(answer.links)), answer.links, strict=True)]
    return [secret, *links]
