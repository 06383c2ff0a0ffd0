"""``prepare_request`` through a catalog: the catalog decides the route, then the request is prepared for it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from numi_mw.core.catalog import load_catalog
from numi_mw.core.errors import ApiError
from numi_mw.core.request import prepare_request
from numi_mw.core.routing import choose_endpoint
from tests.conftest import load_case

CATALOG = load_catalog(
    """
[[providers]]
name = "openrouter"
base_url = "http://127.0.0.1:9/api/v1"
api_key_env = "NUMI_TEST_OPENROUTER_KEY"

[[providers]]
name = "gpu-box"
base_url = "http://127.0.0.1:10/v1"
rules = "local"

[[providers]]
name = "claude-native"
base_url = "http://127.0.0.1:11/v1"
wire_api = "anthropic-messages"

[[models]]
id = "vendor/thinker"
reasoning_mode = "effort"
preserve_reasoning = false

[[models.endpoints]]
tag = "openrouter/primary"
provider = "openrouter"
supported_parameters = ["max_tokens", "reasoning", "include_reasoning", "tools"]
reasoning = { supported_efforts = ["low", "medium", "high"], default_effort = "medium", mandatory = false, supports_max_tokens = true }

[[models.endpoints]]
tag = "gpu-box/vllm"
provider = "gpu-box"
supported_parameters = ["max_tokens", "reasoning"]
model = "thinker-32b"

[[models]]
id = "vendor/listed"

[[models.endpoints]]
tag = "openrouter/listed"
provider = "openrouter"
reasoning = { supported_efforts = ["low", "high"] }

[[models]]
id = "vendor/plain"
reasoning_mode = "none"

[[models.endpoints]]
tag = "gpu-box/plain"
provider = "gpu-box"
model = "plain-7b"

[[models]]
id = "vendor/switch"
reasoning_mode = "enabled"
preserve_reasoning = true

[[models.endpoints]]
tag = "openrouter/switch"
provider = "openrouter"

[[models]]
id = "vendor/native"
reasoning_mode = "native"

