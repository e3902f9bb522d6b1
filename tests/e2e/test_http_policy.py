"""The HTTP client policy against hostile and two-host loopback peers: the policy module itself,
then each client that uses it (fetcher, lock, verify, bench)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from components.payloads import (
    FETCHER_SOURCE,
    HTTP_POLICY_SOURCE,
    PROPS_SOURCE,
    VERIFY_SOURCE,
    bench_client,
    fetcher,
    gate_decode,
    verify,
)
from components.payloads import http_policy as hp
from components.payloads.fetcher import fetch_document
from infra.lock import RangeReader, small_file_sha256
from tests.conftest import STOCK_PYTHON
from tests.support import hostile_http as peers
from tests.support.hostile_http import Seen

FAST = hp.Limits(
    head_timeout_s=1.0, stall_s=1.0, min_rate=50_000, rate_window_s=0.5, deadline_s=4.0
)
"""Bounds small enough that a trickling peer is cut off within seconds."""
MIB = 1024 * 1024


def failure(url: str, **kwargs: Any) -> hp.HttpError:
    """The error a request (and reading its whole answer) ends in."""
    kwargs.setdefault("limits", FAST)
    with pytest.raises(hp.HttpError) as caught, hp.request(url, **kwargs) as response:
        if kwargs.get("max_body") is not None:
            response.read_all()
        else:
            while response.read1():
                pass
    return caught.value


def peak_bytes(action: Callable[[], object]) -> int:
    """Peak Python memory allocated while running action."""
    tracemalloc.start()
    try:
        action()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


# --- the hostile-response catalogue, against the policy --------------------------------------


def test_an_endless_body_stops_at_the_stated_limit_in_bounded_memory() -> None:
    with peers.serve(peers.endless_body()) as peer:
        errors: list[hp.HttpError] = []
        peak = peak_bytes(lambda: errors.append(failure(peer.url, max_body=MIB)))
    assert isinstance(errors[0], hp.TooLarge)
    assert f"goes on past the {MIB} bytes" in str(errors[0])
    assert not errors[0].retryable
    assert peak < 8 * MIB


def test_an_announced_length_over_the_limit_is_refused_before_the_body() -> None:
    body = b"x" * 5000
    with peers.serve(peers.answer(200, body)) as peer:
        error = failure(peer.url, max_body=1000)
    assert isinstance(error, hp.TooLarge)
    assert "is 5000 bytes, more than the 1000" in str(error)


def test_a_truncated_chunk_is_a_retryable_error() -> None:
    with peers.serve(peers.truncated_chunk()) as peer:
        error = failure(peer.url, max_body=MIB)
    assert "the connection ended inside the body" in str(error)
    assert error.retryable


def test_a_huge_header_line_is_refused() -> None:
    with peers.serve(peers.huge_header()) as peer:
        peak = peak_bytes(lambda: failure(peer.url))
        error = failure(peer.url)
    assert "a header line is longer than the client reads" in str(error)
    assert peak < 8 * MIB


def test_many_headers_are_refused() -> None:
    with peers.serve(peers.many_headers()) as peer:
        error = failure(peer.url)
    assert "malformed answer: got more than 100 headers" in str(error)


def test_a_bad_status_line_is_refused() -> None:
    with peers.serve(peers.bad_status_line()) as peer:
        error = failure(peer.url)
    assert "not an HTTP status line" in str(error)
    assert error.retryable


def test_a_slowloris_head_is_cut_at_the_head_deadline() -> None:
    with peers.serve(peers.slowloris(head=True)) as peer:
        error = failure(peer.url)
    assert "no complete response head within 1 s" in str(error)


def test_a_trickling_body_is_cut_below_the_minimum_rate() -> None:
    with peers.serve(peers.slowloris(head=False)) as peer:
        error = failure(peer.url)
    assert "below the minimum 50000 bytes/s" in str(error)
    assert error.retryable


def test_the_overall_deadline_ends_a_body_that_keeps_the_rate() -> None:
    # Fast enough for the rate, but never ending: only the deadline stops it.
    limits = hp.Limits(head_timeout_s=1, stall_s=1, min_rate=1, rate_window_s=0.5, deadline_s=1.5)
    with peers.serve(peers.slowloris(head=False, every_s=0.01)) as peer:
        error = failure(peer.url, limits=limits)
    assert "not finished within the 1.5 s deadline" in str(error)


def test_an_endless_sse_line_stops_at_the_line_limit() -> None:
    with peers.serve(peers.endless_body(sse=True)) as peer, hp.request(
        peer.url, limits=FAST
    ) as response, pytest.raises(hp.TooLarge, match="longer than 65536 bytes"):  # fmt: skip
        for _ in response.lines(64 * 1024):
            pass


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"<html>oops</html>", "the answer is not JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b'{"data": [', "the answer is not JSON"),
    ],
    ids=["html", "deep", "cut"],
)
def test_malformed_json_is_a_clear_error(body: bytes, message: str) -> None:
    with peers.serve(peers.answer(200, body)) as peer, hp.request(
        peer.url, max_body=MIB, limits=FAST
    ) as response, pytest.raises(hp.HttpError, match=message):  # fmt: skip
        response.json()


@pytest.mark.parametrize(
    ("status", "retryable"), [(401, False), (403, False), (404, False), (429, True), (503, True)]
)
def test_only_statuses_a_retry_can_help_are_retryable(status: int, retryable: bool) -> None:
    with peers.serve(peers.answer(status, b"nope")) as peer:
        error = failure(peer.url)
    assert error.status == status and error.retryable is retryable
    assert f"HTTP {status}" in str(error) and "'nope'" in str(error)


def test_a_name_that_does_not_resolve_is_not_retryable(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_such_name(*args: object, **kwargs: object) -> object:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_such_name)
    error = failure("http://hub.invalid/x")
    assert "cannot resolve 'hub.invalid'" in str(error)
    assert not error.retryable


# --- redirects -------------------------------------------------------------------------------


def to(peer: peers.Peer) -> Callable[[Seen], str]:
    """Redirect every request to the same path on peer."""
    return lambda seen: peer.url + seen.path


def test_a_redirect_to_another_host_drops_the_credential() -> None:
    with (
        peers.serve(peers.answer(200, b"ok"), host="127.0.0.2") as cdn,
        peers.serve(peers.redirect(to(cdn))) as origin,
        hp.request(origin.url + "/file", token="hf_secret", max_body=10) as response,
    ):
        assert response.read_all() == b"ok"
    assert origin.authorizations() == ["Bearer hf_secret"]
    assert cdn.authorizations() == [None]


def test_a_redirect_on_the_same_host_keeps_the_credential() -> None:
    def same_host(seen: Seen) -> str:
        return "/final" if seen.path == "/first" else ""

    def script(conn: socket.socket, seen: Seen) -> None:
        if seen.path == "/first":
            peers.redirect(same_host)(conn, seen)
        else:
            peers.answer(200, b"ok")(conn, seen)

    with (
        peers.serve(script) as origin,
        hp.request(origin.url + "/first", token="k", max_body=10) as response,
    ):
        assert response.read_all() == b"ok"
    assert origin.authorizations() == ["Bearer k", "Bearer k"]


def test_the_credential_is_not_restored_by_a_redirect_back() -> None:
    # origin and final share a host name but not a port: another origin, no credential
    with (
        peers.serve(peers.answer(200, b"ok")) as final,
        peers.serve(peers.redirect(to(final)), host="127.0.0.2") as middle,
        peers.serve(peers.redirect(to(middle))) as origin,
        hp.request(origin.url + "/f", token="k", max_body=10) as response,
    ):
        response.read_all()
    assert origin.authorizations() == ["Bearer k"]
    assert middle.authorizations() == final.authorizations() == [None]


@pytest.mark.parametrize("location", ["ftp://127.0.0.1/x", "file:///etc/passwd", "gopher://x/"])
def test_a_redirect_to_another_scheme_is_refused(location: str) -> None:
    with peers.serve(peers.redirect(lambda seen: location)) as origin:
        error = failure(origin.url)
    assert "only https or http URLs are followed" in str(error)


def test_a_redirect_loop_ends_at_the_chain_bound() -> None:
    with peers.serve(peers.redirect(lambda seen: seen.path + "x")) as origin:
        error = failure(origin.url + "/a")
    assert "more than 5 redirects" in str(error)
    assert len(origin.seen) == 6


def test_a_post_keeps_its_body_across_a_307() -> None:
    with (
        peers.serve(peers.answer(200, b"{}"), host="127.0.0.2") as api,
        peers.serve(peers.redirect(to(api), status=307)) as origin,
        hp.request(origin.url + "/v1", method="POST", body=b'{"a":1}', max_body=10) as r,
    ):
        r.read_all()
    assert api.seen[0].method == "POST" and api.seen[0].body == b'{"a":1}'


# --- each client ---------------------------------------------------------------------------


REPO = "org/Tiny-GGUF"
FILES = {
    "Tiny-00001-of-00002.gguf": os.urandom(200_000),
    "Tiny-00002-of-00002.gguf": os.urandom(150_000),
}


def file_server(files: dict[str, bytes]) -> peers.Script:
    """A CDN: serves each file by the last part of the path, whatever the host asked for."""

    def script(conn: socket.socket, seen: Seen) -> None:
        name = seen.path.rsplit("/", 1)[-1]
        if name in files:
            peers.answer(200, files[name])(conn, seen)
        else:
            peers.answer(404)(conn, seen)

    return script


def lock_file(tmp_path: Path, files: dict[str, bytes], size: int | None = None) -> Path:
    entries = [
        {
            "path": name,
            "name": name,
            "size": len(data) if size is None else size,
            "sha256": hashlib.sha256(data).hexdigest(),
        }
        for name, data in files.items()
    ]
    path = tmp_path / "lock.json"
    path.write_text(json.dumps(fetch_document(REPO, "main", entries)))  # type: ignore[arg-type]
    return path


RSS_WRAPPER = (
    "import resource, subprocess, sys; code = subprocess.run(sys.argv[1:]).returncode; "
    "print('peak-rss-kib', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, "
    "file=sys.stderr); sys.exit(code)"
)


def run_measured(
    command: list[str], env: dict[str, str] | None = None
) -> tuple[int, str, str, int]:
    """A process's (exit code, stdout, stderr, peak RSS in KiB)."""
    result = subprocess.run(
        [sys.executable, "-c", RSS_WRAPPER, *command],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    err, _, last = result.stderr.rstrip("\n").rpartition("\n")
    label, rss = last.split()
    assert label == "peak-rss-kib", result.stderr
    return result.returncode, result.stdout, err, int(rss)


def stock_copy(tmp_path: Path, *scripts: Path) -> list[Path]:
    """The scripts and the modules shipped beside them (the policy; verify's server-properties
    check) alone in a read-only directory, as a stock image receives them."""
    where = tmp_path / "opt"
    where.mkdir()
    beside = [HTTP_POLICY_SOURCE, *([PROPS_SOURCE] if VERIFY_SOURCE in scripts else [])]
    for source in (*scripts, *beside):
        shutil.copy(source, where / source.name)
    where.chmod(0o555)
    return [where / script.name for script in scripts]


def fetch_env(endpoint: str, token: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "PYTHONPATH")}
    env["HF_ENDPOINT"] = endpoint
    if token:
        env["HF_TOKEN"] = token
    return env


