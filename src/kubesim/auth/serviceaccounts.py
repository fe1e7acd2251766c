"""ServiceAccount identities: the tokens kubesim issues for them and the token volume Pods get by default.

- ``ServiceAccountTokens`` issues opaque bearer tokens (random, unguessable; not JWTs) for a ServiceAccount,
  optionally bound to a Pod, and authenticates them as ``system:serviceaccount:<namespace>:<name>`` with the
  groups ``system:serviceaccounts``, ``system:serviceaccounts:<namespace>`` and ``system:authenticated``, as the
  API server does. A token stops working when it expires, when its ServiceAccount is deleted or recreated, and when
  the Pod it is bound to is gone. The 3607-second tokens of the default token volume are honoured for a year, as
  kube-apiserver's ``--service-account-extend-token-expiration`` (on by default) does, since kubesim's kubelet does
  not rotate them.
- ``add_token_volume`` is the ServiceAccount admission plugin's mutation: a projected volume
  ``kube-api-access-<random>`` (token, ``ca.crt`` from the ConfigMap ``kube-root-ca.crt``, the namespace) mounted
  read-only at ``/var/run/secrets/kubernetes.io/serviceaccount`` in every container, unless automounting is off for
  the Pod or its ServiceAccount or a container already mounts something there.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kubesim.auth.authn import User
    from kubesim.store.hooks import StoreReader

Obj = dict[str, Any]

#: Where in-cluster clients read the token, CA and namespace.
TOKEN_MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN_VOLUME_PREFIX = "kube-api-access-"
#: The ConfigMap kube-controller-manager publishes in every namespace with the cluster's CA (key ``ca.crt``).
ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
#: What the admission plugin asks for; the API server extends tokens asked for exactly this long to a year.
DEFAULT_EXPIRATION_SECONDS = 3607
EXTENDED_EXPIRATION_SECONDS = 365 * 24 * 3600
MIN_EXPIRATION_SECONDS = 600
#: The characters Kubernetes' random name suffixes use (no vowels, no look-alikes).
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
USER_PREFIX = "system:serviceaccount:"


def service_account_user_name(namespace: str, name: str) -> str:
    return f"{USER_PREFIX}{namespace}:{name}"


def random_suffix(length: int = 5) -> str:
    return "".join(secrets.choice(_SUFFIX_ALPHABET) for _ in range(length))


@dataclass(frozen=True)
class IssuedToken:
    namespace: str
    service_account: str
    service_account_uid: str  # "" when the ServiceAccount did not exist when the token was issued
    pod_name: str | None
    pod_uid: str | None
    expires_at: float  # time.time()


class ServiceAccountTokens:
    """Issues and authenticates ServiceAccount tokens against the objects in ``store``."""

    def __init__(self, store: StoreReader, clock: Any = time.time) -> None:
        self._store = store
        self._clock = clock
        self._tokens: dict[str, IssuedToken] = {}

    def issue(self, namespace: str, service_account: str, *, pod_name: str | None = None,
              pod_uid: str | None = None, expiration_seconds: int = DEFAULT_EXPIRATION_SECONDS) -> str:
        """A new token for the ServiceAccount (bound to the Pod when given); ``ValueError`` for a lifetime under
        ten minutes (the API server's minimum)."""
        if expiration_seconds < MIN_EXPIRATION_SECONDS:
            raise ValueError(f"expirationSeconds must be at least {MIN_EXPIRATION_SECONDS}, not {expiration_seconds}")
        if expiration_seconds == DEFAULT_EXPIRATION_SECONDS:
            expiration_seconds = EXTENDED_EXPIRATION_SECONDS
        account = self._service_account(namespace, service_account)
        token = "kubesim-sa." + secrets.token_urlsafe(32)
        self._tokens[token] = IssuedToken(
            namespace, service_account, str((account or {}).get("metadata", {}).get("uid", "")), pod_name, pod_uid,
            self._clock() + expiration_seconds)
        return token

    def expiry(self, token: str) -> float | None:
        issued = self._tokens.get(token)
        return None if issued is None else issued.expires_at

    def revoke_pod(self, pod_uid: str) -> None:
        """Forget every token bound to the Pod (it is gone)."""
        for token in [t for t, issued in self._tokens.items() if issued.pod_uid == pod_uid]:
            del self._tokens[token]

    def authenticate(self, token: str) -> User | None:
        from kubesim.auth.authn import User

        issued = self._tokens.get(token)
        if issued is None:
            return None
        if self._clock() >= issued.expires_at:
            del self._tokens[token]
            return None
        account = self._service_account(issued.namespace, issued.service_account)
        if account is None or (issued.service_account_uid
                               and account.get("metadata", {}).get("uid") != issued.service_account_uid):
            return None
        if issued.pod_uid is not None:
            pod = self._find("pods", issued.namespace, issued.pod_name or "")
            if pod is None or pod.get("metadata", {}).get("uid") != issued.pod_uid:
                return None
        return User(service_account_user_name(issued.namespace, issued.service_account),
                    ("system:serviceaccounts", f"system:serviceaccounts:{issued.namespace}", "system:authenticated"))

    def _service_account(self, namespace: str, name: str) -> Obj | None:
        return self._find("serviceaccounts", namespace, name)

    def _find(self, key: str, namespace: str, name: str) -> Obj | None:
        rt = self._store.registry.by_key(key)
        return None if rt is None else self._store.find(rt, namespace, name)


def automount_wanted(pod: Obj, service_account: Obj | None) -> bool:
    """The Pod's ``automountServiceAccountToken`` wins; else the ServiceAccount's; else true."""
    spec = pod.get("spec") or {}
    if isinstance(spec.get("automountServiceAccountToken"), bool):
        return bool(spec["automountServiceAccountToken"])
    if service_account is not None and isinstance(service_account.get("automountServiceAccountToken"), bool):
        return bool(service_account["automountServiceAccountToken"])
    return True


def token_volume(name: str) -> Obj:
    return {
        "name": name,
        "projected": {
            "defaultMode": 420,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": DEFAULT_EXPIRATION_SECONDS, "path": "token"}},
                {"configMap": {"name": ROOT_CA_CONFIGMAP, "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1",
                                                                              "fieldPath": "metadata.namespace"}}]}},
            ],
        },
    }


def add_token_volume(pod: Obj, service_account: Obj | None) -> None:
    """The ServiceAccount admission plugin's mutation of a new Pod (in place); nothing when automount is off."""
    spec = pod.get("spec")
    if not isinstance(spec, dict) or not automount_wanted(pod, service_account):
        return
    containers = [c for key in ("initContainers", "containers", "ephemeralContainers")
                  for c in spec.get(key) or [] if isinstance(c, dict)]
    needing = [c for c in containers
               if not any(isinstance(m, dict) and str(m.get("mountPath", "")).rstrip("/") == TOKEN_MOUNT_PATH
                          for m in c.get("volumeMounts") or [])]
    if not needing:
        return
    volumes = spec.setdefault("volumes", [])
    if not isinstance(volumes, list):
        return
    taken = {v.get("name") for v in volumes if isinstance(v, dict)}
    name = TOKEN_VOLUME_PREFIX + random_suffix()
    while name in taken:
        name = TOKEN_VOLUME_PREFIX + random_suffix()
    volumes.append(token_volume(name))
    for container in needing:
        mounts = container.setdefault("volumeMounts", [])
        if isinstance(mounts, list):
            mounts.append({"name": name, "readOnly": True, "mountPath": TOKEN_MOUNT_PATH})
