"""kube-proxy for kubesim (test infrastructure): ``rules`` decides what to serve, ``relay`` carries bytes,
``kubeproxy`` binds and follows the watches."""

from .kubeproxy import KubeProxy
from .rules import Endpoint, Frontend, Refusal, service_rules

__all__ = ["Endpoint", "Frontend", "KubeProxy", "Refusal", "service_rules"]
