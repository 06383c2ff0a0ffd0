"""The replay store end to end: the real openai SDK through the real ``numi-mw serve`` (SQLite, and Redis shared by
two sidecars) and through ``ReasoningMiddleware``. Turn one is a recorded Anthropic answer through OpenRouter with
its real signature, served by a replay upstream; turn two comes from a client that dropped ``reasoning_details``,
and the upstream receives them exactly as turn one produced them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from benchmarks.loopback import free_port
from numi_mw import ReasoningMiddleware
from numi_mw.cli import main
from numi_mw.replay_store import ReplayStore, SQLiteBackend
from tests.e2e_support import ReplayUpstream, sidecar
from tests.redis_support import redis_server

RECORDED = "openai-chat/openrouter-claude-4.5-signed-reasoning.buffered.json"
FIXTURE = {"x-replay-fixture": RECORDED}


@pytest.fixture(scope="module")
def upstream(shared_dir: Path) -> Iterator[ReplayUpstream]:
    """The replay upstream, which answers with the recorded fixtures: skipped with them when ``shared/`` is absent."""
    with ReplayUpstream().running() as replay:
        yield replay


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


def sdk(base_url: str, key: str = "sk-tenant-a") -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=10)


def turn_one(client: openai.OpenAI) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Turn one through the sidecar: the recorded answer's details as the client received them, and the headers."""
    raw = client.chat.completions.with_raw_response.create(
        model="anthropic/claude-sonnet-4.5",
        messages=[{"role": "user", "content": "Reply with the single word ok"}],
        extra_headers=FIXTURE,
    )
    details: list[dict[str, Any]] = raw.http_response.json()["choices"][0]["message"]["reasoning_details"]
    return details, dict(raw.headers)


def turn_two(client: openai.OpenAI, assistant: dict[str, Any]) -> dict[str, str]:
    """Turn two from a client that kept only the text of turn one; the headers of the answer."""
    raw = client.chat.completions.with_raw_response.create(
        model="anthropic/claude-sonnet-4.5",
        messages=[
            {"role": "user", "content": "Reply with the single word ok"},
            assistant,  # type: ignore[list-item]
            {"role": "user", "content": "Again"},
        ],
        extra_headers=FIXTURE,
    )
    return dict(raw.headers)


def sent_assistant(upstream: ReplayUpstream) -> dict[str, Any]:
    message: dict[str, Any] = json.loads(upstream.received[-1].body)["messages"][1]
    return message


def recorded_details(shared: Path) -> list[dict[str, Any]]:
    answer = json.loads((shared / "fixtures" / RECORDED).read_text())
    details: list[dict[str, Any]] = answer["choices"][0]["message"]["reasoning_details"]
    return details


