"""A client that keeps only ``reasoning_details`` (spec 004 "From a buffered response", "From a stream") still gives
DeepSeek, Z.AI, local servers and the other text-taking routes their reasoning text on a tool-call turn: the
details' visible text (``docs/providers.md``, the message preparation filter)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from numi_mw.catalog_files import default_catalog
from numi_mw.core.details import rebuild_reasoning_details
from numi_mw.core.providers import PROVIDERS, provider_rules
from numi_mw.core.request import prepare_request
from tests.response_support import client_view, rewrite, rewrite_json, sse_chunks

TOOL_CALL = "openai-chat/deepseek-v4-flash-reasoning-content-tool-call.buffered.json"
STREAM = "openai-chat/deepseek-reasoner-reasoning-content.sse"
TOOL_CALLS = [{"id": "call_1", "type": "function", "function": {"name": "roll", "arguments": "{}"}}]
TEXT_ROWS = sorted(name for name, rules in PROVIDERS.items() if rules.replay in ("text", "preserved-text"))


def recorded_message(shared: Path) -> dict[str, Any]:
    message: dict[str, Any] = json.loads((shared / "fixtures" / TOOL_CALL).read_text())["choices"][0]["message"]
    return message


def details_only_turn(shared: Path) -> dict[str, Any]:
    """The recorded DeepSeek tool-call turn as a client sends it back that keeps only what numi_mw answered in
    ``reasoning_details`` (the answer's message, without ``reasoning``)."""
    answer = json.loads(rewrite_json((shared / "fixtures" / TOOL_CALL).read_bytes()))["choices"][0]["message"]
    return {
        "role": "assistant",
        "content": answer["content"],
        "tool_calls": answer["tool_calls"],
        "reasoning_details": answer["reasoning_details"],
    }


def tool_loop(turn: dict[str, Any]) -> bytes:
    call_id = turn["tool_calls"][0]["id"]
    messages = [{"role": "user", "content": "Roll a die; I guess 4."}, turn]
    messages.append({"role": "tool", "tool_call_id": call_id, "content": "4"})
    return json.dumps({"model": "deepseek-v4-flash", "messages": messages}).encode()


def upstream_turn(body: bytes, target: Any) -> dict[str, Any]:
    message: dict[str, Any] = json.loads(prepare_request(body, target).body)["messages"][1]
    return message


def test_the_details_alone_are_what_the_client_kept(shared_dir: Path) -> None:
    turn = details_only_turn(shared_dir)
    assert turn["reasoning_details"] == [
        {"type": "reasoning.text", "text": recorded_message(shared_dir)["reasoning_content"], "format": "unknown"}
    ]


def test_deepseek_gets_its_reasoning_content_back_from_the_details(shared_dir: Path) -> None:
    recorded = recorded_message(shared_dir)
    assert upstream_turn(tool_loop(details_only_turn(shared_dir)), provider_rules("deepseek")) == {
        "role": "assistant",
        "content": recorded["content"],
        "tool_calls": recorded["tool_calls"],
        "reasoning_content": recorded["reasoning_content"],
    }


@pytest.mark.parametrize("provider", TEXT_ROWS)
def test_every_route_that_takes_text_gets_it_in_its_own_field(shared_dir: Path, provider: str) -> None:
    assert TEXT_ROWS == [
        "anthropic",
        "cerebras",
        "deepseek",
        "fireworks",
        "groq",
        "local",
        "together",
        "xai",
        "zai",
    ]
    message = upstream_turn(tool_loop(details_only_turn(shared_dir)), provider_rules(provider))
    field = provider_rules(provider).reasoning_field
    other = "reasoning" if field == "reasoning_content" else "reasoning_content"
    assert message[field] == recorded_message(shared_dir)["reasoning_content"]
    assert other not in message
    assert "reasoning_details" not in message


def test_details_rebuilt_from_a_stream_give_deepseek_the_whole_reasoning(shared_dir: Path) -> None:
    raw = (shared_dir / "fixtures" / STREAM).read_bytes()
    recorded = "".join(
        chunk["choices"][0]["delta"].get("reasoning_content") or "" for chunk in sse_chunks(raw) if chunk["choices"]
    )
    view = client_view(sse_chunks(rewrite(raw)))
    details = rebuild_reasoning_details(view.entries)  # spec 004 "From a stream"
    turn = {"role": "assistant", "content": view.content, "reasoning_details": details, "tool_calls": TOOL_CALLS}
    assert upstream_turn(tool_loop(turn), provider_rules("deepseek"))["reasoning_content"] == recorded


def test_through_the_packaged_catalog_a_local_deepseek_distill_gets_the_text(shared_dir: Path) -> None:
    body = json.loads(tool_loop(details_only_turn(shared_dir)))
    body["model"] = "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B"  # the packaged catalog's local provider
    prepared = prepare_request(json.dumps(body).encode(), default_catalog())
    assert prepared.route.rules.name == "local"
    recorded = recorded_message(shared_dir)
    assert json.loads(prepared.body)["messages"][1] == {
        "role": "assistant",
        "content": recorded["content"],
        "tool_calls": recorded["tool_calls"],
        "reasoning_content": recorded["reasoning_content"],
    }


def test_through_the_packaged_catalog_openrouters_deepseek_gets_the_details_as_sent(shared_dir: Path) -> None:
    # OpenRouter reads reasoning_details back (spec 004) and gives DeepSeek its reasoning_content itself
    body = json.loads(tool_loop(details_only_turn(shared_dir)))
    body["model"] = "deepseek/deepseek-r1"
    prepared = prepare_request(json.dumps(body).encode(), default_catalog())
    assert prepared.route.rules.name == "openrouter"
    assert json.loads(prepared.body)["messages"][1] == details_only_turn(shared_dir)
