"""kube-proxy for kubesim (test infrastructure): ``rules`` decides what to serve, ``relay`` carries bytes,
``kubeproxy`` binds and follows the watches."""

from kubesim.cluster.proxy.kubeproxy import KubeProxy
from kubesim.cluster.proxy.rules import Endpoint, Frontend, Refusal, service_rules

__all__ = ["Endpoint", "Frontend", "KubeProxy", "Refusal", "service_rules"]
