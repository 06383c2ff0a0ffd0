"""The accumulator (``numi_mw.core.accumulate``): one answer, streamed or buffered, in any wire API, into the text
to display and the assistant message to store (spec 000 "Display" and "Storage"; spec 004 "Response fields",
"From a stream", "From a buffered response")."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from benchmarks.payloads import split_events
from numi_mw import Accumulator, ApiError
from numi_mw.core.adapters.openai_responses import SEPARATOR
from numi_mw.core.chunks import MAX_CHOICES
from numi_mw.core.details import rebuild_reasoning_details
from numi_mw.core.response import Bounds
from numi_mw.core.think import ThinkTags
from tests.response_support import frame_jsonl, rewrite, sse_chunks

FIXTURES = Path("fixtures")
CHAT = FIXTURES / "openai-chat"
ANTHROPIC = FIXTURES / "anthropic-messages"
RESPONSES = FIXTURES / "openai-responses"
OPENROUTER = CHAT / "openrouter-claude-sonnet-4.5-reasoning-details.sse"
CLAUDE_TEXT = "This is a simple arithmetic question. 2+2 equals 4."
SIGNATURE = (
    "Et0BCkgIChACGAIqQA2s7h7tA7IG35fbwVkou9PM2hANVJNUwcEM4q12fTRDK6y3v6YoEvJ+7bko8wnW/GLsQFXadaJPAEMCpLkhI9ISDLjFkeR1a"
    "VUIvdCtyBoMrUTovh0jwk+wpnZWIjANV3e6VVdgbGSsEyyTHO6KMmVtqqs79f9blnVdJmmMIwMyTi6bEtG59+jTU7v1zlsqQ2IKGZILOlr6adh0Aa"
    "m7zYttvisys+wjyZZXU1y/Srz0nmp1cFgVOJe1BLKQI3SSRrjsqQC0uAEUZy0GX0Rq1AXjvIcYAQ=="
)
CLAUDE_DETAIL = {
    "type": "reasoning.text",
    "text": CLAUDE_TEXT,
    "signature": SIGNATURE,
    "format": "anthropic-claude-v1",
    "index": 0,
}


def body_of(shared: Path, name: Path) -> bytes:
    raw = (shared / name).read_bytes()
    return frame_jsonl(raw) if name.suffix == ".jsonl" else raw


def accumulated(body: bytes, **options: Any) -> Accumulator:
    accumulator = Accumulator(**options)
    accumulator.feed_sse(body)
    accumulator.finish()
    return accumulator


# --- spec 004's examples -------------------------------------------------------------------------------------------

SPEC_STREAM = [
    {"index": 0, "delta": {"role": "assistant", "reasoning": "Spell it out: ", "reasoning_details": [
        {"type": "reasoning.text", "text": "Spell it out: "}]}, "finish_reason": None},
    {"index": 0, "delta": {"reasoning": "s, t, r, a, w, b, e, r, r, y.", "reasoning_details": [
        {"type": "reasoning.text", "text": "s, t, r, a, w, b, e, r, r, y."}]}, "finish_reason": None},
    {"index": 0, "delta": {"content": "Three."}, "finish_reason": None},
    {"index": 0, "delta": {}, "finish_reason": "stop"},
]  # fmt: skip
"""Spec 004 "Streaming", the event stream's choices."""


def spec_chunks() -> list[dict[str, Any]]:
    envelope = {
        "id": "6f1c2b8e",
        "object": "chat.completion.chunk",
        "created": 1790000000,
        "model": "openai/gpt-6-luna",
    }
    return [{**envelope, "choices": [choice]} for choice in copy.deepcopy(SPEC_STREAM)]


@pytest.mark.parametrize("normalize", [True, False])
def test_the_spec_stream_gives_the_reasoning_once_the_answer_and_one_detail(normalize: bool) -> None:
    accumulator = Accumulator(normalize=normalize)
    for chunk in spec_chunks():
        accumulator.feed_chunk(chunk)
    accumulator.finish()
    choice = accumulator.choices[0]
    text = "Spell it out: s, t, r, a, w, b, e, r, r, y."
    assert (choice.reasoning, choice.content, choice.finish_reason) == (text, "Three.", "stop")
    detail: dict[str, Any] = {"type": "reasoning.text", "text": text}
    if normalize:
        detail["index"] = 0  # numi_mw's stream shape numbers every detail (docs/streaming.md)
    assert accumulator.message() == {
        "role": "assistant",
        "content": "Three.",
        "reasoning": text,
        "reasoning_details": [detail],
    }
    assert accumulator.usage is None


