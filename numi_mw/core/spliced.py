"""A request body decoded only as far as the request rules read it, and written back around what they left.

One msgspec pass (``decode``) gives the top level of a chat completions body as builtins, except that each
object inside a top-level array (every message of ``messages``, every tool of ``tools``) is a
``dict[str, msgspec.Raw]``: its keys, and each value as the bytes it came as, neither built nor copied. The
request rules then run as they always do, on fewer objects (``prepare_messages``): a message the history rules
cannot change (no internal metadata, no ``provider_specific_fields``, and not an assistant turn with a
reasoning field) is not looked at again. When no message has internal metadata or ``provider_specific_fields``
(one set of every message's keys shows it) and the route's filter keeps every message (``Route.keeps_details``),
only spec 004's reasoning / reasoning_content table can change one, and it is read from the bytes of the two
plain fields (``history.apply_table``: ``null``, ``""`` or another string). Otherwise the messages that may
change get the values the rules read decoded (``role``, the plain reasoning text, and what the route's row of
spec 000's filter reads besides) and go through ``history.prepare_messages`` and ``history.normalize_messages``.

msgspec's encoder writes every ``Raw`` back as its original bytes: numbers (``1e5``, ``1.10``), string escapes,
spacing and duplicate keys inside a value no rule touched reach the upstream as the client wrote them.

The reasoning detail size limits (spec 004 "Reasoning detail") read a detail's fields only where its raw
bytes could be over a limit: a JSON string's UTF-8 size never exceeds its encoded length (``check_limits``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Union

import msgspec

from numi_mw.core.codec import is_utf8, utf8_stretches
from numi_mw.core.details import MAX_DATA_BYTES, MAX_SIGNATURE_BYTES, MAX_TEXT_BYTES, check_detail_limits
from numi_mw.core.fields import HELD_FIELD, HELD_REASONING_FIELDS, PLAIN_FIELDS, THINKING_BLOCKS
from numi_mw.core.history import ABSENT, EMPTY, TEXT, apply_table, normalize_messages
from numi_mw.core.history import prepare_messages as filter_messages
from numi_mw.core.providers import ReasoningField
from numi_mw.core.routing import Route

__all__ = ["decode", "decode_top", "encode", "prepare_messages"]

Raw = msgspec.Raw

_Item = Union[dict[str, Raw], str, int, float, bool, None, list[Any]]  # noqa: UP007 (msgspec reads the Union)
_Top = dict[str, Union[list[_Item], dict[str, Any], str, int, float, bool, None]]  # noqa: UP007
_decoder = msgspec.json.Decoder(_Top)
_top_decoder = msgspec.json.Decoder(
    dict[str, Union[list[Raw], dict[str, Any], str, int, float, bool, None]]  # noqa: UP007 (msgspec reads it)
)
_details = msgspec.json.Decoder(list[_Item])
_items = msgspec.json.Decoder(list[Raw])
_object = msgspec.json.Decoder(dict[str, Raw])


def _detail(item: Raw) -> dict[str, Raw] | None:
    """A detail's fields as ``Raw``, or ``None`` for an item that is not an object."""
    try:
        return _object.decode(item)
    except msgspec.ValidationError:
        return None


_value = msgspec.json.Decoder()
encode = msgspec.json.Encoder().encode
"""Encode a body from ``decode`` (``Raw`` values as their bytes) to compact JSON bytes."""

_LIMITS = (
    ("text", MAX_TEXT_BYTES),
    ("summary", MAX_TEXT_BYTES),
    ("signature", MAX_SIGNATURE_BYTES),
    ("data", MAX_DATA_BYTES),
)
_ASSISTANT = Raw(b'"assistant"')
_NULL = Raw(b"null")
_QUOTE = ord('"')
_N = ord("n")
_EMPTY_BYTES = len(b'""')
"""The length of the one way to write the empty string."""
_ROLE_BYTES = len(_ASSISTANT)
_REASONING_KEYS = frozenset((*HELD_REASONING_FIELDS, HELD_FIELD))
"""Keys that make an assistant message one the history rules may change (a ``provider_specific_fields`` makes
any message one)."""


