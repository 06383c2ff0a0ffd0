"""End to end: the real ``numi-mw serve`` process between the openai SDK and a replay upstream on loopback.

The replay upstream serves recorded provider traffic from ``../shared/fixtures/openai-chat/`` as recorded.
Requests reach it normalized; responses come back normalized (spec 004 "Response fields", "Streaming") and
unbuffered.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import openai
import pytest

from numi_mw.catalog_files import default_catalog
from numi_mw.core.details import rebuild_reasoning_details
from numi_mw.proxy import create_app
from tests.client_shapes import litellm_assistant
from tests.e2e_support import MODELS, ReplayUpstream, fixture_body, free_port, sidecar, split_events
from tests.response_support import client_view, rewrite, rewrite_by_event, rewrite_json, sse_chunks

pytestmark = pytest.mark.usefixtures("upstream_transport")
"""Every test here runs once per upstream transport (httpcore and aiohttp)."""


@pytest.fixture(scope="module")
def upstream(shared_dir: Path) -> Iterator[ReplayUpstream]:
    """The replay upstream, which answers with the recorded fixtures: skipped with them when ``shared/`` is absent."""
    with ReplayUpstream().running() as replay:
        yield replay


@pytest.fixture(scope="module")
def openrouter_sidecar(upstream: ReplayUpstream, upstream_transport: str) -> Iterator[str]:
    with sidecar(upstream.base_url, "--provider", "openrouter", "--timeout", "2") as base_url:
        yield base_url


@pytest.fixture
def client(openrouter_sidecar: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=openrouter_sidecar, api_key="sk-test", max_retries=0, timeout=10) as sdk:
        yield sdk


def signed_detail(shared: Path) -> dict[str, Any]:
    recorded = json.loads(
        (shared / "fixtures/openai-chat/openrouter-claude-4.5-signed-reasoning.buffered.json").read_text()
    )
    detail: dict[str, Any] = recorded["choices"][0]["message"]["reasoning_details"][0]
    return detail


def history(shared: Path) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "What is the weather in Lisbon?"},
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "I need current data, so I will call the weather tool.",
            "reasoning_details": [signed_detail(shared)],
            "tool_calls": [
                {
                    "id": "call_7f3a9c",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Lisbon"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_7f3a9c", "content": '{"temperature":21}'},
    ]


def expected_upstream_history(shared: Path) -> list[dict[str, Any]]:
    messages = history(shared)
    assistant = messages[1]
    messages[1] = {
        "role": "assistant",
        "content": None,
        "reasoning": assistant["reasoning_content"],
        "reasoning_details": assistant["reasoning_details"],
        "tool_calls": assistant["tool_calls"],
    }
    return messages


def last_body(upstream: ReplayUpstream) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(upstream.received[-1].body)
    return body


BUFFERED = [
    "openai-chat/openrouter-claude-4.5-signed-reasoning.buffered.json",
    "openai-chat/deepseek-v4-flash-reasoning-content-tool-call.buffered.json",
    "openai-chat/openrouter-gpt-5-mini-summary-encrypted.buffered.json",
]


@pytest.mark.parametrize("fixture", BUFFERED)
def test_buffered_request_is_normalized_and_the_body_comes_back_as_recorded(
    shared_dir: Path, upstream: ReplayUpstream, client: openai.OpenAI, fixture: str
) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="anthropic/claude-sonnet-4.5",
        messages=history(shared_dir),  # type: ignore[arg-type]
        reasoning_effort="high",
        extra_body={"include_reasoning": True},
        extra_headers={"x-replay-fixture": fixture},
    )
    assert last_body(upstream) == {
        "messages": expected_upstream_history(shared_dir),
        "model": "anthropic/claude-sonnet-4.5",
        "reasoning": {"effort": "high", "exclude": False},
    }
    assert raw.http_response.content == rewrite_json(fixture_body(fixture)[0])
    assert raw.http_response.headers["content-length"] == str(len(raw.http_response.content))
    message = raw.parse().choices[0].message
    recorded = json.loads(fixture_body(fixture)[0])["choices"][0]["message"]
    assert message.content == recorded["content"]
    reasoning = recorded.get("reasoning") or recorded["reasoning_content"]
    assert message.model_extra is not None
    assert message.model_extra["reasoning"] == reasoning
    assert "reasoning_content" not in message.model_extra
    expected_details = recorded.get("reasoning_details") or [
        {"type": "reasoning.text", "text": reasoning, "format": "unknown"}
    ]
    assert message.model_extra["reasoning_details"] == expected_details


STREAMS = [
    "openai-chat/openrouter-claude-sonnet-4.5-reasoning-details.sse",
    "openai-chat/deepseek-reasoner-reasoning-content.sse",
    "openai-chat/openrouter-o3-encrypted-reasoning-details.sse",
    "openai-chat/groq-gpt-oss-120b-reasoning-tool-call.sse",
    "openai-chat/snowflake-claude-sonnet-4.6-reasoning-details.sse",
    "openai-chat/xai-grok-3-mini-reasoning-content.stream.jsonl",
]


def recorded_chunks(fixture: str) -> list[dict[str, Any]]:
    chunks = []
    for event in split_events(fixture_body(fixture)[0]):
        for line in event.splitlines():
            if line.startswith(b"data:") and line[5:].strip() != b"[DONE]":
                chunks.append(json.loads(line[5:]))
    return chunks


@pytest.mark.parametrize("include", [True, False])
@pytest.mark.parametrize("fixture", STREAMS)
def test_streamed_request_is_normalized_and_every_event_arrives_normalized(
    shared_dir: Path, upstream: ReplayUpstream, client: openai.OpenAI, fixture: str, include: bool
) -> None:
    stream = client.chat.completions.create(
        model="deepseek-reasoner",
        messages=history(shared_dir),  # type: ignore[arg-type]
        stream=True,
        extra_body={"include_reasoning": include, "reasoning": {"max_tokens": 2000}},
        extra_headers={"x-replay-fixture": fixture},
    )
    received = [chunk.model_dump(mode="json", exclude_unset=True) for chunk in stream]
    assert last_body(upstream) == {
        "messages": expected_upstream_history(shared_dir),
        "model": "deepseek-reasoner",
        "stream": True,
        "reasoning": {"max_tokens": 2000, "exclude": not include},
    }
    assert received == sse_chunks(rewrite(fixture_body(fixture)[0], exclude=not include))
    recorded = recorded_chunks(fixture)
    assert client_view(received).content == client_view(recorded).content
    if not include:
        assert client_view(received).reasoning == ""
        assert client_view(received).entries == []


@pytest.mark.parametrize("fixture", STREAMS)
def test_openai_stream_helper_accumulates_the_spec_rebuild(
    shared_dir: Path, client: openai.OpenAI, fixture: str
) -> None:
    with client.chat.completions.stream(
        model="m",
        messages=[{"role": "user", "content": "Hi"}],
        extra_headers={"x-replay-fixture": fixture},
    ) as stream:
        entries: list[Any] = []
        display = ""
        for event in stream:
            if event.type == "chunk" and event.chunk.choices:
                extra = event.chunk.choices[0].delta.model_extra or {}
                entries.extend(extra.get("reasoning_details") or [])
                display += extra.get("reasoning") or ""
        final = stream.get_final_completion()
    message_extra = final.choices[0].message.model_extra or {}
    assert [dict(e) for e in message_extra.get("reasoning_details", [])] == rebuild_reasoning_details(entries)
    assert (message_extra.get("reasoning") or "") == display


def test_stream_bytes_arrive_exactly_and_before_the_upstream_finishes(
    shared_dir: Path, upstream: ReplayUpstream, openrouter_sidecar: str
) -> None:
    fixture = "openai-chat/openrouter-claude-sonnet-4.5-reasoning-details.sse"
    events = split_events(fixture_body(fixture)[0])
    body = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "stream": True}
    arrivals: list[float] = []
    received = b""
    start = time.monotonic()
    with (
        httpx.Client(timeout=10) as http,
        http.stream(
            "POST",
            f"{openrouter_sidecar}/chat/completions",
            json=body,
            headers={"x-replay-fixture": fixture, "x-replay-drip": "0.05"},
        ) as response,
    ):
        assert response.headers["content-type"].startswith("text/event-stream")
        for chunk in response.iter_raw():
            received += chunk
            arrivals.append(time.monotonic() - start)
    assert received == rewrite(fixture_body(fixture)[0])
    # The first bytes arrive long before the upstream has dripped all its events (0.05 s apart).
    assert arrivals[0] < (len(events) - 1) * 0.05 / 2
    assert len(arrivals) > 1


def test_a_gzip_stream_is_decoded_and_normalized(
    shared_dir: Path, upstream: ReplayUpstream, openrouter_sidecar: str
) -> None:
    fixture = "openai-chat/deepseek-reasoner-reasoning-content.sse"
    body = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "stream": True}
    with httpx.Client(timeout=10) as http:
        response = http.post(
            f"{openrouter_sidecar}/chat/completions",
            json=body,
            headers={"x-replay-fixture": fixture, "x-replay-gzip": "1", "accept-encoding": "identity"},
        )
    assert response.status_code == 200
    assert "content-encoding" not in response.headers
    assert response.content == rewrite(fixture_body(fixture)[0])


def test_models_and_other_paths_are_forwarded_as_is(upstream: ReplayUpstream, client: openai.OpenAI) -> None:
    models = client.models.list()
    assert [model.id for model in models.data] == [m["id"] for m in MODELS["data"]]
    assert upstream.received[-1].path == "/v1/models"
    assert upstream.received[-1].method == "GET"
    assert upstream.received[-1].headers["authorization"] == "Bearer sk-test"


def test_headers_hop_by_hop_stripped_authorization_kept(upstream: ReplayUpstream, openrouter_sidecar: str) -> None:
    with httpx.Client(timeout=10) as http:
        http.post(
            f"{openrouter_sidecar}/chat/completions",
            content=b'{"model": "m"}',
            headers={
                "authorization": "Bearer sk-test",
                "proxy-authorization": "Basic c2VjcmV0",
                "te": "trailers",
                "x-custom": "kept",
                "content-type": "application/json",
            },
        )
    headers = upstream.received[-1].headers
    assert upstream.received[-1].body == b'{"model": "m"}'
    assert headers["authorization"] == "Bearer sk-test"
    assert headers["x-custom"] == "kept"
    assert "proxy-authorization" not in headers
    assert "te" not in headers
    assert headers["host"] == f"127.0.0.1:{upstream.port}"


def test_the_sidecar_keeps_no_cookies(shared_dir: Path, upstream: ReplayUpstream, openrouter_sidecar: str) -> None:
    fixture = "openai-chat/zai-glm-4.7-reasoning-content.buffered.json"
    with httpx.Client(timeout=10) as first:
        response = first.post(
            f"{openrouter_sidecar}/chat/completions", json={"model": "m"}, headers={"x-replay-fixture": fixture}
        )
        assert response.headers["set-cookie"] == "replay=1"
    with httpx.Client(timeout=10) as second:
        second.post(
            f"{openrouter_sidecar}/chat/completions", json={"model": "m"}, headers={"x-replay-fixture": fixture}
        )
    assert "cookie" not in upstream.received[-1].headers


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        (b'{"model": "m", "messages": [', "invalid_json", None),
        (b"[]", "invalid_request", None),
        (b'{"model": "m", "reasoning_effort": ["high"]}', "invalid_request", "reasoning_effort"),
    ],
)
def test_bad_bodies_get_400_and_are_not_forwarded(
    upstream: ReplayUpstream, openrouter_sidecar: str, body: bytes, code: str, param: str | None
) -> None:
    before = len(upstream.received)
    with httpx.Client(timeout=10) as http:
        response = http.post(f"{openrouter_sidecar}/chat/completions", content=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["type"], error["code"], error["param"]) == ("invalid_request_error", code, param)
    assert error["message"]
    assert len(upstream.received) == before


def server_error(code: str, message: str) -> dict[str, Any]:
    """The OpenAI-style body of a 5xx error (``type`` ``api_error``, no ``param``)."""
    return {"error": {"message": message, "type": "api_error", "code": code, "param": None}}


BROKEN = {
    # the envelope of the recorded DeepSeek stream the tests break off, then OpenRouter's mid-stream error shape
    "id": "33be18fc-3842-486c-8c29-dd8e578f7f20",
    "object": "chat.completion.chunk",
    "created": 1752169304,
    "model": "deepseek-reasoner",
    "error": {
        "message": "The upstream stream ended early; the answer is incomplete.",
        "type": "upstream_unavailable",
        "code": 502,
        "param": None,
    },
    "choices": [],
}


def test_a_stream_the_upstream_breaks_off_ends_with_an_error_event(
    shared_dir: Path, upstream: ReplayUpstream, openrouter_sidecar: str
) -> None:
    fixture = "openai-chat/deepseek-reasoner-reasoning-content.sse"
    events = split_events(fixture_body(fixture)[0])
    body = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "stream": True}
    with httpx.Client(timeout=10) as http:
        response = http.post(
            f"{openrouter_sidecar}/chat/completions",
            json=body,
            headers={"x-replay-fixture": fixture, "x-replay-break-after": "5"},
        )
    assert response.status_code == 200
    # the five whole events, normalized; the half event is dropped; then the error event, and no [DONE]
    assert response.content == rewrite_by_event(b"".join(events[:5])) + (
        b"data: " + json.dumps(BROKEN, separators=(",", ":")).encode() + b"\n\n"
    )


def test_the_openai_sdk_raises_on_a_broken_off_stream(upstream: ReplayUpstream, client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "Hi"}],
        stream=True,
        extra_headers={
            "x-replay-fixture": "openai-chat/deepseek-reasoner-reasoning-content.sse",
            "x-replay-break-after": "5",
        },
    )
    received = []
    with pytest.raises(openai.APIError) as info:
        for chunk in stream:
            received.append(chunk)
    # the five reasoning chunks, then the close of the reasoning (its detail's format, null fields) and the error
    assert len(received) == 7
    assert received[5].choices[0].delta.model_extra == {
        "reasoning_details": [{"type": "reasoning.text", "format": "unknown", "index": 0}]
    }
    assert received[6].choices[0].delta.model_extra == {"reasoning": None, "reasoning_details": []}
    assert info.value.message == BROKEN["error"]["message"]
    assert info.value.body == BROKEN["error"]
    assert info.value.code == "502"  # openai-python reads error.code as a string


def test_the_openai_sdk_stream_helper_raises_on_a_broken_off_stream(
    upstream: ReplayUpstream, client: openai.OpenAI
) -> None:
    received = []
    with (
        pytest.raises(openai.APIError) as info,
        client.chat.completions.stream(
            model="m",
            messages=[{"role": "user", "content": "Hi"}],
            extra_headers={
                "x-replay-fixture": "openai-chat/deepseek-reasoner-reasoning-content.sse",
                "x-replay-break-after": "5",
            },
        ) as stream,
    ):
        for event in stream:
            received.append(event)
    # the 5 chunks before the break, and the end of their reasoning (its format, then nulls)
    assert [event.type for event in received if event.type == "chunk"] == ["chunk"] * 7
    assert info.value.body == BROKEN["error"]


async def test_more_concurrent_streams_than_httpx_pools_by_default_all_arrive(
    upstream: ReplayUpstream, openrouter_sidecar: str
) -> None:
    # 110 streams at once, each lasting longer than the sidecar's 2 s timeout (events 0.3 s apart, so no read
    # waits that long): with httpx's default cap of 100 connections the last 10 would wait for a connection
    # past the timeout and get 504
    fixture = "openai-chat/snowflake-claude-sonnet-4.6-reasoning-details.sse"
    expected = rewrite_by_event(fixture_body(fixture)[0])
    body = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "stream": True}
    headers = {"x-replay-fixture": fixture, "x-replay-drip": "0.3"}
    results: list[tuple[int, bytes]] = []

    async def one(http: httpx.AsyncClient) -> None:
        response = await http.post(f"{openrouter_sidecar}/chat/completions", json=body, headers=headers)
        results.append((response.status_code, response.content))

    limits = httpx.Limits(max_connections=None)
    with anyio.fail_after(60):
        async with httpx.AsyncClient(timeout=30, limits=limits) as http, anyio.create_task_group() as group:
            for _ in range(110):
                group.start_soon(one, http)
    assert [status for status, _ in results] == [200] * 110
    assert all(content == expected for _, content in results)


def test_upstream_error_is_passed_through_unchanged(upstream: ReplayUpstream, client: openai.OpenAI) -> None:
    with pytest.raises(openai.RateLimitError) as info:
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Hi"}], extra_headers={"x-replay-status": "429"}
        )
    assert info.value.response.json() == {"error": {"message": "replay: no fixture named"}}


def test_upstream_timeout_is_504(upstream: ReplayUpstream, openrouter_sidecar: str) -> None:
    with httpx.Client(timeout=10) as http:
        response = http.post(
            f"{openrouter_sidecar}/chat/completions", json={"model": "m"}, headers={"x-replay-delay": "3"}
        )
    assert response.status_code == 504
    assert response.json() == server_error("upstream_timeout", "The upstream did not answer in time; try again later.")


def test_unreachable_upstream_is_502() -> None:
    with sidecar(f"http://127.0.0.1:{free_port()}/v1") as base_url, httpx.Client(timeout=10) as http:
        response = http.post(f"{base_url}/chat/completions", json={"model": "m"})
    assert response.status_code == 502
    assert response.json() == server_error(
        "upstream_unavailable", "The upstream could not be reached; try again later."
    )


def test_client_going_away_closes_the_upstream_stream(
    shared_dir: Path, upstream: ReplayUpstream, openrouter_sidecar: str
) -> None:
    fixture = "openai-chat/xai-grok-3-mini-reasoning-content.stream.jsonl"
    with (
        httpx.Client(timeout=10) as http,
        http.stream(
            "POST",
            f"{openrouter_sidecar}/chat/completions",
            json={"model": "m", "stream": True},
            headers={"x-replay-fixture": fixture, "x-replay-drip": "0.05"},
        ) as response,
    ):
        next(response.iter_raw())
    deadline = time.monotonic() + 10
    while fixture not in upstream.closed_streams and time.monotonic() < deadline:
        time.sleep(0.05)
    assert fixture in upstream.closed_streams


def raw_get(base_url: str, raw_path: str) -> tuple[int, bytes]:
    """GET ``raw_path`` exactly as written (clients normalize dot segments away); returns status and body."""
    url = httpx.URL(base_url)
    with socket.create_connection((url.host, url.port or 80), timeout=10) as sock:
        sock.sendall(f"GET {raw_path} HTTP/1.1\r\nHost: {url.host}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def test_paths_are_forwarded_as_sent_and_may_not_climb_out(upstream: ReplayUpstream, openrouter_sidecar: str) -> None:
    with httpx.Client(timeout=10) as http:
        response = http.get(f"{openrouter_sidecar}/caf%C3%A9/a%2Fb")
    assert response.status_code == 200
    assert upstream.received[-1].path == "/v1/caf%C3%A9/a%2Fb"
    before = len(upstream.received)
    for path in ("/v1/../../etc", "/v1/%2e%2e/x", "/v1/./models", "/v1/a/%2E%2E/%2E%2E/b"):
        status, body = raw_get(openrouter_sidecar, path)
        assert status == 400, path
        assert json.loads(body)["error"]["code"] == "invalid_request"
    assert len(upstream.received) == before


async def test_a_chunked_body_over_the_limit_is_refused_while_it_streams() -> None:
    """The sidecar stops reading a body (no content-length) as soon as it passes the limit."""
    app = create_app(
        "http://127.0.0.1:9/v1",
        max_body_bytes=100_000,
        transport=httpx.MockTransport(lambda request: httpx.Response(200, json={})),
    )
    received = 0

    async def receive() -> dict[str, Any]:
        nonlocal received
        received += 1
        return {"type": "http.request", "body": b"x" * 65536, "more_body": received < 1000}

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions", "query_string": b"", "root_path": "",
        "headers": [(b"content-type", b"application/json")], "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 2),
    }  # fmt: skip
    async with app.router.lifespan_context(app):
        await app(scope, receive, send)  # type: ignore[arg-type]
    assert received == 2
    assert sent[0]["status"] == 413
    assert json.loads(sent[1]["body"])["error"]["code"] == "payload_too_large"


@pytest.mark.parametrize("media", ["application/json", "text/event-stream"])
def test_an_undecodable_upstream_body_is_a_clean_error(
    upstream: ReplayUpstream, openrouter_sidecar: str, media: str
) -> None:
    with httpx.Client(timeout=10) as http:
        response = http.post(
            f"{openrouter_sidecar}/chat/completions", json={"model": "m"}, headers={"x-replay-broken-gzip": media}
        )
        if media == "application/json":
            assert response.status_code == 502
            assert response.json()["error"]["code"] == "upstream_unavailable"
        else:  # the status was sent before the body turned out undecodable: the stream ends with an error event
            assert response.status_code == 200
            assert response.content == (
                b'data: {"id":"","object":"chat.completion.chunk","created":0,"model":"","error":{"message":'
                b'"The upstream stream could not be decoded; the answer is incomplete.","type":"upstream_unavailable",'
                b'"code":502,"param":null},"choices":[]}\n\n'
            )
        follow_up = http.get(f"{openrouter_sidecar}/models")
        assert follow_up.status_code == 200


def test_deeply_nested_json_is_a_400(upstream: ReplayUpstream, openrouter_sidecar: str) -> None:
    body = b'{"model":"m","reasoning_effort":"high","x":' + b"[" * 5000 + b"]" * 5000 + b"}"
    with httpx.Client(timeout=10) as http:
        response = http.post(f"{openrouter_sidecar}/chat/completions", content=body)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_json"


def test_headers_named_by_connection_are_hop_by_hop_and_no_duplicate_date(
    upstream: ReplayUpstream, openrouter_sidecar: str
) -> None:
    with httpx.Client(timeout=10) as http:
        response = http.get(
            f"{openrouter_sidecar}/models", headers={"connection": "keep-alive, x-secret", "x-secret": "s"}
        )
    assert "x-secret" not in upstream.received[-1].headers
    assert len(response.headers.get_list("date")) == 1
    assert len(response.headers.get_list("server")) == 1


@pytest.fixture(scope="module")
def deepseek_sidecar(upstream: ReplayUpstream, upstream_transport: str) -> Iterator[str]:
    with sidecar(upstream.base_url, "--provider", "deepseek", "--timeout", "2") as base_url:
        yield base_url


def metadata_history() -> list[dict[str, Any]]:
    """A stored chat as an app keeps it: internal metadata (keys starting with ``_``) beside each message, and a
    tool turn with reasoning text and a signed detail."""
    return [
        {"role": "user", "content": "Weather?", "_client_id": "c-7", "_stored_at": "2026-11-30T10:00:00Z"},
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "Call the tool.",
            "reasoning_details": [{"type": "reasoning.text", "text": "Call the tool.", "signature": "SIG"}],
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}],
            "_stored_at": "2026-11-30T10:00:01Z",
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "21C", "_stored_at": "2026-11-30T10:00:02Z"},
    ]


@pytest.mark.parametrize(
    ("provider", "assistant"),
    [
        # spec 000's filter with preservation on: OpenRouter keeps text and details ...
        (
            "openrouter",
            {
                "role": "assistant",
                "content": None,
                "reasoning": "Call the tool.",
                "reasoning_details": [{"type": "reasoning.text", "text": "Call the tool.", "signature": "SIG"}],
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
                ],
            },
        ),
        # ... DeepSeek keeps the text (as reasoning_content, which it reads) and loses the details it does not read
        (
            "deepseek",
            {
                "role": "assistant",
                "content": None,
                "reasoning_content": "Call the tool.",
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
                ],
            },
        ),
    ],
)
def test_a_single_upstream_gets_the_history_filtered_without_internal_metadata(
    upstream: ReplayUpstream, openrouter_sidecar: str, deepseek_sidecar: str, provider: str, assistant: dict[str, Any]
) -> None:
    base_url = openrouter_sidecar if provider == "openrouter" else deepseek_sidecar
    messages = metadata_history()
    sent = json.dumps({"model": "m", "messages": messages}).encode()
    with openai.OpenAI(base_url=base_url, api_key="sk-test", max_retries=0, timeout=10) as sdk:
        sdk.chat.completions.create(
            model="m",
            messages=messages,  # type: ignore[arg-type]
            extra_headers={"x-replay-fixture": BUFFERED[0]},
        )
    assert messages == metadata_history()  # the caller's messages are not changed
    assert json.dumps({"model": "m", "messages": messages}).encode() == sent
    assert last_body(upstream)["messages"] == [
        {"role": "user", "content": "Weather?"},
        assistant,
        {"role": "tool", "tool_call_id": "call_1", "content": "21C"},
    ]


DEEPSEEK_TOOL_CALL = "openai-chat/deepseek-v4-flash-reasoning-content-tool-call.buffered.json"
DEEPSEEK_AFTER_TOOL = "openai-chat/deepseek-v4-flash-reasoning-after-tool-result.buffered.json"


def litellm_tool_loop(base_url: str, first: str, second: str) -> dict[str, Any]:
    """A tool loop as LiteLLM runs it through the sidecar: the answer to the first turn (fixture ``first``) goes
    back on the second turn (answered with fixture ``second``) as LiteLLM's ``Message``
    (``client_shapes.litellm_assistant``). Returns the first answer's message."""
    user = {"role": "user", "content": "Roll a die; I guess 4."}
    with httpx.Client(timeout=10) as http:
        first_response = http.post(
            f"{base_url}/chat/completions", json={"model": "m", "messages": [user]}, headers={"x-replay-fixture": first}
        )
        answer: dict[str, Any] = first_response.json()["choices"][0]["message"]
        assistant = litellm_assistant(answer)
        assert set(assistant["provider_specific_fields"]) == {"reasoning", "reasoning_details"}
        tools = [
            {"role": "tool", "tool_call_id": call["id"], "content": "4"} for call in answer.get("tool_calls") or []
        ]
        second_response = http.post(
            f"{base_url}/chat/completions",
            json={"model": "m", "messages": [user, assistant, *tools]},
            headers={"x-replay-fixture": second},
        )
    assert second_response.status_code == 200
    return answer


