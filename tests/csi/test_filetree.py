"""The address tree a Pod reads: content, atomic replacement, stale-address removal, hostile input."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from listener_operator.csi_server.filetree import (
    PublishedAddress,
    published_addresses,
    remove_tree,
    write_address_tree,
)
from listener_operator.csi_server.validation import InvalidVolumeInput


def read_tree(target: Path) -> dict[str, dict[str, str]]:
    """What a consumer sees: address -> {"address": ..., port name: port}."""
    result: dict[str, dict[str, str]] = {}
    for entry in sorted(os.listdir(target / "addresses")):
        base = target / "addresses" / entry
        files = {"address": (base / "address").read_text()}
        for port in os.listdir(base / "ports"):
            files[port] = (base / "ports" / port).read_text()
        result[entry] = files
    return result


def test_tree_matches_upstream_layout(tmp_path: Path) -> None:
    target = tmp_path / "mount"
    write_address_tree(target, [PublishedAddress("203.0.113.7", {"http": 31234})])
    assert (target / "addresses" / "203.0.113.7" / "address").read_text() == "203.0.113.7"
    assert (target / "addresses" / "203.0.113.7" / "ports" / "http").read_text() == "31234"
    assert (target / "default-address" / "address").read_text() == "203.0.113.7"
    assert (target / "default-address" / "ports" / "http").read_text() == "31234"
    assert not os.path.isabs(os.readlink(target / "default-address"))
    assert not os.path.isabs(os.readlink(target / "addresses"))
    assert os.path.realpath(target / "default-address") == os.path.realpath(target / "addresses" / "203.0.113.7")


def test_first_address_is_default_and_all_addresses_are_listed(tmp_path: Path) -> None:
    target = tmp_path / "mount"
    write_address_tree(target, [PublishedAddress("lb.example.com", {"http": 80}),
                                PublishedAddress("198.51.100.1", {"http": 80, "https": 443})])
    assert read_tree(target) == {
        "198.51.100.1": {"address": "198.51.100.1", "http": "80", "https": "443"},
        "lb.example.com": {"address": "lb.example.com", "http": "80"},
    }
    assert (target / "default-address" / "address").read_text() == "lb.example.com"


def test_republish_removes_stale_addresses(tmp_path: Path) -> None:
    target = tmp_path / "mount"
    write_address_tree(target, [PublishedAddress("10.0.0.1", {"http": 30001})])
    write_address_tree(target, [PublishedAddress("10.0.0.2", {"http": 30002})])
    assert read_tree(target) == {"10.0.0.2": {"address": "10.0.0.2", "http": "30002"}}
    assert (target / "default-address" / "address").read_text() == "10.0.0.2"
    # only the current version remains as hidden state
    assert sorted(n for n in os.listdir(target) if n.startswith("..")) == ["..data", os.readlink(target / "..data")]


def test_same_content_writes_nothing(tmp_path: Path) -> None:
    target = tmp_path / "mount"
    addresses = [PublishedAddress("10.0.0.1", {"http": 30001})]
    assert write_address_tree(target, addresses) is True
    before = os.stat(target / "..data", follow_symlinks=False).st_mtime_ns
    assert write_address_tree(target, addresses) is False
    assert os.stat(target / "..data", follow_symlinks=False).st_mtime_ns == before


def test_upstream_written_tree_is_replaced(tmp_path: Path) -> None:
    """A volume pre-populated by the upstream driver (real directories, direct symlink) is taken over cleanly."""
    target = tmp_path / "mount"
    (target / "addresses" / "10.9.9.9" / "ports").mkdir(parents=True)
    (target / "addresses" / "10.9.9.9" / "address").write_text("10.9.9.9")
    (target / "default-address").symlink_to("addresses/10.9.9.9")
    write_address_tree(target, [PublishedAddress("10.0.0.1", {"http": 30001})])
    assert read_tree(target) == {"10.0.0.1": {"address": "10.0.0.1", "http": "30001"}}
    assert (target / "default-address" / "address").read_text() == "10.0.0.1"


def test_planted_symlinks_are_replaced_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    target = tmp_path / "mount"
    target.mkdir()
    (target / "addresses").symlink_to(outside)
    (target / "..data").symlink_to(outside)
    write_address_tree(target, [PublishedAddress("10.0.0.1", {"http": 30001})])
    assert os.listdir(outside) == []
    assert read_tree(target) == {"10.0.0.1": {"address": "10.0.0.1", "http": "30001"}}


def test_a_link_swapped_in_while_building_is_not_followed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A container owning the volume races the driver: while the new version is being built, it replaces the
    half-built directory by a link to a look-alike tree elsewhere. The driver keeps writing into the directory it
    created (it works through open descriptors), never into the look-alike."""
    target = tmp_path / "mount"
    target.mkdir()
    outside = tmp_path / "outside"
    (outside / "addresses" / "10.0.0.1" / "ports").mkdir(parents=True)
    real_mkdir = os.mkdir
    swapped: list[str] = []

    def racing_mkdir(path: str, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
        real_mkdir(path, mode, dir_fd=dir_fd)
        if os.path.basename(path) == "ports" and not swapped:
            (building,) = [n for n in os.listdir(target) if n.startswith("..tmp-")]
            os.rename(target / building, target / "..moved")
            os.symlink(outside, target / building)
            swapped.append(building)

    monkeypatch.setattr(os, "mkdir", racing_mkdir)
    write_address_tree(target, [PublishedAddress("10.0.0.1", {"http": 30001})])
    assert swapped
    assert os.listdir(outside / "addresses" / "10.0.0.1" / "ports") == []
    assert os.listdir(outside / "addresses" / "10.0.0.1") == ["ports"]


def test_hostile_addresses_write_nothing(tmp_path: Path) -> None:
    target = tmp_path / "mount"
    with pytest.raises(InvalidVolumeInput):
        write_address_tree(target, [PublishedAddress("10.0.0.1", {"http": 1}), PublishedAddress("../x", {})])
    with pytest.raises(InvalidVolumeInput):
        write_address_tree(target, [PublishedAddress("10.0.0.1", {"../../etc/passwd": 1})])
    assert not target.exists()
    assert os.listdir(tmp_path) == []


def test_published_addresses_validates_listener_status_shape() -> None:
    status = [{"address": "10.0.0.1", "addressType": "IP", "ports": {"http": 30001}},
              {"address": "10.0.0.1", "addressType": "IP", "ports": {"https": 30002}}]
    assert published_addresses(status) == [PublishedAddress("10.0.0.1", {"http": 30001, "https": 30002})]
    with pytest.raises(InvalidVolumeInput, match="port name"):
        published_addresses([{"address": "10.0.0.1", "ports": {"a/b": 1}}])
    with pytest.raises(InvalidVolumeInput, match="neither an IP"):
        published_addresses([{"address": "../..", "ports": {}}])


def test_reader_never_sees_a_half_written_tree(tmp_path: Path) -> None:
    """While one thread alternates between two complete trees, every version a reader finds published is complete.

    The reader resolves ``..data`` once and reads everything through that version (``default-address`` too: the
    top-level link only names ``..data/default-address``, which resolves anew on each read), checking afterwards
    that the version was still the published one (same link, same directory inode): reads that overlapped a swap
    are retried, as with any lock-free reader. Versions are named by content, so a retired version can come back
    under its name while a read is under way; it comes back complete (built aside, then renamed), which is what
    makes reads through the version's name safe. An in-place or non-atomic writer fails this test, because the version
    it publishes is incomplete while it is current.
    """
    target = tmp_path / "mount"
    trees = [
        [PublishedAddress(f"10.0.{n}.{i}", {f"p{j}": 30000 + n * 100 + j for j in range(5)}) for i in range(4)]
        for n in range(2)
    ]
    expected = [
        {a.address: {"address": a.address, **{k: str(v) for k, v in a.ports.items()}} for a in tree}
        for tree in trees
    ]
    write_address_tree(target, trees[0])
    stop = threading.Event()

    def writer() -> None:
        n = 0
        while not stop.is_set():
            n ^= 1
            write_address_tree(target, trees[n])

    def published() -> tuple[str, int]:
        link = os.readlink(target / "..data")
        return link, os.stat(target / link).st_ino

    thread = threading.Thread(target=writer)
    thread.start()
    consistent_reads = 0
    try:
        for _ in range(500):
            try:
                before = published()
                snapshot = read_tree(target / before[0])
                default = (target / before[0] / "default-address" / "address").read_text()
                after = published()
            except FileNotFoundError:
                continue  # the version was retired while reading: re-resolve
            if before != after:
                continue
            assert snapshot in expected
            assert default == next(iter(snapshot))  # default-address points into the same published version
            assert os.readlink(target / "default-address") == "..data/default-address"
            consistent_reads += 1
    finally:
        stop.set()
        thread.join()
    assert consistent_reads > 0


def test_remove_tree_is_idempotent(tmp_path: Path) -> None:
    target = tmp_path / "mount"
    write_address_tree(target, [PublishedAddress("10.0.0.1", {"http": 30001})])
    remove_tree(target)
    assert not target.exists()
    remove_tree(target)
