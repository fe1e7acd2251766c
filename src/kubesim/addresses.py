"""The address plan: every IP a kubesim cluster hands out is a distinct loopback address in its own block.

Linux routes all of 127.0.0.0/8 to ``lo``, so any 127.x.y.z can be bound and dialled by local processes without
configuration. A cluster owns one *address block* ``127.N.0.0/16`` (N in 1..254; 127.0.0.0/16 stays for the
machine's own loopback users such as 127.0.0.1 and 127.0.0.53):

=====================  ==========================  =========================================
range                  use                         example (block 5)
=====================  ==========================  =========================================
``127.N.0.10``         cluster DNS for the host    127.5.0.10 (``kubesim.cluster.dns.hostnames``)
``127.N.0.11``         SOCKS5 proxy for the host   127.5.0.11
``127.N.1.1-254``      node ``InternalIP``         node-2: 127.5.1.2
``127.N.2.1-254``      node ``ExternalIP``         node-2: 127.5.2.2
``127.N.3.1-254``      LoadBalancer ingress IPs    127.5.3.1
``127.N.4.1-254``      free for test clients       (source addresses, e.g. session affinity)
``127.N.16.0/20``      Service ``clusterIP`` s     127.5.16.2 (.16.1 is kept, as for ``kubernetes``)
``127.N.128.0/17``     Pod IPs                     127.5.128.1
=====================  ==========================  =========================================

Blocks are claimed with an advisory lock (``flock``) on a file per block under a shared directory, held for the
cluster's lifetime and released by the kernel if the process dies, so clusters in different processes (parallel
test runs, ``local up`` next to a test suite) never overlap. A cluster kept in a store file also *reserves* its
block (``N.reserved`` names the store): while that store exists, picking a free block passes over it as long as
another is free, so a stopped cluster finds its addresses unused when it resumes. Nothing here dials anything.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import ipaddress
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

LOOPBACK = ipaddress.IPv4Network("127.0.0.0/8")
FIRST_BLOCK = 1
LAST_BLOCK = 254
# Service CIDR of an API server running without a block (``ApiServer()`` alone): inside 127.0.0.0/16, which no
# block uses. Nothing binds it unless a kube-proxy runs, and a kube-proxy only runs with a claimed block.
DEFAULT_SERVICE_CIDR = "127.0.16.0/20"
LOCK_DIR_ENV = "KUBESIM_ADDRESS_BLOCK_DIR"


class AddressBlockError(Exception):
    """A block number out of range, or a block another process holds."""


@functools.lru_cache(maxsize=16384)
def is_loopback(address: str) -> bool:
    """True for an IPv4 address in 127.0.0.0/8 (the only addresses kubesim binds or dials)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return isinstance(ip, ipaddress.IPv4Address) and ip in LOOPBACK


def not_loopback_reason(address: str) -> str | None:
    """Why kubesim refuses to serve or dial ``address`` (None when it is a loopback address)."""
    if is_loopback(address):
        return None
    return (
        f"{address} is outside 127.0.0.0/8; kubesim only binds and dials loopback addresses so that no traffic "
        "leaves this machine"
    )