@pytest.fixture(params=["sqlite", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/replay.db"
    url: str = request.getfixturevalue("redis_url")
    import redis

    with redis.Redis.from_url(url) as client:
        client.flushdb()
    return url


def test_a_dropped_signature_reaches_the_upstream_as_turn_one_produced_it(
    shared_dir: Path, upstream: ReplayUpstream, store_url: str
) -> None:
    with sidecar(upstream.base_url, "--provider", "openrouter", "--replay-store", store_url) as base_url:
        client = sdk(base_url)
        details, headers = turn_one(client)
        assert details == recorded_details(shared_dir)
        assert "x-numi-mw-restored" not in headers
        headers = turn_two(client, {"role": "assistant", "content": "ok"})
        assert headers["x-numi-mw-restored"] == "1"
        assert sent_assistant(upstream) == {"role": "assistant", "content": "ok", "reasoning_details": details}
        assert details[0]["signature"].encode() in upstream.received[-1].body  # the signature's bytes, as recorded
        kept = {"role": "assistant", "content": "ok", "reasoning_details": [{**details[0], "signature": "mine"}]}
        headers = turn_two(client, kept)  # a turn that still has its state is left alone
        assert "x-numi-mw-restored" not in headers
        assert sent_assistant(upstream) == kept
        headers = turn_two(sdk(base_url, "sk-tenant-b"), {"role": "assistant", "content": "ok"})
        assert "x-numi-mw-restored" not in headers  # another tenant's key: another scope
        assert sent_assistant(upstream) == {"role": "assistant", "content": "ok"}


def test_two_sidecars_sharing_one_redis_restore_each_others_turns(
    shared_dir: Path, upstream: ReplayUpstream, redis_url: str
) -> None:
    import redis

    with redis.Redis.from_url(redis_url) as client:
        client.flushdb()
    options = ("--provider", "openrouter", "--replay-store", redis_url)
    with sidecar(upstream.base_url, *options) as first, sidecar(upstream.base_url, *options) as second:
        details, _ = turn_one(sdk(first))
        headers = turn_two(sdk(second), {"role": "assistant", "content": "ok"})
    assert headers["x-numi-mw-restored"] == "1"
    assert sent_assistant(upstream) == {"role": "assistant", "content": "ok", "reasoning_details": details}
    assert details == recorded_details(shared_dir)


def test_a_store_that_is_down_never_fails_a_request(upstream: ReplayUpstream) -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"
    with sidecar(upstream.base_url, "--provider", "openrouter", "--replay-store", dead) as base_url:
        client = sdk(base_url)
        turn_one(client)
        headers = turn_two(client, {"role": "assistant", "content": "ok"})
    assert "x-numi-mw-restored" not in headers
    assert sent_assistant(upstream) == {"role": "assistant", "content": "ok"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--replay-store", "memcached://127.0.0.1"], "must be a sqlite:///PATH or redis://HOST:PORT/DB URL"),
        (["--replay-ttl", "60"], "go with a --replay-store URL"),
        (["--replay-store", "sqlite:///x.db", "--replay-key-env", "NUMI_TEST_UNSET_KEY"], "is not set"),
    ],
)
def test_serve_refuses_bad_replay_options_with_status_2(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NUMI_TEST_UNSET_KEY", raising=False)
    assert main(["serve", "--upstream", "http://127.0.0.1:9/v1", *args]) == 2
    assert message in capsys.readouterr().err


def middleware_app(shared: Path, received: list[bytes], store: ReplayStore | str) -> Any:
    answer = (shared / "fixtures" / RECORDED).read_bytes()

    async def chat(request: Request) -> Response:
        received.append(await request.body())
        return Response(answer, media_type="application/json")

    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
    return ReasoningMiddleware(app, provider="openrouter", replay_store=store)


async def test_the_middleware_restores_what_a_client_dropped(shared_dir: Path, tmp_path: Path) -> None:
    received: list[bytes] = []
    app = middleware_app(shared_dir, received, f"sqlite:///{tmp_path}/replay.db")
    details = recorded_details(shared_dir)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://app/v1") as http:
        client = openai.AsyncOpenAI(base_url="http://app/v1", api_key="sk-a", http_client=http, max_retries=0)
        first = await client.chat.completions.with_raw_response.create(
            model="m", messages=[{"role": "user", "content": "Reply with the single word ok"}]
        )
        assert "x-numi-mw-restored" not in first.headers
        second = await client.chat.completions.with_raw_response.create(
            model="m",
            messages=[
                {"role": "user", "content": "Reply with the single word ok"},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": "Again"},
            ],
        )
    assert second.headers["x-numi-mw-restored"] == "1"
    assert json.loads(received[-1])["messages"][1] == {
        "role": "assistant",
        "content": "ok",
        "reasoning_details": details,
    }


async def test_the_middleware_with_a_store_that_is_down_passes_the_turn_as_sent(
    shared_dir: Path, tmp_path: Path
) -> None:
    path = tmp_path / "replay.db"
    store = ReplayStore(SQLiteBackend(str(path)))
    path.write_bytes(b"no database here" * 100)
    received: list[bytes] = []
    app = middleware_app(shared_dir, received, store)
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "ok"}]}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://app") as http:
        response = await http.post("/v1/chat/completions", json=body)
    assert response.status_code == 200 and "x-numi-mw-restored" not in response.headers
    assert json.loads(received[-1]) == body


STREAMED = "anthropic-messages/anthropic-haiku-4.5-thinking-then-tool-use.sse"
"""A recorded Anthropic Messages stream: a signed thinking block, then a tool call."""

TOOLS = [{"type": "function", "function": {"name": "fixed_version", "parameters": {"type": "object"}}}]


def recorded_thinking(shared: Path, name: str) -> dict[str, Any]:
    """The thinking block a recorded Anthropic stream carries, read from its events alone: its text and signature
    deltas joined (Anthropic's Messages streaming reference, "Thinking deltas")."""
    thinking = signature = ""
    for line in (shared / "fixtures" / name).read_text().splitlines():
        if not line.startswith("data:"):
            continue
        event = json.loads(line[5:])
        delta = event.get("delta", {})
        if event.get("type") == "content_block_delta" and delta.get("type") == "thinking_delta":
            thinking += delta["thinking"]
        elif event.get("type") == "content_block_delta" and delta.get("type") == "signature_delta":
            signature += delta["signature"]
    return {"type": "thinking", "thinking": thinking, "signature": signature}


def streamed_turn(client: openai.OpenAI, messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str | None]:
    """One streamed turn through the real SDK: the tool calls as the client keeps them (id, type, function name and
    arguments; no reasoning details), and the ``x-numi-mw-restored`` header."""
    raw = client.chat.completions.with_raw_response.create(
        model="claude-haiku-4-5",
        messages=messages,  # type: ignore[arg-type]
        tools=TOOLS,  # type: ignore[list-item]
        stream=True,
        extra_headers={"x-replay-fixture": STREAMED},
    )
    calls: dict[int, dict[str, Any]] = {}
    for chunk in raw.parse():
        for call in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
            entry = calls.setdefault(call.index, {"type": "function", "function": {"name": "", "arguments": ""}})
            if call.id:
                entry["id"] = call.id
            if call.function and call.function.name:
                entry["function"]["name"] = call.function.name
            if call.function and call.function.arguments:
                entry["function"]["arguments"] += call.function.arguments
    return [calls[i] for i in sorted(calls)], raw.headers.get("x-numi-mw-restored")


