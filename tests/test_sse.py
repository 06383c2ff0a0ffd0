"""SSE decoder and encoder (``numi_mw.core.sse``): exact events, every line end, every split, recorded streams."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numi_mw.core.sse import EventTooLarge, SSEDecoder, SSEEvent, encode_event, replace_data, terminate_event


def decode(*chunks: bytes) -> list[SSEEvent]:
    """All events of a stream fed as ``chunks``, flush included."""
    decoder = SSEDecoder()
    events: list[SSEEvent] = []
    for chunk in chunks:
        events += decoder.feed(chunk)
    return events + decoder.flush()


def split_at(stream: bytes, cuts: list[int]) -> list[bytes]:
    """``stream`` cut at the given positions (any order, duplicates allowed)."""
    bounds = [0, *sorted(min(max(c, 0), len(stream)) for c in cuts), len(stream)]
    return [stream[a:b] for a, b in pairwise(bounds)]


OPENROUTER_LIKE = (
    b": OPENROUTER PROCESSING\n\n"
    b'data: {"choices":[{"delta":{"reasoning":"Spell it out: "}}]}\n\n'
    b'data: {"choices":[{"delta":{"content":"Three \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80."}}]}\n\n'
    b"data: [DONE]\n\n"
)
ANTHROPIC_LIKE = (
    b"event: message_start\n"
    b'data: {"type":"message_start"}\n\n'
    b"event: ping\n"
    b'data: {"type": "ping"}\n\n'
    b"event: content_block_delta\n"
    b'data: {"type":"content_block_delta","delta":{"type":"thinking_delta","thinking":"Hm"}}\n\n'
    b"event: message_stop\n"
    b'data: {"type":"message_stop"    }\n\n'
)
MIXED = (
    b"\xef\xbb\xbf: hello\r\n\r\n"
    b"id: 7\rretry: 3000\revent: update\rdata: line one\rdata:line two\r\r"
    b"data\r\n\r\n"
    b"\n"
    b": keep-alive\n: twice\n\n"
    b"data:  two spaces\r\nfield-without-colon\r\nunknown: x\r\n\r\n"
    b"data: tail without blank line"
)
SAMPLES = [OPENROUTER_LIKE, ANTHROPIC_LIKE, MIXED]


# --- exact values ------------------------------------------------------------------------------------------


def test_openrouter_like_stream_exact_events() -> None:
    events = decode(OPENROUTER_LIKE)
    assert events == [
        SSEEvent(raw=b": OPENROUTER PROCESSING\n\n", data=None, is_comment_only=True),
        SSEEvent(
            raw=b'data: {"choices":[{"delta":{"reasoning":"Spell it out: "}}]}\n\n',
            data=b'{"choices":[{"delta":{"reasoning":"Spell it out: "}}]}',
        ),
        SSEEvent(
            raw=b'data: {"choices":[{"delta":{"content":"Three \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80."}}]}\n\n',
            data=b'{"choices":[{"delta":{"content":"Three \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80."}}]}',
        ),
        SSEEvent(raw=b"data: [DONE]\n\n", data=b"[DONE]"),
    ]
    assert [e.is_done for e in events] == [False, False, False, True]
    assert [e.is_comment_only for e in events] == [True, False, False, False]


def test_event_and_id_fields() -> None:
    (event,) = decode(b"event: content_block_delta\nid: 42\ndata: {}\n\n")
    assert event == SSEEvent(
        raw=b"event: content_block_delta\nid: 42\ndata: {}\n\n", data=b"{}", event="content_block_delta", id="42"
    )


def test_mixed_stream_exact_events() -> None:
    assert decode(MIXED) == [
        SSEEvent(raw=b"\xef\xbb\xbf: hello\r\n\r\n", is_comment_only=True),
        SSEEvent(
            raw=b"id: 7\rretry: 3000\revent: update\rdata: line one\rdata:line two\r\r",
            data=b"line one\nline two",
            event="update",
            id="7",
        ),
        SSEEvent(raw=b"data\r\n\r\n", data=b""),
        SSEEvent(raw=b"\n"),
        SSEEvent(raw=b": keep-alive\n: twice\n\n", is_comment_only=True),
        SSEEvent(raw=b"data:  two spaces\r\nfield-without-colon\r\nunknown: x\r\n\r\n", data=b" two spaces"),
        SSEEvent(raw=b"data: tail without blank line", data=b"tail without blank line"),
    ]


def test_multi_line_data_joined_with_lf() -> None:
    (event,) = decode(b'data: {\ndata:   "a": 1\ndata: }\n\n')
    assert event.data == b'{\n  "a": 1\n}'
    assert json.loads(event.data) == {"a": 1}


def test_empty_data_values() -> None:
    assert [e.data for e in decode(b"data:\n\ndata: \n\ndata\n\ndata:\ndata:\n\n")] == [b"", b"", b"", b"\n"]


def test_last_field_wins_and_id_with_nul_is_ignored() -> None:
    (event,) = decode(b"event: a\nevent: b\nid: 1\nid: 2\0x\ndata: x\n\n")
    assert (event.event, event.id) == ("b", "1")


def test_comment_with_data_is_not_comment_only() -> None:
    (event,) = decode(b": note\ndata: x\n\n")
    assert event.is_comment_only is False
    assert event.data == b"x"


def test_event_without_data() -> None:
    (event,) = decode(b"event: ping\n\n")
    assert event == SSEEvent(raw=b"event: ping\n\n", data=None, event="ping")
    assert event.is_done is False


def test_done_needs_exact_data() -> None:
    assert [e.is_done for e in decode(b"data: [DONE]\n\ndata:[DONE]\n\ndata: [DONE] \n\ndata:  [DONE]\n\n")] == [
        True,
        True,
        False,
        False,
    ]


def test_invalid_utf8_in_event_name_is_replaced() -> None:
    (event,) = decode(b"event: a\xffb\ndata: \xff\n\n")
    assert event.event == "a\ufffdb"
    assert event.data == b"\xff"


def test_bom_only_at_stream_start() -> None:
    first, second = decode(b"\xef\xbb\xbfdata: a\n\n\xef\xbb\xbfdata: b\n\n")
    assert first.data == b"a"
    assert first.raw == b"\xef\xbb\xbfdata: a\n\n"
    assert second.data is None  # a BOM later is part of a field name
    assert second.raw == b"\xef\xbb\xbfdata: b\n\n"


# --- line ends -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"], ids=["lf", "crlf", "cr"])
def test_every_line_end_style(eol: bytes) -> None:
    lines = [b": c", b"", b"event: e", b"data: a", b"data: b", b"", b"data: [DONE]", b""]
    stream = eol.join(lines) + eol
    events = decode(stream)
    assert [(e.data, e.event, e.is_comment_only) for e in events] == [
        (None, None, True),
        (b"a\nb", "e", False),
        (b"[DONE]", None, False),
    ]
    assert b"".join(e.raw for e in events) == stream
    assert events[1].raw == b"event: e" + eol + b"data: a" + eol + b"data: b" + eol + eol


def test_mixed_line_ends_in_one_event() -> None:
    (event,) = decode(b"data: a\r\ndata: b\rdata: c\ndata: d\r\n\n")
    assert event.data == b"a\nb\nc\nd"


def test_crlf_split_between_chunks_gives_no_spurious_line() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"\n") == []
    assert decoder.feed(b"\r") == []  # could still be "\r\n": held until the next byte
    assert decoder.feed(b"\n") == [SSEEvent(raw=b"data: a\r\n\r\n", data=b"a")]
    assert decoder.feed(b"data: b\r\n\r") == []
    assert decoder.feed(b"\ndata: c\r\n\r\n") == [
        SSEEvent(raw=b"data: b\r\n\r\n", data=b"b"),
        SSEEvent(raw=b"data: c\r\n\r\n", data=b"c"),
    ]
    assert decoder.flush() == []


def test_bare_cr_at_end_is_decided_by_next_byte_or_flush() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r\r") == []
    assert decoder.feed(b"data: b\r") == [SSEEvent(raw=b"data: a\r\r", data=b"a")]
    assert decoder.feed(b"\r") == []
    assert decoder.flush() == [SSEEvent(raw=b"data: b\r\r", data=b"b")]


# --- flush ---------------------------------------------------------------------------------------------------


def test_flush_returns_unterminated_event_with_remaining_raw() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\n\nevent: x\ndata: b\ndata: c") == [SSEEvent(raw=b"data: a\n\n", data=b"a")]
    assert decoder.flush() == [SSEEvent(raw=b"event: x\ndata: b\ndata: c", data=b"b\nc", event="x")]


def test_flush_with_complete_lines_but_no_blank_line() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\n") == []
    assert decoder.flush() == [SSEEvent(raw=b"data: a\n", data=b"a")]


def test_flush_of_comment_without_blank_line() -> None:
    assert decode(b": bye") == [SSEEvent(raw=b": bye", is_comment_only=True)]


def test_flush_when_nothing_remains() -> None:
    decoder = SSEDecoder()
    assert decoder.flush() == []
    assert decoder.feed(b"") == []
    assert decoder.feed(b"data: a\n\n") == [SSEEvent(raw=b"data: a\n\n", data=b"a")]
    assert decoder.flush() == []


def test_decoder_is_reset_after_flush() -> None:
    decoder = SSEDecoder()
    decoder.feed(b"event: x\ndata: partial")
    decoder.flush()
    assert decoder.feed(b"data: fresh\n\n") == [SSEEvent(raw=b"data: fresh\n\n", data=b"fresh")]


# --- any split -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", SAMPLES, ids=["openrouter", "anthropic", "mixed"])
def test_split_at_every_byte_position(stream: bytes) -> None:
    whole = decode(stream)
    assert b"".join(e.raw for e in whole) == stream
    for i in range(len(stream) + 1):
        assert decode(stream[:i], stream[i:]) == whole, i


@pytest.mark.parametrize("stream", SAMPLES, ids=["openrouter", "anthropic", "mixed"])
def test_one_byte_at_a_time(stream: bytes) -> None:
    assert decode(*(stream[i : i + 1] for i in range(len(stream)))) == decode(stream)


def test_split_at_every_pair_of_positions() -> None:
    stream = MIXED
    whole = decode(stream)
    for i in range(len(stream) + 1):
        for j in range(i, len(stream) + 1):
            assert decode(stream[:i], stream[i:j], stream[j:]) == whole, (i, j)


def test_large_event_in_many_small_chunks() -> None:
    payload = b'{"text":"' + b"x\xc3\xa9" * 100_000 + b'"}'
    stream = b"data: " + payload + b"\r\n\r\n" + b"data: [DONE]\r\n\r\n"
    decoder = SSEDecoder()
    events: list[SSEEvent] = []
    for i in range(0, len(stream), 7):
        events += decoder.feed(stream[i : i + 7])
    events += decoder.flush()
    assert [e.data for e in events] == [payload, b"[DONE]"]
    assert b"".join(e.raw for e in events) == stream


_PIECES = st.sampled_from(
    [
        b"data: x",
        b"data:",
        b'data: {"a": "\xc3\xa9\xf0\x9f\x98\x80"}',
        b"data: [DONE]",
        b": OPENROUTER PROCESSING",
        b":",
        b"event: e",
        b"id: 1",
        b"retry: 10",
        b"data",
        b"x",
        b" ",
        b"\xef\xbb\xbf",
        b"\n",
        b"\r",
        b"\r\n",
        b"\n\n",
        b"\r\n\r\n",
    ]
)


@settings(max_examples=200, deadline=None)
@given(pieces=st.lists(_PIECES, max_size=40), cuts=st.lists(st.integers(0, 2000), max_size=12))
def test_any_chunking_gives_the_same_events(pieces: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(pieces)
    whole = decode(stream)
    assert b"".join(e.raw for e in whole) == stream
    assert decode(*split_at(stream, cuts)) == whole


def _line_parser() -> SSEDecoder:
    """A decoder without its fast path for chunks at an event boundary: every byte through the line parser. Set
    through its attribute rather than a subclass, since the compiled core's classes take none."""
    decoder = SSEDecoder()
    decoder._simple = False
    return decoder


