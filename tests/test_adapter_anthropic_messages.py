"""The Anthropic Messages adapter: chat requests translated out, native answers and streams translated back.

Golden translations follow Anthropic's Messages API reference (the shapes of its documented examples); the
answers are the recordings in ``../shared/fixtures/anthropic-messages/``, whose signatures and redacted data
must survive byte for byte, in order, and come back as the same blocks on the next request.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from numi_mw.core.adapters import anthropic_messages
from numi_mw.core.adapters.base import Answer
from numi_mw.core.details import rebuild_reasoning_details
from numi_mw.core.errors import ApiError
from numi_mw.core.providers import provider_rules
from numi_mw.core.request import prepare_request
from numi_mw.core.response import ResponseOptions, choose_rewriter
from numi_mw.core.routing import fixed_route
from tests.conftest import load_case
from tests.response_support import client_view, frame_jsonl, sse_chunks

ROUTE = fixed_route(provider_rules("generic"), wire_api="anthropic-messages")
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a given location",
        "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]},
    },
}
CALL = {"id": "toolu_01", "type": "function", "function": {"name": "get_weather", "arguments": '{"location":"Lisbon"}'}}
SIGNED = {
    "type": "reasoning.text",
    "text": "I will call the tool.",
    "signature": "SIG_A",
    "format": "anthropic-claude-v1",
}


def native(chat: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The Anthropic body numi_mw sends for a chat request, and its adjustments."""
    prepared = prepare_request(json.dumps(chat).encode(), ROUTE)
    return json.loads(prepared.body), prepared.adjustments


# --- requests: one golden translation per rule ---------------------------------------------------------------


def test_system_messages_become_system_and_max_tokens_gets_its_default() -> None:
    body, adjustments = native(
        {
            "model": "claude-sonnet-4-5",
            "messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hello"}],
        }
    )
    assert body == {
        "model": "claude-sonnet-4-5",
        "system": "You are terse.",
        "messages": [{"role": "user", "content": "Hello"}],
        "max_tokens": 4096,
    }
    assert adjustments == []


def test_several_system_parts_become_system_blocks_in_order() -> None:
    body, _ = native(
        {
            "model": "m",
            "messages": [
                {"role": "system", "content": "One."},
                {
                    "role": "developer",
                    "content": [{"type": "text", "text": "Two.", "cache_control": {"type": "ephemeral"}}],
                },
                {"role": "user", "content": "Hi"},
            ],
        }
    )
    assert body["system"] == [
        {"type": "text", "text": "One."},
        {"type": "text", "text": "Two.", "cache_control": {"type": "ephemeral"}},
    ]


def test_user_parts_become_text_and_image_blocks() -> None:
    body, _ = native(
        {
            "model": "m",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is in these images?"},
                        {"type": "image_url", "image_url": {"url": "https://upload.wikimedia.org/ant.jpg"}},
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                    ],
                }
            ],
        }
    )
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in these images?"},
                {"type": "image", "source": {"type": "url", "url": "https://upload.wikimedia.org/ant.jpg"}},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
            ],
        }
    ]


def test_tool_calls_tool_results_tools_and_tool_choice() -> None:
    body, _ = native(
        {
            "model": "m",
            "tools": [WEATHER_TOOL],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "messages": [
                {"role": "user", "content": "Weather in Lisbon and Porto?"},
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        CALL,
                        {**CALL, "id": "toolu_02", "function": {"name": "get_weather", "arguments": ""}},
                    ],
                },
                {"role": "tool", "tool_call_id": "toolu_01", "content": "21C"},
                {"role": "tool", "tool_call_id": "toolu_02", "content": [{"type": "text", "text": "18C"}]},
                {"role": "user", "content": "Thanks."},
            ],
        }
    )
    assert body["tools"] == [
        {
            "name": "get_weather",
            "description": "Get the current weather in a given location",
            "input_schema": {
                "type": "object",
                "properties": {"location": {"type": "string"}},
                "required": ["location"],
            },
        }
    ]
    assert body["tool_choice"] == {"type": "tool", "name": "get_weather"}
    assert body["messages"] == [
        {"role": "user", "content": "Weather in Lisbon and Porto?"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"location": "Lisbon"}},
                {"type": "tool_use", "id": "toolu_02", "name": "get_weather", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01", "content": "21C"},
                {"type": "tool_result", "tool_use_id": "toolu_02", "content": [{"type": "text", "text": "18C"}]},
                {"type": "text", "text": "Thanks."},
            ],
        },
    ]


@pytest.mark.parametrize(
    ("choice", "parallel", "expected"),
    [
        ("auto", None, {"type": "auto"}),
        ("required", None, {"type": "any"}),
        ("none", None, {"type": "none"}),
        ("auto", False, {"type": "auto", "disable_parallel_tool_use": True}),
        (None, False, {"type": "auto", "disable_parallel_tool_use": True}),
    ],
)
def test_tool_choice_forms(choice: str | None, parallel: bool | None, expected: dict[str, Any]) -> None:
    chat: dict[str, Any] = {"model": "m", "tools": [WEATHER_TOOL], "messages": [{"role": "user", "content": "Hi"}]}
    if choice is not None:
        chat["tool_choice"] = choice
    if parallel is not None:
        chat["parallel_tool_calls"] = parallel
    assert native(chat)[0]["tool_choice"] == expected


def test_stop_output_limit_sampling_user_and_unknown_parameters() -> None:
    body, adjustments = native(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "Hi"}],
            "stop": "END",
            "max_completion_tokens": 1000,
            "max_tokens": 2000,
            "temperature": 0.5,
            "top_p": 0.9,
            "top_k": 40,
            "user": "user-7",
            "seed": 7,
            "n": 1,
        }
    )
    assert body == {
        "model": "m",
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 1000,
        "stop_sequences": ["END"],
        "metadata": {"user_id": "user-7"},
        "top_k": 40,
        "temperature": 0.5,
        "top_p": 0.9,
    }
    assert adjustments == ["parameters-dropped=n+seed"]


