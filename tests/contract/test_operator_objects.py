"""The rendered ServiceMonitor, PodMonitor and PrometheusRule fit prometheus-operator's CRDs.

Kubernetes has no schema of its own for them (`kubernetes-validate` reports none): the
operator's CRD schemas check them instead, as compiled validators and as strict TypeScript
types that reject an unknown field (tests/support/operator_schemas.py).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from infra.render_out import kubernetes_manifests
from tests.support.operator_schemas import check_operator_objects, operator_objects
from tests.support.stack_edits import Edit, rendered

VARIANTS: dict[str, list[Edit]] = {
    "stack": [],
    "api-key": [("server", "apiKey", True)],
    "pod-monitor": [
        ("metrics", "monitorKind", "PodMonitor"),
        ("metrics", "monitorLabels", {"release": "kube-prometheus-stack"}),
    ],
}


def strix_halo_objects(edits: list[Edit], tmp_path: Path) -> list[dict[str, Any]]:
    secrets = any(edit[:2] == ("server", "apiKey") for edit in edits)
    result = rendered("strix-halo", edits, tmp_path, secrets=secrets)
    return operator_objects(kubernetes_manifests(result.resources))


@pytest.mark.parametrize("variant", VARIANTS)
def test_strix_halo_monitoring_objects_fit_the_operator_schemas(
    variant: str, tmp_path: Path
) -> None:
    objects = strix_halo_objects(VARIANTS[variant], tmp_path)
    kind = "PodMonitor" if variant == "pod-monitor" else "ServiceMonitor"
    assert sorted(o["kind"] for o in objects) == sorted([kind, "PrometheusRule"])
    assert check_operator_objects(objects) == (0, [])


def test_each_server_of_a_fleet_fits_the_operator_schemas(tmp_path: Path) -> None:
    edits: list[Edit] = [("metrics", "serviceMonitor", True), ("metrics", "rules", True)]
    result = rendered("strix-halo-pair", edits, tmp_path)
    objects = operator_objects(kubernetes_manifests(result.resources))
    assert sorted(o["kind"] for o in objects) == ["PrometheusRule"] * 2 + ["ServiceMonitor"] * 2
    assert len({o["metadata"]["name"] for o in objects}) == len(objects)
    assert check_operator_objects(objects) == (0, [])


def test_the_schemas_refuse_an_unknown_field_a_bad_duration_and_a_wrong_type(
    tmp_path: Path,
) -> None:
    objects = strix_halo_objects([], tmp_path)
    monitor = next(o for o in objects if o["kind"] == "ServiceMonitor")
    rule = next(o for o in objects if o["kind"] == "PrometheusRule")

    typo = copy.deepcopy(monitor)
    typo["spec"]["endpoints"][0]["scrapeTimout"] = "10s"
    status, problems = check_operator_objects([typo])
    assert status == 1
    assert any("types:" in p and "scrapeTimout" in p for p in problems), problems

    duration = copy.deepcopy(monitor)
    duration["spec"]["endpoints"][0]["interval"] = "30 seconds"
    status, problems = check_operator_objects([duration])
    assert status == 1
    assert any("schema:" in p and "interval must match pattern" in p for p in problems), problems

    held = copy.deepcopy(rule)
    held["spec"]["groups"][0]["rules"][0]["for"] = 5
    status, problems = check_operator_objects([held])
    assert status == 1
    assert any("rules/0/for" in p for p in problems), problems
