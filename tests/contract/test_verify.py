"""``llm-infra verify`` against the real llama-server b11434 on tiny random-weight models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from components.payloads import props, verify
from tests.conftest import STACKS
from tests.support.cli import llm_infra
from tests.support.llama_server import run_llama_server, same_cpu_floor, tiny_server_argv
from tests.support.tiny_gguf import write_tiny_model_seeded
from tests.support.verify_models import with_random_model_tolerance


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("verify-models")
    return {
        name: write_tiny_model_seeded(root / name, "tiny", 3, seed=seed)[0]
        for name, seed in (("a", 1), ("b", 2))
    }


@pytest.fixture(scope="module")
def reference(models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("verify") / "expect.json"
    # A random-weight model is flat: its expectations carry the random-model thresholds.
    path.write_text(json.dumps(with_random_model_tolerance(verify.new_expectations())))
    with run_llama_server(tiny_server_argv(models["a"], "--api-key", "sekret")) as url:
        assert verify.main([url, "--expect", str(path), "--record", "--api-key", "sekret"]) == 0
    same_cpu_floor(path)
    return path


def test_record_writes_text_and_logprob_reference(reference: Path) -> None:
    doc = json.loads(reference.read_text())
    assert doc["format"] == verify.FORMAT
    assert doc["request"]["temperature"] == 0 and doc["request"]["seed"] == 1234
    assert len(doc["cases"]) == len(verify.DEFAULT_CASES)
    for case in doc["cases"]:
        assert case["expect"]["exact"]
        steps = case["reference"]["steps"]
        assert steps and all(len(s["top"]) == 5 for s in steps)
        # Greedy decoding: the chosen token is the top one at every position (by id: the
        # text of a token that splits a UTF-8 character is merged into the next one).
        assert all(verify.TokenStep.from_json(s).top1 == s["id"] for s in steps)


def test_verify_passes_on_a_restarted_server_with_the_same_model(
    models: dict[str, Path], reference: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with run_llama_server(tiny_server_argv(models["a"], "--api-key", "sekret")) as url:
        assert verify.main([url, "--expect", str(reference), "--api-key", "sekret"]) == 0
        # Twice on one server: the prompt cache must not change the answers.
        assert verify.main([url, "--expect", str(reference), "--api-key", "sekret"]) == 0
        # The key really is needed, and a refused request is a failure, not a pass.
        assert verify.main([url, "--expect", str(reference)]) == 1
    captured = capsys.readouterr()
    assert f"{len(verify.DEFAULT_CASES)}/{len(verify.DEFAULT_CASES)} cases passed" in captured.out
    assert "HTTP 401" in captured.err


def test_verify_fails_with_other_weights(
    models: dict[str, Path], reference: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with run_llama_server(tiny_server_argv(models["b"], "--api-key", "sekret")) as url:
        assert verify.main([url, "--expect", str(reference), "--api-key", "sekret"]) == 1
    out = capsys.readouterr().out
    assert f"0/{len(verify.DEFAULT_CASES)} cases passed" in out
    assert "DIFF" in out and "top token diverges at token 0" in out


def test_verify_fails_when_server_sampling_changes_the_output(
    models: dict[str, Path], reference: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A server-side default the request does not override (a changed deployment flag).
    argv = tiny_server_argv(models["a"], "--api-key", "sekret", "--repeat-penalty", "1.5")
    with run_llama_server(argv) as url:
        assert verify.main([url, "--expect", str(reference), "--api-key", "sekret"]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_logprob_tolerance_is_applied(models: dict[str, Path], reference: Path) -> None:
    doc = verify.load_expectations(reference)
    # Shift every recorded logprob: same text, same top tokens, but beyond the tolerance.
    for case in doc["cases"]:
        for step in case["reference"]["steps"]:
            step["logprob"] -= 1.0
    with run_llama_server(tiny_server_argv(models["a"], "--api-key", "sekret")) as url:
        results = verify.verify(url, doc, api_key="sekret")
        assert not any(r.ok for r in results)
        assert all(r.text_ok for r in results)
        assert all("logprob differs by" in r.problems[0] for r in results)
        doc["tolerance"]["logprob_abs"] = 1.01
        assert all(r.ok for r in verify.verify(url, doc, api_key="sekret"))


def test_completions_endpoint(models: dict[str, Path], tmp_path: Path) -> None:
    path = tmp_path / "expect.json"
    with run_llama_server(tiny_server_argv(models["a"])) as url:
        rc = verify.main([url, "--expect", str(path), "--record", "--api", "completions"])
        assert rc == 0
        same_cpu_floor(path)
        assert verify.main([url, "--expect", str(path)]) == 0
    doc = json.loads(path.read_text())
    assert doc["endpoint"] == "completions"
    assert all(case["reference"]["steps"] for case in doc["cases"])
    with run_llama_server(tiny_server_argv(models["b"])) as url:
        assert verify.main([url, "--expect", str(path)]) == 1


def test_api_key_is_read_from_the_hosts_env_file(tmp_path: Path) -> None:
    from components.payloads.verify import key_from_env_file
    from components.vllm.host_scripts import env_file_content

    env = tmp_path / "vllm.env"
    # The file the MI300X host gets: the generated-by comment, then the key.
    env.write_text(env_file_content("sk-from-the-env-file", "mi300x"))
    assert env.read_text().startswith("# Generated by llm-infra")
    assert key_from_env_file(env) == "sk-from-the-env-file"
    env.write_text("OTHER=1\n")
    with pytest.raises(KeyError):
        key_from_env_file(env)


def test_decode_speed_floor(
    models: dict[str, Path], reference: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with run_llama_server(tiny_server_argv(models["a"], "--api-key", "sekret")) as url:
        common = [url, "--expect", str(reference), "--api-key", "sekret"]
        assert verify.main([*common, "--min-decode-tps", "1"]) == 0
        # No build decodes a billion tokens a second: the floor must fail it.
        assert verify.main([*common, "--min-decode-tps", "1e9"]) == 1
    out = capsys.readouterr().out
    assert "at or above the floor of 1 tok/s" in out
    assert "is below the floor of 1e+09 tok/s" in out


def test_record_keeps_the_decode_speed(reference: Path) -> None:
    recorded = json.loads(reference.read_text())["recorded"]
    assert recorded["decode_tps"] > 0


def test_a_silent_cpu_fallback_fails_on_the_recorded_speed(
    models: dict[str, Path], reference: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CPU build is the fallback: the same answers as the GPU that recorded the file, slower.

    The reference stands for one recorded on a GPU 1000x faster (a busy machine alone has made
    the tiny model's recording and its check differ a hundredfold, so a thousand keeps the
    check far below the default floor of half either way; on the H200, a 43-layer model decoded
    at 253 tok/s on the GPU and 51-61 tok/s in each fallback: bench/gpu_run.py).
    """
    doc = json.loads(reference.read_text())
    on_gpu = tmp_path / "recorded-on-gpu.json"
    on_gpu.write_text(
        json.dumps({**doc,
                    "tolerance": {**doc["tolerance"], "min_decode_fraction": 0.5},
                    "recorded": {**doc["recorded"],
                                 "decode_tps": 1000 * doc["recorded"]["decode_tps"]}})
    )  # fmt: skip
    old = tmp_path / "old.json"
    old.write_text(json.dumps({**doc, "recorded": {"model": "x"}}))
    with run_llama_server(tiny_server_argv(models["a"], "--api-key", "sekret")) as url:
        common = ["--api-key", "sekret"]
        assert verify.main([url, "--expect", str(on_gpu), *common]) == 1
        first = capsys.readouterr().out
        assert verify.main([url, "--expect", str(old), *common]) == 0
        second = capsys.readouterr().out
    assert f"{len(verify.DEFAULT_CASES)}/{len(verify.DEFAULT_CASES)} cases passed" in first
    assert "of the " in first and "tok/s recorded (need 50%)" in first
    assert "the server may have fallen back to the CPU" in first
    assert "not checked (no speed recorded" in second


