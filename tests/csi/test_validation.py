"""Hostile values never become path components in a listener volume."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from listener_operator.csi_server.validation import (
    InvalidVolumeInput,
    check_address,
    check_port_name,
    check_port_number,
    resolve_target_path,
)


@pytest.mark.parametrize("name", ["http", "port-8080", "a", "x" * 63, "9092"])
def test_valid_port_names_pass(name: str) -> None:
    assert check_port_name(name) == name


@pytest.mark.parametrize("name", ["", "..", ".", "a/b", "../etc", "HTTP", "-http", "http-", "x" * 64, "a b",
                                  "a\x00b", 5])
def test_hostile_port_names_are_refused(name: object) -> None:
    with pytest.raises(InvalidVolumeInput, match="port name"):
        check_port_name(name)


@pytest.mark.parametrize("address", ["203.0.113.7", "2001:db8::1", "node-1", "my-svc.ns.svc.cluster.local",
                                     "LB.Example.com"])
def test_valid_addresses_pass(address: str) -> None:
    assert check_address(address) == address


@pytest.mark.parametrize("address", ["", ".", "..", "../../etc", "a/b", "a..b", ".hidden", "host.", "-x.example",
                                     "x" * 64 + ".example", "2001:DB8::1", "1.2.3.4/32", "a\nb", None, 42])
def test_hostile_addresses_are_refused(address: object) -> None:
    with pytest.raises(InvalidVolumeInput):
        check_address(address)


@pytest.mark.parametrize("port", [0, 65536, -1, "80", True, 1.5])
def test_bad_port_numbers_are_refused(port: object) -> None:
    with pytest.raises(InvalidVolumeInput):
        check_port_number(port)


def test_target_in_kubelet_layout_resolves(tmp_path: Path) -> None:
    kubelet = tmp_path / "kubelet"
    (kubelet / "pods").mkdir(parents=True)
    target = kubelet / "pods" / "3f1c-uid" / "volumes" / "kubernetes.io~csi" / "pvc-1" / "mount"
    resolved = resolve_target_path(str(target), kubelet)
    assert (resolved.path, resolved.pod_uid, resolved.volume) == (target.resolve(), "3f1c-uid", "pvc-1")


@pytest.mark.parametrize("relative", [
    "pods",  # every Pod's directory
    "pods/uid",
    "pods/uid/volumes",
    "pods/uid/volumes/kubernetes.io~csi/pvc-1",  # kubelet's vol_data.json lives here
    "pods/uid/volumes/kubernetes.io~configmap/config",  # another volume plugin's data
    "pods/uid/volumes/kubernetes.io~csi/pvc-1/mount/addresses",
    "pods/uid/volumes/kubernetes.io~csi/pvc-1/other",
    "pods/uid/etc-hosts",
    "plugins/listeners.stackable.tech/mount",
    "pods/.hidden/volumes/kubernetes.io~csi/pvc-1/mount",
])
def test_target_outside_kubelet_csi_layout_is_refused(tmp_path: Path, relative: str) -> None:
    kubelet = tmp_path / "kubelet"
    (kubelet / "pods").mkdir(parents=True)
    with pytest.raises(InvalidVolumeInput, match="not a CSI volume directory in kubelet's layout"):
        resolve_target_path(str(kubelet / relative), kubelet)


def test_huge_target_path_is_not_echoed(tmp_path: Path) -> None:
    with pytest.raises(InvalidVolumeInput) as caught:
        resolve_target_path("x" * 1_000_000, tmp_path)
    assert len(str(caught.value)) < 500
    assert "1000000 characters" in str(caught.value)


@pytest.mark.parametrize("relative", ["../outside", "pods/../../outside", ""])
def test_target_escaping_kubelet_dir_is_refused(tmp_path: Path, relative: str) -> None:
    kubelet = tmp_path / "kubelet"
    kubelet.mkdir()
    with pytest.raises(InvalidVolumeInput, match="not inside the kubelet directory"):
        resolve_target_path(os.path.normpath(str(kubelet / relative)) if relative else str(kubelet), kubelet)


def test_symlink_escape_is_refused(tmp_path: Path) -> None:
    kubelet = tmp_path / "kubelet"
    (kubelet / "pods").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (kubelet / "pods" / "evil").symlink_to(outside)
    with pytest.raises(InvalidVolumeInput, match="not inside"):
        resolve_target_path(str(kubelet / "pods" / "evil" / "mount"), kubelet)


@pytest.mark.parametrize("target", ["relative/path", "/a\x00b"])
def test_malformed_target_is_refused(tmp_path: Path, target: str) -> None:
    with pytest.raises(InvalidVolumeInput):
        resolve_target_path(target, tmp_path)
