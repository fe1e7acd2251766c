"""The simulated cluster (kubesim parts 2 and 3): ``cluster.Cluster`` composes simulated nodes (a kubelet each,
running Pods through ``runtime/``), the controllers (scheduler, provisioner, workloads, endpoints, node lifecycle,
taint eviction, load balancer) and kube-proxy (``proxy/``), each a module of this package, driven by shared
informers (``informer.py``, ``indexes.py``). ``context.ApiAccess`` says where Pods reach the API server.

This file is only the package's description: the code is in its modules, so importing one of them (a pure
``rollout.py``, ``volumefiles.py``...) does not import the whole cluster first.
"""
