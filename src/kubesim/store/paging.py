"""Continue tokens for paged LISTs (`limit`/`continue`), with the apiserver's error answers.

A token is opaque to clients; it carries the revision the first page was read at and the last key served, so the
store can serve every later page as of that revision. Revision `INCONSISTENT` marks the token handed out with a
410: it continues from the same key but at whatever the current revision is, as the apiserver's does.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass

from kubesim import errors
from kubesim.errors import ApiError

TOKEN_VERSION = "kubesim/v1"
INCONSISTENT = -1  # "read at the latest revision": the continuation a 410 Expired offers

TOO_OLD_MESSAGE = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new list "
    "without the continue parameter, or use the continue token in this response to retrieve the remainder of the "
    "results. Continuing with the provided token results in an inconsistent list - objects that were created, "
    "modified, or deleted between the time the first chunk was returned and now may show up in the list."
)

Key = tuple[str, str]  # (namespace or "", name): the order pages are served in


@dataclass(frozen=True)
class Continuation:
    revision: int  # a past revision, or INCONSISTENT
    after: Key  # the last key already served


def encode(revision: int, after: Key) -> str:
    raw = json.dumps({"v": TOKEN_VERSION, "rv": revision, "start": list(after)}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _invalid(why: str) -> ApiError:
    return errors.bad_request(f"continue key is not valid: {why}")


def decode(token: str, current_revision: int) -> Continuation:
    """Parse a client's token; 400 BadRequest for anything this server did not hand out."""
    try:
        raw = base64.urlsafe_b64decode(token.encode("ascii") + b"=" * (-len(token) % 4))
        data = json.loads(raw)
    except (ValueError, binascii.Error, UnicodeError):
        raise _invalid("not a continue token issued by this server") from None
    if not isinstance(data, dict) or data.get("v") != TOKEN_VERSION:
        raise _invalid("server does not recognize this encoded version")
    rv, start = data.get("rv"), data.get("start")
    if type(rv) is not int or (rv < 1 and rv != INCONSISTENT):
        raise _invalid("incorrect encoded start resourceVersion")
    if rv > current_revision:
        raise _invalid(f"resourceVersion {rv} is newer than the server's ({current_revision})")
    if not (isinstance(start, list) and len(start) == 2 and all(isinstance(p, str) for p in start)):
        raise _invalid("incorrect encoded start key")
    if not start[1]:
        raise _invalid("incorrect encoded start key")
    return Continuation(rv, (start[0], start[1]))


def expired(after: Key) -> ApiError:
    """410 Expired for a token whose revision left the retained window, offering an inconsistent continuation."""
    return errors.gone(TOO_OLD_MESSAGE, list_meta={"continue": encode(INCONSISTENT, after)})
