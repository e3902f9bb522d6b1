"""Lock and stack files are read strictly and within limits, before anything is expanded."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from components.payloads.fetcher import MAX_NAME_BYTES, FetchError, load_lock
from infra.config import ConfigError
from infra.config.limits import MAX_LOCK_FILE_BYTES, MAX_STACK_FILE_BYTES, MAX_YAML_VALUES
from infra.config.stack import read_stack_file
from infra.lock import read_lock

SHA = "0" * 64
COMMIT = "a" * 40


def lock_document(**changes: Any) -> dict[str, Any]:
    """A valid lock of one GGUF file with its header summary."""
    document: dict[str, Any] = {
        "version": 1,
        "repo": "org/Tiny-GGUF",
        "revision": COMMIT,
        "requested_revision": "main",
        "patterns": ["model.gguf"],
        "files": [{"path": "model.gguf", "name": "model.gguf", "size": 100, "sha256": SHA}],
        "gguf": {
            "schema": 1,
            "architecture": "llama",
            "metadata": {"llama.block_count": 2, "general.name": "tiny"},
            "vocab_size": 32,
            "layer_bytes": [10, 10],
            "other_tensors": {"token_embd.weight": 5},
            "total_bytes": 25,
            "tensor_count": 3,
        },
    }
    document.update(changes)
    return document


def problems(tmp_path: Path, document: object) -> list[str]:
    path = tmp_path / "x.lock.json"
    path.write_text(json.dumps(document))
    with pytest.raises(ConfigError) as caught:
        read_lock(path)
    return caught.value.problems


def test_a_valid_lock_is_read(tmp_path: Path) -> None:
    path = tmp_path / "x.lock.json"
    path.write_text(json.dumps(lock_document()))
    lock = read_lock(path)
    assert lock.files[0]["size"] == 100 and lock.gguf is not None


def test_a_schema_2_summary_with_its_matrix_weights_is_read(tmp_path: Path) -> None:
    summary = {
        **lock_document()["gguf"],
        "schema": 2,
        "matmul_weights": {"0": {"Q4_K 64x64": 2}, "output": {"Q6_K 64x32": 1}},
    }
    path = tmp_path / "x.lock.json"
    path.write_text(json.dumps(lock_document(gguf=summary)))
    assert read_lock(path).gguf == summary


def test_a_schema_3_summary_with_every_tensor_is_read(tmp_path: Path) -> None:
    summary = {
        **lock_document()["gguf"],
        "schema": 3,
        "matmul_weights": {"0": {"F32 5x1": 1}},
        "tensors": {"blk.0.w": "I8 5x2", "blk.1.w": "I8 10", "token_embd.weight": "I8 5"},
    }
    path = tmp_path / "x.lock.json"
    path.write_text(json.dumps(lock_document(gguf=summary)))
    assert read_lock(path).gguf == summary


def with_size(size: object) -> dict[str, Any]:
    return lock_document(
        files=[{"path": "model.gguf", "name": "model.gguf", "size": size, "sha256": SHA}]
    )


def test_a_lock_size_that_is_a_bool_is_refused_not_read_as_1(tmp_path: Path) -> None:
    (problem,) = problems(tmp_path, with_size(True))
    assert "files.0.size" in problem and "valid integer" in problem


def test_a_lock_size_that_is_a_numeric_string_is_refused_not_read_as_a_number(
    tmp_path: Path,
) -> None:
    (problem,) = problems(tmp_path, with_size("123"))
    assert "files.0.size" in problem and "valid integer" in problem


def test_the_fetcher_refuses_the_same_bool_and_string_sizes(tmp_path: Path) -> None:
    for size in (True, "123"):
        path = tmp_path / "lock.json"
        path.write_text(json.dumps(with_size(size)))
        with pytest.raises(FetchError, match=r"files\[0\]: size .* is not a byte count"):
            load_lock(path)


def test_a_lock_version_that_is_a_string_is_refused(tmp_path: Path) -> None:
    (problem,) = problems(tmp_path, lock_document(version="1"))
    assert "version" in problem


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ({"other_tensors": None}, "other_tensors"),
        ({"layer_bytes": ["10", 10]}, "layer_bytes.0"),
        ({"total_bytes": 26}, "is not the sum"),
        ({"vocab_size": True}, "vocab_size"),
        ({"architecture": "../x"}, "architecture"),
        ({"schema": 4}, "schema"),
        ({"schema": 2}, "matmul_weights"),
        ({"schema": 3, "matmul_weights": {"0": {"F32 5x1": 1}}}, "tensors"),
        (
            {"schema": 2, "matmul_weights": {"0": {"F32 5x1": 1}}, "tensors": {"x": "F32 25"}},
            "tensors",
        ),
        (
            {
                "schema": 3,
                "matmul_weights": {"0": {"F32 5x1": 1}},
                "tensors": {"blk.0.w": "F32 24"},
            },
            "not total_bytes",
        ),
        (
            {"schema": 3, "matmul_weights": {"0": {"F32 5x1": 1}}, "tensors": {"x": "F99 25"}},
            "tensors",
        ),
        ({"matmul_weights": {"0": {"Q4_K 64x64": 1}}}, "matmul_weights"),
        ({"schema": 2, "matmul_weights": {"../x": {"Q4_K 64x64": 1}}}, "matmul_weights"),
    ],
    ids=[
        "no-other-tensors",
        "string-bytes",
        "wrong-total",
        "bool-vocab",
        "bad-arch",
        "schema",
        "schema-2-without-matmul",
        "schema-3-without-tensors",
        "tensors-in-schema-2",
        "tensors-not-the-total",
        "tensors-bad-type",
        "matmul-in-schema-1",
        "matmul-bad-layer",
    ],
)
def test_a_malformed_gguf_summary_is_a_clear_error(
    tmp_path: Path, change: dict[str, Any], where: str
) -> None:
    summary = {**lock_document()["gguf"], **change}
    if change.get("other_tensors", 0) is None:
        del summary["other_tensors"]
    (problem,) = problems(tmp_path, lock_document(gguf=summary))
    assert problem.startswith(f"{tmp_path / 'x.lock.json'}: gguf: ")
    assert where in problem


def test_a_file_name_whose_download_would_not_fit_is_refused_at_lock_and_fetch(
    tmp_path: Path,
) -> None:
    name = "a" * 246 + ".gguf"  # 251 bytes: `.NAME.part` is 257, past the 255 limit
    document = lock_document(
        patterns=[name], files=[{"path": name, "name": name, "size": 1, "sha256": SHA}]
    )
    (problem,) = problems(tmp_path, document)
    assert f"is 251 bytes long; at most {MAX_NAME_BYTES}" in problem
    path = tmp_path / "lock.json"
    path.write_text(json.dumps(document))
    with pytest.raises(FetchError, match="is 251 bytes long"):
        load_lock(path)


def test_a_huge_repo_is_refused_without_being_echoed(tmp_path: Path) -> None:
    found = problems(tmp_path, lock_document(repo="a/" + "b" * 10_000_000))
    assert len("\n".join(found)) < 1000
    assert "repo" in found[0]


def test_a_huge_file_path_is_refused_without_being_echoed(tmp_path: Path) -> None:
    path = "d/" * 600 + "model.gguf"
    document = lock_document(
        patterns=[path], files=[{"path": path, "name": "model.gguf", "size": 1, "sha256": SHA}]
    )
    (problem,) = problems(tmp_path, document)
    assert "at most 1024 characters" in problem and len(problem) < 600


def test_a_lock_file_larger_than_the_limit_is_not_parsed(tmp_path: Path) -> None:
    path = tmp_path / "big.lock.json"
    path.write_bytes(b" " * (MAX_LOCK_FILE_BYTES + 1))
    with pytest.raises(ConfigError, match=f"larger than {MAX_LOCK_FILE_BYTES} bytes"):
        read_lock(path)


ALIAS_BOMB = """config:
  llm-infra:model:
    a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
    b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
    c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
    d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
    e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
    f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
    g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
    h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
    i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""