[[models.endpoints]]
tag = "claude"
provider = "claude-native"
""",
    "test-catalog.toml",
)

TOOL_TURN = [
    {"role": "user", "content": "Weather?"},
    {
        "role": "assistant",
        "content": "Let me check.",
        "reasoning_content": "Plain turn.",
        "reasoning_details": [{"type": "reasoning.text", "text": "Plain turn.", "signature": "SIG_1"}],
    },
    {
        "role": "assistant",
        "content": None,
        "reasoning_content": "Call the tool.",
        "reasoning_details": [{"type": "reasoning.encrypted", "data": "ENC_1"}],
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "21C", "_stored_at": "2026-11-30"},
]


def route(body: dict[str, Any], session: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    headers = {"x-session-id": session} if session else {}
    prepared = prepare_request(json.dumps(body).encode(), CATALOG, headers=headers)
    return json.loads(prepared.body), prepared.route.describe()


def refused(body: dict[str, Any]) -> ApiError:
    with pytest.raises(ApiError) as info:
        prepare_request(json.dumps(body).encode(), CATALOG)
    return info.value


def test_first_eligible_endpoint_without_session_and_openrouter_filter_without_preservation() -> None:
    body, decision = route(
        {"model": "vendor/thinker", "reasoning_effort": "high", "messages": TOOL_TURN, "provider": {"sort": "price"}}
    )
    assert decision == {
        "model": "vendor/thinker",
        "endpoint": "openrouter/primary",
        "eligible": ["openrouter/primary", "gpu-box/vllm"],
        "provider": "openrouter",
        "base_url": "http://127.0.0.1:9/api/v1",
        "wire_api": "openai-chat",
        "rules": "openrouter",
    }
    assert body == {
        "model": "vendor/thinker",
        "reasoning": {"effort": "high"},
        "messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": "Let me check."},
            {
                "role": "assistant",
                "content": None,
                "reasoning_details": [{"type": "reasoning.encrypted", "data": "ENC_1"}],
                "tool_calls": TOOL_TURN[2]["tool_calls"],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "21C"},
        ],
        "provider": {"sort": "price"},
    }


def test_an_effort_only_some_endpoints_list_goes_to_the_others() -> None:
    body, decision = route(
        {"model": "vendor/thinker", "reasoning_effort": "xhigh", "messages": TOOL_TURN, "provider": {"sort": "price"}}
    )
    assert (decision["endpoint"], decision["eligible"], decision["rules"]) == (
        "gpu-box/vllm",
        ["gpu-box/vllm"],
        "local",
    )
    assert body == {
        "model": "thinker-32b",
        "reasoning_effort": "xhigh",
        "messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": "Let me check."},
            {"role": "assistant", "content": None, "tool_calls": TOOL_TURN[2]["tool_calls"]},
            {"role": "tool", "tool_call_id": "call_1", "content": "21C"},
        ],
    }


def test_session_id_keeps_the_endpoint_the_rendezvous_hash_picks() -> None:
    chosen = {}
    for session in ("alpha", "beta", "gamma", "delta", "epsilon", "zeta"):
        model = CATALOG.model("vendor/thinker")
        assert model is not None
        expected = choose_endpoint(model.endpoints, session).tag
        for body in ({"model": "vendor/thinker"}, {"model": "vendor/thinker", "session_id": session}):
            _, decision = route(body, session if "session_id" not in body else None)
            assert decision["endpoint"] == expected
        chosen[session] = expected
    assert set(chosen.values()) == {"openrouter/primary", "gpu-box/vllm"}


def test_strict_matching_needs_declared_capabilities() -> None:
    body, decision = route(
        {"model": "vendor/thinker", "reasoning": {"max_tokens": 2000}, "provider": {"require_parameters": True}}
    )
    assert decision["eligible"] == ["openrouter/primary"]
    assert body["reasoning"] == {"max_tokens": 2000}
    error = refused(
        {"model": "vendor/switch", "reasoning": {"effort": "high"}, "provider": {"require_parameters": True}}
    )
    assert (error.status, error.code, error.param) == (503, "provider_unavailable", None)
    assert error.body()["error"]["type"] == "api_error"


def test_an_unpublished_effort_list_takes_any_effort_as_a_hint_even_strictly() -> None:
    _, decision = route(
        {"model": "vendor/thinker", "reasoning_effort": "ultra", "provider": {"require_parameters": True}}
    )
    assert decision["eligible"] == ["gpu-box/vllm"]


def test_no_endpoint_accepts_the_effort_is_400_never_routed() -> None:
    error = refused({"model": "vendor/listed", "reasoning_effort": "medium"})
    assert error.body() == {
        "error": {
            "message": 'No endpoint of model "vendor/listed" accepts reasoning effort "medium"; use one of: low, high, '
            "or omit it to use the model's default.",
            "type": "invalid_request_error",
            "code": "invalid_request",
            "param": "reasoning.effort",
        }
    }


def test_mode_none_removes_controls_and_history_and_renames_the_model() -> None:
    body, decision = route(
        {"model": "vendor/plain", "reasoning_effort": "high", "messages": TOOL_TURN, "session_id": "s1"}
    )
    assert decision["endpoint"] == "gpu-box/plain"
    assert body == {
        "model": "plain-7b",
        "messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": "Let me check."},
            {"role": "assistant", "content": None, "tool_calls": TOOL_TURN[2]["tool_calls"]},
            {"role": "tool", "tool_call_id": "call_1", "content": "21C"},
        ],
    }


def test_mode_enabled_turns_effort_into_on_off_and_preservation_keeps_history() -> None:
    body, _ = route(
        {"model": "vendor/switch", "reasoning": {"effort": "low", "exclude": True}, "messages": TOOL_TURN[:3]}
    )
    assert body["reasoning"] == {"enabled": True, "exclude": True}
    assert body["messages"][1] == {
        "role": "assistant",
        "content": "Let me check.",
        "reasoning": "Plain turn.",
        "reasoning_details": TOOL_TURN[1]["reasoning_details"],
    }
    off, _ = route({"model": "vendor/switch", "reasoning_effort": "none"})
    assert off["reasoning"] == {"enabled": False}


def test_unknown_model_goes_to_the_first_provider_unfiltered() -> None:
    body, decision = route({"model": "someone/else", "reasoning_effort": "high", "messages": TOOL_TURN[:3]})
    assert (decision["model"], decision["endpoint"], decision["provider"]) == (None, None, "openrouter")
    assert body["messages"][1]["reasoning_details"] == TOOL_TURN[1]["reasoning_details"]
    assert body["reasoning"] == {"effort": "high"}


def test_a_provider_that_speaks_anthropic_messages_gets_a_translated_request() -> None:
    raw = json.dumps(
        {"model": "vendor/native", "reasoning_effort": "low", "max_tokens": 4000, "messages": TOOL_TURN[:4]}
    )
    prepared = prepare_request(raw.encode(), CATALOG)
    assert (prepared.route.provider.name, prepared.route.wire_api) == ("claude-native", "anthropic-messages")
    assert json.loads(prepared.body) == {
        "model": "vendor/native",
        "messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": [{"type": "text", "text": "Let me check."}]},
            {
                "role": "assistant",
                "content": [
                    # an opaque detail with no format, on an Anthropic route: taken for Anthropic's own
                    {"type": "redacted_thinking", "data": "ENC_1"},
                    {"type": "tool_use", "id": "call_1", "name": "weather", "input": {}},
                ],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "21C"}]},
        ],
        "max_tokens": 4000,
        # the tool loop's turn is both assistant messages (Anthropic joins consecutive turns of one role), and
        # without preservation the first lost its thinking: Anthropic would refuse thinking on, so it is off
        "thinking": {"type": "disabled"},
    }
    assert prepared.adjustments == ["thinking-disabled=history"]


def test_model_must_be_a_string() -> None:
    error = refused({"model": 7})
    assert (error.status, error.code, error.param) == (400, "invalid_request", "model")


def test_pb20_unsupported_effort_never_leaves(shared_dir: Path) -> None:
    case = load_case(shared_dir, "PB-20")
    catalog_case = case["input"]["catalog"]
    endpoint = catalog_case["endpoints"][0]
    toml = f"""
