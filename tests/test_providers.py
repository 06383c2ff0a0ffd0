"""Provider rows (``PROVIDERS``): what each provider's upstream receives for each reasoning control, one test per
cell of the "control x provider" table of ``docs/providers.md``, exact request bodies and the notes of what was
dropped; and the host inference of the rows."""

from __future__ import annotations

import json
from typing import Any

import pytest

from numi_mw.core.controls import encode_controls, fold_controls
from numi_mw.core.providers import PROVIDERS, infer_provider, provider_rules
from numi_mw.core.request import prepare_request

CONTROLS: dict[str, dict[str, Any]] = {
    "effort": {"effort": "high"},
    "unfamiliar effort": {"effort": "ultra"},
    "none": {"effort": "none"},
    "enabled true": {"enabled": True},
    "enabled false": {"enabled": False},
    "exclude": {"exclude": True},
    "budget": {"max_tokens": 2048},
    "unknown attribute": {"summary": "auto"},
}
"""The table's columns: each control alone, as the ``reasoning`` object a client sends."""

ON = {"type": "enabled", "clear_thinking": False}
OFF = {"type": "disabled"}
TEMPLATE_ON = {"enable_thinking": True, "thinking": True}
TEMPLATE_OFF = {"enable_thinking": False, "thinking": False}
BUDGET = ["budget-dropped"]
ATTRIBUTE = ["reasoning-attributes-dropped=summary"]


def _as_object() -> dict[str, tuple[dict[str, Any], list[str]]]:
    return {control: ({"reasoning": reasoning}, []) for control, reasoning in CONTROLS.items()}


def _effort(exclude: dict[str, Any]) -> dict[str, tuple[dict[str, Any], list[str]]]:
    return {
        "effort": ({"reasoning_effort": "high"}, []),
        "unfamiliar effort": ({"reasoning_effort": "ultra"}, []),
        "none": ({"reasoning_effort": "none"}, []),
        "enabled true": ({"reasoning_effort": "medium"}, []),
        "enabled false": ({"reasoning_effort": "none"}, []),
        "exclude": (exclude, []),
        "budget": ({}, BUDGET),
        "unknown attribute": ({}, ATTRIBUTE),
    }


