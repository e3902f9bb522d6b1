"""`llm-infra tune STACK --kubernetes DIR`: the bake-off's Jobs, one per candidate runtime.

Each candidate's pod comes from the Deployment the stack renders with `server.runtime` set to
that candidate (so its image, devices, environment and the stack's exact flags are what
`pulumi up` would deploy), made a Job by `components/llamacpp/tune_jobs.py`. The steps that run
them stop the server first (its node's GPU and memory hold its model) and bring it back as
`pulumi up` last deployed it.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from components.k8s.metadata import Meta
from components.llamacpp.manifests import api_key_secret
from components.llamacpp.runtimes import BUILTIN_RUNTIMES, Runtime, record_problems
from components.llamacpp.tune_jobs import (
    EXPECT_FILE,
    TUNE_MOUNT,
    runner_files,
    tune_config_map,
    tune_job,
    tune_network_policy,
)
from components.payloads import shipped_modules
from infra.config import ConfigError, KubernetesStack, StackFile

RUNNER_MODULE = "tune_job"


@dataclass
class TuneJobs:
    """What `--kubernetes` writes: the manifests and the steps that run them."""

    manifests: list[dict[str, Any]]
    """The ConfigMap and the NetworkPolicy, then one Job per runtime."""
    jobs: list[str]
    namespace: str
    deployment: str
    selector: dict[str, str]
    """The server's pods (its Deployment's selector): gone before the first Job starts."""


def candidate_runtimes(current: Runtime, wanted: list[str]) -> list[Runtime]:
    """The server's own runtime first, then each `--runtime` (a built-in name or a JSON
    record), each once; ConfigError naming every bad one."""
    runtimes, problems = [current], []
    for text in wanted:
        if text in BUILTIN_RUNTIMES:
            runtime = BUILTIN_RUNTIMES[text]
        else:
            try:
                record = json.loads(text)
            except ValueError:
                problems.append(
                    f"--runtime: {text!r} is neither a runtime name ({', '.join(BUILTIN_RUNTIMES)})"
                    " nor a JSON runtime record"
                )
                continue
            if isinstance(record, dict):
                record = {"capabilities": [], "digest": None, **record}
            found = record_problems(record)
            if found:
                problems += [f"--runtime {text}: {k or 'record'}: {m}" for k, m in found]
                continue
            runtime = Runtime.from_record(record)
        if all(r.name != runtime.name for r in runtimes):
            runtimes.append(runtime)
    if problems:
        raise ConfigError(problems)
    return runtimes


def _with_runtime(stack_file: StackFile, server: str | None, runtime: Runtime) -> dict[str, str]:
    """The stack's Pulumi config with the server's `runtime` set to `runtime`."""
    config = dict(stack_file.config)
    record = runtime.to_record()
    if "llm-infra:servers" in config:
        servers = json.loads(config["llm-infra:servers"])
        for entry in servers:
            if entry.get("name", entry.get("alias")) == server:
                entry["runtime"] = record
                entry.pop("image", None)
        config["llm-infra:servers"] = json.dumps(servers)
    else:
        values = json.loads(config["llm-infra:server"])
        values["runtime"] = record
        values.pop("image", None)
        config["llm-infra:server"] = json.dumps(values)
    return config


def _deployment(manifests: list[dict[str, Any]], name: str) -> dict[str, Any]:
    for manifest in manifests:
        if manifest.get("kind") == "Deployment" and manifest["metadata"]["name"] == name:
            return manifest
    raise ConfigError([f"server: the render has no Deployment {name!r}"])


def job_name(server: str, runtime: str) -> str:
    """`SERVER-tune-RUNTIME`, cut to a DNS label."""
    return f"{server}-tune-{runtime}"[:63].rstrip("-")


def tune_jobs(
    stack_file: StackFile,
    server: str | None,
    chosen: KubernetesStack,
    runtimes: list[Runtime],
    *,
    expectations: str,
    settings: dict[str, Any],
) -> TuneJobs:
    """Render the stack once per runtime and make each Deployment a Job; the shared ConfigMap
    holds the runner's modules, the expectations and each Job's settings."""
    from infra import program, render

    name = chosen.server.resource_name
    deployments: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    for runtime in runtimes:
        config = _with_runtime(stack_file, server, runtime)
        try:
            rendered = render.run_program(
                program.main, config, stack_file.secret_keys, stack=stack_file.name
            )
        except ConfigError as exc:
            problems += [f"--runtime {runtime.name}: {p}" for p in exc.problems]
            continue
        deployments[runtime.name] = _deployment(rendered.manifests, name)
    if problems:
        raise ConfigError(problems)
    modules = shipped_modules(RUNNER_MODULE)
    # The run's nonce: each runner starts its result line with it, and `--collect` reads only
    # lines that do (a server's log cannot know it).
    nonce = secrets.token_hex(16)
    per_job: dict[str, dict[str, Any]] = {}
    for index, runtime in enumerate(runtimes):
        args = next(
            c for c in deployments[runtime.name]["spec"]["template"]["spec"]["containers"]
            if c["name"] == "llama-server"
        )["args"]  # fmt: skip
        per_job[runtime.name] = {
            **settings,
            "name": runtime.name,
            "runtime": runtime.to_record(),
            "current": index == 0,
            "gpuLayers": args[args.index("-ngl") + 1] if "-ngl" in args else None,
            "expect": f"{TUNE_MOUNT}/{EXPECT_FILE}",
            "nonce": nonce,
        }
    config_map = f"{name}-tune"
    namespace = chosen.kubernetes.namespace
    labels = {"app.kubernetes.io/managed-by": "llm-infra", "app.kubernetes.io/instance": name,
              "app.kubernetes.io/component": "tune"}  # fmt: skip
    files = runner_files(modules, expectations, per_job)
    meta = Meta(config_map, namespace, labels)
    manifests: list[dict[str, Any]] = [tune_config_map(meta, files), tune_network_policy(meta)]
    jobs = []
    for runtime in runtimes:
        jobs.append(job_name(name, runtime.name))
        manifests.append(
            tune_job(
                deployments[runtime.name],
                name=jobs[-1],
                candidate=runtime.name,
                runner_image=chosen.store.fetch_image,
                config_map=config_map,
                run_as_user=chosen.server.run_as_user,
                api_key_secret=api_key_secret(name) if chosen.server.api_key else None,
                modules=list(modules),
            )
        )
    selector = deployments[runtimes[0].name]["spec"]["selector"]["matchLabels"]
    return TuneJobs(manifests, jobs, namespace, name, dict(selector))


def steps(jobs: TuneJobs, out: str, stack: str) -> list[str]:
    """The commands that run the bake-off, in order: the server stopped, one Job at a time
    (they would share the GPU), each Job's log kept, the server back as `pulumi up` left it."""
    ns = f"-n {jobs.namespace}"
    selector = ",".join(f"{k}={v}" for k, v in sorted(jobs.selector.items()))
    lines = [
        f"kubectl {ns} scale deployment/{jobs.deployment} --replicas=0",
        f"kubectl {ns} wait --for=delete pod -l {selector} --timeout=10m",
        f"kubectl {ns} apply -f {out}/{CONFIG_FILE}",
    ]
    for index, job in enumerate(jobs.jobs, start=1):
        lines += [
            f"kubectl {ns} apply -f {out}/{job_file(index, job)}",
            f"kubectl {ns} wait --for=condition=complete --timeout=24h job/{job}",
            f"kubectl {ns} logs job/{job} -c tune > {out}/{job}.log",
            f"kubectl {ns} delete job/{job}",
        ]
    lines += [
        f"kubectl {ns} delete -f {out}/{CONFIG_FILE}",
        f"kubectl {ns} scale deployment/{jobs.deployment} --replicas=1",
        f"llm-infra tune {stack} --collect {out}/*.log",
    ]
    return lines


CONFIG_FILE = "00-tune-config.yaml"


def run_nonce(folder: Path) -> str:
    """The nonce of the run whose Jobs `tune --kubernetes` wrote into `folder` (its settings in
    the ConfigMap of CONFIG_FILE); ValueError when there is none."""
    path = folder / CONFIG_FILE
    try:
        documents = list(yaml.safe_load_all(path.read_text()))
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from None
    for document in documents:
        data = document.get("data", {}) if isinstance(document, dict) else {}
        for key, text in data.items():
            if key.startswith("job-") and key.endswith(".json"):
                nonce = json.loads(text).get("nonce")
                if isinstance(nonce, str) and nonce.isalnum():
                    return nonce
    raise ValueError(f"{path} holds no run nonce (write the Jobs again with tune --kubernetes)")


def job_file(index: int, job: str) -> str:
    """The file of the index-th Job, in the order the steps apply them."""
    return f"{index:02d}-{job}.yaml"
