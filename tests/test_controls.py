"""Reasoning controls, spec 004 "Request controls" and "Other fields": every rule, exact bodies."""

from __future__ import annotations

import json
from typing import Any

import pytest

from numi_mw.core.controls import NO_CONTROLS, ReasoningControls
from numi_mw.core.errors import ApiError
from numi_mw.core.providers import provider_rules
from numi_mw.core.request import prepare_request

MSGS = [{"role": "user", "content": 'How many times does the letter r appear in "strawberry"?'}]


def send(body: dict[str, Any], provider: str = "openrouter") -> tuple[dict[str, Any], ReasoningControls]:
    prepared = prepare_request(json.dumps(body).encode(), provider_rules(provider))
    return json.loads(prepared.body), prepared.controls


def test_spec_example_object_is_forwarded_as_original_bytes() -> None:
    raw = json.dumps(
        {"model": "openai/gpt-6-luna", "messages": MSGS, "reasoning": {"effort": "high"}, "max_tokens": 4096}
    ).encode()
    prepared = prepare_request(raw, provider_rules("openrouter"))
    assert prepared.body is raw
    assert prepared.changed is False
    assert prepared.controls == ReasoningControls(present=True, effort="high")


def test_reasoning_effort_shorthand_folds_into_reasoning_effort() -> None:
    body, controls = send({"model": "m", "reasoning_effort": "low", "messages": MSGS})
    assert body == {"model": "m", "reasoning": {"effort": "low"}, "messages": MSGS}
    assert list(body) == ["model", "reasoning", "messages"]
    assert controls == ReasoningControls(present=True, effort="low")


def test_shorthand_wins_over_object_effort_and_other_attributes_survive() -> None:
    body, _ = send(
        {"model": "m", "reasoning": {"effort": "low", "max_tokens": 2000, "exclude": False}, "reasoning_effort": "high"}
    )
    assert body == {"model": "m", "reasoning": {"effort": "high", "max_tokens": 2000, "exclude": False}}
    assert list(body["reasoning"]) == ["effort", "max_tokens", "exclude"]


def test_null_reasoning_effort_is_omitted() -> None:
    body, controls = send({"model": "m", "messages": MSGS, "reasoning_effort": None})
    assert body == {"model": "m", "messages": MSGS}
    assert controls == NO_CONTROLS


def test_null_reasoning_effort_leaves_object_effort() -> None:
    body, controls = send({"model": "m", "reasoning_effort": None, "reasoning": {"effort": "low"}})
    assert body == {"model": "m", "reasoning": {"effort": "low"}}
    assert controls.effort == "low"


@pytest.mark.parametrize(("include", "exclude"), [(True, False), (False, True)])
def test_include_reasoning_is_the_inverse_of_exclude(include: bool, exclude: bool) -> None:
    body, controls = send({"model": "m", "include_reasoning": include})
    assert body == {"model": "m", "reasoning": {"exclude": exclude}}
    assert controls.exclude is exclude


def test_include_reasoning_wins_over_exclude() -> None:
    body, controls = send({"model": "m", "reasoning": {"exclude": False, "effort": "high"}, "include_reasoning": False})
    assert body == {"model": "m", "reasoning": {"exclude": True, "effort": "high"}}
    assert controls == ReasoningControls(present=True, effort="high", exclude=True)


@pytest.mark.parametrize("reasoning", [{"effort": "none"}, {"enabled": False}])
def test_effort_none_and_enabled_false_both_mean_off(reasoning: dict[str, Any]) -> None:
    body, controls = send({"model": "m", "reasoning": reasoning})
    assert body == {"model": "m", "reasoning": reasoning}
    assert controls.off is True


def test_enabled_true_is_not_off() -> None:
    _, controls = send({"model": "m", "reasoning": {"enabled": True}})
    assert controls.off is False
    assert controls.enabled is True


def test_unfamiliar_effort_and_unknown_attributes_are_forwarded() -> None:
    body, controls = send(
        {"model": "m", "reasoning_effort": "ultra", "reasoning": {"summary": "auto", "x-vendor": [1, 2.5]}}
    )
    assert body == {"model": "m", "reasoning": {"summary": "auto", "x-vendor": [1, 2.5], "effort": "ultra"}}
    assert controls.effort == "ultra"


