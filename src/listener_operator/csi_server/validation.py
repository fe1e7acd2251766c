"""Checks for every value that the node driver turns into a path component or a file.

Port names and addresses come from API objects that users (or anyone allowed to write a Listener status or a Pod)
control, and they become directory and file names inside a Pod's volume. Upstream writes them verbatim, so an
address like ``../../etc`` would escape the volume. Here every such value is validated before anything is written,
and the target path kubelet passes in must be a CSI volume directory in kubelet's layout under the configured kubelet
directory.
"""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass
from pathlib import Path

from listener_operator.messages import brief
from listener_operator.names import is_dns1123_label

__all__ = [
    "InvalidVolumeInput",
    "VolumeTarget",
    "check_address",
    "check_port_name",
    "check_port_number",
    "resolve_target_path",
]

# One label of a DNS name; host names are case-insensitive, so upper case is accepted here.
_HOST_LABEL = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?")
_MAX_DNS_NAME = 253
# kubelet's directory of a CSI volume, relative to the kubelet directory; None: any single safe component.
_KUBELET_LAYOUT: tuple[str | None, ...] = ("pods", None, "volumes", "kubernetes.io~csi", None, "mount")
# A Pod uid or a volume (PV) name as a path component: no '..', no separators, no hidden names.
_PATH_LIMIT = 300  # paths are quoted in messages up to this many characters
_SAFE_COMPONENT = re.compile(r"[A-Za-z0-9][-A-Za-z0-9_.~]{0,252}")


class InvalidVolumeInput(ValueError):
    """A value that must not reach the volume (reported as INVALID_ARGUMENT)."""


def check_port_name(name: object) -> str:
    """Return ``name`` if it is a valid Service port name (an RFC 1123 label of at most 63 characters)."""
    # RFC 1123 label, as Kubernetes uses for Service port names (IANA service names are a subset of these).
    if not isinstance(name, str) or not is_dns1123_label(name):
        raise InvalidVolumeInput(
            f"port name {brief(name)} is not a valid port name "
            "(lower-case letters, digits and '-', starting and ending with a letter or digit, at most 63 characters)")
    return name


def check_port_number(port: object) -> int:
    """Return ``port`` if it is an integer TCP/UDP port (1-65535)."""
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise InvalidVolumeInput(f"port {brief(port)} is not a port number between 1 and 65535")
    return port


def check_address(address: object) -> str:
    """Return ``address`` if it is an IPv4/IPv6 address in canonical text form or a DNS name."""
    if not isinstance(address, str) or not address:
        raise InvalidVolumeInput(f"address {brief(address)} is neither an IP address nor a DNS name")
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        pass
    else:
        if str(ip) != address:
            # e.g. "::ffff:1.2.3.4" spelled differently; one canonical directory name per address.
            raise InvalidVolumeInput(f"IP address {brief(address)} is not in canonical form ({ip})")
        return address
    labels = address.split(".")
    if len(address) > _MAX_DNS_NAME or not all(_HOST_LABEL.fullmatch(label) for label in labels):
        raise InvalidVolumeInput(f"address {brief(address)} is neither an IP address nor a DNS name")
    return address


@dataclass(frozen=True)
class VolumeTarget:
    """A target path kubelet handed in, resolved and in kubelet's layout
    ``<kubelet dir>/pods/<pod uid>/volumes/kubernetes.io~csi/<volume>/mount``."""

    path: Path
    pod_uid: str
    volume: str


def resolve_target_path(target_path: str, kubelet_dir: Path) -> VolumeTarget:
    """Resolve kubelet's target path and require kubelet's layout for a CSI volume under ``kubelet_dir``
    (behaviour.md "Target paths").

    Symbolic links are resolved first (also for a target that does not exist yet), so a link planted inside the
    kubelet directory cannot redirect the driver elsewhere. Any other path inside the kubelet directory is refused
    as well: ``<kubelet>/pods`` holds every Pod's data, and ``.../kubernetes.io~configmap/...`` another volume's.
    """
    if not target_path:
        raise InvalidVolumeInput("target path is empty")
    if "\x00" in target_path:
        raise InvalidVolumeInput("target path contains a NUL byte")
    if not os.path.isabs(target_path):
        raise InvalidVolumeInput(f"target path {brief(target_path, _PATH_LIMIT)} is not absolute")
    base = Path(os.path.realpath(kubelet_dir))
    resolved = Path(os.path.realpath(target_path))
    if resolved == base or not resolved.is_relative_to(base):
        raise InvalidVolumeInput(
            f"target path {brief(target_path, _PATH_LIMIT)} resolves to {brief(str(resolved), _PATH_LIMIT)}, which is not inside the kubelet "
            f"directory {brief(str(base), _PATH_LIMIT)}")
    parts = resolved.relative_to(base).parts
    if (len(parts) != len(_KUBELET_LAYOUT)
            or any(expected is not None and part != expected for part, expected in zip(parts, _KUBELET_LAYOUT, strict=True))
            or not all(_SAFE_COMPONENT.fullmatch(part) for part in parts)):
        raise InvalidVolumeInput(
            f"target path {brief(target_path, _PATH_LIMIT)} is not a CSI volume directory in kubelet's layout "
            "<kubelet dir>/pods/<pod uid>/volumes/kubernetes.io~csi/<volume>/mount")
    return VolumeTarget(resolved, pod_uid=parts[1], volume=parts[4])
