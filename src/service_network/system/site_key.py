"""A system site's site key and the vouchers it holds (files; :mod:`service_network.site.site_keys`):
``<runtime>/site-key/tls.key`` (made once, mode 0600; no link credential: deleting Links and redeemed tokens
leaves it) and ``<runtime>/site-key/vouchers/<token name>.json``, the voucher each grant server gave."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from ..site.redeem import checked_voucher
from ..site.site_keys import ProofProblem, Voucher, make_proof, new_site_key, parse_voucher

__all__ = ["SystemSiteKey"]


class SystemSiteKey:
    def __init__(self, runtime: Path) -> None:
        self.directory = runtime / "site-key"

    def key(self) -> bytes:
        """The site key, made when missing (written whole under another name, then renamed)."""
        path = self.directory / "tls.key"
        with contextlib.suppress(OSError):
            return path.read_bytes()
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        staging = path.with_name(f".tls.key.{os.getpid()}")
        staging.write_bytes(new_site_key())
        staging.chmod(0o600)
        staging.rename(path)
        return path.read_bytes()

    def vouchers(self) -> list[Voucher]:
        found = []
        for path in sorted((self.directory / "vouchers").glob("*.json")):
            with contextlib.suppress(OSError, ProofProblem, UnicodeDecodeError):
                found.append(parse_voucher(path.read_text(encoding="utf-8")))
        return found

    def proof(self, site_id: str, url: str, at: int) -> str:
        return make_proof(self.key(), site_id, url, at, self.vouchers())

    def keep(self, token: str, site_id: str, text: str | None) -> None:
        """Keep the voucher of a redemption answer, if it vouches for this site's key."""
        voucher = checked_voucher(text, site_id, self.key())
        if voucher is None:
            return
        directory = self.directory / "vouchers"
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        (directory / f"{token}.json").write_text(text or "", encoding="utf-8")
