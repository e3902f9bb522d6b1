"""The one HTTP client policy of every outgoing request (fetcher, lock, verify, bench).

Standard library only: it is shipped beside `fetcher.py` and `verify.py` into stock images.

- A credential goes only to the host it was meant for: a redirect to another host drops the
  `Authorization` header for the rest of the chain (as huggingface_hub and requests do).
- Redirects go only to https, or to http when the first URL was http; at most
  `Limits.max_redirects` of them.
- Header and body sizes are bounded: a response head larger than `max_head_bytes` or with more
  than 100 header lines is refused, and a body is never read past the limit the caller states
  (the lock's size, the protocol's largest answer).
- A stalled or trickling peer is cut off: a minimum rate over a window, a deadline for the
  response head and an overall deadline for the whole exchange.
- Every failure is an `HttpError` with a clear message and `retryable` set only where another
  try can help (never for a name that does not resolve, 401, 403 or 404).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

REDIRECTS = (301, 302, 303, 307, 308)
RETRYABLE_STATUS = (408, 425, 429, 500, 502, 503, 504)
MESSAGE_CHARS = 200
"""How much of a URL or a peer's text an error message quotes."""


@dataclass(frozen=True)
class Limits:
    """The bounds one request runs under."""

    max_redirects: int = 5
    max_head_bytes: int = 64 * 1024
    """Status line and headers together."""
    head_timeout_s: float = 60.0
    """From the connect to the last header line."""
    stall_s: float = 60.0
    """Longest wait for any byte."""
    min_rate: float = 1024.0
    """Bytes per second a body must keep up over each `rate_window_s`."""
    rate_window_s: float = 60.0
    deadline_s: float | None = 600.0
    """The whole exchange, redirects and body included (None: only the rate bounds it)."""


class HttpError(Exception):
    """A request that failed: `status` when the peer answered one, `retryable` when another
    try can help."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retryable: bool = False,
        kind: str = "",
    ):
        super().__init__(message)
        self.status = status
        self.retryable = retryable
        self.kind = kind or ("status" if status is not None else "other")
        """What failed, for a caller that tells its reader more: `status`, `url` (malformed),
        `refused` (nothing listens), `timeout` (a deadline or a stall), `dropped` (the
        connection closed before a whole answer), `redirect`, `other`."""


class TooLarge(HttpError):
    """The answer is larger than the request allows (never retried: it would be again)."""


def shorten(text: str, limit: int = MESSAGE_CHARS) -> str:
    """A peer's text or a URL, cut to a length a message can carry."""
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


_UNSAFE = {
    **{c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0)) if c not in (0x09, 0x0A)},
    # Line and paragraph separators (a reader splitting lines splits there), bidirectional
    # overrides and isolates (they reorder what a terminal shows).
    **{c: f"\\u{c:04x}" for c in (0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A))},
}


def printable(text: str) -> str:
    """Text from a peer, safe to print on a terminal or in a log: control characters (C0 but
    tab and newline, DEL, C1), line separators and bidirectional overrides shown as escapes,
    never sent raw."""
    return text.translate(_UNSAFE)


def _origin(parts: urllib.parse.SplitResult) -> tuple[str, int]:
    default = 443 if parts.scheme == "https" else 80
    return (parts.hostname or "").lower(), parts.port or default


