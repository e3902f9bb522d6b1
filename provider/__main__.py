"""The llm-infra component provider: GgufModelStore, LlamaCppVulkanServer, LlamaCppRpcWorker, ...

Pulumi's Python language host runs `python <this directory> <engine address>` in the plugin's
virtualenv (PulumiPlugin.yaml); the SDK's provider server prints its port and serves gRPC.
"""

import sys

from pulumi.provider import main

from components.provider import LlmInfraProvider

if __name__ == "__main__":
    main(LlmInfraProvider(), sys.argv[1:])
