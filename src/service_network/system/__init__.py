"""System sites: a service-network site on a Linux host without Kubernetes (``skupper system ...``)."""