class _Watchdog:
    """Shuts a socket down when a deadline passes: the blocked read returns and the request
    fails with `why` (a trickle of single bytes resets no socket timeout)."""

    def __init__(self) -> None:
        self.fired: str | None = None
        self._timer: threading.Timer | None = None

    def arm(self, seconds: float, sock: socket.socket | None, why: str) -> None:
        self.cancel()
        if sock is None:
            return

        def fire() -> None:
            self.fired = why
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

        self._timer = threading.Timer(max(seconds, 0.0), fire)
        self._timer.daemon = True
        self._timer.start()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class Response:
    """A response whose body is read within the request's bounds."""

    def __init__(
        self,
        url: str,
        raw: http.client.HTTPResponse,
        connection: http.client.HTTPConnection,
        limits: Limits,
        max_body: int | None,
        started: float,
        watchdog: _Watchdog,
    ) -> None:
        self.url = url
        self.status = raw.status
        self.headers = raw.headers
        self._raw = raw
        self._connection = connection
        self._limits = limits
        self._max_body = max_body
        self._started = started
        self._watchdog = watchdog
        self.received = 0
        self._window_start = time.monotonic()
        self._window_bytes = 0
        length = raw.headers.get("Content-Length")
        self.length = int(length) if length is not None and length.strip().isdigit() else None
        if max_body is not None and self.length is not None and self.length > max_body:
            self.close()
            raise TooLarge(
                f"{shorten(url)}: the answer is {self.length} bytes, more than the {max_body} "
                "this request allows"
            )

    def __enter__(self) -> Response:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def limit(self, max_body: int) -> None:
        """Lower the body limit once the status is known (a 206 carries only the rest)."""
        self._max_body = max_body if self._max_body is None else min(self._max_body, max_body)
        if self.length is not None and self.length > self._max_body:
            self.close()
            raise TooLarge(
                f"{shorten(self.url)}: the answer is {self.length} bytes, more than the "
                f"{self._max_body} this request allows"
            )

    def close(self) -> None:
        """Drop the connection."""
        self._watchdog.cancel()
        self._raw.close()
        self._connection.close()

    def _fail(self, what: str, retryable: bool = True, kind: str = "dropped") -> HttpError:
        self.close()
        return HttpError(f"{shorten(self.url)}: {what}", retryable=retryable, kind=kind)

    def read1(self, size: int = 1024 * 1024) -> bytes:
        """Whatever has arrived (up to size), never past the body limit; b"" at the end."""
        want = size
        if self._max_body is not None:
            # One byte past the limit tells a body that does not end there.
            want = max(min(size, self._max_body - self.received + 1), 1)
        try:
            block = self._raw.read1(want)
        except http.client.IncompleteRead as exc:
            raise self._fail(
                f"the connection ended inside the body ({exc.partial and len(exc.partial)} "
                "bytes of a chunk)"
            ) from None
        except (http.client.HTTPException, ValueError) as exc:
            what = shorten(str(exc) or type(exc).__name__)
            raise self._fail(f"malformed body framing: {what}") from None
        except TimeoutError:
            raise self._fail(f"no data for {self._limits.stall_s:g} s", kind="timeout") from None
        except OSError as exc:
            raise self._fail(self._watchdog.fired or f"connection error: {exc}") from None
        if not block:
            if self._watchdog.fired:
                raise self._fail(self._watchdog.fired)
            if self.length is not None and self.received < self.length:
                raise self._fail(
                    f"the connection ended after {self.received} of {self.length} bytes"
                )
            return b""
        self.received += len(block)
        if self._max_body is not None and self.received > self._max_body:
            self.close()
            raise TooLarge(
                f"{shorten(self.url)}: the answer goes on past the {self._max_body} bytes this "
                "request allows"
            )
        self._check_rate(len(block))
        return block

    def _check_rate(self, count: int) -> None:
        now = time.monotonic()
        self._window_bytes += count
        elapsed = now - self._window_start
        if elapsed >= self._limits.rate_window_s:
            rate = self._window_bytes / elapsed
            if rate < self._limits.min_rate:
                raise self._fail(
                    f"{rate:.0f} bytes/s over {elapsed:.0f} s, below the minimum "
                    f"{self._limits.min_rate:g} bytes/s"
                )
            self._window_start, self._window_bytes = now, 0

    def read_all(self) -> bytes:
        """The whole body (the request must have stated a max_body)."""
        if self._max_body is None:
            raise ValueError("read_all needs a request with max_body")
        parts = []
        while block := self.read1():
            parts.append(block)
        return b"".join(parts)

    def json(self) -> Any:
        """The body as JSON; a clear error for anything else (never a traceback)."""
        body = self.read_all()
        try:
            return json.loads(body)
        except RecursionError:
            raise HttpError(f"{shorten(self.url)}: the JSON answer is nested too deeply") from None
        except ValueError as exc:
            text = body[:80].decode(errors="replace")
            raise HttpError(
                f"{shorten(self.url)}: the answer is not JSON ({exc}): {text!r}"
            ) from None

    def lines(self, max_line: int) -> Iterator[bytes]:
        """The body line by line (server-sent events), each at most max_line bytes."""
        pending = b""
        while True:
            block = self.read1(64 * 1024)
            if not block:
                if pending:
                    yield pending
                return
            pending += block
            *complete, pending = pending.split(b"\n")
            yield from complete
            if len(pending) > max_line:
                self.close()
                raise TooLarge(
                    f"{shorten(self.url)}: a line of the stream is longer than {max_line} bytes"
                )


