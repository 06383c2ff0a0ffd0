"""The replay store in front of the real llama-server's Anthropic Messages endpoint (no mock), with the real openai SDK.

``numi-mw serve --provider local --wire-api anthropic-messages --replay-store sqlite:///PATH`` runs in front of
llama-server's ``/v1/messages``, through a tap that forwards every request unchanged and keeps its body and the
answer's bytes. llama-server (0.3.36) gives no opaque reasoning state: its thinking block carries
``"signature": ""`` (buffered; streamed, one ``signature_delta`` of ``""`` after the text block began), never a
``redacted_thinking`` block. So the honest round trip is that nothing is stored and turn two goes as the client
sent it. The store path itself is then proven against the same real endpoint with the state an Anthropic turn
leaves (a signed detail, put in the store through its public API): turn two gets it back as a signed thinking
block (Anthropic's Messages API, "Extended thinking": the block with its ``signature``), which llama-server accepts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from benchmarks.loopback import free_port
from numi_mw.core.replay import credential_scope, turn_context, turn_key
from numi_mw.replay_store import open_replay_store
from tests.e2e_support import serving, sidecar
from tests.llama_model import CONTENT, SERVER_REASONING, llama_server_binary, llama_tier, run_llama_server, write_model

BINARY = llama_server_binary()
pytestmark = llama_tier(BINARY)

KEY = "sk-local"
QUESTION = {"role": "user", "content": "How many r's are in strawberry?"}
AGAIN = {"role": "user", "content": "And in raspberry?"}
TIMEOUT = 30
"""Seconds a client, the tap or the sidecar waits on one request."""
SIGNATURE = "EqQBCkgIBxABGAIiQLa1dYfkjBC8mCKVa1dJj6aJ9P3BzvBf+jM9jf2x"
"""A signature as Anthropic's thinking blocks carry one (opaque base64); llama-server does not check it."""


@dataclass
class Tap:
    """Forwards ``POST /v1/messages`` to llama-server unchanged, streamed as it comes, keeping each request body and
    each answer's bytes."""

    target: str
    port: int = field(default_factory=free_port)
    requests: list[dict[str, Any]] = field(default_factory=list)
    answers: list[bytes] = field(default_factory=list)

    async def messages(self, request: Request) -> Response:
        body = await request.body()
        self.requests.append(json.loads(body))
        client = httpx.AsyncClient(timeout=TIMEOUT)
        upstream = await client.send(
            client.build_request(
                "POST", f"{self.target}/messages", content=body, headers={"content-type": "application/json"}
            ),
            stream=True,
        )
        kept = bytearray()
        self.answers.append(b"")
        number = len(self.answers) - 1

        async def relay() -> AsyncIterator[bytes]:
            async for piece in upstream.aiter_raw():
                kept.extend(piece)
                self.answers[number] = bytes(kept)
                yield piece

        async def close() -> None:
            await upstream.aclose()
            await client.aclose()

        media_type = upstream.headers.get("content-type", "application/json")
        return StreamingResponse(relay(), upstream.status_code, media_type=media_type, background=BackgroundTask(close))

    @contextlib.contextmanager
    def running(self) -> Iterator[str]:
        app = Starlette(routes=[Route("/v1/messages", self.messages, methods=["POST"])])
        with serving(app, self.port):
            yield f"http://127.0.0.1:{self.port}/v1"


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    model = tmp_path_factory.mktemp("model") / "scripted.gguf"
    write_model(model)
    with run_llama_server(BINARY, model) as llama_url:
        yield llama_url


@dataclass
class Stack:
    tap: Tap
    client: openai.OpenAI
    store: Path


@pytest.fixture
def stack(llama: str, tmp_path: Path) -> Iterator[Stack]:
    tap = Tap(llama)
    store = tmp_path / "replay.db"
    options = ("--provider", "local", "--wire-api", "anthropic-messages", "--replay-store", f"sqlite:///{store}")
    with contextlib.ExitStack() as running:
        base_url = running.enter_context(
            sidecar(running.enter_context(tap.running()), *options, "--timeout", str(TIMEOUT))
        )
        client = running.enter_context(openai.OpenAI(base_url=base_url, api_key=KEY, max_retries=0, timeout=TIMEOUT))
        yield Stack(tap, client, store)