def decode(body: bytes, *, walk: bool = True) -> tuple[dict[str, Any], bool | None] | None:
    """The top level of a request ``body`` as builtins, with every object of a top-level array a
    ``dict[str, msgspec.Raw]``; ``None`` when the body is not that (not JSON, not UTF-8, not an object, a
    ``messages`` that is not an array of objects, a number no float holds at the top level): the full decode
    then decides, and refuses it with the error it always gave (``codec.decode_object``,
    ``history.prepare_messages``).

    Args:
        body: the request body.
        walk: whether the detail size limits will read the body's detail lists as they came, so that the walk
            below pays off: on a route whose filter keeps every detail (``Route.keeps_details``). Where the
            filter drops them, ``check_limits`` rarely has a list left to ask about, and asks itself if it has.

    Returns:
        The top level, and whether the body's quotes show every reasoning detail field within its size limit
        (``not may_exceed`` of the whole body, ``check_limits``'s ``body_shows``) when ``walk`` and a message
        holds a detail list over the smallest limit, else ``None``. That walk is taken in the stretches the UTF-8
        check has just read (``QuoteWalk``), so a large body is read from memory once for both.
    """
    try:
        data = _decoder.decode(body)
    except (msgspec.DecodeError, RecursionError):
        return None
    messages = data.get("messages", [])
    if type(messages) is not list:
        return None
    big = walk and len(body) > MAX_SIGNATURE_BYTES  # no detail can be over a limit in a smaller body
    walker = None
    for message in messages:
        if type(message) is not dict:
            return None
        if big and walker is None and _large_list(message.get("reasoning_details")):
            walker = QuoteWalk(body, **_BODY_WALK)
    # msgspec does not check the strings it keeps as Raw
    if not (is_utf8(body) if walker is None else utf8_stretches(body, walker.take)):
        return None
    return data, None if walker is None else not walker.may_exceed(_FIELD_LIMITS)


def decode_top(body: bytes) -> dict[str, Any] | None:
    """The top level of a request ``body`` as builtins, with every top-level array a ``list[msgspec.Raw]``: each
    item (a message of ``messages``, a tool of ``tools``) is the bytes it came as, neither built nor copied.
    ``None`` when msgspec refuses it (not a JSON object, a top-level number no float holds): the full decode then
    decides and gives its error.

    For a body whose messages no rule changes (``request.Probe.CONTROLS``): the controls rules read and write
    only top-level values, and ``encode`` writes each item back as its original bytes. msgspec does not check
    the strings it keeps as ``Raw``; the caller has checked the body is UTF-8 (``codec.check_utf8``).
    """
    try:
        return _top_decoder.decode(body)
    except (msgspec.DecodeError, RecursionError):
        return None


def _is_assistant(role: Raw | None) -> bool:
    """Whether a message's ``role`` (as ``Raw``) is the string ``assistant``: its bytes, or a longer string (written
    with escapes) decoded. A role that is no string is not decoded (a number no float holds would not be)."""
    if role is None:
        return False
    if role == _ASSISTANT:
        return True
    return len(role) > _ROLE_BYTES and memoryview(role)[0] == _QUOTE and _value.decode(role) == "assistant"


def _has_metadata(keys: Collection[str]) -> bool:
    """Whether ``keys`` (a message, or a set of keys) hold one of internal metadata (one starting with ``_``)."""
    return min(keys, default="`") < "`" and any(key[:1] == "_" for key in keys)  # "_" sorts below "`"