def test_a_streamed_anthropic_turn_comes_back_with_its_signed_thinking_block(
    shared_dir: Path, upstream: ReplayUpstream, store_url: str
) -> None:
    options = ("--provider", "anthropic", "--wire-api", "anthropic-messages", "--replay-store", store_url)
    question = {"role": "user", "content": "Which version? Then a joke."}
    with sidecar(upstream.base_url, *options) as base_url:
        client = sdk(base_url)
        calls, restored = streamed_turn(client, [question])
        assert restored is None
        assert [call["id"] for call in calls] == ["toolu_01825dXWLSoJwCst1qTsiWdb"]
        assistant = {"role": "assistant", "content": None, "tool_calls": calls}  # reasoning_details dropped
        result = {"role": "tool", "tool_call_id": calls[0]["id"], "content": "1.2.3"}
        _, restored = streamed_turn(client, [question, assistant, result])
    assert restored == "1"
    sent = json.loads(upstream.received[-1].body)
    assert upstream.received[-1].path == "/v1/messages"
    assert sent["messages"][1]["content"][0] == recorded_thinking(shared_dir, STREAMED)
    assert sent["messages"][1]["content"][1]["type"] == "tool_use"


async def test_the_middleware_keeps_a_streamed_answer(shared_dir: Path, tmp_path: Path) -> None:
    stream = (
        shared_dir / "fixtures" / "openai-chat" / "openrouter-claude-sonnet-4.5-reasoning-details.sse"
    ).read_bytes()
    received: list[bytes] = []

    async def chat(request: Request) -> Response:
        received.append(await request.body())
        return Response(stream, media_type="text/event-stream")

    app = ReasoningMiddleware(
        Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])]),
        provider="openrouter",
        replay_store=f"sqlite:///{tmp_path}/replay.db",
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://app/v1") as http:
        client = openai.AsyncOpenAI(base_url="http://app/v1", api_key="sk-a", http_client=http, max_retries=0)
        content = ""
        details: list[dict[str, Any]] = []
        async for chunk in await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        ):
            if chunk.choices:
                content += chunk.choices[0].delta.content or ""
                details += (chunk.choices[0].delta.model_extra or {}).get("reasoning_details") or []
        second = await client.chat.completions.with_raw_response.create(
            model="m",
            messages=[
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": content},
                {"role": "user", "content": "Again"},
            ],
        )
    assert second.headers["x-numi-mw-restored"] == "1"
    sent = json.loads(received[-1])["messages"][1]["reasoning_details"]
    signatures = [d["signature"] for d in details if d.get("signature")]
    assert signatures and [d.get("signature") for d in sent if d.get("signature")] == signatures


async def test_a_stream_whose_text_mentions_done_is_kept_at_its_real_end(tmp_path: Path) -> None:
    """A reasoning text that quotes ``data: [DONE]`` (an answer about SSE) is no end of the stream: the turn is
    kept when the stream's own ``[DONE]`` event goes out, with its whole content."""
    from numi_mw.core.replay import StreamStates, turn_context, turn_key
    from numi_mw.proxy.app import _kept_stream
    from numi_mw.replay_store import open_replay_store

    detail = {"type": "reasoning.text", "text": 'SSE ends with "data: [DONE]"', "signature": "c2lnbmVk", "index": 0}
    first = {"choices": [{"index": 0, "delta": {"role": "assistant", "reasoning_details": [detail]}}]}
    second = {"choices": [{"index": 0, "delta": {"content": "It ends with [DONE]."}, "finish_reason": "stop"}]}
    chunks = [b"data: " + json.dumps(first).encode() + b"\n\n", b"data: " + json.dumps(second).encode() + b"\n\n"]
    chunks.append(b"data: [DONE]\n\n")

    async def upstream() -> Any:
        for chunk in chunks:
            yield chunk

    question = {"role": "user", "content": "How does SSE end?"}
    store = open_replay_store(f"sqlite:///{tmp_path}/replay.db")
    relayed = [c async for c in _kept_stream(store, "scope-a", StreamStates(turn_context(question)), upstream())]
    assert relayed == chunks
    key = turn_key({"role": "assistant", "content": "It ends with [DONE]."}, turn_context(question))
    assert key is not None
    found = await store.lookup("scope-a", [key])
    assert json.loads(found[key]) == [detail]
    await store.aclose()