def test_chunks_given_are_not_modified() -> None:
    chunks = spec_chunks()
    given = copy.deepcopy(chunks)
    accumulator = Accumulator(think=ThinkTags())
    for chunk in chunks:
        accumulator.feed_chunk(chunk)
    accumulator.finish()
    assert chunks == given


def test_the_spec_buffered_response_is_stored_as_returned() -> None:
    message = {
        "role": "assistant",
        "content": 'The letter r appears three times in "strawberry".',
        "reasoning": "Spell it out: s, t, r, a, w, b, e, r, r, y. That is r at positions 3, 8 and 9.",
        "reasoning_details": [
            {
                "type": "reasoning.text",
                "text": "Spell it out: s, t, r, a, w, b, e, r, r, y. That is r at positions 3, 8 and 9.",
                "signature": "EqQBCkgIBxABGAIqQ...",
                "format": "anthropic-claude-v1",
            }
        ],
    }
    usage = {
        "prompt_tokens": 24,
        "completion_tokens": 212,
        "total_tokens": 236,
        "completion_tokens_details": {"reasoning_tokens": 168},
        "token_count_basis": "provider_native",
        "cost": 0.000765,
        "cost_details": {"upstream_inference_cost": 0.000765},
    }
    body = {"choices": [{"index": 0, "finish_reason": "stop", "message": message}], "usage": usage}
    for given in (body, json.dumps(body).encode()):
        accumulator = Accumulator()
        accumulator.feed_completion(given)
        assert accumulator.message() == message
        assert accumulator.usage == usage
        choice = accumulator.choices[0]
        assert (choice.reasoning, choice.finish_reason) == (message["reasoning"], "stop")
        assert choice.reasoning_details == message["reasoning_details"]
    assert body["choices"][0]["message"] is message  # the given body is not modified


# --- recorded streams ----------------------------------------------------------------------------------------------


def test_recorded_openrouter_claude_stream_stores_one_whole_signed_detail(shared_dir: Path) -> None:
    body = body_of(shared_dir, OPENROUTER)
    accumulator = accumulated(body)
    assert accumulator.message() == {
        "role": "assistant",
        "content": "2 + 2 = 4",
        "reasoning": CLAUDE_TEXT,
        "reasoning_details": [CLAUDE_DETAIL],
    }
    # what spec 004's rebuild gives of what a client receives through numi_mw
    fragments = [
        entry
        for chunk in sse_chunks(rewrite(body))
        for choice in chunk["choices"]
        for entry in choice["delta"].get("reasoning_details") or []
    ]
    assert accumulator.choices[0].reasoning_details == rebuild_reasoning_details(fragments)
    assert accumulator.usage == sse_chunks(body)[-1]["usage"]
    assert accumulator.usage["completion_tokens_details"] == {"reasoning_tokens": 13, "image_tokens": 0}
    # and the same from what numi_mw sends, read as it is
    assert accumulated(rewrite(body), normalize=False).message() == accumulator.message()


def test_read_as_it_is_the_openrouter_placeholder_is_a_detail_of_its_own(shared_dir: Path) -> None:
    accumulator = accumulated(body_of(shared_dir, OPENROUTER), normalize=False)
    placeholder = {"type": "reasoning.text", "text": "", "signature": "", "format": "anthropic-claude-v1", "index": 0}
    assert accumulator.choices[0].reasoning_details == [placeholder, CLAUDE_DETAIL]


def test_any_split_of_the_bytes_and_decoded_chunks_give_the_same_message(shared_dir: Path) -> None:
    body = body_of(shared_dir, OPENROUTER)
    whole = accumulated(body).message()
    for step in (1, 7, 300, 1448):
        accumulator = Accumulator()
        for at in range(0, len(body), step):
            accumulator.feed_sse(body[at : at + step])
        accumulator.finish()
        assert accumulator.message() == whole
    by_event = Accumulator()  # one whole event per call: the one-event fast path
    for event in split_events(body):
        by_event.feed_sse(event)
    by_event.finish()
    assert by_event.message() == whole
    events = split_events(body)
    for size in (2, 5):  # several whole events per call (``SSEDecoder.data_lines`` where all are data lines)
        grouped = Accumulator()
        for at in range(0, len(events), size):
            grouped.feed_sse(b"".join(events[at : at + size]))
        grouped.finish()
        assert grouped.message() == whole
    decoded = Accumulator()
    for chunk in sse_chunks(body):
        decoded.feed_chunk(chunk)
    decoded.finish()
    assert decoded.message() == whole


