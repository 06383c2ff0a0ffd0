"""Reasoning a client keeps in ``provider_specific_fields`` (LiteLLM) or ``thinking_blocks``: read as reasoning by
spec 000's filter and spec 004's table, sent once, never in a key the upstream does not know."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from numi_mw.core.providers import PROVIDERS, provider_rules
from numi_mw.core.request import prepare_request
from numi_mw.core.routing import Route
from tests.client_shapes import litellm_assistant

TEXT = "Need the weather tool."
SIGNED = {
    "type": "reasoning.text",
    "text": TEXT,
    "signature": "EugCCkgIDRABGAIqQPO/3ufZ+/=\u00e9",
    "format": "anthropic-claude-v1",
    "index": 0,
}
ENCRYPTED = {
    "type": "reasoning.encrypted",
    "data": "gAAAAABo+/==",
    "format": "openai-responses-v1",
    "id": "rs_1",
    "index": 1,
}
TOOL_CALLS = [{"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Paris"}'}}]
ANSWER = {
    "role": "assistant",
    "content": "",
    "reasoning": TEXT,
    "reasoning_details": [SIGNED, ENCRYPTED],
    "tool_calls": TOOL_CALLS,
}
"""An assistant message as numi_mw answers it (spec 004 "Response fields")."""
LITELLM = litellm_assistant(ANSWER)
"""The same message as LiteLLM sends it back on the next turn."""
ONCE = {
    "content": "",
    "role": "assistant",
    "tool_calls": TOOL_CALLS,
    "reasoning_content": TEXT,
    "reasoning_details": [SIGNED, ENCRYPTED],
}
"""The same reasoning, once, at the top level of the message."""


def upstream_messages(provider: str, *messages: dict[str, Any], preserve: bool = True) -> list[dict[str, Any]]:
    """The messages after the first (a user turn) that the upstream of ``provider`` receives."""
    body = {"model": "m", "messages": [{"role": "user", "content": "Weather in Paris?"}, *messages]}
    raw = json.dumps(body).encode()
    out = json.loads(prepare_request(raw, Route(provider_rules(provider), preserve=preserve)).body)
    assert json.loads(raw) == body  # the client's request is not changed
    return list(out["messages"][1:])


def test_litellm_keeps_the_reasoning_in_provider_specific_fields_and_sends_it_back() -> None:
    # litellm/types/utils.py Message: reasoning_content at the top, the fields it does not declare verbatim inside
    assert LITELLM == {
        "content": "",
        "role": "assistant",
        "tool_calls": TOOL_CALLS,
        "reasoning_content": TEXT,
        "provider_specific_fields": {"reasoning": TEXT, "reasoning_details": [SIGNED, ENCRYPTED]},
    }


def test_deepseek_gets_the_reasoning_once_and_no_provider_specific_fields() -> None:
    assert upstream_messages("deepseek", copy.deepcopy(LITELLM)) == [
        {"content": "", "role": "assistant", "tool_calls": TOOL_CALLS, "reasoning_content": TEXT}
    ]


def test_openrouter_gets_the_details_from_provider_specific_fields_byte_for_byte() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "Weather in Paris?"}, copy.deepcopy(LITELLM)]}
    out = prepare_request(json.dumps(body).encode(), provider_rules("openrouter")).body
    assert json.loads(out)["messages"][1] == {
        "content": "",
        "role": "assistant",
        "tool_calls": TOOL_CALLS,
        "reasoning": TEXT,
        "reasoning_details": [SIGNED, ENCRYPTED],
    }
    # the signature and the encrypted data as they came, and each detail's keys in their order
    assert '"signature":"EugCCkgIDRABGAIqQPO/3ufZ+/=\u00e9"'.encode() in out
    assert b'"data":"gAAAAABo+/=="' in out
    assert [list(d) for d in json.loads(out)["messages"][1]["reasoning_details"]] == [list(SIGNED), list(ENCRYPTED)]


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
@pytest.mark.parametrize("preserve", [True, False])
def test_every_provider_gets_what_it_gets_for_the_reasoning_sent_once(provider: str, preserve: bool) -> None:
    assert upstream_messages(provider, copy.deepcopy(LITELLM), preserve=preserve) == upstream_messages(
        provider, copy.deepcopy(ONCE), preserve=preserve
    )


@pytest.mark.parametrize("provider", ["deepseek", "openrouter", "generic", "groq"])
def test_the_top_level_wins_so_the_reasoning_is_never_doubled(provider: str) -> None:
    other = {"type": "reasoning.text", "text": "Another thought.", "signature": "OTHER"}
    message = {
        "role": "assistant",
        "content": "A.",
        "reasoning": TEXT,
        "reasoning_details": [SIGNED],
        "provider_specific_fields": {
            "reasoning": "Another thought.",
            "reasoning_content": "X",
            "reasoning_details": [other],
        },
    }
    top = {"role": "assistant", "content": "A.", "reasoning": TEXT, "reasoning_details": [SIGNED]}
    assert upstream_messages(provider, message) == upstream_messages(provider, top)


@pytest.mark.parametrize(
    ("provider", "expected"),
    [
        ("deepseek", {"role": "assistant", "content": None, "tool_calls": TOOL_CALLS, "reasoning_content": TEXT}),
        ("zai", {"role": "assistant", "content": None, "tool_calls": TOOL_CALLS, "reasoning_content": TEXT}),
        ("local", {"role": "assistant", "content": None, "tool_calls": TOOL_CALLS, "reasoning_content": TEXT}),
        (
            "openrouter",
            {"role": "assistant", "content": None, "tool_calls": TOOL_CALLS, "reasoning_details": [SIGNED, ENCRYPTED]},
        ),
    ],
)
def test_details_held_alone_are_read_as_the_messages_details(provider: str, expected: dict[str, Any]) -> None:
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": TOOL_CALLS,
        "provider_specific_fields": {"reasoning_details": [SIGNED, ENCRYPTED]},
    }
    assert upstream_messages(provider, message) == [expected]


@pytest.mark.parametrize(("provider", "field"), [("deepseek", "reasoning_content"), ("openrouter", "reasoning")])
def test_text_held_alone_is_named_for_the_provider(provider: str, field: str) -> None:
    message = {"role": "assistant", "content": "A.", "provider_specific_fields": {"reasoning": TEXT}}
    assert upstream_messages(provider, message) == [{"role": "assistant", "content": "A.", field: TEXT}]


@pytest.mark.parametrize("held", [None, "text", [1], {}, {"native_finish_reason": "stop", "citations": ["u"]}])
@pytest.mark.parametrize("role", ["assistant", "user", "tool"])
def test_provider_specific_fields_never_reach_the_upstream(held: Any, role: str) -> None:
    # what LiteLLM keeps there besides reasoning are fields of its answer, which no API reads in a request
    message = {"role": role, "content": "A.", "provider_specific_fields": held}
    for provider in ("deepseek", "openrouter", "openai"):
        assert upstream_messages(provider, copy.deepcopy(message)) == [{"role": role, "content": "A."}]


THINKING = [
    {"type": "thinking", "thinking": TEXT, "signature": "EqQBCkgIBxABGAIqQ+/="},
    {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a+/="},
]
LITELLM_ANTHROPIC = {
    # an answer of LiteLLM's anthropic route: the thinking blocks at the top and in provider_specific_fields
    "content": "A.",
    "role": "assistant",
    "reasoning_content": TEXT,
    "thinking_blocks": THINKING,
    "provider_specific_fields": {"thinking_blocks": THINKING},
}


@pytest.mark.parametrize("provider", ["deepseek", "zai", "local", "groq", "anthropic"])
def test_thinking_blocks_go_where_reasoning_details_go(provider: str) -> None:
    field = provider_rules(provider).reasoning_field
    assert upstream_messages(provider, copy.deepcopy(LITELLM_ANTHROPIC)) == [
        {"content": "A.", "role": "assistant", field: TEXT}
    ]


@pytest.mark.parametrize("provider", ["openrouter", "generic"])
def test_thinking_blocks_stay_once_where_reasoning_details_stay(provider: str) -> None:
    field = provider_rules(provider).reasoning_field
    assert upstream_messages(provider, copy.deepcopy(LITELLM_ANTHROPIC)) == [
        {"content": "A.", "role": "assistant", field: TEXT, "thinking_blocks": THINKING}
    ]


def test_thinking_blocks_held_alone_give_their_text_where_only_text_is_taken() -> None:
    message = {"role": "assistant", "content": "A.", "provider_specific_fields": {"thinking_blocks": THINKING}}
    assert upstream_messages("deepseek", message) == [{"role": "assistant", "content": "A.", "reasoning_content": TEXT}]
    assert upstream_messages("openrouter", copy.deepcopy(message)) == [
        {"role": "assistant", "content": "A.", "thinking_blocks": THINKING}
    ]
