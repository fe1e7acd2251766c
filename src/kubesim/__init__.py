"""kubesim: a local Kubernetes API server and simulated cluster for development and tests."""