def test_recorded_deepseek_reasoning_content_is_stored_as_reasoning_with_one_unknown_detail(shared_dir: Path) -> None:
    body = body_of(shared_dir, CHAT / "deepseek-reasoner-reasoning-content.sse")
    chunks = sse_chunks(body)
    deltas = [c["choices"][0]["delta"] for c in chunks if c.get("choices")]
    reasoning = "".join(d.get("reasoning_content") or "" for d in deltas)
    content = "".join(d.get("content") or "" for d in deltas)
    message = accumulated(body).message()
    assert message == {
        "role": "assistant",
        "content": content,
        "reasoning": reasoning,
        "reasoning_details": [{"type": "reasoning.text", "text": reasoning, "index": 0, "format": "unknown"}],
    }
    assert accumulated(body, normalize=False).message() == {
        "role": "assistant",
        "content": content,
        "reasoning": reasoning,
    }


def test_recorded_encrypted_details_are_kept_byte_for_byte(shared_dir: Path) -> None:
    body = body_of(shared_dir, CHAT / "openrouter-o3-encrypted-reasoning-details.sse")
    recorded = [
        d
        for chunk in sse_chunks(body)
        for choice in chunk.get("choices") or []
        for d in choice["delta"].get("reasoning_details") or []
    ]
    assert [d["type"] for d in recorded] == ["reasoning.encrypted"]
    stored = accumulated(body).choices[0].reasoning_details
    assert stored == [{**recorded[0], "index": 0}]
    assert stored[0]["data"] == recorded[0]["data"]
    assert accumulated(body, normalize=False).choices[0].reasoning_details == recorded


# --- native wire APIs ------------------------------------------------------------------------------------------------


