"""A stream's repeated reasoning chunks rewritten from their bytes (``core.shapes``): the bytes the full path sends,
exactly, for every stream; and the shape taken only where it holds."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks import payloads
from numi_mw.core import chunks
from numi_mw.core.response import ResponseOptions, SSERewriter
from numi_mw.core.shapes import canonical_text
from numi_mw.core.think import ThinkTags


def rewriter(*, shapes: bool = True, exclude: bool = False, think: ThinkTags | None = None) -> SSERewriter:
    out = SSERewriter(ResponseOptions(exclude=exclude, think=think))
    if not shapes:
        out._shape_tries = 0  # no try at a shape: every chunk takes the full path
    return out


def run(events: list[bytes], *, shapes: bool = True, **options: Any) -> tuple[list[bytes], SSERewriter]:
    """Each event fed on its own, then ``finish``; the bytes sent for each, and the rewriter."""
    rw = rewriter(shapes=shapes, **options)
    return [rw.feed(event) for event in events] + [rw.finish()], rw


def event(body: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"


def deepseek(raw_text: str) -> bytes:
    """A DeepSeek reasoning chunk whose ``reasoning_content`` is written as ``raw_text`` (JSON string contents)."""
    return (
        b'data: {"id":"d1","object":"chat.completion.chunk","created":1,"model":"deepseek-reasoner",'
        b'"choices":[{"index":0,"delta":{"content":null,"reasoning_content":"' + raw_text.encode() + b'"},'
        b'"logprobs":null,"finish_reason":null}]}\n\n'
    )


def test_canonical_text_refuses_a_long_text_in_one_pass() -> None:
    # a run of plain characters before an escape msgspec does not write: the check may not try every cut of the run
    assert canonical_text(b"a" * 100_000 + b"\\/") is False
    assert canonical_text(b"ab\\n" * 30_000 + b'"') is False
    assert canonical_text(b"ab\\n" * 30_000) is True


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        (b"plain words ", True),
        ("na\u00efve \u2028".encode(), True),
        (b'line\\nnext \\"q\\" \\\\ \\t\\r\\b\\f', True),
        (b"", True),
        (b'a"b', False),  # ends the string
        (b"a\\/b", False),  # msgspec writes "/" as itself
        (b"caf\\u00e9", False),  # and "\u00e9" as its UTF-8
        (b"\\u0000", False),
        (b"tab\there", False),  # a raw control character is no JSON
        (b"\\\\\\", False),  # an escaped backslash, then a lone one
        (b"\\x", False),
        (b"\xed\xa0\x80", False),  # a surrogate's UTF-8 form
        (b"\xc3", False),  # a cut sequence
    ],
)
def test_canonical_text_exact_values(raw: bytes, canonical: bool) -> None:
    assert canonical_text(raw) is canonical


def test_a_repeated_chunk_is_rewritten_from_its_bytes_exact_value() -> None:
    texts = ["We", " need", " to", " add", " the", 'line\\nnext \\"q\\"', " done"]
    events = [deepseek(text) for text in texts]
    out, rw = run(events)
    # the rewritten chunk of spec 004 "Streaming": reasoning_content becomes reasoning and a detail entry extending
    # the open text detail (type, text and index only)
    assert out[5] == (
        b'data: {"id":"d1","object":"chat.completion.chunk","created":1,"model":"deepseek-reasoner",'
        b'"choices":[{"index":0,"delta":{"content":null,"reasoning":"line\\nnext \\"q\\"","reasoning_details":'
        b'[{"type":"reasoning.text","text":"line\\nnext \\"q\\"","index":0}]},"logprobs":null,"finish_reason":null}]}'
        b"\n\n"
    )
    shape = rw._shape
    assert shape is not None and shape.hits == 3  # the first opens the detail; the shape is cut at the fourth
    assert out == run(events, shapes=False)[0]


def test_reasoning_after_the_answer_reopens_as_the_full_path_does() -> None:
    answer = (
        b'data: {"id":"d1","object":"chat.completion.chunk","created":1,"model":"deepseek-reasoner",'
        b'"choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":null,"finish_reason":null}]}\n\n'
    )
    events = [deepseek(f"r{n}") for n in range(6)] + [answer] + [deepseek(f"s{n}") for n in range(3)]
    out, rw = run([*events, b"data: [DONE]\n\n"])
    full, general = run([*events, b"data: [DONE]\n\n"], shapes=False)
    assert out == full
    # the reasoning that came back after the answer is closed again before [DONE]
    assert out[-2].startswith(b'data: {"id":"d1","object":"chat.completion.chunk","created":1,')
    assert b'"delta":{"reasoning":null,"reasoning_details":[]}' in out[-2]
    # two of the first reasoning's chunks, and two of the second's: the one that reopens it takes the full path
    assert rw._shape is not None and rw._shape.hits == 2 + 2
    # nine fragments, and the detail's held format sent on its own when the answer first closed the reasoning
    assert rw._normalizer._choices[0].sent == general._normalizer._choices[0].sent == 10


def test_the_closing_chunks_take_the_last_chunks_envelope() -> None:
    later = deepseek("x").replace(b'"created":1', b'"created":2')
    events = [deepseek(f"r{n}") for n in range(5)] + [later, deepseek("y")]
    out, rw = run(events)
    assert out == run(events, shapes=False)[0]
    assert rw._shape is not None and rw._shape.hits == 2  # r4 and y
    # the end closes the reasoning in chunks of the last chunk's envelope (created 1, as y's), not the one before
    assert [json.loads(line[6:])["created"] for line in out[-1].split(b"\n\n") if line] == [1, 1]


def test_a_text_the_shape_cannot_take_goes_through_the_full_path() -> None:
    texts = ["a", "b", "c", "d", "caf\\u00e9", "e"]
    events = [deepseek(text) for text in texts]
    out, rw = run(events)
    assert json.loads(out[4][6:])["choices"][0]["delta"]["reasoning"] == "caf\u00e9"
    assert out[4].count("caf\u00e9".encode()) == 2  # written back by the encoder, as UTF-8
    assert rw._shape is not None and rw._shape.hits == 1  # "e" only
    assert out == run(events, shapes=False)[0]


def test_a_stream_whose_chunks_never_repeat_tries_four_times() -> None:
    events = [event({"id": f"c{n}", "choices": [{"index": 0, "delta": {"reasoning": "r"}}]}) for n in range(40)]
    out, rw = run(events)
    assert rw._shape_tries == 0
    assert rw._shape is not None and rw._shape.hits == 0
    assert out == run(events, shapes=False)[0]


def _recorded() -> dict[str, list[bytes]]:
    streams = {name: payloads.split_events(body) for name, body in payloads.fixture_streams().items()}
    streams["spec_2000"] = payloads.spec_stream_events(2000)
    for shape in payloads.LOCAL_SHAPES:
        streams[f"local_{shape}"] = payloads.local_stream_events(400, shape)
    return streams


@pytest.mark.parametrize("think", [None, ThinkTags()], ids=["plain", "think"])
@pytest.mark.parametrize("exclude", [False, True], ids=["shown", "excluded"])
def test_recorded_and_benchmark_streams_are_sent_as_the_full_path_sends_them(
    think: ThinkTags | None, exclude: bool
) -> None:
    streams = _recorded()
    hits = 0
    for name, events in streams.items():
        out, rw = run(events, exclude=exclude, think=think)
        assert out == run(events, shapes=False, exclude=exclude, think=think)[0], name
        hits += rw._shape.hits if rw._shape is not None else 0
    # the long streams take shapes, their reasoning shown or taken out (with think splitting and exclude, the
    # content the splitter reads)
    assert hits > 1000


_PIECES = st.sampled_from(
    [
        "word ",
        "x",
        "na\u00efve",
        'q"q',
        "back\\slash",
        "nl\n",
        "\t",
        "\x00",
        "\u2028",
        "/",
        "<",
        "<think>",
        "</think>",
        "</",
        "<|channel|>",
        "d1",
        "reasoning",
        '","reasoning_details":[{"type":"reasoning.text","text":"',
        "\U0001f600",
    ]
)
_TEXT = st.lists(_PIECES, max_size=3).map("".join)


_KINDS = st.sampled_from(
    ["content", "reasoning", "details", "shown", "tagged", "other", "finish", "answer", "answer_after_content"]
)


def _delta(draw: st.DrawFn, kind: str) -> dict[str, Any]:
    """The delta of one chunk of ``kind``, with a drawn text."""
    text = draw(_TEXT)
    if kind == "content":
        return {"content": None, "reasoning_content": text}
    if kind == "reasoning":
        return {"reasoning": text, "channel": "analysis"}
    if kind == "details":
        entry = {"type": "reasoning.text", "text": text, **draw(st.sampled_from([{}, {"index": 0}, {"format": "f"}]))}
        return {"reasoning": draw(st.sampled_from([None, ""])), "reasoning_details": [entry]}
    if kind == "shown":
        other = draw(st.sampled_from([text, text, "other"]))
        return {"reasoning": text, "reasoning_details": [{"type": "reasoning.text", "text": other}]}
    if kind == "tagged":
        return {"content": text}
    if kind == "answer":  # OpenRouter's answer chunks
        return {"content": text, "reasoning": None, "reasoning_details": []}
    if kind == "answer_after_content":  # DeepSeek's
        return {"content": text, "reasoning_content": None}
    if kind == "other":
        return draw(st.sampled_from([{"content": "answer"}, {"role": "assistant"}, {}]))
    return {}


def _choice(draw: st.DrawFn, kind: str, index: int | None) -> dict[str, Any]:
    """A choice of ``kind`` at ``index`` (``None``: no ``index`` key, which reads as 0)."""
    choice = {"index": index, "delta": _delta(draw, kind), "finish_reason": "stop" if kind == "finish" else None}
    if index is None:
        del choice["index"]
    return choice


_LANES = st.sampled_from([1, 1, 1, 2, 2, 3]).flatmap(
    lambda n: st.lists(st.tuples(_KINDS, st.sampled_from([0, 0, 0, 1, 2, None])), min_size=n, max_size=n)
)
"""The kind and choice index of a run's chunks, in turn: one choice, or ``n`` > 1 completions streaming alternately,
each at its own point (one still reasoning, another answering), or stray chunks amid one choice's (``None``: the
``index`` left out)."""
_USAGE = {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}


@st.composite
def _streams(draw: st.DrawFn) -> list[bytes]:
    events = []
    envelope: dict[str, Any] = {"id": "d1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    if draw(st.integers(0, 3)) == 0:  # ``stream_options.include_usage``: every chunk has ``"usage": null``
        envelope["usage"] = None
    # runs of one kind on one choice, as streams have them, or of several kinds and choices in turn (``_LANES``)
    runs = draw(st.lists(st.tuples(st.integers(1, 20), _LANES), min_size=1, max_size=6))
    for size, lanes in runs:
        for n in range(size):
            kind, index = lanes[n % len(lanes)]
            change = draw(st.integers(0, 15))
            if change == 0:  # the envelope from this chunk on
                envelope = {**envelope, "created": draw(st.integers(1, 3))}
            choices = [_choice(draw, kind, index)]
            if draw(st.integers(0, 7)) == 0:  # two choices in one chunk
                second = draw(st.sampled_from([i for i in (0, 1, 2) if i != (index or 0)]))
                choices.insert(draw(st.integers(0, 1)), _choice(draw, draw(_KINDS), second))
            own = envelope
            if change in (1, 2):  # this chunk's envelope alone (another server's, say)
                own = {
                    **envelope,
                    **draw(st.sampled_from([{"created": 2}, {"created": 3}, {"system_fingerprint": "f"}])),
                }
            raw = event({**own, "choices": choices})
            if draw(st.integers(0, 9)) == 0:  # written with other bytes: spaces, an escape, another framing
                raw = draw(
                    st.sampled_from(
                        [
                            raw.replace(b'":"', b'": "'),
                            raw.replace(b"\xc3\xaf", b"\\u00ef"),
                            b"data:" + raw[5:],
                            raw.replace(b"\n\n", b"\r\n\r\n"),
                            b"id: 7\n" + raw,
                        ]
                    )
                )
            events.append(raw)
    if draw(st.booleans()):  # the usage chunk that ends a stream with ``stream_options.include_usage``
        events.append(event({**envelope, "choices": [], "usage": _USAGE}))
    return [*events, b"data: [DONE]\n\n"]


@pytest.mark.parametrize("think", [None, ThinkTags()], ids=["plain", "think"])
@pytest.mark.parametrize("exclude", [False, True], ids=["shown", "excluded"])
@settings(max_examples=300, deadline=None)
@given(events=_streams(), cuts=st.lists(st.integers(0, 20_000), max_size=4))
def test_any_stream_is_sent_as_the_full_path_sends_it(
    think: ThinkTags | None, exclude: bool, events: list[bytes], cuts: list[int]
) -> None:
    assert run(events, think=think, exclude=exclude)[0] == run(events, shapes=False, think=think, exclude=exclude)[0]
    body = b"".join(events)
    bounds = [0, *sorted(min(cut, len(body)) for cut in cuts), len(body)]
    pieces = [body[a:b] for a, b in itertools.pairwise(bounds)]
    assert b"".join(run(pieces, think=think, exclude=exclude)[0]) == b"".join(
        run(pieces, shapes=False, think=think, exclude=exclude)[0]
    )


def test_a_chunk_only_the_fallback_reads_leaves_no_shape_behind() -> None:
    # an emoji cut into two escapes (lone surrogates: the standard library reads them, msgspec does not), then the
    # answer: the answer's chunk may not be taken for a reasoning chunk the fast path rewrote
    events = [deepseek(t) for t in ("Let", " me", " think", "\\ud83d", "\\ude00")]
    events.append(
        deepseek("x").replace(b'"content":null,"reasoning_content":"x"', b'"content":"Hi","reasoning_content":null')
    )
    out, _ = run(events)
    assert out == run(events, shapes=False)[0]
    last = out[5].split(b"\n\n")[-2]  # after the chunks that close the reasoning
    assert json.loads(last[6:])["choices"][0]["delta"] == {"content": "Hi"}


def test_a_text_written_as_the_marker_cuts_no_shape() -> None:
    # the text "\u0000" is the marker's own bytes: a cut at the overridden duplicate key would pass the check
    chunk = b'data: {"id":"a","choices":[{"index":0,"delta":{"reasoning":"%s","reasoning": "\\u0000"}}]}\n\n'
    events = [chunk % b"\\u0000"] * 4 + [chunk % b"HELLO"]
    out, rw = run(events)
    assert out == run(events, shapes=False)[0]
    assert b"HELLO" not in out[4]  # the key that counts is the second, still "\u0000"
    assert rw._shape is None


def test_a_shape_is_cut_at_the_field_when_its_text_stands_under_the_same_key_elsewhere() -> None:
    # "reasoning":"same" stands twice in a chunk: in the delta and in an object of the chunk's own. A shape is cut
    # where the first one stands only when that one is the delta's (the marked decode tells them apart)
    def chunk(text: str, meta: str, meta_first: bool) -> bytes:
        body = {"meta": {"reasoning": meta}, "choices": [{"index": 0, "delta": {"reasoning": text}}]}
        return event({"id": "a", **(body if meta_first else dict(reversed(body.items())))})

    # the object's first: the try at the fourth chunk refuses it; a cut there would have sent the last chunk's
    # object text as its reasoning (the try at the last chunk cuts at its delta, where "same" now stands first)
    events = [chunk("same", "same", True)] * 6 + [chunk("same", "zzz", True)]
    assert run(events[:6])[1]._shape is None
    out, rw = run(events)
    assert out == run(events, shapes=False)[0]
    last = json.loads(out[6][6:])
    assert last["meta"] == {"reasoning": "zzz"}
    assert last["choices"][0]["delta"]["reasoning"] == "same"
    assert last["choices"][0]["delta"]["reasoning_details"][0]["text"] == "same"

    # the delta's first: cut at the fourth chunk, which rewrites the three after it
    events = [chunk("same", "same", False)] * 5 + [chunk("other", "same", False)] * 2
    out, rw = run(events)
    assert out == run(events, shapes=False)[0]
    assert rw._shape is not None and rw._shape.hits == 3
    last = json.loads(out[6][6:])
    assert last["meta"] == {"reasoning": "same"}
    assert last["choices"][0]["delta"]["reasoning"] == "other"
    assert last["choices"][0]["delta"]["reasoning_details"][0]["text"] == "other"


def test_a_run_of_one_shape_is_cut_without_the_decoder_only_at_an_event_boundary() -> None:
    events = [deepseek(f"r{n}") for n in range(8)]
    held = b'data: {"id":"d1",'  # half an event: the next chunk's bytes continue it
    # one chunk of a whole event of the shape and the start of the next
    stream = [*events, deepseek("r8") + held, deepseek("s"), b"\n\n", deepseek("t")]
    out, rw = run(stream)
    assert out == run(stream, shapes=False)[0]
    # r4..r8 go by the shape; "s" completes the held event, which is no JSON: it goes as it came, the held bytes
    # first, and is no hit; the blank line goes as it came; "t" is one again
    assert out[8] == deepseek("r8").replace(
        b'"reasoning_content":"r8"',
        b'"reasoning":"r8","reasoning_details":[{"type":"reasoning.text","text":"r8","index":0}]',
    )
    assert out[9] == held + deepseek("s")
    assert out[10] == b"\n\n"
    assert rw._shape is not None and rw._shape.hits == 5 + 1
    assert rw._lead is None  # the run went on to the last chunk ("t" was a hit), and finish ended it


def test_a_shape_takes_no_event_over_the_event_limit() -> None:
    from numi_mw.core.errors import ApiError
    from numi_mw.core.structs import Bounds

    events = [deepseek(f"r{n}") for n in range(8)]
    limit = len(events[0]) + 10
    for shapes in (True, False):
        rw = SSERewriter(ResponseOptions(bounds=Bounds(max_event_bytes=limit)))
        if not shapes:
            rw._shape_tries = 0
        sent = [rw.feed(e) for e in events]
        assert (rw._lead is not None) is shapes
        with pytest.raises(ApiError) as raised:
            rw.feed(deepseek("a long fragment past the limit"))
        assert raised.value.status == 502
        assert sent == run(events, shapes=False)[0][:-1]


def test_an_event_the_shape_does_not_fit_ends_the_run() -> None:
    answer = deepseek("x").replace(
        b'"content":null,"reasoning_content":"x"', b'"content":"Hi","reasoning_content":null'
    )
    events = [*(deepseek(f"r{n}") for n in range(8)), answer, answer]
    out, rw = run(events)
    assert out == run(events, shapes=False)[0]
    assert rw._lead is None and rw._shape is not None and rw._shape.hits == 4


def test_excluded_reasoning_chunks_go_as_the_full_path_sends_them_exact_values() -> None:
    # spec 004 "Streaming": with exclude no reasoning goes out; a chunk left with nothing is dropped, one with other
    # fields keeps them
    events = [deepseek(f"r{n}") for n in range(8)]
    out, rw = run(events, exclude=True)
    assert out == [b""] * 9
    # r4..r7: the first chunk taken out is not counted, as the one that opens a shown detail is not
    assert rw._shape is not None and rw._shape.hits == 4
    groq = [
        b'data: {"id":"g","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
        b'"delta":{"reasoning":"%s","channel":"analysis"},"logprobs":null,"finish_reason":null}]}\n\n' % text
        for text in (b"We", b" need", b" to", b" call", b" the", b' \\"x\\"', b" tool")
    ]
    out, rw = run(groq, exclude=True)
    kept = (
        b'data: {"id":"g","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
        b'"delta":{"channel":"analysis"},"logprobs":null,"finish_reason":null}]}\n\n'
    )
    assert out == [kept] * 7 + [b""]
    assert rw._shape is not None and rw._shape.hits == 3  # the last three, an escaped quote among them
    assert out == run(groq, shapes=False, exclude=True)[0]


@pytest.mark.parametrize(
    ("delta", "kind"),
    [
        ({"content": None, "reasoning_content": "r"}, "CONTENT_TEXT"),
        ({"reasoning": "r", "channel": "analysis"}, "PLAIN_TEXT"),
        ({"reasoning": "r", "reasoning_details": [{"type": "reasoning.text", "text": "r"}]}, "SHOWN_TEXT"),
        (
            {"reasoning": None, "reasoning_details": [{"type": "reasoning.text", "text": "r", "index": 0}]},
            "DETAIL_TEXT",
        ),
        ({"reasoning_details": [{"type": "reasoning.text", "text": "r"}]}, "DETAIL_TEXT"),
        ({"reasoning": "r", "reasoning_details": [{"type": "reasoning.text", "text": "s"}]}, None),
        ({"reasoning": "r", "reasoning_content": "r"}, None),
        ({"reasoning_details": [{"type": "reasoning.encrypted", "data": "e"}]}, None),
        ({"reasoning": "", "content": "a"}, "ANSWER_TEXT"),
        ({"content": "a", "reasoning_content": None}, "ANSWER_TEXT"),
        ({"content": "a", "reasoning": None, "reasoning_details": []}, "ANSWER_TEXT"),
        ({"content": "", "reasoning": None}, None),
        ({"content": "a", "reasoning": "r"}, "PLAIN_TEXT"),  # the answer's text stands in the shape's bytes
        (
            {"reasoning_details": [{"type": "reasoning.text", "text": "r"}, {"type": "reasoning.text", "text": "s"}]},
            None,
        ),
    ],
)
def test_where_the_text_of_an_excluded_chunk_stands(delta: dict[str, Any], kind: str | None) -> None:
    normalizer = chunks.ChunkNormalizer(exclude=True)
    normalizer.normalize({"id": "a", "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
    assert normalizer.repeat == (getattr(chunks, kind) if kind is not None else 0)


def test_the_answers_chunks_go_as_the_full_path_sends_them_exact_values() -> None:
    # OpenRouter's answer chunks (reasoning fields that hold nothing) go as they came once the reasoning is closed:
    # the first three passed as their bytes, unread, the next read so that a shape is cut (from the seventh); with
    # exclude they lose those fields, by a shape from the fifth; DeepSeek's lose their null reasoning_content
    # (spec 004 "Streaming": one shape for every provider)
    texts = (b"Two", b" plus", b" two", b" is", b' \\"four\\"', b".", b" It", b" is", b" even")
    openrouter = [
        b'data: {"id":"o","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":'
        b'{"role":"assistant","content":"%s","reasoning":null,"reasoning_details":[]},"finish_reason":null}]}\n\n'
        % text
        for text in texts
    ]
    out, rw = run(openrouter[:3])
    assert out == [*openrouter[:3], b""]
    assert rw._shape is None  # none was read
    out, rw = run(openrouter)
    assert out == [*openrouter, b""]
    assert rw._shape is not None and rw._shape.hits == 3  # cut on the sixth
    assert rw._lead is None  # finish ended the run
    out, rw = run(openrouter[:6], exclude=True)
    assert out == [
        b'data: {"id":"o","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":'
        b'{"role":"assistant","content":"%s"},"finish_reason":null}]}\n\n' % text
        for text in texts[:6]
    ] + [b""]
    assert out == run(openrouter[:6], shapes=False, exclude=True)[0]
    assert rw._shape is not None and rw._shape.hits == 2  # cut on the fourth (the first taken out is not counted)
    assert rw._lead is None  # finish ended the run
    answer = (
        b'data: {"id":"d1","object":"chat.completion.chunk","created":1,"model":"deepseek-reasoner",'
        b'"choices":[{"index":0,"delta":{"content":"%s","reasoning_content":null},"logprobs":null,'
        b'"finish_reason":null}]}\n\n'
    )
    events = [deepseek(f"r{n}") for n in range(6)] + [answer % text for text in (b"A", b"B", b"C", b"D", b"E")]
    out, rw = run(events)
    assert out == run(events, shapes=False)[0]
    # the first answer chunk closes the reasoning first (the full path); the next three count, the last is a hit
    assert out[10] == (
        b'data: {"id":"d1","object":"chat.completion.chunk","created":1,"model":"deepseek-reasoner",'
        b'"choices":[{"index":0,"delta":{"content":"E"},"logprobs":null,"finish_reason":null}]}\n\n'
    )
    assert rw._shape is not None and rw._shape.hits == 1
    assert b"".join(out[6:]).count(b"reasoning_content") == 0
    # with the reasoning excluded: the reasoning chunks dropped, the answer's sent without the null field
    excluded, rw = run(events, exclude=True)
    assert excluded == [b""] * 6 + [out[10].replace(b'"E"', b'"A"'), *out[7:]]  # no reasoning to close
    assert excluded == run(events, shapes=False, exclude=True)[0]
    # E, as with the reasoning shown: the first chunk of each run is not counted (shown, "r0" opens the detail and
    # "A" closes it)
    assert rw._shape is not None and rw._shape.hits == 1


def test_an_answer_chunk_after_reopened_reasoning_closes_it_first() -> None:
    def chunk(delta: bytes) -> bytes:
        return (
            b'data: {"id":"o","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
            b'"delta":{' + delta + b'},"finish_reason":null}]}\n\n'
        )

    # answer chunks that name an empty reasoning (OpenRouter's null ones pass as their bytes: no shape)
    answer = [chunk(b'"content":"%s","reasoning":"","reasoning_details":[]' % t) for t in (b"a", b"b", b"c", b"d")]
    reasoning = chunk(b'"content":"","reasoning":"more","reasoning_details":[]')
    events = [*answer, reasoning, answer[0]]
    out, rw = run(events)
    assert out == run(events, shapes=False)[0]
    assert rw._shape is not None and rw._shape.hits == 1  # "d" only: "a" after the reasoning closes it first
    # the reasoning's detail closed first (its format, "unknown" for plain reasoning, held until it closes), then
    # the answer chunk as it came
    assert out[5] == (
        chunk(b'"reasoning_details":[{"type":"reasoning.text","format":"unknown","index":0}]') + answer[0]
    )


def test_a_try_at_an_answer_shape_makes_no_choice_state() -> None:
    # the closing chunks follow the order the choices' states were made in; the full path makes none for an answer
    # chunk while no reasoning is open, so a try at its shape may not either
    def chunk(index: int, delta: bytes) -> bytes:
        return (
            b'data: {"id":"g","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":%d,'
            b'"delta":{%s},"finish_reason":null}]}\n\n' % (index, delta)
        )

    events = [chunk(0, b'"content":"%s","reasoning":"","reasoning_details":[]' % t) for t in (b"a", b"b", b"c")]
    events += [chunk(1, b'"reasoning":"r1"'), chunk(0, b'"reasoning":"r0"'), b"data: [DONE]\n\n"]
    out, rw = run(events)
    assert out == run(events, shapes=False)[0]
    assert rw._shape is not None  # cut from "c"
    closing = [json.loads(line[6:])["choices"][0]["index"] for line in out[5].split(b"\n\n")[:-2]]
    assert closing == [1, 1, 0, 0]  # choice 1's reasoning came first


def test_no_run_of_a_shape_outlives_the_stream() -> None:
    from numi_mw.core.errors import CUT_SHORT

    # fed after finish (or fail), the decoder starts a stream again: a chunk goes through it, its BOM dropped as
    # at a stream's start and nothing taken by the shape, as before any run
    def answer(text: bytes) -> bytes:
        return (
            b'data: {"id":"d1","choices":[{"index":0,"delta":{"content":"'
            + text
            + b'","reasoning_content":null}}]}\n\n'
        )

    for end in ("finish", "fail"):
        rw = SSERewriter(ResponseOptions())
        for n in range(12):
            rw.feed(answer(b"a%d" % n))
        assert rw._lead is not None
        if end == "finish":
            rw.finish()
        else:
            rw.fail(CUT_SHORT)
        assert rw._lead is None
        taken = rw.feed(b"\xef\xbb\xbf" + answer(b"b"))  # a stream's start again: the decoder drops the BOM
        assert taken == b'data: {"id":"d1","choices":[{"index":0,"delta":{"content":"b"}}]}\n\n'
        assert rw.feed(answer(b"z")) == b'data: {"id":"d1","choices":[{"index":0,"delta":{"content":"z"}}]}\n\n'
        assert rw._lead is rw._shape  # past the start once more, a run may start again
        assert rw.feed(b"\xef\xbb\xbf" + answer(b"c")) == b"\xef\xbb\xbf" + answer(b"c")


@pytest.mark.parametrize("between", [b": keep-alive\n\n", b"id: 9\n\n", b"\n"])
def test_a_run_goes_on_over_other_events_in_a_read_cut_inside_events(between: bytes) -> None:
    # a comment, an event of another field or a lone blank line between a run's events, in a read that ends inside
    # the next event: the run waits for that event's end and takes it, as it does across such events read whole
    events = [deepseek(f"r{n}") for n in range(16)]
    rw = rewriter()
    sent = [rw.feed(event) for event in events[:12]]
    assert rw._lead is not None and rw._lead is rw._shape
    cut = events[12] + events[13] + between + events[14][:20]
    sent.append(rw.feed(cut))
    assert rw._paused is rw._shape  # the start of events[14] held, the run waiting for its end
    sent.append(rw.feed(events[14][20:] + events[15]))
    assert rw._lead is rw._shape
    reads = [*events[:12], cut, events[14][20:] + events[15]]
    assert [*sent, rw.finish()] == run(reads, shapes=False)[0]


def test_a_run_goes_on_after_a_whole_comment_read_alone() -> None:
    # OpenRouter's keep-alive comment as a read of its own between a run's events: it goes as it came, the decoder
    # takes no part (nothing held, no event built), and the run takes the next event, as with no comment
    events = [deepseek(f"r{n}") for n in range(14)]
    comment = b": OPENROUTER PROCESSING\n\n"
    rw = rewriter()
    sent = [rw.feed(event) for event in events[:12]]
    assert rw._lead is not None and rw._lead is rw._shape
    sent.append(rw.feed(comment))
    assert sent[-1] is comment
    assert rw._lead is rw._shape and rw._decoder.between_events()
    sent += [rw.feed(event) for event in events[12:]]
    assert rw._lead is rw._shape
    reads = [*events[:12], comment, *events[12:]]
    assert [*sent, rw.finish()] == run(reads, shapes=False)[0]
