"""Handed cases from ``../shared/cases/public-bugs.json`` with direction ``request`` or ``history``.

Each case names its route in words; the provider that route stands for is given beside it. Cases that need
the Anthropic Messages adapter (PB-07) or the model catalog (PB-20) belong to later issues and are not here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from numi_mw.core.providers import provider_rules
from numi_mw.core.request import prepare_request
from tests.conftest import load_case


def upstream(case: dict[str, Any], provider: str, request: dict[str, Any] | None = None) -> dict[str, Any]:
    body = request if request is not None else case["input"]["request"]
    prepared = prepare_request(json.dumps(body).encode(), provider_rules(provider))
    result: dict[str, Any] = json.loads(prepared.body)
    return result


def test_pb09_encrypted_detail_kept_on_tool_turn(shared_dir: Path) -> None:
    case = load_case(shared_dir, "PB-09")
    assert case["input"]["route"].startswith("OpenAI-compatible upstream (OpenRouter-style)")
    out = upstream(case, "openrouter")
    assert out["messages"][1] == case["expected"]["upstream_request.messages[1]"]
    assert [list(d) for d in out["messages"][1]["reasoning_details"]] == [
        list(d) for d in case["input"]["request"]["messages"][1]["reasoning_details"]
    ]


def test_pb10_reasoning_content_kept_on_tool_turn(shared_dir: Path) -> None:
    case = load_case(shared_dir, "PB-10")
    assert case["input"]["route"].startswith("generic OpenAI-compatible source")
    out = upstream(case, "generic")
    assert out["messages"][1] == case["expected"]["upstream_request.messages[1]"]


def test_pb10_variant_openrouter_sends_reasoning(shared_dir: Path) -> None:
    case = load_case(shared_dir, "PB-10")
    out = upstream(case, "openrouter")
    expected = dict(case["expected"]["upstream_request.messages[1]"])
    expected["reasoning"] = expected.pop("reasoning_content")
    assert out["messages"][1] == expected


def test_pb11_empty_reasoning_fields(shared_dir: Path) -> None:
    case = load_case(shared_dir, "PB-11")
    out = upstream(case, "generic")
    assert out["messages"][1] == case["expected"]["upstream_request.messages[1]"]
    assert out["messages"][3] == case["expected"]["upstream_request.messages[3]"]


@pytest.mark.parametrize("provider", ["generic", "openrouter", "local", "openai"])
def test_pb15_null_effort_is_omitted(shared_dir: Path, provider: str) -> None:
    case = load_case(shared_dir, "PB-15")
    out = upstream(case, provider)
    assert out == case["expected"]["upstream_request"]
    for key in case["expected"]["absent_keys_in_upstream_request"]:
        assert key not in out


def test_pb15_variant_null_alias_leaves_object_effort(shared_dir: Path) -> None:
    case = load_case(shared_dir, "PB-15")
    request = {**case["input"]["request"], "reasoning": {"effort": "low"}}
    assert upstream(case, "generic", request)["reasoning"] == {"effort": "low"}


def test_pb16_excluded_request_still_asks_for_the_effort(shared_dir: Path) -> None:
    case = load_case(shared_dir, "PB-16")
    request = case["input"]["request"]
    prepared = prepare_request(json.dumps(request).encode(), provider_rules("openrouter"))
    assert json.loads(prepared.body)["reasoning"] == {"effort": "high", "exclude": True}
    assert prepared.controls.exclude is True
    assert prepared.controls.effort == "high"


def test_pb16_variant_alias_wins_over_exclude_false(shared_dir: Path) -> None:
    case = load_case(shared_dir, "PB-16")
    request = {**case["input"]["request"], "reasoning": {"exclude": False}}
    prepared = prepare_request(json.dumps(request).encode(), provider_rules("openrouter"))
    assert prepared.controls.exclude is True


def test_pb18_explicit_budget_is_preserved_for_anthropic(shared_dir: Path) -> None:
    case = load_case(shared_dir, "PB-18")
    out = upstream(case, "anthropic")
    expected = case["expected"]["upstream_request"]
    assert {key: out[key] for key in expected} == expected


@pytest.mark.parametrize("provider", ["openrouter", "generic"])
def test_pb25_one_effort_form_with_the_alias_value(shared_dir: Path, provider: str) -> None:
    case = load_case(shared_dir, "PB-25")
    out = upstream(case, provider)
    assert {"reasoning": out["reasoning"]} in case["expected"]["upstream_request_one_of"]
    assert "reasoning_effort" not in out
    assert "low" not in json.dumps(out)


def test_pb25_effort_form_provider_gets_only_the_shorthand(shared_dir: Path) -> None:
    case = load_case(shared_dir, "PB-25")
    out = upstream(case, "openai")
    assert {"reasoning_effort": out["reasoning_effort"]} in case["expected"]["upstream_request_one_of"]
    assert "reasoning" not in out