def anthropic_body(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The buffered Messages body a stream's events add up to (Anthropic Messages API reference, "Streaming")."""
    message: dict[str, Any] = {}
    blocks: dict[int, dict[str, Any]] = {}
    for event in events:
        kind = event.get("type")
        if kind == "message_start":
            message = copy.deepcopy(event["message"])
        elif kind == "content_block_start":
            blocks[event["index"]] = copy.deepcopy(event["content_block"])
        elif kind == "content_block_delta":
            block, delta = blocks[event["index"]], event["delta"]
            field = {"thinking_delta": "thinking", "signature_delta": "signature", "text_delta": "text"}.get(
                delta["type"], "partial_json"
            )
            block[field] = block.get(field, "") + delta[field]
        elif kind == "message_delta":
            message.update(event["delta"])
            message["usage"] = {**message.get("usage", {}), **event.get("usage", {})}
    for block in blocks.values():
        if "partial_json" in block:
            block["input"] = json.loads(block.pop("partial_json") or "{}")
    message["content"] = [blocks[i] for i in sorted(blocks)]
    return message


ANTHROPIC_STREAMS = [
    "anthropic-haiku-4.5-thinking-then-tool-use.sse",
    "anthropic-sonnet-4-thinking-stream.sse",
    "anthropic-sonnet-4.5-thinking-signature.stream.jsonl",
    "anthropic-sonnet-5-summarized-thinking.stream.jsonl",
]


@pytest.mark.parametrize("name", ANTHROPIC_STREAMS)
def test_a_recorded_anthropic_stream_stores_what_the_buffered_answer_gives(shared_dir: Path, name: str) -> None:
    body = body_of(shared_dir, ANTHROPIC / name)
    events = [e for e in sse_chunks(body) if isinstance(e, dict)]
    streamed = accumulated(body, wire_api="anthropic-messages")
    buffered = Accumulator(wire_api="anthropic-messages")
    buffered.feed_completion(json.dumps(anthropic_body(events)).encode())
    details = streamed.choices[0].reasoning_details
    assert details == buffered.choices[0].reasoning_details
    signatures = [e["delta"]["signature"] for e in events if e.get("delta", {}).get("type") == "signature_delta"]
    assert [d["signature"] for d in details] == [s for s in signatures if s]
    for field in ("reasoning", "tool_calls", "finish_reason"):
        assert getattr(streamed.choices[0], field) == getattr(buffered.choices[0], field), field
    assert (streamed.choices[0].content or None) == buffered.choices[0].content
    assert streamed.usage == buffered.usage


def test_a_recorded_responses_stream_keeps_its_encrypted_content_and_summaries(shared_dir: Path) -> None:
    body = body_of(shared_dir, RESPONSES / "openai-o3-mini-summary-deltas.sse")
    events = [e for e in sse_chunks(body) if isinstance(e, dict)]
    item = next(
        e["item"] for e in events if e.get("type") == "response.output_item.done" and e["item"]["type"] == "reasoning"
    )
    accumulator = accumulated(body, wire_api="openai-responses")
    choice = accumulator.choices[0]
    details = choice.reasoning_details
    assert [d["data"] for d in details if d["type"] == "reasoning.encrypted"] == [item["encrypted_content"]]
    parts: dict[int, str] = {}
    for event in events:
        if event.get("type") == "response.reasoning_summary_text.delta":
            parts[event["summary_index"]] = parts.get(event["summary_index"], "") + event["delta"]
    assert len(parts) == 4
    assert choice.reasoning == SEPARATOR.join(parts[i] for i in sorted(parts))  # as the buffered answer shows them
    assert "".join(d.get("summary", "") for d in details) == choice.reasoning
    completed = next(e["response"]["usage"] for e in events if e.get("type") == "response.completed")
    assert accumulator.usage["completion_tokens_details"]["reasoning_tokens"] == 1408
    assert accumulator.usage["completion_tokens"] == completed["output_tokens"]


# --- merging ---------------------------------------------------------------------------------------------------------


def chunk(*choices: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"id": "c", "object": "chat.completion.chunk", "choices": list(choices), **fields}


def test_tool_calls_merge_by_index_and_ids_repeated_on_every_entry_are_taken_once() -> None:
    accumulator = Accumulator()
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}
    accumulator.feed_chunk(chunk({"index": 0, "delta": {"role": "assistant", "tool_calls": [{"index": 1, **call}]}}))
    accumulator.feed_chunk(chunk({"index": 0, "delta": {"tool_calls": [
        {"index": 0, "id": "call_0", "type": "function", "function": {"name": "a", "arguments": "{}"}},
        {"index": 1, "id": "call_1", "function": {"arguments": '{"city":'}},
    ]}}))  # fmt: skip
    accumulator.feed_chunk(
        chunk({"index": 0, "delta": {"tool_calls": [{"index": 1, "function": {"arguments": '"Lisbon"}'}}]}})
    )
    accumulator.feed_chunk(chunk({"index": 0, "delta": {}, "finish_reason": "tool_calls"}))
    accumulator.finish()
    assert accumulator.message() == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_0", "type": "function", "function": {"name": "a", "arguments": "{}"}},
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Lisbon"}'}},
        ],
    }
    assert accumulator.choices[0].finish_reason == "tool_calls"


def test_unknown_fields_keep_their_last_value_and_choices_stay_apart() -> None:
    accumulator = Accumulator()
    accumulator.feed_chunk(chunk(
        {"index": 1, "delta": {"content": "B", "channel": "final"}},
        {"index": 0, "delta": {"content": "A", "annotations": [{"type": "url_citation"}]}},
    ))  # fmt: skip
    accumulator.feed_chunk(chunk({"index": 0, "delta": {"content": "a", "annotations": None, "refusal": None}}))
    accumulator.feed_chunk(chunk({"index": "x", "delta": {"content": "no choice numi_mw can name"}}))
    accumulator.feed_chunk(chunk(usage={"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}))
    accumulator.finish()
    assert accumulator.message(0) == {"role": "assistant", "content": "Aa", "annotations": [{"type": "url_citation"}]}
    assert accumulator.message(1) == {"role": "assistant", "content": "B", "channel": "final"}
    assert sorted(accumulator.choices) == [0, 1]
    assert accumulator.usage == {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
    assert accumulator.chunks == 4


def test_tool_call_arguments_that_are_not_a_string_merge_as_openai_python_merges_them() -> None:
    # openai-python's accumulate_delta keeps the value it has when the next one is of another type
    def arguments(*parts: Any) -> Any:
        accumulator = Accumulator()
        for part in parts:
            accumulator.feed_chunk(
                chunk({"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": part}}]}})
            )
        accumulator.finish()
        return accumulator.message()["tool_calls"]

    assert arguments(5, "x") == [{"function": {"arguments": 5}}]
    assert arguments("x", 5, "y") == [{"function": {"arguments": "xy"}}]
    assert arguments(None, {"a": 1}, "x") == [{"function": {"arguments": {"a": 1}}}]


