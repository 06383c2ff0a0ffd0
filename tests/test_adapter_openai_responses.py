"""The OpenAI Responses adapter (``numi_mw.core.adapters.openai_responses``): golden request translations, the
recorded Responses traffic of ``shared/fixtures/openai-responses`` through the translators, the reasoning replay
round trip, and the error cases."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from numi_mw.core.adapters import WIRE_APIS
from numi_mw.core.adapters.base import Answer, RequestFacts, Translation
from numi_mw.core.adapters.openai_responses import (
    ADAPTER,
    FORMAT,
    SEPARATOR,
    StreamTranslator,
    completion,
    error_body,
    translate,
)
from numi_mw.core.chunks import ChunkNormalizer
from numi_mw.core.controls import NO_CONTROLS, ReasoningControls
from numi_mw.core.details import rebuild_reasoning_details
from numi_mw.core.errors import ApiError
from numi_mw.core.response import NativeSSERewriter, ResponseOptions
from numi_mw.core.sse import SSEDecoder

FIXTURES = "fixtures/openai-responses"
STREAMS = (
    "azure-gpt-5.4-multi-summary-encrypted.stream.jsonl",
    "deepseek-v4-flash-responses-function-tool.sse",
    "deepseek-v4-flash-responses-reasoning-text.stream.jsonl",
    "lmstudio-glm-4.7-flash-reasoning-text-tool.stream.jsonl",
    "openai-gpt-5.1-codex-max-summary-encrypted-tools.stream.jsonl",
    "openai-o3-mini-summary-deltas.sse",
    "openai-o3-reasoning-no-summary-truncated.stream.jsonl",
)
BUFFERED = (
    "openai-gpt-5-mini-reasoning-encrypted.buffered.json",
    "openai-gpt-5-reasoning-function-call.buffered.json",
    "openai-gpt-5.2-summary-auto.buffered.json",
)
TRUNCATED = "openai-o3-reasoning-no-summary-truncated.stream.jsonl"
CODEX = "openai-gpt-5.1-codex-max-summary-encrypted-tools.stream.jsonl"
AZURE = "azure-gpt-5.4-multi-summary-encrypted.stream.jsonl"

FACTS = RequestFacts()
INCLUDE = ["reasoning.encrypted_content"]


def controls(**fields: Any) -> ReasoningControls:
    return ReasoningControls(present=True, **fields)


def run(data: dict[str, Any], reasoning: ReasoningControls = NO_CONTROLS) -> Translation:
    return translate(data, reasoning, FACTS)


def user(text: str = "Hi") -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": text}


# --- request: golden translations ------------------------------------------------------------------------------


def test_tool_loop_with_effort_and_encrypted_replay() -> None:
    data = {
        "model": "gpt-5-mini",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "12+7, then x3"},
            {
                "role": "assistant",
                "content": None,
                "reasoning": "**Calculating**",
                "reasoning_details": [
                    {"type": "reasoning.summary", "summary": "**Calculating**", "format": FORMAT, "index": 0},
                    {"type": "reasoning.encrypted", "data": "gAAAAB1", "id": "rs_1", "format": FORMAT, "index": 1},
                ],
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a":12,"b":7}'}}
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "19"},
        ],
        "reasoning_effort": "high",
        "max_completion_tokens": 4096,
        "stream": True,
        "stream_options": {"include_usage": True},
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "add",
                    "description": "Adds two numbers.",
                    "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}},
                },
            }
        ],
        "tool_choice": "auto",
    }
    translation = run(data, controls(effort="high"))
    expected = {
        "model": "gpt-5-mini",
        "instructions": "Be brief.",
        "input": [
            {"type": "message", "role": "user", "content": "12+7, then x3"},
            {
                "type": "reasoning",
                "id": "rs_1",
                "encrypted_content": "gAAAAB1",
                "summary": [{"type": "summary_text", "text": "**Calculating**"}],
            },
            {"type": "function_call", "call_id": "call_1", "name": "add", "arguments": '{"a":12,"b":7}'},
            {"type": "function_call_output", "call_id": "call_1", "output": "19"},
        ],
        "max_output_tokens": 4096,
        "stream": True,
        "tools": [
            {
                "type": "function",
                "name": "add",
                "description": "Adds two numbers.",
                "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}},
                "strict": False,
            }
        ],
        "tool_choice": "auto",
        "reasoning": {"effort": "high", "summary": "auto"},
        "include": INCLUDE,
        "store": False,
    }
    assert translation.body == expected
    assert list(translation.body) == list(expected)
    assert translation.adjustments == []
    assert translation.wire_api == "openai-responses"
    assert translation.model == "gpt-5-mini"
    assert translation.stream is True
    assert translation.include_usage is True


def test_leading_system_and_developer_messages_become_instructions_later_ones_stay() -> None:
    data = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "Rule one."},
            {"role": "developer", "content": [{"type": "text", "text": "Rule "}, {"type": "text", "text": "two."}]},
            {"role": "user", "content": "Hi"},
            {"role": "system", "content": "Now answer in French."},
            {"role": "developer", "content": [{"type": "text", "text": "Be short."}]},
        ],
    }
    assert run(data).body == {
        "model": "m",
        "instructions": "Rule one.\n\nRule two.",
        "input": [
            user(),
            {"type": "message", "role": "system", "content": "Now answer in French."},
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Be short."}]},
        ],
        "include": INCLUDE,
        "store": False,
    }


def test_no_system_message_no_instructions_and_no_controls_no_reasoning_object() -> None:
    translation = run({"model": "m", "messages": [{"role": "user", "content": "Hi"}]})
    assert translation.body == {"model": "m", "input": [user()], "include": INCLUDE, "store": False}
    assert (translation.stream, translation.include_usage) == (False, False)


def test_user_parts_text_image_and_file() -> None:
    data = {
        "model": "m",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is in these?"},
                    {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"}},
                    {"type": "file", "file": {"filename": "a.pdf", "file_data": "data:application/pdf;base64,BBBB"}},
                    {"type": "input_audio", "input_audio": {"data": "CCCC", "format": "wav"}},
                ],
            }
        ],
    }
    assert run(data).body["input"] == [
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "What is in these?"},
                {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "auto"},
                {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "low"},
                {"type": "input_file", "file_data": "data:application/pdf;base64,BBBB", "filename": "a.pdf"},
                {"type": "input_audio", "input_audio": {"data": "CCCC", "format": "wav"}},
            ],
        }
    ]


def test_assistant_text_refusal_and_tool_calls_then_tool_results() -> None:
    data = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": "Do it"},
            {"role": "assistant", "content": [{"type": "text", "text": "Calling."}, {"type": "text", "text": ""}]},
            {"role": "assistant", "content": None, "refusal": "I can't."},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"id": "call_a", "type": "function", "function": {"name": "f", "arguments": ""}},
                    {"id": "call_b", "type": "function", "function": {"name": "g", "arguments": {"x": 1}}},
                ],
            },
            {"role": "tool", "tool_call_id": "call_a", "content": [{"type": "text", "text": "done"}]},
            {"role": "tool", "tool_call_id": "call_b", "content": None},
        ],
    }
    assert run(data).body["input"] == [
        user(),
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hello."}]},
        user("Do it"),
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Calling."}]},
        {"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": "I can't."}]},
        {"type": "function_call", "call_id": "call_a", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "call_b", "name": "g", "arguments": '{"x":1}'},
        {"type": "function_call_output", "call_id": "call_a", "output": [{"type": "input_text", "text": "done"}]},
        {"type": "function_call_output", "call_id": "call_b", "output": ""},
    ]


def test_tools_are_flat_and_strict_false_unless_set() -> None:
    data = {
        "model": "m",
        "messages": [],
        "tools": [
            {"type": "function", "function": {"name": "now"}},
            {
                "type": "function",
                "function": {
                    "name": "plan",
                    "description": "Plans.",
                    "parameters": {
                        "type": "object",
                        "properties": {"p": {"type": "string"}},
                        "required": ["p"],
                        "additionalProperties": False,
                    },
                    "strict": True,
                },
            },
            {"type": "web_search"},
        ],
    }
    assert run(data).body["tools"] == [
        {"type": "function", "name": "now", "parameters": {"type": "object", "properties": {}}, "strict": False},
        {
            "type": "function",
            "name": "plan",
            "description": "Plans.",
            "parameters": {
                "type": "object",
                "properties": {"p": {"type": "string"}},
                "required": ["p"],
                "additionalProperties": False,
            },
            "strict": True,
        },
        {"type": "web_search"},
    ]


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", "auto"),
        ("none", "none"),
        ("required", "required"),
        ({"type": "function", "function": {"name": "f"}}, {"type": "function", "name": "f"}),
        ({"type": "function", "name": "f"}, {"type": "function", "name": "f"}),
        (
            {
                "type": "allowed_tools",
                "allowed_tools": {"mode": "required", "tools": [{"type": "function", "function": {"name": "f"}}]},
            },
            {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "f"}]},
        ),
    ],
)
def test_tool_choice(choice: Any, expected: Any) -> None:
    assert run({"model": "m", "messages": [], "tool_choice": choice}).body["tool_choice"] == expected


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        ({"max_tokens": 300}, 300),
        ({"max_completion_tokens": 200}, 200),
        ({"max_tokens": 300, "max_completion_tokens": 200}, 200),
        ({"max_tokens": 100, "max_completion_tokens": 200}, 100),
        ({"max_tokens": None, "max_completion_tokens": 50}, 50),
    ],
)
def test_output_limit(limits: dict[str, Any], expected: int) -> None:
    body = run({"model": "m", "messages": [], **limits}).body
    assert body["max_output_tokens"] == expected
    assert "max_tokens" not in body and "max_completion_tokens" not in body


def test_no_output_limit_sends_none() -> None:
    assert "max_output_tokens" not in run({"model": "m", "messages": []}).body


def test_response_format_json_schema_becomes_text_format_merged_with_the_clients_text() -> None:
    data = {
        "model": "m",
        "messages": [],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": {"type": "object"}, "strict": True},
        },
        "text": {"verbosity": "low"},
    }
    assert run(data).body["text"] == {
        "verbosity": "low",
        "format": {"type": "json_schema", "name": "answer", "schema": {"type": "object"}, "strict": True},
    }


def test_response_format_json_object_and_verbosity() -> None:
    data = {"model": "m", "messages": [], "response_format": {"type": "json_object"}, "verbosity": "high"}
    translation = run(data)
    assert translation.body["text"] == {"format": {"type": "json_object"}, "verbosity": "high"}
    assert translation.adjustments == []


def test_chat_only_parameters_are_dropped_and_reported_sorted() -> None:
    data = {
        "model": "m",
        "messages": [{"role": "user", "content": "Hi"}],
        "n": 1,
        "stop": ["END"],
        "seed": 7,
        "logprobs": True,
        "top_logprobs": 2,
        "presence_penalty": 0.5,
        "frequency_penalty": 0.5,
        "logit_bias": {"50256": -100},
        "stream_options": {"include_usage": True},
        "audio": None,
    }
    translation = run(data)
    # top_logprobs is a Responses field too (logprobs come back only when include asks for them)
    assert translation.body == {"model": "m", "input": [user()], "top_logprobs": 2, "include": INCLUDE, "store": False}
    assert translation.adjustments == [
        "parameters-dropped=frequency_penalty+logit_bias+logprobs+n+presence_penalty+seed+stop"
    ]
    assert translation.include_usage is True  # stream_options is read, not dropped


def test_responses_fields_pass_and_the_clients_store_and_include_are_kept() -> None:
    passed = {
        "temperature": 0.2,
        "top_p": 0.9,
        "parallel_tool_calls": False,
        "user": "u-1",
        "metadata": {"k": "v"},
        "store": True,
        "include": ["message.output_text.logprobs"],
        "service_tier": "flex",
        "truncation": "auto",
        "previous_response_id": "resp_0",
        "text": {"verbosity": "low"},
        "prompt_cache_key": "pck",
        "safety_identifier": "sid",
    }
    translation = run({"model": "m", "messages": [], **passed}, controls(effort="low"))
    assert translation.body == {"model": "m", "input": [], **passed, "reasoning": {"effort": "low", "summary": "auto"}}
    assert translation.adjustments == []


def test_stream_options_include_obfuscation_passes_on_a_stream() -> None:
    data = {"model": "m", "messages": [], "stream": True, "stream_options": {"include_obfuscation": False}}
    translation = run(data)
    assert translation.body["stream_options"] == {"include_obfuscation": False}
    assert translation.include_usage is False


# --- request: reasoning controls -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "folded", "reasoning", "include"),
    [
        ({}, NO_CONTROLS, None, True),
        ({"reasoning_effort": "medium"}, controls(effort="medium"), {"effort": "medium", "summary": "auto"}, True),
        ({"reasoning_effort": "none"}, controls(effort="none"), {"effort": "none"}, False),
        ({"reasoning_effort": "none"}, controls(enabled=False), {"effort": "none"}, False),
        ({"reasoning_effort": "low"}, controls(effort="low", exclude=True), {"effort": "low"}, False),
        ({}, controls(exclude=True), None, False),
        ({}, controls(enabled=True), {"summary": "auto"}, True),
        (
            {"reasoning": {"effort": "high", "summary": "detailed"}},
            controls(effort="high"),
            {"effort": "high", "summary": "detailed"},
            True,
        ),
        ({"reasoning": {"effort": "xhigh"}}, controls(effort="xhigh"), {"effort": "xhigh", "summary": "auto"}, True),
    ],
)
def test_controls(data: dict[str, Any], folded: ReasoningControls, reasoning: Any, include: bool) -> None:
    body = run({"model": "m", "messages": [], **data}, folded).body
    assert body.get("reasoning") == reasoning
    assert ("include" in body) is include
    assert body["store"] is False
    assert "reasoning_effort" not in body


def test_reasoning_max_tokens_has_no_counterpart_and_is_reported() -> None:
    data = {"model": "m", "messages": [], "reasoning": {"effort": "high", "max_tokens": 2048}, "seed": 1}
    translation = run(data, controls(effort="high", max_tokens=2048))
    assert translation.body["reasoning"] == {"effort": "high", "summary": "auto"}
    assert translation.adjustments == ["parameters-dropped=reasoning.max_tokens+seed"]


def test_exclude_removes_a_clients_summary() -> None:
    data = {"model": "m", "messages": [], "reasoning": {"effort": "high", "summary": "detailed", "max_tokens": 9}}
    body = run(data, controls(effort="high", exclude=True, max_tokens=9)).body
    assert body["reasoning"] == {"effort": "high"}
    assert "include" not in body


# --- request: reasoning replay ---------------------------------------------------------------------------------


def assistant(details: list[Any] | None = None, **fields: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": "Done."}
    if details is not None:
        message["reasoning_details"] = details
    message.update(fields)
    return message


ANSWER = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Done."}]}


def replay(*messages: dict[str, Any]) -> Translation:
    return run({"model": "m", "messages": [{"role": "user", "content": "Hi"}, *messages]})


def test_replay_groups_whole_summaries_with_the_encrypted_detail_after_them() -> None:
    details = [
        {"type": "reasoning.summary", "summary": "**One**\n\nFirst.", "format": FORMAT, "index": 0},
        {"type": "reasoning.summary", "summary": "**Two**\n\nSecond.", "format": FORMAT, "index": 1},
        {"type": "reasoning.encrypted", "data": "ENC1", "id": "rs_1", "format": FORMAT, "index": 2},
        {"type": "reasoning.encrypted", "data": "ENC2", "id": "rs_2", "format": FORMAT, "index": 3},
    ]
    translation = replay(assistant(details, reasoning="**One**\n\nFirst.\n\n**Two**\n\nSecond."))
    assert translation.body["input"][1:] == [
        {
            "type": "reasoning",
            "id": "rs_1",
            "encrypted_content": "ENC1",
            "summary": [
                {"type": "summary_text", "text": "**One**\n\nFirst."},
                {"type": "summary_text", "text": "**Two**\n\nSecond."},
            ],
        },
        {"type": "reasoning", "id": "rs_2", "encrypted_content": "ENC2", "summary": []},
        ANSWER,
    ]
    assert translation.adjustments == []


def test_replay_joins_streamed_summary_fragments_into_their_parts() -> None:
    """A stream's rebuild keeps each summary fragment as its own detail (spec 004 rule 4); a part's first fragment
    carries the item id (and, after the first part, the separator), the others none: a fragment that happens to
    start with a blank line goes on with its part."""
    fragments = [("\n\n**One**", True), ("\n\nFirst.", False), (f"{SEPARATOR}**Two**", True), (" Second.", False)]
    details: list[Any] = [
        {"type": "reasoning.summary", "summary": text, **({"id": "rs_1"} if opening else {}), "format": FORMAT}
        for text, opening in fragments
    ]
    details.append({"type": "reasoning.encrypted", "data": "ENC1", "id": "rs_1", "format": FORMAT, "index": 4})
    assert replay(assistant(details)).body["input"][1] == {
        "type": "reasoning",
        "id": "rs_1",
        "encrypted_content": "ENC1",
        "summary": [
            {"type": "summary_text", "text": "\n\n**One**\n\nFirst."},  # the first part has no separator to remove
            {"type": "summary_text", "text": "**Two** Second."},
        ],
    }


def test_replay_of_one_streamed_item_with_reasoning_text_and_a_summary_is_one_item() -> None:
    details = [
        {"type": "reasoning.text", "text": "Raw thought.", "format": FORMAT, "index": 0},
        {"type": "reasoning.summary", "summary": "\n\nSummed up.", "id": "rs_1", "format": FORMAT, "index": 1},
        {"type": "reasoning.encrypted", "data": "ENC", "id": "rs_1", "format": FORMAT, "index": 2},
    ]
    assert replay(assistant(details)).body["input"][1:] == [
        {
            "type": "reasoning",
            "id": "rs_1",
            "encrypted_content": "ENC",
            "summary": [{"type": "summary_text", "text": "Summed up."}],
        },
        ANSWER,
    ]


def test_replay_of_reasoning_text_is_a_reasoning_text_item_with_an_empty_summary() -> None:
    details = [{"type": "reasoning.text", "text": "Spell it out.", "format": FORMAT, "index": 0}]
    translation = replay(assistant(details, reasoning="Spell it out."))
    assert translation.body["input"][1:] == [
        {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "Spell it out."}]},
        ANSWER,
    ]
    assert translation.adjustments == []


def test_replay_drops_and_counts_what_means_nothing_here() -> None:
    foreign = [
        {"type": "reasoning.text", "text": "Claude thought.", "signature": "EqQB", "format": "anthropic-claude-v1"},
        {"type": "reasoning.encrypted", "data": "REDACTED", "format": "anthropic-claude-v1"},
        {"type": "reasoning.text", "text": "plain", "format": "unknown"},
        {"type": "reasoning.encrypted", "data": "", "id": "rs_x", "format": FORMAT},
        {"type": "reasoning.mystery", "format": FORMAT},
        "not a detail",
    ]
    summary_only = [{"type": "reasoning.summary", "summary": "A summary without state.", "format": FORMAT}]
    translation = replay(
        assistant(foreign),
        {"role": "user", "content": "Again"},
        assistant(summary_only),
        {"role": "user", "content": "And again"},
        assistant(reasoning="plain reasoning"),
        {"role": "user", "content": "Once more"},
        assistant(reasoning_content="more plain reasoning"),
    )
    assert translation.body["input"] == [
        user(),
        ANSWER,
        user("Again"),
        ANSWER,
        user("And again"),
        ANSWER,
        user("Once more"),
        ANSWER,
    ]
    assert translation.adjustments == ["unsigned-reasoning-dropped=4", "foreign-reasoning-dropped=5"]


def test_replay_sends_each_reasoning_id_once() -> None:
    details = [{"type": "reasoning.encrypted", "data": "ENC", "id": "rs_1", "format": FORMAT, "index": 0}]
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    translation = replay(
        assistant(details, content=None, tool_calls=[call]),
        {"role": "tool", "tool_call_id": "call_1", "content": "1"},
        assistant(details),
    )
    assert translation.body["input"][1:] == [
        {"type": "reasoning", "id": "rs_1", "encrypted_content": "ENC", "summary": []},
        {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "1"},
        ANSWER,
    ]
    assert translation.adjustments == ["duplicate-reasoning-dropped=1"]


def test_replay_takes_details_without_format_as_this_formats() -> None:
    details = [{"type": "reasoning.encrypted", "data": "ENC", "id": "rs_1"}]
    assert replay(assistant(details)).body["input"][1] == {
        "type": "reasoning",
        "id": "rs_1",
        "encrypted_content": "ENC",
        "summary": [],
    }


@pytest.mark.parametrize(
    ("message", "param"),
    [
        ({"role": "assistant", "tool_calls": [{"id": "c", "type": "function"}]}, "messages[1].tool_calls[0]"),
        ({"role": "user", "content": 5}, "messages[1].content"),
        ({"role": "user", "content": ["text"]}, "messages[1].content[0]"),
        ({"role": "assistant", "content": {"text": "x"}}, "messages[1].content"),
    ],
)
def test_untranslatable_messages_are_invalid_requests(message: dict[str, Any], param: str) -> None:
    with pytest.raises(ApiError) as raised:
        run({"model": "m", "messages": [{"role": "user", "content": "Hi"}, message]})
    assert (raised.value.code, raised.value.status, raised.value.param) == ("invalid_request", 400, param)


# --- answers: buffered -----------------------------------------------------------------------------------------

ANSWER_FACTS = Answer(model="asked-model", include_usage=True, created=1790000000)


def response(output: list[Any], **fields: Any) -> dict[str, Any]:
    return {"id": "resp_1", "object": "response", "status": "completed", "model": "gpt-5", "output": output, **fields}


def test_completion_of_summaries_encrypted_state_text_and_a_function_call() -> None:
    native = response(
        [
            {
                "id": "rs_1",
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": "**A**"}, {"type": "summary_text", "text": "**B**"}],
                "encrypted_content": "ENC",
            },
            {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Hello", "annotations": []}],
            },
            {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "f", "arguments": '{"x":1}'},
            {"id": "ws_1", "type": "web_search_call", "status": "completed"},
        ],
        usage={
            "input_tokens": 10,
            "input_tokens_details": {"cached_tokens": 4},
            "output_tokens": 20,
            "output_tokens_details": {"reasoning_tokens": 12},
            "total_tokens": 30,
        },
    )
    assert completion(native, ANSWER_FACTS) == {
        "id": "resp_1",
        "object": "chat.completion",
        "created": 1790000000,
        "model": "gpt-5",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Hello",
                    "reasoning": "**A**\n\n**B**",
                    "reasoning_details": [
                        {"type": "reasoning.summary", "summary": "**A**", "format": FORMAT, "index": 0},
                        {"type": "reasoning.summary", "summary": "**B**", "format": FORMAT, "index": 1},
                        {"type": "reasoning.encrypted", "data": "ENC", "id": "rs_1", "format": FORMAT, "index": 2},
                    ],
                    "tool_calls": [
                        {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"x":1}'}}
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {
            "prompt_tokens": 10,
            "completion_tokens": 20,
            "total_tokens": 30,
            "prompt_tokens_details": {"cached_tokens": 4},
            "completion_tokens_details": {"reasoning_tokens": 12},
        },
    }


def test_completion_of_llama_server_reasoning_text_with_empty_encrypted_content() -> None:
    native = {
        "id": "resp_l",
        "object": "response",
        "status": "completed",
        "output": [
            {
                "id": "rs_l",
                "type": "reasoning",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": "Spell it out."}],
                "encrypted_content": "",
                "status": "completed",
            },
            {
                "id": "msg_l",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": "Three."}],
            },
        ],
        "usage": {
            "input_tokens": 5,
            "output_tokens": 9,
            "total_tokens": 14,
            "input_tokens_details": {"cached_tokens": 0},
        },
    }
    chat = completion(native, ANSWER_FACTS)
    assert chat["model"] == "asked-model"
    assert chat["choices"] == [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Three.",
                "reasoning": "Spell it out.",
                "reasoning_details": [
                    {"type": "reasoning.text", "text": "Spell it out.", "format": FORMAT, "index": 0}
                ],
            },
            "finish_reason": "stop",
        }
    ]
    assert chat["usage"] == {
        "prompt_tokens": 5,
        "completion_tokens": 9,
        "total_tokens": 14,
        "prompt_tokens_details": {"cached_tokens": 0},
    }


@pytest.mark.parametrize(
    ("incomplete", "finish"),
    [({"reason": "max_output_tokens"}, "length"), ({"reason": "content_filter"}, "content_filter"), (None, "length")],
)
def test_completion_of_an_incomplete_response(incomplete: Any, finish: str) -> None:
    native = response(
        [{"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "ENC"}],
        status="incomplete",
        incomplete_details=incomplete,
    )
    choice = completion(native, ANSWER_FACTS)["choices"][0]
    assert choice["finish_reason"] == finish
    assert choice["message"] == {
        "role": "assistant",
        "content": None,
        "reasoning_details": [
            {"type": "reasoning.encrypted", "data": "ENC", "id": "rs_1", "format": FORMAT, "index": 0}
        ],
    }


def test_completion_of_a_refusal() -> None:
    native = response([{"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": "No."}]}])
    message = completion(native, ANSWER_FACTS)["choices"][0]["message"]
    assert message == {"role": "assistant", "content": None, "refusal": "No."}


def test_a_failed_response_is_an_upstream_error() -> None:
    native = response([], status="failed", error={"code": "server_error", "message": "The model failed."})
    with pytest.raises(ApiError) as raised:
        completion(native, ANSWER_FACTS)
    assert (raised.value.code, raised.value.status) == ("upstream_unavailable", 502)
    assert raised.value.message == "The upstream reported an error: server_error: The model failed."


@pytest.mark.parametrize("status", ["queued", "in_progress", "cancelled"])
def test_a_response_that_is_not_finished_is_an_upstream_error(status: str) -> None:
    # a background request's answer (OpenAI API reference, "The response object"): no chat completion carries it
    native = response([], status=status, background=True)
    with pytest.raises(ApiError) as raised:
        completion(native, ANSWER_FACTS)
    assert (raised.value.code, raised.value.status) == ("upstream_unavailable", 502)
    assert raised.value.message == (
        f"The upstream's Responses answer is not finished (status {status!r}), and a chat completion cannot carry "
        "one that is not: send the request without background."
    )


@pytest.mark.parametrize("status", [{"a": 1}, None, 5])
def test_a_status_of_another_type_is_read_as_no_status(status: Any) -> None:
    message = completion(response([], status=status), ANSWER_FACTS)["choices"][0]
    assert message == {"index": 0, "message": {"role": "assistant", "content": None}, "finish_reason": "stop"}


@pytest.mark.parametrize("native", [{"object": "chat.completion", "choices": []}, [], "text", None, {"output": {}}])
def test_an_answer_that_is_not_a_response_is_an_upstream_error(native: Any) -> None:
    with pytest.raises(ApiError) as raised:
        completion(native, ANSWER_FACTS)
    assert raised.value.code == "upstream_unavailable"
    assert "not an OpenAI Responses response" in raised.value.message


def test_error_bodies_pass_unchanged_and_the_adapter_row() -> None:
    assert error_body({"error": {"message": "x", "type": "invalid_request_error", "code": None}}) is None
    assert WIRE_APIS["openai-responses"] is ADAPTER
    row = (ADAPTER.wire_api, ADAPTER.path, ADAPTER.controls_form, ADAPTER.replay, ADAPTER.default_max_tokens)
    assert row == ("openai-responses", "/responses", "object", "details", None)


# --- answers: streams, synthetic -------------------------------------------------------------------------------


def envelope(delta: dict[str, Any], finish: str | None = None, *, id: Any = "resp_1", model: str = "gpt-5") -> Any:
    return {
        "id": id,
        "object": "chat.completion.chunk",
        "created": 1790000000,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def translate_events(events: list[dict[str, Any]], answer: Answer = ANSWER_FACTS) -> list[dict[str, Any]]:
    translator = StreamTranslator(answer)
    out = [chunk for event in events for chunk in translator.event(event)]
    return out + translator.finish()


OPENAI_OUTPUT = [
    {
        "id": "rs_1",
        "type": "reasoning",
        "encrypted_content": "FULL",
        "summary": [{"type": "summary_text", "text": "**A** one"}, {"type": "summary_text", "text": "**B**"}],
    },
    {"id": "msg_1", "type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hi"}]},
    {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "f", "arguments": '{"x":1}'},
]
OPENAI_USAGE = {
    "input_tokens": 10,
    "input_tokens_details": {"cached_tokens": 4},
    "output_tokens": 20,
    "output_tokens_details": {"reasoning_tokens": 12},
    "total_tokens": 30,
}


def openai_events() -> list[dict[str, Any]]:
    reasoning = {"item_id": "rs_1", "output_index": 0}
    text = {"item_id": "msg_1", "output_index": 1, "content_index": 0}
    call = {"item_id": "fc_1", "output_index": 2}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": {"id": "resp_1", "model": "gpt-5", "status": "in_progress"}},
        {"type": "response.in_progress", "response": {"id": "resp_1", "model": "gpt-5", "status": "in_progress"}},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {"id": "rs_1", "type": "reasoning", "encrypted_content": "PARTIAL", "summary": []},
        },
        {"type": "response.reasoning_summary_part.added", **reasoning, "summary_index": 0, "part": {"text": ""}},
        {"type": "response.reasoning_summary_text.delta", **reasoning, "summary_index": 0, "delta": "**A**"},
        {"type": "response.reasoning_summary_text.delta", **reasoning, "summary_index": 0, "delta": " one"},
        {"type": "response.reasoning_summary_text.done", **reasoning, "summary_index": 0, "text": "**A** one"},
        {"type": "response.reasoning_summary_part.added", **reasoning, "summary_index": 1, "part": {"text": ""}},
        {"type": "response.reasoning_summary_text.delta", **reasoning, "summary_index": 1, "delta": "**B**"},
        {"type": "response.reasoning_summary_part.done", **reasoning, "summary_index": 1, "part": {"text": "**B**"}},
        {"type": "response.output_item.done", "output_index": 0, "item": OPENAI_OUTPUT[0]},
        {"type": "response.output_item.added", "output_index": 1, "item": {**OPENAI_OUTPUT[1], "content": []}},
        {"type": "response.output_text.delta", **text, "delta": "Hi"},
        {"type": "response.output_text.done", **text, "text": "Hi"},
        {"type": "response.output_item.done", "output_index": 1, "item": OPENAI_OUTPUT[1]},
        {"type": "response.output_item.added", "output_index": 2, "item": {**OPENAI_OUTPUT[2], "arguments": ""}},
        {"type": "response.function_call_arguments.delta", **call, "delta": '{"x"'},
        {"type": "response.function_call_arguments.delta", **call, "delta": ":1}"},
        {"type": "response.function_call_arguments.done", **call, "arguments": '{"x":1}'},
        {"type": "response.output_item.done", "output_index": 2, "item": OPENAI_OUTPUT[2]},
        {
            "type": "response.completed",
            "response": response(OPENAI_OUTPUT, usage=OPENAI_USAGE),
        },
    ]
    return [{**event, "sequence_number": n} for n, event in enumerate(events)]


def test_stream_of_summaries_encrypted_state_text_and_a_function_call() -> None:
    def summary(text: str, opening: bool) -> dict[str, Any]:
        entry = {"type": "reasoning.summary", "summary": text, **({"id": "rs_1"} if opening else {})}
        entry |= {"format": FORMAT, "index": 0}
        return envelope({"reasoning": text, "reasoning_details": [entry]})

    finish = envelope({}, "tool_calls")
    assert translate_events(openai_events()) == [
        envelope({"role": "assistant", "content": ""}),
        summary("**A**", True),
        summary(" one", False),
        summary("\n\n**B**", True),
        envelope(
            {
                "reasoning_details": [
                    {"type": "reasoning.encrypted", "data": "FULL", "id": "rs_1", "format": FORMAT, "index": 0}
                ]
            }
        ),
        envelope({"content": "Hi"}),
        envelope(
            {
                "tool_calls": [
                    {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": ""}}
                ]
            }
        ),
        envelope({"tool_calls": [{"index": 0, "function": {"arguments": '{"x"'}}]}),
        envelope({"tool_calls": [{"index": 0, "function": {"arguments": ":1}"}}]}),
        finish,
        {
            **finish,
            "choices": [],
            "usage": {
                "prompt_tokens": 10,
                "completion_tokens": 20,
                "total_tokens": 30,
                "prompt_tokens_details": {"cached_tokens": 4},
                "completion_tokens_details": {"reasoning_tokens": 12},
            },
        },
    ]


def test_streamed_reasoning_matches_the_buffered_translation_and_replays_the_same_item() -> None:
    view = client_view(normalized(translate_events(openai_events())))
    message = completion(response(OPENAI_OUTPUT), ANSWER_FACTS)["choices"][0]["message"]
    assert view.reasoning == message["reasoning"] == "**A** one\n\n**B**"
    streamed = replay(view.assistant()).body["input"][1]
    buffered = replay({**message, "content": "Hi"}).body["input"][1]
    assert (
        streamed
        == buffered
        == {
            "type": "reasoning",
            "id": "rs_1",
            "encrypted_content": "FULL",
            "summary": [{"type": "summary_text", "text": "**A** one"}, {"type": "summary_text", "text": "**B**"}],
        }
    )


def test_stream_of_llama_server_without_output_index_or_argument_done() -> None:
    """llama-server: no ``output_index`` or ``sequence_number``, no model in ``response.created``, reasoning
    ``output_item.done`` after the text, ``encrypted_content: ""``, no ``function_call_arguments.done``."""
    reasoning_item = {
        "id": "rs_l",
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": "Spell it out: s, t, r."}],
        "encrypted_content": "",
    }
    message_item = {
        "id": "msg_l",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": "Three"}],
    }
    call_item = {"id": "fc_l", "call_id": "call_l", "type": "function_call", "arguments": '{"l":"r"}', "name": "count"}
    events = [
        {"type": "response.created", "response": {"id": "resp_l", "object": "response", "status": "in_progress"}},
        {"type": "response.in_progress", "response": {"id": "resp_l", "object": "response", "status": "in_progress"}},
        {"type": "response.output_item.added", "item": {**reasoning_item, "content": [], "status": "in_progress"}},
        {"type": "response.reasoning_text.delta", "item_id": "rs_l", "delta": "Spell it out: "},
        {"type": "response.reasoning_text.delta", "item_id": "rs_l", "delta": "s, t, r."},
        {"type": "response.output_item.added", "item": {**message_item, "content": [], "status": "in_progress"}},
        {"type": "response.content_part.added", "item_id": "msg_l", "part": {"type": "output_text", "text": ""}},
        {"type": "response.output_text.delta", "item_id": "msg_l", "delta": "Three"},
        {"type": "response.output_item.added", "item": {**call_item, "arguments": ""}},
        {"type": "response.function_call_arguments.delta", "item_id": "fc_l", "delta": '{"l":"r"}'},
        {"type": "response.output_item.done", "item": reasoning_item},
        {"type": "response.output_text.done", "item_id": "msg_l", "text": "Three"},
        {"type": "response.content_part.done", "item_id": "msg_l", "part": message_item["content"][0]},
        {"type": "response.output_item.done", "item": message_item},
        {"type": "response.output_item.done", "item": call_item},
        {
            "type": "response.completed",
            "response": {
                "id": "resp_l",
                "object": "response",
                "status": "completed",
                "output": [reasoning_item, message_item, call_item],
                "usage": {"input_tokens": 5, "output_tokens": 9, "total_tokens": 14},
            },
        },
    ]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> Any:
        return envelope(delta, finish, id="resp_l", model="asked-model")

    def text(fragment: str) -> dict[str, Any]:
        entry = {"type": "reasoning.text", "text": fragment, "format": FORMAT, "index": 0}
        return chunk({"reasoning": fragment, "reasoning_details": [entry]})

    call = {"index": 0, "id": "call_l", "type": "function", "function": {"name": "count", "arguments": ""}}
    assert translate_events(events) == [
        chunk({"role": "assistant", "content": ""}),
        text("Spell it out: "),
        text("s, t, r."),
        chunk({"content": "Three"}),
        chunk({"tool_calls": [call]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"l":"r"}'}}]}),
        chunk({}, "tool_calls"),
        {
            **chunk({}, "tool_calls"),
            "choices": [],
            "usage": {"prompt_tokens": 5, "completion_tokens": 9, "total_tokens": 14},
        },
    ]


def test_stream_parts_without_deltas_send_their_done_text_once() -> None:
    message = {"id": "msg_1", "type": "message", "content": [{"type": "output_text", "text": "Only here."}]}
    call = {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "f", "arguments": '{"a":1}'}
    summary = {"type": "summary_text", "text": "Summed up."}
    events = [
        {"type": "response.created", "response": {"id": "resp_1", "model": "gpt-5"}},
        {"type": "response.output_item.added", "output_index": 0, "item": {"id": "rs_1", "type": "reasoning"}},
        {
            "type": "response.reasoning_summary_part.done",
            "item_id": "rs_1",
            "output_index": 0,
            "summary_index": 0,
            "part": summary,
        },
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": {"id": "rs_1", "type": "reasoning", "summary": [summary]},
        },
        {"type": "response.output_item.added", "output_index": 1, "item": {**message, "content": []}},
        {"type": "response.output_item.done", "output_index": 1, "item": message},
        {"type": "response.output_item.added", "output_index": 2, "item": {**call, "arguments": ""}},
        {"type": "response.function_call_arguments.done", "item_id": "fc_1", "output_index": 2, "arguments": '{"a":1}'},
        {"type": "response.output_item.done", "output_index": 2, "item": call},
        {"type": "response.completed", "response": response([])},
    ]
    entry = {"type": "reasoning.summary", "summary": "Summed up.", "id": "rs_1", "format": FORMAT, "index": 0}
    announce = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": ""}}
    assert translate_events(events, Answer(created=1790000000)) == [
        envelope({"role": "assistant", "content": ""}),
        envelope({"reasoning": "Summed up.", "reasoning_details": [entry]}),
        envelope({"content": "Only here."}),
        envelope({"tool_calls": [announce]}),
        envelope({"tool_calls": [{"index": 0, "function": {"arguments": '{"a":1}'}}]}),
        envelope({}, "tool_calls"),
    ]


def test_stream_items_the_terminal_response_alone_holds_are_sent_from_it() -> None:
    events = [
        {"type": "response.created", "response": {"id": "resp_1", "model": "gpt-5"}},
        {"type": "response.completed", "response": response(OPENAI_OUTPUT)},
    ]
    view = client_view(normalized(translate_events(events, Answer(created=1790000000))))
    assert (view.reasoning, view.content, view.finish) == ("**A** one\n\n**B**", "Hi", ["tool_calls"])
    assert view.calls == [("call_1", "f", '{"x":1}')]
    assert [d["data"] for d in view.details if d["type"] == "reasoning.encrypted"] == ["FULL"]


@pytest.mark.parametrize(
    ("incomplete", "finish"),
    [({"reason": "max_output_tokens"}, "length"), ({"reason": "content_filter"}, "content_filter")],
)
def test_stream_ending_incomplete(incomplete: dict[str, Any], finish: str) -> None:
    events = [
        {"type": "response.created", "response": {"id": "resp_1", "model": "gpt-5"}},
        {
            "type": "response.incomplete",
            "response": response([], status="incomplete", incomplete_details=incomplete, usage={"input_tokens": 3}),
        },
    ]
    usage = {"prompt_tokens": 3, "completion_tokens": 0, "total_tokens": 3}
    assert translate_events(events) == [
        envelope({"role": "assistant", "content": ""}),
        envelope({}, finish),
        {**envelope({}, finish), "choices": [], "usage": usage},
    ]


def test_stream_without_usage_request_or_usage_sends_no_usage_chunk() -> None:
    events = [{"type": "response.completed", "response": response([], usage=OPENAI_USAGE)}]
    assert translate_events(events, Answer(model="x", created=1790000000)) == [
        envelope({"role": "assistant", "content": ""}, model="x", id=None),
        envelope({}, "stop", model="x", id=None),
    ]
    events = [{"type": "response.completed", "response": response([])}]
    assert len(translate_events(events)) == 2


def test_events_after_the_terminal_event_are_ignored() -> None:
    translator = StreamTranslator(ANSWER_FACTS)
    translator.event({"type": "response.completed", "response": response([])})
    assert translator.done
    assert translator.event({"type": "response.output_text.delta", "delta": "late"}) == []
    assert translator.event({"type": "error", "message": "late"}) == []
    assert translator.finish() == []


@pytest.mark.parametrize(
    ("event", "message"),
    [
        (
            {
                "type": "response.failed",
                "response": response([], status="failed", error={"code": "server_error", "message": "Boom."}),
            },
            "The upstream reported a failed response: server_error: Boom.",
        ),
        (
            {
                "type": "error",
                "code": "rate_limit_exceeded",
                "message": "Slow down.",
                "param": None,
                "sequence_number": 3,
            },
            "The upstream reported an error: rate_limit_exceeded: Slow down.",
        ),
        (
            {"type": "error", "error": {"type": "invalid_request_error", "code": None, "message": "Bad."}},
            "The upstream reported an error: invalid_request_error: Bad.",
        ),
        (
            {"error": {"code": 500, "message": "llama broke.", "type": "server_error"}},
            "The upstream reported an error: 500: llama broke.",
        ),
        ({"type": "error"}, "The upstream reported an error without a message."),
    ],
)
def test_stream_errors_are_upstream_errors(event: dict[str, Any], message: str) -> None:
    translator = StreamTranslator(ANSWER_FACTS)
    translator.event({"type": "response.created", "response": {"id": "resp_1"}})
    with pytest.raises(ApiError) as raised:
        translator.event(event)
    assert (raised.value.code, raised.value.status, raised.value.message) == ("upstream_unavailable", 502, message)


def test_a_stream_that_ends_before_its_terminal_event_is_an_upstream_error() -> None:
    translator = StreamTranslator(ANSWER_FACTS)
    translator.event({"type": "response.created", "response": {"id": "resp_1"}})
    with pytest.raises(ApiError) as raised:
        translator.finish()
    assert raised.value.code == "upstream_unavailable"
    assert "before its response.completed event" in raised.value.message


# --- recorded traffic ------------------------------------------------------------------------------------------


def load_events(path: Path) -> list[dict[str, Any]]:
    """A fixture's events: ``.sse`` through the core's SSE decoder, ``.jsonl`` one event per line."""
    if path.suffix == ".sse":
        decoder = SSEDecoder()
        events = decoder.feed(path.read_bytes()) + decoder.flush()
        return [json.loads(event.data) for event in events if event.data is not None and not event.is_done]
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def split_responses(events: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The codex file holds four responses one after the other: one list per ``response.created``."""
    streams: list[list[dict[str, Any]]] = []
    for event in events:
        if event["type"] == "response.created" or not streams:
            streams.append([])
        streams[-1].append(event)
    return streams


