"""``NormalizingTransport`` and ``SyncNormalizingTransport`` between httpx (and the openai SDK) and a real upstream
on loopback: requests leave prepared, answers come back normalized, streams chunk by chunk as the upstream sends
them, closing a stream early closes the upstream's, and everything that is not a chat completions call passes
untouched."""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import httpx
import pytest
from starlette.types import Receive, Scope, Send

from numi_mw import NormalizingTransport, SyncNormalizingTransport, load_catalog, rebuild_reasoning_details
from numi_mw.core.think import ThinkTags
from tests.e2e_support import free_port, serving

Mode = Literal["sync", "async"]
MODES: list[Mode] = ["sync", "async"]

WAIT = 5.0
"""Seconds the stub waits for the client (the gate, a disconnect) before it gives up and says so."""


@dataclass
class Answer:
    """What the stub answers next: ``chunks`` of the body, each one ASGI message (so one HTTP chunk)."""

    chunks: list[bytes]
    content_type: str = "application/json"
    status: int = 200
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    gzip: bool = False
    gate: bool = False  # after the first chunk, wait for ``Stub.go`` before the rest
    hold: bool = False  # after the first chunk, wait for the client to leave
    breaks: bool = False  # after the chunks, half an event, then the connection drops


@dataclass
class Seen:
    method: str
    path: str
    query: bytes
    headers: dict[str, str]
    body: bytes


class Stub:
    """A raw ASGI upstream that answers every request with ``answer`` and records what it received."""

    def __init__(self) -> None:
        self.port = free_port()
        self.reset()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def reset(self) -> None:
        self.answer = Answer([b'{"ok":true}'])
        self.seen: list[Seen] = []
        self.go = threading.Event()
        self.gate_timed_out = False
        self.disconnected = threading.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "http"
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        self.seen.append(Seen(scope["method"], scope["path"], scope["query_string"], headers, body))
        answer = self.answer
        chunks = [gzip.compress(b"".join(answer.chunks))] if answer.gzip else list(answer.chunks)
        extra = [(b"content-encoding", b"gzip")] if answer.gzip else []
        content_type = (b"content-type", answer.content_type.encode())
        start_headers = [content_type, *extra, *answer.headers]
        await send({"type": "http.response.start", "status": answer.status, "headers": start_headers})
        for number, chunk in enumerate(chunks):
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            if number == 0 and answer.gate:
                with anyio.move_on_after(WAIT) as waited:
                    while not self.go.is_set():
                        await anyio.sleep(0.005)
                self.gate_timed_out = waited.cancelled_caught
            if number == 0 and answer.hold:
                with anyio.move_on_after(WAIT):
                    if (await receive())["type"] == "http.disconnect":
                        self.disconnected.set()
                return
        if answer.breaks:
            await send({"type": "http.response.body", "body": b'data: {"choices":[{"ind', "more_body": True})
            raise ConnectionAbortedError("stub: the stream breaks off here")
        await send({"type": "http.response.body", "body": b"", "more_body": False})


@pytest.fixture(scope="module")
def running_stub() -> Iterator[Stub]:
    stub = Stub()
    with serving(stub, stub.port):
        yield stub


@pytest.fixture
def stub(running_stub: Stub) -> Stub:
    running_stub.reset()
    return running_stub


def call(
    mode: Mode, options: dict[str, Any], method: str, url: str, **request: Any
) -> tuple[int, httpx.Headers, bytes]:
    """One request through the sync or the async transport built with ``options``; the status, headers and body."""
    if mode == "sync":
        with httpx.Client(transport=SyncNormalizingTransport(**options), timeout=10) as client:
            response = client.request(method, url, **request)
            return response.status_code, response.headers, response.content

    async def run() -> tuple[int, httpx.Headers, bytes]:
        with anyio.fail_after(10):
            async with httpx.AsyncClient(transport=NormalizingTransport(**options), timeout=10) as client:
                response = await client.request(method, url, **request)
                return response.status_code, response.headers, response.content

    return anyio.run(run)