def test_a_refusal_is_its_own_text() -> None:
    accumulator = Accumulator()
    for part in ("I can", "not."):
        accumulator.feed_chunk(chunk({"index": 0, "delta": {"refusal": part}}))
    accumulator.finish()
    assert accumulator.choices[0].refusal == "I cannot."
    assert accumulator.message() == {"role": "assistant", "content": None, "refusal": "I cannot."}


def test_think_tags_in_content_become_reasoning() -> None:
    accumulator = Accumulator(think=ThinkTags())
    for part in ("<thi", "nk>Hm.</think>", "Hi."):
        accumulator.feed_chunk(chunk({"index": 0, "delta": {"content": part}}))
    accumulator.finish()
    assert (accumulator.choices[0].reasoning, accumulator.choices[0].content) == ("Hm.", "Hi.")


@pytest.mark.parametrize("normalize", [True, False])
def test_one_delta_with_two_text_fragments_shows_their_text_once(normalize: bool) -> None:
    # the normalizer splits the delta in two (one entry per detail per delta); each part's reasoning is its own text
    text = [{"type": "reasoning.text", "text": "a"}, {"type": "reasoning.text", "text": "b"}]
    accumulator = Accumulator(normalize=normalize)
    accumulator.feed_sse(
        b'data: {"choices":[{"index":0,"delta":{"reasoning_details":' + json.dumps(text).encode() + b"}}]}\n\n"
        b'data: {"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
    )
    accumulator.finish()
    index = {"index": 0} if normalize else {}
    assert accumulator.message() == {
        "role": "assistant",
        "content": "x",
        "reasoning": "ab",
        "reasoning_details": [{"type": "reasoning.text", "text": "ab", **index}],
    }
    # the buffered answer with the same details shows the same text (its details as returned)
    buffered = Accumulator(normalize=normalize)
    buffered.feed_completion(
        {"choices": [{"index": 0, "message": {"role": "assistant", "content": "x", "reasoning_details": text}}]}
    )
    assert buffered.choices[0].reasoning == "ab"


# --- refusals and bounds ---------------------------------------------------------------------------------------------


def test_an_event_that_is_not_json_is_refused() -> None:
    with pytest.raises(ApiError) as info:
        Accumulator().feed_sse(b"data: {bad\n\n")
    assert (info.value.status, info.value.code) == (400, "invalid_json")
    assert info.value.message == "An SSE event is not JSON (b'{bad'); send whole chunks."


@pytest.mark.parametrize("after", [b"", b"\n\n"])
def test_the_rest_of_a_read_whose_event_is_refused_is_still_read(after: bytes) -> None:
    # the read ends inside its second event: refused at the first, the decoder has taken the second's start, and
    # what comes after the refusal (its blank line, or the end of the stream) ends it
    accumulator = Accumulator()
    with pytest.raises(ApiError) as info:
        accumulator.feed_sse(b'data: x\n\ndata: {"choices":[{"index":0,"delta":{"content":"hi"}}]}')
    assert info.value.message == "An SSE event is not JSON (b'x'); send whole chunks."
    if after:
        accumulator.feed_sse(after)
    accumulator.finish()
    assert accumulator.message(0) == {"role": "assistant", "content": "hi"}


def test_a_fragment_text_that_is_not_a_string_is_refused_by_its_place() -> None:
    accumulator = Accumulator(normalize=False)
    good = {"type": "reasoning.text", "text": "a"}
    accumulator.feed_chunk(chunk({"index": 0, "delta": {"reasoning_details": [good]}}))
    with pytest.raises(ApiError) as info:
        accumulator.feed_chunk(
            chunk({"index": 0, "delta": {"reasoning_details": [{"type": "reasoning.text", "text": 5}]}})
        )
    assert (info.value.status, info.value.param) == (400, "reasoning_details[1].text")
    assert info.value.message == "reasoning_details[1].text must be a string or null, not int."


def test_text_past_the_bound_is_refused_and_let_go() -> None:
    accumulator = Accumulator(bounds=Bounds(max_response_bytes=10))
    accumulator.feed_chunk(chunk({"index": 0, "delta": {"content": "0123456789"}}))
    with pytest.raises(ApiError) as info:
        accumulator.feed_chunk(chunk({"index": 0, "delta": {"content": "!"}}))
    assert (info.value.status, info.value.code) == (502, "upstream_unavailable")
    assert accumulator.choices == {}