[[providers]]
name = "openrouter"
base_url = "https://openrouter.ai/api/v1"

[[models]]
id = "{catalog_case["model"]}"

[[models.endpoints]]
tag = "{endpoint["tag"]}"
provider = "openrouter"
supported_parameters = {json.dumps(endpoint["supported_parameters"])}
reasoning = {{ supported_efforts = {json.dumps(endpoint["reasoning"]["supported_efforts"])}, default_effort = "{endpoint["reasoning"]["default_effort"]}" }}
"""
    catalog = load_catalog(toml, "pb20.toml")
    with pytest.raises(ApiError) as info:
        prepare_request(json.dumps(case["input"]["request"]).encode(), catalog)
    expected = case["expected"]["proxy_response"]
    assert (info.value.status, info.value.code, info.value.param) == (
        expected["status"],
        expected["error_code_or_type"],
        expected["param"],
    )
    variant = load_catalog(
        toml.replace(f"supported_efforts = {json.dumps(endpoint['reasoning']['supported_efforts'])}, ", ""),
        "pb20-variant.toml",
    )
    prepared = prepare_request(json.dumps(case["input"]["request"]).encode(), variant)
    decision = prepared.route
    assert json.loads(prepared.body)["reasoning"] == {"effort": "xhigh"}
    assert decision.endpoint == endpoint["tag"]


@pytest.mark.parametrize("preserve", ["true", "false"])
def test_pb09_encrypted_detail_kept_on_the_tool_turn_through_the_filter(shared_dir: Path, preserve: str) -> None:
    case = load_case(shared_dir, "PB-09")
    request = case["input"]["request"]
    catalog = load_catalog(
        f"""
