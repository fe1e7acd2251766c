"""Checks for every value that the node driver turns into a path component or a file.

Port names and addresses come from API objects that users (or anyone allowed to write a Listener status or a Pod)
control, and they become directory and file names inside a Pod's volume. Upstream writes them verbatim, so an
address like ``../../etc`` would escape the volume. Here every such value is validated before anything is written,
and the target path kubelet passes in must lie under the configured kubelet directory.
"""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path

__all__ = [
    "InvalidVolumeInput",
    "check_address",
    "check_port_name",
    "check_port_number",
    "resolve_target_path",
]

# RFC 1123 label, as Kubernetes uses for Service port names (IANA service names are a subset of these).
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
# One label of a DNS name; host names are case-insensitive, so upper case is accepted here.
_HOST_LABEL = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?")
_MAX_DNS_NAME = 253


class InvalidVolumeInput(ValueError):
    """A value that must not reach the volume (reported as INVALID_ARGUMENT)."""


def check_port_name(name: object) -> str:
    """Return ``name`` if it is a valid Service port name (an RFC 1123 label of at most 63 characters)."""
    if not isinstance(name, str) or not _DNS_LABEL.fullmatch(name):
        raise InvalidVolumeInput(
            f"port name {name!r} is not a valid port name "
            "(lower-case letters, digits and '-', starting and ending with a letter or digit, at most 63 characters)")
    return name


def check_port_number(port: object) -> int:
    """Return ``port`` if it is an integer TCP/UDP port (1-65535)."""
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise InvalidVolumeInput(f"port {port!r} is not a port number between 1 and 65535")
    return port


def check_address(address: object) -> str:
    """Return ``address`` if it is an IPv4/IPv6 address in canonical text form or a DNS name."""
    if not isinstance(address, str) or not address:
        raise InvalidVolumeInput(f"address {address!r} is neither an IP address nor a DNS name")
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        pass
    else:
        if str(ip) != address:
            # e.g. "::ffff:1.2.3.4" spelled differently; one canonical directory name per address.
            raise InvalidVolumeInput(f"IP address {address!r} is not in canonical form ({ip})")
        return address
    labels = address.split(".")
    if len(address) > _MAX_DNS_NAME or not all(_HOST_LABEL.fullmatch(label) for label in labels):
        raise InvalidVolumeInput(f"address {address!r} is neither an IP address nor a DNS name")
    return address


def resolve_target_path(target_path: str, kubelet_dir: Path) -> Path:
    """Resolve kubelet's target path and require it to lie strictly inside ``kubelet_dir``.

    Symbolic links are resolved first (also for a target that does not exist yet), so a link planted inside the
    kubelet directory cannot redirect the driver elsewhere.
    """
    if not target_path:
        raise InvalidVolumeInput("target path is empty")
    if "\x00" in target_path:
        raise InvalidVolumeInput("target path contains a NUL byte")
    if not os.path.isabs(target_path):
        raise InvalidVolumeInput(f"target path {target_path!r} is not absolute")
    base = Path(os.path.realpath(kubelet_dir))
    resolved = Path(os.path.realpath(target_path))
    if resolved == base or not resolved.is_relative_to(base):
        raise InvalidVolumeInput(
            f"target path {target_path!r} resolves to {str(resolved)!r}, which is not inside the kubelet directory "
            f"{str(base)!r}")
    return resolved
