"""Routing (spec 004 "Routing requirements"), reasoning modes (spec 000 "Reasoning Modes") and stickiness."""

from __future__ import annotations

import copy
import hashlib
import json
import random
from pathlib import Path
from typing import Any

import pytest

from numi_mw.core.catalog import Endpoint, Model, ReasoningCapabilities, load_catalog
from numi_mw.core.controls import ReasoningControls, fold_controls
from numi_mw.core.errors import ApiError
from numi_mw.core.request import prepare_request
from numi_mw.core.routing import (
    accepted_efforts,
    apply_reasoning_mode,
    choose_endpoint,
    eligible_endpoints,
    model_efforts,
    nearest_accepted_effort,
    normalize_effort,
    session_id,
)
from tests.conftest import load_case

ALL_PARAMS = ["max_tokens", "reasoning", "include_reasoning", "tools"]


def ep(
    tag: str,
    params: list[str] | None = ALL_PARAMS,
    reasoning: ReasoningCapabilities | None = None,
) -> Endpoint:
    return Endpoint(tag=tag, provider="openrouter", supported_parameters=params, reasoning=reasoning)


def caps(**fields: Any) -> ReasoningCapabilities:
    return ReasoningCapabilities(**fields)


def model(*endpoints: Endpoint, mode: str = "effort") -> Model:
    return Model(id="openai/gpt-6-luna", reasoning_mode=mode, endpoints=list(endpoints))  # type: ignore[arg-type]


def controls(body: dict[str, Any]) -> ReasoningControls:
    folded, _ = fold_controls(dict(body))
    return folded


def tags(endpoints: list[Endpoint]) -> list[str]:
    return [e.tag for e in endpoints]


def route(m: Model, body: dict[str, Any], strict: bool = False) -> list[str]:
    return tags(eligible_endpoints(m, controls(body), require_parameters=strict))


def refused(m: Model, body: dict[str, Any], strict: bool = False) -> ApiError:
    with pytest.raises(ApiError) as caught:
        eligible_endpoints(m, controls(body), require_parameters=strict)
    return caught.value


LISTS_LMH = caps(supported_efforts=["low", "medium", "high"])
LISTS_NONE = caps(supported_efforts=["none", "low", "high"])
MANDATORY_FALSE = caps(supported_efforts=["low", "high"], mandatory=False)
MANDATORY_TRUE = caps(supported_efforts=["low", "high"], mandatory=True)
MANDATORY_UNSET = caps(supported_efforts=["low", "high"])
NO_LIST = caps(default_enabled=True)
NO_LIST_OPTIONAL = caps(mandatory=False)


# --- default routing: (name, endpoint, request body, eligible?) -------------------------------------------------
DEFAULT_ROWS: list[tuple[str, Endpoint, dict[str, Any], bool]] = [
    ("effort listed in supported_efforts", ep("e", reasoning=LISTS_LMH), {"reasoning": {"effort": "high"}}, True),
    ("effort not listed", ep("e", reasoning=LISTS_LMH), {"reasoning": {"effort": "xhigh"}}, False),
    (
        "effort, reasoning object without supported_efforts",
        ep("e", reasoning=NO_LIST),
        {"reasoning_effort": "xhigh"},
        True,
    ),
    ("effort, no reasoning object", ep("e"), {"reasoning_effort": "xhigh"}, True),
    ("unfamiliar effort, no list: forwarded", ep("e", reasoning=NO_LIST), {"reasoning_effort": "turbo"}, True),
    ("unfamiliar effort, list without it", ep("e", reasoning=LISTS_LMH), {"reasoning_effort": "turbo"}, False),
    ("none listed", ep("e", reasoning=LISTS_NONE), {"reasoning": {"effort": "none"}}, True),
    ("none, mandatory false", ep("e", reasoning=MANDATORY_FALSE), {"reasoning": {"effort": "none"}}, True),
    ("none, mandatory false, no list", ep("e", reasoning=NO_LIST_OPTIONAL), {"reasoning": {"effort": "none"}}, True),
    (
        "none, mandatory true, list without none",
        ep("e", reasoning=MANDATORY_TRUE),
        {"reasoning": {"effort": "none"}},
        False,
    ),
    (
        "none, mandatory unset, list without none",
        ep("e", reasoning=MANDATORY_UNSET),
        {"reasoning": {"effort": "none"}},
        False,
    ),
    ("none, no list published", ep("e", reasoning=NO_LIST), {"reasoning": {"effort": "none"}}, True),
    ("none, no reasoning object", ep("e"), {"reasoning": {"effort": "none"}}, True),
    ("no control at all", ep("e", params=None, reasoning=MANDATORY_TRUE), {}, True),
    ("exclude alone: a hint", ep("e", params=None), {"include_reasoning": False}, True),
    ("enabled false is not an effort", ep("e", reasoning=MANDATORY_TRUE), {"reasoning": {"enabled": False}}, True),
    (
        "max_tokens without supports_max_tokens: a hint",
        ep("e", reasoning=LISTS_LMH),
        {"reasoning": {"max_tokens": 2000}},
        True,
    ),
]


