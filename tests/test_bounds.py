"""The sidecar's, the middleware's and the transport's bounds (``docs/security.md``, "Bounds"): request header
count and size, one SSE event, one buffered answer; each refused with its exact status and body."""

from __future__ import annotations

import gzip
import json
import subprocess
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from numi_mw import NormalizingTransport, ReasoningMiddleware, SyncNormalizingTransport
from numi_mw.cli import main
from numi_mw.core.accumulate import Accumulator
from numi_mw.core.adapters import WIRE_APIS, Answer
from numi_mw.core.errors import ApiError
from numi_mw.core.response import Bounds, NativeSSERewriter, ResponseOptions, SSERewriter
from numi_mw.core.sse import EventTooLarge, SSEDecoder
from numi_mw.proxy import create_app
from tests.e2e_support import numi_mw_command, sidecar

COUNT_431 = {
    "error": {
        "message": "The request headers are over the limit of 256 headers (--max-header-count, max_header_count); "
        "send fewer or smaller headers.",
        "type": "invalid_request_error",
        "code": "request_header_fields_too_large",
        "param": None,
    }
}
SIZE_431 = {
    "error": {
        "message": "The request headers are over the limit of 65536 bytes of header names and values "
        "(--max-header-bytes, max_header_bytes); send fewer or smaller headers.",
        "type": "invalid_request_error",
        "code": "request_header_fields_too_large",
        "param": None,
    }
}


def scope(headers: list[tuple[bytes, bytes]], path: str = "/v1/chat/completions") -> dict[str, Any]:
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
        "headers": headers, "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 2),
    }  # fmt: skip


async def drive(
    app: Any, headers: list[tuple[bytes, bytes]], body: bytes = b'{"model": "m"}'
) -> tuple[int, int, bytes]:
    """One request through the ASGI ``app``: its status, how many times it called ``receive``, and its body.

    As a server does (ASGI spec, "HTTP"), ``receive`` gives the body, then waits: ``http.disconnect`` comes once the
    response is complete (the client stays until then)."""
    calls = 0
    complete = anyio.Event()

    async def receive() -> dict[str, Any]:
        nonlocal calls
        calls += 1
        if calls == 1:
            return {"type": "http.request", "body": body, "more_body": False}
        await complete.wait()
        return {"type": "http.disconnect"}

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            complete.set()

    async with app.router.lifespan_context(app):
        await app(scope(headers), receive, send)
    return sent[0]["status"], calls, b"".join(m.get("body", b"") for m in sent[1:])


def small_headers(count: int) -> list[tuple[bytes, bytes]]:
    return [(b"content-type", b"application/json")] + [(f"x-h{i}".encode(), b"v") for i in range(count - 1)]


def upstream_app(seen: list[httpx.Request]) -> Any:
    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"choices": []})

    return create_app("http://127.0.0.1:9/v1", transport=httpx.MockTransport(answer))


async def test_256_headers_pass_and_257_get_431_before_the_body_is_read() -> None:
    seen: list[httpx.Request] = []
    app = upstream_app(seen)
    assert (await drive(app, small_headers(256)))[:2] == (200, 1)
    assert len(seen) == 1
    status, calls, body = await drive(app, small_headers(257))
    assert (status, calls, json.loads(body)) == (431, 0, COUNT_431)
    assert len(seen) == 1


async def test_header_bytes_over_64_kib_get_431_before_the_body_is_read() -> None:
    seen: list[httpx.Request] = []
    app = upstream_app(seen)
    name = b"x-big"
    fits = [(b"content-type", b"application/json"), (name, b"v" * (65536 - 28 - len(name)))]
    assert sum(len(k) + len(v) for k, v in fits) == 65536
    assert (await drive(app, fits))[:2] == (200, 1)
    over = [*fits[:1], (name, fits[1][1] + b"v")]
    status, calls, body = await drive(app, over)
    assert (status, calls, json.loads(body)) == (431, 0, SIZE_431)
    assert len(seen) == 1


