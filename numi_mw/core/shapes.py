"""A stream's repeated reasoning chunks, rewritten from their bytes (spec 004 "Streaming").

The reasoning chunks of one stream mostly differ in their text alone: the same id, created time, model and keys,
one text fragment after another. When ``ChunkNormalizer``'s fast path has rewritten such a chunk (a fragment that
extends the open text detail: its ``delta.reasoning``, ``delta.reasoning_content`` or one ``reasoning.text`` entry),
``shape_of`` cuts its bytes around the text into a ``ChunkShape``, and the encoded chunk that went out around the
same text. A later chunk whose bytes are the same but for the text is then rewritten by joining those pieces around
its text, without decoding or encoding it: the chunk the full path would send, byte for byte. With ``exclude`` the
fast path takes such a fragment out, and what goes out for the chunk holds no text: the same bytes (or none) for
every chunk of its shape.

That holds when the text's bytes are what msgspec's encoder writes for the string they decode to
(``canonical_text``): replacing a JSON string's contents with other such contents changes no other token, so the
chunk decodes to the same value with another text, which the fast path rewrites the same way while the choice's
state is the same (``ChunkNormalizer.repeated`` checks it), and the encoder writes that text as its bytes.
``shape_of`` checks its cuts by decoding the chunk with a marker in place of the text; a chunk any of this does not
hold for takes the full path.
"""

from __future__ import annotations

import re
from typing import Any, Final

import msgspec

from numi_mw.core import codec
from numi_mw.core.chunks import (
    ANSWER_TEXT,
    CONTENT_TEXT,
    DETAIL_TEXT,
    PLAIN_TEXT,
    SHOWN_TEXT,
    THINK_CONTENT,
    THINK_TEXT,
    ExcludedRepeat,
    Repeat,
)
from numi_mw.core.structs import ChunkProbe

_KEYS: Final[dict[int, tuple[bytes, ...]]] = {
    CONTENT_TEXT: (b'"reasoning_content":"',),
    PLAIN_TEXT: (b'"reasoning":"',),
    SHOWN_TEXT: (b'"reasoning":"', b'"text":"'),
    DETAIL_TEXT: (b'"text":"',),
    THINK_TEXT: (b'"content":"',),
    THINK_CONTENT: (b'"content":"',),
    ANSWER_TEXT: (b'"content":"',),
}
"""Where the text of each kind stands in a chunk written without spaces (as every provider streams them)."""

_UNSAFE = re.compile(rb'["\\\x00-\x1f]')
"""A byte that may end a JSON string's contents or is not written as itself by msgspec's encoder."""
_CANONICAL = re.compile(rb'(?:[^"\\\x00-\x1f]++|\\[\\"bfnrt])*+')
"""JSON string contents as msgspec's encoder writes them: the two-character escapes it uses, nothing else. Possessive
(``++``, ``*+``): a text it refuses is refused in one pass, where a nested ``+`` in ``*`` would try every way of
cutting a run of plain characters, exponentially many."""

_probe = msgspec.json.Decoder(ChunkProbe).decode
"""A chunk's choices, its envelope skipped: enough to read the fields a shape is cut around."""

_MARK: Final = "\x00"
"""The text ``shape_of`` puts in a chunk's place to check its cuts: msgspec writes it as ``_MARK_BYTES``, a form
``canonical_text`` refuses, so that no text a hit reads can be it."""
_MARK_BYTES: Final = b"\\u0000"


def canonical_text(raw: bytes) -> bool:
    """Whether ``raw``, the bytes between a JSON string's quotes, are what msgspec's encoder writes for the string
    they decode to: valid UTF-8 (no lone surrogate), no control character, no ``"`` but escaped, and no escape but
    ``\\"``, ``\\\\``, ``\\b``, ``\\f``, ``\\n``, ``\\r`` and ``\\t``. Such bytes decode to one string and encode back
    to themselves (RFC 8259, section 7)."""
    if _UNSAFE.search(raw) is not None and _CANONICAL.fullmatch(raw) is None:
        return False
    return raw.isascii() or codec.is_utf8(raw)