@dataclass(frozen=True)
class AddressBlock:
    """The layout of block ``index`` (``127.<index>.0.0/16``); see the module docstring."""

    index: int

    def __post_init__(self) -> None:
        if not isinstance(self.index, int) or not FIRST_BLOCK <= self.index <= LAST_BLOCK:
            raise AddressBlockError(
                f"address block must be an integer between {FIRST_BLOCK} and {LAST_BLOCK}, not {self.index!r}"
            )

    @property
    def network(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(f"127.{self.index}.0.0/16")

    def _host(self, third: int, fourth: int, what: str) -> str:
        if not 1 <= fourth <= 254:
            raise AddressBlockError(f"{what} number must be between 1 and 254, not {fourth}")
        return f"127.{self.index}.{third}.{fourth}"

    def node_internal_ip(self, number: int) -> str:
        return self._host(1, number, "node")

    def node_external_ip(self, number: int) -> str:
        return self._host(2, number, "node")

    def node_number(self, internal_ip: str) -> int | None:
        """The node number N of an InternalIP 127.B.1.N of this block (None for any other address)."""
        parts = internal_ip.split(".")
        if len(parts) != 4 or parts[:3] != ["127", str(self.index), "1"] or not parts[3].isdigit():
            return None
        number = int(parts[3])
        return number if 1 <= number <= 254 else None

    def client_ip(self, number: int) -> str:
        """A source address tests may bind for their clients (nothing in the cluster uses this range)."""
        return self._host(4, number, "client")

    @property
    def dns_ip(self) -> str:
        """Where the cluster's DNS server answers the host (``kubesim.cluster.dns.hostnames``)."""
        return f"127.{self.index}.0.10"

    @property
    def proxy_ip(self) -> str:
        """Where the SOCKS5 proxy that resolves cluster names listens."""
        return f"127.{self.index}.0.11"

    @property
    def load_balancer_range(self) -> str:
        return f"127.{self.index}.3.1-127.{self.index}.3.254"

    @property
    def service_cidr(self) -> str:
        return f"127.{self.index}.16.0/20"

    @property
    def pod_cidr(self) -> str:
        return f"127.{self.index}.128.0/17"

    def describe(self, *, node_external_ips: bool = False) -> str:
        """The block's ranges; node ExternalIPs only when the cluster gives its nodes some."""
        external = f" (ExternalIP 127.{self.index}.2.x)" if node_external_ips else ""
        return (
            f"address block {self.index} ({self.network}): nodes 127.{self.index}.1.x{external}, "
            f"load balancers 127.{self.index}.3.x, services {self.service_cidr}, pods {self.pod_cidr}"
        )


def lock_dir() -> Path:
    """Where block lock files live: ``$KUBESIM_ADDRESS_BLOCK_DIR`` or ``<tmp>/kubesim-address-blocks``."""
    configured = os.environ.get(LOCK_DIR_ENV)
    return Path(configured) if configured else Path(tempfile.gettempdir()) / "kubesim-address-blocks"


class AddressBlockClaim:
    """A block held by this process until ``release()`` (or process exit)."""

    def __init__(self, block: AddressBlock, fd: int) -> None:
        self.block = block
        self._fd: int | None = fd

    @property
    def index(self) -> int:
        return self.block.index

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __del__(self) -> None:
        self.release()

    def __enter__(self) -> AddressBlockClaim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"AddressBlockClaim({self.block.index}, held={self.held})"


def _open_lock(directory: Path, index: int) -> int:
    directory.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):  # shared by every user of the machine; sticky like /tmp
        os.chmod(directory, 0o1777)
    path = directory / f"{index}.lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except PermissionError:  # created by another user: a read-only descriptor can still hold the lock
        fd = os.open(path, os.O_RDONLY)
    return fd


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


def _record_holder(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)


def _holder(directory: Path, index: int) -> str:
    try:
        return (directory / f"{index}.lock").read_text().strip() or "unknown"
    except OSError:
        return "unknown"


def reserve_block(index: int, store: Path, *, directory: Path | None = None) -> None:
    """Reserve block ``index`` for the cluster kept in ``store`` (the caller holds the block's claim): picking a
    free block passes over it while ``store`` exists. Best effort: a reservation another user of the machine owns
    stays as it is."""
    directory = directory or lock_dir()
    path = directory / f"{AddressBlock(index).index}.reserved"
    tmp = directory / f".{index}.reserved.{os.getpid()}"
    named = f"{store.resolve()}"
    for earlier in directory.glob("*.reserved"):  # the store's earlier block (before a --fresh start) is free again
        with contextlib.suppress(OSError):
            if earlier != path and earlier.read_text().strip() == named:
                earlier.unlink()
    try:
        tmp.write_text(f"{named}\n")
        tmp.replace(path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()


def _reserved_elsewhere(directory: Path, index: int) -> bool:
    """Whether block ``index`` is reserved for a stored cluster whose store still exists."""
    try:
        store = (directory / f"{index}.reserved").read_text().strip()
    except OSError:
        return False
    return bool(store) and Path(store).exists()


def claim_address_block(index: int | None = None, *, directory: Path | None = None) -> AddressBlockClaim:
    """Claim block ``index``, or, when ``index`` is None, the lowest free block that no stored cluster reserves
    (``reserve_block``), else the lowest free one.

    Raises ``AddressBlockError`` when the requested block is held by another process (naming its pid) or when
    every block is taken.
    """
    directory = directory or lock_dir()
    if index is None:
        blocks = range(FIRST_BLOCK, LAST_BLOCK + 1)
        reserved = {b for b in blocks if _reserved_elsewhere(directory, b)}
        candidates = [b for b in blocks if b not in reserved] + sorted(reserved)
    else:
        candidates = [AddressBlock(index).index]
    for candidate in candidates:
        fd = _open_lock(directory, candidate)
        if _try_lock(fd):
            _record_holder(fd)
            return AddressBlockClaim(AddressBlock(candidate), fd)
        os.close(fd)
        if index is not None:
            raise AddressBlockError(
                f"address block {index} ({AddressBlock(index).network}) is in use by another kubesim "
                f"(pid {_holder(directory, index)}); choose another block or let kubesim pick a free one"
            )
    raise AddressBlockError(f"every address block ({FIRST_BLOCK}-{LAST_BLOCK}) is in use")


def pick_free_block(*, directory: Path | None = None) -> int:
    """The lowest block no process holds right now (informational: claim it with ``claim_address_block`` to
    keep it; between the two calls another process may take it, which that call then reports)."""
    with claim_address_block(directory=directory) as claim:
        return claim.index
