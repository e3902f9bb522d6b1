"""The llm-infra component provider: GgufModelStore, LlamaCppVulkanServer, LlamaCppRpcWorker, ...

Pulumi's Python language host runs `python <this directory> <engine address>` in the plugin's
virtualenv (PulumiPlugin.yaml); the SDK's provider server (`components.provider_server.serve`: a
refusal found inside an apply is answered under its input's path) prints its port and serves
gRPC.
"""

import sys

from components.provider import LlmInfraProvider
from components.provider_server import serve

if __name__ == "__main__":
    serve(LlmInfraProvider(), sys.argv[1:])