REASONING_EVENT = (
    b'data: {"id":"c1","choices":[{"index":0,"delta":{"role":"assistant","reasoning_content":"Count the r\'s."}}]}\n\n'
)
REASONING_EVENT_OUT = (
    b'data: {"id":"c1","choices":[{"index":0,"delta":{"role":"assistant","reasoning":"Count the r\'s.",'
    b'"reasoning_details":[{"type":"reasoning.text","text":"Count the r\'s.","index":0}]}}]}\n\n'
)
REASONING_END = (  # the end of the reasoning, before what follows it: the detail's format once, then its details
    # emptied (the text came whole in one delta and stays)
    b'data: {"id":"c1","choices":[{"index":0,"delta":{"reasoning_details":[{"type":"reasoning.text",'
    b'"format":"unknown","index":0}]},"finish_reason":null}]}\n\n'
    b'data: {"id":"c1","choices":[{"index":0,"delta":{"reasoning_details":[]},"finish_reason":null}]}\n\n'
)
ANSWER_EVENTS = (
    b'data: {"id":"c1","choices":[{"index":0,"delta":{"content":"Three."},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
)
STREAM_REQUEST = {"model": "deepseek-reasoner", "messages": [{"role": "user", "content": "Hi"}], "stream": True}
BROKEN_EVENT = (  # the stream's id (no created or model in it), then OpenRouter's mid-stream error shape
    b'data: {"id":"c1","object":"chat.completion.chunk","created":0,"model":"",'
    b'"error":{"message":"The upstream stream ended early; the answer is incomplete.",'
    b'"type":"upstream_unavailable","code":502,"param":null},"choices":[]}\n\n'
)


def sse(*chunks: bytes, **answer: Any) -> Answer:
    return Answer(list(chunks), content_type="text/event-stream", **answer)


# --- streams ----------------------------------------------------------------------------------------------------


async def test_an_async_stream_arrives_rewritten_chunk_by_chunk_before_the_upstream_sends_the_next(
    stub: Stub,
) -> None:
    stub.answer = sse(REASONING_EVENT, ANSWER_EVENTS, gate=True)
    transport = NormalizingTransport(provider="deepseek")
    with anyio.fail_after(15):
        async with (
            httpx.AsyncClient(transport=transport, timeout=10) as client,
            client.stream("POST", f"{stub.base_url}/chat/completions", json=STREAM_REQUEST) as response,
        ):
            chunks = response.aiter_raw()
            first = b""
            while not first.endswith(b"\n\n"):  # the upstream is waiting for ``go``: nothing more can come yet
                first += await chunks.__anext__()
            stub.go.set()
            rest = b"".join([chunk async for chunk in chunks])
    assert first == REASONING_EVENT_OUT
    assert rest == REASONING_END + ANSWER_EVENTS
    assert stub.gate_timed_out is False
    assert response.headers["content-type"] == "text/event-stream"
    assert "content-length" not in response.headers


def test_a_sync_stream_arrives_rewritten_chunk_by_chunk_before_the_upstream_sends_the_next(stub: Stub) -> None:
    stub.answer = sse(REASONING_EVENT, ANSWER_EVENTS, gate=True)
    with (
        httpx.Client(transport=SyncNormalizingTransport(provider="deepseek"), timeout=10) as client,
        client.stream("POST", f"{stub.base_url}/chat/completions", json=STREAM_REQUEST) as response,
    ):
        chunks = response.iter_raw()
        first = b""
        while not first.endswith(b"\n\n"):
            first += next(chunks)
        stub.go.set()
        rest = b"".join(chunks)
    assert first == REASONING_EVENT_OUT
    assert rest == REASONING_END + ANSWER_EVENTS
    assert stub.gate_timed_out is False


async def test_closing_an_async_stream_early_closes_the_upstream_response(stub: Stub) -> None:
    stub.answer = sse(REASONING_EVENT, ANSWER_EVENTS, hold=True)
    with anyio.fail_after(15):
        async with httpx.AsyncClient(transport=NormalizingTransport(provider="deepseek"), timeout=10) as client:
            request = client.build_request("POST", f"{stub.base_url}/chat/completions", json=STREAM_REQUEST)
            response = await client.send(request, stream=True)
            chunks = response.aiter_raw()  # held, so only the close can end the upstream response
            assert await chunks.__anext__() == REASONING_EVENT_OUT
            await response.aclose()
            disconnected = await anyio.to_thread.run_sync(stub.disconnected.wait, WAIT)
    assert disconnected is True