_LINES = st.sampled_from(
    [
        b"event: content_block_delta\n",
        b"event:\n",
        b"event:  x\n",
        b"eventful: x\n",
        b'data: {"type":"ping"}\n',
        b"data:\n",
        b"data: \n",
        b"data\n",
        b": ping\n",
        b"id: 3\n",
        b"x\n",
        b"\xef\xbb\xbfdata: b\n",
    ]
)
_FRAMED_EVENTS = st.lists(_LINES, max_size=3).map(lambda lines: b"".join(lines) + b"\n")


@settings(max_examples=500, deadline=None)
@given(
    start=st.sampled_from([b"", b": first\n\n", b"\xef\xbb\xbf", b"\xef\xbb", b"\xef"]),
    events=st.lists(st.one_of(_FRAMED_EVENTS, _FRAMED_EVENTS, _PIECES), max_size=16),
    cuts=st.lists(st.integers(0, 600), max_size=8),
)
def test_the_fast_path_cuts_the_events_the_line_parser_does(start: bytes, events: list[bytes], cuts: list[int]) -> None:
    """Chunks at an event boundary are cut without the line parser (one ``data:`` line, ``event:`` then ``data:``,
    a comment, a lone blank line): every event, its fields and its bytes, as the line parser gives them, whether
    the chunks are cut anywhere or are one event each, from the stream's first byte (a first chunk that may start
    a BOM, or part of one, goes to the line parser)."""
    stream = start + b"".join(events)
    for chunks in (split_at(stream, cuts), [e.raw for e in decode(stream)]):
        line_parser = _line_parser()
        expected = [e for chunk in chunks for e in line_parser.feed(chunk)] + line_parser.flush()
        assert decode(*chunks) == expected


