"""Several sites side by side: one kubesim cluster per site (each its own loopback address block, so a load
balancer or node address of one is reachable from the others, as across real clusters), each with its namespace
named after the site and, once started, its own site controller in this process (``SiteEnv`` of site_support).

    async with multisite_environment("west", "east") as sites:
        await sites.start_controllers()
        await sites.create_site("west", link_access="default")
        host, port = await sites.access_endpoint("west")          # RouterAccess skupper-router's endpoint
        await sites.link_directly("east", "west")                 # a Link with a client certificate of west's CA

Every address is a loopback address of one of the clusters' blocks."""

from __future__ import annotations

import base64
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from site_support import SiteEnv, site_environment

from service_network.site import pki
from service_network.site.access import ROUTER_ACCESS_NAME, SITE_CA_SECRET

SITES = ("west", "east", "middle")


class MultiSite:
    def __init__(self, envs: dict[str, SiteEnv]) -> None:
        self.envs = envs

    def __getitem__(self, name: str) -> SiteEnv:
        return self.envs[name]

    def __iter__(self) -> Any:
        return iter(self.envs.values())

    async def start_controllers(self, **options: Any) -> None:
        """A site controller per cluster (options as ``SiteEnv.start_controller``)."""
        for env in self.envs.values():
            await env.start_controller(**options)

    async def create_site(self, name: str, link_access: str | None = "default", **spec: Any) -> dict[str, Any]:
        """The Site ``name`` in its cluster's namespace ``name``."""
        if link_access is not None:
            spec["linkAccess"] = link_access
        return await self[name].create("Site", name, spec)

    async def access_endpoint(self, name: str, within: float = 30.0) -> tuple[str, int]:
        """The inter-router endpoint in the status of the RouterAccess ``skupper-router`` of site ``name``."""
        env = self[name]

        async def check() -> tuple[str, int] | None:
            status = await env.status("RouterAccess", ROUTER_ACCESS_NAME)
            for endpoint in status.get("endpoints") or []:
                if endpoint.get("name") == "inter-router" and status.get("status") == "Ready":
                    return str(endpoint["host"]), int(endpoint["port"])
            return None
        result: tuple[str, int] = await env.wait_for(check, within, f"router access of {name} resolved")
        return result

    async def site_ca(self, name: str, within: float = 30.0) -> pki.KeyPair:
        """The CA of site ``name`` (Secret ``skupper-site-ca``)."""
        env = self[name]
        secret = await env.wait_for(lambda: env.api.get("secrets", SITE_CA_SECRET, env.namespace), within,
                                    f"site CA of {name}")
        data = secret["data"]
        return pki.KeyPair(base64.b64decode(data["tls.crt"]), base64.b64decode(data["tls.key"]))

    async def link_directly(self, source: str, target: str, name: str | None = None, cost: int = 1,
                            ca: pki.KeyPair | None = None) -> str:
        """A Link in ``source`` to ``target``'s router access with a client certificate signed by ``target``'s CA
        (or ``ca``) in a Secret of the same name, as a redeemed token gives (its common name is the source Site's
        uid: the routers of the source site speak as that); returns the Link's name."""
        name = name or f"{source}-to-{target}"
        host, port = await self.access_endpoint(target)
        target_ca = await self.site_ca(target)
        signer = ca or target_ca
        env = self[source]
        site_uid = (await env.get("Site", source))["metadata"]["uid"]
        pair = pki.issue(signer, site_uid, client=True)
        await env.api.create("secrets", {
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": name, "namespace": env.namespace},
            "data": {"ca.crt": base64.b64encode(target_ca.cert).decode(),
                     "tls.crt": base64.b64encode(pair.cert).decode(),
                     "tls.key": base64.b64encode(pair.key).decode()}}, env.namespace)
        await env.create("Link", name, {"endpoints": [{"name": "inter-router", "host": host, "port": str(port)}],
                                        "tlsCredentials": name, "cost": cost})
        return name


@contextlib.asynccontextmanager
async def multisite_environment(*names: str) -> AsyncIterator[MultiSite]:
    """Clusters side by side, one per name (default west and east), each with the namespace of its name."""
    async with contextlib.AsyncExitStack() as stack:
        envs: dict[str, SiteEnv] = {}
        for name in names or SITES[:2]:
            envs[name] = await stack.enter_async_context(site_environment(name))
        yield MultiSite(envs)