def test_the_fetcher_in_a_stock_image_keeps_the_token_from_the_cdn(tmp_path: Path) -> None:
    (script,) = stock_copy(tmp_path, FETCHER_SOURCE)
    lock, dest = lock_file(tmp_path, FILES), tmp_path / "models"
    with peers.serve(file_server(FILES), host="127.0.0.2") as cdn, peers.serve(
        peers.redirect(to(cdn))
    ) as hub:  # fmt: skip
        result = subprocess.run(
            [*STOCK_PYTHON, str(script), "fetch", "--lock", str(lock), "--dest", str(dest)],
            capture_output=True, text=True, env=fetch_env(hub.url, "hf_secret"), timeout=120,
        )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert all((dest / name).read_bytes() == data for name, data in FILES.items())
    assert hub.authorizations() == ["Bearer hf_secret"] * 2
    assert cdn.authorizations() == [None, None]


@pytest.mark.parametrize(
    ("script", "code", "message"),
    [
        (peers.endless_body(), 8, "goes on past the 200000 bytes"),
        (peers.bad_status_line(), 3, "not an HTTP status line"),
        (peers.truncated_chunk(b"GGUF"), 3, "the connection ended inside the body"),
        (peers.many_headers(), 3, "got more than 100 headers"),
    ],
    ids=["endless-body", "bad-status-line", "truncated-chunk", "many-headers"],
)
def test_the_fetcher_ends_a_hostile_hub_with_a_clear_error(
    tmp_path: Path, script: peers.Script, code: int, message: str
) -> None:
    one = dict(list(FILES.items())[:1])
    lock, dest = lock_file(tmp_path, one), tmp_path / "models"
    with peers.serve(script) as hub:
        returncode, out, err, rss_kib = run_measured(
            [sys.executable, str(FETCHER_SOURCE), "fetch", "--lock", str(lock), "--dest",
             str(dest), "--retries", "1"],
            env=fetch_env(hub.url),
        )  # fmt: skip
    assert returncode == code, out + err
    assert message in out
    assert "Traceback" not in err + out
    assert rss_kib < 100 * 1024
    # Nothing past the lock's size reached the disk.
    part = dest / f".{next(iter(one))}.part"
    assert not part.exists() or part.stat().st_size <= len(next(iter(one.values())))


