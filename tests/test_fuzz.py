"""Fuzz targets of the pure core: whatever a client or a provider sends, the core answers with valid output or the
documented ``ApiError``, never another exception, and passes fields it does not know unchanged.

The short form runs with the suite: a fixed seed (``derandomize``) and a few examples per target. The long form
is the same file with more examples (``docs/testing.md``, "Fuzzing")::

    NUMI_MW_FUZZ_EXAMPLES=5000 .venv/bin/pytest -q -p no:cacheprovider tests/test_fuzz.py
"""

from __future__ import annotations

import json
import os
from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from numi_mw.core import codec
from numi_mw.core.accumulate import Accumulator, rebuild_from_body
from numi_mw.core.adapters import WIRE_APIS, Answer
from numi_mw.core.completion import normalize_completion
from numi_mw.core.errors import ApiError
from numi_mw.core.providers import PROVIDERS, provider_rules
from numi_mw.core.replay import (
    NO_CONTEXT,
    Lookup,
    answer_states,
    has_state,
    is_opaque,
    missing,
    missing_in_body,
    opaque_state,
    restore,
    turn_context,
    turn_key,
)
from numi_mw.core.request import prepare_request
from numi_mw.core.response import NativeJSONRewriter, ResponseOptions, SSERewriter, choose_rewriter
from numi_mw.core.routing import fixed_route
from numi_mw.core.sse import SSEDecoder
from numi_mw.core.think import THINK_STARTS, ThinkTags

EXAMPLES = int(os.environ.get("NUMI_MW_FUZZ_EXAMPLES", "40"))
"""Examples per target: few in the suite, more in the long form."""

FUZZ = settings(
    max_examples=EXAMPLES,
    derandomize=EXAMPLES <= 40,  # the suite's short form repeats run to run; the long form explores
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)

UNKNOWN = "x_fuzz_unknown"
"""A field no rule names, put beside the fields the core reads."""

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=8,
)
"""Any JSON value, small."""


