"""The response side of the core: upstream bytes in, client bytes out, sans-I/O.

A shell picks one rewriter per response with ``choose_rewriter`` (from the status, content type and content
encoding), feeds it the upstream body as it arrives, and sends what it returns. Both rewriters share one
interface: ``feed(bytes) -> bytes``, ``finish() -> bytes`` at the end of the body, ``fail(error) -> bytes`` when
the body breaks off.

- ``SSERewriter`` (``text/event-stream``, 2xx): events are decoded incrementally (``sse.SSEDecoder``, split at
  any byte) and each chunk goes through ``chunks.ChunkNormalizer``; an event that needs no change leaves as its
  original bytes, and comments and ``data: [DONE]`` pass through. Nothing is buffered beyond the current event.
- ``JSONRewriter`` (``application/json``, 2xx): a buffered completion, collected and normalized by
  ``completion.normalize_completion`` at the end.
- ``None``: anything else (other media types, error statuses, an encoding the shell does not decode) passes
  through unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from typing import Any, ClassVar

import msgspec

from numi_mw.core import codec
from numi_mw.core.adapters import WIRE_APIS, Answer, Translation, WireAdapter
from numi_mw.core.chunks import UNCHANGED, ChunkNormalizer
from numi_mw.core.completion import normalize_completion
from numi_mw.core.errors import (
    CUT_SHORT,
    ApiError,
    event_too_large,
    is_error_body,
    response_too_large,
    upstream_error_body,
    upstream_unavailable,
)
from numi_mw.core.providers import ProviderRules
from numi_mw.core.shapes import ChunkShape, shape_of
from numi_mw.core.sse import EventTooLarge, SSEDecoder, SSEEvent, encode_event, replace_data, terminate_event
from numi_mw.core.structs import DEFAULT_BOUNDS as DEFAULT_BOUNDS
from numi_mw.core.structs import DEFAULT_MAX_EVENT_BYTES as DEFAULT_MAX_EVENT_BYTES
from numi_mw.core.structs import DEFAULT_MAX_RESPONSE_BYTES as DEFAULT_MAX_RESPONSE_BYTES
from numi_mw.core.structs import Bounds as Bounds
from numi_mw.core.structs import ChunkHead
from numi_mw.core.structs import ResponseOptions as ResponseOptions
from numi_mw.core.think import THINK_STARTS, ThinkStart, ThinkTags
from numi_mw.core.usage import UsageRules, account_completion


def think_tags_for(
    rules: ProviderRules,
    split: bool | ThinkTags | None = None,
    start: ThinkStart | None = None,
    *,
    route_start: ThinkStart | None = None,
) -> ThinkTags | None:
    """The think-tag settings for ``rules``'s provider (``docs/streaming.md``, "Think tags").

    Args:
        rules: the target provider's rules.
        split: ``None`` for the provider's default (on for ``local``, whose servers may return ``<think>`` tags
            inside ``content``), ``True``/``False`` to force it, or a ``ThinkTags`` (own tag families) to use.
        start: where a stream starts (``ThinkTags.start``) as configured for the shell (``--think-start``,
            ``think_start=``); ``None`` when not configured. It wins over ``route_start``.
        route_start: where a stream starts for the route's model (a catalog model's ``think_start``,
            ``Route.think_start``), used when ``start`` is ``None``; without either, ``content``.

    ``start`` and ``route_start`` apply when ``split`` is not a ``ThinkTags`` (whose own ``start`` holds).
    """
    if isinstance(split, ThinkTags):
        return split
    enabled = rules.split_think_tags if split is None else split
    if not enabled:
        return None
    chosen = start if start is not None else route_start if route_start is not None else "content"
    return _THINK_TAGS[chosen]


_THINK_TAGS: dict[ThinkStart, ThinkTags] = {start: ThinkTags(start=start) for start in THINK_STARTS}
"""One ``ThinkTags`` per start (they are frozen), so a request does not build one."""


def response_options(
    translation: Translation | None,
    exclude: bool,
    think: ThinkTags | None,
    *,
    created: int = 0,
    bounds: Bounds = DEFAULT_BOUNDS,
    usage: UsageRules | None = None,
) -> ResponseOptions:
    """The ``ResponseOptions`` of a prepared request: ``exclude`` (``PreparedRequest.controls.exclude``), the think
    tags, the shell's ``bounds``, the route's ``usage`` accounting, and, for a route whose wire API is translated
    (``PreparedRequest.translation``), what the answer's translation needs, with ``created`` (seconds since the
    epoch) from the shell's clock."""
    if translation is None:
        return ResponseOptions(exclude, think, bounds=bounds, usage=usage)
    answer = Answer(translation.model, translation.include_usage, created)
    return ResponseOptions(exclude, think, translation.wire_api, answer, bounds, usage)


IDENTITY: frozenset[str] = frozenset(("identity", ""))
"""The content encodings a body arrives in when the shell decodes none (``choose_rewriter``'s default)."""