def test_the_fetcher_does_not_retry_a_name_that_does_not_resolve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def no_such_name(*args: object, **kwargs: object) -> object:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_such_name)
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.invalid")
    lock = lock_file(tmp_path, dict(list(FILES.items())[:1]))
    code = fetcher.main(["fetch", "--lock", str(lock), "--dest", str(tmp_path / "m")])
    out = capsys.readouterr().out
    assert code == fetcher.EXIT_NETWORK
    assert "cannot resolve 'hub.invalid'" in out and "retry" not in out


def test_the_lock_keeps_the_token_from_the_cdn() -> None:
    data = b'{"chat_template": "x"}'
    files = {"tokenizer_config.json": data, "model.gguf": b"GGUF" + b"\0" * 100}
    with peers.serve(file_server(files), host="127.0.0.2") as cdn, peers.serve(
        peers.redirect(to(cdn))
    ) as hub:  # fmt: skip
        digest = small_file_sha256(f"{hub.url}/r/tokenizer_config.json", len(data), "hf_secret")
        first = RangeReader(f"{hub.url}/r/model.gguf", "hf_secret", first_block=4)
        # The CDN ignores Range and sends the whole file: more than asked is an error.
        with pytest.raises(hp.TooLarge, match="more than the 4 this request allows"):
            first.read(4)
    assert digest == hashlib.sha256(data).hexdigest()
    assert hub.authorizations() == ["Bearer hf_secret"] * 2
    assert cdn.authorizations() == [None, None]


