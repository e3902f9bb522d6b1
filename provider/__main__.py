"""The llm-infra component provider: GgufModelStore, LlamaCppVulkanServer, VllmRocmServer."""

from pulumi.provider.experimental import component_provider_host

from components.provider import COMPONENTS, PACKAGE, VERSION

if __name__ == "__main__":
    component_provider_host(COMPONENTS, name=PACKAGE, version=VERSION)