def test_litellms_tool_turn_reaches_deepseek_with_its_reasoning_once(
    shared_dir: Path, upstream: ReplayUpstream, deepseek_sidecar: str
) -> None:
    litellm_tool_loop(deepseek_sidecar, DEEPSEEK_TOOL_CALL, DEEPSEEK_AFTER_TOOL)
    recorded = json.loads((shared_dir / "fixtures" / DEEPSEEK_TOOL_CALL).read_text())["choices"][0]["message"]
    # LiteLLM sent reasoning_content, provider_specific_fields.reasoning and .reasoning_details: DeepSeek gets
    # its own reasoning_content once, as it answered it, and no key it does not know
    assert last_body(upstream)["messages"][1] == {
        "content": recorded["content"],
        "role": "assistant",
        "tool_calls": recorded["tool_calls"],
        "reasoning_content": recorded["reasoning_content"],
    }


def test_litellms_signed_details_reach_openrouter_byte_for_byte(
    shared_dir: Path, upstream: ReplayUpstream, openrouter_sidecar: str
) -> None:
    answer = litellm_tool_loop(openrouter_sidecar, BUFFERED[0], BUFFERED[0])
    recorded = json.loads((shared_dir / "fixtures" / BUFFERED[0]).read_text())["choices"][0]["message"]
    assert answer["reasoning_details"] == recorded["reasoning_details"]
    assert last_body(upstream)["messages"][1] == {
        "content": recorded["content"],
        "role": "assistant",
        "reasoning": recorded["reasoning"],
        "reasoning_details": recorded["reasoning_details"],
    }
    signature = recorded["reasoning_details"][0]["signature"]
    assert f'"signature":"{signature}"'.encode() in upstream.received[-1].body


