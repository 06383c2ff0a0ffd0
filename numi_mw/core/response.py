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

from collections.abc import Callable, Collection
from typing import Any

import msgspec

from numi_mw.core import codec
from numi_mw.core.chunks import UNCHANGED, ChunkNormalizer
from numi_mw.core.completion import normalize_completion
from numi_mw.core.errors import CUT_SHORT, ApiError
from numi_mw.core.providers import ProviderRules
from numi_mw.core.sse import SSEDecoder, SSEEvent, encode_event, replace_data, terminate_event
from numi_mw.core.think import ThinkStart, ThinkTags


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
    """The think-tag settings for ``rules``'s provider (``docs/streaming.md``, "Think tags").

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


IDENTITY: frozenset[str] = frozenset(("identity", ""))
"""The content encodings a body arrives in when the shell decodes none (``choose_rewriter``'s default)."""


def choose_rewriter(
    options: ResponseOptions,
    status: int,
    content_type: str | None,
    content_encoding: str | None = None,
    *,
    decoded: Collection[str] = IDENTITY,
) -> SSERewriter | JSONRewriter | None:
    """The rewriter for one response, or ``None`` when it passes through unchanged.

    Args:
        options: what the response side does for the request (``ResponseOptions``).
        status: the HTTP status; only 2xx answers are rewritten (an upstream's own error passes through).
        content_type: the ``content-type`` header, or ``None``: ``text/event-stream`` gets an ``SSERewriter``,
            ``application/json`` (or any ``+json``) a ``JSONRewriter``, any other type nothing.
        content_encoding: the ``content-encoding`` header, or ``None`` (identity).
        decoded: the encodings (lower case) the shell decodes before it feeds the rewriter; a body in any other
            encoding cannot be read and passes through.
    """
    if not 200 <= status < 300 or not content_type:
        return None
    if content_encoding is not None and content_encoding.strip().lower() not in decoded:
        return None
    media = _MEDIA.get(content_type)  # the common spellings, without parsing
    if media is None:
        media = content_type.split(";", 1)[0].strip().lower()
    if media == "text/event-stream":
        return SSERewriter(options)
    if media == "application/json" or media.endswith("+json"):
        return JSONRewriter(options)
    return None


_MEDIA = {
    "application/json": "application/json",
    "text/event-stream": "text/event-stream",
    "text/event-stream; charset=utf-8": "text/event-stream",
    "application/json; charset=utf-8": "application/json",
}


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
_encode = codec.encoder.encode


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

    __slots__ = ("_decoder", "_done", "_normalizer", "_prefilter", "options")

    def __init__(self, options: ResponseOptions) -> None:
        self.options = options
        self._decoder = SSEDecoder()
        self._normalizer = ChunkNormalizer(exclude=options.exclude, think=options.think)
        self._done = False
        self._prefilter = options.think is None  # with think splitting every chunk's content is read

    def feed(self, chunk: bytes) -> bytes:
        """Take the next bytes of the upstream body; return the bytes to send now."""
        data = self._decoder.single_data(chunk)
        if data is not None:
            return self._data(chunk, data, None, None)
        events = self._decoder.feed(chunk)
        if len(events) == 1:
            return self._event(events[0])
        return b"".join([self._event(event) for event in events])

    def finish(self) -> bytes:
        """End of the upstream body; return the last bytes to send.

        A stream that ends inside a line that is not a ``data`` line, or inside an event whose data is not whole
        JSON (a close-delimited upstream that broke off: nothing else tells it from a normal end), is treated as
        ``fail`` with ``errors.CUT_SHORT``; before ``[DONE]`` only. Any other unfinished last event is finished
        with the line ends it lacks (``sse.terminate_event``) and sent like any other.
        """
        events, rest = self._decoder.end()
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
        ``error``'s OpenAI-style body (``{"error": {...}}``), which is how OpenAI and OpenRouter report an error
        after a stream started; the openai SDK raises ``APIError`` on it instead of ending as if the answer were
        complete. The bytes of an unfinished event are dropped (they never made an event). After ``[DONE]`` the
        answer was whole: nothing is added.
        """
        if self._done:
            return b""
        events, rest = self._decoder.end()
        if rest is not None and rest.data == b"[DONE]":  # only its blank line was missing: the answer was whole
            events.append(terminate_event(rest))
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
        """The bytes to send for one event with ``data``, whose original bytes are ``raw``.

        Data msgspec refuses but the standard library reads (a lone UTF-16 surrogate, ``NaN`` or ``-Infinity``)
        is normalized too and written back with those as they came (``codec.decode_fallback``); anything else
        that is not JSON leaves as it came.
        """
        if data == b"[DONE]":
            return self._closing_chunks() + raw
        if self._prefilter and not may_hold_reasoning(data):
            return raw
        encode: Callable[[Any], bytes] = _encode
        try:  # msgspec inline, not codec.decode_with_encoder: this runs once per event
            value = _decode(data)
        except (msgspec.DecodeError, RecursionError):
            value, encode = codec.fallback(data)
            if value is codec.UNDECODABLE:
                return raw
        chunks = self._normalizer.normalize(value)
        if chunks is UNCHANGED:
            return raw
        one_line = len(raw) - len(data) <= _ONE_DATA_LINE  # the event is one data line and its blank line
        try:
            if one_line and len(chunks) == 1:
                return b"data: " + encode(chunks[0]) + b"\n\n"
            encoded = list(map(encode, chunks))
        except UnicodeEncodeError:  # text a think splitter held from an event only the fallback could read
            encoded = [codec.encode_lenient(chunk) for chunk in chunks]
        return _frame(raw, one_line, event, id, encoded)


class JSONRewriter(msgspec.Struct, gc=False):
    """Rewrite one buffered chat completion body (spec 004 "Response fields"); one instance per response.

    Args:
        options: what to do (``ResponseOptions``).

    ``feed`` collects the body and returns ``b""``; ``finish`` returns the whole body to send (the very bytes
    object received when it came in one piece and nothing changed; ``changed`` then says which), after which
    a shell sets ``content-length``. ``fail`` returns ``b""``: a body that broke off is never sent. A Struct
    rather than a class: one is made per buffered response, and a Struct is built in C.

    Attributes:
        changed: whether ``finish`` returned a body that differs from the upstream's.
    """

    options: ResponseOptions
    _body: bytes = b""
    _parts: list[bytes] | None = None  # from the second piece on
    changed: bool = False

    def feed(self, chunk: bytes) -> bytes:
        """Take the next bytes of the upstream body; nothing is sent before the end."""
        if self._parts is not None:
            self._parts.append(chunk)
        elif self._body:
            self._parts = [self._body, chunk]
        else:
            self._body = chunk
        return b""

    def finish(self) -> bytes:
        """End of the upstream body; return the whole body to send (``normalize_completion_body``)."""
        body = self._body if self._parts is None else b"".join(self._parts)
        out = normalize_completion_body(body, self.options)
        self.changed = out is not body
        return out

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
    splitting); a body that is not JSON is returned unchanged. Otherwise ``completion.normalize_completion``
    applies and the result is re-encoded.
    """
    if not options.exclude and options.think is None and not may_hold_reasoning(body):
        return body
    value, encode = codec.decode_with_encoder(body)
    if value is codec.UNDECODABLE or not normalize_completion(value, exclude=options.exclude, think=options.think):
        return body
    return encode(value)
