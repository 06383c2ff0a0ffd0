"""The reasoning / reasoning_content table (spec 004 "Preserve reasoning across turns"), per provider."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from numi_mw.core.errors import ApiError
from numi_mw.core.providers import PROVIDERS, provider_rules
from numi_mw.core.request import prepare_request

DIRECT_PROVIDERS = sorted(name for name, rules in PROVIDERS.items() if rules.replay == "none")
"""Direct openai and inception, and the hosts that refuse every reasoning field in history: spec 000's filter
removes reasoning from their history, so the table below never sees it
(``test_direct_providers_receive_no_reasoning_in_history``)."""
REASONING_PROVIDERS = sorted(
    name for name, rules in PROVIDERS.items() if rules.reasoning_field == "reasoning" and name not in DIRECT_PROVIDERS
)
"""The providers that read ``reasoning`` back: openrouter and ppq (spec 004's table), and the hosts that refuse
``reasoning_content`` on an assistant message (groq, cerebras) or read ``reasoning`` (together)."""
CONTENT_PROVIDERS = sorted(set(PROVIDERS) - set(REASONING_PROVIDERS) - set(DIRECT_PROVIDERS))
REPLAYING_PROVIDERS = sorted(set(PROVIDERS) - set(DIRECT_PROVIDERS))


def upstream_assistant(provider: str, **fields: Any) -> dict[str, Any]:
    """The assistant message the upstream receives for an assistant message with ``fields``."""
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello.", **fields}],
    }
    out = json.loads(prepare_request(json.dumps(body).encode(), provider_rules(provider)).body)
    assert out["messages"][0] == {"role": "user", "content": "Hi"}
    message: dict[str, Any] = out["messages"][1]
    return message


# Row 1: nonempty reasoning_content, with reasoning absent or empty.
@pytest.mark.parametrize("provider", REASONING_PROVIDERS)
@pytest.mark.parametrize("extra", [{}, {"reasoning": ""}])
def test_row1_openrouter_and_ppq_send_the_text_as_reasoning(provider: str, extra: dict[str, str]) -> None:
    message = upstream_assistant(provider, reasoning_content="Spell it out.", **extra)
    assert message == {"role": "assistant", "content": "Hello.", "reasoning": "Spell it out."}


@pytest.mark.parametrize("provider", CONTENT_PROVIDERS)
@pytest.mark.parametrize("extra", [{}, {"reasoning": ""}])
def test_row1_other_sources_retain_reasoning_content(provider: str, extra: dict[str, str]) -> None:
    message = upstream_assistant(provider, reasoning_content="Spell it out.", **extra)
    assert message == {"role": "assistant", "content": "Hello.", "reasoning_content": "Spell it out."}


# Row 2: both fields contain the same string: one representation.
@pytest.mark.parametrize("provider", REASONING_PROVIDERS)
def test_row2_same_string_sent_once_as_reasoning(provider: str) -> None:
    message = upstream_assistant(provider, reasoning="Same.", reasoning_content="Same.")
    assert message == {"role": "assistant", "content": "Hello.", "reasoning": "Same."}


@pytest.mark.parametrize("provider", CONTENT_PROVIDERS)
def test_row2_same_string_sent_once_as_reasoning_content(provider: str) -> None:
    message = upstream_assistant(provider, reasoning="Same.", reasoning_content="Same.")
    assert message == {"role": "assistant", "content": "Hello.", "reasoning_content": "Same."}


# A null field counts as absent.
@pytest.mark.parametrize("provider", REASONING_PROVIDERS)
def test_row1_with_a_null_reasoning_sends_the_text_as_reasoning(provider: str) -> None:
    message = upstream_assistant(provider, reasoning=None, reasoning_content="Spell it out.")
    assert message == {"role": "assistant", "content": "Hello.", "reasoning": "Spell it out."}


@pytest.mark.parametrize("provider", CONTENT_PROVIDERS)
def test_row1_with_a_null_reasoning_keeps_reasoning_content_alone(provider: str) -> None:
    message = upstream_assistant(provider, reasoning=None, reasoning_content="Spell it out.")
    assert message == {"role": "assistant", "content": "Hello.", "reasoning_content": "Spell it out."}


@pytest.mark.parametrize("provider", CONTENT_PROVIDERS)
def test_reasoning_with_a_null_reasoning_content_replays_as_reasoning_content(provider: str) -> None:
    message = upstream_assistant(provider, reasoning_content=None, reasoning="R.")
    assert message == {"role": "assistant", "content": "Hello.", "reasoning_content": "R."}


@pytest.mark.parametrize("provider", REPLAYING_PROVIDERS)
@pytest.mark.parametrize(
    "nulls", [{"reasoning": None}, {"reasoning_content": None}, {"reasoning": None, "reasoning_content": None}]
)
def test_reasoning_fields_that_are_only_nulls_go(provider: str, nulls: dict[str, None]) -> None:
    # openai-node's stream() helper keeps the last delta's value of a field, null included
    message = upstream_assistant(provider, **nulls)
    assert message == {"role": "assistant", "content": "Hello."}


# Rows 2 and 3 together: both empty strings are one representation, the explicit empty reasoning_content.
@pytest.mark.parametrize("provider", REPLAYING_PROVIDERS)
def test_both_empty_become_the_explicit_empty_reasoning_content(provider: str) -> None:
    message = upstream_assistant(provider, reasoning="", reasoning_content="")
    assert message == {"role": "assistant", "content": "Hello.", "reasoning_content": ""}


# Row 3: reasoning_content "" is retained.
@pytest.mark.parametrize("provider", REPLAYING_PROVIDERS)
def test_row3_explicit_empty_reasoning_content_is_retained(provider: str) -> None:
    message = upstream_assistant(provider, reasoning_content="")
    assert message == {"role": "assistant", "content": "Hello.", "reasoning_content": ""}


# Row 4: reasoning "" with no reasoning_content is omitted.
@pytest.mark.parametrize("provider", REPLAYING_PROVIDERS)
def test_row4_empty_reasoning_alone_is_omitted(provider: str) -> None:
    message = upstream_assistant(provider, reasoning="")
    assert message == {"role": "assistant", "content": "Hello."}


# Row 5: other distinct values both stay.
@pytest.mark.parametrize("provider", REPLAYING_PROVIDERS)
@pytest.mark.parametrize(("r", "rc"), [("Visible.", "Raw."), ("Visible.", "")])
def test_row5_distinct_values_stay_independent(provider: str, r: str, rc: str) -> None:
    message = upstream_assistant(provider, reasoning=r, reasoning_content=rc)
    assert message == {"role": "assistant", "content": "Hello.", "reasoning": r, "reasoning_content": rc}


# The open row: reasoning alone goes to reasoning_content providers as reasoning_content.
@pytest.mark.parametrize("provider", CONTENT_PROVIDERS)
def test_reasoning_alone_replays_as_reasoning_content(provider: str) -> None:
    message = upstream_assistant(provider, reasoning="From a numi_mw reply.")
    assert message == {"role": "assistant", "content": "Hello.", "reasoning_content": "From a numi_mw reply."}


@pytest.mark.parametrize("provider", REASONING_PROVIDERS)
def test_reasoning_alone_stays_for_openrouter(provider: str) -> None:
    raw = json.dumps(
        {"model": "m", "messages": [{"role": "assistant", "content": "Hello.", "reasoning": "Kept."}]}
    ).encode()
    assert prepare_request(raw, provider_rules(provider)).body is raw


def test_key_position_is_kept_when_renaming() -> None:
    message = upstream_assistant("openrouter", reasoning_content="R.", tool_calls=[])
    assert list(message) == ["role", "content", "reasoning", "tool_calls"]


@pytest.mark.parametrize("provider", ["openrouter", "generic"])
def test_non_string_values_pass_unchanged(provider: str) -> None:
    message = upstream_assistant(provider, reasoning=None, reasoning_content={"x": 1})
    assert message == {"role": "assistant", "content": "Hello.", "reasoning": None, "reasoning_content": {"x": 1}}


def test_only_assistant_messages_are_touched() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "Hi", "reasoning_content": "user text"}]}
    raw = json.dumps(body).encode()
    assert prepare_request(raw, provider_rules("openrouter")).body is raw


DETAILS = [
    {"type": "reasoning.text", "text": "Plan.", "signature": "EqQBCkgIBxABGAIqQ...", "format": "anthropic-claude-v1"},
    {"type": "reasoning.text", "text": "", "signature": ""},
    {"type": "reasoning.summary", "summary": "S", "format": "openai-responses-v1", "index": 1},
    {"type": "reasoning.encrypted", "data": "gAAAAB" + "x" * 64, "id": "rs_1", "format": "openai-responses-v1"},
    {"type": "reasoning.vendor-new", "blob": {"nested": [1, "2"]}, "unknown_field": True},
    {},
]


def test_the_providers_that_take_no_reasoning_history() -> None:
    # spec 000's direct openai and inception; gemini and mistral refuse both reasoning_content and reasoning
    assert DIRECT_PROVIDERS == ["gemini", "inception", "mistral", "openai"]


def test_the_providers_that_read_reasoning_back() -> None:
    assert REASONING_PROVIDERS == ["cerebras", "groq", "openrouter", "ppq", "together"]


@pytest.mark.parametrize("provider", DIRECT_PROVIDERS)
@pytest.mark.parametrize(
    "fields",
    [
        {"reasoning_content": "Spell it out."},
        {"reasoning": "Spell it out."},
        {"reasoning": "Same.", "reasoning_content": "Same.", "reasoning_details": DETAILS},
    ],
)
def test_direct_providers_receive_no_reasoning_in_history(provider: str, fields: dict[str, Any]) -> None:
    # spec 000 "The Message Preparation Filter": "Direct openai or inception provider: Removed, Removed"
    assert upstream_assistant(provider, **copy.deepcopy(fields)) == {"role": "assistant", "content": "Hello."}


KEEPS_DETAILS = sorted(name for name, rules in PROVIDERS.items() if rules.replay == "details")


def test_the_providers_that_keep_details_are_openrouter_ppq_and_generic() -> None:
    assert KEEPS_DETAILS == ["generic", "openrouter", "ppq"]


@pytest.mark.parametrize("provider", sorted(set(PROVIDERS) - set(KEEPS_DETAILS)))
def test_reasoning_details_go_where_the_provider_does_not_read_them(provider: str) -> None:
    # spec 000's filter: only OpenRouter's row keeps reasoning_details (generic takes that row)
    message = upstream_assistant(provider, reasoning_content="Plan.", reasoning_details=copy.deepcopy(DETAILS))
    assert "reasoning_details" not in message


@pytest.mark.parametrize("provider", KEEPS_DETAILS)
def test_reasoning_details_forwarded_unchanged(provider: str) -> None:
    details = copy.deepcopy(DETAILS)
    message = upstream_assistant(provider, reasoning_content="Plan.", reasoning_details=details)
    assert message["reasoning_details"] == DETAILS
    assert [list(d) for d in message["reasoning_details"]] == [list(d) for d in DETAILS]


@pytest.mark.parametrize(
    ("messages", "param"),
    [("hi", "messages"), ({"role": "user"}, "messages"), ([{"role": "user"}, "text"], "messages[1]")],
)
def test_messages_of_the_wrong_shape_get_400(messages: object, param: str) -> None:
    raw = json.dumps({"model": "m", "reasoning_effort": "high", "messages": messages}).encode()
    with pytest.raises(ApiError) as info:
        prepare_request(raw, provider_rules("generic"))
    assert info.value.body() == {
        "error": {
            "message": info.value.message,
            "type": "invalid_request_error",
            "code": "invalid_request",
            "param": param,
        }
    }


@pytest.mark.parametrize("provider", REASONING_PROVIDERS)
def test_a_null_reasoning_content_beside_reasoning_goes(provider: str) -> None:
    message = upstream_assistant(provider, reasoning="R.", reasoning_content=None)
    assert message == {"role": "assistant", "content": "Hello.", "reasoning": "R."}
