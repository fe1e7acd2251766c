"""Service network (Skupper v2 compatible, ``skupper.io/v2alpha1``): the site controller (``site``: Site, Listener,
Connector -> router Deployment, router ConfigMap, listener Services, statuses), the CRDs (``crd``), and the router
data plane (``router``: the Rust router process, ``service-network-router``, driven by our adaptor, from a file or,
in a router Pod, from the API). This package never imports ``listener_operator``, ``kubesim`` or the development environment."""