class ChunkShape:
    """The bytes of a stream's reasoning event around its text, and the bytes that went out for it around the same
    text; one per ``SSERewriter`` at a time.

    ``prefix`` + text + ``suffix`` (or ``prefix`` + text + ``middle`` + text + ``suffix`` when the text stands twice)
    is an event of this shape: one ``data: `` line and its blank line, the framing every provider streams (an event
    framed otherwise, ``data:`` without its space or ``\\r\\n`` line ends, takes the full path). ``out`` is what goes
    out for it: its pieces around the text (which stands twice in a reasoning chunk and once as the answer's
    content), bytes that hold no text (excluded reasoning: the chunks left when it is taken out, or ``b""`` when the
    chunk is dropped), or ``None`` when the event goes out as it came.
    """

    __slots__ = ("hits", "middle", "out", "prefix", "repeat", "start", "suffix", "tail")

    def __init__(
        self,
        prefix: bytes,
        middle: bytes | None,
        suffix: bytes,
        out: tuple[bytes, ...] | bytes | None,
        repeat: Repeat,
    ) -> None:
        self.prefix = prefix
        self.middle = middle
        self.suffix = suffix
        self.out = out
        self.repeat = repeat
        self.hits = 0
        self.start = len(prefix)  # where the text starts, and the bytes after it (``rewrite``)
        self.tail = len(suffix)

    def rewrite(self, raw: bytes) -> bytes | None:
        """The bytes to send for the event ``raw`` (its bytes, blank line included) when it has this shape, its text
        is canonical (``canonical_text``) and the choice's state is the one this shape was cut in
        (``ChunkNormalizer.repeated``, which counts the fragment as sent); else ``None``, and nothing changed.

        Such an event is one whole event of one ``data: `` line: the text holds no line end (a canonical text has no
        control character) and neither do the pieces around it, cut from one data line."""
        if not raw.startswith(self.prefix) or not raw.endswith(self.suffix):
            return None
        start = self.start
        end = len(raw) - self.tail
        middle = self.middle
        if middle is None:
            text = raw[start:end]
        else:
            size = end - start - len(middle)
            if size <= 0 or size & 1:
                return None
            half = size >> 1
            text = raw[start : start + half]
            if not raw.startswith(middle, start + half) or not raw.startswith(text, end - half):
                return None
        # ``canonical_text`` written out: this runs once per event of a run of one shape
        if not text or (_UNSAFE.search(text) is not None and _CANONICAL.fullmatch(text) is None):
            return None
        if not (text.isascii() or codec.is_utf8(text)) or not self.repeat.repeated(text):
            return None
        self.hits += 1
        # ``sent`` written out: this runs once per event of a run of one shape (a call costs 4 % of such an event)
        out = self.out
        if isinstance(out, tuple):
            if len(out) == 3:  # the reasoning's text, twice
                return b"".join((out[0], text, out[1], text, out[2]))
            return b"".join((out[0], text, out[1]))  # the answer's text, once
        return raw if out is None else out

    def sent(self, raw: bytes, text: bytes) -> bytes:
        """The bytes to send for the event ``raw`` of this shape, whose text's bytes are ``text``: ``out``'s pieces
        joined around the text, ``out`` itself when it holds no text, or ``raw`` when the event goes as it came."""
        out = self.out
        if isinstance(out, tuple):
            if len(out) == 3:  # the reasoning's text, twice
                return b"".join((out[0], text, out[1], text, out[2]))
            return b"".join((out[0], text, out[1]))  # the answer's text, once
        return raw if out is None else out


def shape_of(
    data: bytes, kind: int, chunk: dict[str, Any], sent: list[dict[str, Any]] | None, repeat: Repeat
) -> tuple[ChunkShape, bytes] | None:
    """The shape of the chunk whose data ``data`` the fast path has just rewritten to ``chunk`` (the decoded chunk;
    ``sent``: the chunks to send for it, ``None`` when it goes out as it came), where ``kind`` says the text stood
    (``chunks.CONTENT_TEXT``, ``PLAIN_TEXT``, ``SHOWN_TEXT``, ``DETAIL_TEXT``, ``THINK_TEXT``, ``THINK_CONTENT``,
    ``ANSWER_TEXT``). ``repeat``: the choice's state, for ``ChunkShape.rewrite``.

    Returns:
        ``(shape, text)``: the shape, and the bytes of this chunk's text, for which ``shape.sent`` gives the full
        path's bytes for ``sent``; ``None`` when the text's bytes are not found where ``kind`` puts them, or the cuts
        do not hold.

    The text is ``chunk``'s ``delta.reasoning`` (which the fast path sets), or its ``delta.content`` for content that
    goes out as content. With ``repeat`` an ``ExcludedRepeat`` the fast path took the reasoning out: ``chunk`` is the
    decoded chunk as it came, the text the reasoning field ``kind`` names, and ``sent`` holds no text (but for
    ``ANSWER_TEXT``, the answer's content, which goes out without the reasoning fields); the shape then sends their
    bytes for every chunk it fits.

    The cut is checked with one decode, of ``data`` with a marker in place of the text. ``data`` is JSON, so a key
    written as ``"reasoning":"`` (``"text":"``, ``"content":"``) is followed by a string value wherever it stands
    (its last quote opens a value, even where its first quote is an escaped one inside a key), and a canonical text
    and its closing quote are that string's contents and end: the marker replaces one string value, and the field
    ``kind`` names holds the marker only if that string was it (a canonical text is never the marker). A later
    chunk of the same bytes but its text then decodes to the same value with another text in that field."""
    delta = chunk["choices"][0]["delta"]
    excluded = isinstance(repeat, ExcludedRepeat)
    if kind in (THINK_CONTENT, ANSWER_TEXT):  # content that goes out as content
        source = delta["content"]
    elif not excluded:
        source = delta["reasoning"]
    elif kind == CONTENT_TEXT:
        source = delta["reasoning_content"]
    else:
        source = delta["reasoning_details"][0]["text"] if kind == DETAIL_TEXT else delta["reasoning"]
    try:
        text = codec.encode(source)[1:-1]
    except UnicodeEncodeError:  # (a lone surrogate: msgspec decodes none, so a repeat's text has none)
        return None
    if not canonical_text(text):  # its bytes hold no escape the marker could be, so the check below means something
        return None
    starts = []
    for key in _KEYS[kind]:
        found = data.find(key + text + b'"')  # the first: the check below tells the field's from another's
        if found < 0:
            return None
        starts.append(found + len(key))
    starts.sort()
    first = starts[0]
    prefix = data[:first]
    middle = None
    if len(starts) == 2:
        middle = data[first + len(text) : starts[1]]
        suffix = data[starts[1] + len(text) :]
        marked = prefix + _MARK_BYTES + middle + _MARK_BYTES + suffix
    else:
        suffix = data[first + len(text) :]
        marked = prefix + _MARK_BYTES + suffix
    try:
        fields = _probe(marked).choices[0].delta
        if kind == CONTENT_TEXT and fields["reasoning_content"] != _MARK:
            return None
        if kind in _CONTENT_KINDS and fields["content"] != _MARK:
            return None
        if kind in (PLAIN_TEXT, SHOWN_TEXT) and fields["reasoning"] != _MARK:
            return None
        if kind in (SHOWN_TEXT, DETAIL_TEXT) and fields["reasoning_details"][0]["text"] != _MARK:
            return None
    except (msgspec.DecodeError, RecursionError, LookupError, TypeError):  # not such a chunk after all
        return None
    pieces = _pieces(kind, sent, excluded, source)
    if pieces is _NO_PIECES:
        return None
    return ChunkShape(b"data: " + prefix, middle, suffix + b"\n\n", pieces, repeat), text