def choose_rewriter(
    options: ResponseOptions,
    status: int,
    content_type: str | None,
    content_encoding: str | None = None,
    *,
    decoded: Collection[str] = IDENTITY,
) -> Rewriter | None:
    """The rewriter for one response, or ``None`` when it passes through unchanged.

    Args:
        options: what the response side does for the request (``ResponseOptions``).
        status: the HTTP status; only 2xx answers are rewritten (an upstream's own error passes through), but
            for an error answer of a translated wire API, which becomes the OpenAI-style error body unless it is
            one already (``NativeJSONRewriter``).
        content_type: the ``content-type`` header, or ``None``: ``text/event-stream`` gets a stream rewriter,
            ``application/json`` (or any ``+json``) a body rewriter, any other type nothing.
        content_encoding: the ``content-encoding`` header, or ``None`` (identity).
        decoded: the encodings (lower case) the shell decodes before it feeds the rewriter; a body in any other
            encoding cannot be read and passes through.

    Every rewriter has ``feed(bytes) -> bytes``, ``finish() -> bytes`` and ``fail(error) -> bytes``. A
    ``StreamRewriter``'s output goes out as it comes; a ``BodyRewriter``'s is whole at ``finish``, and its
    ``status``, when not ``None``, replaces the upstream's; its ``held()`` is the bytes fed so far, unchanged.
    """
    if content_encoding is not None and content_encoding.strip().lower() not in decoded:
        return None
    adapter = WIRE_APIS.get(options.wire_api)
    media = _MEDIA.get(content_type, "") if content_type else ""  # the common spellings, without parsing
    if not media and content_type:
        media = content_type.split(";", 1)[0].strip().lower()
    json = media == "application/json" or media.endswith("+json")
    if not 200 <= status < 300:
        # a translated wire API's error becomes the OpenAI-style error body (its client reads no other)
        if adapter is not None and (json or status >= 400):
            return NativeJSONRewriter(options, adapter, error=status)
        return None
    if not media:  # a translated wire API's answer must be translated: one that is not JSON becomes a 502
        return NativeJSONRewriter(options, adapter) if adapter is not None else None
    if media == "text/event-stream":
        return SSERewriter(options) if adapter is None else NativeSSERewriter(options, adapter)
    if adapter is not None:
        return NativeJSONRewriter(options, adapter)  # JSON, or an answer that is not the wire API's: a 502
    return JSONRewriter(options) if json else None


_MEDIA = {
    "application/json": "application/json",
    "text/event-stream": "text/event-stream",
    "text/event-stream; charset=utf-8": "text/event-stream",
    "application/json; charset=utf-8": "application/json",
}


_BACKSLASH = 0x5C
_COLON = 0x3A
_LF = 0x0A
_ONE_DATA_LINE = len(b"data: \n\n")
"""An event's bytes beyond its data: at most this many when it is one ``data: `` line and its blank line, since
any other line (a comment, another field, a second data line, a ``\r\n`` line end) adds at least two bytes."""


def may_hold_usage(data: bytes) -> bool:
    """Whether the JSON bytes ``data`` may hold a ``usage`` key, decided without decoding (a ``\\u`` escape could
    spell one)."""
    return data.find(b"usage") >= 0 or (_BACKSLASH in data and data.find(b"\\u") >= 0)


def may_hold_reasoning(data: bytes, *, exclude: bool = False) -> bool:
    """Whether the JSON bytes ``data`` may hold a reasoning field the response rules change, decided without
    decoding.

    Every field the response rules read contains ``reasoning``: ``reasoning``, ``reasoning_content`` and
    ``reasoning_details`` (spec 004 "Response fields"). ``reasoning_tokens"``, the key of the count in usage's
    ``completion_tokens_details`` that OpenAI, OpenRouter and DeepSeek send with every answer, is none of them;
    usage accounting reads it, and asks ``may_hold_usage``. Nor, unless ``exclude`` takes the fields out, are
    ``"reasoning":null`` and ``"reasoning_details":[]``, which OpenRouter sends beside every answer chunk: fields
    that hold nothing go as they came (``reads_nothing``). A ``\\u`` escape could spell such a key, so bytes with
    one count too. ``find`` and a one-byte ``in`` (a memchr) are used because ``bytes.__contains__`` with a longer
    needle is slower.

    Args:
        data: the JSON bytes of a chunk or a buffered answer.
        exclude: whether the reasoning is excluded (``reasoning.exclude``, ``include_reasoning: false``); the
            empty fields are then taken out, so they count.
    """
    at = data.find(b"reasoning")
    return (at >= 0 and not reads_nothing(data, at, COUNTS if exclude else COUNTS_AND_EMPTIES)) or (
        _BACKSLASH in data and data.find(b"\\u") >= 0
    )


_REASONING = len(b"reasoning")
_TOKENS = b'_tokens"'
COUNTS: tuple[bytes, ...] = (_TOKENS,)
"""What follows ``reasoning`` in a usage count's key, ``reasoning_tokens"`` (``reads_nothing``)."""
COUNTS_AND_EMPTIES: tuple[bytes, ...] = (*COUNTS, b'":null', b'_details":[]')
"""``COUNTS``, and what follows ``reasoning`` in the two reasoning fields OpenRouter sends empty beside an answer's
text, ``"reasoning":null`` and ``"reasoning_details":[]``; with ``exclude`` they are taken out, so read."""


def _named_field(after: tuple[bytes, ...]) -> Callable[[bytes, int], re.Match[bytes] | None]:
    """A search for ``reasoning`` followed by none of ``after``, from a position on (``reads_nothing``)."""
    return re.compile(b"reasoning(?!" + b"|".join(map(re.escape, after)) + b")").search


_NAMED_FIELD = {after: _named_field(after) for after in (COUNTS, COUNTS_AND_EMPTIES)}


def reads_nothing(data: bytes, at: int, after: tuple[bytes, ...]) -> bool:
    """Whether every ``reasoning`` in the JSON bytes ``data`` from ``at`` on is followed by one of ``after``
    (``COUNTS`` or ``COUNTS_AND_EMPTIES``): no field the response rules read or change (``may_hold_reasoning``).

    In JSON bytes a quote inside a string is escaped (``\\"``), so ``reasoning"`` ends a string, and ``":`` after
    it makes that string a key: a key ending in ``reasoning`` with a ``null`` value, or one ending in
    ``reasoning_details`` with ``[]`` (written without spaces, as OpenRouter streams them), whatever comes
    before it; at any depth, such a value changes nothing. Anything else that follows, spaces included, is read.
    One regular expression search does it: a loop of ``find`` and ``startswith`` costs about four times as many
    instructions on an OpenRouter answer chunk.
    """
    return _NAMED_FIELD[after](data, at) is None


_decode = codec.decoder.decode
_encode = codec.encoder.encode


_read_head = msgspec.json.Decoder(ChunkHead).decode


def _head_of(data: bytes) -> dict[str, Any]:
    """The ``id``, ``created`` and ``model`` of the JSON chunk ``data`` (a view that skips the rest), or ``{}`` when
    ``data`` is not a JSON object."""
    try:
        head = _read_head(data)
    except (msgspec.DecodeError, RecursionError):
        return {}
    return {"id": head.id, "created": head.created, "model": head.model}


