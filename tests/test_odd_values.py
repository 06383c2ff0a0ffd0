"""Odd values from a client or a provider: each is handled or passes through untouched, or the request gets the
error body naming the field; nothing raises past the core (``docs/streaming.md``, "Values numi_mw does not
read"; ``docs/errors.md``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from numi_mw.core.accumulate import Accumulator
from numi_mw.core.adapters import anthropic_messages, openai_responses
from numi_mw.core.adapters.base import Answer
from numi_mw.core.chunks import ChunkNormalizer
from numi_mw.core.details import rebuild_reasoning_details
from numi_mw.core.errors import ApiError
from numi_mw.core.providers import provider_rules
from numi_mw.core.request import prepare_request
from tests.response_support import rewrite, rewrite_json


def data(body: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


@pytest.mark.parametrize("index", [[0], {"i": 0}, "0", True, 1.5, None])
def test_a_choice_index_that_is_not_an_integer_passes_the_chunk_through(index: Any) -> None:
    odd = data({"choices": [{"index": index, "delta": {"reasoning_content": "Hm."}, "finish_reason": None}]})
    stream = odd + b"data: [DONE]\n\n"
    assert rewrite(stream) == stream
    # excluded, its reasoning goes all the same, and with it the chunk it was all of
    assert rewrite(stream, exclude=True) == b"data: [DONE]\n\n"


def test_an_odd_choice_index_beside_a_normal_choice_leaves_only_the_odd_one_alone() -> None:
    chunk = {
        "choices": [
            {"index": [1], "delta": {"reasoning_content": "A"}, "finish_reason": None},
            {"index": 0, "delta": {"reasoning_content": "B"}, "finish_reason": None},
        ]
    }
    assert ChunkNormalizer().normalize(chunk) == [
        {
            "choices": [
                {"index": [1], "delta": {"reasoning_content": "A"}, "finish_reason": None},
                {
                    "index": 0,
                    "delta": {
                        "reasoning": "B",
                        "reasoning_details": [{"type": "reasoning.text", "text": "B", "index": 0}],
                    },
                    "finish_reason": None,
                },
            ]
        }
    ]


def test_a_tool_call_index_that_is_an_array_goes_as_it_came() -> None:
    from numi_mw.core.think import ThinkTags

    normalizer = ChunkNormalizer(think=ThinkTags())
    call = {"index": [0], "id": "c", "function": {"name": "f", "arguments": ""}}
    chunk = {"choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}]}
    assert normalizer.normalize(chunk) is None


def test_detail_indexes_that_are_objects_are_kept_and_group_with_nothing() -> None:
    details = [
        {"type": "reasoning.encrypted", "data": "E1", "index": {"a": 1}},
        {"type": "reasoning.encrypted", "data": "E2", "index": {"a": 1}},
    ]
    chunk = {"choices": [{"index": 0, "delta": {"reasoning_details": details}, "finish_reason": None}]}
    out = ChunkNormalizer().normalize(chunk)
    assert out == [
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "reasoning_details": [
                            {"type": "reasoning.encrypted", "data": "E1", "index": 0},
                            {"type": "reasoning.encrypted", "data": "E2", "index": 1},
                        ]
                    },
                    "finish_reason": None,
                }
            ]
        }
    ]


@pytest.mark.parametrize("index", [[0], {"b": 0}])
def test_anthropic_events_with_an_index_that_is_an_array_or_object_do_not_raise(index: Any) -> None:
    translator = anthropic_messages.StreamTranslator(Answer("m"))
    assert translator.event({"type": "content_block_start", "index": index, "content_block": {"type": "text"}}) == []
    [chunk] = translator.event(
        {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": "Hi"}}
    )
    assert chunk["choices"][0]["delta"] == {"content": "Hi"}
    assert translator.event({"type": "content_block_stop", "index": index}) == []


def test_responses_events_with_a_part_index_that_is_an_array_do_not_raise() -> None:
    translator = openai_responses.StreamTranslator(Answer("m"))
    event = {"type": "response.reasoning_text.delta", "output_index": 0, "content_index": [], "delta": "Hm."}
    [_start, chunk] = translator.event(event)
    assert chunk["choices"][0]["delta"] == {
        "reasoning": "Hm.",
        "reasoning_details": [{"type": "reasoning.text", "text": "Hm.", "format": "openai-responses-v1", "index": 0}],
    }


# --- excluded reasoning: emptied chunks are dropped ----------------------------------------------------------


def test_with_exclude_an_emptied_chunk_is_dropped_and_the_first_keeps_its_role() -> None:
    stream = (
        data({"choices": [{"index": 0, "delta": {"role": "assistant", "content": "", "reasoning_content": "x"}}]})
        + data({"choices": [{"index": 0, "delta": {"content": None, "reasoning_content": "y"}}]})
        + data({"choices": [{"index": 0, "delta": {"content": "Hi", "reasoning_content": None}}]})
        + data({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": None})
        + b"data: [DONE]\n\n"
    )
    assert rewrite(stream, exclude=True) == (
        data({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})
        + data({"choices": [{"index": 0, "delta": {"content": "Hi"}}]})
        + data({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": None})
        + b"data: [DONE]\n\n"
    )


def test_with_exclude_an_emptied_chunk_with_usage_logprobs_or_an_unknown_field_is_kept() -> None:
    usage = {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
    chunks = [
        {"choices": [{"index": 0, "delta": {"content": None, "reasoning_content": "y"}}], "usage": usage},
        {"choices": [{"index": 0, "delta": {"reasoning_content": "y"}, "logprobs": {"content": []}}]},
        {"choices": [{"index": 0, "delta": {"reasoning_content": "y", "x_own": 1}}]},
    ]
    out = rewrite(b"".join(data(c) for c in chunks), exclude=True)
    assert out == (
        data({"choices": [], "usage": usage})
        + data({"choices": [{"index": 0, "delta": {}, "logprobs": {"content": []}}]})
        + data({"choices": [{"index": 0, "delta": {"x_own": 1}}]})
    )


# --- rebuild and request controls: the error body names the field --------------------------------------------


def test_rebuild_refuses_a_text_that_is_not_a_string() -> None:
    fragments: list[Any] = [{"type": "reasoning.text", "text": "a"}, {"type": "reasoning.text", "text": ["b"]}]
    with pytest.raises(ApiError) as info:
        rebuild_reasoning_details(fragments)
    assert info.value.body() == {
        "error": {
            "message": "reasoning_details[1].text must be a string or null, not list.",
            "type": "invalid_request_error",
            "code": "invalid_request",
            "param": "reasoning_details[1].text",
        }
    }
    assert rebuild_reasoning_details([{"type": "reasoning.text", "text": None, "signature": "S"}]) == [
        {"type": "reasoning.text", "text": None, "signature": "S"}
    ]


@pytest.mark.parametrize(
    ("reasoning", "message", "param"),
    [
        ({"effort": 5}, "reasoning.effort must be a string or null, not int.", "reasoning.effort"),
        ({"effort": ["high"]}, "reasoning.effort must be a string or null, not list.", "reasoning.effort"),
        (
            {"max_tokens": "2048"},
            "reasoning.max_tokens must be a whole number of tokens or null, not str.",
            "reasoning.max_tokens",
        ),
        (
            {"max_tokens": 1.5},
            "reasoning.max_tokens must be a whole number of tokens or null, not 1.5.",
            "reasoning.max_tokens",
        ),
        (
            {"max_tokens": True},
            "reasoning.max_tokens must be a whole number of tokens or null, not bool.",
            "reasoning.max_tokens",
        ),
        ({"exclude": "yes"}, "reasoning.exclude must be true or false, not str.", "reasoning.exclude"),
        ({"enabled": 1}, "reasoning.enabled must be true or false, not int.", "reasoning.enabled"),
    ],
)
@pytest.mark.parametrize("provider", ["openai", "openrouter", "anthropic", "local"])
def test_a_control_of_the_wrong_type_is_refused_before_it_is_rewritten(
    reasoning: dict[str, Any], message: str, param: str, provider: str
) -> None:
    body = json.dumps({"model": "m", "reasoning": reasoning}).encode()
    with pytest.raises(ApiError) as info:
        prepare_request(body, provider_rules(provider))
    assert info.value.body() == {
        "error": {"message": message, "type": "invalid_request_error", "code": "invalid_request", "param": param}
    }


def test_whole_number_budgets_and_string_efforts_still_pass() -> None:
    body = b'{"model":"m","reasoning":{"effort":"high","max_tokens":2048.0}}'
    assert prepare_request(body, provider_rules("openrouter")).body == body


@pytest.mark.parametrize("body", [b"", b" \n\t\r\n"])
def test_an_empty_request_body_says_it_is_empty(body: bytes) -> None:
    with pytest.raises(ApiError) as info:
        prepare_request(body, provider_rules("openai"))
    assert info.value.body() == {
        "error": {
            "message": "The request body is empty; send a JSON object.",
            "type": "invalid_request_error",
            "code": "invalid_json",
            "param": None,
        }
    }


# --- memory: bounded per-stream state ------------------------------------------------------------------------


def test_past_max_choices_a_new_choice_index_passes_through_as_it_came() -> None:
    from numi_mw.core.chunks import MAX_CHOICES

    normalizer = ChunkNormalizer()
    for index in range(MAX_CHOICES):
        chunk = {"choices": [{"index": index, "delta": {"reasoning_content": "R"}, "finish_reason": None}]}
        assert normalizer.normalize(chunk) is not None
    late = {"choices": [{"index": MAX_CHOICES, "delta": {"reasoning_content": "R"}, "finish_reason": None}]}
    assert normalizer.normalize(late) is None
    known = {"choices": [{"index": 0, "delta": {"reasoning_content": "S"}, "finish_reason": None}]}
    assert normalizer.normalize(known) == [
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "reasoning": "S",
                        "reasoning_details": [{"type": "reasoning.text", "text": "S", "index": 0}],
                    },
                    "finish_reason": None,
                }
            ]
        }
    ]


def test_a_stream_keeps_no_detail_values() -> None:
    normalizer = ChunkNormalizer()
    details = [
        {"type": "reasoning.text", "text": "T", "signature": "S", "format": "f"},
        {"type": "reasoning.encrypted", "data": "E" * 1000, "format": "f"},
    ]
    normalizer.normalize({"choices": [{"index": 0, "delta": {"reasoning_details": details}, "finish_reason": None}]})
    kept = normalizer._choices[0].rebuilder.details
    assert (len(kept), kept[0], kept[1]) == (
        2,
        {"type": "reasoning.text", "text": None, "signature": None, "format": None, "index": None},
        None,
    )


def test_a_stream_keeps_the_last_16_text_details_and_a_late_signature_is_never_lost() -> None:
    from numi_mw.core.details import MAX_RECENT_TEXT_DETAILS

    normalizer = ChunkNormalizer()

    def send(details: list[Any]) -> Any:
        return normalizer.normalize(
            {"choices": [{"index": 0, "delta": {"reasoning_details": details}, "finish_reason": None}]}
        )

    send([{"type": "reasoning.text", "text": "old"}])  # detail 0, unsigned
    for n in range(MAX_RECENT_TEXT_DETAILS):  # details 1 to 16, each signed
        send([{"type": "reasoning.text", "text": f"t{n}", "signature": f"s{n}"}])
    assert len(normalizer._choices[0].rebuilder.details) == MAX_RECENT_TEXT_DETAILS + 1
    assert normalizer._choices[0].rebuilder.details[0] is None
    # the full rebuild would complete detail 0, now out of the window: the signature goes out as a detail of its own
    [chunk] = send([{"type": "reasoning.text", "signature": "LATE"}])
    assert chunk["choices"][0]["delta"]["reasoning_details"] == [
        {"type": "reasoning.text", "signature": "LATE", "index": MAX_RECENT_TEXT_DETAILS + 1}
    ]


def test_native_translators_keep_state_for_at_most_max_tracked_blocks_and_items() -> None:
    from numi_mw.core.adapters.base import MAX_TRACKED

    anthropic = anthropic_messages.StreamTranslator(Answer("m"))
    for index in range(MAX_TRACKED + 5):
        anthropic.event({"type": "content_block_start", "index": index, "content_block": {"type": "text"}})
    assert len(anthropic._blocks) == MAX_TRACKED
    assert 0 not in anthropic._blocks and MAX_TRACKED + 4 in anthropic._blocks
    responses = openai_responses.StreamTranslator(Answer("m"))
    for index in range(MAX_TRACKED + 5):
        item = {"type": "message", "id": f"msg_{index}"}
        responses.event({"type": "response.output_item.added", "output_index": index, "item": item})
    assert (len(responses._by_index), len(responses._by_id)) == (MAX_TRACKED, MAX_TRACKED)


def test_a_long_phase_of_field_reasoning_keeps_bounded_echo_state() -> None:
    from numi_mw.core.think import MAX_ECHO_CHARS, ReasoningEcho

    echo = ReasoningEcho()
    for _ in range(MAX_ECHO_CHARS // 1000 + 1):
        echo.fields("x" * 1000)
    assert (echo._parts, echo._f) == ([], "")
    # tagged reasoning after it is no longer compared: it goes out as it comes
    assert echo.filter([("reasoning", "x" * 10)]) == [("reasoning", "x" * 10)]
    # a whole message's reasoning is compared however long it is
    whole = ReasoningEcho(None)
    whole.fields("x" * (MAX_ECHO_CHARS + 1))
    assert whole.filter([("reasoning", "x" * 10)]) == []


@pytest.mark.parametrize("text", [["b"], {"t": "b"}, 1.5])
def test_a_text_fragment_whose_text_is_not_a_string_extends_the_open_detail_as_it_came(text: Any) -> None:
    """Rule 1 (spec 004 "Streaming") reads a fragment with a truthy ``text`` as more text of the open detail: it
    gets that detail's index, its text passes as it came, and no ``reasoning`` string is made of it; on the
    compiled core as on the pure one."""
    first = {"choices": [{"index": 0, "delta": {"reasoning_details": [{"type": "reasoning.text", "text": "a"}]}}]}
    odd = {"choices": [{"index": 0, "delta": {"reasoning_details": [{"type": "reasoning.text", "text": text}]}}]}
    out = rewrite(data(first) + data(odd) + b"data: [DONE]\n\n")
    assert out == (
        data(
            {
                "choices": [
                    {
                        "index": 0,
                        "delta": {
                            "reasoning_details": [{"type": "reasoning.text", "text": "a", "index": 0}],
                            "reasoning": "a",
                        },
                    }
                ]
            }
        )
        + data(
            {
                "choices": [
                    {"index": 0, "delta": {"reasoning_details": [{"type": "reasoning.text", "text": text, "index": 0}]}}
                ]
            }
        )
        # the details are emptied; "a" is the one reasoning text, whole, and stays
        + data({"choices": [{"index": 0, "delta": {"reasoning_details": []}, "finish_reason": None}]})
        + b"data: [DONE]\n\n"
    )
    accumulator = Accumulator()  # which needs the text: the documented error, not a TypeError
    with pytest.raises(ApiError) as info:
        accumulator.feed_sse(data(first) + data(odd))
        accumulator.finish()
        accumulator.message()
    assert info.value.message == f"reasoning_details[1].text must be a string or null, not {type(text).__name__}."


@pytest.mark.parametrize("value", [5, 1.5, True, {"text": "Hm."}, ["Hm."]])
def test_a_reasoning_content_that_is_not_a_string_stays_as_it_came(value: Any) -> None:
    # numi_mw moves the text of a reasoning_content into reasoning; a value that holds no string is not read, and
    # goes as it came (a chunk of its own, the bytes; beside content or a reasoning text, in its place)
    alone = data({"id": "c", "choices": [{"index": 0, "delta": {"reasoning_content": value}}]})
    assert rewrite(b"id: 7\n" + alone) == b"id: 7\n" + alone
    beside = data({"id": "c", "choices": [{"index": 0, "delta": {"reasoning_content": value, "content": "hi"}}]})
    assert rewrite(beside) == beside
    with_text = data({"choices": [{"index": 0, "delta": {"reasoning_content": value, "reasoning": "r"}}]})
    assert json.loads(rewrite(with_text).split(b"\n\n")[0][6:])["choices"][0]["delta"] == {
        "reasoning_content": value,
        "reasoning": "r",
        "reasoning_details": [{"type": "reasoning.text", "text": "r", "index": 0}],
    }
    # a buffered answer: the same
    body = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "a", "reasoning_content": value}}]}
    raw = json.dumps(body).encode()
    assert rewrite_json(raw) == raw
    body["choices"][0]["message"]["reasoning"] = "r"
    assert json.loads(rewrite_json(json.dumps(body).encode()))["choices"][0]["message"] == {
        "role": "assistant",
        "content": "a",
        "reasoning": "r",
        "reasoning_details": [{"type": "reasoning.text", "text": "r", "format": "unknown"}],
        "reasoning_content": value,
    }
    # excluded, it goes with the rest of the reasoning
    assert rewrite(beside, exclude=True) == data({"id": "c", "choices": [{"index": 0, "delta": {"content": "hi"}}]})


def test_a_reasoning_field_of_a_type_not_read_keeps_its_value_beside_reasoning_text() -> None:
    # beside a reasoning text, an object in reasoning or a string in reasoning_details is not replaced by the text
    # or by a detail made of it: it stays as it came, and so does the text's own field
    odd_reasoning = {"reasoning": {"x": 1}, "reasoning_content": "r"}
    odd_details = {"reasoning": "r", "reasoning_details": "oops"}
    first = data({"choices": [{"index": 0, "delta": odd_reasoning}]})
    assert json.loads(rewrite(first).split(b"\n\n")[0][6:])["choices"][0]["delta"] == {
        **odd_reasoning,
        "reasoning_details": [{"type": "reasoning.text", "text": "r", "index": 0}],
    }
    stream = data({"choices": [{"index": 0, "delta": odd_details}]})
    assert rewrite(stream) == stream  # no detail in the stream: nothing to close
    for message, expected in (
        (
            odd_reasoning,
            {**odd_reasoning, "reasoning_details": [{"type": "reasoning.text", "text": "r", "format": "unknown"}]},
        ),
        (odd_details, odd_details),
    ):
        body = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", **message}}]}).encode()
        out = json.loads(rewrite_json(body))["choices"][0]["message"]
        assert out == {"role": "assistant", **expected}


@pytest.mark.parametrize("delta", [{"reasoning_content": ""}, {"reasoning_content": None}, {"reasoning_details": None}])
def test_a_chunk_of_empty_reasoning_fields_keeps_its_place_and_lines(delta: dict[str, Any]) -> None:
    # the empty field goes; the chunk, its comment and its id line stay (only exclude drops a chunk it empties)
    event = b": keep-alive\nid: 7\n" + data({"id": "c", "choices": [{"index": 0, "delta": delta}]})
    emptied = b": keep-alive\nid: 7\n" + data({"id": "c", "choices": [{"index": 0, "delta": {}}]})
    assert rewrite(event) == emptied
    # while reasoning is open it goes as well, and does not end the reasoning: the end comes after it
    reasoning = data({"id": "c", "choices": [{"index": 0, "delta": {"reasoning_content": "r"}}]})
    out = rewrite(reasoning + event)
    assert out.index(emptied) < out.index(b'"format":"unknown"')


def test_details_of_a_type_not_read_do_not_count_as_detail_entries_at_the_end_of_the_reasoning() -> None:
    # two text deltas whose reasoning_details are not lists: the end of the reasoning empties reasoning, and leaves
    # the details field as the client last had it (no delta carried entries)
    body = (
        data({"choices": [{"index": 0, "delta": {"reasoning": "a", "reasoning_details": {"k": 1}}}]})
        + data({"choices": [{"index": 0, "delta": {"reasoning": "b", "reasoning_details": {"k": 2}}}]})
        + data({"choices": [{"index": 0, "delta": {"content": "A"}}]})
    )
    assert rewrite(body).split(b"\n\n")[2:4] == [
        data({"choices": [{"index": 0, "delta": {"reasoning": None}, "finish_reason": None}]})[:-2],
        b'data: {"choices":[{"index":0,"delta":{"content":"A"}}]}',
    ]
    # one delta of entries (an encrypted detail) after a text whose details are a string: nothing is added
    body = (
        data({"choices": [{"index": 0, "delta": {"reasoning": "a", "reasoning_details": "D"}}]})
        + data(
            {"choices": [{"index": 0, "delta": {"reasoning_details": [{"type": "reasoning.encrypted", "data": "E"}]}}]}
        )
        + data({"choices": [{"index": 0, "delta": {"content": "hi"}}]})
    )
    assert rewrite(body).split(b"\n\n")[2:] == [b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}', b""]
