"""The replay store's pure core (``numi_mw.core.replay``) and its hook in the request pipeline: turn keys, scopes,
what is stored of an answer, and restoration before spec 000's filter."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from numi_mw.core.codec import decoder
from numi_mw.core.providers import provider_rules
from numi_mw.core.replay import (
    ANONYMOUS_SCOPE,
    answer_states,
    credential_scope,
    has_state,
    missing,
    missing_in_body,
    opaque_state,
    restore,
    turn_key,
)
from numi_mw.core.request import prepare_request
from numi_mw.core.routing import fixed_route

RECORDED = "fixtures/openai-chat/openrouter-claude-4.5-signed-reasoning.buffered.json"
TOOL_RECORDED = "fixtures/openai-chat/snowflake-claude-sonnet-4.6-reasoning-tool-call.buffered.json"


def recorded(shared: Path, name: str = RECORDED) -> tuple[bytes, dict[str, Any]]:
    raw = (shared / name).read_bytes()
    return raw, json.loads(raw)


def raw_details(raw: bytes) -> bytes:
    """The bytes of the first ``"reasoning_details": [...]`` value in a recorded body, as recorded."""
    start = raw.index(b"[", raw.index(b'"reasoning_details"'))
    depth = 0
    for i in range(start, len(raw)):
        depth += {ord("["): 1, ord("]"): -1}.get(raw[i], 0)
        if depth == 0:
            return raw[start : i + 1]
    raise AssertionError("unbalanced")


def test_the_scope_is_the_digest_of_the_key_in_either_header() -> None:
    expected = hashlib.sha256(b"numi-mw scope\x00sk-a").hexdigest()
    assert credential_scope({"authorization": "Bearer sk-a"}) == expected
    assert credential_scope({"authorization": "bearer  sk-a "}) == expected
    assert credential_scope({"x-api-key": "sk-a"}) == expected
    assert credential_scope({"authorization": "Bearer sk-b"}) != expected
    assert "sk-a" not in expected


def test_a_request_without_credential_is_in_the_anonymous_scope() -> None:
    assert credential_scope({}) == ANONYMOUS_SCOPE == "anonymous"
    assert credential_scope({"authorization": "  ", "x-api-key": ""}) == "anonymous"


def test_a_turn_is_keyed_by_its_tool_call_ids_whatever_its_content() -> None:
    call = {"id": "call_7f3a9c", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    with_content = {"role": "assistant", "content": "Let me look.", "tool_calls": [call]}
    without = {"role": "assistant", "content": None, "tool_calls": [call]}
    expected = hashlib.sha256(b"numi-mw turn tool_calls\x00call_7f3a9c").hexdigest()
    assert turn_key(with_content) == turn_key(without) == expected


def test_a_turn_without_tool_calls_is_keyed_by_its_content_as_a_string_or_text_parts() -> None:
    expected = hashlib.sha256(b"numi-mw turn content\x00Three.").hexdigest()
    assert turn_key({"role": "assistant", "content": "Three."}) == expected
    parts = [{"type": "text", "text": "Thr"}, {"type": "text", "text": "ee."}]
    assert turn_key({"role": "assistant", "content": parts}) == expected
    assert turn_key({"role": "assistant", "content": "Three!"}) != expected


@pytest.mark.parametrize(
    "message",
    [
        {"role": "user", "content": "Three."},
        {"role": "assistant", "content": ""},
        {"role": "assistant", "content": None, "tool_calls": []},
        {"role": "assistant"},
        "assistant",
    ],
)
def test_no_key_for_what_is_not_an_assistant_turn_with_content_or_tool_calls(message: object) -> None:
    assert turn_key(message) is None


def test_opaque_state_is_the_details_list_when_one_detail_is_opaque() -> None:
    signed = [{"type": "reasoning.text", "text": "t", "signature": "sig"}]
    encrypted = [{"type": "reasoning.encrypted", "data": "enc", "format": "anthropic-claude-v1"}]
    item = [{"type": "reasoning.summary", "summary": "s", "id": "rs_1", "format": "openai-responses-v1"}]
    for details in (signed, encrypted, item):
        value = opaque_state({"role": "assistant", "content": "x", "reasoning_details": details})
        assert value is not None and decoder.decode(value) == details
    plain = [{"type": "reasoning.text", "text": "t", "format": "unknown"}]
    assert opaque_state({"role": "assistant", "reasoning_details": plain}) is None
    assert (
        opaque_state({"role": "assistant", "reasoning_details": [{"type": "reasoning.text", "signature": ""}]}) is None
    )
    assert opaque_state({"role": "assistant", "reasoning": "text only"}) is None
    assert (
        opaque_state({"role": "assistant", "reasoning_details": [{"id": "x", "format": "anthropic-claude-v1"}]}) is None
    )


def test_an_answer_stores_its_details_exactly_as_recorded(shared_dir: Path) -> None:
    raw, answer = recorded(shared_dir)
    states = answer_states(raw)
    assert states == [(turn_key({"role": "assistant", "content": "ok"}), raw_details(raw))]
    assert decoder.decode(states[0][1]) == answer["choices"][0]["message"]["reasoning_details"]


def test_a_tool_call_answer_is_keyed_by_its_tool_call_ids(shared_dir: Path) -> None:
    raw, answer = recorded(shared_dir, TOOL_RECORDED)
    message = answer["choices"][0]["message"]
    ((key, value),) = answer_states(raw)
    ids = "\x00".join(call["id"] for call in message["tool_calls"]).encode()
    assert key == hashlib.sha256(b"numi-mw turn tool_calls\x00" + ids).hexdigest()
    assert decoder.decode(value) == message["reasoning_details"]


@pytest.mark.parametrize(
    "body", [b"not json", b"[]", b'{"choices": 3}', b'{"choices": [{"message": {"content": "x"}}]}']
)
def test_nothing_is_stored_of_what_is_not_an_answer_with_opaque_state(body: bytes) -> None:
    assert answer_states(body) == []


def history(details: list[Any] | None, *, extra: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    assistant: dict[str, Any] = {"role": "assistant", "content": "ok", **(extra or {})}
    if details is not None:
        assistant["reasoning_details"] = details
    return [{"role": "user", "content": "Say ok"}, assistant, {"role": "user", "content": "Again"}]


SIGNED = [{"type": "reasoning.text", "text": "t", "signature": "sig-1", "format": "anthropic-claude-v1"}]


def test_missing_names_the_turns_without_state_once_each() -> None:
    key = turn_key({"role": "assistant", "content": "ok"})
    dropped = history(None)
    assert missing(dropped) == [key]
    assert missing([*dropped, *dropped]) == [key]
    assert missing(history([{"type": "reasoning.text", "text": "t"}])) == [key]  # text kept, signature lost
    assert missing(history(SIGNED)) == []
    assert missing(history(None, extra={"thinking_blocks": [{"type": "thinking", "signature": "s"}]})) == []
    assert missing(history(None, extra={"provider_specific_fields": {"reasoning_details": SIGNED}})) == []
    assert missing("nope") == []
    assert missing_in_body(json.dumps({"messages": dropped}).encode()) == [key]
    assert missing_in_body(b"{") == [] and missing_in_body(b'{"messages": 1}') == []


def test_restore_puts_the_state_back_and_leaves_turns_with_state_alone() -> None:
    key = turn_key({"role": "assistant", "content": "ok"})
    assert key is not None
    other = [{"type": "reasoning.text", "text": "mine", "signature": "sig-2"}]
    messages = [*history([{"type": "reasoning.text", "text": "t"}]), *history(other)[1:2]]
    found = {key: json.dumps(SIGNED).encode()}
    assert restore(messages, found) == 1
    assert messages[1]["reasoning_details"] == SIGNED
    assert messages[3]["reasoning_details"] == other
    assert has_state(messages[1])
    assert restore(messages, found) == 0
    assert restore(history(None), {key: b'{"not": "a list"}'}) == 0
    assert restore(history(None), {key: b"{"}) == 0
    assert restore("nope", found) == 0


def test_the_pipeline_restores_before_the_filter_of_a_route_that_keeps_details() -> None:
    key = turn_key({"role": "assistant", "content": "ok"})
    assert key is not None
    body = json.dumps({"model": "m", "messages": history(None)}).encode()
    prepared = prepare_request(body, provider_rules("openrouter"), restored={key: json.dumps(SIGNED).encode()})
    assert prepared.restored == 1 and prepared.changed
    assert decoder.decode(prepared.body)["messages"][1] == {
        "role": "assistant",
        "content": "ok",
        "reasoning_details": SIGNED,
    }
    plain = prepare_request(body, provider_rules("openrouter"))
    assert plain.restored == 0 and plain.body == body


def test_spec_000_still_decides_a_restored_turn_on_a_route_that_drops_details() -> None:
    key = turn_key({"role": "assistant", "content": "ok"})
    assert key is not None
    body = json.dumps({"model": "m", "messages": history(None)}).encode()
    prepared = prepare_request(body, provider_rules("openai"), restored={key: json.dumps(SIGNED).encode()})
    assert prepared.restored == 1
    assert decoder.decode(prepared.body)["messages"][1] == {"role": "assistant", "content": "ok"}


def test_a_restored_signed_detail_becomes_the_signed_thinking_block_on_anthropic_messages(shared_dir: Path) -> None:
    raw, answer = recorded(shared_dir)
    ((key, value),) = answer_states(raw)
    detail = answer["choices"][0]["message"]["reasoning_details"][0]
    body = json.dumps({"model": "claude", "max_tokens": 100, "messages": history(None)}).encode()
    route = fixed_route(provider_rules("generic"), wire_api="anthropic-messages")
    prepared = prepare_request(body, route, restored={key: value})
    assert prepared.restored == 1
    sent = decoder.decode(prepared.body)["messages"][1]["content"]
    assert sent[0] == {"type": "thinking", "thinking": detail["text"], "signature": detail["signature"]}