def _one_data_line(event: SSEEvent) -> bool:
    """Whether ``event`` is one ``data: `` line and its blank line (what ``data_lines`` takes)."""
    return event.data is not None and event.raw == b"data: " + event.data + b"\n\n"


def _framed(event: SSEEvent) -> bool:
    """Whether ``event`` is one ``data:`` line after at most one ``event:`` line (what ``framed_lines`` takes)."""
    lines = event.raw.split(b"\n")
    return event.data is not None and (len(lines) == 3 or (len(lines) == 4 and lines[0].startswith(b"event:")))


@pytest.mark.parametrize(("method", "form"), [("data_lines", _one_data_line), ("framed_lines", _framed)])
@settings(max_examples=500, deadline=None)
@given(
    start=st.sampled_from([b"", b"data: first\n\n", b"event: e\ndata: first\n\n", b": first\n\n", b"event: par"]),
    events=st.lists(st.one_of(_FRAMED_EVENTS, _FRAMED_EVENTS, _PIECES), max_size=16),
)
def test_a_read_of_several_events_gives_the_data_the_line_parser_does(
    method: str, form: Callable[[SSEEvent], bool], start: bytes, events: list[bytes]
) -> None:
    """A read of several events cut by ``data_lines`` or ``framed_lines``: when it takes the read, each event is of
    the form it takes, with that data, as the line parser gives them, and the decoder holds nothing; when it does
    not, the decoder is as it was."""
    decoder = SSEDecoder()
    decoder.feed(start)
    chunk = b"".join(events)
    lines = getattr(decoder, method)(chunk)
    line_parser = _line_parser()
    line_parser.feed(start)
    expected = line_parser.feed(chunk)
    if lines is None:
        assert decoder.feed(chunk) == expected
    else:
        assert [event.data for event in expected] == lines
        assert all(map(form, expected))
        assert decoder.between_events() and decoder.held == 0


def test_a_first_chunk_of_many_events_is_cut_the_same_with_or_without_a_bom() -> None:
    chunk = b'data: {"a":1}\n\n: ping\n\nevent: e\ndata: 2\n\n'
    expected = [
        SSEEvent(b'data: {"a":1}\n\n', b'{"a":1}'),
        SSEEvent(b": ping\n\n", None, None, None, True),
        SSEEvent(b"event: e\ndata: 2\n\n", b"2", "e"),
    ]
    assert SSEDecoder().feed(chunk) == expected
    assert SSEDecoder().feed(b"\xef\xbb\xbf" + chunk) == [
        SSEEvent(b"\xef\xbb\xbf" + expected[0].raw, b'{"a":1}'),
        *expected[1:],
    ]


def test_the_fast_path_on_anthropic_framing_exact_values() -> None:
    decoder = SSEDecoder()
    decoder.feed(b": first\n\n")  # past the start of the stream (a BOM could open it)
    assert decoder.feed(b'event: ping\ndata: {"type": "ping"}\n\nevent:x\ndata:\n\n\n: c\n\ndata: d\n\nevent: e\n') == [
        SSEEvent(b'event: ping\ndata: {"type": "ping"}\n\n', b'{"type": "ping"}', "ping"),
        SSEEvent(b"event:x\ndata:\n\n", b"", "x"),
        SSEEvent(b"\n"),
        SSEEvent(b": c\n\n", None, None, None, True),
        SSEEvent(b"data: d\n\n", b"d"),
    ]
    assert decoder.feed(b"data: f\n\n") == [SSEEvent(b"event: e\ndata: f\n\n", b"f", "e")]
    assert decoder.feed(b"event: g\ndata: h\nid: 3\n\n") == [SSEEvent(b"event: g\ndata: h\nid: 3\n\n", b"h", "g", "3")]