@pytest.mark.parametrize(
    ("endpoint", "body", "eligible"), [r[1:] for r in DEFAULT_ROWS], ids=[r[0] for r in DEFAULT_ROWS]
)
def test_default_routing_rule(endpoint: Endpoint, body: dict[str, Any], eligible: bool) -> None:
    # A second endpoint without a reasoning object accepts everything, so the row's endpoint is judged alone.
    m = model(endpoint, ep("fallback"))
    assert route(m, body) == (["e", "fallback"] if eligible else ["fallback"])


def test_default_routing_keeps_catalog_order() -> None:
    m = model(ep("a", reasoning=LISTS_LMH), ep("b", reasoning=MANDATORY_FALSE), ep("c", reasoning=NO_LIST))
    assert route(m, {"reasoning_effort": "low"}) == ["a", "b", "c"]
    assert route(m, {"reasoning_effort": "medium"}) == ["a", "c"]


def test_no_endpoint_accepts_the_effort_is_400() -> None:
    m = model(ep("a", reasoning=LISTS_LMH), ep("b", reasoning=MANDATORY_FALSE))
    assert refused(m, {"reasoning_effort": "xhigh"}).body() == {
        "error": {
            "message": 'No endpoint of model "openai/gpt-6-luna" accepts reasoning effort "xhigh"; '
            "use one of: none, low, medium, high, or omit it to use the model's default.",
            "type": "invalid_request_error",
            "code": "invalid_request",
            "param": "reasoning.effort",
        }
    }


def test_no_endpoint_accepts_effort_none_is_400() -> None:
    m = model(ep("a", reasoning=MANDATORY_TRUE), ep("b", reasoning=caps(supported_efforts=["minimal", "max"])))
    err = refused(m, {"reasoning": {"effort": "none"}})
    assert err.status == 400
    assert err.body() == {
        "error": {
            "message": 'No endpoint of model "openai/gpt-6-luna" accepts reasoning effort "none"; '
            "use one of: minimal, low, high, max, or omit it to use the model's default.",
            "type": "invalid_request_error",
            "code": "invalid_request",
            "param": "reasoning.effort",
        }
    }


def test_accepted_efforts_order_scale_first_then_unfamiliar() -> None:
    m = model(
        ep("a", reasoning=caps(supported_efforts=["turbo", "high", "low"])),
        ep("b", reasoning=caps(supported_efforts=["minimal"], mandatory=False)),
        ep("c"),
    )
    assert accepted_efforts(m) == ["none", "minimal", "low", "high", "turbo"]