def normalized(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The chunks after numi_mw's ``ChunkNormalizer``, as the client receives them."""
    normalizer = ChunkNormalizer()
    out: list[dict[str, Any]] = []
    for chunk in chunks:
        result = normalizer.normalize(chunk)
        out.extend([chunk] if result is None else result)
    return out


@dataclass
class ClientView:
    """What a client accumulates from a chat stream."""

    reasoning: str = ""
    content: str = ""
    fragments: list[Any] = field(default_factory=list)
    calls_by_index: dict[int, list[Any]] = field(default_factory=dict)
    finish: list[str] = field(default_factory=list)
    usage: list[Any] = field(default_factory=list)

    @property
    def details(self) -> list[dict[str, Any]]:
        return rebuild_reasoning_details(self.fragments)

    @property
    def calls(self) -> list[tuple[Any, Any, str]]:
        return [(c[0], c[1], c[2]) for _, c in sorted(self.calls_by_index.items())]

    def assistant(self) -> dict[str, Any]:
        """The assistant message a client builds from the stream (spec 004 "From a stream")."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content or None}
        if self.reasoning:
            message["reasoning"] = self.reasoning
        if self.fragments:
            message["reasoning_details"] = self.details
        if self.calls:
            message["tool_calls"] = [
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
                for call_id, name, arguments in self.calls
            ]
        return message


def client_view(chunks: list[dict[str, Any]]) -> ClientView:
    view = ClientView()
    for chunk in chunks:
        if "usage" in chunk:
            view.usage.append(chunk["usage"])
        for choice in chunk["choices"]:
            delta = choice["delta"]
            view.reasoning += delta.get("reasoning") or ""
            view.content += delta.get("content") or ""
            view.fragments += delta.get("reasoning_details") or []
            for call in delta.get("tool_calls") or []:
                entry = view.calls_by_index.setdefault(call["index"], [None, None, ""])
                if "id" in call:
                    entry[0] = call["id"]
                function = call.get("function") or {}
                if "name" in function:
                    entry[1] = function["name"]
                entry[2] += function.get("arguments") or ""
            if choice["finish_reason"] is not None:
                view.finish.append(choice["finish_reason"])
    return view


@dataclass
class Recording:
    """What one recorded response holds, read from its events without the adapter."""

    parts: list[str]  # the visible reasoning parts, in order
    reasoning_items: list[dict[str, Any]]  # the final (``output_item.done``) reasoning items
    content: str  # the output text as streamed (the deltas; the ``.done`` text of a part that had none)
    done_text: str  # the output text of the final message items
    calls: list[tuple[Any, Any, str]]  # (call_id, name, arguments) of the final function_call items
    summaries: dict[str, list[str]]  # each reasoning item's summary part texts
    texts: dict[str, list[str]]  # each reasoning item's reasoning texts
    terminal: dict[str, Any] | None  # the response of response.completed


def recording(events: list[dict[str, Any]]) -> Recording:
    streamed: dict[tuple[Any, str, Any], str] = {}
    text_deltas: dict[tuple[Any, Any], str] = {}
    done: list[dict[str, Any]] = []
    terminal = None
    for event in events:
        kind = event["type"]
        if kind == "response.reasoning_summary_text.delta":
            key = (event["item_id"], "summary", event.get("summary_index", 0))
            streamed[key] = streamed.get(key, "") + event["delta"]
        elif kind == "response.reasoning_text.delta":
            key = (event["item_id"], "text", event.get("content_index", 0))
            streamed[key] = streamed.get(key, "") + event["delta"]
        elif kind == "response.output_text.delta":
            index = (event["item_id"], event.get("content_index", 0))
            text_deltas[index] = text_deltas.get(index, "") + event["delta"]
        elif kind == "response.output_item.done":
            done.append(event["item"])
        elif kind == "response.completed":
            terminal = event["response"]
    summaries: dict[str, list[str]] = {}
    texts: dict[str, list[str]] = {}
    content = done_text = ""
    for item in done:
        if item["type"] == "reasoning":
            for kind, parts, into in (("summary", "summary", summaries), ("text", "content", texts)):
                for j, part in enumerate(item.get(parts) or []):
                    text = streamed.get((item["id"], kind, j), part.get("text") or "")
                    if part.get("text"):
                        assert part["text"] == text, "the recorded deltas and done text of a reasoning part differ"
                    if text:
                        streamed.setdefault((item["id"], kind, j), text)
                        into.setdefault(item["id"], []).append(text)
        elif item["type"] == "message":
            for j, part in enumerate(item["content"]):
                content += text_deltas.get((item["id"], j), part.get("text") or "")
                done_text += part.get("text") or ""
    calls = [(item["call_id"], item["name"], item["arguments"]) for item in done if item["type"] == "function_call"]
    reasoning_items = [item for item in done if item["type"] == "reasoning"]
    return Recording(list(streamed.values()), reasoning_items, content, done_text, calls, summaries, texts, terminal)


def stream_cases(shared: Path) -> list[tuple[str, list[dict[str, Any]]]]:
    cases = []
    for name in STREAMS:
        events = load_events(shared / FIXTURES / name)
        responses = split_responses(events) if name == CODEX else [events]
        cases += [(f"{name}#{n}", response_events) for n, response_events in enumerate(responses)]
    return cases


def play(events: list[dict[str, Any]], *, answer: Answer = ANSWER_FACTS) -> tuple[ClientView, ApiError | None]:
    """A recorded stream through the translator and the chunk normalizer; the error ``finish`` raised, if any."""
    translator = StreamTranslator(answer)
    chunks = [chunk for event in events for chunk in translator.event(event)]
    error = None
    try:
        chunks += translator.finish()
    except ApiError as raised:
        error = raised
    return client_view(normalized(chunks)), error


def test_every_fixture_is_covered(shared_dir: Path) -> None:
    names = {path.name for path in (shared_dir / FIXTURES).iterdir()}
    assert names == set(STREAMS) | set(BUFFERED)
    assert len(split_responses(load_events(shared_dir / FIXTURES / CODEX))) == 4


@pytest.mark.parametrize("name", STREAMS)
def test_recorded_streams(shared_dir: Path, name: str) -> None:
    for case, events in stream_cases(shared_dir):
        if not case.startswith(name + "#"):
            continue
        recorded = recording(events)
        view, error = play(events)
        encrypted = [d for d in view.details if d["type"] == "reasoning.encrypted"]
        assert [(d["id"], d["data"]) for d in encrypted] == [
            (item["id"], item["encrypted_content"])
            for item in recorded.reasoning_items
            if item.get("encrypted_content")
        ], case
        assert view.reasoning == SEPARATOR.join(recorded.parts), case
        assert view.content == recorded.content, case
        assert view.calls == recorded.calls, case
        assert all(d["format"] == FORMAT for d in view.details), case
        if name == TRUNCATED:
            assert error is not None and error.code == "upstream_unavailable"
            assert view.finish == []
            continue
        assert error is None, case
        assert recorded.terminal is not None
        assert view.finish == ["tool_calls" if recorded.calls else "stop"], case
        usage = recorded.terminal["usage"]
        assert view.usage == [
            {
                "prompt_tokens": usage["input_tokens"],
                "completion_tokens": usage["output_tokens"],
                "total_tokens": usage["total_tokens"],
                "prompt_tokens_details": {"cached_tokens": usage["input_tokens_details"]["cached_tokens"]},
                "completion_tokens_details": {"reasoning_tokens": usage["output_tokens_details"]["reasoning_tokens"]},
            }
        ], case


def test_recorded_stream_expectations_are_not_empty(shared_dir: Path) -> None:
    """What the recordings hold, so that the checks above compare something."""
    seen = {case: recording(events) for case, events in stream_cases(shared_dir)}
    assert [len(r.parts) for r in seen.values()] == [6, 1, 1, 1, 1, 0, 0, 0, 4, 0]
    assert [len(r.calls) for r in seen.values()] == [0, 1, 0, 1, 1, 1, 1, 0, 0, 0]
    assert [bool(r.content) for r in seen.values()] == [True, False, True, True, False, False, False, True, True, True]
    encrypted = [sum(bool(i.get("encrypted_content")) for i in r.reasoning_items) for r in seen.values()]
    assert encrypted == [1, 0, 0, 0, 1, 0, 0, 0, 1, 1]


def test_azure_text_deltas_are_sent_and_never_the_done_text_as_well(shared_dir: Path) -> None:
    """The anonymized Azure recording streams ``"X"`` while its ``output_text.done`` says
    ``"Anonymized assistant response text."``: the client gets what streamed, once, and no second copy.
    Its ``output_item.added`` also carries a partial ``encrypted_content``: only the ``.done`` one goes out."""
    events = load_events(shared_dir / FIXTURES / AZURE)
    recorded = recording(events)
    assert (recorded.content, recorded.done_text) == ("X", "Anonymized assistant response text.")
    view, _ = play(events)
    assert view.content == "X"
    partial = next(e["item"]["encrypted_content"] for e in events if e["type"] == "response.output_item.added")
    [encrypted] = [d["data"] for d in view.details if d["type"] == "reasoning.encrypted"]
    assert partial.startswith("AZURE_FIXTURE_PARTIAL") and encrypted.startswith("AZURE_FIXTURE_CANONICAL")
    assert len(encrypted) == 13688


def test_o3_message_only_in_output_item_done_is_sent_once(shared_dir: Path) -> None:
    events = load_events(shared_dir / FIXTURES / TRUNCATED)
    view, error = play(events)
    assert view.content == recording(events).done_text != ""
    assert view.reasoning == ""
    assert error is not None and "before its response.completed event" in error.message


def test_lmstudio_arguments_only_in_done_are_sent_once(shared_dir: Path) -> None:
    events = load_events(shared_dir / FIXTURES / "lmstudio-glm-4.7-flash-reasoning-text-tool.stream.jsonl")
    assert not any(e["type"] == "response.function_call_arguments.delta" for e in events)
    view, _ = play(events)
    assert view.calls == [("call_2025306790300011", "weather", '{"location":"San Francisco"}')]


@pytest.mark.parametrize("name", BUFFERED)
def test_recorded_buffered_responses(shared_dir: Path, name: str) -> None:
    native = json.loads((shared_dir / FIXTURES / name).read_text())
    chat = completion(native, ANSWER_FACTS)
    [choice] = chat["choices"]
    message = choice["message"]
    output = native["output"]
    [item] = [i for i in output if i["type"] == "reasoning"]
    summaries = [part["text"] for part in item["summary"]]
    calls = [i for i in output if i["type"] == "function_call"]
    texts = [p["text"] for i in output if i["type"] == "message" for p in i["content"]]
    assert (chat["id"], chat["model"], chat["created"]) == (native["id"], native["model"], 1790000000)
    assert message["content"] == ("".join(texts) if texts else None)
    assert message["reasoning"] == SEPARATOR.join(summaries)
    assert message["reasoning_details"] == [
        *(
            {"type": "reasoning.summary", "summary": text, "format": FORMAT, "index": n}
            for n, text in enumerate(summaries)
        ),
        {
            "type": "reasoning.encrypted",
            "data": item["encrypted_content"],
            "id": item["id"],
            "format": FORMAT,
            "index": len(summaries),
        },
    ]
    assert message.get("tool_calls", []) == [
        {"id": c["call_id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
        for c in calls
    ]
    assert choice["finish_reason"] == ("tool_calls" if calls else "stop")
    usage = native["usage"]
    assert chat["usage"] == {
        "prompt_tokens": usage["input_tokens"],
        "completion_tokens": usage["output_tokens"],
        "total_tokens": usage["total_tokens"],
        "prompt_tokens_details": {"cached_tokens": usage["input_tokens_details"]["cached_tokens"]},
        "completion_tokens_details": {"reasoning_tokens": usage["output_tokens_details"]["reasoning_tokens"]},
    }


# --- round trip: the answer's reasoning back as input items ----------------------------------------------------


def expected_turn(
    reasoning_items: list[dict[str, Any]],
    summaries: dict[str, list[str]],
    texts: dict[str, list[str]],
    content: str,
    calls: list[tuple[Any, Any, str]],
) -> list[dict[str, Any]]:
    """The input items of a recorded assistant turn: its reasoning items, then its message and function calls."""
    items: list[dict[str, Any]] = []
    for item in reasoning_items:
        if item.get("encrypted_content"):
            summary = [{"type": "summary_text", "text": text} for text in summaries.get(item["id"], [])]
            items.append(
                {
                    "type": "reasoning",
                    "id": item["id"],
                    "encrypted_content": item["encrypted_content"],
                    "summary": summary,
                }
            )
        elif texts.get(item["id"]):
            content_parts = [{"type": "reasoning_text", "text": text} for text in texts[item["id"]]]
            items.append({"type": "reasoning", "summary": [], "content": content_parts})
    if content:
        items.append({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": content}]})
    items += [{"type": "function_call", "call_id": c, "name": n, "arguments": a} for c, n, a in calls]
    return items


def round_trip(message: dict[str, Any]) -> Translation:
    calls = message.get("tool_calls") or []
    results = [{"role": "tool", "tool_call_id": call["id"], "content": "ok"} for call in calls]
    return run(
        {"model": "m", "messages": [{"role": "user", "content": "Hi"}, message, *results]}, controls(effort="high")
    )


def test_round_trip_of_recorded_streams(shared_dir: Path) -> None:
    for case, events in stream_cases(shared_dir):
        recorded = recording(events)
        view, _ = play(events)
        translation = round_trip(view.assistant())
        expected = expected_turn(
            recorded.reasoning_items, recorded.summaries, recorded.texts, recorded.content, recorded.calls
        )
        turn = translation.body["input"][1 : 1 + len(expected)]
        assert turn == expected, case
        assert translation.adjustments == [], case


@pytest.mark.parametrize("name", BUFFERED)
def test_round_trip_of_recorded_buffered_responses(shared_dir: Path, name: str) -> None:
    native = json.loads((shared_dir / FIXTURES / name).read_text())
    message = completion(native, ANSWER_FACTS)["choices"][0]["message"]
    output = native["output"]
    reasoning_items = [i for i in output if i["type"] == "reasoning"]
    summaries = {i["id"]: [p["text"] for p in i["summary"]] for i in reasoning_items}
    content = "".join(p["text"] for i in output if i["type"] == "message" for p in i["content"])
    calls = [(i["call_id"], i["name"], i["arguments"]) for i in output if i["type"] == "function_call"]
    translation = round_trip(message)
    expected = expected_turn(reasoning_items, summaries, {}, content, calls)
    assert translation.body["input"][1 : 1 + len(expected)] == expected
    assert translation.adjustments == []


def test_round_trip_of_the_codex_tool_loop(shared_dir: Path) -> None:
    """The four recorded responses of one tool loop, each turned into the chat message a client keeps, sent back
    as one conversation: the first turn's reasoning item (recorded id, ``.done`` encrypted state, summary) stands
    right before its function call."""
    responses = split_responses(load_events(shared_dir / FIXTURES / CODEX))
    messages: list[dict[str, Any]] = [{"role": "user", "content": "12+7, then x3, then x10"}]
    expected: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": "12+7, then x3, then x10"}]
    for n, events in enumerate(responses):
        recorded = recording(events)
        view, error = play(events)
        assert error is None
        messages.append(view.assistant())
        expected += expected_turn(
            recorded.reasoning_items, recorded.summaries, recorded.texts, recorded.content, recorded.calls
        )
        for call_id, _, _ in recorded.calls:
            messages.append({"role": "tool", "tool_call_id": call_id, "content": f"result {n}"})
            expected.append({"type": "function_call_output", "call_id": call_id, "output": f"result {n}"})
    translation = run({"model": "gpt-5.1-codex-max", "messages": messages}, controls(effort="high"))
    assert translation.body["input"] == expected
    assert [item["type"] for item in expected] == [
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
        "function_call",
        "function_call_output",
        "function_call",
        "function_call_output",
        "message",
    ]
    assert translation.body["store"] is False
    assert translation.body["include"] == INCLUDE
    assert translation.adjustments == []


def test_fields_only_responses_defines_pass_as_they_are() -> None:
    native_fields = {
        "conversation": "conv_1",
        "prompt": {"id": "pmpt_1", "version": "2"},
        "context_management": [{"type": "compaction", "compact_threshold": 200000}],
        "background": False,
        "previous_response_id": "resp_1",
    }
    translation = run({"model": "m", "messages": [{"role": "user", "content": "q"}], **native_fields})
    assert translation.body == {"model": "m", "input": [user("q")], **native_fields, "include": INCLUDE, "store": False}
    assert translation.adjustments == []


def test_a_whole_number_float_output_limit_goes_as_an_integer() -> None:
    translation = run({"model": "m", "max_tokens": 1e3, "messages": []})
    assert translation.body["max_output_tokens"] == 1000
    assert type(translation.body["max_output_tokens"]) is int


def test_instructions_and_max_output_tokens_pass_unless_the_chat_form_wrote_them() -> None:
    native_only = run(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "q"}],
            "instructions": "Be nice.",
            "max_output_tokens": 100,
        }
    )
    assert (native_only.body["instructions"], native_only.body["max_output_tokens"]) == ("Be nice.", 100)
    assert native_only.adjustments == []
    both = run(
        {
            "model": "m",
            "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "q"}],
            "instructions": "Be nice.",
            "max_tokens": 50,
            "max_output_tokens": 100,
        }
    )
    assert (both.body["instructions"], both.body["max_output_tokens"]) == ("Be brief.", 50)
    assert both.adjustments == ["parameters-dropped=instructions+max_output_tokens"]


def test_a_delta_only_the_standard_library_reads_goes_out_as_it_came() -> None:
    # half an emoji: a lone surrogate escape msgspec refuses; the fallback reads it and writes it back as it came,
    # on the event that opens the answer (two chunks: the role, then the text) and on one chunk alone
    rewriter = NativeSSERewriter(ResponseOptions(wire_api="openai-responses", answer=Answer()), ADAPTER)

    def delta(text: str, n: int) -> bytes:
        return (
            b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","item_id":"m1",'
            b'"output_index":0,"content_index":0,"delta":"' + text.encode() + b'","sequence_number":%d}\n\n' % n
        )

    head = b'data: {"id":null,"object":"chat.completion.chunk","created":0,"model":null,"choices":[{"index":0,'
    assert rewriter.feed(delta("\\ud83d", 1)) == (
        head
        + b'"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n'
        + head
        + b'"delta":{"content":"\\ud83d"},"finish_reason":null}]}\n\n'
    )
    assert rewriter.feed(delta("\\ude00!", 2)) == head + b'"delta":{"content":"\\ude00!"},"finish_reason":null}]}\n\n'
    assert rewriter.feed(delta("ok", 3)) == head + b'"delta":{"content":"ok"},"finish_reason":null}]}\n\n'