def api_server(models: bytes, completion: bytes) -> peers.Script:
    def script(conn: socket.socket, seen: Seen) -> None:
        peers.answer(200, models if seen.path.endswith("/models") else completion)(conn, seen)

    return script


def test_verify_keeps_the_api_key_from_another_host() -> None:
    models = json.dumps({"data": [{"id": "tiny"}]}).encode()
    with peers.serve(api_server(models, b"{}"), host="127.0.0.2") as other, peers.serve(
        peers.redirect(to(other), status=307)
    ) as api:  # fmt: skip
        assert verify.model_id(api.url, api_key="sk-key") == "tiny"
    assert api.authorizations() == ["Bearer sk-key"]
    assert other.authorizations() == [None]


@pytest.mark.parametrize(
    ("models", "message"),
    [
        (b"<html>", "the answer is not JSON"),
        (b'{"data": []}', "the answer has no ['data'][0]"),
        (b"[]", "the answer has no ['data']"),
        (b"[" * 50_000 + b"]" * 50_000, "nested too deeply"),
    ],
    ids=["not-json", "no-models", "a-list", "deep"],
)
def test_verify_ends_a_malformed_answer_with_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], models: bytes, message: str
) -> None:
    expect = tmp_path / "expect.json"
    expect.write_text(json.dumps(verify.new_expectations()))
    with peers.serve(api_server(models, b"{}")) as api:
        code = verify.main([api.url, "--expect", str(expect)])
    err = capsys.readouterr().err
    assert code == 1
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("completion", "message"),
    [
        (b'{"x": 1}', "the answer has no ['choices']"),
        (b'{"choices": [{"message": "hi"}]}', "a malformed answer"),
        (b'{"choices": [{"message": {"content": "4"}, "logprobs": {"content": [1]}}]}',
         "a malformed answer"),
    ],
    ids=["no-choices", "message-not-an-object", "bad-logprobs"],
)  # fmt: skip
def test_verify_ends_a_malformed_completion_with_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], completion: bytes, message: str
) -> None:
    expect = tmp_path / "expect.json"
    expect.write_text(json.dumps(verify.new_expectations()))
    models = json.dumps({"data": [{"id": "tiny"}]}).encode()
    with peers.serve(api_server(models, completion)) as api:
        code = verify.main([api.url, "--expect", str(expect)])
    captured = capsys.readouterr()
    # Each case fails on its own, in the table: "request failed: ..."
    assert code == 1
    assert "request failed: /v1/chat/completions" in captured.out
    assert message in captured.out and "Traceback" not in captured.out + captured.err