def test_one_server_of_a_fleet_is_recorded_and_checked_by_name(
    models: dict[str, Path], tmp_path: Path
) -> None:
    stack = tmp_path / "Pulumi.strix-halo-pair.yaml"
    stack.write_text((STACKS / "Pulumi.strix-halo-pair.yaml").read_text())
    name = "deepseek-v4-flash-0731-b"
    with run_llama_server(tiny_server_argv(models["a"])) as url:
        unnamed = llm_infra("verify", str(stack), "--url", url, "--record")
        assert unnamed.returncode == 2
        assert "--server: the stack has several servers; name one of" in unnamed.stderr
        assert f"'{name}'" in unnamed.stderr
        unknown = llm_infra("verify", str(stack), "--server", "nope", "--url", url)
        assert unknown.returncode == 2 and "no server 'nope'" in unknown.stderr
        missing = llm_infra("verify", str(stack), "--server", name, "--url", url)
        assert missing.returncode == 2
        assert f"--server {name} --url URL --record" in missing.stderr
        recorded = llm_infra("verify", str(stack), "--server", name, "--url", url, "--record")
        assert recorded.returncode == 0, recorded.stderr
        path = tmp_path / f"strix-halo-pair.{name}.verify.json"
        same_cpu_floor(path)
        assert not (tmp_path / "strix-halo-pair.verify.json").exists()
        # The tiny server is not what the stack renders: its /props says so, in the fleet
        # entry's own keys, while its answers still match the recording.
        other = llm_infra("verify", str(stack), "--server", name, "--url", url)
        assert other.returncode == 1, other.stdout + other.stderr
        assert other.stdout.splitlines()[1:3] == [
            "/props total_slots: 4, rendered servers[1].parallel: 1",
            "/props default_generation_settings.n_ctx: 2048, rendered servers[1].contextSize / "
            "servers[1].parallel: 65536",
        ]
        assert other.stdout.splitlines()[0].endswith(
            'rendered servers[1].model.files: "/models/DeepSeek-V4-Flash-0731-UD-IQ1_M-00001-'
            'of-00003.gguf"'
        )
        # What this server was started with, as a props file: the answers alone decide.
        same = props.new_props(
            "/props",
            "llama-server",
            [
                props.check(["model_path"], str(models["a"]), "-m"),
                props.check(["total_slots"], 4, "-np"),
                props.check(["default_generation_settings", "n_ctx"], 2048, "-c / -np"),
            ],
        )
        (tmp_path / "props.json").write_text(props.props_text(same))
        checked = llm_infra(
            "verify",
            str(stack),
            "--server",
            name,
            "--url",
            url,
            "--props",
            str(tmp_path / "props.json"),
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"{len(verify.DEFAULT_CASES)}/{len(verify.DEFAULT_CASES)} cases passed" in checked.stdout
    assert f"{len(verify.DEFAULT_CASES)}/{len(verify.DEFAULT_CASES)} cases passed" in other.stdout
    single = llm_infra("verify", "strix-halo", "--server", name)
    assert single.returncode == 2 and "the stack has one server" in single.stderr