_SHAPE_AFTER = 3
"""A stream rewriter tries to cut a reasoning chunk's shape (``SSERewriter._reshape``) on every third chunk the fast
path rewrote that has one, not on the first: a try costs about one more chunk's rewrite (its choices decoded with a
marker in the text's place; its encode, with markers, also gives the bytes sent for it), a shape pays only over
many chunks, and a stream's reasoning mostly takes few chunks or hundreds: tried on the first or second chunk,
shapes made the short recorded streams (OpenRouter's and Snowflake's Claude) cost 6 to 12 % more."""
_SHAPE_TRIES = 4
"""Tries at a shape a stream rewriter makes before its shapes have paid for them: a stream whose chunks never repeat
(a field that changes in every chunk) pays for no more than these."""
_SHAPE_HITS = 8
"""The chunks a shape rewrites that pay for another try."""
_PASSES = 3
"""A stream rewriter passes this many chunks whose reasoning fields hold nothing (``may_hold_reasoning``:
OpenRouter's answer chunks) as their bytes, unread, at the start of the stream and after its reasoning; after them
it reads such chunks while a shape may still be tried, so that a long answer's chunks get one (``_reshape``), which
costs them less than the byte checks. A short answer (a few chunks) is then never decoded."""

_MAX_KEPT_HEAD = 4096
"""A stream rewriter keeps the first chunk's data up to this many bytes and reads its head (``_head_of``) only if
the stream breaks off; a larger first chunk is read at once, so that no more than this is held for it."""

_MAX_KEPT_QUIET = 4096
"""The longest data of an event kept, in bytes, to pass a repeat of it unread while a reasoning is open
(``SSERewriter._quiet``): the empty chunks that repeat are a few hundred bytes, and a stream holds no more than this
for it."""


def _error_event(error: ApiError, head: dict[str, Any] | None) -> bytes:
    """The SSE event that ends a stream with ``error``: its chunk (``ApiError.stream_chunk``) as one data line."""
    return encode_event(codec.encode_lenient(error.stream_chunk(head)))


def _closing_events(normalizer: ChunkNormalizer) -> bytes:
    """The SSE events of the chunks that end ``normalizer``'s stream (``ChunkNormalizer.finish``), ``b""`` for none."""
    chunks = normalizer.finish()
    if not chunks:  # the usual end: nothing held, no reasoning left open
        return b""
    return b"".join([encode_event(codec.encode_lenient(chunk)) for chunk in chunks])


def _cut_short(event: SSEEvent) -> bool:
    """Whether ``event``, left unfinished at the end of a stream, was cut short: it has data that is not
    ``[DONE]`` and does not decode as JSON, or it has no data and ends inside a line (``da``, ``: OPENROU``)."""
    data = event.data
    if data is None:
        return not event.raw.endswith((b"\n", b"\r"))
    return data != b"[DONE]" and codec.decode_lenient(data) is codec.UNDECODABLE