def test_a_tool_turn_sent_back_as_details_alone_gives_deepseek_its_reasoning_content(
    shared_dir: Path, upstream: ReplayUpstream, deepseek_sidecar: str
) -> None:
    user = {"role": "user", "content": "Roll a die; I guess 4."}
    with httpx.Client(timeout=10) as http:
        answer = http.post(
            f"{deepseek_sidecar}/chat/completions",
            json={"model": "m", "messages": [user]},
            headers={"x-replay-fixture": DEEPSEEK_TOOL_CALL},
        ).json()["choices"][0]["message"]
        # a client that keeps only the details (spec 004 "From a buffered response": copy reasoning_details)
        kept = {k: answer[k] for k in ("role", "content", "tool_calls", "reasoning_details")}
        tool = {"role": "tool", "tool_call_id": answer["tool_calls"][0]["id"], "content": "4"}
        http.post(
            f"{deepseek_sidecar}/chat/completions",
            json={"model": "m", "messages": [user, kept, tool]},
            headers={"x-replay-fixture": DEEPSEEK_AFTER_TOOL},
        )
    recorded = json.loads((shared_dir / "fixtures" / DEEPSEEK_TOOL_CALL).read_text())["choices"][0]["message"]
    assert last_body(upstream)["messages"][1] == {
        "role": "assistant",
        "content": recorded["content"],
        "tool_calls": recorded["tool_calls"],
        "reasoning_content": recorded["reasoning_content"],
    }


