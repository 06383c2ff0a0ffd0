"""The sidecar in front of a real llama.cpp server (no mock), driven by the real openai SDK.

llama-server serves a tiny scripted model (``tests/llama_model.py``) that answers ``<think>\\nSpell it out:
s, t, r, a, w, b, e, r, r, y.\\n</think>\\n\\nThree r's.``. By default llama-server returns the reasoning as
``reasoning_content``; with ``"reasoning_format": "none"`` it leaves the raw tags in ``content`` (split across
tokens in the ``split_tags`` model). Through ``numi-mw serve --provider local`` the client gets one shape.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from numi_mw.core.details import rebuild_reasoning_details
from numi_mw.core.providers import provider_rules
from numi_mw.core.request import prepare_request
from tests.e2e_support import sidecar
from tests.llama_model import CONTENT, REASONING, SERVER_REASONING, llama_server_binary, run_llama_server, write_model

BINARY = llama_server_binary()
pytestmark = [
    pytest.mark.llama,
    pytest.mark.skipif(
        not BINARY.exists(),
        reason=f"llama-server not found at {BINARY} (build it with .ci/build-llama-server or set NUMI_MW_LLAMA_SERVER)",
    ),
]

MESSAGES: Any = [{"role": "user", "content": "How many r's are in strawberry?"}]
TAGGED_REASONING = f"\n{REASONING}\n"
TAGGED_CONTENT = f"\n\n{CONTENT}"
RAW = {"reasoning_format": "none"}


@pytest.fixture(scope="module", params=[False, True], ids=["whole-tags", "split-tags"])
def servers(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[openai.OpenAI, str]]:
    model = tmp_path_factory.mktemp("model") / "scripted.gguf"
    write_model(model, split_tags=request.param)
    with (
        run_llama_server(BINARY, model) as llama_url,
        sidecar(llama_url, "--provider", "local") as base_url,
        openai.OpenAI(base_url=base_url, api_key="none", max_retries=0, timeout=30) as sdk,
    ):
        yield sdk, llama_url


@pytest.fixture
def client(servers: tuple[openai.OpenAI, str]) -> openai.OpenAI:
    return servers[0]


def extra(obj: Any) -> dict[str, Any]:
    return dict(obj.model_extra or {})


@pytest.mark.parametrize(
    ("body", "reasoning", "content"),
    [({}, SERVER_REASONING, CONTENT), (RAW, TAGGED_REASONING, TAGGED_CONTENT)],
    ids=["reasoning_content", "raw-tags"],
)
def test_buffered(client: openai.OpenAI, body: dict[str, Any], reasoning: str, content: str) -> None:
    completion = client.chat.completions.create(model="scripted", messages=MESSAGES, extra_body=body)
    message = completion.choices[0].message
    assert message.content == content
    assert extra(message)["reasoning"] == reasoning
    assert extra(message)["reasoning_details"] == [{"type": "reasoning.text", "text": reasoning, "format": "unknown"}]
    assert "reasoning_content" not in extra(message)
    assert completion.choices[0].finish_reason == "stop"


@pytest.mark.parametrize(
    ("body", "reasoning", "content"),
    [({}, SERVER_REASONING, CONTENT), (RAW, TAGGED_REASONING, TAGGED_CONTENT)],
    ids=["reasoning_content", "raw-tags"],
)
def test_streamed_raw_iteration(client: openai.OpenAI, body: dict[str, Any], reasoning: str, content: str) -> None:
    stream = client.chat.completions.create(model="scripted", messages=MESSAGES, stream=True, extra_body=body)
    shown = text = ""
    entries: list[Any] = []
    finish = None
    for chunk in stream:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        fields = extra(delta)
        assert "reasoning_content" not in fields
        if fields.get("reasoning"):
            assert [e["text"] for e in fields["reasoning_details"]] == [fields["reasoning"]]
            shown += fields["reasoning"]
        entries.extend(fields.get("reasoning_details") or [])
        text += delta.content or ""
        assert "<" not in (delta.content or "")
        finish = chunk.choices[0].finish_reason or finish
    assert (shown, text, finish) == (reasoning, content, "stop")
    assert rebuild_reasoning_details(entries) == [
        {"type": "reasoning.text", "text": reasoning, "format": "unknown", "index": 0}
    ]


@pytest.mark.parametrize(
    ("body", "reasoning", "content"),
    [({}, SERVER_REASONING, CONTENT), (RAW, TAGGED_REASONING, TAGGED_CONTENT)],
    ids=["reasoning_content", "raw-tags"],
)
def test_stream_helper(client: openai.OpenAI, body: dict[str, Any], reasoning: str, content: str) -> None:
    with client.chat.completions.stream(model="scripted", messages=MESSAGES, extra_body=body) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    message = final.choices[0].message
    assert message.content == content
    assert extra(message)["reasoning"] == reasoning
    assert [dict(d) for d in extra(message)["reasoning_details"]] == [
        {"type": "reasoning.text", "text": reasoning, "format": "unknown", "index": 0}
    ]


@pytest.mark.parametrize("body", [{}, RAW], ids=["reasoning_content", "raw-tags"])
def test_excluded_reasoning_never_reaches_the_client(client: openai.OpenAI, body: dict[str, Any]) -> None:
    request = {**body, "include_reasoning": False}
    completion = client.chat.completions.create(model="scripted", messages=MESSAGES, extra_body=request)
    message = completion.choices[0].message
    assert message.content in (CONTENT, TAGGED_CONTENT)
    assert not {"reasoning", "reasoning_details", "reasoning_content"} & set(extra(message))
    stream = client.chat.completions.create(model="scripted", messages=MESSAGES, stream=True, extra_body=request)
    text = ""
    for chunk in stream:
        for choice in chunk.choices:
            assert not {"reasoning", "reasoning_details", "reasoning_content"} & set(extra(choice.delta))
            text += choice.delta.content or ""
    assert text == message.content


def test_history_reasoning_replays_to_llama_cpp(servers: tuple[openai.OpenAI, str]) -> None:
    """A reply read from numi_mw (``reasoning``) goes back as ``reasoning_content``, which llama.cpp's template
    renders inside ``<think>`` (checked with llama-server's own ``/apply-template``)."""
    client, llama_url = servers
    history: Any = [
        *MESSAGES,
        {"role": "assistant", "content": CONTENT, "reasoning": REASONING},
        {"role": "user", "content": "And in raspberry?"},
    ]
    prepared = prepare_request(json.dumps({"model": "scripted", "messages": history}).encode(), provider_rules("local"))
    assert json.loads(prepared.body)["messages"][1] == {
        "role": "assistant",
        "content": CONTENT,
        "reasoning_content": REASONING,
    }
    rendered = httpx.post(llama_url.removesuffix("/v1") + "/apply-template", content=prepared.body, timeout=30)
    assert f"<|im_start|>assistant\n<think>\n{REASONING}\n</think>\n\n{CONTENT}<|im_end|>" in rendered.json()["prompt"]
    unconverted = httpx.post(llama_url.removesuffix("/v1") + "/apply-template", json={"messages": history}, timeout=30)
    assert REASONING not in unconverted.json()["prompt"]
    completion = client.chat.completions.create(model="scripted", messages=history)
    assert completion.choices[0].message.content == CONTENT
    assert extra(completion.choices[0].message)["reasoning"] == SERVER_REASONING
