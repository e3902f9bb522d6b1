"""Shared Kubernetes pieces: pod security, network policies, images, the verify Job, children."""