def test_closing_a_sync_stream_early_closes_the_upstream_response(stub: Stub) -> None:
    stub.answer = sse(REASONING_EVENT, ANSWER_EVENTS, hold=True)
    with httpx.Client(transport=SyncNormalizingTransport(provider="deepseek"), timeout=10) as client:
        request = client.build_request("POST", f"{stub.base_url}/chat/completions", json=STREAM_REQUEST)
        response = client.send(request, stream=True)
        chunks = response.iter_raw()
        assert next(chunks) == REASONING_EVENT_OUT
        response.close()
        assert stub.disconnected.wait(WAIT) is True


@pytest.mark.parametrize("mode", MODES)
def test_a_stream_the_upstream_breaks_off_ends_with_the_error_event(stub: Stub, mode: Mode) -> None:
    stub.answer = sse(REASONING_EVENT, breaks=True)
    status, _, body = call(mode, {"provider": "deepseek"}, "POST", f"{stub.base_url}/chat/completions", json={})
    # the whole event, normalized; the half event dropped; the error event as the sidecar sends it, no [DONE]
    assert (status, body) == (200, REASONING_EVENT_OUT + REASONING_END + BROKEN_EVENT)


@pytest.mark.parametrize("mode", MODES)
def test_a_gzip_stream_is_decoded_and_rewritten(stub: Stub, mode: Mode) -> None:
    stub.answer = sse(REASONING_EVENT, ANSWER_EVENTS, gzip=True)
    status, headers, body = call(mode, {"provider": "deepseek"}, "POST", f"{stub.base_url}/chat/completions", json={})
    assert (status, body) == (200, REASONING_EVENT_OUT + REASONING_END + ANSWER_EVENTS)
    assert "content-encoding" not in headers
    assert stub.seen[-1].headers["accept-encoding"] == "identity"


@pytest.mark.parametrize("mode", MODES)
def test_think_tags_split_across_chunks_become_reasoning(stub: Stub, mode: Mode) -> None:
    stub.answer = sse(
        b'data: {"choices":[{"index":0,"delta":{"content":"<think>Pl"}}]}\n\n',
        b'data: {"choices":[{"index":0,"delta":{"content":"an.</think>Answer."}}]}\n\ndata: [DONE]\n\n',
    )
    options = {"provider": "generic", "think_tags": True}
    _, _, body = call(mode, options, "POST", f"{stub.base_url}/chat/completions", json={"stream": True})
    assert body == (
        b'data: {"choices":[{"index":0,"delta":{"reasoning":"Pl","reasoning_details":'
        b'[{"type":"reasoning.text","text":"Pl","index":0}]}}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{"reasoning":"an.","reasoning_details":'
        b'[{"type":"reasoning.text","text":"an.","index":0}]},"finish_reason":null}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{"reasoning_details":'
        b'[{"type":"reasoning.text","format":"unknown","index":0}]},"finish_reason":null}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{"reasoning":null,"reasoning_details":[]},"finish_reason":null}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{"content":"Answer."}}]}\n\n'
        b"data: [DONE]\n\n"
    )


# --- buffered answers -------------------------------------------------------------------------------------------

TAGGED = b'{"choices":[{"index":0,"message":{"role":"assistant","content":"<think>Plan.</think>Answer."},"finish_reason":"stop"}]}'
SPLIT = (
    b'{"choices":[{"index":0,"message":{"role":"assistant","content":"Answer.","reasoning":"Plan.",'
    b'"reasoning_details":[{"type":"reasoning.text","text":"Plan.","format":"unknown"}]},"finish_reason":"stop"}]}'
)


@pytest.mark.parametrize("mode", MODES)
def test_a_buffered_answer_is_split_and_sent_with_its_new_length(stub: Stub, mode: Mode) -> None:
    stub.answer = Answer([TAGGED[:40], TAGGED[40:]], gzip=True, headers=[(b"x-upstream", b"kept")])
    status, headers, body = call(
        mode, {"think_tags": ThinkTags()}, "POST", f"{stub.base_url}/chat/completions", json={}
    )
    assert (status, body) == (200, SPLIT)
    assert headers["content-length"] == str(len(SPLIT))
    assert "content-encoding" not in headers
    assert headers["x-upstream"] == "kept"


