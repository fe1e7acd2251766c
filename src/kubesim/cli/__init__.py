"""The ``kubesim`` command line: ``main`` (``kubesim serve ...``, the entry point) and ``node`` (``kubesim node
stop|start|restart|list`` through a kubeconfig).
"""
