"""A system site's router in a container of the engine (Podman or Docker), as upstream's container sites run it:
named ``<namespace>-skupper-router``, labelled ``application=skupper-v2``, ``skupper.io/v2-component=router`` and
``skupper.io/site-id=<id>``, on the host's network, restarted by the engine when it ends (restart policy
``always``), the site's ``runtime/`` (and ``input/certs/``) mounted at the same paths as on the host, so the router
document's file names hold in the container and the site's command line reaches the router's control socket.

``router_spec`` composes the engine's create request (pure); ``ContainerRouter`` runs it (I/O, through
:mod:`.engine`)."""

from __future__ import annotations

import contextlib
import grp
import importlib.metadata
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .engine import Container, Engine, EngineError, default_endpoint

__all__ = ["APP_LABEL", "ContainerRouter", "RouterContainer", "router_image", "router_spec"]

APP_LABEL = ("application", "skupper-v2")
COMPONENT_LABEL = ("skupper.io/v2-component", "router")
SITE_ID_LABEL = "skupper.io/site-id"
IMAGE_ENV = "SKUPPER_ROUTER_IMAGE"                # upstream's variable naming the router's image
IMAGE_REPOSITORY = "localhost/listener-operator"   # scripts/build-image's name (the chart's default repository)
STOP_SECONDS = 10                                  # upstream's stop.sh: stop -t 10
STARTED_SECONDS = 10.0


def router_image(environ: dict[str, str] | None = None) -> str:
    """``$SKUPPER_ROUTER_IMAGE``, else this version's image as scripts/build-image names it."""
    env = os.environ if environ is None else environ
    if image := env.get(IMAGE_ENV):
        return image
    try:
        version = importlib.metadata.version("listener-operator")
    except importlib.metadata.PackageNotFoundError:
        version = "latest"
    return f"{IMAGE_REPOSITORY}:{version}"


@dataclass(frozen=True)
class RouterContainer:
    """What the router's container is made of (the site's names and paths)."""

    namespace: str
    site_id: str
    image: str
    config: Path                   # runtime/router/router.json
    state_dir: Path                # runtime/router/state
    mounts: tuple[Path, ...]       # host directories mounted at the same path (runtime/, input/certs/, ...)
    uid: int
    gid: int
    platform: str
    docker_gid: int = 0            # the docker group's (Docker: the container runs as root with it, as upstream's)

    @property
    def name(self) -> str:
        return f"{self.namespace}-skupper-router"


def docker_group_id() -> int:
    """The ``docker`` group's id (0 where there is none), as upstream's container user on Docker."""
    try:
        return grp.getgrnam("docker").gr_gid
    except KeyError:
        return 0


def router_spec(c: RouterContainer) -> dict[str, Any]:
    """The engine's ``POST /containers/create`` body for the router's container (upstream's choices: host network,
    restart ``always``, the user's uid and gid on Podman and root with the docker group on Docker, ``keep-id``
    user namespace for a rootless Podman)."""
    labels = dict([APP_LABEL, COMPONENT_LABEL, (SITE_ID_LABEL, c.site_id)])
    host: dict[str, Any] = {
        "NetworkMode": "host",
        "RestartPolicy": {"Name": "always"},
        "Binds": [f"{p}:{p}:z" for p in c.mounts],
        "OomScoreAdj": 100,
    }
    if c.platform == "podman" and c.uid != 0:
        host["UsernsMode"] = "keep-id"
    return {
        "Image": c.image,
        "Entrypoint": ["service-network"],
        "Cmd": ["router", "--config", str(c.config), "--state-dir", str(c.state_dir)],
        "Env": ["APPLICATION_NAME=skupper-router", f"SKUPPER_SITE_ID={c.site_id}"],
        "Labels": labels,
        "User": f"{c.uid}:{c.gid}" if c.platform == "podman" else f"0:{c.docker_gid}",
        "HostConfig": host,
    }


def extra_mounts(control_socket: Path, runtime: Path) -> tuple[Path, ...]:
    """The control socket's directory when it is not under ``runtime`` (a long state path puts it in the temporary
    directory): mounted too, so the command line on the host reaches it."""
    if control_socket.is_relative_to(runtime):
        return ()
    return (Path(tempfile.gettempdir()),)


class ContainerRouter:
    """The site's router container on ``platform``'s engine."""

    def __init__(self, spec: RouterContainer, endpoint: str | None = None) -> None:
        self.spec = spec
        self.engine = Engine(endpoint or default_endpoint(spec.platform), spec.platform)

    def container(self) -> Container | None:
        """This site's router container (one of the name that runs another site is not this site's)."""
        found = self.engine.inspect(self.spec.name)
        return found if found is not None and found.labels.get(SITE_ID_LABEL) == self.spec.site_id else None

    def ensure_image(self) -> None:
        """The image is there, or pulled (``EngineError`` naming it when it cannot be)."""
        if not self.engine.image_present(self.spec.image):
            self.engine.pull(self.spec.image)

    def start(self) -> Container:
        """Create the container when it does not exist (again when it has another image; refused when it runs
        another site, as upstream refuses a container that exists), then start it unless it runs; returns it once the engine reports it running (``EngineError`` when it does not
        within ``STARTED_SECONDS``, with the end of its log)."""
        wanted = router_spec(self.spec)
        found = self.engine.inspect(self.spec.name)
        if found is not None and found.labels.get(SITE_ID_LABEL) != self.spec.site_id:
            raise EngineError(409, f"container {self.spec.name} already exists (component: router), and it runs "
                                   f"another site (skupper.io/site-id "
                                   f"{found.labels.get(SITE_ID_LABEL, 'not set')[:64]}, not {self.spec.site_id}): "
                                   f"this site is not started (another namespace name, or that site's uninstall, "
                                   f"frees the name)")
        if found is not None and found.image != self.spec.image:        # another image: made again with it
            self.engine.remove(self.spec.name)
            found = None
        if found is None:
            self.ensure_image()
            for path in self.spec.mounts:
                path.mkdir(parents=True, exist_ok=True)
            self.engine.create(self.spec.name, wanted)
        elif found.running:
            return found
        try:
            self.engine.start(self.spec.name)
        except EngineError:
            if found is None:               # nothing half-made: the container this start created goes (upstream's)
                with contextlib.suppress(EngineError):
                    self.engine.remove(self.spec.name)
            raise
        deadline = time.monotonic() + STARTED_SECONDS
        while True:
            now = self.container()
            if now is not None and now.running and now.pid:
                return now
            if time.monotonic() > deadline:
                tail = ""
                with contextlib.suppress(EngineError):
                    tail = self.engine.logs(self.spec.name, tail=20)
                raise EngineError(500, f"container {self.spec.name} does not run (state "
                                       f"{now.state if now else 'gone'}); its log ends:\n{tail[-2000:]}")
            time.sleep(0.1)

    def stop(self) -> bool:
        """Stop the container (kept: start starts it again); whether it was running."""
        found = self.container()
        if found is None or not found.running:
            return False
        self.engine.stop(self.spec.name, STOP_SECONDS)
        return True

    def remove(self) -> bool:
        """Stop and remove the container; whether there was one."""
        if self.container() is None:
            return False
        self.engine.remove(self.spec.name)
        return True