def test_no_preserve_reasoning_filters_as_spec_000_says_for_preservation_off(upstream: ReplayUpstream) -> None:
    with (
        sidecar(upstream.base_url, "--provider", "deepseek", "--no-preserve-reasoning", "--timeout", "2") as base,
        openai.OpenAI(base_url=base, api_key="sk-test", max_retries=0, timeout=10) as sdk,
    ):
        sdk.chat.completions.create(
            model="m",
            messages=metadata_history(),  # type: ignore[arg-type]
            extra_headers={"x-replay-fixture": BUFFERED[0]},
        )
    # "Other reasoning-capable routes: kept only when preservation is enabled / removed"
    assert last_body(upstream)["messages"][1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}],
    }


@pytest.mark.parametrize(
    ("base", "query", "expected"),
    [
        (
            "http://127.0.0.1:9/v1?api-version=2024-10-21",
            b"",
            "http://127.0.0.1:9/v1/chat/completions?api-version=2024-10-21",
        ),
        ("http://127.0.0.1:9/v1/?api-version=1", b"x=2", "http://127.0.0.1:9/v1/chat/completions?api-version=1&x=2"),
        ("https://openrouter.ai/api/v1/", b"", "https://openrouter.ai/api/v1/chat/completions"),
    ],
)
def test_a_base_url_query_stays_a_query(base: str, query: bytes, expected: str) -> None:
    from numi_mw.upstream import target_url

    assert str(target_url(base, b"/v1/chat/completions", query)) == expected