def calling_with(arguments: str) -> dict[str, Any]:
    """A chat request whose one assistant message calls a tool with ``arguments``."""
    call = {**CALL, "function": {"name": "f", "arguments": arguments}}
    return {"model": "m", "messages": [{"role": "assistant", "content": None, "tool_calls": [call]}]}


def test_a_tool_call_whose_arguments_are_not_an_object_is_a_400_that_names_it() -> None:
    with pytest.raises(ApiError) as info:
        native(calling_with("[1]"))
    assert (info.value.status, info.value.code, info.value.param) == (
        400,
        "invalid_request",
        "messages[0].tool_calls[0].function.arguments",
    )


@pytest.mark.parametrize("depth", [5, 900])
def test_tool_call_arguments_nested_deep_but_decodable_go_as_their_object(depth: int) -> None:
    arguments = '{"a":' * depth + "1" + "}" * depth
    body, _ = native(calling_with(arguments))
    assert json.dumps(body["messages"][0]["content"][0]["input"], separators=(",", ":")) == arguments


def test_tool_call_arguments_nested_past_the_recursion_limit_are_a_400_that_names_them() -> None:
    # msgspec's decode raises RecursionError past the interpreter's limit: the request is refused, not a 500
    arguments = '{"a":' * 5000 + "1" + "}" * 5000
    with pytest.raises(ApiError) as info:
        native(calling_with(arguments))
    assert (info.value.status, info.value.code, info.value.param, info.value.message) == (
        400,
        "invalid_request",
        "messages[0].tool_calls[0].function.arguments",
        "messages[0].tool_calls[0].function.arguments is nested too deeply to decode.",
    )


@pytest.mark.parametrize("tier", [{"type": "auto"}, ["auto"], 5, "flex"])
def test_a_service_tier_anthropic_does_not_define_is_dropped_and_reported(tier: Any) -> None:
    body, adjustments = native({"model": "m", "messages": [{"role": "user", "content": "Hi"}], "service_tier": tier})
    assert "service_tier" not in body
    assert adjustments == ["parameters-dropped=service_tier"]


@pytest.mark.parametrize("own", ["x", [1], 5])
@pytest.mark.parametrize(
    ("chat", "adaptive"),
    [
        ({"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}}, False),
        ({"reasoning_effort": "high"}, True),
    ],
)
def test_an_output_config_the_translation_adds_to_that_is_no_object_is_a_400_that_names_it(
    own: Any, chat: dict[str, Any], adaptive: bool
) -> None:
    route = type(ROUTE)(ROUTE.rules, ROUTE.wire_api, adaptive=adaptive)
    raw = json.dumps({"model": "m", "messages": [{"role": "user", "content": "Hi"}], "output_config": own, **chat})
    with pytest.raises(ApiError) as info:
        prepare_request(raw.encode(), route)
    assert (info.value.status, info.value.code, info.value.param) == (400, "invalid_request", "output_config")


def test_an_output_config_of_anthropics_keeps_its_fields_beside_the_format() -> None:
    body, _ = native(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "Hi"}],
            "output_config": {"effort": "low"},
            "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "object"}}},
        }
    )
    assert body["output_config"] == {"effort": "low", "format": {"type": "json_schema", "schema": {"type": "object"}}}


@pytest.mark.parametrize(
    ("fields", "metadata", "adjustments"),
    [
        ({"user": "u1", "metadata": {"user_id": "u2"}}, {"user_id": "u1"}, ["parameters-dropped=metadata"]),
        ({"user": "u1", "metadata": {"user_id": "u1"}}, {"user_id": "u1"}, []),
        ({"metadata": {"user_id": "u2"}}, {"user_id": "u2"}, []),
        ({"user": "u1", "metadata": {"tag": "x"}}, {"user_id": "u1"}, ["parameters-dropped=metadata"]),
    ],
)
def test_user_and_anthropics_own_metadata(fields: dict[str, Any], metadata: Any, adjustments: list[str]) -> None:
    body, made = native({"model": "m", "messages": [{"role": "user", "content": "Hi"}], **fields})
    assert (body["metadata"], made) == (metadata, adjustments)


def test_every_parameter_not_sent_is_in_one_adjustment() -> None:
    _, adjustments = native(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "Hi"}],
            "metadata": {"user_id": "v"},
            "user": "u",
            "seed": 1,
            "service_tier": "flex",
        }
    )
    assert adjustments == ["parameters-dropped=metadata+seed+service_tier"]


def test_a_part_the_translation_nests_past_the_recursion_limit_is_a_400() -> None:
    # a tool message's parts go two levels deeper in Anthropic's body than in the chat body: near the limit, one
    # that decoded may not encode, and the request is refused as too deep, not a 500 (every depth around the
    # limit, since where it lies moves with the stack)
    outcomes = set()
    for depth in range(900, 1100):
        deep = '{"a":' * depth + "1" + "}" * depth
        raw = (
            '{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":'
            '[{"id":"t1","type":"function","function":{"name":"f","arguments":"{}"}}]},'
            '{"role":"tool","tool_call_id":"t1","content":[{"type":"x","v":' + deep + "}]}]}"
        )
        try:
            prepare_request(raw.encode(), ROUTE)
            outcomes.add("sent")
        except ApiError as error:
            outcomes.add((error.status, error.code, error.message))
    assert outcomes == {"sent", (400, "invalid_json", "The request body is nested too deeply to decode; flatten it.")}


def test_anthropics_own_service_tier_passes() -> None:
    body, adjustments = native({"model": "m", "messages": [{"role": "user", "content": "Hi"}], "service_tier": "auto"})
    assert (body["service_tier"], adjustments) == ("auto", [])


@pytest.mark.parametrize("content", [5, {"a": 1}, True])
def test_a_tool_message_whose_content_is_of_the_wrong_type_is_a_400_that_names_it(content: Any) -> None:
    with pytest.raises(ApiError) as info:
        native(
            {
                "model": "m",
                "messages": [
                    {"role": "user", "content": "Q"},
                    {"role": "assistant", "content": None, "tool_calls": [CALL]},
                    {"role": "tool", "tool_call_id": "toolu_01", "content": content},
                ],
            }
        )
    assert (info.value.status, info.value.code, info.value.param) == (400, "invalid_request", "messages[2].content")