@pytest.mark.parametrize("mode", MODES)
def test_without_a_provider_the_host_chooses_the_rules(stub: Stub, mode: Mode) -> None:
    # a loopback upstream is a local server (vLLM, llama.cpp), whose rules split think tags
    stub.answer = Answer([TAGGED])
    _, _, body = call(mode, {}, "POST", f"{stub.base_url}/chat/completions", json={"model": "m"})
    assert body == SPLIT


@pytest.mark.parametrize("mode", MODES)
def test_an_upstream_error_passes_through_unchanged(stub: Stub, mode: Mode) -> None:
    error = b'{"error":{"message":"slow down","type":"rate_limit"}}'
    stub.answer = Answer([error], status=429)
    status, headers, body = call(mode, {"provider": "deepseek"}, "POST", f"{stub.base_url}/chat/completions", json={})
    assert (status, body, headers["content-type"]) == (429, error, "application/json")


@pytest.mark.parametrize("mode", MODES)
def test_a_buffered_answer_the_upstream_breaks_off_raises_as_without_the_transport(stub: Stub, mode: Mode) -> None:
    stub.answer = Answer([TAGGED[:40]], breaks=True)
    with pytest.raises(httpx.RemoteProtocolError):
        call(mode, {"provider": "local"}, "POST", f"{stub.base_url}/chat/completions", json={})


@pytest.mark.parametrize("mode", MODES)
def test_an_upstream_that_cannot_be_reached_raises_as_without_the_transport(mode: Mode) -> None:
    with pytest.raises(httpx.ConnectError):
        call(mode, {"provider": "local"}, "POST", f"http://127.0.0.1:{free_port()}/v1/chat/completions", json={})


# --- requests ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_history_reaches_deepseek_in_the_field_it_reads(stub: Stub, mode: Mode) -> None:
    body = b'{"model":"m","reasoning_effort":"high","messages":[{"role":"assistant","content":"A","reasoning":"R."}]}'
    call(mode, {"provider": "deepseek"}, "POST", f"{stub.base_url}/chat/completions?x=1", content=body)
    seen = stub.seen[-1]
    assert (seen.method, seen.path, seen.query) == ("POST", "/v1/chat/completions", b"x=1")
    expected = b'{"model":"m","reasoning_effort":"high","messages":[{"role":"assistant","content":"A","reasoning_content":"R."}]}'
    assert seen.body == expected
    assert seen.headers["content-length"] == str(len(expected))
    assert seen.headers["host"] == f"127.0.0.1:{stub.port}"
    assert seen.headers["accept-encoding"] == "identity"


@pytest.mark.parametrize("mode", MODES)
def test_a_streamed_request_body_is_read_and_prepared(stub: Stub, mode: Mode) -> None:
    pieces = [b'{"model":"m","messages":[{"role":"assistant",', b'"content":"A","reasoning":"R."}]}']
    if mode == "sync":
        with httpx.Client(transport=SyncNormalizingTransport(provider="deepseek"), timeout=10) as client:
            client.post(f"{stub.base_url}/chat/completions", content=iter(pieces))
    else:

        async def body() -> Any:
            for piece in pieces:
                yield piece

        async def run() -> None:
            async with httpx.AsyncClient(transport=NormalizingTransport(provider="deepseek"), timeout=10) as client:
                await client.post(f"{stub.base_url}/chat/completions", content=body())

        anyio.run(run)
    seen = stub.seen[-1]
    assert seen.body == b'{"model":"m","messages":[{"role":"assistant","content":"A","reasoning_content":"R."}]}'
    assert "transfer-encoding" not in seen.headers
    assert seen.headers["content-length"] == str(len(seen.body))


