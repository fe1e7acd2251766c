"""Service network (Skupper v2 compatible): the router data plane (HAProxy driven by our adaptor), and later the
site controller. This package never imports ``listener_operator``, ``kubesim`` or the development environment."""