def parse_url(url: str, schemes: tuple[str, ...] = ("http", "https")) -> urllib.parse.SplitResult:
    """The URL's parts, or an HttpError naming the URL and what is wrong with it (a port out of
    range or not a number, a broken IPv6 literal, a label longer than DNS allows, a control
    character): never a ValueError or UnicodeError from the standard library later."""
    where = shorten(url)
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in url):
        raise HttpError(f"{where}: not a valid URL (a space or control character)", kind="url")
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
        host = parts.hostname
    except ValueError as exc:
        raise HttpError(f"{where}: not a valid URL ({exc})", kind="url") from None
    if parts.scheme not in schemes or not host:
        raise HttpError(f"{where}: not an {' or '.join(schemes)} URL with a host", kind="url")
    if port == 0:
        raise HttpError(f"{where}: not a valid URL (port 0)", kind="url")
    if ":" not in host:  # an IPv6 literal was checked by urlsplit
        try:
            ascii_host = host.encode("idna").decode("ascii")
        except UnicodeError as exc:
            raise HttpError(f"{where}: not a valid host name ({exc})", kind="url") from None
        labels = ascii_host.rstrip(".").split(".")
        if len(ascii_host) > 253 or any(not 0 < len(label) <= 63 for label in labels):
            raise HttpError(
                f"{where}: not a valid host name (labels of 1 to 63 characters, 253 in all)",
                kind="url",
            )
    return parts


def _connect(parts: urllib.parse.SplitResult, limits: Limits) -> http.client.HTTPConnection:
    host = parts.hostname or ""
    if parts.scheme == "https":
        return http.client.HTTPSConnection(
            host, parts.port, timeout=limits.stall_s, context=ssl.create_default_context()
        )
    return http.client.HTTPConnection(host, parts.port, timeout=limits.stall_s)


def _target(parts: urllib.parse.SplitResult) -> str:
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


def request(
    url: str,
    *,
    method: str = "GET",
    headers: Mapping[str, str] | None = None,
    token: str | None = None,
    body: bytes | None = None,
    max_body: int | None = None,
    limits: Limits | None = None,
    ok: tuple[int, ...] = (200,),
) -> Response:
    """Send one request under the policy and return the answer whose status is in `ok`.

    Any other status is an HttpError carrying it (retryable for 408, 429 and 5xx), with at
    most MESSAGE_CHARS of the peer's text. `token` is sent as `Authorization: Bearer` to the
    first URL's host only.
    """
    limits = limits or Limits()
    started = time.monotonic()
    first = parse_url(url)
    origin = _origin(first)
    current, parts = url, first
    send_token = bool(token)
    for hop in range(limits.max_redirects + 1):
        sent = dict(headers or {})
        sent.setdefault("User-Agent", "llm-infra/1")
        if send_token and token is not None:
            sent["Authorization"] = f"Bearer {token}"
        answer = _exchange(current, parts, method, sent, body, limits, started, max_body)
        if answer.status not in REDIRECTS:
            if answer.status in ok:
                return answer
            raise _status_error(answer)
        location = answer.headers.get("Location")
        answer.close()
        if not location:
            raise HttpError(
                f"{shorten(current)}: HTTP {answer.status} without a Location", kind="redirect"
            )
        allowed = ("https", "http") if first.scheme == "http" else ("https",)
        try:
            following = urllib.parse.urljoin(current, location.strip())
            parts = parse_url(following, allowed)
        except (HttpError, ValueError) as exc:
            raise HttpError(
                f"{shorten(current)}: redirects to {shorten(location.strip())}, not followed "
                f"({exc}); only {' or '.join(allowed)} URLs are followed",
                kind="redirect",
            ) from None
        if _origin(parts) != origin:
            send_token = False  # the credential stays with its host
        if answer.status == 303 or (answer.status in (301, 302) and method == "POST"):
            method, body = ("GET" if method != "HEAD" else "HEAD"), None
        current = following
        if hop == limits.max_redirects:
            break
    raise HttpError(f"{shorten(url)}: more than {limits.max_redirects} redirects", kind="redirect")