class SSERewriter:
    """Rewrite one SSE response body, event by event (spec 004 "Streaming"); one instance per response.

    Args:
        options: what to do (``ResponseOptions``).

    ``feed(bytes) -> bytes`` returns what to send now, ``finish() -> bytes`` what to send at the end of the body,
    ``fail(error) -> bytes`` what to send when it breaks off. The body has no fixed length any more.
    """

    __slots__ = (
        "_after",
        "_decoder",
        "_done",
        "_first",
        "_head",
        "_kind",
        "_lead",
        "_max_event",
        "_named",
        "_normalizer",
        "_passes",
        "_paused",
        "_plain",
        "_prefilter",
        "_quiet",
        "_repeats",
        "_shape",
        "_shape_tries",
        "_usage",
        "options",
    )

    def __init__(self, options: ResponseOptions) -> None:
        self.options = options
        self._decoder = SSEDecoder(options.bounds.max_event_bytes)
        self._normalizer = ChunkNormalizer(exclude=options.exclude, think=options.think)
        self._done = False
        self._prefilter = options.think is None  # with think splitting every chunk's content is read
        self._plain = options.think is None and options.usage is None  # no chunk read but for its reasoning fields
        self._after = after = COUNTS if options.exclude else COUNTS_AND_EMPTIES  # (``may_hold_reasoning``)
        self._named = _NAMED_FIELD[after]
        self._passes = _PASSES
        # the data of the last event the normalizer read, when the event went as it came (``_MAX_KEPT_QUIET``): while a
        # reasoning is open, a repeat of it that the prefilter passes is not read again (``_data``), since reading it
        # again would change nothing (the empty chunks Anthropic's models send between their thinking and their
        # answer); any event that reaches the shape or the decode in ``_data`` clears it, so only events without data
        # (a keep-alive comment) come between the two
        self._quiet: bytes | None = None
        self._usage = options.usage
        # the first chunk's data (or, past ``_MAX_KEPT_HEAD``, its id, created and model), for an error chunk
        self._head: bytes | dict[str, Any] | None = None
        # the last reasoning chunk's shape (``shapes.ChunkShape``), the tries at one left (``_reshape``), and the
        # chunks the full path took that had one since the last try
        self._shape: ChunkShape | None = None
        self._shape_tries = _SHAPE_TRIES
        # the kind of the last chunks the fast path rewrote that could have a shape, and how many in a row; with
        # reasoning shown the fragment that opens the detail is no repeat: the first one taken out is not counted
        # either, so that a stream's first try comes at the same fragment (its fourth) with exclude
        self._kind = 0
        self._first = -1 if options.exclude and options.think is None else 0
        self._repeats = 0
        # the shape, while it rewrote the last event and the decoder held nothing after it: tried on the next
        # chunk within the event bound before the decoder (``feed``), whose state its rewrites leave as it is, on
        # each event of a read of several data lines, its first included (``_lines``), on the first whole events of
        # a read cut inside events (``_run``), and on the next event of a chunk the decoder cut into many
        # (``_event``), before the prefilter
        self._lead: ChunkShape | None = None
        # the run, while the decoder holds the start of the event after it (``_split``): the lead again once a read
        # ends that event (``SSEDecoder.split_read``)
        self._paused: ChunkShape | None = None
        self._max_event = self._decoder.limit

    def feed(self, chunk: bytes) -> bytes:
        """Take the next bytes of the upstream body; return the bytes to send now.

        Raises:
            ApiError: 502 ``upstream_unavailable`` for an event over ``options.bounds.max_event_bytes``
                (``errors.event_too_large``); the shell ends the stream with ``fail(error)``, which sends the
                events completed before it.
        """
        lead = self._lead
        if lead is not None:  # a run of one shape: its events cut by the shape alone, no SSE split, no prefilter
            out = lead.rewrite(chunk) if len(chunk) <= self._max_event else None
            if out is not None:
                return out
            self._lead = None
        data = self._decoder.single_data(chunk)
        if data is not None:
            at = data.find(b"reasoning") if self._prefilter else -1
            # the commonest event of a stream whose reasoning is closed, written out from ``_data`` (a call costs
            # about a tenth of such an event): it cannot hold a reasoning field, so it goes as it came; a backslash
            # that starts no ``\u`` escape (an answer's ``\n``) cannot spell one (``_lines`` asks the same of each
            # event of a read of several)
            if (
                at < 0
                and self._plain
                and self._head is not None
                and not self._normalizer.open_reasoning
                and (_BACKSLASH not in data or data.find(b"\\u") < 0)
                and data != b"[DONE]"
            ):
                return chunk
            return self._data(chunk, data, at, None, None)
        decoder = self._decoder
        # a keep-alive comment, whole as upstreams send it (OpenRouter's ``: OPENROUTER PROCESSING``), goes as it came,
        # and a run of one shape goes on after it; its first and last bytes are read as ints first, so that no other
        # read pays for the call; any other read that starts with ``:`` (a comment with more, the rest of a line the
        # decoder holds) goes to the decoder
        if chunk and chunk[0] == _COLON and chunk[-1] == _LF:
            if decoder.single_comment(chunk):
                self._lead, self._paused = lead, None
                return chunk
        else:
            lines = decoder.data_lines(chunk)
            if lines is not None:  # several such events: each as a chunk of its own, without the decoder's events
                self._lead = lead  # (a run goes on into the read's first event)
                return self._lines(chunk, lines)
            split = decoder.split_read(chunk)
            if split is not None:  # a read cut inside events: its whole events as a read of them, then the rest
                # (a read that ends the held event takes up the run that was paused for it)
                self._lead = lead if lead is not None else self._paused
                self._paused = None
                return self._split(*split)
        self._paused = None
        try:
            events = decoder.feed(chunk)
        except EventTooLarge as exc:
            raise event_too_large(exc.limit) from None
        if len(events) == 1:
            return self._event(events[0])
        return b"".join([self._event(event) for event in events])

    def _split(self, whole: bytes, rest: bytes) -> bytes:
        """The bytes to send for a read cut inside events (``SSEDecoder.split_read``): ``whole``, whole events, as a
        read of them (a run of one shape goes on into them, ``_run``; then ``_lines`` when they are ``data: `` lines),
        then ``rest``, the start of the next event, held by the decoder (``SSEDecoder.hold``), while the run waits
        for its end (``_paused``). Not ``SSEDecoder.split_lines``, which holds ``rest`` before its caller reads
        ``whole``: a run may start in ``whole`` (``_data``) only while the decoder holds nothing, and each event here
        needs its bytes."""
        decoder = self._decoder
        if not whole:  # the start of an event without its end, or a part over the event bound: through the decoder
            try:
                events = decoder.feed(rest)
            except EventTooLarge as exc:
                raise event_too_large(exc.limit) from None
            out = [self._event(event) for event in events]
            if not decoder.between_events():
                self._paused, self._lead = self._lead, None
            return b"".join(out)
        sent: list[bytes] = []
        lead = self._lead
        if lead is not None:
            whole = self._run(lead, whole, sent)
        if whole:
            lines = decoder.data_lines(whole)
            if lines is not None:
                sent.append(self._lines(whole, lines))
            else:
                sent += [self._event(event) for event in decoder.feed(whole)]
        if rest:
            decoder.hold(rest)
            self._paused, self._lead = self._lead, None
        return b"".join(sent)

    def _run(self, lead: ChunkShape, chunk: bytes, sent: list[bytes]) -> bytes:
        """Rewrite the events at the start of ``chunk`` (whole events at an event boundary, within the event bound,
        no ``\\r``) with ``lead``, the run's shape, onto ``sent``, while each has it; return the rest of ``chunk``,
        from the first event it does not take on. Each event is cut after its first line end and the byte after it,
        and given to ``ChunkShape.rewrite``, as ``feed`` gives it a read of one: an event the shape takes is one
        ``data: `` line and its blank line, so no line parser need read it, nor ``SSEDecoder.data_lines`` split it,
        and the bytes cut from an event of more lines (their second byte is not a blank line) it does not take. The
        run is left to the path that takes the rest (``_lines``, ``_event``), which ends it at a ``data`` event the
        shape does not take: a comment or another field between a run's events does not end it."""
        rewrite, find, add = lead.rewrite, chunk.find, sent.append  # (once a read: each runs once an event)
        start = 0
        size = len(chunk)
        while start < size:
            # a ``memchr`` for one byte, where a search for ``\n\n`` reads each byte (``chunk`` ends with a blank
            # line, so a line end is found)
            end = find(_LF, start) + 2
            out = rewrite(chunk[start:end])
            if out is None:
                return chunk[start:] if start else chunk
            add(out)
            start = end
        return b""

    def _lines(self, chunk: bytes, lines: list[bytes]) -> bytes:
        """The bytes to send for ``chunk``, whole events of one ``data: `` line each whose data are ``lines``
        (``SSEDecoder.data_lines``): each event as ``feed`` takes a chunk of one, a run of one shape included."""
        sent: list[bytes] = []
        start = 0
        for data in lines:
            end = start + len(data) + 8  # ``data: `` and the blank line
            raw = chunk[start:end]
            start = end
            lead = self._lead
            if lead is not None:
                out = lead.rewrite(raw)
                if out is not None:
                    sent.append(out)
                    continue
                self._lead = None
            at = data.find(b"reasoning") if self._prefilter else -1
            if (  # ``feed``'s pass before ``_data``, the same condition, written out as there (a method for it
                # cost OpenRouter's o3 stream 6 % more instructions, Snowflake's 2 %)
                at < 0
                and self._plain
                and self._head is not None
                and not self._normalizer.open_reasoning
                and (_BACKSLASH not in data or data.find(b"\\u") < 0)
                and data != b"[DONE]"
            ):
                sent.append(raw)
            else:
                sent.append(self._data(raw, data, at, None, None))
        return b"".join(sent)

    def finish(self) -> bytes:
        """End of the upstream body; return the last bytes to send.

        A stream that ends inside a line that is not a ``data`` line, or inside an event whose data is not whole
        JSON (a close-delimited upstream that broke off: nothing else tells it from a normal end), is treated as
        ``fail`` with ``errors.CUT_SHORT``; before ``[DONE]`` only. Any other unfinished last event is finished
        with the line ends it lacks (``sse.terminate_event``) and sent like any other.
        """
        events, rest = self._decoder.end()
        self._lead = self._paused = None  # the decoder starts over: no run outlives the stream
        out = [self._event(event) for event in events]
        if rest is not None:
            if self._done:  # after [DONE] the answer was whole: trailing bytes go as they came
                out.append(self._event(rest))
            elif _cut_short(rest):
                out.append(self._break_off(CUT_SHORT))
                return b"".join(out)
            else:
                out.append(self._event(terminate_event(rest)))
        if not self._done:
            out.append(self._closing_chunks())
        return b"".join(out)

    def fail(self, error: ApiError) -> bytes:
        """The upstream body broke off (the shell's read failed); return the last bytes to send.

        The events the stream completed, text a think splitter still held, then one event whose data is
        ``error``'s chunk (``ApiError.stream_chunk``, with the id, created time and model of the stream's first
        chunk), which is how OpenRouter reports an error after a stream started; clients raise on it instead of
        ending as if the answer were complete. The bytes of an unfinished event are dropped (they never made an
        event). After ``[DONE]`` the answer was whole: nothing is added.
        """
        if self._done:
            return b""
        events, rest = self._decoder.end()
        self._lead = self._paused = None  # the decoder starts over: no run outlives the stream
        if rest is not None and rest.data == b"[DONE]":  # only its blank line was missing: the answer was whole
            events.append(terminate_event(rest))
        out = [self._event(event) for event in events]
        if not self._done:
            out.append(self._break_off(error))
        return b"".join(out)

    def _break_off(self, error: ApiError) -> bytes:
        head = self._head
        return self._closing_chunks() + _error_event(error, _head_of(head) if isinstance(head, bytes) else head)

    def _closing_chunks(self) -> bytes:
        self._done = True
        return _closing_events(self._normalizer)

    def _event(self, event: SSEEvent) -> bytes:
        data = event.data
        if data is None:
            return event.raw
        lead = self._lead
        if lead is not None:  # a run of one shape in a read of many events: as ``feed`` tries it on a chunk
            out = lead.rewrite(event.raw)
            if out is not None:
                return out
            self._lead = None
        return self._data(event.raw, data, data.find(b"reasoning") if self._prefilter else -1, event.event, event.id)

    def _data(self, raw: bytes, data: bytes, at: int, event: str | None, id: str | None) -> bytes:
        """The bytes to send for one event with ``data``, whose original bytes are ``raw``; ``at`` is where
        ``reasoning`` first stands in ``data`` (``-1``: nowhere), found by the caller when ``_prefilter`` reads it.

        Data msgspec refuses but the standard library reads (a lone UTF-16 surrogate, ``NaN`` or ``-Infinity``)
        is normalized too and written back with those as they came (``codec.decode_fallback``); anything else
        that is not JSON leaves as it came.
        """
        if data == b"[DONE]":
            return self._closing_chunks() + raw
        if self._head is None:  # the first chunk: kept, and read only if the stream breaks off (``_head_of``)
            self._head = data if len(data) <= _MAX_KEPT_HEAD else _head_of(data)
        usage = self._usage
        # ``may_hold_reasoning`` written out: this runs once per event
        if (
            self._prefilter
            and (
                at < 0 or (data.startswith(self._after, at + _REASONING) and self._named(data, at + _REASONING) is None)
            )
            and (_BACKSLASH not in data or data.find(b"\\u") < 0)
            and (usage is None or not may_hold_usage(data))
        ):
            normalizer = self._normalizer
            if normalizer.open_reasoning:  # decoded: the chunk may end the reasoning (``ChunkNormalizer``)
                self._passes = _PASSES  # for the answer's first chunks (``_PASSES``)
                if data == self._quiet:  # the last event read, again: read again, it would change nothing
                    return raw
            elif at < 0:
                return raw
            elif self._passes:
                self._passes -= 1
                return raw
            elif not self._may_try() or data.startswith(_TOKENS, at + _REASONING):  # (a usage count, read by none)
                return raw
        self._quiet = None  # the normalizer reads this event, or a shape rewrites it: no repeat of the event before
        shape = self._shape
        one_line = len(raw) - len(data) <= _ONE_DATA_LINE
        if shape is not None and one_line:
            out = shape.rewrite(raw)
            if out is not None:
                if self._decoder.between_events():
                    self._lead = shape
                return out
        try:  # msgspec inline, not codec.decode_with_encoder: this runs once per event
            value = _decode(data)
        except (msgspec.DecodeError, RecursionError):
            value, encode = codec.fallback(data)
            if value is codec.UNDECODABLE:
                return raw
            return self._send(raw, data, event, id, value, encode)
        accounted = usage is not None and account_completion(value, usage)
        normalizer = self._normalizer
        chunks = normalizer.normalize(value)
        if normalizer.repeat:
            out = self._reshape(raw, data, value, chunks) if one_line and not accounted else None
            normalizer.repeat = 0
            if out is not None:
                return out
        if chunks is UNCHANGED:
            if not accounted:
                if len(data) <= _MAX_KEPT_QUIET:
                    self._quiet = data  # it goes as it came, and so would a repeat of it (``_quiet``)
                return raw
            chunks = [value]
        if len(chunks) == 1 and one_line:  # one chunk for one data line
            try:
                return b"data: " + _encode(chunks[0]) + b"\n\n"
            except UnicodeEncodeError:  # text a think splitter held from an event only the fallback could read
                return b"data: " + codec.encode_lenient(chunks[0]) + b"\n\n"
        return self._frame_chunks(raw, data, event, id, value, chunks, accounted, _encode)

    def _may_try(self) -> bool:
        """Whether a shape may still be tried (``_reshape``)."""
        shape = self._shape
        return self._shape_tries > 0 or (shape is not None and shape.hits >= _SHAPE_HITS)

    def _reshape(
        self, raw: bytes, data: bytes, chunk: dict[str, Any], sent: list[dict[str, Any]] | None
    ) -> bytes | None:
        """Cut the shape of the event ``raw`` with data ``data``, which the fast path just rewrote to ``chunk``
        (``sent``: the chunks to send for it, ``None`` for the chunk as it came; ``shapes.shape_of``), on every
        ``_SHAPE_AFTER``-th chunk in a row of one kind (``ChunkNormalizer.repeat``) the full path takes, while tries
        are left: ``_SHAPE_TRIES``, and one more for every ``_SHAPE_HITS`` chunks a shape rewrote. Returns the bytes
        to send for the event when a shape was cut (the full path's, made from the shape's pieces), else ``None``;
        a try that finds no shape keeps the one before."""
        kind = self._normalizer.repeat
        if kind != self._kind:  # a new run: the reasoning's, the answer's after it
            self._kind = kind
            self._repeats = self._first
        self._repeats += 1
        if self._repeats < _SHAPE_AFTER:
            return None
        self._repeats = 0
        shape = self._shape
        if shape is not None and shape.hits >= _SHAPE_HITS:
            shape.hits -= _SHAPE_HITS
        elif self._shape_tries > 0:
            self._shape_tries -= 1
        else:
            return None
        normalizer = self._normalizer
        found = shape_of(data, kind, chunk, sent, normalizer.repeat_of(chunk))
        if found is None:
            return None
        shape, text = found
        self._shape = shape
        self._lead = None
        return shape.sent(raw, text)

    def _send(
        self, raw: bytes, data: bytes, event: str | None, id: str | None, value: Any, encode: Callable[[Any], bytes]
    ) -> bytes:
        """``_data`` for ``value``, read from ``data`` by the standard library and written back with ``encode``."""
        usage = self._usage
        accounted = usage is not None and account_completion(value, usage)
        chunks = self._normalizer.normalize(value)
        self._normalizer.repeat = 0  # no shape from a chunk only the fallback read: the next one must not see it
        if chunks is UNCHANGED:
            if not accounted:
                return raw
            chunks = [value]
        return self._frame_chunks(raw, data, event, id, value, chunks, accounted, encode)

    @staticmethod
    def _frame_chunks(
        raw: bytes,
        data: bytes,
        event: str | None,
        id: str | None,
        value: Any,
        chunks: list[Any],
        accounted: bool,
        encode: Callable[[Any], bytes],
    ) -> bytes:
        """The bytes of ``chunks``, the normalized chunks of the event ``raw`` whose data ``data`` decoded to
        ``value`` (``accounted``: its usage changed), each encoded with ``encode`` (``_frame``)."""
        one_line = len(raw) - len(data) <= _ONE_DATA_LINE  # the event is one data line and its blank line
        # the last chunk unchanged, after chunks put before it: its original bytes go
        last = data if len(chunks) > 1 and chunks[-1] is value and not accounted else None
        if last is not None:
            chunks = chunks[:-1]
        try:
            encoded = list(map(encode, chunks))
        except UnicodeEncodeError:  # text a think splitter held from an event only the fallback could read
            encoded = [codec.encode_lenient(chunk) for chunk in chunks]
        if last is not None:
            encoded.append(last)
        return _frame(raw, one_line, event, id, encoded)