def test_verify_in_a_stock_image_reads_no_more_than_its_limit(tmp_path: Path) -> None:
    (script,) = stock_copy(tmp_path, VERIFY_SOURCE)
    expect = tmp_path / "expect.json"
    expect.write_text(json.dumps(verify.new_expectations()))
    with peers.serve(peers.endless_body()) as api:
        code, out, err, rss_kib = run_measured(
            [*STOCK_PYTHON, str(script), api.url, "--expect", str(expect)]
        )
    assert code == 1, out + err
    assert f"goes on past the {verify.MAX_ANSWER_BYTES} bytes" in err
    assert "Traceback" not in err
    # 16 MiB read at most: far from the hundreds of MiB an unbounded read reaches.
    assert rss_kib < 100 * 1024


def sse_server(events: bytes) -> peers.Script:
    def script(conn: socket.socket, seen: Seen) -> None:
        peers.answer(200, events, {"Content-Type": "text/event-stream"})(conn, seen)

    return script


def test_bench_keeps_the_api_key_from_another_host() -> None:
    events = b'data: {"choices": [{"delta": {"content": "hi"}}]}\n\ndata: [DONE]\n\n'
    with peers.serve(sse_server(events), host="127.0.0.2") as other, peers.serve(
        peers.redirect(to(other), status=307)
    ) as api:  # fmt: skip
        result = bench_client.stream_chat(api.url, {"model": "m"}, api_key="sk-key")
    assert result.ok, result.error
    assert api.authorizations() == ["Bearer sk-key"]
    assert other.authorizations() == [None]
    assert json.loads(other.seen[0].body)["stream"] is True


@pytest.mark.parametrize(
    ("events", "message"),
    [
        (b"data: []\n\n", "a malformed stream event"),
        (b"data: {not json\n\n", "a malformed stream event"),
        (b'data: {"x": 1}\n\ndata: [DONE]\n\n', "no tokens in the stream"),
        (b'data: {"choices": [{"logprobs": {"content": 5}}], "usage": 3}\n\n',
         "no tokens in the stream"),
    ],
    ids=["list", "not-json", "no-tokens", "odd-fields"],
)  # fmt: skip
def test_bench_ends_a_malformed_stream_with_a_clear_error(events: bytes, message: str) -> None:
    with peers.serve(sse_server(events)) as api:
        result = bench_client.stream_chat(api.url, {"model": "m"})
    assert not result.ok
    assert result.error is not None and message in result.error


def test_bench_stops_an_endless_sse_line_in_bounded_memory() -> None:
    results: list[bench_client.StreamResult] = []
    with peers.serve(peers.endless_body(sse=True)) as api:
        peak = peak_bytes(lambda: results.append(bench_client.stream_chat(api.url, {"model": "m"})))
    assert results[0].error is not None
    assert f"longer than {bench_client.MAX_SSE_LINE} bytes" in results[0].error
    assert peak < 8 * bench_client.MAX_SSE_LINE


