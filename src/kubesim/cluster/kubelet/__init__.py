"""The simulated nodes: ``kubelet`` (one kubelet per node: the volume, container and status lifecycle of the Pods
bound to it, containers run through ``kubesim.cluster.runtime``), ``heartbeat`` (its Lease renewals and status
reports) and ``nodes`` (Node objects: creation with addresses, readiness, cordoning).
"""