async def test_the_header_limits_are_options() -> None:
    app = create_app(
        "http://127.0.0.1:9/v1",
        max_header_count=2,
        max_header_bytes=10**6,
        transport=httpx.MockTransport(lambda request: httpx.Response(200, json={})),
    )
    status, _, body = await drive(app, small_headers(3))
    assert status == 431
    assert json.loads(body)["error"]["message"].startswith("The request headers are over the limit of 2 headers ")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_header_count": 0}, "max_header_count must be a positive whole number of headers, not 0"),
        ({"max_header_count": True}, "max_header_count must be a positive whole number of headers, not True"),
        ({"max_header_bytes": "64k"}, "max_header_bytes must be a positive whole number of bytes, not '64k'"),
        ({"max_header_bytes": -1}, "max_header_bytes must be a positive whole number of bytes, not -1"),
    ],
)
def test_header_limit_options_are_checked(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as raised:
        create_app("http://127.0.0.1:9/v1", **options)
    assert str(raised.value) == message


def test_many_headers_never_go_through_httpxs_cookie_view(monkeypatch: pytest.MonkeyPatch) -> None:
    """httpx's cookie extraction copies the request headers with one scan per name (quadratic in their count); the
    sidecar's client never extracts, so that copy is never made."""

    def refuse(*args: object) -> None:
        raise AssertionError("httpx built its cookie view of the upstream request")

    monkeypatch.setattr(httpx.Cookies, "_CookieCompatRequest", refuse)
    seen: list[httpx.Request] = []
    app = upstream_app(seen)
    status, _, _ = anyio.run(drive, app, small_headers(256))
    assert status == 200
    assert len(seen[0].headers.raw) >= 255


def test_the_serve_flags_set_the_header_limits() -> None:
    flags = ("--max-header-count", "3", "--max-header-bytes", "100000")
    with sidecar("http://127.0.0.1:9/v1", *flags) as base_url, httpx.Client(timeout=10) as http:
        response = http.get(f"{base_url}/models", headers={"x-a": "1", "x-b": "2", "x-c": "3"})
    assert response.status_code == 431
    assert response.json()["error"]["message"] == (
        "The request headers are over the limit of 3 headers (--max-header-count, max_header_count); send fewer "
        "or smaller headers."
    )


@pytest.mark.parametrize(
    "flag", ["--max-header-count", "--max-header-bytes", "--max-event-bytes", "--max-response-bytes"]
)
def test_serve_refuses_a_header_limit_that_is_not_positive(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serve", flag, "0"])
    assert exited.value.code == 2
    assert f"argument {flag}: '0' must be greater than 0" in capsys.readouterr().err


# One SSE event and one buffered answer.

LIMIT = 65536
CHUNK = b'data: {"id":"gen-1","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n'


def event_error(limit: int = LIMIT) -> bytes:
    return (
        b'data: {"id":"gen-1","object":"chat.completion.chunk","created":1,"model":"m","error":{"message":"The '
        b"upstream sent an SSE event over the limit of " + str(limit).encode() + b" bytes (--max-event-bytes, "
        b'max_event_bytes); the answer is incomplete.","type":"upstream_unavailable","code":502,"param":null},'
        b'"choices":[]}\n\n'
    )


def answer_502(limit: int) -> dict[str, Any]:
    return {
        "error": {
            "message": f"The upstream's answer is over the limit of {limit} bytes once decoded (--max-response-bytes, "
            "max_response_bytes); numi_mw does not buffer more of it.",
            "type": "api_error",
            "code": "upstream_unavailable",
            "param": None,
        }
    }


def test_the_decoder_refuses_a_long_line_without_holding_it() -> None:
    """A 64 MiB line fed in 1 MiB pieces: the decoder never holds more than its limit, and holds nothing once it
    refused."""
    decoder = SSEDecoder(max_event_bytes=4 * 2**20)
    piece = b"x" * 2**20
    assert [event.raw for event in decoder.feed(CHUNK + b"data: " + piece)] == [CHUNK]
    held = [decoder.held]
    with pytest.raises(EventTooLarge) as raised:
        for _ in range(63):
            decoder.feed(piece)
            held.append(decoder.held)
    assert raised.value.limit == 4 * 2**20
    assert held == [2**20 + 6, 2 * 2**20 + 6, 3 * 2**20 + 6]
    assert decoder.held == 0
    assert decoder.flush() == []


@pytest.mark.parametrize("tail", [b"", b"\n\n"])
def test_events_completed_in_the_refused_piece_are_kept(tail: bytes) -> None:
    decoder = SSEDecoder(max_event_bytes=len(CHUNK))
    with pytest.raises(EventTooLarge):
        decoder.feed(CHUNK + CHUNK + b"data: " + b"x" * len(CHUNK) + tail)
    assert decoder.held == 0
    assert [event.raw for event in decoder.flush()] == [CHUNK, CHUNK]


@pytest.mark.parametrize("pieces", [1, 3])
def test_an_event_of_exactly_the_limit_passes_and_one_byte_more_is_refused(pieces: int) -> None:
    event = b"data: " + b"y" * (100 - 8) + b"\n\n"
    assert len(event) == 100
    for body, refused in ((event, False), (event[:-2] + b"y\n\n", True)):
        decoder = SSEDecoder(max_event_bytes=100)
        step = -(-len(body) // pieces)
        try:
            events = [e for i in range(0, len(body), step) for e in decoder.feed(body[i : i + step])]
        except EventTooLarge:
            assert refused
            assert decoder.held == 0
        else:
            assert not refused
            assert [e.raw for e in events] == [body]


def test_an_event_over_the_bound_that_a_later_read_ends_is_refused_by_every_stream_reader() -> None:
    """The event's held bytes are within the bound and so is the read up to its blank line; together they are
    not (reads cut inside events, as a network cuts a stream)."""
    limit = len(CHUNK)
    reads = [CHUNK + CHUNK[:60], CHUNK[60:-2] + b"x" * 20 + b"\n\n" + CHUNK[:30], CHUNK[30:]]
    rewriter = SSERewriter(ResponseOptions(bounds=Bounds(max_event_bytes=limit)))
    assert rewriter.feed(reads[0]) == CHUNK
    with pytest.raises(ApiError) as raised:
        rewriter.feed(reads[1])
    assert (raised.value.status, raised.value.code) == (502, "upstream_unavailable")
    assert rewriter.fail(raised.value) == event_error(limit)
    accumulator = Accumulator(bounds=Bounds(max_event_bytes=limit))
    accumulator.feed_sse(reads[0])
    with pytest.raises(ApiError) as raised:
        accumulator.feed_sse(reads[1])
    assert (raised.value.status, raised.value.code) == (502, "upstream_unavailable")


def test_a_native_stream_past_the_event_bound_ends_with_the_error_event() -> None:
    options = ResponseOptions(
        wire_api="anthropic-messages", answer=Answer("claude"), bounds=Bounds(max_event_bytes=LIMIT)
    )
    rewriter = NativeSSERewriter(options, WIRE_APIS["anthropic-messages"])
    with pytest.raises(ApiError) as raised:
        rewriter.feed(b"event: message_start\ndata: " + b"x" * LIMIT)
    assert (raised.value.status, raised.value.code) == (502, "upstream_unavailable")
    assert rewriter.fail(raised.value) == event_error().replace(b'"gen-1"', b'""').replace(b":1,", b":0,").replace(
        b'"model":"m"', b'"model":""'
    )


def event_stream(pieces: list[bytes], pulled: list[int]) -> httpx.AsyncByteStream:
    class Stream(httpx.AsyncByteStream):
        async def __aiter__(self) -> Any:
            for piece in pieces:
                pulled[0] += 1
                yield piece

    return Stream()


def long_line_pieces() -> list[bytes]:
    """The first chunk, then one data line of 16 MiB in 16 KiB pieces that never ends."""
    return [CHUNK, b"data: ", *[b"z" * 16384] * 1024]


async def test_a_sidecar_stream_ends_with_the_error_event_past_the_event_bound_and_stops_reading() -> None:
    pulled = [0]

    def answer(request: httpx.Request) -> httpx.Response:
        headers = {"content-type": "text/event-stream"}
        return httpx.Response(200, headers=headers, stream=event_stream(long_line_pieces(), pulled))

    app = create_app("http://127.0.0.1:9/v1", max_event_bytes=LIMIT, transport=httpx.MockTransport(answer))
    status, _, body = await drive(app, [(b"content-type", b"application/json")], b'{"model": "m", "stream": true}')
    assert status == 200
    assert body == CHUNK + event_error()
    assert pulled[0] == 2 + LIMIT // 16384  # the rest of the upstream body is never read


def gzipped_answer(size: int) -> bytes:
    """A chat completion of ``size`` bytes, gzip-compressed (a run of one letter: about a thousandth of it)."""
    head = b'{"choices":[{"index":0,"message":{"role":"assistant","content":"'
    tail = b'"},"finish_reason":"stop"}]}'
    return gzip.compress(head + b"a" * (size - len(head) - len(tail)) + tail)


@pytest.mark.parametrize(("size", "status"), [(2**20, 200), (2**20 + 1, 502)])
async def test_a_sidecar_buffered_answer_over_the_response_bound_decoded_is_a_502(size: int, status: int) -> None:
    compressed = gzipped_answer(size)
    assert len(compressed) < 4096

    def answer(request: httpx.Request) -> httpx.Response:
        headers = {"content-type": "application/json", "content-encoding": "gzip"}
        return httpx.Response(200, headers=headers, content=compressed)

    app = create_app("http://127.0.0.1:9/v1", max_response_bytes=2**20, transport=httpx.MockTransport(answer))
    got, _, body = await drive(app, [(b"content-type", b"application/json")])
    assert got == status
    if status == 502:
        assert json.loads(body) == answer_502(2**20)
    else:
        assert len(body) == size


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_event_bytes": 0}, "max_event_bytes must be a positive whole number of bytes, not 0"),
        ({"max_event_bytes": 1.5}, "max_event_bytes must be a positive whole number of bytes, not 1.5"),
        ({"max_response_bytes": False}, "max_response_bytes must be a positive whole number of bytes, not False"),
    ],
)
def test_the_answer_bounds_are_checked_in_every_shell(options: dict[str, Any], message: str) -> None:
    for build in (
        lambda: create_app("http://127.0.0.1:9/v1", **options),
        lambda: ReasoningMiddleware(upstream_app([]), **options),
        lambda: NormalizingTransport(provider="openrouter", **options),
        lambda: SyncNormalizingTransport(provider="openrouter", **options),
    ):
        with pytest.raises(ValueError) as raised:
            build()
        assert str(raised.value) == message


def app_answering(*messages: dict[str, Any]) -> Any:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        for message in messages:
            await send(message)

    return app


async def test_the_middleware_ends_an_app_stream_past_the_event_bound() -> None:
    start = {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]}
    pieces = [CHUNK, b"data: ", *[b"z" * 16384] * 8, b"\n\n", CHUNK]
    bodies = [{"type": "http.response.body", "body": piece, "more_body": True} for piece in pieces]
    app = ReasoningMiddleware(
        app_answering(start, *bodies, {"type": "http.response.body", "body": b"", "more_body": False}),
        max_event_bytes=LIMIT,
    )
    sent = await drive_middleware(app)
    assert sent[0]["status"] == 200
    assert b"".join(m.get("body", b"") for m in sent[1:]) == CHUNK + event_error()
    assert sent[-1]["more_body"] is False
    assert len([m for m in sent if m["type"] == "http.response.body" and not m.get("more_body")]) == 1