class JSONRewriter:
    """Rewrite one buffered chat completion body (spec 004 "Response fields"); one instance per response.

    Args:
        options: what to do (``ResponseOptions``).

    ``feed`` collects the body and returns ``b""``; ``finish`` returns the whole body to send (the very bytes
    object received when it came in one piece and nothing changed; ``changed`` then says which), after which
    a shell sets ``content-length``. ``fail`` returns ``b""``: a body that broke off is never sent.

    Attributes:
        changed: whether ``finish`` returned a body that differs from the upstream's.
    """

    __slots__ = ("_body", "_parts", "_size", "changed", "options")

    status: ClassVar[None] = None
    """A chat completion body keeps the upstream's status."""
    content_type: ClassVar[None] = None
    """A chat completion body keeps the upstream's ``content-type``."""

    def __init__(self, options: ResponseOptions) -> None:
        self.options = options
        self._body = b""
        self._parts: list[bytes] | None = None  # from the second piece on
        self._size = 0
        self.changed = False

    def feed(self, chunk: bytes) -> bytes:
        """Take the next bytes of the upstream body (decoded); nothing is sent before the end.

        Raises:
            ApiError: 502 ``upstream_unavailable`` once the body is over ``options.bounds.max_response_bytes``
                (``errors.response_too_large``), after the bytes held so far were let go.
        """
        self._size += len(chunk)
        if self._size > self.options.bounds.max_response_bytes:
            self._body, self._parts = b"", None
            raise response_too_large(self.options.bounds.max_response_bytes)
        if self._parts is not None:
            self._parts.append(chunk)
        elif self._body:
            self._parts = [self._body, chunk]
        else:
            self._body = chunk
        return b""

    def finish(self) -> bytes:
        """End of the upstream body; return the whole body to send (``normalize_completion_body``)."""
        body = self._body if self._parts is None else b"".join(self._parts)  # held(), without its call
        out = normalize_completion_body(body, self.options)
        self.changed = out is not body
        return out

    def held(self) -> bytes:
        """The bytes fed so far, as they came: what a shell sends unchanged when it cannot wait for the end."""
        return self._body if self._parts is None else b"".join(self._parts)

    def fail(self, error: ApiError) -> bytes:
        """The upstream body broke off: nothing to send (the shell answers with ``error`` instead)."""
        return b""


