"""The address files inside a listener volume, replaced atomically.

Layout seen by the Pod (behaviour.md "Volume files"), with one level of indirection so that a publish swaps the whole tree at once::

    addresses        -> ..data/addresses
    default-address  -> ..data/default-address
    ..data           -> ..v-<content digest>
    ..v-<digest>/addresses/<address>/address          the address, no trailing newline
    ..v-<digest>/addresses/<address>/ports/<name>     the exposed port number, no trailing newline
    ..v-<digest>/default-address -> addresses/<first address>

The new version is built in a hidden temporary sibling directory and published by renaming one symbolic link
(``..data``), so a reader resolving ``addresses/...`` or ``default-address/...`` sees either the old or the new tree,
never a half-written one; versions that are no longer current, and with them addresses that are gone, are removed
afterwards (upstream keeps stale ``addresses/<old>`` directories; behaviour.md "Atomic volume files"). Kubernetes' own ConfigMap volumes use
the same swap idea; it is written out here because no library offers it. All symbolic links are relative, so the
tree stays valid wherever the container runtime mounts the volume.

Every operation is relative to a descriptor of the target directory (or of a directory the driver just created and
holds open) and names a single path component, so no symbolic link found in the volume is followed, even one a
container swaps in while a version is being built.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import secrets
import shutil
import stat
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from listener_operator.csi_server.validation import (
    InvalidVolumeInput,
    check_address,
    check_port_name,
    check_port_number,
)

__all__ = ["DATA_LINK", "VERSION_PREFIX", "PublishedAddress", "published_addresses", "remove_tree",
           "write_address_tree"]

DATA_LINK = "..data"
ADDRESSES = "addresses"
DEFAULT_ADDRESS = "default-address"
VERSION_PREFIX = "..v-"
_HIDDEN_PREFIX = ".."


@dataclass(frozen=True)
class PublishedAddress:
    """One address of the Pod and the exposed port per port name, both already validated."""

    address: str
    ports: Mapping[str, int] = field(default_factory=dict)


def published_addresses(ingress_addresses: Iterable[Mapping[str, object]]) -> list[PublishedAddress]:
    """Validate Listener-style ingress addresses (``{address, addressType, ports}``) for writing into a volume.

    Raises :class:`InvalidVolumeInput` naming the first offending value. Repeated addresses are merged (their port
    maps combined) because they would map to the same directory.
    """
    merged: dict[str, dict[str, int]] = {}
    for entry in ingress_addresses:
        address = check_address(entry.get("address"))
        ports = entry.get("ports") or {}
        if not isinstance(ports, Mapping):
            raise InvalidVolumeInput(f"ports of address {address} are not a map of port name to number")
        target = merged.setdefault(address, {})
        for name, number in ports.items():
            target[check_port_name(name)] = check_port_number(number)
    return [PublishedAddress(address, ports) for address, ports in merged.items()]


def _digest(addresses: Sequence[PublishedAddress]) -> str:
    canonical = json.dumps([[a.address, sorted(a.ports.items())] for a in addresses], separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:20]


def _readlink(name: str, dir_fd: int) -> str | None:
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError:
        return None


def _is_dir(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return False


def _write_file(name: str, content: str, dir_fd: int) -> None:
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=dir_fd)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(content)


@contextlib.contextmanager
def _new_dir(name: str, dir_fd: int) -> Iterator[int]:
    """Create directory ``name`` in ``dir_fd`` and hold it open: everything below is created relative to this
    descriptor, so a symbolic link swapped in for a path component meanwhile is never followed."""
    os.mkdir(name, 0o755, dir_fd=dir_fd)
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
    try:
        yield fd
    finally:
        os.close(fd)


def _remove(name: str, dir_fd: int) -> None:
    """Remove a file, link or directory tree relative to ``dir_fd``; a missing entry is fine."""
    try:
        if _is_dir(name, dir_fd):
            shutil.rmtree(name, dir_fd=dir_fd)
        else:
            os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass


def _retire(name: str, dir_fd: int) -> None:
    """Remove an old version: first rename it away in one step, so a reader still using its path gets "not found"
    and re-resolves, instead of listing a directory that is being emptied."""
    doomed = f"{_HIDDEN_PREFIX}del-{secrets.token_hex(6)}"
    try:
        os.rename(name, doomed, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except FileNotFoundError:
        return
    _remove(doomed, dir_fd)


def _set_link(name: str, link_target: str, dir_fd: int) -> bool:
    """Point the symbolic link ``name`` at ``link_target`` with one atomic rename; False if it already does."""
    if _readlink(name, dir_fd) == link_target:
        return False
    if _is_dir(name, dir_fd):
        # A real directory (e.g. a tree written by the upstream driver) cannot be replaced by rename; move it aside,
        # the cleanup pass removes it.
        os.rename(name, f"{_HIDDEN_PREFIX}old-{secrets.token_hex(6)}", src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    temporary = f"{_HIDDEN_PREFIX}link-{secrets.token_hex(6)}"
    os.symlink(link_target, temporary, dir_fd=dir_fd)
    os.replace(temporary, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    return True


def _build_version(dir_fd: int, addresses: Sequence[PublishedAddress]) -> str:
    building = f"{_HIDDEN_PREFIX}tmp-{secrets.token_hex(8)}"
    with _new_dir(building, dir_fd) as version_fd:
        with _new_dir(ADDRESSES, version_fd) as addresses_fd:
            for entry in addresses:
                with _new_dir(entry.address, addresses_fd) as address_fd:
                    _write_file("address", entry.address, address_fd)
                    with _new_dir("ports", address_fd) as ports_fd:
                        for port_name, port in entry.ports.items():
                            _write_file(port_name, str(port), ports_fd)
        if addresses:
            os.symlink(f"{ADDRESSES}/{addresses[0].address}", DEFAULT_ADDRESS, dir_fd=version_fd)
    return building


def write_address_tree(target: Path, addresses: Sequence[PublishedAddress]) -> bool:
    """Make ``target`` show exactly ``addresses``; returns False when it already did (nothing was written).

    ``target`` must already be validated (see ``validation.resolve_target_path``); it is created if missing. The
    first address becomes ``default-address``.
    """
    for entry in addresses:  # PublishedAddress can be built by hand: never trust it blindly
        check_address(entry.address)
        for port_name, port in entry.ports.items():
            check_port_name(port_name)
            check_port_number(port)
    os.makedirs(target, mode=0o755, exist_ok=True)
    dir_fd = os.open(target, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        version = f"{VERSION_PREFIX}{_digest(addresses)}"
        changed = False
        if not (_readlink(DATA_LINK, dir_fd) == version and _is_dir(version, dir_fd)):
            building = _build_version(dir_fd, addresses)
            _remove(version, dir_fd)  # a leftover of an interrupted publish with the same content
            os.rename(building, version, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            _set_link(DATA_LINK, version, dir_fd)
            changed = True
        changed |= _set_link(ADDRESSES, f"{DATA_LINK}/{ADDRESSES}", dir_fd)
        if addresses:
            changed |= _set_link(DEFAULT_ADDRESS, f"{DATA_LINK}/{DEFAULT_ADDRESS}", dir_fd)
        elif _readlink(DEFAULT_ADDRESS, dir_fd) is not None or _is_dir(DEFAULT_ADDRESS, dir_fd):
            _remove(DEFAULT_ADDRESS, dir_fd)
            changed = True
        for name in os.listdir(dir_fd):
            if name.startswith(_HIDDEN_PREFIX) and name not in (DATA_LINK, version):
                _retire(name, dir_fd)
                changed = True
        return changed
    finally:
        os.close(dir_fd)


def remove_tree(target: Path) -> None:
    """Remove the volume directory and everything in it; a missing directory is fine (NodeUnpublishVolume)."""
    try:
        mode = os.stat(target, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(target)
    else:
        try:
            os.unlink(target)
        except OSError as error:
            if error.errno != errno.ENOENT:
                raise