# --- strict routing, one test per row of spec 004's table: (name, endpoint, body, eligible?) ---------------------
STRICT_ROWS: list[tuple[str, Endpoint, dict[str, Any], int | None]] = [
    # Row 1: any reasoning control that does not disable reasoning -> "reasoning" in supported_parameters.
    ("row1 effort, reasoning declared", ep("e"), {"reasoning": {"effort": "high"}}, None),
    ("row1 effort, reasoning not declared", ep("e", params=["max_tokens"]), {"reasoning": {"effort": "high"}}, 503),
    ("row1 exclude alone, declared", ep("e"), {"reasoning": {"exclude": True}}, None),
    ("row1 exclude alone, not declared", ep("e", params=["max_tokens"]), {"reasoning": {"exclude": True}}, 503),
    ("row1 include_reasoning alone, not declared", ep("e", params=["tools"]), {"include_reasoning": True}, 503),
    ("row1 include_reasoning alone, declared", ep("e"), {"include_reasoning": False}, None),
    ("row1 enabled true, not declared", ep("e", params=[]), {"reasoning": {"enabled": True}}, 503),
    ("row1 supported_parameters unpublished", ep("e", params=None), {"reasoning": {}}, 503),
    (
        "row1 not needed for a control that disables reasoning",
        ep("e", params=["max_tokens"], reasoning=MANDATORY_FALSE),
        {"reasoning": {"effort": "none"}},
        None,
    ),
    # Row 2: effort other than none -> that level in supported_efforts, or no reasoning object at all.
    ("row2 level listed", ep("e", reasoning=LISTS_LMH), {"reasoning_effort": "medium"}, None),
    ("row2 level not listed", ep("e", reasoning=LISTS_LMH), {"reasoning_effort": "minimal"}, 400),
    ("row2 no reasoning object: effort as a hint", ep("e"), {"reasoning_effort": "xhigh"}, None),
    (
        "row2 reasoning object without supported_efforts",
        ep("e", reasoning=NO_LIST),
        {"reasoning_effort": "high"},
        400,
    ),
    # Row 3: effort none or enabled false -> none in supported_efforts, or mandatory false.
    ("row3 none listed", ep("e", reasoning=LISTS_NONE), {"reasoning": {"effort": "none"}}, None),
    ("row3 none, mandatory false", ep("e", reasoning=MANDATORY_FALSE), {"reasoning": {"effort": "none"}}, None),
    ("row3 none, mandatory true", ep("e", reasoning=MANDATORY_TRUE), {"reasoning": {"effort": "none"}}, 400),
    ("row3 none, mandatory unset", ep("e", reasoning=NO_LIST), {"reasoning": {"effort": "none"}}, 400),
    ("row3 none, no reasoning object", ep("e"), {"reasoning": {"effort": "none"}}, 400),
    (
        "row3 enabled false, mandatory false",
        ep("e", reasoning=NO_LIST_OPTIONAL),
        {"reasoning": {"enabled": False}},
        None,
    ),
    ("row3 enabled false, none listed", ep("e", reasoning=LISTS_NONE), {"reasoning": {"enabled": False}}, None),
    ("row3 enabled false, mandatory true", ep("e", reasoning=MANDATORY_TRUE), {"reasoning": {"enabled": False}}, 503),
    ("row3 enabled false, no reasoning object", ep("e"), {"reasoning": {"enabled": False}}, 503),
    # Row 4: max_tokens -> supports_max_tokens: true.
    (
        "row4 supports_max_tokens true",
        ep("e", reasoning=caps(supports_max_tokens=True)),
        {"reasoning": {"max_tokens": 2000}},
        None,
    ),
    (
        "row4 supports_max_tokens false",
        ep("e", reasoning=caps(supports_max_tokens=False)),
        {"reasoning": {"max_tokens": 2000}},
        503,
    ),
    ("row4 supports_max_tokens unset", ep("e", reasoning=LISTS_LMH), {"reasoning": {"max_tokens": 2000}}, 503),
    ("row4 no reasoning object", ep("e"), {"reasoning": {"max_tokens": 2000}}, 503),
    # No reasoning fields: a model's defaults without narrowing.
    ("no reasoning fields", ep("e", params=None), {}, None),
    ("top-level max_tokens is not a reasoning control", ep("e", params=None), {"max_tokens": 100}, None),
]


@pytest.mark.parametrize(("endpoint", "body", "status"), [r[1:] for r in STRICT_ROWS], ids=[r[0] for r in STRICT_ROWS])
def test_strict_routing_row(endpoint: Endpoint, body: dict[str, Any], status: int | None) -> None:
    m = model(endpoint)
    if status is None:
        assert route(m, body, strict=True) == ["e"]
        return
    err = refused(m, body, strict=True)
    if status == 400:
        assert (err.status, err.code, err.param) == (400, "invalid_request", "reasoning.effort")
    else:
        assert (err.status, err.code, err.param) == (503, "provider_unavailable", None)


def test_strict_max_tokens_requested_flag_applies_row4() -> None:
    m = model(ep("a", reasoning=LISTS_LMH), ep("b", reasoning=caps(supports_max_tokens=True)))
    eligible = eligible_endpoints(m, controls({}), require_parameters=True, max_tokens_requested=True)
    assert tags(eligible) == ["b"]
    assert tags(eligible_endpoints(m, controls({}), require_parameters=False, max_tokens_requested=True)) == ["a", "b"]


def test_strict_nothing_qualifies_is_503() -> None:
    m = model(
        ep("a", params=["max_tokens"], reasoning=LISTS_LMH),
        ep("b", reasoning=caps(supported_efforts=["high"], supports_max_tokens=False)),
    )
    err = refused(m, {"reasoning": {"effort": "high", "max_tokens": 4000}}, strict=True)
    assert err.status == 503
    assert err.body() == {
        "error": {
            "message": 'No endpoint of model "openai/gpt-6-luna" declares the requested reasoning controls '
            '(endpoint "a" needs "reasoning" in supported_parameters and supports_max_tokens: true; '
            'endpoint "b" needs supports_max_tokens: true); '
            "remove those controls or set provider.require_parameters to false.",
            "type": "api_error",
            "code": "provider_unavailable",
            "param": None,
        }
    }


