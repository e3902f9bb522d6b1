"""llama.cpp on Kubernetes: LlamaCppVulkanServer, LlamaCppRpcWorker, their inputs and manifests."""
