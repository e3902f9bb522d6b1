"""checkov (in its own venv) on rendered manifests, and the skips each render explains."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from tests.conftest import ROOT

CHECKOV = Path(os.environ.get("LLM_INFRA_CHECKOV", ROOT / ".venv-checkov" / "bin" / "checkov"))
PINNED_TAG_SKIPS = {"CKV_K8S_43", "CKV_K8S_15"}
PRIVILEGED_SKIPS = {"CKV_K8S_16", "CKV_K8S_20", "CKV_K8S_23", "CKV_K8S_28", "CKV_K8S_37",
                    "CKV_K8S_40"}  # fmt: skip


def checkov(manifests: Path) -> dict[str, Any]:
    assert CHECKOV.is_file(), f"checkov not found at {CHECKOV}: run scripts/setup-checkov-venv"
    result = subprocess.run(
        [str(CHECKOV), "-f", str(manifests), "--framework", "kubernetes",
         "--skip-download", "-o", "json"],
        capture_output=True, text=True, check=False, timeout=300,
        # Offline: no guideline download from checkov's service.
        env={**os.environ, "BC_SKIP_MAPPING": "TRUE"},
    )  # fmt: skip
    assert result.stdout, result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def findings(report: dict[str, Any], kind: str) -> set[tuple[str, str]]:
    # A kind with no checks may be left out.
    return {(c["check_id"], c["resource"]) for c in report["results"].get(kind, [])}