def test_strict_effort_alone_ruling_out_every_endpoint_is_400() -> None:
    m = model(ep("a", reasoning=LISTS_LMH), ep("b", reasoning=NO_LIST))
    assert refused(m, {"reasoning_effort": "xhigh"}, strict=True).body() == {
        "error": {
            "message": 'No endpoint of model "openai/gpt-6-luna" accepts reasoning effort "xhigh"; '
            "use one of: low, medium, high, or omit it to use the model's default.",
            "type": "invalid_request_error",
            "code": "invalid_request",
            "param": "reasoning.effort",
        }
    }


def test_strict_every_endpoint_failing_the_effort_is_400_even_with_other_failures() -> None:
    m = model(ep("a", params=[], reasoning=LISTS_LMH), ep("b", reasoning=caps(supported_efforts=["low"])))
    err = refused(m, {"reasoning": {"effort": "max", "max_tokens": 100}}, strict=True)
    assert (err.status, err.code, err.param) == (400, "invalid_request", "reasoning.effort")


def test_strict_effort_accepted_somewhere_is_503() -> None:
    # "b" accepts the effort but lacks "reasoning" in supported_parameters: the effort did not rule out everything.
    m = model(ep("a", reasoning=LISTS_LMH), ep("b", params=["max_tokens"], reasoning=caps(supported_efforts=["xhigh"])))
    err = refused(m, {"reasoning_effort": "xhigh"}, strict=True)
    assert err.body() == {
        "error": {
            "message": 'No endpoint of model "openai/gpt-6-luna" declares the requested reasoning controls '
            '(endpoint "a" needs effort "xhigh" in supported_efforts; '
            'endpoint "b" needs "reasoning" in supported_parameters); '
            "remove those controls or set provider.require_parameters to false.",
            "type": "api_error",
            "code": "provider_unavailable",
            "param": None,
        }
    }


def test_strict_effort_none_ruled_out_is_400() -> None:
    m = model(ep("a", reasoning=MANDATORY_TRUE), ep("b"))
    err = refused(m, {"reasoning": {"effort": "none"}}, strict=True)
    assert err.body() == {
        "error": {
            "message": 'No endpoint of model "openai/gpt-6-luna" accepts reasoning effort "none"; '
            "use one of: low, high, or omit it to use the model's default.",
            "type": "invalid_request_error",
            "code": "invalid_request",
            "param": "reasoning.effort",
        }
    }


def test_strict_enabled_false_ruled_out_is_503_not_an_effort() -> None:
    m = model(ep("a", reasoning=MANDATORY_TRUE))
    err = refused(m, {"reasoning": {"enabled": False}}, strict=True)
    assert err.body() == {
        "error": {
            "message": 'No endpoint of model "openai/gpt-6-luna" declares the requested reasoning controls '
            '(endpoint "a" needs "none" in supported_efforts or mandatory: false (for enabled: false)); '
            "remove those controls or set provider.require_parameters to false.",
            "type": "api_error",
            "code": "provider_unavailable",
            "param": None,
        }
    }


def test_strict_no_published_levels_400_advises_omitting_the_effort() -> None:
    m = model(ep("a", reasoning=NO_LIST))
    assert refused(m, {"reasoning_effort": "high"}, strict=True).message == (
        'No endpoint of model "openai/gpt-6-luna" accepts reasoning effort "high"; omit it to use the model\'s default.'
    )


def test_strict_mixed_endpoints_keep_only_the_qualifying_ones() -> None:
    m = model(
        ep("a", reasoning=LISTS_LMH),
        ep("b"),
        ep("c", params=["max_tokens"]),
        ep("d", reasoning=NO_LIST),
    )
    assert route(m, {"reasoning_effort": "high"}, strict=True) == ["a", "b"]
    assert route(m, {"reasoning_effort": "high"}, strict=False) == ["a", "b", "c", "d"]


def test_model_without_endpoints_is_503() -> None:
    err = refused(model(), {})
    assert err.body() == {
        "error": {
            "message": 'Model "openai/gpt-6-luna" has no endpoint; add one to the catalog or choose another model.',
            "type": "api_error",
            "code": "provider_unavailable",
            "param": None,
        }
    }


# --- PB-20 (handed case): unaccepted effort -> 400, never sent upstream ------------------------------------------
def pb20_model(case: dict[str, Any], *, publish_efforts: bool = True) -> Model:
    catalog = case["input"]["catalog"]
    endpoints = []
    for entry in catalog["endpoints"]:
        reasoning = dict(entry["reasoning"])
        if not publish_efforts:
            del reasoning["supported_efforts"]
        endpoints.append(
            Endpoint(
                tag=entry["tag"],
                provider="openrouter",
                supported_parameters=entry["supported_parameters"],
                reasoning=ReasoningCapabilities(**reasoning),
            )
        )
    return Model(id=catalog["model"], endpoints=endpoints)