def test_a_tool_messages_text_and_parts_become_its_result() -> None:
    body, _ = native(
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": "Q"},
                {"role": "assistant", "content": None, "tool_calls": [CALL, {**CALL, "id": "toolu_02"}]},
                {"role": "tool", "tool_call_id": "toolu_01", "content": "21 C"},
                {"role": "tool", "tool_call_id": "toolu_02", "content": [{"type": "text", "text": "22 C"}]},
            ],
        }
    )
    assert body["messages"][2] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01", "content": "21 C"},
            {"type": "tool_result", "tool_use_id": "toolu_02", "content": [{"type": "text", "text": "22 C"}]},
        ],
    }


# --- reasoning replay -------------------------------------------------------------------------------------------


def test_pb07_signed_thinking_is_replayed_first_on_the_tool_turn(shared_dir: Path) -> None:
    case = load_case(shared_dir, "PB-07")
    assert case["input"]["route"] == "native Anthropic Messages adapter"
    body, adjustments = native(case["input"]["request"])
    expected = case["expected"]["upstream_request"]
    assert {key: body[key] for key in expected} == expected
    assert adjustments == []


def test_signed_text_and_redacted_state_become_blocks_in_their_order() -> None:
    redacted = {"type": "reasoning.encrypted", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a", "format": "anthropic-claude-v1"}
    second = {**SIGNED, "text": "Then answer.", "signature": "SIG_B"}
    body, adjustments = native(
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": "Q"},
                {
                    "role": "assistant",
                    "content": "A.",
                    "reasoning": "x",
                    "reasoning_details": [SIGNED, redacted, second],
                },
                {"role": "user", "content": "Q2"},
            ],
        }
    )
    assert body["messages"][1] == {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "I will call the tool.", "signature": "SIG_A"},
            {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"},
            {"type": "thinking", "thinking": "Then answer.", "signature": "SIG_B"},
            {"type": "text", "text": "A."},
        ],
    }
    assert adjustments == []


def test_unsigned_and_foreign_reasoning_is_never_sent_as_thinking_and_is_counted() -> None:
    body, adjustments = native(
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": "Q"},
                {
                    "role": "assistant",
                    "content": "A.",
                    "reasoning_details": [
                        {"type": "reasoning.text", "text": "unsigned", "format": "unknown"},
                        {"type": "reasoning.summary", "summary": "S", "format": "openai-responses-v1"},
                        {"type": "reasoning.encrypted", "data": "gAAA", "id": "rs_1", "format": "openai-responses-v1"},
                    ],
                },
                {"role": "assistant", "content": "B.", "reasoning_content": "plain text only"},
                {"role": "user", "content": "Q2"},
            ],
        }
    )
    assert body["messages"][1:3] == [
        {"role": "assistant", "content": [{"type": "text", "text": "A."}]},
        {"role": "assistant", "content": [{"type": "text", "text": "B."}]},
    ]
    assert adjustments == ["foreign-reasoning-dropped=2", "unsigned-reasoning-dropped=2"]


def test_thinking_on_with_a_tool_turn_that_lost_its_thinking_block_turns_thinking_off() -> None:
    # Anthropic: "a final assistant message must start with a thinking block ... To avoid this requirement,
    # disable thinking". The client dropped the block, so numi_mw turns thinking off for this request.
    body, adjustments = native(
        {
            "model": "m",
            "reasoning_effort": "low",
            "messages": [
                {"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": None, "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "toolu_01", "content": "21C"},
            ],
        }
    )
    assert body["thinking"] == {"type": "disabled"}
    assert adjustments == ["thinking-disabled=history"]


def test_thinking_on_with_the_tool_turn_signed_keeps_thinking() -> None:
    body, adjustments = native(
        {
            "model": "m",
            "reasoning_effort": "low",
            "messages": [
                {"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": None, "reasoning_details": [SIGNED], "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "toolu_01", "content": "21C"},
            ],
        }
    )
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert body["messages"][1]["content"][0] == {
        "type": "thinking",
        "thinking": "I will call the tool.",
        "signature": "SIG_A",
    }
    assert adjustments == []


def test_thinking_off_drops_thinking_from_a_final_assistant_message() -> None:
    body, adjustments = native(
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": "Q"},
                {"role": "assistant", "content": "Sure,", "reasoning_details": [SIGNED]},
            ],
        }
    )
    assert body["messages"][-1] == {"role": "assistant", "content": [{"type": "text", "text": "Sure,"}]}
    assert adjustments == ["thinking-blocks-dropped"]


def test_forced_tool_choice_with_manual_thinking_turns_thinking_off() -> None:
    body, adjustments = native(
        {
            "model": "m",
            "reasoning_effort": "low",
            "tools": [WEATHER_TOOL],
            "tool_choice": "required",
            "messages": [{"role": "user", "content": "Q"}],
        }
    )
    assert (body["thinking"], body["tool_choice"]) == ({"type": "disabled"}, {"type": "any"})
    assert adjustments == ["thinking-disabled=tool-choice"]


def test_sampling_that_thinking_refuses_is_removed_and_reported() -> None:
    body, adjustments = native(
        {
            "model": "m",
            "reasoning_effort": "low",
            "temperature": 0.2,
            "top_k": 5,
            "top_p": 0.5,
            "messages": [{"role": "user", "content": "Q"}],
        }
    )
    assert not {"temperature", "top_k", "top_p"} & set(body)
    assert adjustments == ["temperature-removed", "top-k-removed", "top-p-removed"]
    body, adjustments = native(
        {"model": "m", "reasoning_effort": "low", "temperature": 1, "top_p": 0.96, "messages": []}
    )
    assert (body["temperature"], body["top_p"], adjustments) == (1, 0.96, [])