async def test_the_middleware_answers_502_for_an_app_json_body_past_the_response_bound() -> None:
    start = {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]}
    pieces = [{"type": "http.response.body", "body": b"{" + b" " * 40000, "more_body": True}] * 2
    end = {"type": "http.response.body", "body": b"}", "more_body": False}
    app = ReasoningMiddleware(app_answering(start, *pieces, end), max_response_bytes=LIMIT)
    sent = await drive_middleware(app)
    assert sent[0]["status"] == 502
    assert json.loads(sent[1]["body"]) == answer_502(LIMIT)
    assert len(sent) == 2


async def drive_middleware(app: Any) -> list[dict[str, Any]]:
    calls = 0

    async def receive() -> dict[str, Any]:
        nonlocal calls
        calls += 1
        return {"type": "http.request", "body": b'{"model": "m"}', "more_body": False}

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope([(b"content-type", b"application/json")]), receive, send)
    return sent


async def test_the_transport_bounds_a_buffered_answer_and_a_stream() -> None:
    compressed = gzipped_answer(2**20 + 1)
    pulled = [0]

    def answer(request: httpx.Request) -> httpx.Response:
        if json.loads(request.content).get("stream"):
            headers = {"content-type": "text/event-stream"}
            return httpx.Response(200, headers=headers, stream=event_stream(long_line_pieces(), pulled))
        headers = {"content-type": "application/json", "content-encoding": "gzip"}
        return httpx.Response(200, headers=headers, content=compressed)

    transport = NormalizingTransport(
        httpx.MockTransport(answer), provider="openrouter", max_event_bytes=LIMIT, max_response_bytes=2**20
    )
    async with httpx.AsyncClient(transport=transport) as http:
        url = "http://up.test/v1/chat/completions"
        buffered = await http.post(url, json={"model": "m"})
        assert buffered.status_code == 502
        assert buffered.json() == answer_502(2**20)
        streamed = await http.post(url, json={"model": "m", "stream": True})
        assert streamed.status_code == 200
        assert streamed.content == CHUNK + event_error()
    assert pulled[0] == 2 + LIMIT // 16384


