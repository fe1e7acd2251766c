"""A Kubernetes site's site key and the vouchers it holds (I/O): the Secret ``skupper-site-key`` in the site's
namespace, owned by the Site (:mod:`.site_keys`).

- ``tls.key``: the site key (ECDSA P-256, PKCS#8 PEM), made once, when the site first redeems or grants; it is
  no link credential: deleting Links leaves it, so the site can prove who it is when it links again;
- ``voucher.<token name>``: the voucher the grant server of that token gave this site (JSON), kept after the
  token's Link is deleted; it is sent with later redemptions and, while the token's Link is up, makes the signer's
  key one this site trusts to vouch for others.

Reads go to the API server (redemptions are rare), so two controllers never make two keys: the Secret's creation
is the claim, and the loser reads the winner's key.
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Mapping
from typing import Any

from operator_runtime.api import KubeApi
from operator_runtime.errors import AlreadyExists, NotFound
from operator_runtime.kinds import SECRET
from operator_runtime.objects import JsonDict, mapping, meta

from .resources import owner_references
from .site_keys import ProofProblem, Voucher, new_site_key, parse_voucher, public_key, voucher_text

__all__ = ["SITE_KEY_SECRET", "SiteKeys", "held_vouchers"]

log = logging.getLogger(__name__)
SITE_KEY_SECRET = "skupper-site-key"
_KEY = "tls.key"
_VOUCHER = "voucher."


def held_vouchers(secret: Mapping[str, Any]) -> dict[str, Voucher]:
    """token name -> the voucher kept for it; vouchers that do not read or verify are left out."""
    found = {}
    for name, value in mapping(secret, "data").items():
        if not name.startswith(_VOUCHER) or not isinstance(value, str):
            continue
        try:
            found[name[len(_VOUCHER):]] = parse_voucher(base64.b64decode(value, validate=True).decode())
        except (ProofProblem, binascii.Error, ValueError):
            log.warning("the site key Secret %s/%s holds an unusable %s", meta(secret).namespace, meta(secret).name,
                        name[:80])
    return found


class SiteKeys:
    """The site key Secret of each namespace."""

    def __init__(self, api: KubeApi) -> None:
        self.api = api

    async def secret(self, site: Mapping[str, Any]) -> JsonDict:
        """The site's key Secret, made when missing."""
        namespace = meta(site).namespace
        try:
            return await self.api.get(SECRET, SITE_KEY_SECRET, namespace)
        except NotFound:
            pass
        body: JsonDict = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                          "metadata": {"name": SITE_KEY_SECRET, "namespace": namespace,
                                       "ownerReferences": owner_references(site)},
                          "data": {_KEY: base64.b64encode(new_site_key()).decode()}}
        try:
            return await self.api.create(SECRET, body, namespace)
        except AlreadyExists:
            return await self.api.get(SECRET, SITE_KEY_SECRET, namespace)

    @staticmethod
    def key_of(secret: Mapping[str, Any]) -> bytes:
        """The site key a Secret holds; ``ProofProblem`` when it does not read."""
        try:
            key = base64.b64decode(str(mapping(secret, "data").get(_KEY, "")), validate=True)
            public_key(key)
        except (binascii.Error, ValueError) as e:
            raise ProofProblem(f"the Secret {SITE_KEY_SECRET} holds no usable site key: {str(e)[:120]}") from None
        return key

    async def keep_voucher(self, site: Mapping[str, Any], token: str, voucher: Voucher) -> None:
        """Keep the voucher a grant server gave for the token ``token``."""
        data = {_VOUCHER + token: base64.b64encode(voucher_text(voucher).encode()).decode()}
        await self.api.merge_patch(SECRET, {"data": data}, name=SITE_KEY_SECRET, namespace=meta(site).namespace)