# --- controls ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("chat", "thinking"),
    [
        ({"reasoning_effort": "high", "max_tokens": 20000}, {"type": "enabled", "budget_tokens": 16384}),
        ({"reasoning_effort": "high"}, {"type": "enabled", "budget_tokens": 16384}),  # the default leaves room
        ({"reasoning": {"max_tokens": 3000}, "max_tokens": 2000}, {"type": "enabled", "budget_tokens": 3000}),
        ({"reasoning": {"effort": "none"}}, {"type": "disabled"}),
        ({"reasoning": {"enabled": False, "effort": "high"}}, {"type": "disabled"}),
        ({"reasoning": {"enabled": True}}, {"type": "enabled", "budget_tokens": 8192}),  # medium
    ],
)
def test_reasoning_controls_become_thinking(chat: dict[str, Any], thinking: dict[str, Any]) -> None:
    body, _ = native({"model": "m", "messages": [{"role": "user", "content": "Q"}], **chat})
    assert body["thinking"] == thinking


def test_an_effort_whose_budget_cannot_fit_sends_no_thinking() -> None:
    body, _ = native({"model": "m", "reasoning_effort": "low", "max_tokens": 1000, "messages": []})
    assert "thinking" not in body


def test_an_adaptive_model_gets_adaptive_thinking_and_an_output_effort() -> None:
    route = fixed_route(provider_rules("generic"), wire_api="anthropic-messages")
    adaptive = type(route)(route.rules, route.wire_api, adaptive=True)
    for effort, expected in (("high", "high"), ("minimal", "low"), ("xhigh", "max")):
        raw = json.dumps({"model": "m", "reasoning_effort": effort, "max_tokens": 64000, "messages": []}).encode()
        body = json.loads(prepare_request(raw, adaptive).body)
        assert (body["thinking"], body["output_config"]) == ({"type": "adaptive"}, {"effort": expected})
    raw = json.dumps({"model": "m", "reasoning": {"max_tokens": 5000}, "max_tokens": 8000, "messages": []}).encode()
    assert json.loads(prepare_request(raw, adaptive).body)["thinking"] == {"type": "enabled", "budget_tokens": 5000}


# --- answers: buffered ------------------------------------------------------------------------------------------

FIXTURES = "fixtures/anthropic-messages"
BUFFERED = [
    "anthropic-opus-5-thinking-high.buffered.json",
    "anthropic-sonnet-4-thinking-text-tool-use.buffered.json",
    "anthropic-sonnet-4.5-redacted-thinking.buffered.json",
    "anthropic-sonnet-4.5-thinking-signature.buffered.json",
    "anthropic-sonnet-4.6-thinking-tool-use.buffered.json",
]
STREAMS = [
    "anthropic-haiku-4.5-after-tool-result.sse",
    "anthropic-haiku-4.5-thinking-then-tool-use.sse",
    "anthropic-sonnet-4-thinking-stream.sse",
    "anthropic-sonnet-4.5-thinking-signature.stream.jsonl",
    "anthropic-sonnet-4.6-thinking-server-tool.sse",
    "anthropic-sonnet-5-summarized-thinking.stream.jsonl",
    "gateway-grok-4.5-anthropic-format-unsigned-thinking.sse",
]
OPTIONS = ResponseOptions(wire_api="anthropic-messages", answer=Answer("claude", True, 1790000000))