@settings(max_examples=200, deadline=None)
@given(stream=st.binary(max_size=300), cuts=st.lists(st.integers(0, 300), max_size=8))
def test_any_chunking_of_arbitrary_bytes(stream: bytes, cuts: list[int]) -> None:
    whole = decode(stream)
    assert b"".join(e.raw for e in whole) == stream
    assert decode(*split_at(stream, cuts)) == whole


# --- single_data: the one-event fast path --------------------------------------------------------------------


def test_single_data_exact_values() -> None:
    decoder = SSEDecoder()
    assert decoder.single_data(b"\xef\xbb\xbfdata: first\n\n") is None  # a BOM goes to feed, which drops it
    assert SSEDecoder().single_data(b"data: first\n\n") == b"first"  # a first event starting "data:" has none
    assert decoder.single_data(b'data: {"a":1}\n\n') == b'{"a":1}'
    assert decoder.single_data(b"data:no space\n\n") == b"no space"
    assert decoder.single_data(b"data:  two\n\n") == b" two"
    assert decoder.single_data(b"data:\n\n") == b""
    assert decoder.single_data(b"data: [DONE]\n\n") == b"[DONE]"
    for chunk in (
        b"data: a\n\ndata: b\n\n",  # two events
        b"data: a\ndata: b\n\n",  # two data lines
        b"event: x\ndata: a\n\n",  # another field
        b"data: a\r\n\r\n",  # CR line ends
        b"data: a\rb\n\n",  # a bare CR ends a line
        b": comment\n\n",
        b"data: a\n",  # not finished
        b"\n\n",
        b"",
    ):
        assert decoder.single_data(chunk) is None, chunk
    decoder.feed(b"data: par")
    assert decoder.single_data(b"data: b\n\n") is None  # bytes of an event are buffered
    assert decoder.feed(b"tial\n\n") == [SSEEvent(raw=b"data: partial\n\n", data=b"partial")]


def test_data_lines_exact_values() -> None:
    decoder = SSEDecoder()
    assert decoder.data_lines(b"\xef\xbb\xbfdata: a\n\ndata: b\n\n") is None  # a BOM goes to feed, which drops it
    assert SSEDecoder().data_lines(b"data: a\n\ndata: b\n\n") == [b"a", b"b"]
    assert decoder.data_lines(b'data: {"a":1}\n\ndata: \n\ndata: [DONE]\n\n') == [b'{"a":1}', b"", b"[DONE]"]
    assert decoder.data_lines(b"data: one\n\n") == [b"one"]
    assert decoder.data_lines(b"data:  two\n\ndata: x data: y\n\n") == [b" two", b"x data: y"]
    for chunk in (
        b"data: a\n\ndata:b\n\n",  # no space after a colon: split apart by feed, which takes either
        b"data: a\n\ndata: b\ndata: c\n\n",  # two data lines
        b"data: a\n\nevent: x\ndata: b\n\n",  # another field
        b"data: a\n\n: comment\n\n",
        b"data: a\n\n\ndata: b\n\n",  # a blank line of its own
        b"data: a\r\n\r\ndata: b\r\n\r\n",  # CR line ends
        b"data: a\n\ndata: b\rc\n\n",  # a bare CR ends a line
        b"data: a\n\ndata: b\n",  # the last one not finished
        b"data: a\n\ndata: b",
        b"\n\n",
        b"",
    ):
        assert decoder.data_lines(chunk) is None, chunk


def test_framed_lines_exact_values() -> None:
    decoder = SSEDecoder()
    assert decoder.framed_lines(b"\xef\xbb\xbfevent: x\ndata: a\n\n") is None  # a BOM goes to feed
    chunk = b'event: ping\ndata: {"type": "ping"}\n\nevent:x\ndata:y\n\ndata:  two\n\nevent: x\ndata:\n\n'
    assert SSEDecoder().framed_lines(chunk) == [b'{"type": "ping"}', b"y", b" two", b""]
    assert decoder.framed_lines(b"data: [DONE]\n\n") == [b"[DONE]"]
    for chunk in (
        b"event: x\n\ndata: a\n\n",  # no data
        b"event: x\ndata: a\ndata: b\n\n",  # two data lines
        b"event: x\nevent: y\ndata: a\n\n",  # two event lines
        b"data: a\nevent: x\n\n",  # the event line after the data
        b"event: x\nid: 1\ndata: a\n\n",  # another field
        b"data: a\n\n: ping\n\n",  # a comment
        b"data: a\n\n\ndata: b\n\n",  # a blank line of its own
        b"event: x\r\ndata: a\r\n\r\n",  # CR line ends
        b"data: a\n\nevent: x\ndata: b\n",  # the last one not finished
        b"\n\n",
        b"",
    ):
        assert decoder.framed_lines(chunk) is None, chunk


def test_a_read_that_ends_the_held_event_and_goes_on() -> None:
    # the held event is ended by the line parser, the rest cut as a read at an event boundary; the events the read
    # completed are kept past an event over the bound
    decoder = SSEDecoder()
    decoder.feed(b"event: e\ndata: a")
    assert decoder.feed(b"bc\n\ndata: d\n\n: c\n\ndata: par") == [
        SSEEvent(b"event: e\ndata: abc\n\n", b"abc", "e"),
        SSEEvent(b"data: d\n\n", b"d"),
        SSEEvent(b": c\n\n", None, None, None, True),
    ]
    assert decoder.feed(b"t\n") == []
    assert decoder.feed(b"\ndata: e\n\n") == [SSEEvent(b"data: part\n\n", b"part"), SSEEvent(b"data: e\n\n", b"e")]
    assert decoder.held == 0
    bounded = SSEDecoder(max_event_bytes=32)
    bounded.feed(b"data: a")
    with pytest.raises(EventTooLarge):
        bounded.feed(b"bc\n\ndata: d\n\ndata: " + b"x" * 40 + b"\n\n")
    assert bounded.end() == ([SSEEvent(b"data: abc\n\n", b"abc"), SSEEvent(b"data: d\n\n", b"d")], None)


