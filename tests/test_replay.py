"""The replay store's pure core (``numi_mw.core.replay``) and its hook in the request pipeline: turn keys, scopes,
what is stored of an answer, and restoration before spec 000's filter."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

import numi_mw.core.replay
from numi_mw.core.codec import decoder
from numi_mw.core.providers import provider_rules
from numi_mw.core.replay import (
    ANONYMOUS_SCOPE,
    NO_CONTEXT,
    Lookup,
    answer_states,
    credential_scope,
    has_state,
    missing,
    missing_in_body,
    opaque_state,
    restore,
    turn_context,
    turn_key,
)
from numi_mw.core.request import prepare_request
from numi_mw.core.routing import fixed_route

RECORDED = "fixtures/openai-chat/openrouter-claude-4.5-signed-reasoning.buffered.json"
TOOL_RECORDED = "fixtures/openai-chat/snowflake-claude-sonnet-4.6-reasoning-tool-call.buffered.json"

SAY_OK = {"role": "user", "content": "Say ok"}
AFTER_SAY_OK = turn_context(SAY_OK)
OK_KEY = turn_key({"role": "assistant", "content": "ok"}, AFTER_SAY_OK)


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


def test_a_turn_is_keyed_by_its_tool_call_ids_whatever_its_content_or_context() -> None:
    call = {"id": "call_7f3a9c", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    with_content = {"role": "assistant", "content": "Let me look.", "tool_calls": [call]}
    without = {"role": "assistant", "content": None, "tool_calls": [call]}
    expected = hashlib.sha256(b"numi-mw turn tool_calls\x00call_7f3a9c").hexdigest()
    assert turn_key(with_content, NO_CONTEXT) == turn_key(without, AFTER_SAY_OK) == expected


def test_the_context_is_the_digest_of_the_role_tool_call_id_tool_call_ids_and_content_text() -> None:
    tag = b"numi-mw turn context\x00"
    assert NO_CONTEXT == turn_context(None) == turn_context("user") == hashlib.sha256(tag).hexdigest()
    assert turn_context(SAY_OK) == hashlib.sha256(tag + b"user\x00\x00\x00Say ok").hexdigest()
    parts = [{"type": "text", "text": "Say "}, {"type": "text", "text": "ok", "cache_control": {"type": "ephemeral"}}]
    assert turn_context({"role": "user", "content": parts}) == AFTER_SAY_OK  # sent back as parts, still the same
    result = {"role": "tool", "tool_call_id": "call_7f3a9c", "content": "14 C"}
    assert turn_context(result) == hashlib.sha256(tag + b"tool\x00call_7f3a9c\x00\x0014 C").hexdigest()
    calls = {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1"}, {"id": "call_2"}]}
    assert turn_context(calls) == hashlib.sha256(tag + b"assistant\x00\x00call_1\x00call_2\x00").hexdigest()
    assert turn_context({}) == turn_context({"role": 3, "tool_call_id": None, "content": None})
    assert turn_context({}) == hashlib.sha256(tag + b"\x00\x00\x00").hexdigest() != NO_CONTEXT
    # reasoning is no part of it: a client may drop it
    assert turn_context({**SAY_OK, "reasoning_details": [{"type": "reasoning.text", "text": "t"}]}) == AFTER_SAY_OK


def test_a_turn_without_tool_calls_is_keyed_by_its_content_after_its_context() -> None:
    context = turn_context({"role": "user", "content": "Add 1 and 2."})
    expected = hashlib.sha256(b"numi-mw turn content\x00" + context.encode() + b"\x00Three.").hexdigest()
    assert expected == "6e0b53043226b9ffdc68556e36317e7043c0b321212b398098bdf2382ae6a14b"  # stored keys stay valid
    assert turn_key({"role": "assistant", "content": "Three."}, context) == expected
    parts = [{"type": "text", "text": "Thr"}, {"type": "text", "text": "ee."}]
    assert turn_key({"role": "assistant", "content": parts}, context) == expected
    assert turn_key({"role": "assistant", "content": "Three!"}, context) != expected
    assert turn_key({"role": "assistant", "content": "Three."}, AFTER_SAY_OK) != expected


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
    assert turn_key(message, NO_CONTEXT) is None


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
    states = answer_states(raw, AFTER_SAY_OK)
    assert states == [(OK_KEY, raw_details(raw))]
    assert decoder.decode(states[0][1]) == answer["choices"][0]["message"]["reasoning_details"]


def test_a_tool_call_answer_is_keyed_by_its_tool_call_ids(shared_dir: Path) -> None:
    raw, answer = recorded(shared_dir, TOOL_RECORDED)
    message = answer["choices"][0]["message"]
    ((key, value),) = answer_states(raw, AFTER_SAY_OK)
    ids = "\x00".join(call["id"] for call in message["tool_calls"]).encode()
    assert key == hashlib.sha256(b"numi-mw turn tool_calls\x00" + ids).hexdigest()
    assert decoder.decode(value) == message["reasoning_details"]


@pytest.mark.parametrize(
    "body", [b"not json", b"[]", b'{"choices": 3}', b'{"choices": [{"message": {"content": "x"}}]}']
)
def test_nothing_is_stored_of_what_is_not_an_answer_with_opaque_state(body: bytes) -> None:
    assert answer_states(body, NO_CONTEXT) == []


def history(details: list[Any] | None, *, extra: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    assistant: dict[str, Any] = {"role": "assistant", "content": "ok", **(extra or {})}
    if details is not None:
        assistant["reasoning_details"] = details
    return [SAY_OK, assistant, {"role": "user", "content": "Again"}]


SIGNED = [{"type": "reasoning.text", "text": "t", "signature": "sig-1", "format": "anthropic-claude-v1"}]


def test_missing_names_the_turns_without_state_once_each() -> None:
    key = OK_KEY
    dropped = history(None)
    assert missing(dropped) == [key]
    after_again = turn_key({"role": "assistant", "content": "ok"}, turn_context(dropped[2]))
    assert missing([*dropped, *dropped]) == [key]  # "ok" after "Say ok" twice: one key
    assert missing([*dropped, *dropped[1:]]) == [key, after_again] and after_again != key
    assert missing(history([{"type": "reasoning.text", "text": "t"}])) == [key]  # text kept, signature lost
    assert missing(history(SIGNED)) == []
    assert missing(history(None, extra={"thinking_blocks": [{"type": "thinking", "signature": "s"}]})) == []
    assert missing(history(None, extra={"provider_specific_fields": {"reasoning_details": SIGNED}})) == []
    assert missing("nope") == []
    assert missing_in_body(json.dumps({"messages": dropped}).encode()) == Lookup([key], turn_context(dropped[2]))
    assert missing_in_body(json.dumps({"messages": dropped[:1]}).encode()) == Lookup([], AFTER_SAY_OK)
    assert missing_in_body(b'{"messages": []}') == Lookup([], NO_CONTEXT)
    assert missing_in_body(b"{") == Lookup([], NO_CONTEXT) == missing_in_body(b'{"messages": 1}')


def test_restore_puts_the_state_back_and_leaves_turns_with_state_alone() -> None:
    key = OK_KEY
    assert key is not None
    other = [{"type": "reasoning.text", "text": "mine", "signature": "sig-2"}]
    messages = [*history([{"type": "reasoning.text", "text": "t"}]), SAY_OK, *history(other)[1:2]]
    found = {key: json.dumps(SIGNED).encode()}
    assert restore(messages, found) == 1
    assert messages[1]["reasoning_details"] == SIGNED
    assert messages[4]["reasoning_details"] == other
    assert has_state(messages[1])
    assert restore(messages, found) == 0
    assert restore(history(None), {key: b'{"not": "a list"}'}) == 0
    assert restore(history(None), {key: b"{"}) == 0
    assert restore("nope", found) == 0


def test_the_pipeline_restores_before_the_filter_of_a_route_that_keeps_details() -> None:
    key = OK_KEY
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
    key = OK_KEY
    assert key is not None
    body = json.dumps({"model": "m", "messages": history(None)}).encode()
    prepared = prepare_request(body, provider_rules("openai"), restored={key: json.dumps(SIGNED).encode()})
    assert prepared.restored == 1
    assert decoder.decode(prepared.body)["messages"][1] == {"role": "assistant", "content": "ok"}


def test_a_restored_signed_detail_becomes_the_signed_thinking_block_on_anthropic_messages(shared_dir: Path) -> None:
    raw, answer = recorded(shared_dir)
    ((key, value),) = answer_states(raw, AFTER_SAY_OK)
    detail = answer["choices"][0]["message"]["reasoning_details"][0]
    body = json.dumps({"model": "claude", "max_tokens": 100, "messages": history(None)}).encode()
    route = fixed_route(provider_rules("generic"), wire_api="anthropic-messages")
    prepared = prepare_request(body, route, restored={key: value})
    assert prepared.restored == 1
    sent = decoder.decode(prepared.body)["messages"][1]["content"]
    assert sent[0] == {"type": "thinking", "thinking": detail["text"], "signature": detail["signature"]}


def conversation(first: str, answer: str = "ok") -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": first},
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "n"},
    ]


def test_the_same_answer_in_another_conversation_gets_nothing_and_its_own_turn_two_gets_its_state(
    shared_dir: Path,
) -> None:
    raw, answer = recorded(shared_dir)  # a signed answer whose content is "ok"
    request_one = json.dumps({"model": "m", "messages": [{"role": "user", "content": "secret plan"}]}).encode()
    keys, context = missing_in_body(request_one)
    assert keys == []
    stored = dict(answer_states(raw, context))
    other = conversation("a totally different conversation")
    assert missing(other) != [] and [k for k in missing(other) if k in stored] == []
    assert restore(other, stored) == 0 and "reasoning_details" not in other[1]
    own = conversation("secret plan")
    assert missing(own) == list(stored)
    assert restore(own, stored) == 1
    assert own[1]["reasoning_details"] == answer["choices"][0]["message"]["reasoning_details"]


class CountedKey(str):
    """A turn key that counts its equality comparisons."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        CountedKey.compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_missing_is_linear_in_the_number_of_turns(monkeypatch: pytest.MonkeyPatch) -> None:
    real = numi_mw.core.replay.turn_key

    def counted(message: object, context: str) -> str | None:
        key = real(message, context)
        return None if key is None else CountedKey(key)

    monkeypatch.setattr(numi_mw.core.replay, "turn_key", counted)
    turns = 50_000
    messages: list[Any] = [SAY_OK]
    for i in range(turns):
        messages += [{"role": "assistant", "content": f"t{i}"}, {"role": "user", "content": "u"}]
    messages += [{"role": "assistant", "content": "t0"}, {"role": "user", "content": "u"}]  # "t0" after "u": new
    messages += [{"role": "assistant", "content": "t1"}, {"role": "user", "content": "u"}]  # as turn 2: once
    CountedKey.compared = 0
    keys = missing(messages)
    assert CountedKey.compared == 1  # "t1" after "u" again; a list scan would compare each key with every earlier one
    assert len(keys) == turns + 1 and len(set(keys)) == turns + 1
    assert keys[0] == real({"role": "assistant", "content": "t0"}, AFTER_SAY_OK)
    assert keys[-1] == real({"role": "assistant", "content": "t0"}, turn_context({"role": "user", "content": "u"}))