_CONTENT_KINDS: Final = frozenset((THINK_TEXT, THINK_CONTENT, ANSWER_TEXT))
"""The kinds whose text stands in the chunk's ``delta.content`` as it comes."""
_NO_PIECES: Final = b"\x00"
"""``_pieces`` of chunks whose text the encoder does not write where the shape needs it."""


def _pieces(
    kind: int, sent: list[dict[str, Any]] | None, excluded: bool, source: str
) -> tuple[bytes, ...] | bytes | None:
    """What goes out for a chunk of a shape (``ChunkShape.out``) that sent ``sent`` for the text ``source``: ``None``
    for the chunk as it came; bytes when the text does not go out (excluded reasoning); else the pieces of the one
    chunk sent around its text, which stands twice in a reasoning chunk (``delta.reasoning`` and its detail's text)
    and once as the answer's content; ``_NO_PIECES`` when it does not stand so. Joined around the text's bytes, the
    pieces are the chunk's encoding."""
    if sent is None:
        return None
    # (UnicodeEncodeError, LookupError, TypeError: chunks the fast path does not make for a repeat, which comes
    # from msgspec's decode and extends an open text detail; refused rather than assumed)
    if excluded and kind != ANSWER_TEXT:
        try:
            return b"".join([b"data: " + codec.encode(item) + b"\n\n" for item in sent])
        except UnicodeEncodeError:
            return _NO_PIECES
    if len(sent) != 1:
        return _NO_PIECES
    item = sent[0]
    try:
        delta = item["choices"][0]["delta"]
        detail = None if kind == ANSWER_TEXT else delta["reasoning_details"][0]
    except (LookupError, TypeError):
        return _NO_PIECES
    # the fields set to the marker for one encode, and back to the very objects they held: the chunk (or the
    # detail the normalizer keeps) is as it was before any other code reads it
    if type(delta) is not dict:
        return _NO_PIECES
    if kind == ANSWER_TEXT:
        content = delta.get("content")
        if content != source:
            return _NO_PIECES
        delta["content"] = _MARK
        try:
            encoded = b"data: " + codec.encode(item) + b"\n\n"
        except UnicodeEncodeError:
            return _NO_PIECES
        finally:
            delta["content"] = content
        count = 2
    else:
        if type(detail) is not dict:
            return _NO_PIECES
        reasoning, text = delta.get("reasoning"), detail.get("text")
        if reasoning != source or text != source:
            return _NO_PIECES
        delta["reasoning"] = detail["text"] = _MARK
        try:
            encoded = b"data: " + codec.encode(item) + b"\n\n"
        except UnicodeEncodeError:
            return _NO_PIECES
        finally:
            delta["reasoning"], detail["text"] = reasoning, text
        count = 3
    pieces = encoded.split(_MARK_BYTES)
    return tuple(pieces) if len(pieces) == count else _NO_PIECES