[[providers]]
name = "openrouter"
base_url = "https://openrouter.ai/api/v1"

[[models]]
id = "{request["model"]}"
preserve_reasoning = {preserve}

[[models.endpoints]]
tag = "google"
provider = "openrouter"
""",
        "pb09.toml",
    )
    prepared = prepare_request(json.dumps(request).encode(), catalog)
    out = json.loads(prepared.body)
    assert out["messages"][1] == case["expected"]["upstream_request.messages[1]"]


def test_pb10_reasoning_content_needs_preservation_on_other_routes(shared_dir: Path) -> None:
    case = load_case(shared_dir, "PB-10")
    request = case["input"]["request"]
    toml = """
[[providers]]
name = "moonshot"
base_url = "https://api.moonshot.ai/v1"

[[models]]
id = "moonshot/model-c"
preserve_reasoning = {preserve}

[[models.endpoints]]
tag = "moonshot"
provider = "moonshot"
"""
    kept = prepare_request(json.dumps(request).encode(), load_catalog(toml.format(preserve="true"), "c.toml"))
    assert json.loads(kept.body)["messages"][1] == case["expected"]["upstream_request.messages[1]"]
    dropped = prepare_request(json.dumps(request).encode(), load_catalog(toml.format(preserve="false"), "c.toml"))
    assert "reasoning_content" not in json.loads(dropped.body)["messages"][1]


ZAI_CATALOG = load_catalog(
    """
[[providers]]
name = "zai"
base_url = "http://127.0.0.1:12/api/paas/v4"

[[models]]
id = "z-ai/glm-4.7"
reasoning_mode = "effort"
preserve_reasoning = true

[[models.endpoints]]
tag = "zai/glm"
provider = "zai"
model = "glm-4.7"

[[models]]
id = "z-ai/glm-4-flash"
reasoning_mode = "none"

[[models.endpoints]]
tag = "zai/flash"
provider = "zai"
model = "glm-4-flash"
""",
    "zai.toml",
)


def test_a_zai_route_gets_thinking_unless_the_model_does_not_reason() -> None:
    history = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": None, "reasoning_content": "Call the tool.", "tool_calls": []},
    ]
    raw = json.dumps({"model": "z-ai/glm-4.7", "messages": history}).encode()
    prepared = prepare_request(raw, ZAI_CATALOG)
    assert json.loads(prepared.body) == {
        "model": "glm-4.7",
        "messages": history,
        "thinking": {"type": "enabled", "clear_thinking": False},
    }
    raw = json.dumps({"model": "z-ai/glm-4-flash", "messages": [{"role": "user", "content": "Hi"}]}).encode()
    prepared = prepare_request(raw, ZAI_CATALOG)
    assert json.loads(prepared.body) == {"model": "glm-4-flash", "messages": [{"role": "user", "content": "Hi"}]}


def test_an_effort_beside_enabled_false_is_not_routed_on() -> None:
    # enabled: false turns reasoning off whatever effort came with it, so no endpoint is refused for the effort
    raw = json.dumps({"model": "vendor/listed", "reasoning": {"enabled": False, "effort": "xhigh"}}).encode()
    prepared = prepare_request(raw, CATALOG)
    decision = prepared.route
    assert decision.endpoint == "openrouter/listed"
    # (the model's effort mode then moves the effort to its nearest listed level, spec 000 "Reasoning Modes")
    assert json.loads(prepared.body) == {"model": "vendor/listed", "reasoning": {"enabled": False, "effort": "high"}}
