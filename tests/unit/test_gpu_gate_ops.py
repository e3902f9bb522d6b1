"""The gate's op-level degradation table (components/payloads/gate_ops.py) on its fixtures.

tests/fixtures/gpu_gate/ops/ holds real llama-server b11434 load logs of the CPU build (an
rpc-server on loopback as the offload device, so the device prefix is ``RPC``) and, for the
messages only a GPU build prints, lines built from the source format, spliced here into the real
H200 Vulkan load log. Each table entry must be matched by its fixture and named in the finding;
informational lines must not trip it; the probe's shell and the Python check must agree.
"""

from __future__ import annotations

import gzip
import subprocess
from pathlib import Path

import pytest

from components.llamacpp import gate
from components.payloads import gate_ops, gpu_gate

OPS = Path(__file__).resolve().parent.parent / "fixtures" / "gpu_gate" / "ops"
GPU_LOG = OPS.parent / "llama43-gpu.load.log"
LOADED = "llama_server: model loaded"

# Real captures: (device prefix, expected layers, the entries they hold).
FUSED = {"fused-op-elsewhere", "fused-op-disabled"}
REAL: dict[str, tuple[str, int | None, set[str]]] = {
    "deepseek4-rpc-healthy.load.log": ("RPC", None, set()),
    "deepseek4-rpc-flash-attn-off.load.log": ("RPC", None, set()),
    "deepseek4-rpc-healthy-lv5.load.log.gz": ("RPC", None, set()),
    "deepseek4-rpc-fused-ops-disabled.load.log": ("RPC", None, FUSED),
    "llama-rpc-flash-attn-disabled.load.log": ("RPC", None, FUSED),
    "deepseek4-rpc-split-tensor-backend-sampling.load.log": (
        "RPC",
        None,
        {"backend-sampling-split-tensor"},
    ),
}
OFFLOAD_FAILS = {"deepseek4-rpc-split-tensor-backend-sampling.load.log"}
"""Its model buffer is on the tensor-parallel Meta() device: the offload check fails too."""


def read(path: Path) -> str:
    return gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()


def spliced(lines: str) -> str:
    """The H200 Vulkan load log (gate PASS) with ``lines`` logged before the load finished."""
    head, tail = read(GPU_LOG).split(f"I srv  {LOADED}", 1)
    before, _, stamp = head.rpartition("\n")
    return f"{before}\n{lines}{stamp}I srv  {LOADED}{tail}"


def fixture(name: str) -> tuple[str, str, int | None, set[str]]:
    """(log text, device prefix, expected layers, expected entries) of a fixture file."""
    if name in REAL:
        prefix, layers, keys = REAL[name]
        return read(OPS / name), prefix, layers, keys
    key = name.removesuffix(".lines").removesuffix(".load.log")
    if name.endswith(".load.log"):  # a GPU capture that replaced the built line
        return read(OPS / name), "Vulkan", None, {key}
    return spliced(read(OPS / name)), "Vulkan", 40, {key}


FIXTURES = sorted(p.name for p in OPS.iterdir() if p.name != "README.md")
BY_KEY = {d.key: d for d in gate_ops.DEGRADATIONS}


def probe(tmp_path: Path, text: str, prefix: str, layers: int | None) -> list[str]:
    log = tmp_path / "llama-server.log"
    log.write_text(text)
    script = gate.probe_shell(str(log), 9999 if layers is None else layers, prefix)
    result = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=False)
    assert result.stderr == "", result.stderr
    return result.stdout.splitlines()


def degradation_lines(lines: list[str]) -> list[str]:
    """The probe's FAIL lines that are table findings (its offload lines have their own text)."""
    whats = tuple(d.what for d in gate_ops.DEGRADATIONS)
    failed = [line.removeprefix("gpu-gate: FAIL: ") for line in lines]
    return [line for line in failed if line.startswith(whats)]


def test_every_entry_has_a_fixture() -> None:
    covered = set().union(*(fixture(name)[3] for name in FIXTURES))
    assert covered == set(BY_KEY)