@pytest.mark.parametrize("mode", MODES)
def test_what_the_rules_changed_is_in_the_adjustments_header(stub: Stub, mode: Mode) -> None:
    body = {"model": "m", "reasoning": {"effort": "high", "max_tokens": 2000}}
    _, headers, _ = call(mode, {"provider": "gemini"}, "POST", f"{stub.base_url}/chat/completions", json=body)
    assert stub.seen[-1].body == b'{"model":"m","extra_body":{"google":{"thinking_config":{"thinking_budget":2000}}}}'
    assert headers["x-numi-mw-adjustments"] == "effort-dropped"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("body", "options", "status", "error"),
    [
        (
            b"{not json",
            {},
            400,
            {
                "message": "The request body is not valid JSON (JSON is malformed: object keys must be strings "
                "(byte 1)); send a JSON object.",
                "type": "invalid_request_error",
                "code": "invalid_json",
                "param": None,
            },
        ),
        (
            b'{"model":"m","reasoning_effort":["high"]}',
            {},
            400,
            {
                "message": "reasoning_effort must be a string or null, not list.",
                "type": "invalid_request_error",
                "code": "invalid_request",
                "param": "reasoning_effort",
            },
        ),
        (
            b'{"model": "long-name"}',
            {"max_body_bytes": 10},
            413,
            {
                "message": "The request body is 22 bytes, over the limit of 10 bytes; send less history.",
                "type": "invalid_request_error",
                "code": "payload_too_large",
                "param": None,
            },
        ),
    ],
)
def test_a_request_the_rules_refuse_gets_the_error_body_and_is_never_sent(
    stub: Stub, mode: Mode, body: bytes, options: dict[str, Any], status: int, error: dict[str, Any]
) -> None:
    answer = call(
        mode, {"provider": "openrouter", **options}, "POST", f"{stub.base_url}/chat/completions", content=body
    )
    assert answer[0] == status
    assert answer[1]["content-type"] == "application/json"
    assert json.loads(answer[2]) == {"error": error}
    assert stub.seen == []


@pytest.mark.parametrize("mode", MODES)
def test_other_paths_methods_and_bodies_pass_untouched(stub: Stub, mode: Mode) -> None:
    raw = b'{"reasoning_effort": "high", "messages": [{"role": "assistant", "content": "A", "reasoning": "R."}]}'
    answer = b'{"choices":[{"index":0,"message":{"reasoning_content":"R."}}]}'
    stub.answer = Answer([answer], headers=[(b"content-length", str(len(answer)).encode())])
    options = {"provider": "deepseek"}
    results = [
        call(mode, options, "POST", f"{stub.base_url}/embeddings", content=raw),
        call(
            mode,
            options,
            "POST",
            f"{stub.base_url}/chat/completions",
            content=raw,
            headers={"content-type": "text/plain"},
        ),
        call(mode, options, "GET", f"{stub.base_url}/chat/completions"),
        call(mode, options, "GET", f"{stub.base_url}/models"),
    ]
    assert [(seen.method, seen.path, seen.body) for seen in stub.seen] == [
        ("POST", "/v1/embeddings", raw),
        ("POST", "/v1/chat/completions", raw),
        ("GET", "/v1/chat/completions", b""),
        ("GET", "/v1/models", b""),
    ]
    client_default = httpx.Client().headers["accept-encoding"]  # what httpx asks for on its own
    assert [seen.headers["accept-encoding"] for seen in stub.seen] == [client_default] * 4
    for status, headers, body in results:
        assert (status, body, headers["content-length"]) == (200, answer, str(len(answer)))
        assert "x-numi-mw-adjustments" not in headers


# --- wire APIs and catalogs -------------------------------------------------------------------------------------

ANTHROPIC_ANSWER = (
    b'{"id":"msg_1","type":"message","role":"assistant","model":"claude-x","content":'
    b'[{"type":"thinking","thinking":"Plan.","signature":"SIG"},{"type":"text","text":"Done."}],'
    b'"stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":5}}'
)


@pytest.mark.parametrize("mode", MODES)
def test_a_native_wire_api_gets_its_path_headers_and_body_and_the_app_a_chat_completion(stub: Stub, mode: Mode) -> None:
    stub.answer = Answer([ANTHROPIC_ANSWER])
    options = {"provider": "anthropic", "wire_api": "anthropic-messages"}
    body = {"model": "claude-x", "messages": [{"role": "user", "content": "Q"}]}
    headers = {"authorization": "Bearer sk-ant-test"}
    status, answer_headers, answer = call(
        mode, options, "POST", f"{stub.base_url}/chat/completions", json=body, headers=headers
    )
    seen = stub.seen[-1]
    assert seen.path == "/v1/messages"
    assert (seen.headers["x-api-key"], seen.headers["anthropic-version"]) == ("sk-ant-test", "2023-06-01")
    assert "authorization" not in seen.headers
    assert json.loads(seen.body) == {
        "model": "claude-x",
        "messages": [{"role": "user", "content": "Q"}],
        "max_tokens": 4096,
    }
    completion = json.loads(answer)
    assert status == 200
    assert answer_headers["content-length"] == str(len(answer))
    assert completion["choices"] == [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Done.",
                "reasoning": "Plan.",
                "reasoning_details": [
                    {
                        "type": "reasoning.text",
                        "text": "Plan.",
                        "signature": "SIG",
                        "format": "anthropic-claude-v1",
                        "index": 0,
                    }
                ],
            },
            "finish_reason": "stop",
        }
    ]
    assert completion["usage"] == {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}