def maybe(plausible: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """The value a rule expects, or any JSON value in its place."""
    return st.one_of(plausible, json_values)


def fields(required: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """A JSON object with any subset of ``required``'s keys, each value plausible or any JSON value, and perhaps
    an unknown field."""
    return st.fixed_dictionaries(
        {}, optional={key: maybe(value) for key, value in required.items()} | {UNKNOWN: json_values}
    )


TAG_PARTS = [
    "a",
    " ",
    "<",
    ">",
    "/",
    "think",
    "<think>",
    "</think>",
    "<|channel|>",
    "analysis",
    "commentary to=functions.f",
    "<|message|>",
    "<|end|>",
    "<|call|>",
    "<|start|>",
    "final",
    "\n",
    "\ud800",
    "é",
]
tag_text = st.lists(st.sampled_from(TAG_PARTS), max_size=8).map("".join)
"""Text with think tags and harmony markup, whole or in parts."""
detail = fields(
    {
        "type": st.sampled_from(["reasoning.text", "reasoning.summary", "reasoning.encrypted", "other"]),
        "text": st.text(max_size=6),
        "summary": st.text(max_size=6),
        "signature": st.sampled_from(["", "sig"]),
        "data": st.text(max_size=6),
        "format": st.sampled_from(["unknown", "anthropic-claude-v1"]),
        "index": st.integers(0, 3),
        "id": st.text(max_size=4),
    }
)
tool_call = fields(
    {
        "index": st.integers(0, 3),
        "id": st.text(max_size=4),
        "type": st.just("function"),
        "function": fields({"name": st.text(max_size=4), "arguments": st.text(max_size=4)}),
    }
)
delta = fields(
    {
        "role": st.just("assistant"),
        "content": st.one_of(tag_text, st.none()),
        "reasoning": st.one_of(st.text(max_size=6), st.none()),
        "reasoning_content": st.one_of(st.text(max_size=6), st.none()),
        "reasoning_details": st.lists(maybe(detail), max_size=3),
        "tool_calls": st.lists(maybe(tool_call), max_size=2),
        "refusal": st.one_of(st.text(max_size=4), st.none()),
    }
)
choice = fields(
    {
        "index": st.integers(0, 3),
        "delta": delta,
        "finish_reason": st.one_of(st.none(), st.sampled_from(["stop", "length", "tool_calls"])),
    }
)
usage = fields({"prompt_tokens": st.integers(0, 9), "completion_tokens": st.integers(0, 9)})
chunk = fields(
    {
        "id": st.text(max_size=4),
        "object": st.just("chat.completion.chunk"),
        "created": st.integers(0, 9),
        "model": st.text(max_size=4),
        "choices": st.lists(maybe(choice), max_size=3),
        "usage": st.one_of(usage, st.none()),
    }
)
"""A chat completion chunk in which every field the core reads may be any JSON value."""

message = fields(
    {
        "role": st.just("assistant"),
        "content": st.one_of(tag_text, st.none()),
        "reasoning": st.one_of(st.text(max_size=6), st.none()),
        "reasoning_content": st.one_of(st.text(max_size=6), st.none()),
        "reasoning_details": st.lists(maybe(detail), max_size=3),
        "tool_calls": st.lists(maybe(tool_call), max_size=2),
    }
)
completion = fields(
    {
        "id": st.text(max_size=4),
        "choices": st.lists(
            maybe(fields({"index": st.integers(0, 3), "message": message, "finish_reason": st.just("stop")})),
            max_size=3,
        ),
        "usage": usage,
    }
)

think_options = st.one_of(st.none(), st.sampled_from(THINK_STARTS).map(lambda start: ThinkTags(start=start)))
response_options = st.builds(ResponseOptions, st.booleans(), think_options)


def sse_data(events: bytes) -> list[bytes]:
    """The data of every event in ``events``, which must be whole SSE events."""
    decoder = SSEDecoder()
    parsed, rest = decoder.feed(events), decoder.end()
    assert parsed is not None
    assert rest[0] == [] and rest[1] is None, events
    return [event.data for event in parsed if event.data is not None]


def json_data(events: bytes) -> list[Any]:
    """The decoded data of every event in ``events``, each JSON or ``[DONE]``."""
    out: list[Any] = []
    for data in sse_data(events):
        if data != b"[DONE]":
            value = codec.decode_lenient(data)
            assert value is not codec.UNDECODABLE, data
            out.append(value)
    return out


def mentions(value: Any, key: str, expected: Any) -> bool:
    """Whether ``value`` holds ``key`` with the value ``expected`` anywhere."""
    if isinstance(value, dict):
        if key in value and value[key] == expected:
            return True
        return any(mentions(item, key, expected) for item in value.values())
    if isinstance(value, list):
        return any(mentions(item, key, expected) for item in value)
    return False


def unknowns(envelopes: list[Any], inner: str) -> list[Any]:
    """The values of the ``UNKNOWN`` fields of chunks or completions, of their choices and of each choice's
    ``inner`` object (``delta``, ``message``): the levels whose fields a normalizer copies as they came."""
    found: list[Any] = []
    for envelope in envelopes:
        if not isinstance(envelope, dict):
            continue
        if UNKNOWN in envelope:
            found.append(envelope[UNKNOWN])
        choices = envelope.get("choices")
        for choice in choices if isinstance(choices, list) else []:
            if isinstance(choice, dict):
                if UNKNOWN in choice:
                    found.append(choice[UNKNOWN])
                if isinstance(choice.get(inner), dict) and UNKNOWN in choice[inner]:
                    found.append(choice[inner][UNKNOWN])
    return found


@FUZZ
@given(chunks=st.lists(chunk, max_size=5), options=response_options, split=st.integers(1, 64))
def test_chunk_normalizer_takes_any_json_in_every_field(
    chunks: list[Any], options: ResponseOptions, split: int
) -> None:
    """A stream of chunks with any JSON value in any field comes out as whole SSE events of JSON, ``[DONE]``
    last, and every unknown field is still there with its value (but a ``null`` one on a chunk that ``exclude``
    emptied, which is dropped)."""
    body = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    rewriter = SSERewriter(options)
    out = b"".join(rewriter.feed(body[i : i + split]) for i in range(0, len(body), split)) + rewriter.finish()
    data = sse_data(out)
    assert data[-1] == b"[DONE]"
    sent = json_data(out)
    for value in unknowns(chunks, "delta"):
        # a null field does not keep a chunk that exclude emptied (``logprobs: null`` is on every chunk)
        assert mentions(sent, UNKNOWN, value) or (value is None and options.exclude)


@FUZZ
@given(body=st.binary(max_size=200), split=st.integers(1, 32))
def test_sse_decoder_takes_any_bytes(body: bytes, split: int) -> None:
    """Any bytes, split anywhere, decode to the same events as whole."""
    whole = SSEDecoder()
    expected = whole.feed(body) + whole.flush()
    parts = SSEDecoder()
    events = [event for i in range(0, len(body), split) for event in parts.feed(body[i : i + split])]
    assert events + parts.flush() == expected


@FUZZ
@given(text=st.lists(tag_text, max_size=8), start=st.sampled_from(THINK_STARTS))
def test_think_splitter_takes_any_text(text: list[str], start: Any) -> None:
    """Any text of tags and harmony markup, fed in any pieces, comes out as ``(kind, text)`` pieces of a known kind;
    the splitter never raises."""
    splitter = ThinkTags(start=start).splitter()
    pieces = [piece for part in text for piece in splitter.feed(part)] + splitter.flush()
    for kind, piece in pieces:
        assert kind in ("content", "reasoning", "tool_call", "tool_arguments") and isinstance(piece, str)


@FUZZ
@given(value=completion, options=response_options)
def test_completion_normalizer_takes_any_json_in_every_field(value: Any, options: ResponseOptions) -> None:
    """A completion with any JSON value in any field is normalized or left alone, and unknown fields stay."""
    before = unknowns([value], "message")
    normalize_completion(value, exclude=options.exclude, think=options.think)
    for item in before:
        assert mentions(value, UNKNOWN, item)


request_message = fields(
    {
        "role": st.sampled_from(["system", "user", "assistant", "tool", "developer"]),
        "content": st.one_of(
            st.text(max_size=6),
            st.lists(maybe(fields({"type": st.just("text"), "text": st.text(max_size=4)})), max_size=2),
        ),
        "reasoning": st.text(max_size=6),
        "reasoning_content": st.text(max_size=6),
        "reasoning_details": st.lists(maybe(detail), max_size=3),
        "tool_calls": st.lists(maybe(tool_call), max_size=2),
        "tool_call_id": st.text(max_size=4),
    }
)
request_body = fields(
    {
        "model": st.text(max_size=6),
        "messages": st.lists(maybe(request_message), max_size=3),
        "stream": st.booleans(),
        "reasoning": fields(
            {
                "effort": st.sampled_from(["none", "minimal", "low", "medium", "high", "xhigh"]),
                "max_tokens": st.integers(0, 40000),
                "exclude": st.booleans(),
                "enabled": st.booleans(),
                "summary": st.sampled_from(["auto", "concise", "detailed"]),
            }
        ),
        "reasoning_effort": st.sampled_from(["low", "medium", "high"]),
        "include_reasoning": st.booleans(),
        "max_tokens": st.integers(1, 40000),
        "max_completion_tokens": st.integers(1, 40000),
        "tools": st.lists(json_values, max_size=2),
        "tool_choice": json_values,
        "response_format": json_values,
        "stream_options": fields({"include_usage": st.booleans()}),
        "thinking": json_values,
    }
)
targets = st.sampled_from([("provider", name) for name in PROVIDERS] + [("wire", name) for name in WIRE_APIS])


def _route(target: tuple[str, str]) -> Any:
    kind, name = target
    if kind == "provider":
        return fixed_route(PROVIDERS[name])
    return fixed_route(PROVIDERS["openrouter"], wire_api=name)


@FUZZ
@given(body=st.one_of(request_body, json_values), target=targets)
def test_request_normalizer_takes_any_json_body(body: Any, target: tuple[str, str]) -> None:
    """Any JSON body, for every provider and both translated wire APIs: a prepared request of JSON, or an
    ``ApiError`` with an OpenAI-style error body, never another exception."""
    raw = json.dumps(body).encode()
    try:
        prepared = prepare_request(raw, _route(target))
    except ApiError as error:
        assert json.loads(error.to_bytes())["error"]["message"]
        return
    sent = msgspec.json.decode(prepared.body)
    if target[0] == "provider" and isinstance(body, dict) and UNKNOWN in body:
        assert sent[UNKNOWN] == body[UNKNOWN]


@FUZZ
@given(fragments=st.one_of(st.lists(maybe(detail), max_size=5), json_values))
def test_rebuild_takes_any_json(fragments: Any) -> None:
    """``numi-mw rebuild``'s path for any JSON value: rebuilt details (JSON again), or an ``ApiError`` with its
    error body, never another exception."""
    try:
        rebuilt = rebuild_from_body(json.dumps(fragments).encode())
    except ApiError as error:
        assert json.loads(error.to_bytes())["error"]["param"] in (None, "reasoning_details") or "[" in str(error.param)
        return
    assert isinstance(rebuilt, list)
    json.dumps(rebuilt)


native_events = {
    "anthropic-messages": st.lists(
        fields(
            {
                "type": st.sampled_from(
                    [
                        "message_start",
                        "content_block_start",
                        "content_block_delta",
                        "content_block_stop",
                        "message_delta",
                        "message_stop",
                        "ping",
                        "error",
                    ]
                ),
                "index": st.integers(0, 3),
                "message": fields({"id": st.text(max_size=4), "model": st.text(max_size=4), "usage": json_values}),
                "content_block": fields(
                    {
                        "type": st.sampled_from(["text", "thinking", "redacted_thinking", "tool_use"]),
                        "text": st.text(max_size=4),
                        "thinking": st.text(max_size=4),
                        "signature": st.text(max_size=4),
                        "data": st.text(max_size=4),
                        "id": st.text(max_size=4),
                        "name": st.text(max_size=4),
                        "input": json_values,
                    }
                ),
                "delta": fields(
                    {
                        "type": st.sampled_from(
                            ["text_delta", "thinking_delta", "signature_delta", "input_json_delta"]
                        ),
                        "text": st.text(max_size=4),
                        "thinking": st.text(max_size=4),
                        "signature": st.text(max_size=4),
                        "partial_json": st.text(max_size=4),
                        "stop_reason": st.sampled_from(["end_turn", "tool_use", "max_tokens"]),
                    }
                ),
                "usage": json_values,
                "error": json_values,
            }
        ),
        max_size=6,
    ),
    "openai-responses": st.lists(
        fields(
            {
                "type": st.sampled_from(
                    [
                        "response.created",
                        "response.output_item.added",
                        "response.output_item.done",
                        "response.reasoning_summary_text.delta",
                        "response.reasoning_text.delta",
                        "response.output_text.delta",
                        "response.function_call_arguments.delta",
                        "response.completed",
                        "response.incomplete",
                        "response.failed",
                        "error",
                    ]
                ),
                "output_index": st.integers(0, 3),
                "summary_index": st.integers(0, 3),
                "content_index": st.integers(0, 3),
                "item_id": st.text(max_size=4),
                "delta": st.text(max_size=4),
                "item": fields(
                    {
                        "type": st.sampled_from(["reasoning", "message", "function_call"]),
                        "id": st.text(max_size=4),
                        "encrypted_content": st.text(max_size=4),
                        "summary": json_values,
                        "call_id": st.text(max_size=4),
                        "name": st.text(max_size=4),
                        "arguments": st.text(max_size=4),
                    }
                ),
                "response": fields(
                    {
                        "id": st.text(max_size=4),
                        "status": st.text(max_size=4),
                        "usage": json_values,
                        "output": json_values,
                    }
                ),
            }
        ),
        max_size=6,
    ),
}


@FUZZ
@given(data=st.data(), wire=st.sampled_from(sorted(WIRE_APIS)), options=response_options)
def test_native_stream_takes_any_json_events(data: st.DataObject, wire: str, options: ResponseOptions) -> None:
    """A native stream of events with any JSON value in any field: whole SSE events of JSON, ending in
    ``[DONE]`` or in the error chunk, never an exception."""
    events = data.draw(native_events[wire])
    options = ResponseOptions(options.exclude, options.think, wire, Answer("m"))  # type: ignore[arg-type]
    rewriter = choose_rewriter(options, 200, "text/event-stream")
    assert rewriter is not None
    body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    out = rewriter.feed(body) + rewriter.finish()
    json_data(out)


@FUZZ
@given(value=json_values, wire=st.sampled_from(sorted(WIRE_APIS)), error=st.booleans())
def test_native_body_takes_any_json(value: Any, wire: str, error: bool) -> None:
    """A native buffered answer (or error body) of any JSON value: a JSON body, never an exception."""
    options = ResponseOptions(False, None, wire, Answer("m"))  # type: ignore[arg-type]
    rewriter = NativeJSONRewriter(options, WIRE_APIS[wire], error=error)  # type: ignore[index]
    rewriter.feed(json.dumps(value).encode())
    out = rewriter.finish()
    assert codec.decode_lenient(out) is not codec.UNDECODABLE


# The replay core (``core/replay.py``): whatever a client sends back or a provider answers, it gives turn keys and
# values or nothing, never an exception; the request pipeline with restored state raises only ``ApiError``.

REPLAY_SIGNED = [{"type": "reasoning.text", "text": "t", "signature": "sig-1"}]
replay_detail = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["reasoning.text", "reasoning.encrypted", "reasoning.summary"]) | json_values,
        "signature": st.text(max_size=4) | json_values,
        "data": st.text(max_size=4) | json_values,
        "id": st.text(max_size=4) | json_values,
        "format": st.sampled_from(["openai-responses-v1", "anthropic-claude-v1"]) | json_values,
    },
)
replay_message = st.fixed_dictionaries(
    {},
    optional={
        "role": st.sampled_from(["assistant", "user"]) | json_values,
        "content": st.text(max_size=4) | json_values,
        "tool_calls": st.lists(st.fixed_dictionaries({}, optional={"id": st.text(max_size=4) | json_values})),
        "reasoning_details": st.lists(replay_detail, max_size=3) | json_values,
        "thinking_blocks": st.lists(replay_detail, max_size=2) | json_values,
        "provider_specific_fields": st.fixed_dictionaries({}, optional={"reasoning_details": st.lists(replay_detail)})
        | json_values,
    },
)