def _read_keys(route: Route) -> tuple[str, ...]:
    """The message keys whose values the filter and the table read on ``route`` (``history``)."""
    keys = ["role", *PLAIN_FIELDS]
    if route.replay == "details" and not route.preserve:
        keys.append("tool_calls")  # the row keeps details on tool-call turns only
    if route.reasoning and (route.replay == "text" or (route.replay == "preserved-text" and route.preserve)):
        keys += ("reasoning_details", THINKING_BLOCKS)  # dropped, their text may become the reasoning text
    return tuple(keys)


def prepare_messages(messages: list[dict[str, Any]], route: Route, body: bytes, body_shows: bool | None = None) -> bool:
    """Spec 000's message preparation filter and spec 004's reasoning / reasoning_content table on the messages
    of a body from ``decode``, in place, then the detail size limits on what goes upstream; the history rules
    themselves are ``history.prepare_messages`` and ``history.normalize_messages``.

    Args:
        messages: ``decode``'s messages (each a ``dict[str, msgspec.Raw]``); the ones that change are replaced
            by dicts that mix decoded values (those the rules wrote) with ``Raw`` ones (the rest).
        route: the request's route.
        body: the request body ``messages`` came from (no detail can be over its limit in a body of at most
            1 MiB; a larger one is where ``check_limits`` looks first).
        body_shows: ``decode``'s answer for the body's detail fields, when it has one (``check_limits``).

    Returns:
        Whether any message changed.

    Raises:
        ApiError: 400 ``invalid_request`` for a reasoning detail over its size limit (``details``).
    """
    keys = set().union(*messages)  # every key of every message, in one pass
    metadata = HELD_FIELD in keys or _has_metadata(keys)
    if not metadata and route.keeps_details:  # the filter keeps every message: only the table can change one
        changed = not keys.isdisjoint(PLAIN_FIELDS) and _apply_table(messages, route.rules.reasoning_field, keys)
        check_limits(messages, body, body_shows)
        return changed
    if metadata:
        pending = _pending(messages)
    else:  # only an assistant turn with reasoning can change
        pending = [
            (i, None)
            for i, message in enumerate(messages)
            if not message.keys().isdisjoint(_REASONING_KEYS) and _is_assistant(message.get("role"))
        ]
    if not pending:
        check_limits(messages, body, body_shows)
        return False
    read: tuple[str, ...] = ()
    found: list[int] = []
    views: list[dict[str, Any]] = []
    decoded: list[dict[int, tuple[Any, Raw]]] = []
    for i, wanted in pending:
        message = messages[i]
        view = dict(message)
        back: dict[int, tuple[Any, Raw]] = {}
        for key in read or (read := _read_keys(route)) if wanted is None else wanted:
            raw = message.get(key)
            if raw is not None:
                value = view[key] = _value.decode(raw)
                back[id(value)] = (value, raw)  # the value held, so that its id stays its own
        found.append(i)
        views.append(view)
        decoded.append(back)
    filtered = views
    if metadata or not route.keeps_details:  # else the filter keeps every message as it is
        filtered = filter_messages(views, route.replay, reasoning=route.reasoning, preserve=route.preserve)
    changed = normalize_messages(filtered, route.rules.reasoning_field)
    for i, view, back, out in zip(found, views, decoded, filtered, strict=True):
        if out is not view or changed:
            messages[i] = _spliced(back, out)
    changed = changed or filtered is not views
    check_limits(messages, body, body_shows)
    return changed


def _pending(messages: list[dict[str, Raw]]) -> list[tuple[int, Collection[str] | None]]:
    """The messages either rule may change in a body with internal metadata or ``provider_specific_fields``, each
    as its index and the keys whose values the rules read (``None``: those of ``_read_keys``)."""
    pending: list[tuple[int, Collection[str] | None]] = []
    for i, message in enumerate(messages):
        if message.keys().isdisjoint(_REASONING_KEYS):
            if _has_metadata(message):
                pending.append((i, ()))
        elif HELD_FIELD in message:
            pending.append((i, message.keys()))  # ``unheld`` reads every reasoning field
        else:
            assistant = _is_assistant(message.get("role"))
            if assistant or _has_metadata(message):
                pending.append((i, None if assistant else ()))
    return pending