EXPECTED: dict[str, dict[str, tuple[dict[str, Any], list[str]]]] = {
    "openrouter": _as_object(),
    "ppq": _as_object(),
    "generic": _as_object(),
    "openai": _effort({}),
    "inception": _effort({}),
    "mistral": _effort({}),
    "xai": _effort({}),
    "fireworks": _effort({}),
    "groq": _effort({"include_reasoning": False}),
    "cerebras": _effort({"reasoning_format": "hidden"}),
    "deepseek": {
        "effort": ({"reasoning_effort": "high"}, []),
        "unfamiliar effort": ({"reasoning_effort": "ultra"}, []),
        "none": ({"thinking": OFF}, []),
        "enabled true": ({"thinking": {"type": "enabled"}}, []),
        "enabled false": ({"thinking": OFF}, []),
        "exclude": ({}, []),
        "budget": ({}, BUDGET),
        "unknown attribute": ({}, ATTRIBUTE),
    },
    "local": {
        "effort": ({"reasoning_effort": "high"}, []),
        "unfamiliar effort": ({"reasoning_effort": "ultra"}, []),
        "none": ({"reasoning_effort": "none", "chat_template_kwargs": TEMPLATE_OFF}, []),
        "enabled true": ({"chat_template_kwargs": TEMPLATE_ON}, []),
        "enabled false": ({"reasoning_effort": "none", "chat_template_kwargs": TEMPLATE_OFF}, []),
        "exclude": ({"include_reasoning": False}, []),
        "budget": ({"thinking_token_budget": 2048}, []),
        "unknown attribute": ({}, ATTRIBUTE),
    },
    "together": {
        "effort": ({"reasoning_effort": "high"}, []),
        "unfamiliar effort": ({"reasoning_effort": "ultra"}, []),
        "none": ({"reasoning": {"enabled": False}}, []),
        "enabled true": ({"reasoning": {"enabled": True}}, []),
        "enabled false": ({"reasoning": {"enabled": False}}, []),
        "exclude": ({}, []),
        "budget": ({}, BUDGET),
        "unknown attribute": ({"reasoning": {"summary": "auto"}}, []),
    },
    "gemini": {
        "effort": ({"reasoning_effort": "high"}, []),
        "unfamiliar effort": ({"reasoning_effort": "ultra"}, []),
        "none": ({"reasoning_effort": "none"}, []),
        "enabled true": ({"extra_body": {"google": {"thinking_config": {"thinking_budget": -1}}}}, []),
        "enabled false": ({"reasoning_effort": "none"}, []),
        "exclude": ({}, []),
        "budget": ({"extra_body": {"google": {"thinking_config": {"thinking_budget": 2048}}}}, []),
        "unknown attribute": ({}, ATTRIBUTE),
    },
    "zai": {
        "effort": ({"thinking": ON, "reasoning_effort": "high"}, []),
        "unfamiliar effort": ({"thinking": ON, "reasoning_effort": "ultra"}, []),
        "none": ({"thinking": OFF}, []),
        "enabled true": ({"thinking": ON}, []),
        "enabled false": ({"thinking": OFF}, []),
        "exclude": ({"thinking": ON}, []),
        "budget": ({"thinking": ON}, BUDGET),
        "unknown attribute": ({"thinking": ON}, ATTRIBUTE),
    },
    "anthropic": {
        "effort": ({"thinking": {"type": "enabled", "budget_tokens": 16384}}, []),
        "unfamiliar effort": ({"thinking": {"type": "enabled", "budget_tokens": 8192}}, ["effort-dropped"]),
        "none": ({"thinking": OFF}, []),
        "enabled true": ({"thinking": {"type": "enabled", "budget_tokens": 8192}}, []),
        "enabled false": ({"thinking": OFF}, []),
        # exclude alone asks for no reasoning: Anthropic's default (off) costs nothing to hide
        "exclude": ({}, []),
        "budget": ({"thinking": {"type": "enabled", "budget_tokens": 2048}}, []),
        "unknown attribute": ({}, ATTRIBUTE),
    },
}
"""Each provider's row of the table: per control, the fields the upstream receives beside ``model`` and
``messages`` (in order), and the notes of what was dropped."""

MESSAGES = [{"role": "user", "content": "Hi"}]
CELLS = [(provider, control) for provider in EXPECTED for control in CONTROLS]


def upstream(provider: str, reasoning: dict[str, Any]) -> dict[str, Any]:
    """The body the upstream receives for ``reasoning``, through the whole request pipeline."""
    raw = json.dumps({"model": "m", "reasoning": reasoning, "messages": MESSAGES}).encode()
    out: dict[str, Any] = json.loads(prepare_request(raw, provider_rules(provider)).body)
    return out


def notes_for(provider: str, body: dict[str, Any]) -> list[str]:
    """The notes ``encode_controls`` makes for ``body`` on ``provider``'s controls form."""
    rules = provider_rules(provider)
    controls, _ = fold_controls(body)
    notes: list[str] = []
    encode_controls(body, controls, rules.controls_form, include_reasoning=rules.send_include_reasoning, notes=notes)
    return notes


def test_the_table_has_a_row_for_every_provider() -> None:
    assert sorted(EXPECTED) == sorted(PROVIDERS)


@pytest.mark.parametrize(("provider", "control"), CELLS, ids=[f"{p}-{c}" for p, c in CELLS])
def test_cell(provider: str, control: str) -> None:
    fields, notes = EXPECTED[provider][control]
    reasoning = CONTROLS[control]
    body = upstream(provider, dict(reasoning))
    assert body == {"model": "m", **fields, "messages": MESSAGES}
    assert list(body) == ["model", *fields, "messages"]
    assert notes_for(provider, {"model": "m", "reasoning": dict(reasoning)}) == notes


# ---- combinations: what wins when two controls meet ----