def test_pb20_unaccepted_effort_is_400_on_reasoning_effort(shared_dir: Path) -> None:
    case = load_case(shared_dir, "PB-20")
    request = copy.deepcopy(case["input"]["request"])
    folded, _ = fold_controls(request)
    with pytest.raises(ApiError) as caught:
        eligible_endpoints(pb20_model(case), folded, require_parameters=False)
    expected = case["expected"]["proxy_response"]
    assert (caught.value.status, caught.value.code, caught.value.param) == (
        expected["status"],
        expected["error_code_or_type"],
        expected["param"],
    )
    assert caught.value.body() == {
        "error": {
            "message": 'No endpoint of model "openai/model-i" accepts reasoning effort "xhigh"; '
            "use one of: minimal, low, medium, high, or omit it to use the model's default.",
            "type": "invalid_request_error",
            "code": "invalid_request",
            "param": "reasoning.effort",
        }
    }


def test_pb20_variant_endpoint_without_supported_efforts_is_eligible_and_effort_unchanged(shared_dir: Path) -> None:
    case = load_case(shared_dir, "PB-20")
    request = copy.deepcopy(case["input"]["request"])
    folded, _ = fold_controls(request)
    m = pb20_model(case, publish_efforts=False)
    chosen = choose_endpoint(eligible_endpoints(m, folded, require_parameters=False), None)
    assert chosen.tag == "example-provider/primary"
    assert apply_reasoning_mode(request, folded, m, chosen) is False
    assert request["reasoning"] == {"effort": "xhigh"}


# --- reasoning modes (spec 000) -----------------------------------------------------------------------------------
NORMALIZE_ROWS: list[tuple[str, list[str], str]] = [
    ("high", ["low", "medium", "high"], "high"),  # listed: unchanged
    ("xhigh", ["minimal", "low", "medium", "high"], "high"),
    ("max", ["low"], "low"),
    ("minimal", ["low", "high"], "low"),
    ("medium", ["low", "high"], "low"),  # tie: downward
    ("xhigh", ["high", "max"], "high"),  # tie: downward
    ("low", ["minimal", "xhigh"], "minimal"),
    ("minimal", ["none", "high"], "high"),  # none is never a target
    ("none", ["low", "high"], "none"),  # none never moves
    ("turbo", ["low", "high"], "turbo"),  # off the scale: unchanged
    ("high", ["turbo"], "high"),  # no level on the scale: unchanged
    ("high", [], "high"),
]


@pytest.mark.parametrize(("effort", "levels", "expected"), NORMALIZE_ROWS)
def test_normalize_effort(effort: str, levels: list[str], expected: str) -> None:
    assert normalize_effort(effort, levels) == expected


def mode_body(reasoning: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "openai/gpt-6-luna", "messages": [{"role": "user", "content": "Hi"}]}
    if reasoning is not None:
        body["reasoning"] = reasoning
    body.update(extra)
    return body


def run_mode(m: Model, body: dict[str, Any], endpoint: Endpoint | None = None) -> tuple[bool, dict[str, Any]]:
    folded, _ = fold_controls(body)
    changed = apply_reasoning_mode(body, folded, m, endpoint)
    return changed, body


def test_effort_mode_normalizes_to_the_endpoint_levels() -> None:
    endpoint = ep("a", reasoning=caps(supported_efforts=["low", "high"]))
    changed, body = run_mode(model(endpoint), mode_body({"effort": "medium", "exclude": True}), endpoint)
    assert changed is True
    assert body["reasoning"] == {"effort": "low", "exclude": True}
    assert list(body) == ["model", "messages", "reasoning"]


def test_effort_mode_before_routing_normalizes_to_the_model_levels_then_routes() -> None:
    m = model(ep("a", reasoning=caps(supported_efforts=["low"])), ep("b", reasoning=caps(supported_efforts=["high"])))
    assert model_efforts(m) == ["low", "high"]
    body = mode_body({"effort": "xhigh"})
    changed, body = run_mode(m, body)
    assert (changed, body["reasoning"]) == (True, {"effort": "high"})
    assert route(m, body) == ["b"]


def test_effort_mode_leaves_the_effort_when_an_endpoint_publishes_no_levels() -> None:
    m = model(ep("a", reasoning=caps(supported_efforts=["low"])), ep("b"))
    assert model_efforts(m) is None
    assert run_mode(m, mode_body({"effort": "xhigh"})) == (False, mode_body({"effort": "xhigh"}))


def test_effort_mode_leaves_listed_effort_and_bodies_without_effort() -> None:
    endpoint = ep("a", reasoning=LISTS_LMH)
    m = model(endpoint)
    assert run_mode(m, mode_body({"effort": "high"}), endpoint) == (False, mode_body({"effort": "high"}))
    assert run_mode(m, mode_body({"enabled": True}), endpoint) == (False, mode_body({"enabled": True}))
    assert run_mode(m, mode_body(), endpoint) == (False, mode_body())