def _raw_kind(raw: Raw | None) -> int | None:
    """The table's kind of a plain reasoning field held as ``Raw`` (``history.ABSENT``, ``EMPTY``, ``TEXT``), or
    ``None`` when it is not a string, read from its first byte: a value the first pass took that starts with a
    quote is a string, ``""`` (two bytes) the only way to write the empty one, and ``null`` the one JSON value that
    starts with an n."""
    if raw is None:
        return ABSENT
    first = memoryview(raw)[0]
    if first == _QUOTE:
        return EMPTY if len(raw) == _EMPTY_BYTES else TEXT
    return ABSENT if first == _N else None


def _apply_table(messages: list[dict[str, Any]], field: ReasoningField, keys: Collection[str]) -> bool:
    """Spec 004's reasoning / reasoning_content table (``history.apply_table``) on the assistant messages of
    ``messages`` that have a plain reasoning field, read from their ``Raw`` values: a field that moves keeps its
    bytes. Two plain fields with the same bytes hold the same text; with other bytes, they are decoded and compared
    (escapes may write one text two ways). ``keys`` holds every key of every message: a plain field no message
    has is not looked up in each. Returns whether any message changed."""
    changed = False
    any_r, any_rc = "reasoning" in keys, "reasoning_content" in keys
    for message in messages:
        r: Raw | None = message.get("reasoning") if any_r else None
        rc: Raw | None = message.get("reasoning_content") if any_rc else None
        if (r is None and rc is None) or not _is_assistant(message.get("role")):
            continue
        r_kind, rc_kind = _raw_kind(r), _raw_kind(rc)
        if r_kind is None or rc_kind is None:
            continue
        same = r_kind == rc_kind == TEXT and (r == rc or _value.decode(r or _NULL) == _value.decode(rc or _NULL))
        if apply_table(message, field, r_kind, rc_kind, same):
            changed = True
    return changed


def _spliced(back: dict[int, tuple[Any, Raw]], out: dict[str, Any]) -> dict[str, Any]:
    """``out`` (a message the rules made from a view with some values decoded, ``back`` holding each of them by
    its id with its bytes), with each decoded value the rules kept back as the bytes it came as, under whatever
    key it now has (a renamed ``reasoning_content`` keeps its bytes). A value is recognised by identity; two
    keys whose values are one object (``None``, a cached small string) hold JSON-equal bytes."""
    spliced = {}
    for key, value in out.items():
        held = back.get(id(value))
        spliced[key] = value if held is None else held[1]
    return spliced