@FUZZ
@given(st.lists(replay_message | json_values, max_size=4) | json_values, json_values)
def test_the_replay_core_takes_any_json(messages: Any, stored: Any) -> None:
    keys = missing(messages)
    assert all(isinstance(key, str) and len(key) == 64 for key in keys)
    context = turn_context(messages[-1]) if isinstance(messages, list) and messages else NO_CONTEXT
    assert missing_in_body(json.dumps({"messages": messages}).encode()) == Lookup(keys, context)
    for item in messages if isinstance(messages, list) else []:
        value = opaque_state(item)
        assert value is None or isinstance(codec.decoder.decode(value), list)
    found = {key: json.dumps(stored).encode() for key in keys}
    expected = len(replay_lacking(messages, found)) if isinstance(stored, list) else 0
    assert restore(messages, found) == expected
    restored = isinstance(stored, list) and any(is_opaque(d) for d in stored)
    assert missing(messages) == ([] if restored else keys)


def replay_lacking(messages: Any, found: dict[str, bytes]) -> list[Any]:
    """The assistant turns of ``messages`` without their state whose key (after the message before) ``found``
    holds."""
    if not isinstance(messages, list):
        return []
    befores = [None, *messages][: len(messages)]
    return [
        m
        for m, before in zip(messages, befores, strict=True)
        if isinstance(m, dict) and not has_state(m) and turn_key(m, turn_context(before)) in found
    ]


