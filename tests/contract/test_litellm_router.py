"""LiteLLM's own Router, fed the model_list a fleet renders, routes each alias to its servers.

No request leaves the process: the Router only picks deployments (`get_available_deployment`),
and a completion runs with LiteLLM's `mock_response`. LiteLLM's bundled model-cost map stands in
for the one it would fetch.
"""

from __future__ import annotations

import copy
import json
import os
from collections import Counter
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT, stack_values
from tests.support.cli import run_cli

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

REPLICAS = "deepseek-v4-flash-0731"
SPLIT = "deepseek-v4-flash-0731-q2"
MESSAGES = [{"role": "user", "content": "hello"}]


def fleet_values() -> dict[str, Any]:
    """Two replicas of one alias (strix-halo-pair) and a second model split over two nodes."""
    values = copy.deepcopy(stack_values("strix-halo-pair"))
    split = copy.deepcopy(stack_values("strix-halo-pair-split"))
    third = {
        **split["server"],
        "name": "q2",
        "alias": SPLIT,
        "nodeSelector": {"kubernetes.io/hostname": "nucbox-3"},
        "rpc": {"workers": [{"nodeSelector": {"kubernetes.io/hostname": "nucbox-4"},
                             "vramGib": 90}]},
        "model": split["model"],
        "store": {**split["store"], "name": "models-q2"},
    }  # fmt: skip
    values["servers"].append(third)
    return values


@pytest.fixture(scope="module")
def model_list(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    base = tmp_path_factory.mktemp("litellm")
    path = base / "Pulumi.fleet.yaml"
    config = {f"llm-infra:{key}": value for key, value in fleet_values().items()}
    path.write_text(yaml.safe_dump({"config": config}))
    result = run_cli(["render", str(path), "--out", str(base / "out")], cwd=ROOT)
    assert result.returncode == 0, result.stderr
    entries: list[dict[str, Any]] = json.loads((base / "out" / "outputs.json").read_text())[
        "litellmModelList"
    ]
    return entries


def test_router_balances_the_replicas_and_sends_the_split_model_to_its_head(
    model_list: list[dict[str, Any]],
) -> None:
    from litellm.router import Router

    router = Router(model_list=copy.deepcopy(model_list))
    picked: dict[str, Counter[str]] = {REPLICAS: Counter(), SPLIT: Counter()}
    for alias, counts in picked.items():
        for _ in range(60):
            deployment = router.get_available_deployment(model=alias, messages=MESSAGES)
            counts[deployment["litellm_params"]["api_base"]] += 1
    assert set(picked[REPLICAS]) == {
        "http://deepseek-v4-flash-0731.llm.svc:8080/v1",
        "http://deepseek-v4-flash-0731-b.llm.svc:8080/v1",
    }
    assert set(picked[SPLIT]) == {"http://q2.llm.svc:8080/v1"}


def test_router_completion_goes_to_a_server_of_the_alias(
    model_list: list[dict[str, Any]],
) -> None:
    from litellm.router import Router

    router = Router(model_list=copy.deepcopy(model_list))
    response = router.completion(model=SPLIT, messages=MESSAGES, mock_response="routed")
    assert response.choices[0].message.content == "routed"
    assert response._hidden_params["api_base"] == "http://q2.llm.svc:8080/v1"
