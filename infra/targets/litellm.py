"""The LiteLLM route of a server: the model name clients send, and where LiteLLM sends it."""

from __future__ import annotations

from typing import Any

from components.payloads.verify import API_KEY_ENV

API_KEY_REFERENCE = f"os.environ/{API_KEY_ENV}"
"""LiteLLM reads the server's API key from its own environment: never a literal in a config."""


def litellm_entry(model_name: str, url: str, *, api_key: bool) -> dict[str, Any]:
    """The LiteLLM `model_list` entry that routes `model_name` to the server at `url`."""
    params: dict[str, Any] = {"model": f"openai/{model_name}", "api_base": f"{url}/v1"}
    if api_key:
        params["api_key"] = API_KEY_REFERENCE
    return {"model_name": model_name, "litellm_params": params}