CATALOG = """
[[providers]]
name = "gpu-box"
base_url = "{base_url}?api-version=1"
rules = "deepseek"
api_key_env = "NUMI_MW_TRANSPORT_TEST_KEY"

[[models]]
id = "team/model"
reasoning_mode = "effort"
preserve_reasoning = true

[[models.endpoints]]
tag = "gpu-box/one"
provider = "gpu-box"
model = "served-name"
"""


@pytest.mark.parametrize("mode", MODES)
def test_through_a_catalog_a_call_goes_to_the_chosen_provider_with_its_key(
    stub: Stub, mode: Mode, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NUMI_MW_TRANSPORT_TEST_KEY", "sk-catalog")
    catalog = load_catalog(CATALOG.format(base_url=stub.base_url), "catalog.toml")
    body = {"model": "team/model", "messages": [{"role": "assistant", "content": "A", "reasoning": "R."}]}
    nowhere = f"http://127.0.0.1:{free_port()}/api/v1/chat/completions"  # the app's own base URL is not used
    call(mode, {"catalog": catalog}, "POST", nowhere, json=body, headers={"authorization": "Bearer sk-app"})
    seen = stub.seen[-1]
    assert (seen.path, seen.query) == ("/v1/chat/completions", b"api-version=1")
    assert seen.headers["authorization"] == "Bearer sk-catalog"
    assert seen.headers["host"] == f"127.0.0.1:{stub.port}"
    assert json.loads(seen.body) == {
        "model": "served-name",
        "messages": [{"role": "assistant", "content": "A", "reasoning_content": "R."}],
    }


# --- options ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("transport", [NormalizingTransport, SyncNormalizingTransport])
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"provider": "nope"}, "unknown provider 'nope'"),
        ({"max_body_bytes": 0}, "max_body_bytes must be a positive whole number of bytes, not 0"),
        ({"max_body_bytes": True}, "max_body_bytes must be a positive whole number of bytes, not True"),
        ({"think_tags": "no"}, "think_tags must be None, true, false or a ThinkTags, not 'no'"),
        ({"think_start": "sometimes"}, "think_start must be one of content, reasoning, auto, not 'sometimes'"),
        ({"think_start": "auto", "think_tags": False}, "think_start has no effect with think_tags=False"),
        ({"preserve_reasoning": "no"}, "preserve_reasoning must be true or false, not 'no'"),
        ({"wire_api": "grpc"}, "wire_api must be one of openai-chat, openai-responses, anthropic-messages, not 'grpc'"),
        ({"catalog": "catalog.toml"}, "catalog must be a Catalog (numi_mw.load_catalog), not 'catalog.toml'"),
        (
            {"catalog": "CATALOG", "wire_api": "openai-chat"},
            "wire_api goes with an upstream; a catalog says it per provider",
        ),
        ({"catalog": "CATALOG", "provider": "deepseek"}, "give either a provider or a catalog"),
    ],
)
def test_options_are_checked_when_the_transport_is_built(
    transport: type[NormalizingTransport | SyncNormalizingTransport], options: dict[str, Any], message: str
) -> None:
    if options.get("catalog") == "CATALOG":
        options = {**options, "catalog": load_catalog(CATALOG.format(base_url="http://127.0.0.1:9/v1"), "c.toml")}
    with pytest.raises(ValueError) as info:
        transport(**options)
    assert str(info.value).startswith(message)


def test_the_wrapped_transport_must_be_of_the_same_kind() -> None:
    with pytest.raises(ValueError, match=r"transport must be an httpx\.AsyncBaseTransport, not <httpx\.HTTPTransport"):
        NormalizingTransport(httpx.HTTPTransport())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"transport must be an httpx\.BaseTransport, not <httpx\.AsyncHTTPTransport"):
        SyncNormalizingTransport(httpx.AsyncHTTPTransport())  # type: ignore[arg-type]


