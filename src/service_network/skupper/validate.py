"""The checks of ``skupper`` arguments and flags, with upstream's messages (pure). Each returns the problem's text
(to follow a command-specific prefix such as ``listener name is not valid: ``) or None."""

from __future__ import annotations

import datetime
import re

from .formats import go_duration

__all__ = ["HOST_RE", "NAME_RE", "SELECTOR_RE", "duration_at_least", "file_name_problem", "host_problem",
           "name_problem", "number_problem", "option_problem", "selector_problem", "workload_parts"]

NAME_RE = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])*(\.[a-z0-9]([-a-z0-9]*[a-z0-9])*)*$"
SELECTOR_RE = r"^[A-Za-z0-9=:./-]+$"
FILE_RE = r"^[A-Za-z0-9./~-]+$"
HOST_RE = r"^[a-z0-9]+([-.]{1}[a-z0-9]+)*$"
WORKLOAD_NAME_RE = r"^[A-Za-z0-9._-]+$"
WORKLOAD_TYPES = ("deployment", "service", "daemonset", "statefulset")
MAX_TEXT = 253


def _regex_problem(value: str, pattern: str) -> str | None:
    if len(value) > MAX_TEXT or not re.fullmatch(pattern, value):
        return f"value does not match this regular expression: {pattern}"
    return None


def name_problem(value: str) -> str | None:
    return _regex_problem(value, NAME_RE)


def selector_problem(value: str) -> str | None:
    return _regex_problem(value, SELECTOR_RE)


def file_name_problem(value: str) -> str | None:
    return _regex_problem(value, FILE_RE)


def host_problem(value: str) -> str | None:
    import ipaddress
    try:
        ipaddress.ip_address(value)
        return None
    except ValueError:
        pass
    return None if len(value) <= MAX_TEXT and re.fullmatch(HOST_RE, value) else \
        "a valid IP address or hostname is expected"


def number_problem(text: str) -> tuple[int | None, str | None]:
    """(the number, None) or (None, the problem), for a port or a cost given as text."""
    try:
        value = int(text)
    except ValueError:
        return None, f'strconv.Atoi: parsing "{text[:64]}": invalid syntax'
    if value < 0:
        return None, "value is not positive"
    return value, None


def option_problem(value: str, options: tuple[str, ...]) -> str | None:
    if not value:
        return "value must not be empty"
    if value not in options:
        return f"value {value[:64]} not allowed. It should be one of this options: [{' '.join(options)}]"
    return None


def duration_at_least(value: datetime.timedelta, minimum: datetime.timedelta) -> str | None:
    if value < minimum:
        return f"duration must not be less than {go_duration(minimum)}; got {go_duration(value)}"
    return None


def workload_parts(value: str) -> tuple[str, str] | str:
    """(resource type, name) of ``--workload``, or the problem."""
    kind, sep, name = value.partition("/")
    if not sep or not kind or not name:
        return "workload must include <resource-type>/<resource-name>"
    if kind.lower() not in WORKLOAD_TYPES:
        return "resource-type does not match expected value: deployment/service/daemonset/statefulset"
    if problem := _regex_problem(name, WORKLOAD_NAME_RE):
        return problem
    return kind.lower(), name