def test_reasoning_null_counts_as_omitted() -> None:
    body, controls = send({"model": "m", "reasoning": None, "stream": True})
    assert body == {"model": "m", "stream": True}
    assert controls == NO_CONTROLS


def test_empty_reasoning_object_is_a_control() -> None:
    raw = b'{"model":"m","reasoning":{}}'
    prepared = prepare_request(raw, provider_rules("openrouter"))
    assert prepared.body is raw
    assert prepared.controls == ReasoningControls(present=True)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"reasoning": "high"}, "reasoning"),
        ({"reasoning": ["high"]}, "reasoning"),
        ({"reasoning_effort": 3}, "reasoning_effort"),
        ({"include_reasoning": "false"}, "include_reasoning"),
        ({"reasoning": {"exclude": "yes"}}, "reasoning.exclude"),
        ({"reasoning": {"enabled": 1}}, "reasoning.enabled"),
    ],
)
def test_controls_of_the_wrong_type_get_400_naming_the_field(body: dict[str, Any], param: str) -> None:
    with pytest.raises(ApiError) as info:
        send({"model": "m", **body})
    assert info.value.status == 400
    assert info.value.body()["error"]["code"] == "invalid_request"
    assert info.value.body()["error"]["type"] == "invalid_request_error"
    assert info.value.body()["error"]["param"] == param


# ---- the form each provider receives: one canonical form, never a shorthand and the object ----


@pytest.mark.parametrize("provider", ["openai", "inception", "deepseek"])
def test_effort_providers_get_reasoning_effort(provider: str) -> None:
    body, _ = send({"model": "m", "reasoning": {"effort": "low"}, "include_reasoning": False}, provider)
    assert body == {"model": "m", "reasoning_effort": "low"}


def test_effort_provider_enabled_false_sends_none() -> None:
    body, _ = send({"model": "m", "reasoning": {"enabled": False}}, "openai")
    assert body == {"model": "m", "reasoning_effort": "none"}


@pytest.mark.parametrize(
    ("provider", "off"), [("openai", {"reasoning_effort": "none"}), ("deepseek", {"thinking": {"type": "disabled"}})]
)
def test_effort_provider_enabled_false_wins_over_an_effort(provider: str, off: dict[str, Any]) -> None:
    # DeepSeek's chat completions switch is thinking.type; reasoning_effort carries only the level
    body, _ = send({"model": "m", "reasoning": {"effort": "high", "enabled": False}}, provider)
    assert body == {"model": "m", **off}


def test_effort_provider_enabled_true_sends_the_default_level() -> None:
    # "true asks for reasoning without choosing a level": gpt-5.1 and later do not reason unless asked
    body, _ = send({"model": "m", "reasoning": {"enabled": True}, "messages": MSGS}, "openai")
    assert body == {"model": "m", "reasoning_effort": "medium", "messages": MSGS}


def test_effort_provider_translates_the_effort_beside_a_budget_it_cannot_take() -> None:
    # OpenAI's chat completions have no reasoning budget and refuse a reasoning object: the effort goes as
    # reasoning_effort, the budget is dropped and noted (tests/test_providers.py)
    body, _ = send({"model": "m", "reasoning_effort": "high", "reasoning": {"max_tokens": 900}}, "openai")
    assert body == {"model": "m", "reasoning_effort": "high"}


def test_local_sends_include_reasoning_false_when_excluded() -> None:
    body, _ = send({"model": "m", "reasoning_effort": "medium", "include_reasoning": False}, "local")
    assert body == {"model": "m", "reasoning_effort": "medium", "include_reasoning": False}


@pytest.mark.parametrize(
    ("reasoning", "thinking"),
    [
        ({"effort": "high"}, {"thinking": {"type": "enabled", "clear_thinking": False}, "reasoning_effort": "high"}),
        ({"enabled": True}, {"thinking": {"type": "enabled", "clear_thinking": False}}),
        ({"effort": "none"}, {"thinking": {"type": "disabled"}}),
        ({"enabled": False}, {"thinking": {"type": "disabled"}}),
    ],
)
def test_zai_gets_thinking(reasoning: dict[str, Any], thinking: dict[str, Any]) -> None:
    # the effort also goes as reasoning_effort (GLM-5.2 and later read it)
    body, _ = send({"model": "glm-4.7", "reasoning": reasoning, "messages": MSGS}, "zai")
    assert body == {"model": "glm-4.7", **thinking, "messages": MSGS}


