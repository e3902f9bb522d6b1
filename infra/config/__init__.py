"""Typed stack configuration: the pydantic models of a stack, and the one reader of its config.

Everything a stack sets is validated here, before any resource exists. Problems are reported
one per line as `path.to.key: what is wrong (what is allowed)` (`ConfigError`).
"""

from infra.config.base import (
    NAMESPACE,
    SECRET_KEYS,
    SECRET_PLACEHOLDER,
    ConfigError,
    RepoModelSettings,
    is_pattern,
    quantity_value,
)
from infra.config.docker_host import DockerHostStack, Mi300xStack
from infra.config.fleet import FleetStack
from infra.config.kubernetes import KubernetesStack, StrixHaloStack
from infra.config.secrets import StackSecrets, missing_secrets
from infra.config.server import ProbeSettings
from infra.config.stack import (
    StackConfig,
    StackFile,
    expectations_path_for,
    load_stack_config,
    lock_path_for,
    names_a_file,
    namespace_values,
    parse_stack,
    project_root,
    read_stack_file,
    resolve_stack,
    stack_file_in,
    tune_path_for,
)

__all__ = [
    "NAMESPACE",
    "SECRET_KEYS",
    "SECRET_PLACEHOLDER",
    "ConfigError",
    "DockerHostStack",
    "FleetStack",
    "KubernetesStack",
    "Mi300xStack",
    "ProbeSettings",
    "RepoModelSettings",
    "StackConfig",
    "StackFile",
    "StackSecrets",
    "StrixHaloStack",
    "expectations_path_for",
    "is_pattern",
    "load_stack_config",
    "lock_path_for",
    "missing_secrets",
    "names_a_file",
    "namespace_values",
    "parse_stack",
    "project_root",
    "quantity_value",
    "read_stack_file",
    "resolve_stack",
    "stack_file_in",
    "tune_path_for",
]
