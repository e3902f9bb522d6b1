"""The Kubernetes version `kubernetes-validate --strict -k` checks rendered manifests against."""

K8S_VERSION = "1.32.0"
