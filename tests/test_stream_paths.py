"""The stream rewriters' per-event paths against a reference without any of them, on every recorded stream.

``SSERewriter`` takes an event that comes as one chunk, and each event of a chunk of several, without building an
``SSEEvent`` (``SSEDecoder.single_data``, ``data_lines``; ``NativeSSERewriter`` events of an ``event:`` and a
``data:`` line, ``framed_data``, ``framed_lines``), and the whole events of a read cut inside events the same way
(``split_read``), passes an event that cannot hold reasoning as its bytes without decoding it (the
prefilter, while no reasoning is open), reads the first chunk's head only when
the stream breaks off, and normalizes the common chunk on ``ChunkNormalizer``'s fast paths. ``ReferenceRewriter``
below is the plain algorithm: every chunk through ``SSEDecoder.feed``, every data event decoded in full and
normalized by the general path only, encoded with msgspec. Both must send the same bytes for every recorded stream
in ``shared/fixtures`` (chat completion streams, think-tag streams and the translated wire APIs' streams), however
the stream is cut: whole, one event per chunk, several whole events per chunk, one byte per chunk, at seeded
random places, and in reads of a TCP segment's payload.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.payloads import spec_stream_events, split_events, split_segments
from numi_mw.core import codec, response
from numi_mw.core.adapters import WIRE_APIS, Answer
from numi_mw.core.chunks import UNCHANGED
from numi_mw.core.completion import normalize_completion
from numi_mw.core.errors import upstream_unavailable
from numi_mw.core.response import (
    NativeSSERewriter,
    ResponseOptions,
    SSERewriter,
    may_hold_reasoning,
    normalize_completion_body,
)
from numi_mw.core.sse import SSEDecoder, SSEEvent, encode_event, replace_data, terminate_event
from numi_mw.core.think import ThinkTags
from numi_mw.core.usage import UsageRules, account_completion
from tests.conftest import SHARED, SHARED_ABSENT
from tests.response_support import frame_jsonl, general_path_only

FIXTURES = SHARED / "fixtures"


class ReferenceRewriter:
    """``SSERewriter``'s rules with no fast path: each event decoded by ``SSEDecoder.feed`` and, when it has data
    other than ``[DONE]``, decoded in full (the standard library for what msgspec refuses), its usage accounted
    (``options.usage``), normalized by the general path and written back; an unchanged chunk goes as its bytes."""

    def __init__(self, options: ResponseOptions) -> None:
        self.decoder = SSEDecoder()
        self.normalizer = general_path_only(exclude=options.exclude, think=options.think)
        self.usage = options.usage
        self.done = False

    def feed(self, chunk: bytes) -> bytes:
        return b"".join([self.event(event) for event in self.decoder.feed(chunk)])

    def finish(self) -> bytes:
        events, rest = self.decoder.end()
        out = [self.event(event) for event in events]
        if rest is not None:
            if self.done:
                out.append(self.event(rest))
            elif rest.data is None and not rest.raw.endswith((b"\n", b"\r")):
                raise AssertionError("a recorded stream was cut short")
            else:
                out.append(self.event(terminate_event(rest)))
        if not self.done:
            out.append(self.closing())
        return b"".join(out)

    def closing(self) -> bytes:
        self.done = True
        return b"".join(encode_event(codec.encode_lenient(chunk)) for chunk in self.normalizer.finish())

    def event(self, event: SSEEvent) -> bytes:
        data = event.data
        if data is None:
            return event.raw
        if data == b"[DONE]":
            return self.closing() + event.raw
        encode: Callable[[Any], bytes] = codec.encode
        try:
            value = msgspec.json.decode(data)
        except (msgspec.DecodeError, RecursionError):
            value, encode = codec.fallback(data)
            if value is codec.UNDECODABLE:
                return event.raw
        accounted = self.usage is not None and account_completion(value, self.usage)
        chunks = self.normalizer.normalize(value)
        if chunks is UNCHANGED:
            if not accounted:
                return event.raw
            chunks = [value]
        last = data if len(chunks) > 1 and chunks[-1] is value and not accounted else None
        encoded = [encode(chunk) for chunk in (chunks[:-1] if last is not None else chunks)]
        if last is not None:
            encoded.append(last)
        if len(event.raw) - len(data) <= len(b"data: \n\n"):  # one data line: one per chunk
            return b"".join([b"data: " + item + b"\n\n" for item in encoded])
        if not encoded:
            return b""
        rest = [encode_event(item, event=event.event, id=event.id) for item in encoded[1:]]
        return replace_data(event.raw, encoded[0]) + b"".join(rest)


def _streams(folder: str) -> dict[str, bytes]:
    root = FIXTURES / folder
    if not root.is_dir():
        return {}
    found = {}
    for path in sorted(root.iterdir()):
        if path.name.endswith(".sse"):
            found[path.name] = path.read_bytes()
        elif path.name.endswith(".jsonl"):
            found[path.name] = frame_jsonl(path.read_bytes())
    return found


def _grouped(events: list[bytes], seed: int = 0) -> list[bytes]:
    """``events`` in chunks of one to eight whole events, at seeded places (a reader that fell behind)."""
    rng = random.Random(seed)
    chunks = []
    while events:
        size = rng.randint(1, 8)
        chunks.append(b"".join(events[:size]))
        events = events[size:]
    return chunks


def _cut_at(body: bytes, count: int, seed: int) -> list[bytes]:
    """``body`` cut at ``count`` seeded random places."""
    rng = random.Random(seed)
    bounds = sorted({0, len(body), *(rng.randrange(len(body) + 1) for _ in range(count))})
    return [body[a:b] for a, b in itertools.pairwise(bounds)]


def _cuts(body: bytes) -> dict[str, list[bytes]]:
    """The ways a stream is cut: whole, one event per chunk, several whole events per chunk, one byte per chunk,
    seeded random cuts (most inside events), reads of a TCP segment's payload (1,448 bytes) and seeded cuts about
    every 300 bytes (reads that end one event, hold several and start the next)."""
    events = split_events(body)
    ways = {"whole": [body], "per event": events, "1 byte": [body[i : i + 1] for i in range(len(body))]}
    ways["whole events"] = _grouped(events)
    for seed in range(3):
        ways[f"random {seed}"] = _cut_at(body, len(body) // 40 + 1, seed)
    ways["segments"] = split_segments(body)
    for seed in range(2):
        ways[f"reads {seed}"] = _cut_at(body, len(body) // 300 + 1, seed)
    return ways


def _run(rewriter: Any, pieces: list[bytes]) -> bytes:
    return b"".join([rewriter.feed(piece) for piece in pieces]) + rewriter.finish()


CHAT = _streams("openai-chat")
TAGS = _streams("think-tags")
_ACCOUNTING = UsageRules(reasoning_outside_completion=True)  # (``ProviderRules.reasoning_outside_completion``)
OPTIONS = {
    "default": ResponseOptions(),
    "exclude": ResponseOptions(exclude=True),
    "think": ResponseOptions(think=ThinkTags()),
    "usage": ResponseOptions(usage=_ACCOUNTING),
    "usage and exclude": ResponseOptions(exclude=True, usage=_ACCOUNTING),
}


def _params(streams: dict[str, bytes], options: list[str]) -> list[Any]:
    if not streams:
        return [pytest.param("", "", marks=pytest.mark.skip(reason=SHARED_ABSENT))]
    return [pytest.param(name, option, id=f"{name}-{option}") for name in streams for option in options]


@pytest.mark.parametrize(("name", "option"), _params(CHAT, list(OPTIONS)) + _params(TAGS, ["think", "exclude"]))
def test_a_recorded_stream_gives_the_reference_bytes_however_it_is_cut(name: str, option: str) -> None:
    body = {**CHAT, **TAGS}[name]
    options = OPTIONS[option]
    if name in TAGS:  # think-tag streams are split, with or without their reasoning
        options = ResponseOptions(exclude=option == "exclude", think=ThinkTags())
    expected = _run(ReferenceRewriter(options), [body])
    for way, pieces in _cuts(body).items():
        assert _run(SSERewriter(options), pieces) == expected, way


def test_the_spec_shaped_stream_gives_the_reference_bytes() -> None:
    events = spec_stream_events(300)
    options = ResponseOptions()
    expected = _run(ReferenceRewriter(options), [b"".join(events)])
    assert _run(SSERewriter(options), events) == expected
    assert b'"index":0' in expected and expected.endswith(b"data: [DONE]\n\n")
    # runs of one shape inside chunks of several events, and across them, with the reasoning shown and taken out
    for seed in range(3):
        assert _run(SSERewriter(options), _grouped(events, seed)) == expected
    excluded = ResponseOptions(exclude=True)
    expected = _run(ReferenceRewriter(excluded), [b"".join(events)])
    assert b"reasoning" not in expected.replace(b"reasoning_tokens", b"")
    for seed in range(3):
        assert _run(SSERewriter(excluded), _grouped(events, seed)) == expected
    # runs of one shape across reads cut inside events (the run waits while the decoder holds an event's start)
    body = b"".join(events)
    for options in (ResponseOptions(), excluded):
        expected = _run(ReferenceRewriter(options), [body])
        for seed in range(3):
            assert _run(SSERewriter(options), _cut_at(body, len(body) // 700 + 1, seed)) == expected


def test_a_run_of_one_shape_waits_while_the_decoder_holds_the_start_of_an_event() -> None:
    # a read ends with the first line of an event (a comment); the next read is the rest of that event, a chunk the
    # run's shape would take: it must take it as that event's end, with the comment, not as an event of its own
    events = spec_stream_events(40)  # its 5th to 22nd chunks are a run of one shape
    reads = [b"".join(events[:8]) + b": note\n", events[8], *events[9:]]
    for options in (ResponseOptions(), ResponseOptions(exclude=True)):
        expected = _run(ReferenceRewriter(options), [b"".join(reads)])
        assert (b": note\ndata: " in expected) is not options.exclude  # (a reasoning chunk alone goes, excluded)
        assert _run(SSERewriter(options), reads) == expected


NATIVE = {wire: _streams(wire) for wire in WIRE_APIS}


@pytest.mark.parametrize(
    ("wire", "name"),
    [pytest.param(wire, name, id=name) for wire, streams in NATIVE.items() for name in streams]
    or [pytest.param("", "", marks=pytest.mark.skip(reason=SHARED_ABSENT))],
)
def test_a_translated_stream_gives_the_general_paths_bytes_however_it_is_cut(wire: str, name: str) -> None:
    body = NATIVE[wire][name]
    options = ResponseOptions(wire_api=wire, answer=Answer())  # type: ignore[arg-type]

    def rewriter(general: bool) -> NativeSSERewriter:
        made = NativeSSERewriter(options, WIRE_APIS[wire])
        if general:
            made._normalizer = general_path_only()
        return made

    # cut after its first byte, the reference goes through the decoder's line parser, none of its fast paths
    expected = _run(rewriter(True), [body[:1], body[1:]])
    assert expected.startswith(b"data: {")
    for way, pieces in _cuts(body).items():
        assert _run(rewriter(False), pieces) == expected, way


def test_the_folders_read_are_there() -> None:
    if not FIXTURES.is_dir():
        pytest.skip(SHARED_ABSENT)
    assert {Path(name).suffix for name in CHAT} == {".sse", ".jsonl"}
    assert len(CHAT) == 6 and len(TAGS) == 2 and sorted(NATIVE) == ["anthropic-messages", "openai-responses"]


_DELTAS = st.sampled_from(
    [
        {"reasoning": "r"},
        {"reasoning_content": "r"},
        {"content": None, "reasoning_content": "r"},
        {"reasoning": "r", "reasoning_details": [{"type": "reasoning.text", "text": "r", "format": "f"}]},
        {
            "reasoning": None,
            "reasoning_details": [{"type": "reasoning.text", "text": "", "signature": "", "format": "f"}],
        },
        {"reasoning": None, "reasoning_details": [{"type": "reasoning.text", "signature": "S", "format": "f"}]},
        {"reasoning_details": [{"type": "reasoning.encrypted", "data": "E"}]},
        {  # OpenRouter's o3: OpenAI's reasoning item, beside the role and empty fields
            "role": "assistant",
            "content": "",
            "reasoning": None,
            "reasoning_details": [
                {"type": "reasoning.encrypted", "data": "E", "id": "rs_1", "format": "f", "index": 0}
            ],
        },
        {"reasoning": "", "reasoning_details": [{"type": "reasoning.encrypted", "data": "E", "index": 1}]},
        {"content": "a", "reasoning_details": [{"type": "reasoning.encrypted", "data": "E", "format": "f"}]},
        {"reasoning": 5, "reasoning_details": [{"type": "reasoning.encrypted", "data": "E"}]},
        {"reasoning": "t", "reasoning_details": [{"type": "reasoning.encrypted", "data": "E"}]},
        {"content": "a"},
        {"content": ""},
        {"role": "assistant"},
        {"content": "a", "reasoning": None, "reasoning_details": []},
        {"content": "", "reasoning": None, "reasoning_details": []},
        {"reasoning": None},
        {"reasoning_details": []},
        {"content": "a", "reasoning": None},
        {"content": "a", "reasoning": "", "reasoning_details": []},
        {"content": "a", "reasoning_content": None},
        {"content": "", "reasoning_content": None},
        {"content": "<think>t</think>a"},
        {"tool_calls": [{"index": 0, "id": "c", "type": "function", "function": {"name": "f", "arguments": ""}}]},
    ]
)
_CHOICES = st.lists(
    st.fixed_dictionaries(
        {"index": st.integers(0, 2), "delta": _DELTAS, "finish_reason": st.sampled_from([None, None, None, "stop"])}
    ),
    min_size=0,
    max_size=2,
)
_ENVELOPES = st.sampled_from(
    [
        {"id": "g", "model": "m"},
        {"id": "g", "model": "m"},
        {"id": "g2", "model": "other"},
        {"id": "g", "usage": None},
        {"id": "g", "usage": {"completion_tokens": 3, "completion_tokens_details": {"reasoning_tokens": 2}}},
    ]
)


@pytest.mark.parametrize("option", list(OPTIONS))
@settings(max_examples=300, deadline=None)
@given(
    chunks=st.lists(st.tuples(_ENVELOPES, _CHOICES, st.integers(1, 3)), min_size=1, max_size=12),
    per_event=st.booleans(),
)
def test_a_stream_of_several_choices_gives_the_reference_bytes(
    option: str, chunks: list[tuple[dict[str, Any], list[dict[str, Any]], int]], per_event: bool
) -> None:
    # several choices, in one chunk or interleaved, two at once, envelopes that change, an event sent again right
    # after itself: every per-event path (the prefilter, the fast paths, a repeat while a reasoning is open) sends
    # what decoding and normalizing every chunk sends, and the end of the stream closes the choices in one order
    events = [
        b"data: " + msgspec.json.encode({**envelope, "choices": choices}) + b"\n\n"
        for envelope, choices, times in chunks
        for _ in range(times)
    ]
    events.append(b"data: [DONE]\n\n")
    options = OPTIONS[option]
    expected = _run(ReferenceRewriter(options), [b"".join(events)])
    assert _run(SSERewriter(options), events if per_event else [b"".join(events)]) == expected


def _chunk(index: int, delta: dict[str, Any], **envelope: Any) -> bytes:
    body = {"id": "g", **envelope, "choices": [{"index": index, "delta": delta, "finish_reason": None}]}
    return b"data: " + msgspec.json.encode(body) + b"\n\n"


def _deltas(body: bytes) -> list[tuple[Any, ...]]:
    chunks = [json_chunk for json_chunk in split_events(body) if json_chunk.startswith(b"data: {")]
    out = []
    for event in chunks:
        value = msgspec.json.decode(event[6:])
        out.extend((value.get("id"), choice["index"], choice["delta"]) for choice in value["choices"])
    return out


def test_the_end_of_a_stream_closes_choices_in_the_order_they_first_carried_reasoning() -> None:
    # choice 0 shows content first, then choice 1 reasons, then choice 0: choice 1's reasoning is closed first,
    # whether choice 0's first chunk was decoded or passed as its bytes
    events = [_chunk(0, {"content": "hi"}), _chunk(1, {"reasoning": "a"}), _chunk(0, {"reasoning": "b"})]
    for first in (events[0], _chunk(0, {"content": "hi", "reasoning": None, "reasoning_details": []})):
        body = _run(SSERewriter(ResponseOptions()), [first, *events[1:], b"data: [DONE]\n\n"])
        assert _deltas(body)[3:] == [  # each: the held format, then its details emptied (its text came whole)
            ("g", 1, {"reasoning_details": [{"type": "reasoning.text", "format": "unknown", "index": 0}]}),
            ("g", 1, {"reasoning_details": []}),
            ("g", 0, {"reasoning_details": [{"type": "reasoning.text", "format": "unknown", "index": 0}]}),
            ("g", 0, {"reasoning_details": []}),
        ]
        assert body == _run(ReferenceRewriter(ResponseOptions()), [first, *events[1:], b"data: [DONE]\n\n"])


def test_the_choices_counted_against_the_limit_are_those_that_carried_reasoning() -> None:
    # 128 choices that only show content take no state: a reasoning choice after them is still normalized
    events = [_chunk(index, {"content": "x", "reasoning": None}) for index in range(128)]
    events.append(_chunk(500, {"reasoning": "r"}))
    for rewriter in (SSERewriter(ResponseOptions()), ReferenceRewriter(ResponseOptions())):
        out = b"".join(rewriter.feed(event) for event in events)
        assert _deltas(out)[-1] == (
            "g",
            500,
            {"reasoning": "r", "reasoning_details": [{"type": "reasoning.text", "text": "r", "index": 0}]},
        )


def test_an_event_passed_as_its_bytes_before_any_decode_still_ends_the_stream_at_done() -> None:
    # ``feed`` passes an event that cannot hold a reasoning field before ``_data``; [DONE] holds none either, and
    # still ends the stream: nothing follows it on a break, and bytes after it go as they came
    first = _chunk(0, {"content": "x"})
    rewriter = SSERewriter(ResponseOptions())
    sent = [rewriter.feed(first), rewriter.feed(b"data: [DONE]\n\n"), rewriter.fail(upstream_unavailable("cut"))]
    assert sent == [first, b"data: [DONE]\n\n", b""]
    rewriter = SSERewriter(ResponseOptions())
    sent = [rewriter.feed(first), rewriter.feed(b"data: [DONE]\n\n"), rewriter.feed(b'data: {"x'), rewriter.finish()]
    assert sent == [first, b"data: [DONE]\n\n", b"", b'data: {"x']


def test_a_reasoning_key_spelt_with_an_escape_is_read_however_the_event_comes() -> None:
    # "\u0072easoning" is "reasoning": its bytes do not show the word, so an event with an escape is decoded
    # (after an answer's ``\n``, which is passed as its bytes: a backslash alone spells no key)
    escaped = b'data: {"id":"g","choices":[{"index":0,"delta":{"\\u0072easoning":"r"},"finish_reason":null}]}\n\n'
    events = [_chunk(0, {"content": "x\n"}), escaped, _chunk(0, {"content": "y"}), b"data: [DONE]\n\n"]
    out = _run(SSERewriter(ResponseOptions()), events)
    assert out == _run(ReferenceRewriter(ResponseOptions()), [b"".join(events)])
    assert _deltas(out)[1:] == [
        ("g", 0, {"reasoning": "r", "reasoning_details": [{"type": "reasoning.text", "text": "r", "index": 0}]}),
        ("g", 0, {"reasoning_details": [{"type": "reasoning.text", "format": "unknown", "index": 0}]}),
        ("g", 0, {"reasoning_details": []}),
        ("g", 0, {"content": "y"}),
    ]


def test_visible_reasoning_beside_an_encrypted_fragment_becomes_its_own_detail_before_it() -> None:
    # the fast path of a fragment without text takes none beside visible reasoning: the plain text becomes a
    # reasoning.text detail, and the encrypted one follows it at the next index, byte for byte
    chunk = _chunk(0, {"reasoning": "t", "reasoning_details": [{"type": "reasoning.encrypted", "data": "E"}]})
    out = _run(SSERewriter(ResponseOptions()), [chunk, b"data: [DONE]\n\n"])
    assert out == _run(ReferenceRewriter(ResponseOptions()), [chunk + b"data: [DONE]\n\n"])
    assert _deltas(out) == [
        ("g", 0, {"reasoning": "t", "reasoning_details": [{"type": "reasoning.text", "text": "t", "index": 0}]}),
        (
            "g",
            0,
            {
                "reasoning_details": [
                    {"type": "reasoning.text", "format": "unknown", "index": 0},
                    {"type": "reasoning.encrypted", "data": "E", "index": 1},
                ]
            },
        ),
        ("g", 0, {"reasoning_details": []}),
    ]


def test_the_chunks_that_close_reasoning_take_the_envelope_of_the_chunk_they_go_before() -> None:
    # a chunk with two choices that ends choice 0's reasoning: its choices go apart, choice 0's close just before
    # its own answer; and the stream's end closes in the envelope of the last chunk, read or passed as bytes
    start = _chunk(0, {"reasoning": "p"})
    both = b'data: {"id":"g2","choices":[{"index":1,"delta":{"content":"a"}},{"index":0,"delta":{"content":"b"}}]}\n\n'
    out = _run(SSERewriter(ResponseOptions()), [start, both, b"data: [DONE]\n\n"])
    assert _deltas(out)[1:] == [
        ("g2", 1, {"content": "a"}),
        ("g2", 0, {"reasoning_details": [{"type": "reasoning.text", "format": "unknown", "index": 0}]}),
        ("g2", 0, {"reasoning_details": []}),
        ("g2", 0, {"content": "b"}),
    ]
    later = _chunk(0, {"content": ""}, model="other", id="g3")
    out = _run(SSERewriter(ResponseOptions()), [start, later, b"data: [DONE]\n\n"])
    closing = msgspec.json.decode(split_events(out)[2][6:])
    assert closing == {
        "id": "g3",
        "model": "other",
        "choices": [
            {
                "index": 0,
                "delta": {"reasoning_details": [{"type": "reasoning.text", "format": "unknown", "index": 0}]},
                "finish_reason": None,
            }
        ],
    }
    for events in ([start, both], [start, later]):
        stream = [*events, b"data: [DONE]\n\n"]
        assert _run(SSERewriter(ResponseOptions()), stream) == _run(ReferenceRewriter(ResponseOptions()), stream)


# usage as OpenAI's API reference shows it ("The chat completion object"), which OpenRouter and DeepSeek send too
_USAGE = (
    b'"usage":{"prompt_tokens":19,"completion_tokens":10,"total_tokens":29,"prompt_tokens_details":{"cached_tokens":0,'
    b'"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,'
    b'"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}'
)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b'{"id":"c","object":"chat.completion.chunk","choices":[],' + _USAGE + b"}", False),
        (b'{"id":"c","choices":[{"index":0,"delta":{"content":"Hi"}}],' + _USAGE + b"}", False),
        (b'{"a":{"reasoning_tokens":1},"b":{"reasoning_tokens":2}}', False),
        # a reasoning field after the count, before it, written with an escape
        (b"{" + _USAGE + b',"choices":[{"index":0,"delta":{"reasoning":"r"}}]}', True),
        (b'{"choices":[{"index":0,"delta":{"reasoning_content":"r"}}],' + _USAGE + b"}", True),
        (b"{" + _USAGE + b',"choices":[{"index":0,"delta":{"\\u0072easoning":"r"}}]}', True),
        # another key that starts so, and the word in a text: read, as any bytes that name it
        (b'{"reasoning_tokens_total":1}', True),
        (b'{"choices":[{"index":0,"delta":{"content":"no reasoning"}}]}', True),
    ],
)
def test_a_reasoning_token_count_is_no_reasoning_field(data: bytes, expected: bool) -> None:
    assert may_hold_reasoning(data) is expected
    assert isinstance(msgspec.json.decode(data), dict)  # each is a JSON object


# an answer chunk as OpenRouter streams it (its recorded Claude stream): the two fields hold nothing
_EMPTIES = b'{"id":"g","choices":[{"index":0,"delta":{"role":"assistant","content":"2 ","reasoning":null,"reasoning_details":[]}}]}'


@pytest.mark.parametrize(
    ("data", "shown", "excluded"),
    [
        (_EMPTIES, False, True),
        (_EMPTIES[:-1] + b"," + _USAGE + b"}", False, True),
        (b'{"choices":[{"index":0,"delta":{"reasoning":null}}]}', False, True),
        (b'{"choices":[{"index":0,"delta":{"reasoning_details":[]}}]}', False, True),
        (b'{"x_reasoning":null}', False, True),  # a key that ends so, with nothing in it
        # anything else that follows: read
        (_EMPTIES.replace(b'"reasoning":null', b'"reasoning": null'), True, True),
        (_EMPTIES.replace(b"[]", b"[ ]"), True, True),
        (_EMPTIES.replace(b"null", b'""'), True, True),
        (_EMPTIES.replace(b"[]", b'[{"type":"reasoning.text","text":"r"}]'), True, True),
        (b'{"choices":[{"index":0,"delta":{"content":"a","reasoning_content":null}}]}', True, True),
        (b'{"choices":[{"index":0,"delta":{"reasoning":null,"reasoning_content":"r"}}]}', True, True),
        (b'{"choices":[{"index":0,"delta":{"content":"a reasoning","reasoning":null}}]}', True, True),
    ],
)
def test_reasoning_fields_that_hold_nothing_are_read_only_to_take_them_out(
    data: bytes, shown: bool, excluded: bool
) -> None:
    # with the reasoning shown such a field goes as it came; with exclude it is taken out, so it is read
    assert may_hold_reasoning(data) is shown
    assert may_hold_reasoning(data, exclude=True) is excluded
    assert isinstance(msgspec.json.decode(data), dict)


def test_an_answer_chunk_whose_reasoning_fields_hold_nothing_goes_as_its_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # decoded are the reasoning chunk, every chunk while the reasoning is open (an empty one may end it) but a repeat
    # of the one before, and the answer chunk that ends it; after it none is read at all
    answer = b"data: " + _EMPTIES + b"\n\n"
    empty = answer.replace(b'"2 "', b'""')
    reasoning, more = _chunk(0, {"reasoning": "r"}), _chunk(0, {"reasoning": "s"})
    # the empty chunk with an id that makes its data 4,097 and 4,096 bytes long
    large = empty.replace(b'"id":"g"', b'"id":"' + b"g" * (4097 - len(empty) + 9) + b'"')
    largest = empty.replace(b'"id":"g"', b'"id":"' + b"g" * (4096 - len(empty) + 9) + b'"')
    assert (len(large) - 8, len(largest) - 8) == (4097, 4096)
    decoded: list[bytes] = []

    def decode(data: bytes) -> Any:
        decoded.append(data)
        return msgspec.json.decode(data)

    monkeypatch.setattr(response, "_decode", decode)
    cases = (
        ([reasoning, answer, empty, answer], [reasoning, answer]),
        ([reasoning, empty, empty, answer, empty], [reasoning, empty, answer]),
        ([reasoning, empty, empty, empty, answer], [reasoning, empty, answer]),
        # a keep-alive comment between: no data, nothing read
        ([reasoning, empty, b": PING\n\n", empty, answer], [reasoning, empty, answer]),
        # not the one before: the reasoning between was read
        ([reasoning, empty, more, empty, answer], [reasoning, empty, more, empty, answer]),
        # past the bytes kept for it (``_MAX_KEPT_QUIET``, 4,096), read again
        ([reasoning, large, large, answer], [reasoning, large, large, answer]),
        ([reasoning, largest, largest, answer], [reasoning, largest, answer]),
    )
    for events, read in cases:
        decoded.clear()
        rewriter = SSERewriter(ResponseOptions())
        out = [rewriter.feed(event) for event in events]
        closed = events.index(answer)
        assert decoded == [event[6:-2] for event in read]
        assert all(sent is event for sent, event in zip(out[closed + 1 :], events[closed + 1 :], strict=True))
        assert all(
            sent is event
            for sent, event in zip(out[1:closed], events[1:closed], strict=True)
            if event in (empty, large, largest)
        )
        done = [*events, b"data: [DONE]\n\n"]
        assert b"".join(out) + rewriter.feed(done[-1]) + rewriter.finish() == _run(
            ReferenceRewriter(ResponseOptions()), done
        )
        # with exclude they go without the two fields
        excluded = _run(SSERewriter(ResponseOptions(exclude=True)), done)
        assert b"reasoning" not in excluded
        assert excluded == _run(ReferenceRewriter(ResponseOptions(exclude=True)), done)


_MESSAGES = st.sampled_from(
    [
        {"role": "assistant", "content": "a", "reasoning": None, "reasoning_details": []},
        {"role": "assistant", "content": "a", "reasoning": None},
        {"role": "assistant", "content": None, "reasoning_details": []},
        {"role": "assistant", "content": "a", "reasoning": "", "reasoning_details": []},
        {"role": "assistant", "content": "a", "reasoning_content": None},
        {"role": "assistant", "content": "a", "reasoning": "r", "reasoning_details": []},
        {"role": "assistant", "content": "<think>t</think>a", "reasoning": None},
    ]
)


@pytest.mark.parametrize("option", list(OPTIONS))
@settings(max_examples=200, deadline=None)
@given(
    messages=st.lists(_MESSAGES, min_size=1, max_size=3),
    usage=st.sampled_from([{}, {"usage": {"completion_tokens_details": {"reasoning_tokens": 2}}}]),
)
def test_a_buffered_answer_whose_reasoning_fields_hold_nothing_gives_the_decoded_bytes(
    option: str, messages: list[dict[str, Any]], usage: dict[str, Any]
) -> None:
    # normalize_completion_body passes such a body as it came only where decoding it changes nothing
    options = OPTIONS[option]
    body = msgspec.json.encode(
        {
            "id": "c",
            "choices": [{"index": i, "message": m, "finish_reason": "stop"} for i, m in enumerate(messages)],
            **usage,
        }
    )
    value = msgspec.json.decode(body)
    changed = normalize_completion(value, exclude=options.exclude, think=options.think)
    if options.usage is not None and account_completion(value, options.usage):
        changed = True
    assert normalize_completion_body(body, options) == (codec.encode(value) if changed else body)


def test_a_usage_chunk_with_a_reasoning_token_count_goes_as_it_came() -> None:
    # after the reasoning closed, and while it is open (the chunk has no choice: it closes nothing)
    usage = b'data: {"id":"c","object":"chat.completion.chunk","choices":[],' + _USAGE + b"}\n\n"
    reasoning = _chunk(0, {"reasoning": "r"})
    for events in ([reasoning, _chunk(0, {"content": "a"}), usage], [reasoning, usage]):
        rewriter = SSERewriter(ResponseOptions())
        out = [rewriter.feed(event) for event in events]
        assert out[-1] is usage
        done = [*events, b"data: [DONE]\n\n"]
        assert b"".join(out) + rewriter.feed(done[-1]) + rewriter.finish() == _run(
            ReferenceRewriter(ResponseOptions()), done
        )


def test_a_chunk_a_shape_rewrites_after_one_passed_as_bytes_gives_the_stream_end_its_envelope() -> None:
    # reasoning chunks of id "a" (from the fourth on, rewritten by a shape), a chunk of id "b" passed as its bytes
    # while reasoning is open, then "a" again by the shape: the closing chunks at [DONE] take "a"'s envelope
    reasoning = b'data: {"id":"a","choices":[{"index":0,"delta":{"reasoning":"r"}}]}\n\n'
    usage = b'"usage":{"completion_tokens_details":{"reasoning_tokens":4}}'
    for between in (
        b'data: {"id":"b","choices":[{"index":0,"delta":{}}],' + usage + b"}\n\n",
        b'data: {"id":"b","choices":[{"index":0,"delta":{}}]}\n\n',
    ):
        events = [reasoning] * 4 + [between, reasoning, b"data: [DONE]\n\n"]
        out = _run(SSERewriter(ResponseOptions()), events)
        assert out == _run(ReferenceRewriter(ResponseOptions()), events)
        assert [msgspec.json.decode(event[6:]) for event in split_events(out)[6:8]] == [
            {
                "id": "a",
                "choices": [
                    {
                        "index": 0,
                        "delta": {"reasoning_details": [{"type": "reasoning.text", "format": "unknown", "index": 0}]},
                        "finish_reason": None,
                    }
                ],
            },
            {
                "id": "a",
                "choices": [{"index": 0, "delta": {"reasoning": None, "reasoning_details": []}, "finish_reason": None}],
            },
        ]


def test_a_passed_chunk_no_decoder_reads_leaves_the_stream_end_the_envelope_before_it() -> None:
    # a chunk between the reasoning and the end whose choices read but whose envelope holds a number no float
    # holds: decoding every chunk refuses it and keeps the envelope before it, "a", for the closing chunks
    reasoning = b'data: {"id":"a","choices":[{"index":0,"delta":{"reasoning":"r"}}]}\n\n'
    between = b'data: {"id":"b","x":1e400,"choices":[{"index":0,"delta":{}}]}\n\n'
    events = [reasoning, between, b"data: [DONE]\n\n"]
    out = _run(SSERewriter(ResponseOptions()), events)
    assert out == _run(ReferenceRewriter(ResponseOptions()), events)
    assert split_events(out)[1] == between
    assert [msgspec.json.decode(event[6:])["id"] for event in split_events(out)[2:4]] == ["a", "a"]


@pytest.mark.parametrize("bad", [b'"x":1e400,', b'"x":"\xff",', b'"x":1' + b"0" * 400 + b".0,"])
def test_the_stream_end_takes_the_envelope_of_the_last_chunk_that_decodes_while_reasoning_is_open(bad: bytes) -> None:
    # "b" decodes and leaves the reasoning open; "c" holds a value no decoder takes and goes as it came: the closing
    # chunks take "b"'s envelope (no usage key: "a"'s usage is not "b"'s), as decoding every chunk gives
    reasoning = b'data: {"id":"a","usage":null,"choices":[{"index":0,"delta":{"reasoning":"r"}}]}\n\n'
    between = b'data: {"id":"b","choices":[{"index":0,"delta":{}}]}\n\n'
    unreadable = b'data: {"id":"c",' + bad + b'"choices":[{"index":0,"delta":{}}]}\n\n'
    events = [reasoning, between, unreadable, b"data: [DONE]\n\n"]
    out = _run(SSERewriter(ResponseOptions()), events)
    assert out == _run(ReferenceRewriter(ResponseOptions()), events)
    assert split_events(out)[1:3] == [between, unreadable]
    closing = [msgspec.json.decode(event[6:]) for event in split_events(out)[3:5]]
    assert [(chunk["id"], "usage" in chunk) for chunk in closing] == [("b", False), ("b", False)]
