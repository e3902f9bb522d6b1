"""Shared Kubernetes pieces: pod security, network policies, the verify Job, objects, children."""