@FUZZ
@given(st.lists(replay_message | json_values, max_size=3) | json_values, json_values)
def test_answer_states_take_any_answer(messages: Any, extra: Any) -> None:
    body = json.dumps({"choices": [{"message": m} for m in messages] if isinstance(messages, list) else messages})
    for key, value in answer_states(body.encode(), NO_CONTEXT):
        assert len(key) == 64 and isinstance(codec.decoder.decode(value), list)
    if not isinstance(extra, dict):
        assert answer_states(json.dumps(extra).encode(), NO_CONTEXT) == []


@FUZZ
@given(st.binary(max_size=64))
def test_the_replay_core_takes_any_bytes(body: bytes) -> None:
    assert isinstance(answer_states(body, NO_CONTEXT), list)
    lookup = missing_in_body(body)
    assert isinstance(lookup.keys, list) and len(lookup.context) == 64


@FUZZ
@given(st.lists(replay_message | json_values, max_size=3) | json_values, st.sampled_from(sorted(PROVIDERS)))
def test_the_pipeline_with_restored_state_raises_only_api_errors(messages: Any, provider: str) -> None:
    body = json.dumps({"model": "m", "messages": messages}).encode()
    found = {key: json.dumps(REPLAY_SIGNED).encode() for key in missing_in_body(body).keys}
    try:
        prepared = prepare_request(body, provider_rules(provider), restored=found)
    except ApiError:
        return
    assert prepared.restored == len(replay_lacking(json.loads(body)["messages"], found))