def test_split_read_exact_values() -> None:
    decoder = SSEDecoder()
    # at an event boundary: the whole events, and the start of the next, which feed holds
    assert decoder.split_read(b"data: a\n\ndata: b\n\ndata: pa") == (b"data: a\n\ndata: b\n\n", b"data: pa")
    assert decoder.split_read(b"data: pa") == (b"", b"data: pa")
    assert decoder.split_read(b"data: a\n") == (b"", b"data: a\n")
    assert decoder.held == 0  # nothing was consumed
    for chunk in (
        b"data: a\n\ndata: b\n\n",  # whole events at both ends: for data_lines, or for feed
        b": ping\n\n",
        b"data: a\r\n\r\ndata: pa",  # CR line ends
        b"",
    ):
        assert decoder.split_read(chunk) is None, chunk
    # a read that ends the held event: the event's bytes and the read, and the decoder lets go of the event
    decoder.feed(b"event: e\ndata: a")
    assert decoder.split_read(b"bc\n\ndata: d\n\ndata: e") == (b"event: e\ndata: abc\n\ndata: d\n\n", b"data: e")
    assert decoder.held == 0
    assert decoder.feed(b"data: e") == []
    assert decoder.feed(b"\n\n") == [SSEEvent(b"data: e\n\n", b"e")]
    decoder.feed(b"data: a\n")  # a line end held, the blank line in the read
    assert decoder.split_read(b"data: b") is None  # (a second line)
    assert decoder.split_read(b"\ndata: b") == (b"data: a\n\n", b"data: b")
    assert decoder.feed(b"data: b") == []
    assert decoder.split_read(b"c") is None  # the read does not end the held event
    assert decoder.split_read(b"c\n") is None
    assert decoder.split_read(b"c\ndata: d") is None
    assert decoder.feed(b"c\n\n") == [SSEEvent(b"data: bc\n\n", b"bc")]
    decoder.feed(b"data: a\r")  # the held bytes have a CR: for feed
    assert decoder.split_read(b"\n\ndata: b") is None
    assert decoder.feed(b"\n\ndata: b") == [SSEEvent(b"data: a\r\n\n", b"a")]


def test_split_lines_exact_values() -> None:
    decoder = SSEDecoder()
    decoder.feed(b"data: a")
    assert decoder.split_lines(b"b\n\ndata: c\n\ndata: d") == ([b"ab", b"c"], [])
    assert decoder.held == len(b"data: d")  # the rest was fed
    assert decoder.split_lines(b"\n\nevent: e\ndata: f\n\nda", framed=True) == ([b"d", b"f"], [])
    assert decoder.split_lines(b"ta: g\n\n: c\n\ndata: h") == (
        [],
        [SSEEvent(b"data: g\n\n", b"g"), SSEEvent(b": c\n\n", None, None, None, True)],
    )
    assert decoder.split_lines(b"\n\ndata: i\n\n") == ([b"h", b"i"], [])
    assert decoder.split_lines(b"data: j\n\n") is None  # whole events at both ends
    bounded = SSEDecoder(max_event_bytes=8)
    with pytest.raises(EventTooLarge):
        bounded.split_lines(b"data: " + b"x" * 10)


def test_hold_keeps_the_rest_as_feed_would() -> None:
    # the rest of a split read, held once its whole events were taken: the read that ends it takes it back whole,
    # a read that does not end it sends it to the line parser, and a rest of several lines keeps its fields
    decoder = SSEDecoder()
    assert decoder.split_read(b"data: a\n\ndata: b") == (b"data: a\n\n", b"data: b")
    assert decoder.data_lines(b"data: a\n\n") == [b"a"]
    decoder.hold(b"data: b")
    assert decoder.held == len(b"data: b")
    assert not decoder.between_events()
    assert decoder.split_read(b"c\n\ndata: d") == (b"data: bc\n\n", b"data: d")
    decoder.feed(b"data: bc\n\n")
    decoder.hold(b"data: d")
    assert decoder.feed(b"e") == []  # no blank line: to the line parser, from the held bytes' start
    assert decoder.feed(b"\n\n") == [SSEEvent(b"data: de\n\n", b"de")]
    assert decoder.between_events()
    assert decoder.split_read(b"data: f\n\nevent: g\nid: 7\ndata: h") == (
        b"data: f\n\n",
        b"event: g\nid: 7\ndata: h",
    )
    decoder.feed(b"data: f\n\n")
    decoder.hold(b"event: g\nid: 7\ndata: h")
    assert decoder.feed(b"\n") == []
    assert decoder.feed(b"\n") == [SSEEvent(b"event: g\nid: 7\ndata: h\n\n", b"h", "g", "7")]
    assert decoder.flush() == []