def test_a_wrapped_mock_transport_answer_is_rewritten_too() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, content=REASONING_EVENT + ANSWER_EVENTS
        )

    transport = SyncNormalizingTransport(httpx.MockTransport(handler), provider="deepseek")
    with httpx.Client(transport=transport) as client:
        response = client.post("https://api.deepseek.com/chat/completions", json={"stream": True})
    assert response.content == REASONING_EVENT_OUT + REASONING_END + ANSWER_EVENTS


# --- the openai SDK ---------------------------------------------------------------------------------------------

try:
    import openai
except ImportError:  # the SDK is a test extra; the transport itself never needs it
    openai = None

needs_openai = pytest.mark.skipif(
    openai is None, reason="the openai SDK is not installed (pip install openai) to run the SDK through the transport"
)


@needs_openai
async def test_the_async_openai_sdk_streams_through_the_transport(stub: Stub) -> None:
    stub.answer = sse(REASONING_EVENT, ANSWER_EVENTS)
    http_client = httpx.AsyncClient(transport=NormalizingTransport(provider="deepseek"))
    async with openai.AsyncOpenAI(
        base_url=stub.base_url, api_key="sk-test", http_client=http_client, max_retries=0
    ) as sdk:
        with anyio.fail_after(15):
            stream = await sdk.chat.completions.create(
                model="deepseek-reasoner",
                messages=[
                    {"role": "user", "content": "Hi"},
                    {"role": "assistant", "content": "A", "reasoning": "R."},  # type: ignore[misc]
                    {"role": "user", "content": "Again"},
                ],
                stream=True,
            )
            deltas = [chunk.choices[0].delta async for chunk in stream]
    assert json.loads(stub.seen[-1].body)["messages"][1] == {
        "role": "assistant",
        "content": "A",
        "reasoning_content": "R.",
    }
    # the reasoning, its end (the detail's format, then nulls), the answer
    assert [(delta.model_extra or {}).get("reasoning") for delta in deltas] == ["Count the r's.", None, None, None]
    assert [delta.content for delta in deltas] == [None, None, None, "Three."]
    entries = [entry for delta in deltas for entry in (delta.model_extra or {}).get("reasoning_details") or []]
    assert rebuild_reasoning_details(entries) == [
        {"type": "reasoning.text", "text": "Count the r's.", "format": "unknown", "index": 0}
    ]


@needs_openai
def test_the_openai_sdk_gets_a_buffered_answer_through_the_sync_transport(stub: Stub) -> None:
    stub.answer = Answer([TAGGED])
    http_client = httpx.Client(transport=SyncNormalizingTransport(provider="local"))
    with openai.OpenAI(base_url=stub.base_url, api_key="sk-test", http_client=http_client, max_retries=0) as sdk:
        completion = sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}])
    message = completion.choices[0].message
    assert message.content == "Answer."
    assert message.model_extra == {
        "reasoning": "Plan.",
        "reasoning_details": [{"type": "reasoning.text", "text": "Plan.", "format": "unknown"}],
    }


@needs_openai
def test_the_openai_sdk_raises_on_a_stream_the_upstream_breaks_off(stub: Stub) -> None:
    stub.answer = sse(REASONING_EVENT, breaks=True)
    http_client = httpx.Client(transport=SyncNormalizingTransport(provider="deepseek"))
    with openai.OpenAI(base_url=stub.base_url, api_key="sk-test", http_client=http_client, max_retries=0) as sdk:
        stream = sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}], stream=True)
        received = []
        with pytest.raises(openai.APIError) as info:
            for chunk in stream:
                received.append(chunk)
    assert len(received) == 3  # the reasoning and its end, before the error chunk
    assert info.value.message == "The upstream stream ended early; the answer is incomplete."


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("encoding", [b"x-gzip", b"br"])
def test_an_answer_in_an_encoding_httpx_does_not_decode_passes_untouched(
    stub: Stub, mode: Mode, encoding: bytes
) -> None:
    packed = gzip.compress(TAGGED)  # whatever the bytes are, they are not read
    stub.answer = Answer([packed], headers=[(b"content-encoding", encoding)])
    status, headers, body = call(
        mode, {"think_tags": ThinkTags()}, "POST", f"{stub.base_url}/chat/completions", json={}
    )
    assert (status, body, headers["content-encoding"]) == (200, packed, encoding.decode())