def _stored(accumulator: Accumulator) -> None:
    """Every choice's message is JSON, its tool calls a list and its display texts strings."""
    for state in accumulator.choices.values():
        json.dumps(state.message())
        assert isinstance(state.reasoning, str) and isinstance(state.tool_calls, list)


@FUZZ
@given(chunks=st.lists(chunk, max_size=5), normalize=st.booleans(), think=think_options, split=st.integers(1, 64))
def test_accumulator_takes_any_json_in_every_field(
    chunks: list[Any], normalize: bool, think: ThinkTags | None, split: int
) -> None:
    """Chunks with any JSON value in any field: the same message from the bytes split anywhere and from the decoded
    chunks, a JSON message, and an unknown delta field kept with its last value; or the documented ``ApiError``."""
    body = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    by_bytes = Accumulator(normalize=normalize, think=think)
    by_chunks = Accumulator(normalize=normalize, think=think)
    try:
        for i in range(0, len(body), split):
            by_bytes.feed_sse(body[i : i + split])
        by_bytes.finish()
    except ApiError as error:
        assert error.status == 400 and str(error.param).startswith("reasoning_details[")
        return
    for c in chunks:
        by_chunks.feed_chunk(c)
    by_chunks.finish()
    _stored(by_bytes)
    assert {i: s.message() for i, s in by_bytes.choices.items()} == {
        i: s.message() for i, s in by_chunks.choices.items()
    }


@FUZZ
@given(data=st.data(), wire=st.sampled_from(sorted(WIRE_APIS)))
def test_accumulator_takes_any_native_events(data: st.DataObject, wire: str) -> None:
    """A native stream of events with any JSON value in any field: a JSON message, or an ``ApiError``."""
    accumulator = Accumulator(wire_api=wire)  # type: ignore[arg-type]
    try:
        for event in data.draw(native_events[wire]):
            accumulator.feed_chunk(event)
        accumulator.finish()
    except ApiError:
        pass
    _stored(accumulator)


@FUZZ
@given(value=st.one_of(completion, json_values), wire=st.sampled_from(["openai-chat", *sorted(WIRE_APIS)]))
def test_accumulator_takes_any_completion(value: Any, wire: str) -> None:
    """A buffered answer of any JSON value: a JSON message per choice, or an ``ApiError``."""
    accumulator = Accumulator(wire_api=wire)  # type: ignore[arg-type]
    try:
        accumulator.feed_completion(json.dumps(value).encode())
    except ApiError:
        return
    _stored(accumulator)
