"""What a router adaptor is started with (``AdaptorOptions``): the commands build it from their flags and
environment, ``rust_adaptor.adaptor_for`` turns it into an adaptor."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .early import EarlyRouter
from .tls import TlsResolver

__all__ = ["AdaptorOptions"]


@dataclass(frozen=True)
class AdaptorOptions:
    state_dir: Path
    metrics_address: tuple[str, int] | None = None     # port 0: any free port (see the adaptor's metrics_port)
    tls_resolver: TlsResolver | None = None             # default: TLS profiles from files
    #: Address for entities the document binds on all interfaces (host ""): a router Pod binds its Pod IP, so
    #: that several routers on one machine (kubesim) never share a port.
    bind_host: str | None = None
    router_binary: str | None = None    # the router executable (default: see dataplane.router_binary)
    #: Start the router from the document it last ran (``<state>/document.json``) before the source's first one
    #: arrives: a router Pod's restarted container (its state directory is the Pod's emptyDir) serves again without
    #: waiting for the API server, as upstream's router reads its configuration from a mounted file.
    warm_start: bool = False
    #: the router ``early.start_early`` started from that document before the adaptor was imported: taken over
    early: EarlyRouter | None = None
