"""A system site's site key and the vouchers it holds (files; :mod:`service_network.site.site_keys`):
``<runtime>/site-key/tls.key`` (made once, mode 0600; no link credential: deleting Links and redeemed tokens
leaves it) and ``<runtime>/site-key/vouchers/<token or Link name>.json``, the voucher each grant server gave.
A generated credential (``skupper link generate`` of a Kubernetes site) applied here keeps its Secret's binding
address beside its files (``site-binding``), and the site proves its key there once (``site-bound``)."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from operator_runtime.objects import JsonDict, mapping, meta

from ..site.binder import BindingRefused, post_binding
from ..site.identities import fingerprint
from ..site.redeem import checked_voucher
from ..site.site_keys import ProofProblem, Voucher, make_proof, new_site_key, parse_binding, parse_voucher

#: beside a stored credential: the binding address its Secret carried, and the fingerprint bound already
BINDING_FILE = "site-binding"
BOUND_FILE = "site-bound"

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

    def binding_of(self, certs: Path) -> str | None:
        """The binding address a generated credential's Secret carried (kept beside its files), if any."""
        with contextlib.suppress(OSError):
            return (certs / BINDING_FILE).read_text(encoding="utf-8")
        return None

    async def bind_links(self, links: list[JsonDict], certs: dict[str, Path], site_id: str) -> list[str]:
        """Announce each Link's generated credential to the site that issued it (once per credential: a marker
        file beside it), proving this site's key; the problems, for the site's status."""
        problems = []
        for link in links:
            name = str(mapping(link, "spec").get("tlsCredentials", ""))
            directory = certs.get(name)
            binding = self.binding_of(directory) if directory is not None else None
            if directory is None or binding is None:
                continue
            try:
                cert = (directory / "tls.crt").read_bytes()
                marker = directory / BOUND_FILE
                fp = fingerprint(cert)
                if marker.is_file() and marker.read_text(encoding="utf-8") == fp:
                    continue
                base, ca = parse_binding(binding)
                url = f"{base}/bindings/{fp.removeprefix('sha256:')}"
                proof = self.proof(site_id, url, int(time.time()))
            except (OSError, ValueError) as e:
                problems.append(f"Link {meta(link).name}: its credential cannot be announced: {str(e)[:200]}")
                continue
            outcome = await post_binding(url, ca, site_id, proof)
            if isinstance(outcome, BindingRefused):
                problems.append(f"Link {meta(link).name}: {outcome}")
                continue
            self.keep(meta(link).name, site_id, outcome)
            marker.write_text(fp, encoding="utf-8")
        return problems