@pytest.mark.parametrize(
    ("provider", "fields", "notes"),
    [
        ("openai", {"reasoning_effort": "low"}, BUDGET),
        ("local", {"reasoning_effort": "low", "thinking_token_budget": 2048}, []),
        ("gemini", {"extra_body": {"google": {"thinking_config": {"thinking_budget": 2048}}}}, ["effort-dropped"]),
        ("anthropic", {"thinking": {"type": "enabled", "budget_tokens": 2048}}, ["effort-dropped"]),
        ("openrouter", {"reasoning": {"effort": "low", "max_tokens": 2048}}, []),
    ],
)
def test_an_effort_beside_a_budget(provider: str, fields: dict[str, Any], notes: list[str]) -> None:
    reasoning = {"effort": "low", "max_tokens": 2048}
    assert upstream(provider, reasoning) == {"model": "m", **fields, "messages": MESSAGES}
    assert notes_for(provider, {"model": "m", "reasoning": dict(reasoning)}) == notes


@pytest.mark.parametrize(
    ("provider", "fields"),
    [
        ("openai", {"reasoning_effort": "none"}),
        ("deepseek", {"thinking": OFF}),
        ("local", {"reasoning_effort": "none", "chat_template_kwargs": TEMPLATE_OFF}),
        ("together", {"reasoning": {"enabled": False}}),
        ("gemini", {"reasoning_effort": "none"}),
        ("zai", {"thinking": OFF}),
        ("anthropic", {"thinking": OFF}),
    ],
)
def test_enabled_false_wins_over_an_effort_everywhere(provider: str, fields: dict[str, Any]) -> None:
    # spec 004 "reasoning": "false turns it off", whatever effort came with it
    assert upstream(provider, {"effort": "high", "enabled": False}) == {"model": "m", **fields, "messages": MESSAGES}


@pytest.mark.parametrize(
    ("provider", "fields"),
    [
        ("deepseek", {"reasoning_effort": "max", "thinking": {"type": "enabled"}}),
        ("local", {"reasoning_effort": "max", "chat_template_kwargs": TEMPLATE_ON}),
        ("together", {"reasoning_effort": "max", "reasoning": {"enabled": True}}),
        ("openai", {"reasoning_effort": "max"}),
    ],
)
def test_an_effort_beside_enabled_true_sends_the_level_and_the_switch(provider: str, fields: dict[str, Any]) -> None:
    assert upstream(provider, {"effort": "max", "enabled": True}) == {"model": "m", **fields, "messages": MESSAGES}


def test_several_unknown_attributes_are_named_in_order() -> None:
    body = {"model": "m", "reasoning": {"x-vendor": [1], "effort": "low", "summary": "auto"}}
    assert notes_for("openai", body) == ["reasoning-attributes-dropped=x-vendor+summary"]
    assert body == {"model": "m", "reasoning_effort": "low"}


def test_an_explicit_budget_with_no_room_is_still_sent_and_a_generated_one_is_not() -> None:
    # spec 004 "Output limits and billing": an explicit budget is preserved for upstream validation; a generated
    # one is capped below the output limit, and with no room left no thinking is sent
    assert notes_for("anthropic", {"model": "m", "reasoning": {"max_tokens": 4096}, "max_tokens": 100}) == []
    body = {"model": "m", "reasoning": {"effort": "high"}, "max_tokens": 500}
    assert notes_for("anthropic", body) == ["thinking-dropped"]
    assert body == {"model": "m", "max_tokens": 500}


def test_off_with_a_budget_notes_the_budget() -> None:
    for provider in ("anthropic", "gemini", "local", "zai", "openai"):
        assert notes_for(provider, {"model": "m", "reasoning": {"effort": "none", "max_tokens": 900}}) == BUDGET


# ---- the client's own fields are never replaced ----


def test_the_clients_own_chat_template_kwargs_win_and_ours_fill_in() -> None:
    raw = json.dumps(
        {"model": "m", "chat_template_kwargs": {"enable_thinking": True, "x": 1}, "reasoning": {"enabled": False}}
    ).encode()
    body = json.loads(prepare_request(raw, provider_rules("local")).body)
    assert body == {
        "model": "m",
        "chat_template_kwargs": {"enable_thinking": True, "thinking": False, "x": 1},
        "reasoning_effort": "none",
    }