def test_zai_keeps_the_clients_own_thinking() -> None:
    body, _ = send({"model": "glm-4.7", "thinking": {"type": "disabled"}, "reasoning_effort": "high"}, "zai")
    assert body == {"model": "glm-4.7", "thinking": {"type": "disabled"}, "reasoning_effort": "high"}


@pytest.mark.parametrize(
    ("request_fields", "thinking"),
    [
        ({"reasoning": {"effort": "low"}, "max_tokens": 8000}, {"type": "enabled", "budget_tokens": 2048}),
        ({"reasoning": {"effort": "high"}, "max_tokens": 8000}, {"type": "enabled", "budget_tokens": 7999}),
        ({"reasoning": {"effort": "high"}, "max_completion_tokens": 5000}, {"type": "enabled", "budget_tokens": 4999}),
        ({"reasoning": {"enabled": True}}, {"type": "enabled", "budget_tokens": 8192}),
        ({"reasoning": {"max_tokens": 1024}, "max_tokens": 100}, {"type": "enabled", "budget_tokens": 1024}),
        ({"reasoning": {"effort": "none"}}, {"type": "disabled"}),
        # the output limit is whichever of the two is set; a null one is absent, and with both the smaller wins
        (
            {"reasoning": {"effort": "high"}, "max_tokens": None, "max_completion_tokens": 3000},
            {"type": "enabled", "budget_tokens": 2999},
        ),
        (
            {"reasoning": {"effort": "high"}, "max_tokens": 50000, "max_completion_tokens": 3000},
            {"type": "enabled", "budget_tokens": 2999},
        ),
        ({"reasoning": {"effort": "high"}, "max_tokens": 1500.0}, {"type": "enabled", "budget_tokens": 1499}),
    ],
)
def test_anthropic_gets_a_thinking_budget(request_fields: dict[str, Any], thinking: dict[str, Any]) -> None:
    body, _ = send({"model": "claude", **request_fields}, "anthropic")
    assert body.pop("thinking") == thinking
    assert "reasoning" not in body
    assert "reasoning_effort" not in body


def test_anthropic_generated_budget_without_room_sends_no_thinking() -> None:
    body, _ = send({"model": "claude", "reasoning_effort": "high", "max_tokens": 500}, "anthropic")
    assert body == {"model": "claude", "max_tokens": 500}


def test_anthropic_unknown_effort_gets_the_default_budget() -> None:
    # Anthropic has no field for an effort (its OpenAI endpoint ignores reasoning_effort): an effort with no
    # budget is dropped, noted as effort-dropped (tests/test_providers.py), and thinking takes medium's budget
    body, _ = send({"model": "claude", "reasoning_effort": "ultra"}, "anthropic")
    assert body == {"model": "claude", "thinking": {"type": "enabled", "budget_tokens": 8192}}


def test_zai_gets_thinking_with_no_controls_at_all() -> None:
    # spec 000 "Provider-Specific Handling": the Z.AI provider adds thinking.type enabled and clear_thinking false
    body, controls = send({"model": "glm-4.7", "messages": MSGS}, "zai")
    assert body == {"model": "glm-4.7", "messages": MSGS, "thinking": {"type": "enabled", "clear_thinking": False}}
    assert controls.present is False


def test_zai_replaces_a_null_thinking() -> None:
    body, _ = send({"model": "glm-4.7", "thinking": None, "messages": MSGS}, "zai")
    assert body == {"model": "glm-4.7", "thinking": {"type": "enabled", "clear_thinking": False}, "messages": MSGS}


def test_anthropic_replaces_a_null_thinking_where_reasoning_stood() -> None:
    body, _ = send({"model": "claude", "reasoning_effort": "low", "thinking": None, "max_tokens": 9000}, "anthropic")
    assert body == {"model": "claude", "thinking": {"type": "enabled", "budget_tokens": 2048}, "max_tokens": 9000}
