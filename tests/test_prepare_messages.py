"""The message preparation filter, spec 000 "The Message Preparation Filter": one test per table row."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from numi_mw.core.catalog import Provider
from numi_mw.core.errors import ApiError
from numi_mw.core.history import prepare_messages
from numi_mw.core.providers import provider_rules
from numi_mw.core.routing import Route


def route(provider: str, *, reasoning: bool = True, preserve: bool = False) -> Route:
    """A route to ``provider``; ``anthropic_compat`` (spec 000's name) is a provider whose wire API is
    Anthropic Messages but whose rules are not ``anthropic``."""
    if provider == "anthropic_compat":
        upstream = Provider(name="compat", base_url="http://127.0.0.1:1", wire_api="anthropic-messages")
        return Route(provider_rules("generic"), "anthropic-messages", upstream, reasoning, preserve)
    return Route(provider_rules(provider), reasoning=reasoning, preserve=preserve)


def filtered(messages: object, r: Route) -> list[Any]:
    return prepare_messages(messages, r.replay, reasoning=r.reasoning, preserve=r.preserve)


DETAILS = [{"type": "reasoning.text", "text": "Plan.", "signature": "SIG", "format": "anthropic-claude-v1"}]
TOOL_CALLS = [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
PLAIN = {"role": "assistant", "content": "A.", "reasoning_content": "Plan.", "reasoning_details": DETAILS}
TOOL = {
    "role": "assistant",
    "content": None,
    "reasoning_content": "Plan.",
    "reasoning_details": DETAILS,
    "tool_calls": TOOL_CALLS,
}
USER = {"role": "user", "content": "Q", "_numi_id": 7}


def run(r: Route) -> list[dict[str, Any]]:
    messages = [copy.deepcopy(USER), copy.deepcopy(PLAIN), copy.deepcopy(TOOL)]
    before = copy.deepcopy(messages)
    prepared = filtered(messages, r)
    assert messages == before  # the caller's data is never mutated
    assert prepared[0] == {"role": "user", "content": "Q"}  # internal metadata removed
    return prepared[1:]


def strip(message: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in message.items() if k not in keys}


@pytest.mark.parametrize("provider", ["openrouter", "openai", "anthropic", "deepseek"])
def test_model_without_reasoning_support_removes_both(provider: str) -> None:
    plain, tool = run(route(provider, reasoning=False, preserve=True))
    assert plain == strip(PLAIN, "reasoning_content", "reasoning_details")
    assert tool == strip(TOOL, "reasoning_content", "reasoning_details")


@pytest.mark.parametrize("provider", ["openai", "inception"])
@pytest.mark.parametrize("preserve", [True, False])
def test_direct_openai_or_inception_removes_both(provider: str, preserve: bool) -> None:
    plain, tool = run(route(provider, preserve=preserve))
    assert plain == strip(PLAIN, "reasoning_content", "reasoning_details")
    assert tool == strip(TOOL, "reasoning_content", "reasoning_details")


@pytest.mark.parametrize("preserve", [True, False])
def test_anthropic_keeps_text_for_conversion_and_removes_details(preserve: bool) -> None:
    # the anthropic provider on its OpenAI-compatible chat endpoint: spec 000's row as written
    plain, tool = run(route("anthropic", preserve=preserve))
    assert plain == strip(PLAIN, "reasoning_details")
    assert tool == strip(TOOL, "reasoning_details")


def test_an_anthropic_messages_route_keeps_the_signed_details_for_its_thinking_blocks() -> None:
    # A departure from spec 000 on purpose (docs/providers.md): Anthropic refuses a thinking block without its
    # signature, so the details that carry the signatures are kept; the adapter decides what becomes a block.
    plain, tool = run(route("anthropic_compat", preserve=True))
    assert (plain, tool) == (PLAIN, TOOL)
    plain, tool = run(route("anthropic_compat", preserve=False))
    assert plain == strip(PLAIN, "reasoning_content", "reasoning_details")
    assert tool == strip(TOOL, "reasoning_content")


# generic: an upstream numi_mw knows nothing about is taken for an API of spec 004's kind, which asks for
# "all reasoning details unchanged": it takes OpenRouter's row (ppq too).
@pytest.mark.parametrize("provider", ["openrouter", "ppq", "generic"])
def test_openrouter_preserving_keeps_both(provider: str) -> None:
    plain, tool = run(route(provider, preserve=True))
    assert (plain, tool) == (PLAIN, TOOL)


@pytest.mark.parametrize("provider", ["openrouter", "ppq", "generic"])
def test_openrouter_not_preserving_keeps_details_on_tool_call_messages_only(provider: str) -> None:
    plain, tool = run(route(provider, preserve=False))
    assert plain == strip(PLAIN, "reasoning_content", "reasoning_details")
    assert tool == strip(TOOL, "reasoning_content")


@pytest.mark.parametrize("provider", ["deepseek", "zai", "local"])
def test_other_routes_keep_text_only_when_preserving_and_remove_details(provider: str) -> None:
    plain, tool = run(route(provider, preserve=True))
    assert (plain, tool) == (strip(PLAIN, "reasoning_details"), strip(TOOL, "reasoning_details"))
    plain, tool = run(route(provider, preserve=False))
    assert plain == strip(PLAIN, "reasoning_content", "reasoning_details")
    assert tool == strip(TOOL, "reasoning_content", "reasoning_details")


def test_plain_text_in_either_spelling_is_filtered() -> None:
    message = {"role": "assistant", "content": "A.", "reasoning": "Plan."}
    assert filtered([message], route("openai")) == [{"role": "assistant", "content": "A."}]


def test_unchanged_messages_are_the_same_objects() -> None:
    message = {"role": "assistant", "content": "A."}
    assert filtered([message], route("openai"))[0] is message


def test_wrong_shape_is_a_400() -> None:
    with pytest.raises(ApiError) as info:
        filtered([{"role": "user"}, 3], route("openai"))
    assert info.value.param == "messages[1]"


@pytest.mark.parametrize("provider", ["deepseek", "zai", "local", "anthropic"])
def test_details_alone_become_the_text_where_the_route_keeps_only_text(provider: str) -> None:
    details = [
        {"type": "reasoning.summary", "summary": "Weather asked. "},
        {"type": "reasoning.encrypted", "data": "ENC"},
        {"type": "reasoning.text", "text": "I will call the tool.", "format": "unknown"},
    ]
    message = {"role": "assistant", "content": None, "reasoning_details": details, "tool_calls": TOOL_CALLS}
    sent = copy.deepcopy(message)
    (out,) = filtered([message], route(provider, preserve=True))
    assert out == {
        "role": "assistant",
        "content": None,
        "tool_calls": TOOL_CALLS,
        "reasoning_content": "Weather asked. I will call the tool.",
    }
    assert message == sent
    # the anthropic row keeps text whatever the preservation; the others drop it with preservation off
    unpreserved = out if provider == "anthropic" else strip(message, "reasoning_details")
    assert filtered([message], route(provider, preserve=False)) == [unpreserved]
    # details holding no text add none
    only_encrypted = {"role": "assistant", "content": "A.", "reasoning_details": [details[1]]}
    assert filtered([only_encrypted], route(provider, preserve=True)) == [{"role": "assistant", "content": "A."}]