ENABLED_ROWS: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({"effort": "high"}, {"enabled": True}),
    ({"effort": "minimal"}, {"enabled": True}),
    ({"effort": "none"}, {"enabled": False}),
    ({"effort": "high", "enabled": False}, {"enabled": False}),
    ({"exclude": True, "effort": "low", "max_tokens": 500}, {"exclude": True, "enabled": True, "max_tokens": 500}),
]


@pytest.mark.parametrize(("reasoning", "expected"), ENABLED_ROWS)
def test_enabled_mode_turns_effort_into_on_off(reasoning: dict[str, Any], expected: dict[str, Any]) -> None:
    changed, body = run_mode(model(ep("a"), mode="enabled"), mode_body(reasoning))
    assert changed is True
    assert body["reasoning"] == expected
    assert list(body["reasoning"]) == list(expected)


def test_enabled_mode_without_effort_is_unchanged() -> None:
    m = model(ep("a"), mode="enabled")
    assert run_mode(m, mode_body({"enabled": True, "exclude": True})) == (
        False,
        mode_body({"enabled": True, "exclude": True}),
    )
    assert run_mode(m, mode_body({"max_tokens": 100})) == (False, mode_body({"max_tokens": 100}))


def test_enabled_mode_folds_the_shorthand_first() -> None:
    changed, body = run_mode(model(ep("a"), mode="enabled"), mode_body(reasoning_effort="none"))
    assert changed is True
    assert body["reasoning"] == {"enabled": False}
    assert "reasoning_effort" not in body


def test_native_mode_leaves_the_controls_as_sent() -> None:
    endpoint = ep("a", reasoning=caps(supported_efforts=["low"]))
    body = mode_body({"effort": "xhigh", "enabled": True})
    assert run_mode(model(endpoint, mode="native"), body, endpoint) == (
        False,
        mode_body({"effort": "xhigh", "enabled": True}),
    )


def test_none_mode_removes_controls_and_reasoning_history() -> None:
    details = [{"type": "reasoning.encrypted", "data": "opaque"}]
    body: dict[str, Any] = {
        "model": "m",
        "reasoning": {"effort": "high"},
        "messages": [
            {"role": "user", "content": "Hi"},
            {
                "role": "assistant",
                "content": "Hello",
                "reasoning": "r",
                "reasoning_content": "r",
                "reasoning_details": details,
            },
            {"role": "assistant", "content": None, "tool_calls": [], "reasoning_details": details},
        ],
        "max_tokens": 10,
    }
    original_message = body["messages"][1]
    changed, body = run_mode(model(ep("a"), mode="none"), body)
    assert changed is True
    assert body == {
        "model": "m",
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello"},
            {"role": "assistant", "content": None, "tool_calls": []},
        ],
        "max_tokens": 10,
    }
    assert "reasoning" in original_message  # messages are replaced, not mutated


def test_none_mode_removes_leftover_shorthands() -> None:
    body = {"model": "m", "reasoning_effort": "high", "include_reasoning": True}
    assert apply_reasoning_mode(body, ReasoningControls(present=True), model(ep("a"), mode="none")) is True
    assert body == {"model": "m"}


def test_none_mode_without_reasoning_is_unchanged() -> None:
    assert run_mode(model(ep("a"), mode="none"), mode_body()) == (False, mode_body())


# --- sessions and stickiness ------------------------------------------------------------------------------------
THREE = [ep("a"), ep("b"), ep("c")]
SESSIONS = [f"session-{i}" for i in range(300)]


def test_without_a_session_the_first_eligible_endpoint() -> None:
    assert choose_endpoint(THREE, None).tag == "a"
    assert choose_endpoint(THREE[1:], None).tag == "b"


def test_rendezvous_weight_is_blake2b_of_session_and_tag() -> None:
    def weight(tag: str) -> int:
        return int.from_bytes(hashlib.blake2b(f"s-1\0{tag}".encode(), digest_size=8).digest(), "big")

    expected = max(THREE, key=lambda e: weight(e.tag))
    assert choose_endpoint(THREE, "s-1") is expected


def test_choice_is_deterministic_and_independent_of_order_and_instances() -> None:
    first = {s: choose_endpoint(THREE, s).tag for s in SESSIONS}
    rebuilt = [ep("c"), ep("a"), ep("b")]
    shuffled = list(THREE)
    random.Random(7).shuffle(shuffled)
    assert {s: choose_endpoint(THREE, s).tag for s in SESSIONS} == first
    assert {s: choose_endpoint(rebuilt, s).tag for s in SESSIONS} == first
    assert {s: choose_endpoint(shuffled, s).tag for s in SESSIONS} == first


