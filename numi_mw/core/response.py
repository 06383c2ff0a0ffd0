"""The response side of the core: upstream bytes in, client bytes out (DESIGN.md "response").

``ResponseRewriter`` is sans-I/O: a shell feeds it the upstream body as it arrives and sends what it returns.

- ``text/event-stream`` (2xx): events are decoded incrementally (``sse.SSEDecoder``, split at any byte) and
  each chunk goes through ``chunks.ChunkNormalizer``; an event that needs no change leaves as its original
  bytes, and comments and ``data: [DONE]`` pass through. Nothing is buffered beyond the current event.
- ``application/json`` (2xx): the body is a buffered completion; it is collected and normalized by
  ``completion.normalize_completion`` at the end.
- Anything else (other media types, error statuses) passes through unchanged.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from numi_mw.core import codec
from numi_mw.core.chunks import UNCHANGED, ChunkNormalizer
from numi_mw.core.completion import normalize_completion
from numi_mw.core.errors import ApiError
from numi_mw.core.providers import ProviderRules
from numi_mw.core.reasoning_text import ThinkStart, ThinkTags
from numi_mw.core.sse import SSEDecoder, SSEEvent, encode_event, finished, replace_data

Mode = Literal["sse", "json", "pass"]


class ResponseOptions(msgspec.Struct, frozen=True, gc=False):
    """What the response side does for one request.

    Attributes:
        exclude: keep reasoning out of the response (spec 004: "With exclude: true, both fields are omitted").
        think: split reasoning tags out of ``content`` with these settings, or ``None``.
    """

    exclude: bool = False
    think: ThinkTags | None = None


def think_tags_for(
    rules: ProviderRules, split: bool | ThinkTags | None = None, start: ThinkStart = "content"
) -> ThinkTags | None:
    """The think-tag settings for ``rules``'s provider.

    Args:
        rules: the target provider's rules.
        split: ``None`` for the provider's default (on for ``local``, whose servers may return ``<think>`` tags
            inside ``content``), ``True``/``False`` to force it, or a ``ThinkTags`` (own tag families) to use.
        start: where a stream starts (``ThinkTags.start``) when ``split`` is not a ``ThinkTags``.
    """
    if isinstance(split, ThinkTags):
        return split
    enabled = rules.split_think_tags if split is None else split
    return ThinkTags(start=start) if enabled else None


def response_mode(status: int, content_type: str | None) -> Mode:
    """How a response is handled: ``sse``, ``json`` or ``pass`` (unchanged)."""
    if not 200 <= status < 300 or not content_type:
        return "pass"
    media = content_type.split(";", 1)[0].strip().lower()
    if media == "text/event-stream":
        return "sse"
    if media == "application/json" or media.endswith("+json"):
        return "json"
    return "pass"


_BACKSLASH = 0x5C
_ONE_DATA_LINE = len(b"data: \n\n")
"""An event's bytes beyond its data: at most this many when it is one ``data: `` line and its blank line, since
any other line (a comment, another field, a second data line, a ``\r\n`` line end) adds at least two bytes."""


def may_hold_reasoning(data: bytes) -> bool:
    """Whether the JSON bytes ``data`` may hold a reasoning field, decided without decoding.

    Every field the response rules read contains ``reasoning``; a ``\\u`` escape could spell such a key, so
    bytes with one count too. ``find`` and a one-byte ``in`` (a memchr) are used because ``bytes.__contains__``
    with a longer needle is slower.
    """
    return data.find(b"reasoning") >= 0 or (_BACKSLASH in data and data.find(b"\\u") >= 0)


_decode = codec.decoder.decode

CUT_SHORT = ApiError(502, "upstream_unavailable", "The stream ended inside an event; the answer is incomplete.")
"""The error a stream that ends inside an unfinished, undecodable event reports (``ResponseRewriter.finish``)."""


def _cut_short(event: SSEEvent) -> bool:
    """Whether ``event``, left unfinished at the end of a stream, was cut short: it has data that is not
    ``[DONE]`` and does not decode as JSON, or it has no data and ends inside a line (``da``, ``: OPENROU``)."""
    data = event.data
    if data is None:
        return not event.raw.endswith((b"\n", b"\r"))
    return data != b"[DONE]" and codec.decode_lenient(data) is codec.UNDECODABLE


_NO_DECODER = SSEDecoder()
_NO_NORMALIZER = ChunkNormalizer()
"""Placeholders for the ``json`` and ``pass`` modes, which never use them (saves building them per response)."""


class ResponseRewriter:
    """Rewrite one response body; one instance per response.

    Args:
        options: what to do (``response_options``).
        mode: ``response_mode`` of the response.

    ``feed(bytes) -> bytes`` returns what to send now; ``finish() -> bytes`` what to send at the end of the body.
    In ``json`` mode everything is returned by ``finish`` (shells then set ``content-length``); in ``sse`` mode
    the body has no fixed length any more.
    """

    __slots__ = ("_buffer", "_decoder", "_done", "_normalizer", "_prefilter", "mode", "options")

    def __init__(self, options: ResponseOptions, mode: Mode) -> None:
        self.options = options
        self.mode = mode
        self._buffer: list[bytes] = []
        sse = mode == "sse"
        self._decoder = SSEDecoder() if sse else _NO_DECODER
        self._normalizer = ChunkNormalizer(exclude=options.exclude, think=options.think) if sse else _NO_NORMALIZER
        self._done = False
        self._prefilter = options.think is None  # with think splitting every chunk's content is read

    @property
    def changes_length(self) -> bool:
        """Whether the body may differ from the upstream's (drop or recompute ``content-length``)."""
        return self.mode != "pass"

    def feed(self, chunk: bytes) -> bytes:
        """Take the next bytes of the upstream body; return the bytes to send now."""
        mode = self.mode
        if mode == "sse":
            data = self._decoder.single_data(chunk)
            if data is not None:
                return self._data(chunk, data, None, None)
        elif mode == "pass":
            return chunk
        else:
            self._buffer.append(chunk)
            return b""
        events = self._decoder.feed(chunk)
        if len(events) == 1:
            return self._event(events[0])
        return b"".join([self._event(event) for event in events])

    def finish(self) -> bytes:
        """End of the upstream body; return the last bytes to send.

        In ``sse`` mode a stream that ends inside a line that is not a ``data`` line, or inside an event whose data
        is not whole JSON (a close-delimited upstream that broke off: nothing else tells it from a normal end),
        is treated as ``fail`` with ``CUT_SHORT``; before ``[DONE]`` only. Any other unfinished last event is
        finished with the line ends it lacks (``sse.finished``) and sent like any other.
        """
        if self.mode == "pass":
            return b""
        if self.mode == "json":
            return self.completion(b"".join(self._buffer))
        events, rest = self._decoder.end()
        out = [self._event(event) for event in events]
        if rest is not None:
            if self._done:  # after [DONE] the answer was whole: trailing bytes go as they came
                out.append(self._event(rest))
            elif _cut_short(rest):
                out.append(self._break_off(CUT_SHORT))
                return b"".join(out)
            else:
                out.append(self._event(finished(rest)))
        if not self._done:
            out.append(self._closing_chunks())
        return b"".join(out)

    def fail(self, error: ApiError) -> bytes:
        """The upstream body broke off (the shell's read failed); return the last bytes to send.

        In ``sse`` mode: the events the stream completed, text a think splitter still held, then one event whose
        data is ``error``'s OpenAI-style body (``{"error": {...}}``), which is how OpenAI and OpenRouter report
        an error after a stream started; the openai SDK raises ``APIError`` on it instead of ending as if the
        answer were complete. The bytes of an unfinished event are dropped (they never made an event). After
        ``[DONE]`` the answer was whole: nothing is added. In the other modes ``b""``: a shell sends a ``json``
        body only once it is whole, and ``pass`` bytes are not ours to add to.
        """
        if self.mode != "sse" or self._done:
            return b""
        events, rest = self._decoder.end()
        if rest is not None and rest.data == b"[DONE]":  # only its blank line was missing: the answer was whole
            events.append(finished(rest))
        out = [self._event(event) for event in events]
        if not self._done:
            out.append(self._break_off(error))
        return b"".join(out)

    def _break_off(self, error: ApiError) -> bytes:
        return self._closing_chunks() + encode_event(error.to_bytes())

    def _closing_chunks(self) -> bytes:
        self._done = True
        return b"".join(encode_event(codec.encode_lenient(chunk)) for chunk in self._normalizer.finish())

    def _event(self, event: SSEEvent) -> bytes:
        data = event.data
        if data is None:
            return event.raw
        return self._data(event.raw, data, event.event, event.id)

    def _data(self, raw: bytes, data: bytes, event: str | None, id: str | None) -> bytes:
        """The bytes to send for one event with ``data``, whose original bytes are ``raw``."""
        if data == b"[DONE]":
            return self._closing_chunks() + raw
        if self._prefilter and not may_hold_reasoning(data):
            return raw
        try:  # msgspec directly, not codec.decode_lenient: this runs once per event
            value = _decode(data)
        except (msgspec.DecodeError, RecursionError):
            return self._lenient(raw, data, event, id)
        chunks = self._normalizer.chunk(value)
        if chunks is UNCHANGED:
            return raw
        one_line = len(raw) - len(data) <= _ONE_DATA_LINE  # the event is one data line and its blank line
        try:
            if one_line and len(chunks) == 1:
                return b"data: " + codec.encode(chunks[0]) + b"\n\n"
            encoded = [codec.encode(chunk) for chunk in chunks]
        except UnicodeEncodeError:  # text a think splitter held from an event only the fallback could read
            encoded = [codec.encode_lenient(chunk) for chunk in chunks]
        return _frame(raw, one_line, event, id, encoded)

    def _lenient(self, raw: bytes, data: bytes, event: str | None, id: str | None) -> bytes:
        """``_data`` for data msgspec refused: what the standard library reads (a lone UTF-16 surrogate, ``NaN``
        or ``-Infinity``) is normalized and written back with those as they came; anything else leaves as it
        came (``codec.decode_fallback``, ``codec.encode_fallback``)."""
        value = codec.decode_fallback(data)
        if value is codec.UNDECODABLE:
            return raw
        chunks = self._normalizer.chunk(value)
        if chunks is UNCHANGED:
            return raw
        one_line = len(raw) - len(data) <= _ONE_DATA_LINE
        return _frame(raw, one_line, event, id, [codec.encode_fallback(chunk) for chunk in chunks])

    def completion(self, body: bytes) -> bytes:
        """The client's bytes for a whole buffered (``json`` mode) response ``body``
        (``normalize_completion_body``)."""
        return normalize_completion_body(body, self.options)


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
    splitting); a body that is not JSON is returned unchanged. Otherwise ``completion.normalize_completion``
    applies and the result is re-encoded.
    """
    if not options.exclude and options.think is None and not may_hold_reasoning(body):
        return body
    try:
        value = _decode(body)
        fallback = False
    except (msgspec.DecodeError, RecursionError):
        value = codec.decode_fallback(body)
        if value is codec.UNDECODABLE:
            return body
        fallback = True
    if not normalize_completion(value, exclude=options.exclude, think=options.think):
        return body
    return codec.encode_fallback(value) if fallback else codec.encode(value)
