"""The simulated cluster (kubesim parts 2 and 3), one package per job, composed by ``cluster.Cluster``:
``kubelet/`` (simulated nodes: a kubelet each, running Pods through the container runtime ``runtime/``, their
volumes' files from ``volumes/``), ``controllers/`` (scheduler, workloads, endpoints, node lifecycle, taint
eviction, load balancer, ephemeral volumes), ``csi/`` (plugin registration, external-provisioner, the emulated
sidecars), ``dns/`` (cluster names, the DNS server, Pods' resolv.conf) and ``proxy/`` (kube-proxy), all driven by
the shared informers and work queues of ``base/`` (``base/context.ApiAccess`` says where Pods reach the API server).

This file is only the package's description: the code is in its modules, so importing one of them (a pure
``controllers/rollout.py``, ``volumes/volumefiles.py``...) does not import the whole cluster first.
"""