def test_sessions_spread_roughly_evenly_over_three_endpoints() -> None:
    counts = {"a": 0, "b": 0, "c": 0}
    for s in SESSIONS:
        counts[choose_endpoint(THREE, s).tag] += 1
    assert sum(counts.values()) == 300
    assert min(counts.values()) >= 60, counts


def test_removing_an_endpoint_moves_only_its_own_sessions() -> None:
    before = {s: choose_endpoint(THREE, s).tag for s in SESSIONS}
    after = {s: choose_endpoint([ep("a"), ep("c")], s).tag for s in SESSIONS}
    moved = {s for s in SESSIONS if before[s] != after[s]}
    assert moved == {s for s in SESSIONS if before[s] == "b"}
    assert moved  # some sessions were on "b"


def test_session_stays_while_its_endpoint_stays_eligible() -> None:
    m = model(ep("a", reasoning=LISTS_LMH), ep("b", reasoning=caps(supported_efforts=["high"])), ep("c"))
    for s in SESSIONS[:50]:
        wide = choose_endpoint(eligible_endpoints(m, controls({}), require_parameters=False), s)
        narrow = choose_endpoint(
            eligible_endpoints(m, controls({"reasoning_effort": "high"}), require_parameters=False), s
        )
        assert narrow is wide


def test_choose_endpoint_needs_an_endpoint() -> None:
    with pytest.raises(ValueError, match="at least one endpoint"):
        choose_endpoint([], "s")


SESSION_ROWS: list[tuple[str, dict[str, str], dict[str, Any], str | None]] = [
    ("header", {"x-session-id": "h-1"}, {}, "h-1"),
    ("body field", {}, {"session_id": "b-1"}, "b-1"),
    ("header wins over body", {"x-session-id": "h-1"}, {"session_id": "b-1"}, "h-1"),
    ("header in another case", {"X-Session-Id": "h-2"}, {}, "h-2"),
    ("empty header falls back to body", {"x-session-id": ""}, {"session_id": "b-1"}, "b-1"),
    ("non-string body field", {}, {"session_id": 42}, None),
    ("empty body field", {}, {"session_id": ""}, None),
    ("none", {"content-type": "application/json"}, {"model": "m"}, None),
]


@pytest.mark.parametrize(
    ("headers", "body", "expected"), [r[1:] for r in SESSION_ROWS], ids=[r[0] for r in SESSION_ROWS]
)
def test_session_id(headers: dict[str, str], body: dict[str, Any], expected: str | None) -> None:
    assert session_id(headers, body) == expected


# --- unsupported_effort: refuse (spec 004's 400) or nearest (spec 000's normalization), per catalog model --------
NEAREST_CATALOG = """
[[providers]]
name = "openrouter"
base_url = "https://openrouter.ai/api/v1"

[[providers]]
name = "gpu-box"
base_url = "http://127.0.0.1:8000/v1"
rules = "local"

[[models]]
id = "vendor/app-model"
unsupported_effort = "{choice}"

[[models.endpoints]]
tag = "openrouter/a"
provider = "openrouter"
reasoning = {{ supported_efforts = ["low", "high"], mandatory = true }}

[[models.endpoints]]
tag = "gpu-box/b"
provider = "gpu-box"
model = "app-32b"
reasoning = {{ supported_efforts = ["minimal", "medium"] }}
"""


