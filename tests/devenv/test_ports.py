"""``devenv.ports``: listener ports for other processes come from outside the kernel's ephemeral range, are free, and
are never given twice by one process."""

from __future__ import annotations

import socket
from pathlib import Path

from devenv import ports


def test_ports_come_from_below_the_ephemeral_range_and_are_free_and_distinct() -> None:
    low, high = ports.ephemeral_range()
    given = [ports.listen_port("127.0.0.1") for _ in range(50)]
    assert len(set(given)) == 50
    for port in given:
        assert not low <= port <= high, (port, low, high)
        assert 1024 <= port < 65536
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # nothing holds it


def test_a_port_in_use_is_not_given() -> None:
    holders = []
    try:
        for port in ports.span(ports.ephemeral_range())[:400]:
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            s.listen(1)
            holders.append(s)
        held = {s.getsockname()[1] for s in holders}
        assert held.isdisjoint(ports.listen_port("127.0.0.1") for _ in range(20))
    finally:
        for s in holders:
            s.close()


def test_the_span_leaves_out_what_the_ephemeral_range_covers(tmp_path: Path) -> None:
    assert ports.span((32768, 60999)) == range(20000, 30000)
    assert ports.span((25000, 60999)) == range(20000, 25000)
    assert ports.span((1024, 65535)) == range(20000, 20000)  # no room: the kernel's choice
    assert ports.span((40000, 50000)) == range(20000, 30000)
    unreadable = tmp_path / "missing"
    assert ports.ephemeral_range(unreadable) == (32768, 60999)
    (tmp_path / "range").write_text("1024\t65535\n")
    assert ports.ephemeral_range(tmp_path / "range") == (1024, 65535)