def _frame(raw: bytes, one_line: bool, event: str | None, id: str | None, encoded: list[bytes]) -> bytes:
    """The SSE bytes for the chunks ``encoded`` that replace the event ``raw``.

    An event that is one ``data`` line (``one_line``) becomes one such line per chunk. Otherwise the other lines
    (comments, ``event``, ``id``, ``retry``) stay with the first chunk, and the chunks it fans out to repeat only
    ``event`` and ``id``. No chunks: nothing is sent.
    """
    if one_line:
        return b"".join([b"data: " + chunk + b"\n\n" for chunk in encoded])
    if not encoded:
        return b""
    return replace_data(raw, encoded[0]) + b"".join([encode_event(chunk, event=event, id=id) for chunk in encoded[1:]])


def normalize_completion_body(body: bytes, options: ResponseOptions) -> bytes:
    """The client's bytes for a whole buffered chat completion ``body`` (spec 004 "Response fields").

    Returns ``body`` itself (the same object) when nothing changes, which is decided without decoding for a
    body that cannot hold a reasoning field (``may_hold_reasoning``; with no ``exclude`` and no think
    splitting) and, with usage accounting, no usage (``may_hold_usage``); a body that is not JSON is returned
    unchanged. Otherwise ``completion.normalize_completion`` and the usage accounting (``usage.account_usage``)
    apply and the result is re-encoded.
    """
    usage = options.usage
    if (
        not options.exclude
        and options.think is None
        and not may_hold_reasoning(body)
        and (usage is None or not may_hold_usage(body))
    ):
        return body
    value, encode = codec.decode_with_encoder(body)
    if value is codec.UNDECODABLE:
        return body
    changed = normalize_completion(value, exclude=options.exclude, think=options.think)
    if usage is not None and account_completion(value, usage):
        changed = True
    return encode(value) if changed else body


