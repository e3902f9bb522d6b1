"""huggingface_hub's HTTP client for `llm-infra lock` and `init`, bounded like every other
client of the project (`components/payloads/http_policy.py`): an answer of the hub's JSON API is
read as sent, never inflated, and never past a size a repo's answers reach."""

from __future__ import annotations

from typing import Any

from components.payloads import http_policy

MAX_API_ANSWER = 32 * 1024 * 1024
"""The largest answer of the hub's JSON API read (a page of a repo tree is ~300 KiB)."""


class HubAnswerRefused(Exception):
    """An answer of the hub's API this client does not read: compressed, or too large."""


def bounded_hub_client() -> Any:
    """huggingface_hub's HTTP client, with every answer of the hub read as sent, uncompressed
    (`Accept-Encoding: identity`; a compressed answer is refused, never inflated), and at most
    MAX_API_ANSWER bytes of it: a 500 KiB gzip answer cannot become a gigabyte in memory."""
    import httpx2
    from huggingface_hub.utils._http import hf_request_event_hook

    class Capped(httpx2.SyncByteStream):
        def __init__(self, inner: Any, url: str) -> None:
            self.inner, self.url, self.seen = inner, url, 0

        def __iter__(self) -> Any:
            for chunk in self.inner:
                self.seen += len(chunk)
                if self.seen > MAX_API_ANSWER:
                    raise HubAnswerRefused(
                        f"{http_policy.shorten(self.url)}: the answer goes on past "
                        f"{MAX_API_ANSWER} bytes"
                    )
                yield chunk

        def close(self) -> None:
            self.inner.close()

    class Bounded(httpx2.BaseTransport):
        def __init__(self) -> None:
            self.inner = httpx2.HTTPTransport()

        def handle_request(self, request: Any) -> Any:
            request.headers["Accept-Encoding"] = "identity"
            response = self.inner.handle_request(request)
            encoding = response.headers.get("Content-Encoding", "").strip().lower()
            if encoding not in ("", "identity"):
                response.close()
                raise HubAnswerRefused(
                    f"{http_policy.shorten(str(request.url))}: the answer is {encoding}-encoded "
                    "although it was asked for as sent (Accept-Encoding: identity); a "
                    "compressed answer is never inflated"
                )
            return httpx2.Response(
                status_code=response.status_code,
                headers=response.headers,
                stream=Capped(response.stream, str(request.url)),
                extensions=response.extensions,
                request=request,
            )

        def close(self) -> None:
            self.inner.close()

    return httpx2.Client(
        transport=Bounded(),
        event_hooks={"request": [hf_request_event_hook]},
        follow_redirects=True,
        timeout=None,
    )


def use_bounded_hub_client() -> None:
    """Make `bounded_hub_client` huggingface_hub's client in this process (once)."""
    from huggingface_hub.utils import _http

    if _http._GLOBAL_CLIENT_FACTORY is not bounded_hub_client:
        _http.set_client_factory(bounded_hub_client)
