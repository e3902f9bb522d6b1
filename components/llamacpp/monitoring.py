"""What the monitoring of a llama.cpp server is generated from (its dashboard and alerts)."""

from components.llamacpp.inputs import LlamaCppVulkanServerArgs
from components.monitoring.inputs import KubernetesMonitoring
from components.monitoring.queries import MonitoringSpec


def monitoring_spec(
    name: str, namespace: str, args: LlamaCppVulkanServerArgs, monitoring: KubernetesMonitoring
) -> MonitoringSpec:
    """What the dashboard and the alerts of this server are generated from."""
    flags = args["flags"]
    return {
        "job": name,
        "alias": flags["alias"],
        "namespace": namespace,
        "min_decode_tps": args.get("min_decode_tps"),
        "alerts": monitoring["alerts"],
        "reference": monitoring["reference"],
        "slot_context": flags["ctx_size"] // flags["parallel"],
        "fetch_job_pattern": monitoring.get("fetch_job_pattern"),
    }
