"""CSI as a cluster drives it: ``client`` (gRPC connections to plugins over Unix sockets), ``plugin_watch`` and
``plugins`` (the kubelet's plugin watcher and registration, node-driver-registrar's part), ``provisioner`` and
``topology`` (external-provisioner: CreateVolume with accessibility requirements), ``sidecars`` (the sidecar
containers kubesim emulates instead of running) and ``testdriver`` (a minimal CSI driver for kubesim's own tests).
"""