def test_an_event_past_the_bound_is_refused() -> None:
    with pytest.raises(ApiError) as info:
        Accumulator(bounds=Bounds(max_event_bytes=16)).feed_sse(b'data: {"choices":[]}' + b" " * 16 + b"\n\n")
    assert info.value.status == 502


def test_more_choices_than_any_provider_sends_are_refused() -> None:
    accumulator = Accumulator()
    accumulator.feed_chunk(chunk(*({"index": i, "delta": {"content": "x"}} for i in range(MAX_CHOICES))))
    with pytest.raises(ApiError) as info:
        accumulator.feed_chunk(chunk({"index": MAX_CHOICES, "delta": {"content": "x"}}))
    assert info.value.status == 502


def test_a_completion_that_is_not_one_is_refused() -> None:
    with pytest.raises(ApiError) as info:
        Accumulator().feed_completion(b"{bad")
    assert info.value.code == "invalid_json"
    with pytest.raises(ApiError) as info:
        Accumulator().feed_completion({"choices": "x"})
    assert (info.value.code, info.value.param) == ("invalid_request", "choices")


def test_an_unknown_wire_api_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="wire_api must be one of"):
        Accumulator(wire_api="grpc")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ({"think": "yes"}, "think must be None or a ThinkTags, not 'yes'"),
        ({"normalize": "no"}, "normalize must be True or False, not 'no'"),
        ({"normalize": 1}, "normalize must be True or False, not 1"),
        ({"bounds": 5}, "bounds must be a numi_mw.core.response.Bounds, not 5"),
    ],
)
def test_an_option_of_the_wrong_kind_is_a_value_error_at_construction(option: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as info:
        Accumulator(**option)
    assert str(info.value) == message


def test_feed_sse_takes_bytes_only() -> None:
    accumulator = Accumulator()
    with pytest.raises(TypeError) as info:
        accumulator.feed_sse('data: {"choices":[]}\n\n')  # type: ignore[arg-type]
    assert str(info.value) == (
        "feed_sse takes the stream's bytes, not str; a decoded chunk goes to feed_chunk, text to "
        "feed_sse(text.encode())"
    )
    assert accumulator.chunks == 0
    accumulator.feed_sse(bytearray(b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n'))
    accumulator.feed_sse(memoryview(b'data: {"choices":[{"index":0,"delta":{"content":"b"}}]}\n\n'))
    accumulator.finish()
    assert accumulator.message() == {"role": "assistant", "content": "ab"}


def test_message_of_an_answer_without_that_choice_is_a_key_error() -> None:
    empty = Accumulator()
    empty.feed_completion({"choices": []})
    with pytest.raises(KeyError) as info:
        empty.message()
    assert info.value.args == ("the answer has no choice 0 (choices: [])",)
    odd = Accumulator()
    odd.feed_completion({"choices": [{"index": 0, "message": "x"}, {"index": 1, "message": {"content": "B"}}]})
    with pytest.raises(KeyError) as info:
        odd.message()
    assert info.value.args == ("the answer has no choice 0 (choices: [1])",)
    assert odd.message(1) == {"content": "B"}


# --- the openai SDK's stream -----------------------------------------------------------------------------------------


def replaying(body: bytes) -> httpx.Client:
    """An httpx client whose every request gets ``body`` as an SSE stream (in process)."""

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    return httpx.Client(transport=httpx.MockTransport(answer))


@pytest.mark.parametrize("dump", ["model_dump", "to_dict"])
def test_the_openai_sdks_chunks_give_what_the_bytes_give(shared_dir: Path, dump: str) -> None:
    openai = pytest.importorskip("openai")
    body = body_of(shared_dir, OPENROUTER)
    client = openai.OpenAI(api_key="sk-test", base_url="http://replay.invalid/v1", http_client=replaying(body))
    accumulator = Accumulator()
    stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "2+2?"}], stream=True)
    for sdk_chunk in stream:
        accumulator.feed_chunk(
            sdk_chunk.model_dump(exclude_none=False) if dump == "model_dump" else sdk_chunk.to_dict()
        )
    accumulator.finish()
    message = accumulator.message()
    assert message == accumulated(body).message()
    assert message["reasoning_details"] == [CLAUDE_DETAIL]