def prepare(choice: str, reasoning: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    catalog = load_catalog(NEAREST_CATALOG.format(choice=choice), "nearest.toml")
    body = {"model": "vendor/app-model", "reasoning": reasoning, "messages": [{"role": "user", "content": "Hi"}]}
    prepared = prepare_request(json.dumps(body).encode(), catalog)
    out: dict[str, Any] = json.loads(prepared.body)
    return out, prepared.route.endpoint


NEAREST_ROWS: list[tuple[str, dict[str, Any], dict[str, Any], str]] = [
    # (what, reasoning sent, what the upstream receives besides model and messages, endpoint)
    ("xhigh moves down to high", {"effort": "xhigh"}, {"reasoning": {"effort": "high"}}, "openrouter/a"),
    (
        "max moves down to high",
        {"effort": "max", "exclude": True},
        {"reasoning": {"effort": "high", "exclude": True}},
        "openrouter/a",
    ),
    ("a listed effort is routed as it is", {"effort": "low"}, {"reasoning": {"effort": "low"}}, "openrouter/a"),
    # medium is listed by the local endpoint only: no move, routed there, in the local form
    ("an effort one endpoint lists goes there", {"effort": "medium"}, {"reasoning_effort": "medium"}, "gpu-box/b"),
]


@pytest.mark.parametrize(
    ("reasoning", "upstream", "endpoint"), [r[1:] for r in NEAREST_ROWS], ids=[r[0] for r in NEAREST_ROWS]
)
def test_nearest_moves_an_effort_no_endpoint_accepts_then_routes_it(
    reasoning: dict[str, Any], upstream: dict[str, Any], endpoint: str
) -> None:
    body, chosen = prepare("nearest", reasoning)
    model_name = "app-32b" if endpoint == "gpu-box/b" else "vendor/app-model"
    assert body == {"model": model_name, **upstream, "messages": [{"role": "user", "content": "Hi"}]}
    assert chosen == endpoint


def test_nearest_ties_go_downward_end_to_end() -> None:
    catalog = load_catalog(NEAREST_CATALOG.format(choice="nearest").replace('["low", "high"]', '["xhigh"]'), "tie.toml")
    # high: minimal(1) medium(3) xhigh(5) on none < minimal < low < medium < high < xhigh < max: medium and
    # xhigh are both one step away, the tie goes to medium
    raw = json.dumps({"model": "vendor/app-model", "reasoning_effort": "high"}).encode()
    prepared = prepare_request(raw, catalog)
    assert json.loads(prepared.body) == {"model": "app-32b", "reasoning_effort": "medium"}
    assert prepared.route.endpoint == "gpu-box/b"


@pytest.mark.parametrize("reasoning", [{"effort": "xhigh"}, {"effort": "max"}])
def test_refuse_is_the_default_and_keeps_spec_004s_400(reasoning: dict[str, Any]) -> None:
    for choice in ("refuse", "unset"):
        text = NEAREST_CATALOG.format(choice="refuse")
        if choice == "unset":  # no unsupported_effort key at all: refuse, the default
            text = text.replace('unsupported_effort = "refuse"\n', "")
        raw = json.dumps({"model": "vendor/app-model", "reasoning": reasoning}).encode()
        with pytest.raises(ApiError) as caught:
            prepare_request(raw, load_catalog(text, "refuse.toml"))
        assert (caught.value.status, caught.value.code, caught.value.param) == (
            400,
            "invalid_request",
            "reasoning.effort",
        )


@pytest.mark.parametrize(
    "reasoning",
    [
        {"effort": "none"},  # none never moves (and is never a target): both endpoints are mandatory here
        {"effort": "turbo"},  # off the scale: not moved, refused as sent
    ],
)
def test_nearest_never_moves_none_or_an_effort_off_the_scale(reasoning: dict[str, Any]) -> None:
    text = NEAREST_CATALOG.format(choice="nearest").replace(
        '["minimal", "medium"] }', '["minimal", "medium"], mandatory = true }'
    )
    raw = json.dumps({"model": "vendor/app-model", "reasoning": reasoning}).encode()
    with pytest.raises(ApiError) as caught:
        prepare_request(raw, load_catalog(text, "never.toml"))
    assert (caught.value.status, caught.value.param) == (400, "reasoning.effort")


def test_nearest_leaves_other_reasoning_modes_and_enabled_false_alone() -> None:
    m = Model(
        id="m",
        reasoning_mode="native",
        unsupported_effort="nearest",
        endpoints=[ep("a", reasoning=LISTS_LMH)],
    )
    body = mode_body({"effort": "max"})
    assert nearest_accepted_effort(body, controls(body), m, require_parameters=False) is False
    assert body["reasoning"] == {"effort": "max"}
    m = Model(id="m", unsupported_effort="nearest", endpoints=[ep("a", reasoning=LISTS_LMH)])
    off = mode_body({"effort": "max", "enabled": False})
    assert nearest_accepted_effort(off, controls(off), m, require_parameters=False) is False
    on = mode_body({"effort": "max"})
    assert nearest_accepted_effort(on, controls(on), m, require_parameters=False) is True
    assert on["reasoning"] == {"effort": "high"}


def test_nearest_under_strict_matching_moves_to_a_level_an_endpoint_declares() -> None:
    m = Model(
        id="m",
        unsupported_effort="nearest",
        endpoints=[ep("a", reasoning=caps(supported_efforts=["low"])), ep("b", reasoning=NO_LIST)],
    )
    body = mode_body({"effort": "high"})
    # strictly, b (a reasoning object without supported_efforts) accepts no effort and a lists only low
    assert nearest_accepted_effort(body, controls(body), m, require_parameters=True) is True
    assert body["reasoning"] == {"effort": "low"}
    assert route(m, body, strict=True) == ["a"]
    # by default b takes any effort as a hint, so nothing moves
    loose = mode_body({"effort": "high"})
    assert nearest_accepted_effort(loose, controls(loose), m, require_parameters=False) is False