def _status_error(answer: Response) -> HttpError:
    status = answer.status
    try:
        detail = answer._raw.read(MESSAGE_CHARS).decode(errors="replace")
    except (OSError, http.client.HTTPException, ValueError):
        detail = ""
    answer.close()
    reason = {401: "not authorised", 403: "forbidden", 404: "not found"}.get(status, "")
    text = f"HTTP {status}" + (f" ({reason})" if reason else "")
    if detail.strip():
        text += f": {detail.strip()!r}"
    return HttpError(
        f"{shorten(answer.url)}: {text}", status=status, retryable=status in RETRYABLE_STATUS
    )


def _exchange(
    url: str,
    parts: urllib.parse.SplitResult,
    method: str,
    headers: dict[str, str],
    body: bytes | None,
    limits: Limits,
    started: float,
    max_body: int | None,
) -> Response:
    where = shorten(url)
    left = None if limits.deadline_s is None else limits.deadline_s - (time.monotonic() - started)
    if left is not None and left <= 0:
        raise HttpError(f"{where}: no answer within the {limits.deadline_s:g} s deadline",
                        retryable=True, kind="timeout")  # fmt: skip
    connection = _connect(parts, limits)
    watchdog = _Watchdog()
    sock: socket.socket | None = None
    try:
        connection.connect()
        sock = connection.sock
        head_s = limits.head_timeout_s if left is None else min(limits.head_timeout_s, left)
        watchdog.arm(head_s, sock, f"no complete response head within {head_s:g} s")
        connection.request(method, _target(parts), body=body, headers=headers)
        raw = connection.getresponse()
    except (OSError, http.client.HTTPException) as exc:
        watchdog.cancel()
        connection.close()
        if sock is not None:
            sock.close()
        raise _connect_error(where, parts, limits, exc, watchdog.fired) from None
    if watchdog.fired:
        connection.close()
        raise HttpError(f"{where}: {watchdog.fired}", retryable=True, kind="timeout")
    head = sum(len(k) + len(v) + 4 for k, v in raw.headers.items())
    if head > limits.max_head_bytes:
        watchdog.cancel()
        raw.close()
        connection.close()
        raise HttpError(
            f"{where}: the response headers are {head} bytes, more than {limits.max_head_bytes}",
            retryable=True,
        )
    if limits.deadline_s is not None:
        remaining = limits.deadline_s - (time.monotonic() - started)
        watchdog.arm(remaining, sock, f"not finished within the {limits.deadline_s:g} s deadline")
    else:
        watchdog.cancel()
    return Response(url, raw, connection, limits, max_body, started, watchdog)


def _connect_error(
    where: str,
    parts: urllib.parse.SplitResult,
    limits: Limits,
    exc: BaseException,
    fired: str | None,
) -> HttpError:
    """The message (and whether a retry can help) for a failure before the response head."""
    if fired:
        return HttpError(f"{where}: {fired}", retryable=True, kind="timeout")
    if isinstance(exc, socket.gaierror):
        return HttpError(f"{where}: cannot resolve {parts.hostname!r}: {exc.strerror}")
    if isinstance(exc, ssl.SSLCertVerificationError):
        return HttpError(f"{where}: TLS certificate refused: {exc.verify_message}")
    if isinstance(exc, http.client.LineTooLong):
        return HttpError(f"{where}: a header line is longer than the client reads", retryable=True)
    if isinstance(exc, http.client.RemoteDisconnected):
        return HttpError(
            f"{where}: the connection closed before an answer", retryable=True, kind="dropped"
        )
    if isinstance(exc, http.client.BadStatusLine):
        return HttpError(
            f"{where}: not an HTTP status line: {shorten(str(exc), 80)}", retryable=True
        )
    if isinstance(exc, http.client.HTTPException):
        return HttpError(f"{where}: malformed answer: {shorten(str(exc), 80)}", retryable=True)
    if isinstance(exc, TimeoutError):
        return HttpError(
            f"{where}: no answer for {limits.stall_s:g} s", retryable=True, kind="timeout"
        )
    assert isinstance(exc, OSError)
    kind = "refused" if isinstance(exc, ConnectionRefusedError) else "dropped"
    return HttpError(f"{where}: cannot connect: {exc.strerror or exc}", retryable=True, kind=kind)
