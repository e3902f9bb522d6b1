"""prometheus-operator's CRD schemas applied to rendered objects (tests/node, run by node).

`tests/node/check-operator-objects.mjs` checks each ServiceMonitor, PodMonitor and
PrometheusRule with the operator's compiled JSON-schema validators and, under `tsc --strict`,
with the TypeScript types generated from the same schemas (which reject a field the CRD does
not define). `bash .ci/run` installs both with `npm ci --prefix tests/node`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from tests.conftest import ROOT

NODE_DIR = ROOT / "tests" / "node"
CHECKER = NODE_DIR / "check-operator-objects.mjs"
MODELS = NODE_DIR / "node_modules" / "@kubernetes-models" / "prometheus-operator"
OPERATOR_API = "monitoring.coreos.com/v1"


def operator_objects(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The prometheus-operator objects among rendered Kubernetes objects."""
    return [d for d in documents if d.get("apiVersion") == OPERATOR_API]


def check_operator_objects(objects: list[dict[str, Any]]) -> tuple[int, list[str]]:
    """(exit status, problems): 0 and no problem when every object fits the CRD schemas."""
    node = shutil.which("node")
    assert node, "node is not installed (bash .ci/run needs it for the operator's schemas)"
    where = NODE_DIR.relative_to(ROOT)
    assert MODELS.is_dir(), f"run `npm ci --prefix {where}` (bash .ci/run does)"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "objects.json"
        path.write_text(json.dumps(objects))
        result = subprocess.run(
            [node, str(CHECKER), str(path)],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
    assert result.returncode in (0, 1), result.stdout + result.stderr
    return result.returncode, result.stdout.splitlines()
