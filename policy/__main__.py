"""The llm-infra Pulumi policy pack: each rule of policy/validators.py as a resource policy."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

# Pulumi runs this file as a script from policy/: the project root makes `policy.validators` and
# `components` importable whether or not the project is installed in the pack's venv.
_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import pulumi  # noqa: E402
from pulumi_policy import (  # noqa: E402
    EnforcementLevel,
    PolicyConfigSchema,
    PolicyPack,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
)

from policy import validators  # noqa: E402

PACK_NAME = "llm-infra"
Check = Callable[[Mapping[str, Any], Mapping[str, str], Mapping[str, Any]], list[str]]


def plain(value: Any) -> Any:
    """Property values as plain dicts and lists (what resources.json holds)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def asset_text(asset: object) -> str | None:
    """The text of a string or file asset (None for anything else or an unreadable file)."""
    if isinstance(asset, pulumi.StringAsset) and isinstance(asset.text, str):
        return asset.text
    if isinstance(asset, pulumi.FileAsset) and isinstance(asset.path, str):
        try:
            return Path(asset.path).read_text(errors="replace")
        except OSError:
            return None
    return None


def resource_of(args: ResourceValidationArgs) -> tuple[dict[str, Any], dict[str, str]]:
    """A resource as validators.py sees it, and the text of a file it copies to a host."""
    files: dict[str, str] = {}
    source = args.props.get("source")
    remote_path = args.props.get("remotePath")
    text = asset_text(source)
    if isinstance(remote_path, str) and text is not None:
        files[remote_path] = text
    inputs = {k: v for k, v in args.props.items() if k != "source"}
    resource = {
        "type": args.resource_type,
        "name": args.name,
        "inputs": plain(inputs),
        "options": {"protect": bool(args.opts.protect)},
    }
    return resource, files


def _policy(
    name: str, description: str, check: Check, schema: PolicyConfigSchema | None = None
) -> ResourceValidationPolicy:
    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        resource, files = resource_of(args)
        for message in check(resource, files, args.get_config()):
            report_violation(message, None)

    return ResourceValidationPolicy(
        name=name,
        description=description,
        validate=validate,
        enforcement_level=EnforcementLevel.MANDATORY,
        config_schema=schema,
    )


def policies() -> list[ResourceValidationPolicy]:
    """The pack's policies, one per validator."""
    min_load = validators.DEFAULT_MIN_LOAD_SECONDS
    return [
        _policy(
            "images-pinned",
            "Container images name one build: a digest or a version/build tag.",
            lambda r, f, _c: validators.check_images_pinned(r, f),
        ),
        _policy(
            "gpu-server-probes",
            "GPU servers have a startup/liveness probe or healthcheck that covers the model load.",
            lambda r, f, c: validators.check_gpu_server_probes(
                r, f, int(c.get("minLoadSeconds", min_load))
            ),
            PolicyConfigSchema(
                properties={
                    "minLoadSeconds": {"type": "integer", "minimum": 0, "default": min_load}
                }
            ),
        ),
        _policy(
            "no-secret-literals",
            "No credential as a literal in container args, env values, compose files or scripts.",
            lambda r, f, _c: validators.check_no_secret_literals(r, f),
        ),
        _policy(
            "model-pvc-protected",
            "PersistentVolumeClaims that hold model weights are protected from deletion.",
            lambda r, f, _c: validators.check_model_pvc_protected(r, f),
        ),
        _policy(
            "caddy-allowlist",
            "The Caddy allowlist is not open to the world unless allowWorld is set.",
            lambda r, f, c: validators.check_caddy_allowlist(
                r, f, bool(c.get("allowWorld", False))
            ),
            PolicyConfigSchema(properties={"allowWorld": {"type": "boolean", "default": False}}),
        ),
    ]


if __name__ == "__main__":
    # PolicyPack serves the analyzer over gRPC until the engine stops it.
    PolicyPack(
        name=PACK_NAME, policies=list(policies()), enforcement_level=EnforcementLevel.MANDATORY
    )