MALFORMED_URLS = {
    "port-out-of-range": "http://127.0.0.1:99999",
    "port-not-a-number": "http://127.0.0.1:abc",
    "broken-ipv6": "http://[::1",
    "label-too-long": "http://" + "a" * 64 + ".example",
    "space": "http://127.0.0.1 :8080",
}


@pytest.mark.parametrize("url", MALFORMED_URLS.values(), ids=MALFORMED_URLS.keys())
def test_a_malformed_url_is_an_error_naming_it(url: str) -> None:
    with pytest.raises(hp.HttpError) as caught:
        hp.request(url + "/x")
    assert url.split("//", 1)[1][:20] in str(caught.value)
    assert caught.value.kind == "url" and not caught.value.retryable


@pytest.mark.parametrize("url", MALFORMED_URLS.values(), ids=MALFORMED_URLS.keys())
def test_a_redirect_to_a_malformed_url_is_an_error_naming_it(url: str) -> None:
    with peers.serve(peers.redirect(lambda seen: url + "/y")) as origin:
        error = failure(origin.url + "/x")
    assert "redirects to" in str(error) and "not followed" in str(error)
    assert error.kind == "redirect"


@pytest.mark.parametrize("url", MALFORMED_URLS.values(), ids=MALFORMED_URLS.keys())
def test_every_client_ends_a_malformed_url_with_a_clear_error(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The fetcher (its endpoint), verify, bench and the GPU gate's first decode.
    lock = lock_file(tmp_path, dict(list(FILES.items())[:1]))
    code = fetcher.main(["fetch", "--lock", str(lock), "--dest", str(tmp_path / "m"),
                         "--endpoint", url, "--retries", "1"])  # fmt: skip
    said = capsys.readouterr()
    assert code in (2, fetcher.EXIT_NETWORK), said
    assert "Traceback" not in said.out + said.err
    with pytest.raises(verify.EndpointError, match="not a valid"):
        verify.model_id(url)
    result = bench_client.stream_chat(url, {"model": "m"})
    assert not result.ok and result.error is not None and "not a valid" in result.error
    failed = gate_decode.first_decode(url)
    assert failed is not None and failed.startswith(gate_decode.WHAT) and "not a valid" in failed


def test_the_first_decode_follows_no_redirect_and_keeps_the_key_home() -> None:
    with (
        peers.serve(peers.answer(200, b"{}"), host="127.0.0.2") as other,
        peers.serve(peers.redirect(to(other), status=302)) as server,
    ):
        failed = gate_decode.first_decode(server.url, "sk-key", timeout=5)
    assert failed is not None and failed.startswith(gate_decode.WHAT), failed
    assert server.authorizations() == ["Bearer sk-key"]
    assert other.seen == []


def test_the_first_decode_names_a_refused_connection_and_a_status() -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    assert gate_decode.first_decode(f"http://127.0.0.1:{port}") == gate_decode.decode_failure(
        "refused"
    )
    with peers.serve(peers.answer(503, b"loading")) as server:
        failed = gate_decode.first_decode(server.url, timeout=5)
    assert failed == gate_decode.decode_failure("server-error", "503")


def test_verify_prints_a_servers_control_characters_as_escapes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def script(conn: socket.socket, seen: Seen) -> None:
        # A status line carrying a C1 CSI, an ESC sequence and a bidi override.
        conn.sendall("XTTP/1.1 200 \x9b31m\x1b[2Jok\u202e\r\n\r\n".encode())

    expect = tmp_path / "expect.json"
    expect.write_text(json.dumps(verify.new_expectations()))
    with peers.serve(script) as api:
        code = verify.main([api.url, "--expect", str(expect)])
    said = capsys.readouterr()
    shown = said.out + said.err
    assert code == 1
    assert "not an HTTP status line" in shown
    assert not any(c in shown for c in "\x9b\x1b\x80"), repr(shown)
    assert "\\x9b" in shown and "\\x1b" in shown
    # Text that reaches verify decoded (a JSON answer) may carry bidirectional overrides too.
    assert hp.printable("a\u202eb\x85c\td\ne\u2028f") == "a\\u202eb\\x85c\td\ne\\u2028f"