def test_the_yaml_alias_bomb_is_refused_before_expansion(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.bomb.yaml"
    path.write_text(ALIAS_BOMB)
    assert len(ALIAS_BOMB) < 600
    tracemalloc.start()
    try:
        with pytest.raises(ConfigError) as caught:
            read_stack_file(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    (problem,) = caught.value.problems
    assert f"values with its aliases (at most {MAX_YAML_VALUES}): not read" in problem
    assert peak < 16 * 1024 * 1024


def test_a_few_aliases_are_still_read(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.aliases.yaml"
    path.write_text("config:\n  llm-infra:a: &x [1, 2]\n  llm-infra:b: *x\n")
    stack = read_stack_file(path)
    assert json.loads(stack.config["llm-infra:b"]) == [1, 2]


def test_a_recursive_alias_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.loop.yaml"
    path.write_text("config: &a\n  x: *a\n")
    with pytest.raises(ConfigError, match="an alias refers to a value that contains it"):
        read_stack_file(path)


def test_a_stack_file_larger_than_the_limit_is_not_parsed(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.big.yaml"
    path.write_bytes(b"#" * (MAX_STACK_FILE_BYTES + 1))
    with pytest.raises(ConfigError, match=f"larger than {MAX_STACK_FILE_BYTES} bytes"):
        read_stack_file(path)
