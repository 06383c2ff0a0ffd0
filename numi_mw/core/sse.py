"""Incremental Server-Sent Events decoder and encoder on bytes, sans-I/O (``docs/architecture.md``).

``SSEDecoder.feed(chunk)`` takes the bytes of a response body as they arrive, split at any byte position
(inside a UTF-8 character, between the ``\\r`` and ``\\n`` of a line end, inside a field name), and returns the
events completed so far; ``flush()`` ends the stream. Every event keeps its exact original bytes in
``SSEEvent.raw``: concatenating ``raw`` over all events returned by ``feed`` and ``flush`` gives back the input
byte for byte, so a shell can re-emit an event it does not change untouched, keep-alive comments and
``data: [DONE]`` included.

Parsing follows the WHATWG HTML "Server-sent events" event stream format: lines end with ``\\r\\n``, ``\\n`` or
``\\r``; a line starting with ``:`` is a comment; ``name: value`` sets field ``name`` (one space after the colon is
dropped); a line without a colon is a field name with an empty value; a blank line ends the event. Differences,
chosen for a byte-faithful proxy rather than a browser:

- Every blank line produces an event, also one that ends nothing (a second blank line in a row, or a blank
  line at the start of the stream). Such an event has no fields and ``raw`` is just that line end.
- Events without data are returned too (``data`` is ``None``), so comments, ``retry:`` and bare ``event:``
  lines keep their place in the stream.
- ``flush()`` returns a final event for bytes after the last blank line instead of discarding them.
- ``id`` is the ``id`` field of this event only (``None`` when it has none), not the last event ID of the stream.
- A ``\\r`` that is the last byte fed so far is held back until the next byte (or ``flush()``) says whether a
  ``\\n`` follows, so that ``raw`` never splits a ``\\r\\n``. For streams using bare ``\\r`` line ends this
  delays an event ending exactly at a chunk boundary until the next chunk.
"""

from __future__ import annotations

import codecs
import sys

from numi_mw.core.structs import SSEEvent

__all__ = ["EventTooLarge", "SSEDecoder", "SSEEvent", "encode_event", "replace_data", "terminate_event"]

_BOM = codecs.BOM_UTF8
_LF = 0x0A
_CR = 0x0D
_NUL = 0x00
_SPACE = 0x20
_COLON = 0x3A


