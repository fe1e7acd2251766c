"""Kubernetes' grammar for the names the product checks before it uses them (apimachinery's validation rules).

A Listener's name becomes a Service name and a label value; port names become Service port names and file names;
object names become parts of API URLs. Each rule is here once, as a pattern and a check.
"""

from __future__ import annotations

import re

from listener_operator.messages import brief

__all__ = [
    "DNS1035_LABEL_PATTERN",
    "DNS1123_LABEL_PATTERN",
    "LABEL_MAX",
    "SUBDOMAIN_MAX",
    "is_dns1123_label",
    "is_dns1123_subdomain",
    "label_value_problem",
    "qualified_name_problem",
    "service_name_problem",
]

#: At most this many characters in a DNS-1123/1035 label (and a label value).
LABEL_MAX = 63
#: At most this many characters in a DNS-1123 subdomain (object names).
SUBDOMAIN_MAX = 253

#: A DNS-1123 label (Service port names): lowercase alphanumerics and '-', starting and ending alphanumeric.
DNS1123_LABEL_PATTERN = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
#: A DNS-1035 label (Service names): like DNS-1123 but starting with a letter.
DNS1035_LABEL_PATTERN = "^[a-z]([-a-z0-9]*[a-z0-9])?$"

_DNS1035_LABEL = re.compile(DNS1035_LABEL_PATTERN)
_DNS1123_LABEL = re.compile(DNS1123_LABEL_PATTERN)
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_QUALIFIED_NAME_PART = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")


def is_dns1123_label(name: str) -> bool:
    return len(name) <= LABEL_MAX and _DNS1123_LABEL.fullmatch(name) is not None


def is_dns1123_subdomain(name: str) -> bool:
    return len(name) <= SUBDOMAIN_MAX and _DNS1123_SUBDOMAIN.fullmatch(name) is not None


def service_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a Service (a DNS-1035 label of at most 63 characters), or None if it can. A Listener's
    name must pass: it names the Listener's Service and is the value of the PV and Pod labels."""
    if len(name) <= LABEL_MAX and _DNS1035_LABEL.fullmatch(name):
        return None
    return (f"{brief(name)} is not a valid Service name (DNS-1035 label: lowercase letters, digits and '-', "
            f"starting with a letter, at most {LABEL_MAX} characters)")


def qualified_name_problem(key: str) -> str | None:
    """Why ``key`` is not a valid label/annotation key (``[prefix/]name``), or None if it is."""
    prefix, slash, name = key.rpartition("/")
    if slash and not prefix:
        return "the prefix before '/' is empty"
    if slash and not is_dns1123_subdomain(prefix):
        return f"prefix {brief(prefix)} is not a DNS subdomain (lowercase, at most {SUBDOMAIN_MAX} characters)"
    if not name:
        return "the name part is empty"
    if len(name) > LABEL_MAX:
        return f"the name part is longer than {LABEL_MAX} characters"
    if not _QUALIFIED_NAME_PART.fullmatch(name):
        return "the name part must be alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
    return None


def label_value_problem(value: str) -> str | None:
    """Why ``value`` is not a valid label value (as a phrase after the value), or None if it is."""
    if len(value) > LABEL_MAX:
        return f"is longer than {LABEL_MAX} characters"
    if not _LABEL_VALUE.fullmatch(value):
        return "must be empty or alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
    return None