@pytest.mark.parametrize("name", FIXTURES)
def test_each_fixture_trips_exactly_its_entries_naming_op_source_and_cause(name: str) -> None:
    text, prefix, layers, keys = fixture(name)
    result = gpu_gate.check_log(text, layers, device_prefix=prefix)
    found = [m for m in result.evidence.degraded]
    tripped = {d.key for d in gate_ops.DEGRADATIONS for m in found if d.matches(m)}
    assert tripped == keys
    for message in found:
        assert sum(d.matches(message) for d in gate_ops.DEGRADATIONS) == 1, message
    for key in keys:
        entry = BY_KEY[key]
        named = [p for p in result.problems if p.startswith(entry.what)]
        assert named, result.problems
        for problem in named:
            assert f"(llama.cpp b11434 {entry.source}); likely cause: {entry.cause}" in problem
            quoted = problem.split(": '", 1)[1].split("' (llama.cpp b11434 ", 1)[0]
            assert quoted in text and entry.regex.search(quoted)
    assert result.ok == (not keys and name not in OFFLOAD_FAILS)


@pytest.mark.parametrize("name", FIXTURES)
def test_the_probe_and_the_python_check_agree(name: str, tmp_path: Path) -> None:
    text, prefix, layers, _ = fixture(name)
    result = gpu_gate.check_log(text, layers, device_prefix=prefix)
    lines = probe(tmp_path, text, prefix, layers)
    assert degradation_lines(lines) == gate_ops.degradation_findings(result.evidence.degraded)
    assert lines[-1].startswith("gpu-gate: PASS") == result.ok, lines


def test_the_fused_op_lines_name_the_op_and_the_device_it_fell_to() -> None:
    text = read(OPS / "deepseek4-rpc-fused-ops-disabled.load.log")
    problems = gpu_gate.check_log(text, None, device_prefix="RPC").problems
    assert problems == [
        *(
            BY_KEY["fused-op-elsewhere"].finding(
                f"resolve_fused_ops: layer 0 is assigned to device RPC0 but {op} is assigned to "
                "device CPU (usually due to missing support)"
            )
            for op in ("Flash Attention", "fused DeepSeek V4 HC comb", "fused DeepSeek V4 HC post")
        ),
        *(
            BY_KEY["fused-op-disabled"].finding(
                f"resolve_fused_ops: {op} not supported, set to disabled"
            )
            for op in ("Flash Attention", "fused DeepSeek V4 HC comb", "fused DeepSeek V4 HC post")
        ),
    ]


@pytest.mark.parametrize(
    ("name", "line"),
    [
        (
            "deepseek4-rpc-flash-attn-off.load.log",
            "llama_context: flash_attn      " + "      = disabled",
        ),
        ("deepseek4-rpc-healthy.load.log", "resolve_fused_ops: Flash Attention enabled"),
        ("deepseek4-rpc-healthy.load.log", "preserve_reasoning kwarg: not supported by template"),
        ("deepseek4-rpc-healthy.load.log", "use `--cache-ram 0` to disable the prompt cache"),
        (
            "deepseek4-rpc-healthy-lv5.load.log.gz",
            "cannot be used with preferred buffer type CPU_REPACK, using CPU instead",
        ),
    ],
)
def test_real_informational_lines_do_not_trip_the_gate(
    name: str, line: str, tmp_path: Path
) -> None:
    text = read(OPS / name)
    assert line in text
    # The same line in the Vulkan load log: still a PASS, in Python and in the probe.
    message = next(m for m in text.splitlines() if line in m)
    both = spliced(message + "\n")
    assert gpu_gate.check_log(both, 40).ok
    assert probe(tmp_path, both, "Vulkan", 40)[-1].startswith("gpu-gate: PASS")


def test_a_device_buffer_moved_to_the_host_is_degraded_a_host_move_is_not() -> None:
    entry = BY_KEY["weights-moved-to-host"]
    line = "done_getting_tensors: tensor 'x' (iq1_m) (and 3 others) cannot be used with "
    assert entry.matches(line + "preferred buffer type Vulkan0, using CPU instead")
    assert entry.matches(line + "preferred buffer type ROCm0, using CPU_REPACK instead")
    assert not entry.matches(line + "preferred buffer type CPU_REPACK, using CPU instead")
    assert not entry.matches(line + "preferred buffer type Vulkan_Host, using CPU instead")


def test_a_degradation_repeated_by_the_dry_run_is_one_finding(tmp_path: Path) -> None:
    line = "0.00.100.001 W resolve_fused_ops: Flash Attention not supported, set to disabled\n"
    text = spliced(line + line.replace("0.00.100.001", "0.00.300.001"))
    result = gpu_gate.check_log(text, 40)
    assert len(result.problems) == 1 and "Flash Attention not supported" in result.problems[0]
    assert degradation_lines(probe(tmp_path, text, "Vulkan", 40)) == result.problems