def test_the_sync_transport_bounds_a_buffered_answer() -> None:
    compressed = gzipped_answer(2**20 + 1)

    def answer(request: httpx.Request) -> httpx.Response:
        headers = {"content-type": "application/json", "content-encoding": "gzip"}
        return httpx.Response(200, headers=headers, content=compressed)

    transport = SyncNormalizingTransport(httpx.MockTransport(answer), provider="openrouter", max_response_bytes=2**20)
    with httpx.Client(transport=transport) as http:
        response = http.post("http://up.test/v1/chat/completions", json={"model": "m"})
    assert response.status_code == 502
    assert response.json() == answer_502(2**20)


def test_numi_mw_response_ends_a_stream_past_the_event_bound_as_the_sidecar_does(tmp_path: Path) -> None:
    request = tmp_path / "request.json"
    request.write_text('{"model": "m", "stream": true}')
    stdin = b"data: " + b"x" * (16 * 2**20)
    result = subprocess.run(
        [*numi_mw_command(), "response", "--request", str(request)], input=stdin, capture_output=True, timeout=60
    )
    assert result.returncode == 1
    expected = event_error(16 * 2**20).replace(b'"gen-1"', b'""').replace(b":1,", b":0,").replace(b'"m"', b'""')
    assert result.stdout == expected