class EventTooLarge(ValueError):
    """An event of the stream is over the decoder's ``max_event_bytes`` (``limit``, bytes): raised by
    ``SSEDecoder.feed`` once the event in progress passes it, after the decoder let go of that event's bytes."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"an SSE event is over the limit of {limit} bytes")
        self.limit = limit


class SSEDecoder:
    """Incremental SSE decoder: ``feed(bytes) -> list[SSEEvent]``, then ``flush()`` at the end of the stream.

    One instance per stream. The decoder keeps the bytes of the event in progress in one buffer and remembers
    how far it has scanned, so each byte is searched once (with ``bytes.find``) however small the chunks are;
    a large event split into many small chunks costs linear time (``split_read`` reads a held event once more,
    with the read that ends it). After ``flush()`` the decoder is reset and can decode a new stream.

    Args:
        max_event_bytes: the most bytes one event may have (its ``raw``, lines and blank line), or ``None`` for no
            limit. Past it ``feed`` raises ``EventTooLarge``: the decoder drops the event in progress, so it never
            holds more than this plus one fed chunk; the events completed before it come from ``end`` (or
            ``flush``), and the stream is over.
    """

    __slots__ = (
        "_at_start",
        "_buf",
        "_comments",
        "_data",
        "_event",
        "_fields",
        "_id",
        "_limit",
        "_pos",
        "_ready",
        "_scan",
        "_simple",
    )

    def __init__(self, max_event_bytes: int | None = None) -> None:
        self._buf = bytearray()
        self._limit = sys.maxsize if max_event_bytes is None else max_event_bytes
        self._simple = True  # chunks at an event boundary take ``_feed_simple`` (the tests check it against ``_parse``)
        self._reset()

    @property
    def held(self) -> int:
        """The bytes the decoder holds now: those of the event in progress."""
        return len(self._buf)

    @property
    def limit(self) -> int:
        """The most bytes of one event the decoder takes (``max_event_bytes``; ``sys.maxsize`` for no bound)."""
        return self._limit

    def between_events(self) -> bool:
        """Whether the next chunk starts a new event, the stream's first bytes behind: nothing is held, and no BOM
        is left to drop. A chunk that is one whole event of one ``data:`` line within ``limit`` may then be taken
        without the decoder (a stream rewriter's run of one shape), which leaves its state as it is."""
        return not self._buf and not self._at_start

    def _reset(self) -> None:
        self._ready: list[SSEEvent] = []  # events completed before an event over the limit
        self._buf.clear()
        # Offsets into _buf: the current event starts at 0; _pos is the start of the first unparsed line;
        # _scan is where searching for the next line end resumes (no line end lies in [_pos, _scan)).
        self._pos = 0
        self._scan = 0
        self._at_start = True  # before the first line of the stream (for the optional UTF-8 BOM)
        self._clear_event()

    def _clear_event(self) -> None:
        self._data: list[bytes] = []
        self._event: str | None = None
        self._id: str | None = None
        self._fields = False  # any non-comment line in the current event
        self._comments = False  # any comment line in the current event

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Add the next bytes of the stream; return the events they complete, in order.

        Args:
            chunk: any number of bytes (possibly empty), split anywhere.

        Returns:
            The events whose terminating blank line is now complete; bytes of an unfinished event stay buffered.
        """
        if (
            self._simple
            and not self._buf
            and chunk
            and (not self._at_start or chunk[0] != _BOM[0])  # the stream's first byte: no BOM can start there
            and _CR not in chunk
            and len(chunk) <= self._limit
        ):
            self._at_start = False
            return self._feed_simple(chunk)
        if self._buf and chunk:
            split = self.split_read(chunk)
            if split is not None:  # the read ends the held event: it and the read as reads at event boundaries
                whole, rest = split
                if not whole:  # (over the bound: ``feed`` bounds it)
                    return self.feed(rest)
                events = self.feed(whole)
                if rest:
                    self.hold(rest)
                return events
        if chunk:
            self._buf += chunk
        return self._parse(final=False)

    def _blank_first(self, chunk: bytes) -> bool:
        """Whether the first byte of ``chunk`` is a blank line that ends the held event: a ``\\n`` after the line end
        the held bytes end with (they hold no blank line of their own, and a ``\\n`` after a line end is one whatever
        ended the line before)."""
        return self._buf[-1] == _LF and chunk[0] == _LF

    def split_read(self, chunk: bytes) -> tuple[bytes, bytes] | None:
        """A read cut inside events (a network cuts a stream where its segments end, not where its events do) as
        ``(whole, rest)``: ``whole`` is whole events at an event boundary, which a fast path such as ``data_lines``
        may take, and ``rest`` goes to ``hold`` after them (to ``feed`` when ``whole`` is empty); together they give
        the events ``feed(chunk)`` gives.

        When ``chunk`` ends the event the decoder holds, the decoder lets go of it and the read is that event's
        bytes and ``chunk``: copied once, however many reads the event took. ``whole`` ends where the read's last
        blank line does, and ``rest`` is then the start of the next event (no blank line). ``whole`` is ``b""`` for
        a read at an event boundary without a blank line (``rest`` is the read), and when ``whole`` or ``rest`` would
        be over the event bound (``rest`` is then all of the read, the held bytes and ``chunk``, which ``feed``
        bounds).

        Returns ``None``, nothing consumed, for a read that is none such: one at an event boundary at both ends
        (``data_lines`` or ``feed`` takes it), one that does not end the held event, one with a ``\\r`` in it or in
        the held bytes, and the stream's first event held once its BOM was dropped (read again, it would not be).
        """
        if not self._simple or _CR in chunk or not chunk:
            return None
        end = chunk.rfind(b"\n\n") + 2  # (a read without ``\r``: past a line end and a blank line)
        if end == 1:  # no blank line
            end = 0
        buf = self._buf
        if not buf:
            if end == len(chunk):  # whole events, which ``data_lines`` refused: for ``feed``
                return None
            if end > self._limit or len(chunk) - end > self._limit:
                return b"", chunk
            return chunk[:end], chunk[end:]
        if not end and not self._blank_first(chunk):  # the read does not end the held event
            return None
        if (not self._at_start and buf.startswith(_BOM)) or _CR in buf:
            return None  # a BOM dropped, which would not be again; a ``\r`` may be held for a ``\n``: for ``feed``
        held = bytes(buf)  # the held event, let go of: read again, whole, with the read
        buf.clear()
        self._pos = self._scan = 0
        if self._fields or self._comments:  # lines of it were read (held unread, it has none: ``_hold``)
            self._clear_event()
        end = end or 1
        if len(held) + end > self._limit or len(chunk) - end > self._limit:
            return b"", held + chunk
        return held + chunk[:end], chunk[end:]

    def split_lines(self, chunk: bytes, *, framed: bool = False) -> tuple[list[bytes], list[SSEEvent]] | None:
        """``split_read`` for a reader of each event's data alone: ``(lines, events)``, the data of the read's whole
        events when each is one ``data:`` line (``data_lines``; after at most one ``event:`` line with ``framed``,
        ``framed_lines``), else ``[]`` and those events in ``events``. The rest, the start of the next event, is
        held (``hold``) before this returns, so that a reader that raises on an event leaves the decoder in step with
        the stream, as ``feed`` of the whole read would; when the read has no whole event (``split_read``'s first
        part is empty) it goes to ``feed``, and ``events`` holds what that gives. ``None`` as ``split_read``.

        Raises:
            EventTooLarge: as ``feed``, only when ``lines`` would be empty.
        """
        split = self.split_read(chunk)
        if split is None:
            return None
        whole, rest = split
        if not whole:  # the start of an event without its end, or a part over the bound: ``feed`` holds or bounds it
            return [], self.feed(rest)
        lines = self.framed_lines(whole) if framed else self.data_lines(whole)
        events = self.feed(whole) if lines is None else []
        if rest:
            self.hold(rest)
        return lines or [], events

    def hold(self, rest: bytes) -> None:
        """Hold ``rest``, the second part of a ``split_read`` whose first part, ``whole``, is not empty and was taken
        whole (by ``feed``, ``data_lines``, ``framed_lines``, or a stream rewriter's run of one shape, which runs
        only past the stream's start): the start of the next event, which ``split_read`` made sure has no blank line,
        no ``\\r`` and is within the bound, after whole events that leave the decoder holding nothing. It is held
        unread, as ``feed`` holds an unfinished event of one or two lines: its lines are read when the event ends
        (``_parse``), or not at all when the read that ends it takes it back (``split_read``). ``feed(rest)`` would
        give the same events, after checks that ``split_read`` made already. Nothing is checked here: a ``rest``
        that is not such a part (one with a blank line, say) is held as it is."""
        self._buf += rest

    def single_data(self, chunk: bytes) -> bytes | None:
        """The data of ``chunk`` when it is exactly one whole event of one ``data:`` line, else ``None``.

        The fast path for upstreams that send one event per chunk (most do): no ``SSEEvent`` is built. Only
        taken at an event boundary (nothing buffered) and when ``chunk`` has no ``\\r``; when it returns ``None``
        nothing was consumed, and ``chunk`` goes to ``feed``. The event's original bytes are ``chunk`` itself. A
        stream whose first bytes are ``data:`` has no BOM, so the first event can take this path too.
        """
        # Ints for single bytes: ``13 in chunk`` is a memchr; ``b"\r" in chunk`` first tries its needle as an integer
        # (CPython raises and clears a TypeError), then searches. ``find`` for longer needles, for the same reason.
        if (
            chunk.find(b"\n") == len(chunk) - 2
            and chunk[-1] == _LF
            and chunk.startswith(b"data:")
            and _CR not in chunk
            and not self._buf
            and len(chunk) <= self._limit
        ):
            self._at_start = False
            return chunk[6:-2] if chunk[5] == _SPACE else chunk[5:-2]
        return None

    def single_comment(self, chunk: bytes) -> bool:
        """Whether ``chunk`` is exactly one whole event of one comment line (``: OPENROUTER PROCESSING``, a keep-alive),
        taken as ``single_data`` takes a data line: when nothing is held (at the stream's first byte too: a ``:`` starts
        no BOM), without ``\\r``, within the bound. ``feed`` would give it as one event without data whose bytes are
        ``chunk`` (a comment dispatches nothing, WHATWG HTML "Server-sent events"), which every reader passes on or
        skips; the decoder is left as ``feed`` would leave it. When it returns ``False`` nothing was consumed."""
        if (
            chunk.find(b"\n") == len(chunk) - 2
            and chunk[-1] == _LF
            and chunk[0] == _COLON
            and _CR not in chunk
            and not self._buf
            and len(chunk) <= self._limit
        ):
            self._at_start = False
            return True
        return False

    def data_lines(self, chunk: bytes) -> list[bytes] | None:
        """The data of each event of ``chunk`` when it is nothing but whole events of one ``data: `` line each (the
        space after the colon included), in order, else ``None``.

        The fast path for a read that holds several events (a reader that falls behind gets the events that came
        meanwhile in one piece): as ``single_data``, taken only at an event boundary, for a ``chunk`` without
        ``\\r`` whose whole length is within the event bound (a longer read goes to ``feed``, however short its
        events), and when it returns ``None`` nothing was consumed. Event ``i`` is
        ``b"data: " + lines[i] + b"\\n\\n"``, so the events' bytes are ``chunk`` cut at those lengths. One split
        finds them, and one count of line ends checks that no event holds another line: a chunk with any other
        field, a comment, a blank line of its own or ``data:`` without its space goes to ``feed``."""
        if (
            chunk.startswith(b"data: ")
            and chunk.endswith(b"\n\n")
            and _CR not in chunk
            and not self._buf
            and len(chunk) <= self._limit
        ):
            lines = chunk[6:-2].split(b"\n\ndata: ")
            if chunk.count(_LF) == 2 * len(lines):
                self._at_start = False
                return lines
        return None

    def framed_data(self, chunk: bytes) -> bytes | None:
        """The data of ``chunk`` when it is exactly one whole event of one ``data:`` line, after at most one
        ``event:`` line (Anthropic's and OpenAI's framing), else ``None``.

        The fast path of a reader that reads no event name (a native stream's translator reads the ``type`` its
        data carries): no ``SSEEvent`` is built. As ``single_data``, it is taken only at an event boundary and for
        a ``chunk`` without ``\\r``; when it returns ``None`` nothing was consumed, and ``chunk`` goes to
        ``feed``.
        """
        if not chunk.startswith(b"event:"):
            return self.single_data(chunk)
        data = chunk.find(_LF) + 1  # the start of the second line
        if not data or not chunk.startswith(b"data:", data):
            return None
        end = chunk.find(_LF, data)
        size = len(chunk)
        if end != size - 2 or chunk[-1] != _LF or _CR in chunk or self._buf or size > self._limit:
            return None
        self._at_start = False
        return chunk[data + 6 : end] if chunk[data + 5] == _SPACE else chunk[data + 5 : end]

    def framed_lines(self, chunk: bytes) -> list[bytes] | None:
        """The data of each event of ``chunk`` when it is nothing but whole events of one ``data:`` line each, after
        at most one ``event:`` line (Anthropic's and OpenAI's framing), in order, else ``None``.

        ``framed_data`` for a read that holds several events, for a reader that reads no event name: as
        ``data_lines``, taken only at an event boundary, for a ``chunk`` without ``\\r`` whose whole length is
        within the event bound, and when it returns ``None`` nothing was consumed. A chunk with a comment, any
        other field, a blank line of its own or an event of another form goes to ``feed``."""
        size = len(chunk)
        if not chunk.endswith(b"\n\n") or _CR in chunk or self._buf or size > self._limit:
            return None
        lines: list[bytes] = []
        start = 0
        while start < size:  # each event found in ``chunk`` itself: no copies but the data
            data = chunk.find(_LF, start) + 1 if chunk.startswith(b"event:", start) else start
            if not chunk.startswith(b"data:", data):  # (a stream's first byte then starts no BOM)
                return None
            end = chunk.find(_LF, data)  # the data line's end, which the blank line must follow
            if chunk[end + 1] != _LF:
                return None
            lines.append(chunk[data + 6 : end] if chunk[data + 5] == _SPACE else chunk[data + 5 : end])
            start = end + 2
        self._at_start = False
        return lines

    def _feed_simple(self, chunk: bytes) -> list[SSEEvent]:
        """The fast path for a chunk that starts at an event boundary and has no ``\\r``: each complete event of
        one ``data:`` line, of an ``event:`` line and a ``data:`` line (Anthropic's and OpenAI's framing), of one
        comment, or a blank line alone, is cut straight out of ``chunk``; an unfinished event of at most two lines
        begun is held unread (``_hold``); anything else goes to ``_parse``.

        Line ends are found one ``\n`` at a time (``bytes.find`` of an int, a ``memchr``): a search for the
        two-byte ``\n\n`` costs three times as much on a chunk of one event."""
        events: list[SSEEvent] = []
        start = 0
        size = len(chunk)
        while start < size:
            first = chunk.find(_LF, start)  # the end of the event's first line
            if first == -1:  # the start of an event, without a line end
                return self._hold(chunk, start, size - start, events)
            if first == start:  # a blank line that ends nothing
                events.append(SSEEvent(chunk[start : first + 1]))
                start = first + 1
                continue
            if first + 1 == size:  # the event's first line, without the blank line
                return self._hold(chunk, start, first - start, events)
            if chunk[first + 1] == _LF:  # an event of one line
                if chunk.startswith(b"data:", start):
                    value = chunk[start + 6 : first] if chunk[start + 5] == _SPACE else chunk[start + 5 : first]
                    events.append(SSEEvent(chunk[start : first + 2], value))
                elif chunk[start] == _COLON:
                    events.append(SSEEvent(chunk[start : first + 2], None, None, None, True))
                else:
                    break
                start = first + 2
                continue
            second = chunk.find(_LF, first + 1)  # the end of its second line
            if second == -1 or second + 1 == size:  # two lines begun, without the blank line
                return self._hold(chunk, start, first - start, events)
            if (
                chunk[second + 1] != _LF
                or not chunk.startswith(b"event:", start)
                or not chunk.startswith(b"data:", first + 1)
            ):
                break  # more lines, or other fields
            name = chunk[start + 7 : first] if chunk[start + 6] == _SPACE else chunk[start + 6 : first]
            data = first + 1
            value = chunk[data + 6 : second] if chunk[data + 5] == _SPACE else chunk[data + 5 : second]
            events.append(SSEEvent(chunk[start : second + 2], value, name.decode("utf-8", "replace")))
            start = second + 2
        if start < size:
            self._buf += chunk[start:] if start else chunk
            try:
                events.extend(self._parse(final=False))
            except EventTooLarge:
                self._ready[:0] = events
                raise
        return events

    def _hold(self, chunk: bytes, start: int, scan: int, events: list[SSEEvent]) -> list[SSEEvent]:
        """``_feed_simple``'s end for a chunk whose bytes from ``start`` on are an unfinished event without a blank
        line: held as they are, ``events`` returned. Their lines are read when the event ends (``_parse``, from
        ``_pos``, which is ``0``), or not at all when the read that ends it takes it back (``split_read``); ``scan`` is
        where the first line end may be (none before it)."""
        self._buf += chunk[start:] if start else chunk
        self._scan = scan
        return events

    def flush(self) -> list[SSEEvent]:
        """End the stream: return the events still pending and reset the decoder.

        A trailing ``\\r`` is taken as a line end. When the stream ends without a blank line after its last
        event, that event is returned anyway; its ``raw`` is the bytes that remained (which lack the blank line).

        Returns:
            The remaining events (empty when the stream ended on a blank line).
        """
        events, rest = self.end()
        if rest is not None:
            events.append(rest)
        return events

    def end(self) -> tuple[list[SSEEvent], SSEEvent | None]:
        """End the stream, keeping apart what it left unfinished; resets the decoder (``flush`` builds on it).

        Returns:
            ``(events, rest)``: the events the stream completed (a trailing ``\r`` taken as a line end), and the
            event after the last blank line, which the stream never finished (its ``raw`` lacks the blank line),
            or ``None`` when the stream ended on a blank line.
        """
        buf = self._buf
        if not buf:  # the stream ended on a blank line (as streams do): nothing to parse
            events = self._ready
            self._reset()
            return events, None
        events = self._ready + self._parse(final=True)
        rest = None
        if buf:
            pos = self._pos
            if self._at_start and buf.startswith(_BOM, pos):
                pos += 3
            if pos < len(buf):
                self._line(bytes(buf[pos:]))
            rest = self._make(bytes(buf))
        self._reset()
        return events, rest

    def _make(self, raw: bytes) -> SSEEvent:
        data = b"\n".join(self._data) if self._data else None
        event = SSEEvent(raw, data, self._event, self._id, self._comments and not self._fields)
        self._clear_event()
        return event

    def _line(self, line: bytes) -> None:
        """Apply one complete, non-blank line (without its line end) to the current event."""
        if line.startswith(b"data:"):
            self._fields = True
            self._data.append(line[6:] if line[5:6] == b" " else line[5:])
            return
        if line.startswith(b":"):
            self._comments = True
            return
        self._fields = True
        colon = line.find(b":")
        if colon == -1:
            name, value = line, b""
        else:
            name = line[:colon]
            value = line[colon + 2 :] if line[colon + 1 : colon + 2] == b" " else line[colon + 1 :]
        if name == b"data":
            self._data.append(value)
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
        elif name == b"id" and _NUL not in value:
            self._id = value.decode("utf-8", "replace")
        # "retry" and unknown fields change nothing here; they stay in ``raw``.

    def _parse(self, *, final: bool) -> list[SSEEvent]:
        buf = self._buf
        n = len(buf)
        pos = self._pos
        start = 0
        events: list[SSEEvent] = []
        scan = max(self._scan, pos)
        lf = buf.find(b"\n", scan)
        cr = buf.find(b"\r", scan)
        held = False
        while lf != -1 or cr != -1:
            if cr == -1 or (lf != -1 and lf < cr):
                eol = lf
                nxt = lf + 1
            elif cr + 1 < n:
                eol = cr
                nxt = cr + 2 if buf[cr + 1] == _LF else cr + 1
            elif final:
                eol = cr
                nxt = n
            else:
                held = True  # a \r as the last byte: wait for the next byte to know if \n follows
                break
            if self._at_start:
                # The first line of the stream may start with a UTF-8 BOM, which is not part of the line.
                self._at_start = False
                if buf.startswith(_BOM, pos, eol):
                    pos += 3
            if eol == pos:
                # Blank line: ends the event (or, alone, is an event of its own).
                if nxt - start > self._limit:
                    self._overflow(events)
                events.append(self._make(bytes(buf[start:nxt])))
                start = nxt
            else:
                self._line(bytes(buf[pos:eol]))
            pos = nxt
            if lf != -1 and lf < pos:
                lf = buf.find(b"\n", pos)
            if cr != -1 and cr < pos:
                cr = buf.find(b"\r", pos)
        scan = cr if held else n
        if start:
            del buf[:start]
            pos -= start
            scan -= start
        self._pos = pos
        self._scan = scan
        if len(buf) > self._limit:
            self._overflow(events)
        return events

    def _overflow(self, events: list[SSEEvent]) -> None:
        """Drop the event in progress, keep ``events`` (completed before it) for ``end``, raise ``EventTooLarge``."""
        self._buf.clear()
        self._pos = self._scan = 0
        self._at_start = False
        self._clear_event()
        self._ready = events
        raise EventTooLarge(self._limit)


def encode_event(data: bytes, *, event: str | None = None, id: str | None = None) -> bytes:
    """Encode one SSE event: ``event: X\\n``, ``id: Y\\n``, one ``data: `` line per line of ``data``, ``\\n``.

    Args:
        data: the event data (bytes). Each line of it (split at ``\\r\\n``, ``\\r`` or ``\\n``) becomes one
            ``data: `` line, so decoding the result gives back ``data`` with ``\\n`` line ends; ``b""`` gives a
            single ``data: `` line.
        event: the event type, or ``None`` for no ``event`` line.
        id: the event id, or ``None`` for no ``id`` line.

    Returns:
        The event as bytes, ending with a blank line (``\\n\\n``).

    Raises:
        ValueError: ``event`` or ``id`` contains a line end (or ``id`` a NUL), which cannot be framed.
    """
    parts: list[bytes] = []
    if event is not None:
        if "\n" in event or "\r" in event:
            raise ValueError("an SSE event type cannot contain a line end")
        parts.append(b"event: " + event.encode() + b"\n")
    if id is not None:
        if "\n" in id or "\r" in id or "\0" in id:
            raise ValueError("an SSE id cannot contain a line end or NUL")
        parts.append(b"id: " + id.encode() + b"\n")
    parts.append(_data_lines(data))
    parts.append(b"\n")
    return b"".join(parts)


def terminate_event(event: SSEEvent) -> SSEEvent:
    """An event a stream left unfinished (``SSEDecoder.end``), finished: its ``raw`` bytes with the line end
    its last line lacks, if any, and the blank line that ends an event (``\n`` each). Sent at the end of a
    stream, it is an event to every SSE parser; unfinished, parsers drop it (WHATWG), and anything sent after
    it would join it."""
    raw = event.raw
    end = b"\n" if raw.endswith((b"\n", b"\r")) else b"\n\n"
    return SSEEvent(raw + end, event.data, event.event, event.id, event.is_comment_only)


def _data_lines(data: bytes) -> bytes:
    """One ``data: `` line per line of ``data`` (split at ``\r\n``, ``\r`` or ``\n``), each ending with ``\n``."""
    if _CR in data:
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    return b"data: " + data.replace(b"\n", b"\ndata: ") + b"\n"


def _is_data_line(line: bytes) -> bool:
    """Whether ``line`` (without its line end) is a ``data`` field line: ``data`` alone or ``data:`` and a value."""
    return line.startswith(b"data") and (len(line) == 4 or line[4] == 0x3A)


def replace_data(raw: bytes, data: bytes) -> bytes:
    """The event ``raw`` with new data: its ``data`` lines replaced by the lines of ``data``, all else kept.

    Comments, ``event``, ``id``, ``retry`` and unknown field lines keep their bytes, line ends and places; the
    new ``data: `` lines (``\n`` line ends, as ``encode_event`` writes them) stand where the first old ``data``
    line stood, and the event's blank line ends it as before. A stream's leading UTF-8 BOM is dropped when it
    opens a replaced line. This is how a rewritten event loses none of its other lines.

    Args:
        raw: one event's original bytes (``SSEEvent.raw``), with at least one ``data`` line.
        data: the new event data (bytes).

    Returns:
        The event as bytes.
    """
    out: list[bytes] = []
    placed = False
    for number, line in enumerate(raw.splitlines(keepends=True)):
        text = line.rstrip(b"\r\n")
        if number == 0:
            text = text.removeprefix(_BOM)
        if _is_data_line(text):
            if not placed:
                out.append(_data_lines(data))
                placed = True
        else:
            out.append(line)
    return b"".join(out)