def test_single_comment_takes_one_whole_comment_at_an_event_boundary() -> None:
    # OpenRouter's keep-alive, read alone: taken, and the decoder left as feed leaves it (the stream's start passed)
    comment = b": OPENROUTER PROCESSING\n\n"
    decoder = SSEDecoder(max_event_bytes=len(comment))
    assert not decoder.between_events()  # the stream's first bytes may bring a BOM
    assert decoder.single_comment(comment) is True
    assert decoder.between_events() and decoder.held == 0
    fed = SSEDecoder(max_event_bytes=len(comment))
    assert fed.feed(comment) == [SSEEvent(comment, None, None, None, True)]
    assert fed.between_events()
    assert decoder.single_comment(b":\n\n") is True  # a comment line with no text
    # anything else is left to the other paths, nothing consumed
    for chunk in (
        b"",
        b"\n\n",
        b":\n",
        b": a\n",
        b": a\n: b\n\n",
        b": a\r\n\r\n",
        b": a\rdata: b\n\n",  # a ``\r`` ends a line too: a comment, then a data line
        b": a\n\n: b\n\n",
        b": a\n\ndata: b\n\n",
        b"data: a\n\n",
        b"id: 1\n\n",
        b": " + b"x" * len(comment) + b"\n\n",  # over the bound
    ):
        assert decoder.single_comment(chunk) is False, chunk
        assert decoder.between_events() and decoder.held == 0
    decoder.feed(b"data: a")  # an event held: a comment read now is a line of it
    assert decoder.single_comment(b": b\n\n") is False
    assert decoder.held == len(b"data: a")
    assert decoder.feed(b"\n: b\n\n") == [SSEEvent(b"data: a\n: b\n\n", b"a")]


def test_split_read_keeps_a_dropped_bom_and_the_bound() -> None:
    decoder = SSEDecoder()
    decoder.feed(b"\xef\xbb\xbfdata: a\n")  # the stream's BOM, dropped once its first line ended
    assert decoder.split_read(b"\ndata: b\n\n") is None  # read again, the BOM would open a field name
    assert decoder.feed(b"\ndata: b\n\n") == [
        SSEEvent(b"\xef\xbb\xbfdata: a\n\n", b"a"),
        SSEEvent(b"data: b\n\n", b"b"),
    ]
    decoder = SSEDecoder()
    decoder.feed(b"\xef\xbb\xbfdata: a")  # no line end yet: the BOM is still to drop, read again or not
    assert decoder.split_read(b"\n\n") == (b"\xef\xbb\xbfdata: a\n\n", b"")
    assert decoder.feed(b"\xef\xbb\xbfdata: a\n\n") == [SSEEvent(b"\xef\xbb\xbfdata: a\n\n", b"a")]
    bounded = SSEDecoder(max_event_bytes=16)
    bounded.feed(b"data: 0123456")  # the held event and the read's first blank line are over the bound
    assert bounded.split_read(b"789\n\ndata: x") == (b"", b"data: 0123456789\n\ndata: x")
    with pytest.raises(EventTooLarge):
        bounded.feed(b"data: 0123456789\n\ndata: x")
    bounded = SSEDecoder(max_event_bytes=16)
    assert bounded.split_read(b"data: a\n\ndata: " + b"x" * 10) == (b"data: a\n\n", b"data: " + b"x" * 10)
    assert bounded.split_read(b"data: a\n\ndata: " + b"x" * 20) == (b"", b"data: a\n\ndata: " + b"x" * 20)
    assert bounded.split_read(b"data: a\n\ndata: b\n\ndata: c\n\nd") == (b"", b"data: a\n\ndata: b\n\ndata: c\n\nd")


def _decoded(
    decoder: SSEDecoder, take: Callable[[bytes], list[SSEEvent]], chunks: list[bytes]
) -> tuple[list[SSEEvent], bool]:
    """The events ``take`` gives for each of ``chunks`` in turn, then those of ``decoder.end()``; and whether
    ``EventTooLarge`` ended the stream."""
    events: list[SSEEvent] = []
    try:
        for chunk in chunks:
            events += take(chunk)
    except EventTooLarge:
        over = True
    else:
        over = False
    completed, rest = decoder.end()
    return events + completed + ([rest] if rest is not None else []), over


def decode_as_readers_do(chunks: list[bytes], limit: int | None = None) -> tuple[list[SSEEvent], bool]:
    """Every event of ``chunks`` as the stream readers take them (``SSERewriter``, ``NativeSSERewriter``,
    ``Accumulator.feed_sse``): ``single_data``, ``single_comment`` (``SSERewriter``, ``Accumulator.feed_sse``),
    ``data_lines``, ``split_read`` (its whole events through
    ``data_lines`` when it takes them, else ``feed``; then the rest held, ``hold``, or through ``feed`` when there
    are no whole events), else ``feed``; then ``end``. An event a fast path takes is built from its data. Also
    whether ``EventTooLarge`` ended the stream."""
    decoder = SSEDecoder(max_event_bytes=limit)

    def lines(chunk: bytes) -> list[SSEEvent] | None:
        taken = decoder.data_lines(chunk)
        return None if taken is None else [SSEEvent(b"data: " + line + b"\n\n", line) for line in taken]

    def take(chunk: bytes) -> list[SSEEvent]:
        single = decoder.single_data(chunk)
        if single is not None:
            return [SSEEvent(chunk, single)]
        if decoder.single_comment(chunk):
            return [SSEEvent(chunk, None, None, None, True)]
        events = lines(chunk)
        if events is not None:
            return events
        split = decoder.split_read(chunk)
        if split is None:
            return decoder.feed(chunk)
        whole, rest = split
        if not whole:
            return decoder.feed(rest)
        events = lines(whole)
        if events is None:
            events = decoder.feed(whole)
        if rest:
            decoder.hold(rest)
        return events

    return _decoded(decoder, take, chunks)


def decode_by_line_parser(chunks: list[bytes], limit: int | None = None) -> tuple[list[SSEEvent], bool]:
    """``decode_as_readers_do`` on the line parser alone."""
    decoder = SSEDecoder(max_event_bytes=limit)
    decoder._simple = False  # (as ``_line_parser``)
    return _decoded(decoder, decoder.feed, chunks)


