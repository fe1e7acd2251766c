"""The string ``format``s a CRD schema may check (``date-time``, ``date``, ``uuid``, ``ipv4``, ``ipv6``, ``cidr``,
``byte``): one predicate per format; unknown formats are not checked, as the apiserver does."""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from collections.abc import Callable
from datetime import date, datetime


def _valid_datetime(text: str) -> bool:
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})", text):
        return False
    try:
        datetime.fromisoformat(text.replace("z", "Z").replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def _valid_date(text: str) -> bool:
    try:
        date.fromisoformat(text)
    except ValueError:
        return False
    return bool(re.fullmatch(r"\d{4}-\d{2}-\d{2}", text))


def _valid_ip(version: int) -> Callable[[str], bool]:
    def check(text: str) -> bool:
        try:
            return ipaddress.ip_address(text).version == version
        except ValueError:
            return False

    return check


def _valid_cidr(text: str) -> bool:
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        return False
    return "/" in text


def _valid_base64(text: str) -> bool:
    try:
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


STRING_FORMATS: dict[str, Callable[[str], bool]] = {
    "date-time": _valid_datetime,
    "date": _valid_date,
    "uuid": lambda t: re.fullmatch(r"(?i)[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}", t) is not None,
    "ipv4": _valid_ip(4),
    "ipv6": _valid_ip(6),
    "cidr": _valid_cidr,
    "byte": _valid_base64,
}