def expected_blocks(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The thinking blocks a provider sent, as numi_mw must send them back (an empty signature is none)."""
    out = []
    for block in blocks:
        if block["type"] == "thinking" and block.get("signature"):
            out.append({"type": "thinking", "thinking": block["thinking"], "signature": block["signature"]})
        elif block["type"] == "redacted_thinking":
            out.append({"type": "redacted_thinking", "data": block["data"]})
    return out


def next_request(message: dict[str, Any]) -> dict[str, Any]:
    """The Anthropic body for the turn after ``message`` (the assistant message a client stores)."""
    body, _ = native(
        {
            "model": "m",
            "reasoning": {"max_tokens": 2048},
            "max_tokens": 8000,
            "messages": [{"role": "user", "content": "Q"}, message, {"role": "user", "content": "More."}],
        }
    )
    return body


@pytest.mark.parametrize("name", BUFFERED)
def test_buffered_answers_translate_with_every_signature_and_come_back_as_the_same_blocks(
    shared_dir: Path, name: str
) -> None:
    raw = (shared_dir / FIXTURES / name).read_bytes()
    recorded = json.loads(raw)
    rewriter = choose_rewriter(OPTIONS, 200, "application/json")
    assert rewriter is not None
    chat = json.loads(rewriter.feed(raw) + rewriter.finish())
    message = chat["choices"][0]["message"]
    blocks = recorded["content"]
    assert message["content"] == ("".join(b["text"] for b in blocks if b["type"] == "text") or None)
    thinking = [b["thinking"] for b in blocks if b["type"] == "thinking"]
    assert message.get("reasoning") == ("".join(thinking) if thinking else None)
    kept = [d.get("signature") or d.get("data") for d in message.get("reasoning_details", [])]
    assert kept == [
        b.get("signature") or b.get("data") for b in blocks if b["type"] in ("thinking", "redacted_thinking")
    ]
    calls = [b for b in blocks if b["type"] == "tool_use"]
    assert [
        (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message.get("tool_calls", [])
    ] == [(b["id"], b["name"], b["input"]) for b in calls]
    assert (
        chat["choices"][0]["finish_reason"] == {"end_turn": "stop", "tool_use": "tool_calls"}[recorded["stop_reason"]]
    )
    replayed = next_request({k: v for k, v in message.items() if k != "reasoning"})["messages"][1]["content"]
    assert [b for b in replayed if b["type"] in ("thinking", "redacted_thinking")] == expected_blocks(blocks)


def test_buffered_usage_counts_cache_reads_and_writes_as_prompt_tokens(shared_dir: Path) -> None:
    raw = (shared_dir / FIXTURES / "anthropic-opus-5-thinking-high.buffered.json").read_bytes()
    usage = json.loads(raw)["usage"]
    chat = anthropic_messages.completion(json.loads(raw), Answer())
    prompt = usage["input_tokens"] + usage["cache_read_input_tokens"] + usage["cache_creation_input_tokens"]
    assert chat["usage"] == {
        "prompt_tokens": prompt,
        "completion_tokens": usage["output_tokens"],
        "total_tokens": prompt + usage["output_tokens"],
        "prompt_tokens_details": {
            "cached_tokens": usage["cache_read_input_tokens"],
            "cache_write_tokens": usage["cache_creation_input_tokens"],
        },
        "completion_tokens_details": {"reasoning_tokens": usage["output_tokens_details"]["thinking_tokens"]},
    }


# --- answers: streams -------------------------------------------------------------------------------------------


def stream_body(shared: Path, name: str) -> bytes:
    raw = (shared / FIXTURES / name).read_bytes()
    return frame_jsonl(raw) if name.endswith(".jsonl") else raw


def native_events(body: bytes) -> list[dict[str, Any]]:
    return [chunk for chunk in sse_chunks(body) if isinstance(chunk, dict)]


def translate_stream(body: bytes, cuts: tuple[int, ...] = ()) -> bytes:
    rewriter = choose_rewriter(OPTIONS, 200, "text/event-stream")
    assert rewriter is not None
    bounds = [0, *cuts, len(body)]
    return b"".join(rewriter.feed(body[a:b]) for a, b in itertools.pairwise(bounds)) + rewriter.finish()


@pytest.mark.parametrize("name", STREAMS)
def test_recorded_streams_translate_with_every_signature_in_order_and_come_back_as_the_same_blocks(
    shared_dir: Path, name: str
) -> None:
    body = stream_body(shared_dir, name)
    events = native_events(body)
    out = translate_stream(body)
    assert out.endswith(b"data: [DONE]\n\n")
    view = client_view(sse_chunks(out))
    deltas = [e["delta"] for e in events if e.get("type") == "content_block_delta"]
    assert view.reasoning == "".join(d.get("thinking", "") for d in deltas if d["type"] == "thinking_delta")
    assert view.content == "".join(d.get("text", "") for d in deltas if d["type"] == "text_delta")
    rebuilt = rebuild_reasoning_details(view.entries)
    signatures = [d["signature"] for d in deltas if d["type"] == "signature_delta" and d["signature"]]
    assert [d.get("signature") for d in rebuilt] == (signatures or [None] * len(rebuilt))
    assert view.sdk_message.get("reasoning_details", []) == rebuilt  # openai's .stream() helper agrees
    stop = next(e["delta"]["stop_reason"] for e in events if e.get("type") == "message_delta")
    assert view.finish_reason == {"end_turn": "stop", "tool_use": "tool_calls"}[stop]
    final = sse_chunks(out)[-1]
    counted: dict[str, Any] = {}
    for event in events:
        if event.get("type") == "message_start":
            counted.update(event["message"]["usage"])
        elif event.get("type") == "message_delta":
            counted.update(event["usage"])
    prompt = (
        counted["input_tokens"]
        + counted.get("cache_read_input_tokens", 0)
        + counted.get("cache_creation_input_tokens", 0)
    )
    assert final["choices"] == []
    assert (final["usage"]["prompt_tokens"], final["usage"]["completion_tokens"]) == (prompt, counted["output_tokens"])
    # the next turn gives back each signed thinking block the provider sent: its deltas' text and its signature
    blocks: dict[int, dict[str, Any]] = {}
    for event in events:
        if event.get("type") == "content_block_start" and event["content_block"]["type"] == "thinking":
            blocks[event["index"]] = {"type": "thinking", "thinking": "", "signature": ""}
        elif event.get("type") == "content_block_delta" and event["index"] in blocks:
            delta = event["delta"]
            key = "thinking" if delta["type"] == "thinking_delta" else "signature"
            blocks[event["index"]][key] += delta.get(key, "")
    message: dict[str, Any] = {"role": "assistant", "content": view.content or None, "reasoning_details": rebuilt}
    if view.sdk_message.get("tool_calls"):
        message["tool_calls"] = view.sdk_message["tool_calls"]
    replayed = next_request(message)["messages"][1]["content"]
    assert [b for b in replayed if b["type"] == "thinking"] == expected_blocks(list(blocks.values()))


def test_any_split_of_a_stream_gives_the_same_bytes(shared_dir: Path) -> None:
    body = stream_body(shared_dir, "anthropic-haiku-4.5-thinking-then-tool-use.sse")
    whole = translate_stream(body)
    for step in (1, 7, 64):
        assert translate_stream(body, tuple(range(step, len(body), step))) == whole


def chunks_of(events: list[dict[str, Any]], include_usage: bool = False) -> list[dict[str, Any]]:
    options = ResponseOptions(wire_api="anthropic-messages", answer=Answer("claude", include_usage, 7))
    rewriter = choose_rewriter(options, 200, "text/event-stream")
    assert rewriter is not None
    body = b"".join(b"event: x\ndata: " + json.dumps(e).encode() + b"\n\n" for e in events)
    return sse_chunks(rewriter.feed(body) + rewriter.finish())


START = {
    "type": "message_start",
    "message": {"id": "msg_1", "model": "claude", "usage": {"input_tokens": 5, "output_tokens": 1}},
}
END = [
    {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 9}},
    {"type": "message_stop"},
]


def test_pb06_a_signature_only_thinking_block_rebuilds_to_one_signed_detail(shared_dir: Path) -> None:
    case = load_case(shared_dir, "PB-06")
    view = client_view(chunks_of(case["input"]))
    expected = case["expected"]["client_stream"]
    rebuilt = rebuild_reasoning_details(view.entries)
    assert len(rebuilt) == expected["rebuilt_reasoning_details_length"]
    entry = expected["must_contain_one_detail_entry"]
    assert {k: rebuilt[0][k] for k in entry} == entry
    assert rebuilt[0].get("text", "") == ""
    assert (view.reasoning, view.content, view.finish_reason) == (
        expected["concat_delta_reasoning"],
        expected["concat_delta_content"],
        expected["finish_reason"],
    )
    replayed = next_request({"role": "assistant", "content": "Done.", "reasoning_details": rebuilt})
    assert replayed["messages"][1]["content"][0] == case["expected"]["on_replay_to_anthropic"]["assistant.content[0]"]


def test_a_signature_that_arrives_after_the_next_block_began_reaches_its_own_detail() -> None:
    # llama.cpp keeps the thinking block open while the text block streams, and signs it at the end
    events = [
        START,
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Spell it."}},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Three."}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "SIG_LATE"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_stop", "index": 1},
        *END,
    ]
    view = client_view(chunks_of(events))
    assert rebuild_reasoning_details(view.entries) == [
        {
            "type": "reasoning.text",
            "text": "Spell it.",
            "format": "anthropic-claude-v1",
            "index": 0,
            "signature": "SIG_LATE",
        }
    ]
    assert (view.reasoning, view.content) == ("Spell it.", "Three.")


def test_a_text_block_before_the_thinking_block_and_a_whole_redacted_block() -> None:
    events = [
        START,
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": "Hm. "}},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "redacted_thinking", "data": "REDACTED=="},
        },
        {"type": "content_block_stop", "index": 1},
        {
            "type": "content_block_start",
            "index": 2,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""},
        },
        {"type": "content_block_delta", "index": 2, "delta": {"type": "thinking_delta", "thinking": "Plan."}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "signature_delta", "signature": "SIG"}},
        {"type": "content_block_stop", "index": 2},
        *END,
    ]
    view = client_view(chunks_of(events))
    assert rebuild_reasoning_details(view.entries) == [
        {"type": "reasoning.encrypted", "data": "REDACTED==", "format": "anthropic-claude-v1", "index": 0},
        {"type": "reasoning.text", "text": "Plan.", "format": "anthropic-claude-v1", "index": 1, "signature": "SIG"},
    ]
    assert (view.reasoning, view.content, view.finish_reason) == ("Plan.", "Hm. ", "stop")


def test_null_counts_in_message_delta_keep_message_starts() -> None:
    # Anthropic's MessageDeltaUsage may hold null input and cache counts; its SDK's accumulator keeps the earlier
    # count then, so prompt_tokens is input + cache reads + cache writes from message_start
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "model": "claude",
            "usage": {"input_tokens": 100, "cache_read_input_tokens": 50, "cache_creation_input_tokens": 10},
        },
    }
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn"},
        "usage": {
            "output_tokens": 20,
            "input_tokens": None,
            "cache_read_input_tokens": None,
            "cache_creation_input_tokens": None,
        },
    }
    last = chunks_of([start, delta, {"type": "message_stop"}], include_usage=True)[-1]
    assert last["usage"] == {
        "prompt_tokens": 160,
        "completion_tokens": 20,
        "total_tokens": 180,
        "prompt_tokens_details": {"cached_tokens": 50, "cache_write_tokens": 10},
    }


def test_usage_comes_in_its_own_chunk_only_when_asked_for() -> None:
    events = [START, *END]
    assert [c["choices"] for c in chunks_of(events)][-1] == [{"index": 0, "delta": {}, "finish_reason": "stop"}]
    last = chunks_of(events, include_usage=True)[-1]
    assert (last["choices"], last["usage"]) == ([], {"prompt_tokens": 5, "completion_tokens": 9, "total_tokens": 14})


def test_an_error_event_and_a_stream_cut_before_message_stop_end_with_the_error_event() -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    chunks = chunks_of([START, error])
    # the error chunk repeats the id, created time and model of the stream's chunks
    assert chunks[-1] == {
        "id": "msg_1",
        "object": "chat.completion.chunk",
        "created": 7,
        "model": "claude",
        "error": {
            "message": "The upstream reported an error: overloaded_error: Overloaded",
            "type": "upstream_unavailable",
            "code": 502,
            "param": None,
        },
        "choices": [],
    }
    cut = chunks_of(
        [START, {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": "Hi"}}]
    )
    assert (
        cut[-1]["error"]["message"]
        == "The upstream stream ended before its message_stop event; the answer is incomplete."
    )


def test_an_anthropic_error_body_sent_with_a_success_status_is_a_502_with_its_message() -> None:
    native_error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    with pytest.raises(ApiError) as info:
        anthropic_messages.completion(native_error, Answer("claude", False, 1))
    assert (info.value.status, info.value.code, info.value.message) == (
        502,
        "upstream_unavailable",
        "The upstream reported an error: overloaded_error: Overloaded",
    )


def test_an_anthropic_error_body_becomes_the_openai_style_error_body() -> None:
    rewriter = choose_rewriter(OPTIONS, 529, "application/json")
    assert rewriter is not None
    body = b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'
    assert json.loads(rewriter.feed(body) + rewriter.finish()) == {
        "error": {"message": "Overloaded", "type": "overloaded_error", "code": "overloaded_error", "param": None}
    }
    assert rewriter.status is None  # the upstream's status stays
    rewriter = choose_rewriter(OPTIONS, 529, "application/json")
    assert rewriter is not None  # with a byte order mark first (RFC 8259 section 8.1), the same
    assert json.loads(rewriter.feed(b"\xef\xbb\xbf" + body) + rewriter.finish())["error"]["type"] == "overloaded_error"


# --- fixes from review: requests Anthropic would refuse, and what must not be lost -------------------------


def test_an_explicit_budget_gets_the_default_output_room_above_it() -> None:
    body, _ = native({"model": "m", "reasoning": {"max_tokens": 5000}, "messages": [{"role": "user", "content": "Q"}]})
    assert (body["max_tokens"], body["thinking"]) == (9096, {"type": "enabled", "budget_tokens": 5000})


@pytest.mark.parametrize(
    "controls",
    [{}, {"reasoning_effort": "low"}, {"reasoning": {"max_tokens": 2000}}, {"reasoning": {"effort": "none"}}],
)
def test_anthropics_own_thinking_budget_gets_the_default_output_room_above_it(controls: dict[str, Any]) -> None:
    # the native thinking object goes as it is whatever the controls say, so the default max_tokens is above its
    # budget (Anthropic refuses budget_tokens >= max_tokens)
    thinking = {"type": "enabled", "budget_tokens": 8000}
    body, _ = native({"model": "m", "thinking": thinking, "messages": [{"role": "user", "content": "Q"}], **controls})
    assert (body["max_tokens"], body["thinking"]) == (12096, thinking)


def test_anthropics_own_thinking_budget_written_as_a_whole_float_counts() -> None:
    thinking = {"type": "enabled", "budget_tokens": 8000.0}
    body, _ = native({"model": "m", "thinking": thinking, "messages": [{"role": "user", "content": "Q"}]})
    assert (body["max_tokens"], body["thinking"]) == (12096, thinking)


def test_an_adaptive_model_keeps_the_requests_own_thinking() -> None:
    adaptive = type(ROUTE)(ROUTE.rules, ROUTE.wire_api, adaptive=True)
    thinking = {"type": "enabled", "budget_tokens": 8000}
    raw = json.dumps({"model": "m", "thinking": thinking, "messages": [{"role": "user", "content": "Q"}]}).encode()
    prepared = prepare_request(raw, adaptive)
    body = json.loads(prepared.body)
    assert (body["max_tokens"], body["thinking"], "output_config" in body) == (12096, thinking, False)
    assert prepared.adjustments == []


def test_anthropics_own_thinking_beside_an_explicit_max_tokens_keeps_it() -> None:
    thinking = {"type": "enabled", "budget_tokens": 8000}
    body, _ = native(
        {"model": "m", "thinking": thinking, "max_tokens": 9000, "messages": [{"role": "user", "content": "Q"}]}
    )
    assert (body["max_tokens"], body["thinking"]) == (9000, thinking)


def test_a_prefill_with_thinking_on_turns_thinking_off() -> None:
    # Anthropic: "Prefilling is only available for non-extended thinking modes"
    body, adjustments = native(
        {
            "model": "m",
            "reasoning_effort": "high",
            "max_tokens": 20000,
            "messages": [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "Sure"}],
        }
    )
    assert (body["thinking"], body["messages"][-1]) == (
        {"type": "disabled"},
        {"role": "assistant", "content": [{"type": "text", "text": "Sure"}]},
    )
    assert adjustments == ["thinking-disabled=prefill"]


def test_a_multi_step_tool_loop_keeps_thinking_when_its_first_step_is_signed() -> None:
    # without interleaved thinking Claude thinks once per assistant turn: later steps carry no thinking block
    second = {**CALL, "id": "toolu_02"}
    body, adjustments = native(
        {
            "model": "m",
            "reasoning_effort": "low",
            "messages": [
                {"role": "user", "content": "Weather in Lisbon, then Porto?"},
                {"role": "assistant", "content": None, "reasoning_details": [SIGNED], "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "toolu_01", "content": "21C"},
                {"role": "assistant", "content": None, "tool_calls": [second]},
                {"role": "tool", "tool_call_id": "toolu_02", "content": "18C"},
            ],
        }
    )
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert adjustments == []
    # ... and turns it off when the loop's first step lost its block
    body, adjustments = native(
        {
            "model": "m",
            "reasoning_effort": "low",
            "messages": [
                {"role": "user", "content": "Weather in Lisbon, then Porto?"},
                {"role": "assistant", "content": None, "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "toolu_01", "content": "21C"},
                {"role": "assistant", "content": None, "reasoning_details": [SIGNED], "tool_calls": [second]},
                {"role": "tool", "tool_call_id": "toolu_02", "content": "18C"},
            ],
        }
    )
    assert (body["thinking"], adjustments) == ({"type": "disabled"}, ["thinking-disabled=history"])


@pytest.mark.parametrize(
    ("chat", "expected", "adjustments"),
    [
        ({"user": "u1", "metadata": {"k": "v"}}, {"metadata": {"user_id": "u1"}}, ["parameters-dropped=metadata"]),
        ({"metadata": {"user_id": "u2"}}, {"metadata": {"user_id": "u2"}}, []),
        ({"service_tier": "auto"}, {"service_tier": "auto"}, []),
        ({"service_tier": "flex"}, {}, ["parameters-dropped=service_tier"]),
        ({"max_tokens": 1500.0}, {"max_tokens": 1500}, []),
        (
            {"tool_choice": {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": []}}},
            {},
            ["tool-choice-dropped"],
        ),
    ],
)
def test_fields_anthropic_reads_differently(
    chat: dict[str, Any], expected: dict[str, Any], adjustments: list[str]
) -> None:
    body, notes = native({"model": "m", "messages": [{"role": "user", "content": "Q"}], **chat})
    assert {k: v for k, v in body.items() if k in expected} == expected
    assert not {"metadata", "service_tier", "tool_choice"} - set(expected) & set(body)
    assert notes == adjustments


def test_a_foreign_detail_and_its_plain_text_count_once() -> None:
    _, adjustments = native(
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": "Q"},
                {
                    "role": "assistant",
                    "content": "A",
                    "reasoning": "Summary.",
                    "reasoning_details": [
                        {"type": "reasoning.summary", "summary": "Summary.", "format": "openai-responses-v1"}
                    ],
                },
                {"role": "user", "content": "Q2"},
            ],
        }
    )
    assert adjustments == ["foreign-reasoning-dropped=1"]


@pytest.mark.parametrize(("status", "media"), [(200, "text/html"), (200, None), (200, "text/plain")])
def test_a_successful_answer_that_is_not_the_wire_apis_is_a_502(status: int, media: str | None) -> None:
    rewriter = choose_rewriter(OPTIONS, status, media)
    assert rewriter is not None
    body = rewriter.feed(b"<html>x</html>") + rewriter.finish()
    assert rewriter.status == 502
    assert json.loads(body)["error"]["code"] == "upstream_unavailable"


@pytest.mark.parametrize(
    ("chat", "max_tokens", "thinking"),
    [
        ({}, 4096, None),
        ({"reasoning_effort": "low"}, 4096 + 2048, {"type": "enabled", "budget_tokens": 2048}),
        ({"reasoning_effort": "high"}, 4096 + 16384, {"type": "enabled", "budget_tokens": 16384}),
        ({"reasoning_effort": "xhigh"}, 32000, {"type": "enabled", "budget_tokens": 31999}),  # at the cap
        ({"reasoning_effort": "max"}, 32000, {"type": "enabled", "budget_tokens": 31999}),
        ({"reasoning_effort": "none"}, 4096, {"type": "disabled"}),
        ({"reasoning": {"max_tokens": 40000}}, 4096 + 40000, {"type": "enabled", "budget_tokens": 40000}),
    ],
)
def test_without_max_tokens_the_default_leaves_the_answer_room_above_the_budget(
    chat: dict[str, Any], max_tokens: int, thinking: dict[str, Any] | None
) -> None:
    body, _ = native({"model": "m", "messages": [{"role": "user", "content": "Q"}], **chat})
    assert (body["max_tokens"], body.get("thinking")) == (max_tokens, thinking)


@pytest.mark.parametrize("key", ["max_tokens", "max_completion_tokens"])
@pytest.mark.parametrize("value", ["big", True, 0, -5, 12.5, [1]])
def test_an_output_limit_that_is_not_a_whole_number_is_refused(key: str, value: Any) -> None:
    for wire_api in ("anthropic-messages", "openai-responses"):
        raw = json.dumps({"model": "m", "messages": [{"role": "user", "content": "Q"}], key: value}).encode()
        with pytest.raises(ApiError) as info:
            prepare_request(raw, fixed_route(provider_rules("generic"), wire_api=wire_api))
        assert (info.value.status, info.value.code, info.value.param) == (400, "invalid_request", key)
        assert info.value.message == f"{key} must be a positive whole number of tokens."


def _call_arguments(chunks: list[dict[str, Any]]) -> str:
    return "".join(
        call["function"].get("arguments", "")
        for chunk in chunks
        for choice in chunk.get("choices", [])
        for call in choice["delta"].get("tool_calls", [])
    )


@pytest.mark.parametrize(
    ("start_input", "deltas", "arguments"),
    [
        ({"city": "Paris"}, [], '{"city":"Paris"}'),  # the input came whole in content_block_start
        ({}, [], "{}"),
        (None, [], "{}"),
        ({}, ['{"city":', '"Lisbon"}'], '{"city":"Lisbon"}'),  # Anthropic's shape: {} then the deltas
    ],
)
def test_a_streamed_tool_use_keeps_the_input_it_started_with_unless_deltas_replace_it(
    start_input: dict[str, Any] | None, deltas: list[str], arguments: str
) -> None:
    block = {"type": "tool_use", "id": "toolu_1", "name": "get_weather"}
    if start_input is not None:
        block["input"] = start_input
    events = [
        START,
        {"type": "content_block_start", "index": 0, "content_block": block},
        *(
            {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": d}}
            for d in deltas
        ),
        {"type": "content_block_stop", "index": 0},
        *END,
    ]
    assert _call_arguments(chunks_of(events)) == arguments


def test_fields_only_anthropic_defines_pass_as_they_are() -> None:
    native_fields = {
        "cache_control": {"type": "ephemeral"},
        "inference_geo": "us",
        "stop_sequences": ["END"],
        "container": "container_1",
    }
    body, adjustments = native({"model": "m", "messages": [{"role": "user", "content": "Q"}], **native_fields})
    assert body == {
        "model": "m",
        "messages": [{"role": "user", "content": "Q"}],
        "max_tokens": 4096,
        **native_fields,
    }
    assert adjustments == []


def test_a_summary_in_anthropics_own_format_is_counted_as_unsigned_text() -> None:
    summary = {"type": "reasoning.summary", "summary": "S", "format": "anthropic-claude-v1"}
    _, adjustments = native(
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": "Q"},
                {"role": "assistant", "content": "A.", "reasoning_details": [summary]},
                {"role": "user", "content": "Q2"},
            ],
        }
    )
    assert adjustments == ["unsigned-reasoning-dropped=1"]


def test_system_and_stop_sequences_pass_unless_the_chat_form_wrote_them() -> None:
    body, adjustments = native(
        {"model": "m", "messages": [{"role": "user", "content": "Q"}], "system": "sys", "stop_sequences": ["END"]}
    )
    assert (body["system"], body["stop_sequences"], adjustments) == ("sys", ["END"], [])
    body, adjustments = native(
        {
            "model": "m",
            "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Q"}],
            "system": "sys",
            "stop": "STOP",
            "stop_sequences": ["END"],
        }
    )
    assert (body["system"], body["stop_sequences"]) == ("Be brief.", ["STOP"])
    assert adjustments == ["parameters-dropped=stop_sequences+system"]


@pytest.mark.parametrize("held", [False, True], ids=["top level", "provider_specific_fields"])
def test_litellms_thinking_blocks_go_back_as_thinking_blocks(held: bool) -> None:
    blocks = [
        {"type": "thinking", "thinking": "TB text", "signature": "SIG+/="},
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy"},
    ]
    call = {"id": "call_1", "type": "function", "function": {"name": "w", "arguments": "{}"}}
    assistant: dict[str, Any] = {"role": "assistant", "content": "", "tool_calls": [call]}
    assistant.update({"provider_specific_fields": {"thinking_blocks": blocks}} if held else {"thinking_blocks": blocks})
    body, adjustments = native(
        {
            "model": "claude-sonnet-4-5",
            "reasoning_effort": "high",
            "messages": [
                {"role": "user", "content": "q"},
                assistant,
                {"role": "tool", "tool_call_id": "call_1", "content": "21C"},
            ],
        }
    )
    assert body["messages"][1]["content"] == [*blocks, {"type": "tool_use", "id": "call_1", "name": "w", "input": {}}]
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 16384}
    assert adjustments == []