@settings(max_examples=500, deadline=None)
@given(
    start=st.sampled_from([b"", b"\xef\xbb\xbf", b"\xef\xbb", b": first\n\n"]),
    events=st.lists(st.one_of(_FRAMED_EVENTS, _FRAMED_EVENTS, _PIECES), max_size=16),
    cuts=st.lists(st.integers(0, 600), max_size=8),
    limit=st.sampled_from([None, None, 8, 16, 32, 64]),
)
def test_reads_cut_anywhere_give_the_line_parsers_events(
    start: bytes, events: list[bytes], cuts: list[int], limit: int | None
) -> None:
    """A stream cut anywhere, read as the stream readers read it (``split_read`` among their paths), gives every
    event, its fields and its bytes, as the line parser does, and ends with ``EventTooLarge`` where it does."""
    chunks = split_at(start + b"".join(events), cuts)
    assert decode_as_readers_do(chunks, limit) == decode_by_line_parser(chunks, limit)


@pytest.mark.parametrize("folder", ["openai-chat", "anthropic-messages", "openai-responses"])
def test_recorded_streams_cut_at_seeded_places_give_the_line_parsers_events(shared_dir: Path, folder: str) -> None:
    for path in sorted((shared_dir / "fixtures" / folder).glob("*.sse")):
        stream = path.read_bytes()
        for seed in range(4):
            rng = random.Random(seed)
            chunks = split_at(stream, [rng.randrange(len(stream)) for _ in range(len(stream) // 300 + 1)])
            assert decode_as_readers_do(chunks) == decode_by_line_parser(chunks), (path.name, seed)
            assert decode_as_readers_do(chunks, 512) == decode_by_line_parser(chunks, 512), (path.name, seed)


@pytest.mark.parametrize("method", ["data_lines", "framed_lines"])
def test_a_read_of_several_events_over_the_bound_or_after_held_bytes_goes_to_feed(method: str) -> None:
    bounded = SSEDecoder(max_event_bytes=16)
    over = b"data: a\n\ndata: " + b"x" * 20 + b"\n\n"  # its second event is over the bound: feed refuses it
    assert getattr(bounded, method)(over) is None
    with pytest.raises(EventTooLarge):
        bounded.feed(over)
    decoder = SSEDecoder()
    decoder.feed(b"event: x\ndata: par")
    assert getattr(decoder, method)(b"data: b\n\ndata: c\n\n") is None  # bytes of an event are held
    assert decoder.feed(b"tial\n\n") == [SSEEvent(raw=b"event: x\ndata: partial\n\n", data=b"partial", event="x")]


def test_a_read_whose_data_line_is_followed_by_another_line_is_not_cut_as_two_events() -> None:
    decoder = SSEDecoder()
    for chunk in (b"data: a\nxdata: b\n\n", b"event: e\ndata: a\nxdata: b\n\n", b"data: a\n:data: b\n\n"):
        assert decoder.framed_lines(chunk) is None, chunk
        assert decoder.data_lines(chunk) is None, chunk
    assert decoder.feed(b"data: a\nxdata: b\n\n") == [SSEEvent(b"data: a\nxdata: b\n\n", b"a")]


def test_framed_data_exact_values() -> None:
    decoder = SSEDecoder()
    assert decoder.framed_data(b'event: ping\ndata: {"type": "ping"}\n\n') == b'{"type": "ping"}'
    assert decoder.framed_data(b"event:x\ndata:y\n\n") == b"y"
    assert decoder.framed_data(b"event: x\ndata:\n\n") == b""
    assert decoder.framed_data(b"data:  two\n\n") == b" two"
    assert decoder.framed_data(b"data: [DONE]\n\n") == b"[DONE]"
    for chunk in (
        b"\xef\xbb\xbfevent: x\ndata: a\n\n",  # a BOM goes to feed
        b"event: x\n\n",  # no data
        b"event: x\nid: 1\ndata: a\n\n",  # another field
        b"event: x\ndata: a\ndata: b\n\n",  # two data lines
        b"data: a\nevent: x\n\n",  # the name after the data
        b"event: x\ndata: a\n\nevent: y\ndata: b\n\n",  # two events
        b"event: x\r\ndata: a\r\n\r\n",  # CR line ends
        b"event: x\ndata: a\rb\n\n",
        b"event: x\ndata: a\n",  # not finished
        b"event: x\ndata: a\nb",  # a third line begun
        b"data: a\nb",
        b"event: x",
        b": comment\n\n",
        b"\n\n",
        b"",
    ):
        assert decoder.framed_data(chunk) is None, chunk
    decoder.feed(b"event: x\ndata: par")
    assert decoder.framed_data(b"data: b\n\n") is None  # bytes of an event are buffered
    assert decoder.feed(b"tial\n\n") == [SSEEvent(b"event: x\ndata: partial\n\n", b"partial", "x")]


@settings(max_examples=300, deadline=None)
@given(event=_FRAMED_EVENTS, first=st.booleans())
def test_framed_data_is_the_data_feed_gives(event: bytes, first: bool) -> None:
    """When ``framed_data`` takes a chunk, ``feed`` would give exactly one event for it, with that data."""
    fast, general = SSEDecoder(), SSEDecoder()
    if not first:  # past the start of the stream
        fast.feed(b": c\n\n")
        general.feed(b": c\n\n")
    data = fast.framed_data(event)
    if data is not None:
        events = general.feed(event)
        assert [(e.raw, e.data) for e in events] == [(event, data)]


def decode_with_fast_path(*chunks: bytes) -> list[tuple[bytes, bytes | None]]:
    """``(raw, data)`` of every event, taking ``single_data`` whenever it applies (as ``SSERewriter`` does)."""
    decoder = SSEDecoder()
    out: list[tuple[bytes, bytes | None]] = []
    for chunk in chunks:
        data = decoder.single_data(chunk)
        if data is not None:
            out.append((chunk, data))
        else:
            out += [(e.raw, e.data) for e in decoder.feed(chunk)]
    return out + [(e.raw, e.data) for e in decoder.flush()]


@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(_PIECES, max_size=40), cuts=st.lists(st.integers(0, 2000), max_size=12))
def test_fast_path_gives_the_same_events(pieces: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(pieces)
    whole = [(e.raw, e.data) for e in decode(stream)]
    assert decode_with_fast_path(*split_at(stream, cuts)) == whole
    events = [e.raw for e in decode(stream)]
    assert decode_with_fast_path(*events) == whole


# --- encode_event --------------------------------------------------------------------------------------------


def test_encode_event_exact_bytes() -> None:
    assert encode_event(b'{"a":1}') == b'data: {"a":1}\n\n'
    assert encode_event(b"[DONE]") == b"data: [DONE]\n\n"
    assert encode_event(b"a\nb", event="update", id="7") == b"event: update\nid: 7\ndata: a\ndata: b\n\n"
    assert encode_event(b"") == b"data: \n\n"
    assert encode_event(b"a\r\nb\rc\n") == b"data: a\ndata: b\ndata: c\ndata: \n\n"
    assert encode_event(b" lead") == b"data:  lead\n\n"


@pytest.mark.parametrize("data", [b"", b"x", b" x", b"a\nb", b"a\n", b"\n", b'{"t":"\xc3\xa9"}', b"[DONE]"], ids=repr)
def test_encode_then_decode_round_trip(data: bytes) -> None:
    raw = encode_event(data, event="e", id="i")
    assert decode(raw) == [SSEEvent(raw=raw, data=data, event="e", id="i")]


@pytest.mark.parametrize("kwargs", [{"event": "a\nb"}, {"event": "a\r"}, {"id": "1\n"}, {"id": "1\0"}])
def test_encode_event_refuses_unframeable_names(kwargs: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        encode_event(b"x", **kwargs)


# --- recorded streams ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("folder", ["openai-chat", "anthropic-messages"])
def test_recorded_streams(shared_dir: Path, folder: str) -> None:
    files = sorted((shared_dir / "fixtures" / folder).glob("*.sse"))
    assert files, f"no recorded *.sse files in {folder}"
    for path in files:
        stream = path.read_bytes()
        for size in (len(stream) or 1, 1000, 7, 1):
            events = decode(*(stream[i : i + size] for i in range(0, len(stream), size)))
            assert b"".join(e.raw for e in events) == stream, (path.name, size)
        data_events = [e for e in events if not e.is_comment_only]
        assert data_events, path.name
        for event in data_events:
            assert event.data is not None, (path.name, event.raw[:80])
            if not event.is_done:
                json.loads(event.data)
        if folder == "openai-chat":
            assert events[-1].is_done, path.name
        else:
            assert all(e.event for e in data_events), path.name
            assert json.loads(data_events[-1].data or b"")["type"] == "message_stop"


# --- replace_data: a rewritten event keeps its other lines -----------------------------------------------------


def test_replace_data_keeps_every_other_line_in_place() -> None:
    raw = b": note\r\nid: 7\nretry: 3000\ndata: old one\ndata:old two\nevent: update\n\n"
    assert replace_data(raw, b'{"a":1}') == b': note\r\nid: 7\nretry: 3000\ndata: {"a":1}\nevent: update\n\n'
    assert replace_data(raw, b"x\ny") == b": note\r\nid: 7\nretry: 3000\ndata: x\ndata: y\nevent: update\n\n"


def test_replace_data_exact_values() -> None:
    assert replace_data(b"data: old\n\n", b"new") == b"data: new\n\n"
    assert replace_data(b"data\rretry: 5\r\r", b"new") == b"data: new\nretry: 5\r\r"  # a bare data field
    assert replace_data(b"\xef\xbb\xbfdata: old\n\n", b"new") == b"data: new\n\n"  # the BOM opened a data line
    assert replace_data(b"\xef\xbb\xbf: c\ndata: old\n\n", b"new") == b"\xef\xbb\xbf: c\ndata: new\n\n"
    assert replace_data(b"database: x\ndata: old\n\n", b"new") == b"database: x\ndata: new\n\n"  # another field


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([b": c", b"id: 1", b"retry: 9", b"event: e", b"data: d", b"data", b"x-y: z"])))
def test_replace_data_decodes_to_the_new_data_and_the_same_fields(lines: list[bytes]) -> None:
    raw = b"".join(line + b"\n" for line in [*lines, b"data: old"]) + b"\n"
    [before] = SSEDecoder().feed(raw)
    [after] = SSEDecoder().feed(replace_data(raw, b"new\nlines"))
    assert (after.data, after.event, after.id) == (b"new\nlines", before.event, before.id)
    kept = [line for line in raw.split(b"\n") if not line.startswith(b"data")]
    assert [line for line in after.raw.split(b"\n") if not line.startswith(b"data")] == kept


def test_end_keeps_the_unfinished_event_apart_and_finished_finishes_it() -> None:
    decoder = SSEDecoder()
    decoder.feed(b"data: a\n\nid: 7\ndata: b")
    events, rest = decoder.end()
    assert events == []  # "data: a" was returned by feed
    assert rest == SSEEvent(raw=b"id: 7\ndata: b", data=b"b", id="7")
    assert terminate_event(rest) == SSEEvent(raw=b"id: 7\ndata: b\n\n", data=b"b", id="7")
    assert terminate_event(SSEEvent(raw=b"data: c\r", data=b"c")).raw == b"data: c\r\n"  # the line end was there
    decoder.feed(b"data: d\r")  # a line, but no blank line after it
    assert decoder.end() == ([], SSEEvent(raw=b"data: d\r", data=b"d"))
    decoder.feed(b"data: e\r\r")  # the last \r was held back by feed; at the end it is the blank line
    assert decoder.end() == ([SSEEvent(raw=b"data: e\r\r", data=b"e")], None)
