"""``skupper``: upstream Skupper v2's command line for Kubernetes sites (:mod:`.main`)."""