def _events_of(chunks: list[dict[str, Any]]) -> bytes:
    """The SSE events of translated ``chunks``, one ``data:`` line each; a chunk holding a lone surrogate (only the
    standard library's fallback read it) written by the fallback."""
    out: list[bytes] = []
    for chunk in chunks:
        try:
            out.append(b"data: " + _encode(chunk) + b"\n\n")
        except UnicodeEncodeError:
            out.append(b"data: " + codec.encode_fallback(chunk) + b"\n\n")
    return b"".join(out)


class NativeSSERewriter:
    """Translate one stream of a native wire API into chat completion chunks (spec 004 "Streaming"); one per
    response.

    Events are decoded incrementally (split at any byte), translated by the adapter's ``StreamTranslator`` and
    normalized by ``ChunkNormalizer`` like any chat stream; each chunk goes out as one ``data:`` event, and
    ``data: [DONE]`` follows the native stream's terminal event. Keep-alive comments pass; a native error
    event, an event that is not JSON, or a stream that ends before its terminal event ends with the error event
    instead (``docs/errors.md``).
    """

    __slots__ = ("_decoder", "_done", "_head", "_normalizer", "_translator", "options")

    def __init__(self, options: ResponseOptions, adapter: WireAdapter) -> None:
        self.options = options
        self._decoder = SSEDecoder(options.bounds.max_event_bytes)
        self._translator = adapter.stream(options.answer or Answer())
        self._normalizer = ChunkNormalizer(exclude=options.exclude, think=options.think)
        self._done = False
        self._head: dict[str, Any] | None = None  # the first translated chunk, for an error chunk

    def feed(self, chunk: bytes) -> bytes:
        """Take the next bytes of the upstream body; return the bytes to send now.

        Raises:
            ApiError: as ``SSERewriter.feed``, for an event over ``options.bounds.max_event_bytes``.
        """
        if self._done:
            return b""
        data = self._decoder.framed_data(chunk)  # one whole event, as upstreams send them
        if data is not None:
            return self._data(data)
        decoder = self._decoder
        lines = decoder.framed_lines(chunk)  # several such events read at once
        if lines is not None:
            return self._lines(lines)
        try:
            split = decoder.split_lines(chunk, framed=True)  # a read cut inside events: its whole events, the rest
            lines, events = ([], decoder.feed(chunk)) if split is None else split
        except EventTooLarge as exc:
            raise event_too_large(exc.limit) from None
        return self._lines(lines) + self._events(events)

    def _lines(self, lines: list[bytes]) -> bytes:
        """The bytes to send for events whose data are ``lines`` (``SSEDecoder.framed_lines``), up to the terminal
        event."""
        out: list[bytes] = []
        for data in lines:
            if self._done:
                break
            out.append(self._data(data))
        return b"".join(out)

    def finish(self) -> bytes:
        """End of the upstream body; return the last bytes to send."""
        if self._done:
            return b""
        events, rest = self._decoder.end()
        if rest is not None and rest.data is not None:
            events.append(terminate_event(rest))
        out = self._events(events)
        if self._done:
            return out
        try:
            chunks = self._translator.finish()
        except ApiError as error:
            return out + self._break_off(error)
        return out + self._send(chunks) + self._close()

    def fail(self, error: ApiError) -> bytes:
        """The upstream body broke off; return the events it completed, then the error event."""
        if self._done:
            return b""
        events, _ = self._decoder.end()
        out = self._events(events)
        return out if self._done else out + self._break_off(error)

    def _events(self, events: list[SSEEvent]) -> bytes:
        out: list[bytes] = []
        for event in events:
            if self._done:
                break
            data = event.data
            if data is None:
                if event.is_comment_only:
                    out.append(event.raw)
                continue
            out.append(self._data(data))
        return b"".join(out)

    def _data(self, data: bytes) -> bytes:
        """The bytes to send for one event's ``data``: its chunks, and the closing events after the terminal one
        (or the error event instead)."""
        if data == b"[DONE]":
            return b""
        try:
            value = _decode(data)
        except (msgspec.DecodeError, RecursionError):
            value = codec.decode_fallback(data)
            if value is codec.UNDECODABLE:
                return self._break_off(_UNREADABLE)
        try:
            chunks = self._translator.event(value)
        except ApiError as error:
            return self._break_off(error)
        out = self._send(chunks) if chunks else b""
        if self._translator.done:
            out += self._close()
        return out

    def _send(self, chunks: list[dict[str, Any]]) -> bytes:
        if self._head is None and chunks:
            self._head = chunks[0]
        normalize = self._normalizer.normalize
        usage = self.options.usage
        if len(chunks) == 1 and usage is None:  # one chunk for the event, as most events make, written inline
            chunk = chunks[0]
            normalized = normalize(chunk)
            if normalized is not UNCHANGED:
                if len(normalized) != 1:
                    return _events_of(normalized)
                chunk = normalized[0]
            try:
                return b"data: " + _encode(chunk) + b"\n\n"
            except UnicodeEncodeError:  # a lone surrogate only the fallback could read
                return b"data: " + codec.encode_fallback(chunk) + b"\n\n"
        out: list[bytes] = []
        for chunk in chunks:
            if usage is not None:
                account_completion(chunk, usage)
            normalized = normalize(chunk)
            out.append(_events_of([chunk] if normalized is UNCHANGED else normalized))
        return b"".join(out)

    def _closing_chunks(self) -> bytes:
        self._done = True
        return _closing_events(self._normalizer)

    def _close(self) -> bytes:
        return self._closing_chunks() + b"data: [DONE]\n\n"

    def _break_off(self, error: ApiError) -> bytes:
        return self._closing_chunks() + _error_event(error, self._head)