def test_the_clients_own_extra_body_keeps_its_keys() -> None:
    own = {"google": {"thinking_config": {"include_thoughts": True}}}
    raw = json.dumps({"model": "m", "extra_body": own, "reasoning": {"max_tokens": 512}}).encode()
    body = json.loads(prepare_request(raw, provider_rules("gemini")).body)
    assert body == {
        "model": "m",
        "extra_body": {"google": {"thinking_config": {"thinking_budget": 512, "include_thoughts": True}}},
    }


@pytest.mark.parametrize(
    ("provider", "own"),
    [("cerebras", {"reasoning_format": "parsed"}), ("deepseek", {"thinking": {"type": "enabled"}})],
)
def test_the_clients_own_field_is_not_replaced(provider: str, own: dict[str, Any]) -> None:
    raw = json.dumps({"model": "m", **own, "reasoning": {"effort": "none", "exclude": True}}).encode()
    body = json.loads(prepare_request(raw, provider_rules(provider)).body)
    expected = {"model": "m", **own}
    if provider == "cerebras":
        expected["reasoning_effort"] = "none"
    assert body == expected


def test_exclude_is_enforced_on_the_answer_where_no_field_carries_it() -> None:
    prepared = prepare_request(b'{"model":"m","include_reasoning":false}', provider_rules("openai"))
    assert json.loads(prepared.body) == {"model": "m"}
    assert prepared.controls.exclude is True  # the response side removes reasoning from the answer


# ---- the rows: host inference ----


@pytest.mark.parametrize(
    ("url", "provider"),
    [
        ("https://api.groq.com/openai/v1", "groq"),
        ("https://api.cerebras.ai/v1", "cerebras"),
        ("https://api.together.xyz/v1", "together"),
        ("https://api.together.ai/v1", "together"),
        ("https://api.fireworks.ai/inference/v1", "fireworks"),
        ("https://api.mistral.ai/v1", "mistral"),
        ("https://api.x.ai/v1", "xai"),
        ("https://generativelanguage.googleapis.com/v1beta/openai", "gemini"),
        ("https://api.deepseek.com", "deepseek"),
        ("http://127.0.0.1:8000/v1", "local"),
        ("https://llm.example.com/v1", "generic"),
    ],
)
def test_provider_inferred_from_host(url: str, provider: str) -> None:
    assert infer_provider(url) == provider


def test_hosts_name_one_provider_each() -> None:
    hosts = [host for rules in PROVIDERS.values() for host in rules.hosts]
    assert len(hosts) == len(set(hosts))


@pytest.mark.parametrize(
    ("provider", "field"),
    [("groq", "reasoning"), ("cerebras", "reasoning"), ("together", "reasoning"), ("xai", "reasoning_content")],
)
def test_a_replaying_host_gets_the_history_field_it_reads(provider: str, field: str) -> None:
    # Groq and Cerebras answer 400 to reasoning_content on an assistant message and read reasoning back
    raw = json.dumps(
        {"model": "m", "messages": [{"role": "assistant", "content": "A.", "reasoning_content": "R."}]}
    ).encode()
    body = json.loads(prepare_request(raw, provider_rules(provider)).body)
    assert body["messages"] == [{"role": "assistant", "content": "A.", field: "R."}]


@pytest.mark.parametrize("provider", ["gemini", "mistral"])
def test_a_host_that_refuses_every_reasoning_field_gets_none(provider: str) -> None:
    details = [{"type": "reasoning.text", "text": "R.", "signature": "S"}]
    raw = json.dumps(
        {
            "model": "m",
            "messages": [
                {"role": "assistant", "content": "A.", "reasoning": "R.", "reasoning_details": details},
                {"role": "assistant", "content": None, "reasoning_content": "R.", "tool_calls": []},
            ],
        }
    ).encode()
    body = json.loads(prepare_request(raw, provider_rules(provider)).body)
    assert body["messages"] == [
        {"role": "assistant", "content": "A."},
        {"role": "assistant", "content": None, "tool_calls": []},
    ]
