"""The Prometheus metrics vLLM defines, read from its own source; run by the vLLM venv's python.

Usage: `python vllm_metric_names.py`. Prints `{"version": ..., "metrics": {name: kind}}` as
JSON, kind being counter, gauge or histogram, for every metric its v1 metrics loggers and its
speculative-decoding metrics create. The source is parsed, not imported: importing vLLM's
loggers needs an engine configuration, and the names are literals in these files.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import json
import sys
from pathlib import Path

KINDS = {"_counter_cls": "counter", "_gauge_cls": "gauge", "_histogram_cls": "histogram",
         "Counter": "counter", "Gauge": "gauge", "Histogram": "histogram"}  # fmt: skip
SOURCES = ("v1/metrics/loggers.py", "v1/spec_decode/metrics.py")


def _callee(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def metrics_of(tree: ast.AST) -> dict[str, str]:
    """name → kind of every `_counter_cls(name="vllm:...")`-style call and counter spec table."""
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _callee(node) in KINDS:
            for keyword in node.keywords:
                value = keyword.value
                if (keyword.arg == "name" and isinstance(value, ast.Constant)
                        and str(value.value).startswith("vllm:")):  # fmt: skip
                    found[str(value.value)] = KINDS[_callee(node)]
        # Tables of (name, documentation) that a loop hands to `_counter_cls(name=name, ...)`.
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "counter_specs" for t in node.targets
        ):
            for item in ast.walk(node.value):
                first = item.elts[0] if isinstance(item, ast.Tuple) and item.elts else None
                if isinstance(first, ast.Constant) and str(first.value).startswith("vllm:"):
                    found[str(first.value)] = "counter"
    return found


def main() -> int:
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        print("vllm is not installed in this python", file=sys.stderr)
        return 1
    root = Path(next(iter(spec.submodule_search_locations)))
    metrics: dict[str, str] = {}
    for source in SOURCES:
        metrics.update(metrics_of(ast.parse((root / source).read_text())))
    print(json.dumps({"version": importlib.metadata.version("vllm"), "metrics": metrics}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