def check_limits(messages: list[dict[str, Any]], body: bytes, body_shows: bool | None = None) -> None:
    """``details.check_detail_limits`` on messages from ``prepare_messages``, decoding only the detail fields
    whose raw bytes are over their limit: a JSON string's UTF-8 size never exceeds its encoded length (an escape
    is at least as long as what it stands for), so a shorter one cannot be over it.

    Nothing is looked at in a body of at most 1 MiB (the smallest limit), nor in a detail list held as ``Raw`` of
    at most 1 MiB or that is no list. The whole ``body`` answers for every ``Raw`` list in it when its quotes show
    no limited field over its limit (``may_exceed``; it is ``bytes`` already, so nothing is copied): ``decode``
    has walked it on a route that keeps every detail (``body_shows``), else the first larger list asks here. When
    the body cannot show it, each large list is copied out and asked on its own.

    Args:
        messages: the messages, each a dict whose ``reasoning_details`` is a ``Raw``, a decoded list or absent.
        body: the request body the ``Raw`` values are slices of.
        body_shows: ``not may_exceed`` of the whole body when the caller has walked it already (``decode``
            does, while it checks the body's UTF-8); ``None``: asked here, at the first large list.

    Raises:
        ApiError: what ``check_detail_limits`` raises, for the same field.
    """
    if len(body) <= MAX_SIGNATURE_BYTES:
        return
    checked: list[Any] | None = None
    for i, message in enumerate(messages):
        details = message.get("reasoning_details")
        if type(details) is Raw:
            raw: Raw = details
            if not _large_list(raw):
                continue  # small, or no list (not this check's business, as in ``check_detail_limits``)
            if body_shows is None:  # whether ``body`` shows every ``Raw`` list within its limits (asked once)
                body_shows = not may_exceed(body, _FIELD_LIMITS, **_BODY_WALK)
            if body_shows or not may_exceed(bytes(memoryview(raw)), _FIELD_LIMITS):
                continue
            try:
                details = [_suspects(detail) for detail in _details.decode(raw)]
            except msgspec.DecodeError:  # an item that is not an object holds a number no float holds
                details = [_suspects(_detail(item)) for item in _items.decode(raw)]
        elif type(details) is not list:
            continue
        if checked is None:
            checked = [None] * len(messages)
        checked[i] = {"reasoning_details": details}
    if checked is not None:
        check_detail_limits(checked)


def may_exceed(data: bytes, limits: Mapping[bytes, int], *, max_quotes: int = 1024, bytes_per_quote: int = 0) -> bool:
    """Whether a field named in ``limits`` may hold a string over its limit in ``data`` (JSON bytes: a
    ``reasoning_details`` array, or a whole request body): ``False`` only when that is proven from the bytes.

    Only the quotes are visited, each found by ``bytes.find``: a large detail of encrypted data has a dozen of
    them, and the bytes between two quotes are not read again. A quote after an odd run of backslashes is
    escaped, inside a string; every other quote opens or closes one (in valid JSON a backslash appears only
    inside a string). So the quotes show every string, and its length between them is at least its UTF-8 size
    (an escape is at least as long as what it stands for). No string longer than its limit that is the value of
    a key named in ``limits``, at whatever depth, proves it: a detail's field is such a value, and a key or an
    array's item never is (``"data": "..."`` in a detail of 6 MB needs no decode). A long value of a limited
    key even deeper than a detail's own fields, a long value whose key is written with an escape
    (``"sig\\u006eature"``), or more quotes than the walk allows (escaped ones count) leaves the answer to the
    decode (``check_limits``).

    Args:
        data: JSON bytes the first pass took (valid JSON, valid UTF-8).
        limits: the limit in bytes of each field name, as bytes (``text``: ``MAX_TEXT_BYTES`` and so on).
        max_quotes: the most quotes walked, escaped ones too, before the answer is left to the decode.
        bytes_per_quote: when not 0, the walk also allows one more quote per this many bytes of ``data`` it has
            passed: a body of many short strings is left to the decode after its first few, where walking it
            would cost more than looking at its large detail lists alone.
    """
    walk = QuoteWalk(data, max_quotes=max_quotes, bytes_per_quote=bytes_per_quote)
    walk.take(0, len(data))
    return walk.may_exceed(limits)


