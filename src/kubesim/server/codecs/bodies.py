"""Request body decoding: JSON, or YAML for apply patches, with the limits a shared server needs.

YAML aliases are refused: a few kilobytes of nested aliases expand into gigabytes once the object is copied or
serialised ("billion laughs"); kubectl and the client libraries never send them (they send JSON).
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from kubesim import errors


class _NoAliasLoader(yaml.SafeLoader):
    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(None, None, "YAML aliases are not accepted", event.start_mark)
        return super().compose_node(parent, index)


def decode(raw: bytes, *, yaml_allowed: bool, what: str = "the body of the request") -> Any:
    """Parse `raw` (JSON first; YAML when allowed); `ApiError` 400 on anything undecodable or too deep."""
    if not raw.strip():
        raise errors.bad_request(f"{what} is empty")
    try:
        return json.loads(raw)
    except RecursionError:
        raise errors.bad_request(f"{what} is nested too deeply") from None
    except ValueError as e:
        if not yaml_allowed:
            raise errors.bad_request(f"{what} could not be decoded: {e}") from None
    try:
        return yaml.load(raw, Loader=_NoAliasLoader)
    except RecursionError:
        raise errors.bad_request(f"{what} is nested too deeply") from None
    except yaml.YAMLError as e:
        raise errors.bad_request(f"{what} could not be decoded: {e}") from None
