"""The sidecar translating to llama.cpp's native endpoints (no mock), driven by the real openai SDK.

llama-server serves Anthropic Messages at ``/v1/messages`` (thinking blocks; it signs them with an empty
signature, sent after the text block began) and OpenAI Responses at ``/v1/responses`` (reasoning items with
``reasoning_text`` content). ``numi-mw serve --wire-api W`` in front of it: the client speaks chat completions and
gets exactly the model's reasoning and content, buffered and streamed; a second turn built from the SDK's own
message is accepted.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from numi_mw.core.details import rebuild_reasoning_details
from tests.e2e_support import sidecar
from tests.llama_model import CONTENT, SERVER_REASONING, llama_server_binary, llama_tier, run_llama_server, write_model

BINARY = llama_server_binary()
pytestmark = llama_tier(BINARY)

MESSAGES: Any = [{"role": "user", "content": "How many r's are in strawberry?"}]
FORMATS = {"anthropic-messages": "anthropic-claude-v1", "openai-responses": "openai-responses-v1"}


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    model = tmp_path_factory.mktemp("model") / "scripted.gguf"
    write_model(model)
    with run_llama_server(BINARY, model) as llama_url:
        yield llama_url


@pytest.fixture(scope="module", params=["anthropic-messages", "openai-responses"])
def wire(request: pytest.FixtureRequest, llama: str) -> Iterator[tuple[str, str]]:
    with sidecar(llama, "--provider", "local", "--wire-api", request.param) as base_url:
        yield request.param, base_url


@pytest.fixture
def client(wire: tuple[str, str]) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=wire[1], api_key="sk-local", max_retries=0, timeout=30) as sdk:
        yield sdk


def extra(obj: Any) -> dict[str, Any]:
    return dict(obj.model_extra or {})


def detail(wire: str) -> dict[str, Any]:
    return {"type": "reasoning.text", "text": SERVER_REASONING, "format": FORMATS[wire], "index": 0}


def test_buffered(wire: tuple[str, str], client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(model="scripted", messages=MESSAGES)
    message = completion.choices[0].message
    assert message.content == CONTENT
    assert extra(message)["reasoning"] == SERVER_REASONING
    assert extra(message)["reasoning_details"] == [detail(wire[0])]
    assert completion.choices[0].finish_reason == "stop"
    assert completion.object == "chat.completion"


def test_streamed_raw_iteration(wire: tuple[str, str], client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(model="scripted", messages=MESSAGES, stream=True)
    shown = text = ""
    entries: list[Any] = []
    finish = None
    for chunk in stream:
        if not chunk.choices:
            continue
        fields = extra(chunk.choices[0].delta)
        if fields.get("reasoning"):
            assert [e["text"] for e in fields["reasoning_details"]] == [fields["reasoning"]]
            shown += fields["reasoning"]
        entries.extend(fields.get("reasoning_details") or [])
        text += chunk.choices[0].delta.content or ""
        finish = chunk.choices[0].finish_reason or finish
    assert (shown, text, finish) == (SERVER_REASONING, CONTENT, "stop")
    assert rebuild_reasoning_details(entries) == [detail(wire[0])]


def test_stream_helper_and_a_second_turn_from_its_message(wire: tuple[str, str], client: openai.OpenAI) -> None:
    with client.chat.completions.stream(model="scripted", messages=MESSAGES) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    message = final.choices[0].message
    assert message.content == CONTENT
    assert extra(message)["reasoning"] == SERVER_REASONING
    assert [dict(d) for d in extra(message)["reasoning_details"]] == [detail(wire[0])]
    history: Any = [*MESSAGES, message.model_dump(exclude_none=True), {"role": "user", "content": "And in raspberry?"}]
    raw = client.chat.completions.with_raw_response.create(model="scripted", messages=history)
    assert raw.http_response.status_code == 200
    second = raw.parse().choices[0].message
    assert (second.content, extra(second)["reasoning"]) == (CONTENT, SERVER_REASONING)
    if wire[0] == "anthropic-messages":  # llama.cpp signs with "": unsigned text is not sent back as thinking
        assert raw.http_response.headers["x-numi-mw-adjustments"] == "unsigned-reasoning-dropped=1"
