"""The files of Pod volumes as the kubelet writes them (pure): ``volumefiles`` (``configMap``, ``secret`` and
``projected`` volumes) and ``downward`` (``downwardAPI`` volumes and ``fieldRef`` values). Both the kubelet and the
container runtime (a container's environment) read them, so they sit below both.
"""