def turn(client: openai.OpenAI, messages: list[Any], stream: bool) -> tuple[str, str, dict[str, str]]:
    """One turn through the sidecar: the reasoning and the content the client received, and the answer's headers."""
    create = client.chat.completions.with_raw_response.create
    if not stream:
        raw = create(model="scripted", messages=messages)
        message = raw.parse().choices[0].message
        return (message.model_extra or {}).get("reasoning") or "", message.content or "", dict(raw.headers)
    streamed = create(model="scripted", messages=messages, stream=True)
    reasoning = content = ""
    for chunk in streamed.parse():
        if chunk.choices:
            reasoning += (chunk.choices[0].delta.model_extra or {}).get("reasoning") or ""
            content += chunk.choices[0].delta.content or ""
    return reasoning, content, dict(streamed.headers)


def stored_rows(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as db:
        count: int = db.execute("SELECT count(*) FROM replay").fetchone()[0]
    return count


def signatures(answer: bytes, stream: bool) -> list[str]:
    """The signatures of llama-server's thinking block as its answer's bytes carry them."""
    if not stream:
        return [block["signature"] for block in json.loads(answer)["content"] if block["type"] == "thinking"]
    events = [json.loads(line[5:]) for line in answer.decode().splitlines() if line.startswith("data:")]
    return [e["delta"]["signature"] for e in events if e.get("delta", {}).get("type") == "signature_delta"]


@pytest.mark.parametrize("stream", [False, True], ids=["buffered", "streamed"])
def test_llama_server_gives_no_opaque_state_so_nothing_is_stored_and_turn_two_goes_as_sent(
    stack: Stack, stream: bool
) -> None:
    reasoning, content, headers = turn(stack.client, [QUESTION], stream)
    assert (reasoning, content) == (SERVER_REASONING, CONTENT)
    assert "x-numi-mw-restored" not in headers
    assert signatures(stack.tap.answers[0], stream) == [""]  # llama-server signs its thinking with ""
    assert stored_rows(stack.store) == 0
    dropped = {"role": "assistant", "content": CONTENT}  # the client kept no reasoning_details
    reasoning, content, headers = turn(stack.client, [QUESTION, dropped, AGAIN], stream)
    assert (reasoning, content) == (SERVER_REASONING, CONTENT)
    assert "x-numi-mw-restored" not in headers
    assert stack.tap.requests[1]["messages"] == [
        QUESTION,
        {"role": "assistant", "content": [{"type": "text", "text": CONTENT}]},
        AGAIN,
    ]


@pytest.mark.parametrize("stream", [False, True], ids=["buffered", "streamed"])
def test_a_stored_signed_turn_reaches_llama_server_as_a_signed_thinking_block(stack: Stack, stream: bool) -> None:
    details = [
        {
            "type": "reasoning.text",
            "text": SERVER_REASONING,
            "signature": SIGNATURE,
            "format": "anthropic-claude-v1",
            "index": 0,
        }
    ]
    dropped = {"role": "assistant", "content": CONTENT}
    store = open_replay_store(f"sqlite:///{stack.store}")
    key = turn_key(dropped, turn_context(QUESTION))  # the turn answered the question
    assert key is not None
    scope = credential_scope({"authorization": f"Bearer {KEY}"})
    assert asyncio.run(store.remember(scope, key, json.dumps(details).encode())) is True
    reasoning, content, headers = turn(stack.client, [QUESTION, dropped, AGAIN], stream)
    assert (reasoning, content) == (SERVER_REASONING, CONTENT)
    assert headers["x-numi-mw-restored"] == "1"
    assert stack.tap.requests[0]["messages"][1] == {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": SERVER_REASONING, "signature": SIGNATURE},
            {"type": "text", "text": CONTENT},
        ],
    }
