"""One namespace's inputs, as the site controller read them before writing anything (pure data).

:mod:`.read` builds a :class:`NamespaceSnapshot` from the caches (and the CA certificates of issuer Secrets, whose
values the caches do not hold); :func:`.plan.plan_namespace` turns it into the namespace's plan without I/O.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from operator_runtime.objects import JsonDict

from .compose import SiteInputs
from .outcomes import Failed

__all__ = ["GrantInput", "NamespaceSnapshot"]


@dataclass(frozen=True)
class GrantInput:
    """An AccessGrant and what the controller remembers of it: when it first processed it (the start of its
    expiration window, until its status shows the expiry), the code it generated (until the status shows it), and
    where the grant server redeems it (None: no server)."""

    obj: Mapping[str, Any]
    first_seen: datetime.datetime | None = None
    code: str | None = None
    url: str | None = None


@dataclass(frozen=True)
class NamespaceSnapshot:
    """What a namespace's reconcile needs, read once: the Site path's inputs (:class:`~.compose.SiteInputs`: Sites,
    Listeners, Connectors, Links, RouterAccesses, Services, Secrets, Pods, router statuses, templates, ...) and what
    the SecuredAccess, Certificate and grant paths read besides."""

    namespace: str
    now: datetime.datetime
    site: SiteInputs
    #: the controller the namespace's ConfigMap ``skupper`` hands it to, when not this one (nothing is done then)
    other_controller: str | None = None
    #: the namespace has AccessGrants or AccessTokens
    grants_or_tokens: bool = False
    secured_accesses: Sequence[Mapping[str, Any]] = ()
    #: SecuredAccess name -> the Pods its selector matches
    secured_pods: Mapping[str, Sequence[JsonDict]] = field(default_factory=dict)
    certificates: Sequence[Mapping[str, Any]] = ()
    #: issuer Secret name -> its CA certificate (PEM), for SecuredAccess statuses
    issuer_cas: Mapping[str, str] = field(default_factory=dict)
    #: the CA Secret that signs what names no CA (the active Site's default issuer), if a Site is known
    default_ca: str | None = None
    #: the grant server's binding annotation (URL and CA) client credentials carry, while it serves
    binding_annotation: str | None = None
    #: the namespace's AccessGrants (not being deleted)
    grants: Sequence[GrantInput] = ()
    #: the grant server's CA certificate (PEM) grants publish; None: no grant server runs
    grant_server_ca: str | None = None
    #: reads that failed in a way a retry may fix (an issuer Secret's CA)
    read_failures: tuple[Failed, ...] = ()