def test_a_request_without_a_body_is_forwarded_without_one(upstream: ReplayUpstream, openrouter_sidecar: str) -> None:
    httpx.get(openrouter_sidecar + "/files/abc", timeout=10)
    received = upstream.received[-1]
    assert (received.method, received.body) == ("GET", b"")
    assert "transfer-encoding" not in received.headers and "content-length" not in received.headers
    httpx.post(openrouter_sidecar + "/embeddings", content=b'{"input":"x"}', timeout=10)
    received = upstream.received[-1]
    assert (received.body, received.headers.get("content-length")) == (b'{"input":"x"}', "13")
    assert "transfer-encoding" not in received.headers


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"upstream": "ftp://127.0.0.1/v1"}, "the upstream must be an http:// or https:// URL with a host"),
        ({"upstream": "127.0.0.1:9/v1"}, "the upstream must be an http:// or https:// URL with a host"),
        ({"think_start": "foo"}, "think_start must be one of content, reasoning, auto, not 'foo'"),
        ({"max_body_bytes": "10"}, "max_body_bytes must be a positive whole number of bytes, not '10'"),
        ({"max_body_bytes": 0}, "max_body_bytes must be a positive whole number of bytes, not 0"),
        ({"timeout": -1}, "timeout must be a positive number of seconds, not -1"),
        ({"think_tags": "no"}, "think_tags must be None, true, false or a ThinkTags, not 'no'"),
        ({"preserve_reasoning": "no"}, "preserve_reasoning must be true or false, not 'no'"),
        ({"wire_api": "grpc"}, "wire_api must be one of openai-chat, openai-responses, anthropic-messages, not 'grpc'"),
        ({"upstream": None, "catalog": "CATALOG", "wire_api": "openai-responses"}, "wire_api goes with an upstream"),
    ],
)
def test_create_app_checks_its_options_when_given(options: dict[str, Any], message: str) -> None:
    arguments = {"upstream": "http://127.0.0.1:9/v1", **options}
    if arguments.get("catalog") == "CATALOG":
        arguments["catalog"] = default_catalog()
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        create_app(**arguments)


def test_serve_refuses_an_upstream_that_is_not_a_url(capsys: pytest.CaptureFixture[str]) -> None:
    from numi_mw.cli import main

    assert main(["serve", "--upstream", "ftp://127.0.0.1/v1"]) == 2
    assert "the upstream must be an http:// or https:// URL with a host" in capsys.readouterr().err