class QuoteWalk:
    """``may_exceed``'s walk over the quotes of ``data``, taken a stretch at a time: ``take`` each stretch in order
    (together covering ``data``), then ask ``may_exceed``. Walked in one stretch it is ``may_exceed`` itself; in
    the stretches ``codec.utf8_stretches`` has just checked (its ``visit``), each stretch's quotes are found while its
    bytes are still in the CPU's cache, so that a large body is read from memory once for both (``decode``).

    Args:
        data: JSON bytes (valid JSON, valid UTF-8 once every stretch is taken).
        max_quotes: as for ``may_exceed``.
        bytes_per_quote: as for ``may_exceed``.
    """

    __slots__ = ("bytes_per_quote", "data", "max_quotes", "over", "quotes", "visited")

    def __init__(self, data: bytes, *, max_quotes: int = 1024, bytes_per_quote: int = 0) -> None:
        self.data = data
        self.max_quotes = max_quotes
        self.bytes_per_quote = bytes_per_quote
        self.quotes: list[int] = []  # the quotes that open or close a string
        self.visited = 0  # quotes found, escaped ones too: each costs the walk a step
        self.over = False  # the walk stopped: its answer is left to the decode

    def take(self, start: int, stop: int) -> None:
        """Walk the quotes of ``data[start:stop]``, the stretch after the last one taken."""
        if self.over:
            return
        data = self.data
        quotes = self.quotes
        visited = self.visited
        max_quotes = self.max_quotes
        per = self.bytes_per_quote
        at = data.find(b'"', start, stop)
        while at >= 0:
            if visited >= max_quotes + (at // per if per else 0):
                self.over = True  # many strings: the decode costs less than walking them
                break
            visited += 1
            if at and data[at - 1] == _BACKSLASH:
                escaped = _escaped(data, at)
                if escaped is None:
                    self.over = True  # a run of backslashes too long to read here
                    break
                if escaped:
                    at = data.find(b'"', at + 1, stop)
                    continue
            quotes.append(at)
            at = data.find(b'"', at + 1, stop)
        self.visited = visited

    def may_exceed(self, limits: Mapping[bytes, int]) -> bool:
        """``may_exceed`` of the stretches taken, all of ``data``."""
        if self.over:
            return True
        data = self.data
        quotes = self.quotes
        smallest = min(limits.values())
        for k in range(2, len(quotes), 2):
            size = quotes[k + 1] - quotes[k] - 1
            if size <= smallest or data[quotes[k - 1] + 1 : quotes[k]].strip() != b":":
                continue  # short, or not a value (a key, an array's item): no detail field
            key = data[quotes[k - 2] + 1 : quotes[k - 1]]  # the key before the colon
            limit = limits.get(key)
            if (limit is not None and size > limit) or (limit is None and _BACKSLASH in key):
                return True
        return False


def _large_list(details: Any) -> bool:
    """Whether a message's ``reasoning_details`` is a ``Raw`` list over the smallest detail limit, the only kind
    ``check_limits`` walks the body for."""
    return type(details) is Raw and len(details) > MAX_SIGNATURE_BYTES and memoryview(details)[0] == _BRACKET


def _escaped(data: bytes, at: int) -> bool | None:
    """Whether the quote at ``at`` in ``data`` follows an odd run of backslashes (``\\"``, not ``\\\\"``); ``None``
    when the run is ``_MAX_RUN`` bytes or longer, which is not read further."""
    window = data[max(0, at - _MAX_RUN) : at]
    run = len(window) - len(window.rstrip(b"\\"))
    if run >= _MAX_RUN:
        return None
    return run % 2 == 1


_BACKSLASH = ord("\\")
_BRACKET = ord("[")
_MAX_RUN = 64
"""The longest run of backslashes before a quote that ``may_exceed`` reads (its bytes at most)."""
_BODY_WALK = {"max_quotes": 64, "bytes_per_quote": 16 * 1024}
"""How far the walk over a whole body's quotes goes (``decode``'s, else ``check_limits``'s) before each large detail
list is looked at alone: 64, and one more per 16 KiB passed (a quote costs the walk about as much as copying 2 KiB;
the harness's 8 MB body has 178 quotes)."""
_FIELD_LIMITS = {field.encode(): limit for field, limit in _LIMITS}


def _suspects(detail: Any) -> Any:
    """The fields of a detail (a ``dict[str, Raw]``) whose raw bytes are over their limit, decoded."""
    if type(detail) is not dict:
        return None
    return {
        field: _value.decode(raw)
        for field, limit in _LIMITS
        if (raw := detail.get(field)) is not None and len(raw) > limit
    }