_UNREADABLE = upstream_unavailable("The upstream sent an event that is not JSON; the answer is incomplete.")


class NativeJSONRewriter:
    """Translate one buffered answer of a native wire API into a chat completion (spec 004 "Response fields"),
    or, with ``error``, an error answer into the OpenAI-style error body; one per response. A 2xx answer of any
    content type but a stream comes here: one that is not the wire API's JSON becomes a 502.

    An error answer (``error``: the upstream's status, not 2xx; ``0``, the default, for an answer) keeps its
    status. The wire API's own error body is translated (``WireAdapter.error``), an OpenAI-style one goes as it
    came, and any other body of a 4xx or 5xx (an HTML page, a ``text/plain`` line, JSON of another shape)
    becomes ``upstream_error_body``'s, its text in the message.

    ``finish`` returns the whole body. An answer that cannot be translated becomes the OpenAI-style error body
    of ``upstream_unavailable``, and ``status`` then holds its status (502), which the shell sends instead of
    the upstream's.

    Attributes:
        changed: whether ``finish`` returned a body that differs from the upstream's.
        status: the status to send instead of the upstream's, or ``None``.
        content_type: ``application/json``, which a changed body is (whatever the upstream's content type said);
            the shell sends it when ``changed``.
    """

    __slots__ = ("_adapter", "_error", "_parts", "_size", "changed", "options", "status")
    content_type: ClassVar[bytes] = b"application/json"

    def __init__(self, options: ResponseOptions, adapter: WireAdapter, *, error: int = 0) -> None:
        self.options = options
        self._adapter = adapter
        self._error = error
        self._parts: list[bytes] = []
        self._size = 0
        self.changed = False
        self.status: int | None = None

    def feed(self, chunk: bytes) -> bytes:
        """Take the next bytes of the upstream body (decoded); nothing is sent before the end.

        Raises:
            ApiError: as ``JSONRewriter.feed``, past ``options.bounds.max_response_bytes``.
        """
        self._size += len(chunk)
        if self._size > self.options.bounds.max_response_bytes:
            self._parts.clear()
            raise response_too_large(self.options.bounds.max_response_bytes)
        self._parts.append(chunk)
        return b""

    def finish(self) -> bytes:
        """End of the upstream body; return the whole body to send."""
        body = b"".join(self._parts)
        value = codec.decode_lenient(body)
        if self._error:
            translated = self._adapter.error(value) if value is not codec.UNDECODABLE else None
            if translated is None:
                if is_error_body(value) or self._error < 400:  # a redirect's body is no error to translate
                    return body
                translated = upstream_error_body(self._error, body)
            self.changed = True
            return codec.encode_lenient(translated)
        options = self.options
        try:
            if value is codec.UNDECODABLE:
                raise upstream_unavailable("The upstream's answer is not JSON; numi_mw cannot translate it.")
            chat = self._adapter.completion(value, options.answer or Answer())
        except ApiError as error:
            self.changed = True
            self.status = error.status
            return error.to_bytes()
        normalize_completion(chat, exclude=options.exclude, think=options.think)
        if options.usage is not None:
            account_completion(chat, options.usage)
        self.changed = True
        return codec.encode_lenient(chat)

    def fail(self, error: ApiError) -> bytes:
        """The upstream body broke off: nothing to send (the shell answers with ``error`` instead)."""
        return b""

    def held(self) -> bytes:
        """The bytes fed so far, as they came (``JSONRewriter.held``)."""
        return b"".join(self._parts)


StreamRewriter = SSERewriter | NativeSSERewriter
"""A rewriter whose output goes out as it comes (``isinstance(rewriter, StreamRewriter)``)."""
BodyRewriter = JSONRewriter | NativeJSONRewriter
"""A rewriter whose output is whole at ``finish``, with ``changed``, ``status`` and ``content_type`` (the
``content-type`` to send with a changed body, or ``None`` to keep the upstream's)."""
Rewriter = StreamRewriter | BodyRewriter
"""Any rewriter ``choose_rewriter`` returns."""
