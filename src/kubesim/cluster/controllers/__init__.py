"""The control plane's loops, as kube-controller-manager and kube-scheduler run them: the scheduler (``scheduler``,
``matching``), the workload controllers (``deployment`` with the pure ``rollout`` rules, ``replicaset``,
``statefulset``, ``daemonset``, ``jobs``, sharing ``workload``), ``endpoints`` (Endpoints and EndpointSlices),
``ephemeral`` (generic ephemeral volumes), ``loadbalancer``, ``nodelifecycle`` and ``tainteviction``.
"""
