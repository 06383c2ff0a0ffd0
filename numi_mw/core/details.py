"""Reasoning details: size limits and the rebuild of streamed fragments (spec 004 "Reasoning detail",
"From a stream").

A reasoning detail is a dict such as ``{"type": "reasoning.text", "text": "...", "signature": "...",
"format": "anthropic-claude-v1", "index": 0}``; types are ``reasoning.text``, ``reasoning.summary`` and
``reasoning.encrypted``, and unknown types and fields travel unchanged (spec 004 "Preserve reasoning across
turns": "Return all reasoning details unchanged"). Details are
plain dicts here, never Structs, so nothing the spec does not name is lost.
"""

from __future__ import annotations

from typing import Any

from numi_mw.core.errors import invalid_request

__all__ = [
    "MAX_DATA_BYTES",
    "MAX_SIGNATURE_BYTES",
    "MAX_TEXT_BYTES",
    "DetailsRebuilder",
    "check_detail_limits",
    "rebuild_reasoning_details",
    "thinking_text",
    "utf8_size_exceeds",
    "visible_text",
]

MAX_TEXT_BYTES = 4 * 1024 * 1024
"""Spec 004 "Reasoning detail": ``text`` is up to 4 MiB (UTF-8 bytes); also applied to ``summary``."""
MAX_SIGNATURE_BYTES = 1024 * 1024
"""Spec 004 "Reasoning detail": ``signature`` is up to 1 MiB (UTF-8 bytes)."""
MAX_DATA_BYTES = 8 * 1024 * 1024
"""Spec 004 "Reasoning detail": ``data`` (encrypted state) is up to 8 MiB (UTF-8 bytes)."""

# Checked fields, in this order, with their limit in bytes and its name for messages.
_LIMITS: tuple[tuple[str, int, str], ...] = (
    ("text", MAX_TEXT_BYTES, "4 MiB"),
    ("summary", MAX_TEXT_BYTES, "4 MiB"),
    ("signature", MAX_SIGNATURE_BYTES, "1 MiB"),
    ("data", MAX_DATA_BYTES, "8 MiB"),
)


def utf8_size_exceeds(s: str, limit: int) -> bool:
    """Whether the UTF-8 encoding of ``s`` is longer than ``limit`` bytes.

    Encodes only when the answer is not clear from ``len(s)``: a code point takes 1 to 4 bytes, so
    ``len(s) <= limit // 4`` is surely within and ``len(s) > limit`` surely over. Lone surrogates (which JSON
    ``\\ud800`` escapes can produce) count 3 bytes each, as in their WTF-8 form.
    """
    n = len(s)
    if n <= limit // 4:
        return False
    if n > limit:
        return True
    return len(s.encode("utf-8", "surrogatepass")) > limit


def check_detail_limits(messages: list[Any]) -> None:
    """Enforce the per-field size limits of spec 004 "Reasoning detail" on request messages.

    Walks ``messages[i]["reasoning_details"][j]`` and checks the UTF-8 size in bytes of the string fields
    ``text`` and ``summary`` (``MAX_TEXT_BYTES``, 4 MiB), ``signature`` (``MAX_SIGNATURE_BYTES``, 1 MiB) and
    ``data`` (``MAX_DATA_BYTES``, 8 MiB). A value of exactly the limit passes. Messages that are not dicts,
    ``reasoning_details`` that are not lists, details that are not dicts and values that are not strings are
    not this check's business and are ignored (they are forwarded unchanged).

    Args:
        messages: the request's ``messages`` list, decoded JSON (not modified).

    Raises:
        ApiError: 400 ``invalid_request`` for the first field over its limit, in message, detail and field
            order (``text``, ``summary``, ``signature``, ``data``), with ``param`` naming its path, e.g.
            ``messages[3].reasoning_details[0].text`` (``docs/errors.md``).
    """
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        details = message.get("reasoning_details")
        if not isinstance(details, list):
            continue
        for j, detail in enumerate(details):
            if not isinstance(detail, dict):
                continue
            for field, limit, limit_name in _LIMITS:
                value = detail.get(field)
                if isinstance(value, str) and utf8_size_exceeds(value, limit):
                    path = f"messages[{i}].reasoning_details[{j}].{field}"
                    raise invalid_request(
                        f"{path} is larger than {limit_name} ({limit} bytes of UTF-8); send reasoning details "
                        "back as the provider returned them, or leave this one out.",
                        path,
                    )


MAX_RECENT_TEXT_DETAILS = 16
"""How many of a stream's most recent ``reasoning.text`` details its rebuilder keeps (``RecentDetails``)."""


class RecentDetails:
    """The details of a stream's rebuild as far as the rules still read them, in constant memory: how many there
    are, and the last ``MAX_RECENT_TEXT_DETAILS`` ``reasoning.text`` details as the names of their fields (values
    ``None``). Rules 2 and 3 of spec 004 "From a stream" fill only the most recent (unsigned) ``reasoning.text``
    detail, and no other detail is ever read again. A signature-only fragment that would complete an unsigned text
    detail older than that window (more than 16 text details back, every later one signed) finds none and is kept
    as a detail of its own, signature and all: it is never lost (``docs/streaming.md``, "Memory").

    A list to ``DetailsRebuilder``: ``len``, ``append``, and ``[pos]``, which is ``None`` for a detail not kept.
    """

    __slots__ = ("_count", "_kept")

    def __init__(self) -> None:
        self._count = 0
        self._kept: dict[int, dict[str, Any]] = {}

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, pos: int) -> Any:
        return self._kept.get(pos + self._count if pos < 0 else pos)

    def append(self, detail: Any) -> None:
        if isinstance(detail, dict) and detail.get("type") == "reasoning.text":
            self._kept[self._count] = dict.fromkeys(detail) | {"type": "reasoning.text"}
            if len(self._kept) > MAX_RECENT_TEXT_DETAILS:
                del self._kept[next(iter(self._kept))]
        self._count += 1

    def latest_first(self) -> list[int]:
        """The positions of the kept details, the most recent first."""
        return list(reversed(self._kept))


class DetailsRebuilder:
    """The rebuild of spec 004 "From a stream", one fragment at a time (``rebuild_reasoning_details`` runs it).

    ``add`` merges one fragment by the spec's four rules and says where it went, so a stream normalizer can give
    each streamed fragment the ``index`` of the detail it lands in (``docs/streaming.md``).

    Args:
        track_text: keep the details and the text rule 1 appends. A stream normalizer that only needs to know
            where fragments go passes ``False``: ``details`` is then a ``RecentDetails``, which keeps no text,
            signature or encrypted data and at most ``MAX_RECENT_TEXT_DETAILS`` details, so memory stays constant
            in the stream's length and in its number of details.

    Attributes:
        details: the details so far (new dicts; the fragments are not modified). Appended text is kept aside
            (joined once, so a long stream costs linear time) until ``result()``.
        open_text: the position of the last detail when it is an unsigned ``reasoning.text`` (the one rule 1
            extends), else ``-1``. Kept up to date by ``add``, so the common case costs no search.
    """

    __slots__ = ("_parts", "details", "open_text", "track_text")

    def __init__(self, *, track_text: bool = True) -> None:
        self.details: list[Any] | RecentDetails = [] if track_text else RecentDetails()
        self.track_text = track_text
        self.open_text = -1
        self._parts: dict[int, list[str]] = {}

    def _latest_text(self, *, unsigned_only: bool) -> int | None:
        """Position of the most recent ``reasoning.text`` detail (without a signature if ``unsigned_only``)."""
        details = self.details
        positions = details.latest_first() if isinstance(details, RecentDetails) else range(len(details) - 1, -1, -1)
        for pos in positions:
            detail = details[pos]
            if (
                isinstance(detail, dict)
                and detail.get("type") == "reasoning.text"
                and not (unsigned_only and "signature" in detail)
            ):
                return pos
        return None

    def target(self, fragment: Any) -> tuple[str, int] | None:
        """Where ``fragment`` would go, without adding it.

        Returns:
            ``("new", pos)`` when it starts detail ``pos`` (rules 1, 2 and 4), ``("extend", pos)`` when its text is
            appended to detail ``pos`` (rule 1), ``("fill", pos)`` when it fills missing fields of detail ``pos``
            (rules 2 and 3), or ``None`` when it is dropped (rule 3 with no ``reasoning.text`` detail yet).
        """
        if not isinstance(fragment, dict):
            return ("new", len(self.details))
        has_text = bool(fragment.get("text"))
        signed = "signature" in fragment
        if fragment.get("type") != "reasoning.text" or (has_text and signed):
            return ("new", len(self.details))  # rule 4
        if has_text:  # rule 1
            if self.open_text >= 0:
                return ("extend", self.open_text)
            return ("new", len(self.details))
        pos = self._latest_text(unsigned_only=signed)  # rule 2 (signed) or rule 3
        if pos is None:
            return ("new", len(self.details)) if signed else None
        return ("fill", pos)

    def result(self) -> list[Any]:
        """The rebuilt details, with the appended text joined in (``track_text`` only)."""
        assert isinstance(self.details, list)
        for pos, parts in self._parts.items():
            self.details[pos]["text"] = "".join(parts)
        self._parts.clear()
        return self.details

    def add(self, fragment: Any, where: tuple[str, int] | None = None) -> tuple[str, int] | None:
        """Merge ``fragment``; returns what ``target`` returns for it (pass ``where`` when already known)."""
        if where is None:
            where = self.target(fragment)
        if where is None:
            return None
        action, pos = where
        if action == "extend":
            self.extend(pos, fragment["text"])
            return where
        if action == "new":
            self.details.append(dict(fragment) if self.track_text and isinstance(fragment, dict) else fragment)
        else:
            detail = self.details[pos]
            for key in FILLED_KEYS:
                if key in fragment and key not in detail:
                    detail[key] = fragment[key] if self.track_text else None
        last = self.details[-1]
        is_open = isinstance(last, dict) and last.get("type") == "reasoning.text" and "signature" not in last
        self.open_text = len(self.details) - 1 if is_open else -1
        return where

    def extend(self, pos: int, text: Any) -> None:
        """Rule 1's append of ``text`` to detail ``pos`` (``add`` of an ``("extend", pos)`` fragment). ``text`` is
        the fragment's ``text`` as it came: any truthy JSON value takes rule 1, a string or not (a caller that
        needs strings, as ``Accumulator``, checks them)."""
        if self.track_text:
            parts = self._parts.get(pos)
            if parts is None:
                parts = self._parts[pos] = [self.details[pos].get("text", "")]
            parts.append(text)


def visible_text(details: list[Any]) -> str:
    """The displayable text of reasoning details (spec 004 "Response fields", the detail types): ``text`` of
    ``reasoning.text`` and ``summary`` (or ``text``) of ``reasoning.summary`` entries, concatenated in order.
    Encrypted and unknown entries show nothing."""
    parts: list[str] = []
    for detail in details:
        if not isinstance(detail, dict):
            continue
        kind = detail.get("type")
        if kind == "reasoning.text":
            value = detail.get("text")
        elif kind == "reasoning.summary":
            value = detail.get("summary", detail.get("text"))
        else:
            continue
        if isinstance(value, str):
            parts.append(value)
    return "".join(parts)


def thinking_text(blocks: list[Any]) -> str:
    """The displayable text of thinking blocks (``fields.THINKING_BLOCKS``): ``thinking`` of the ``thinking``
    blocks, concatenated in order (Anthropic Messages API reference, "Extended thinking"). Redacted blocks show
    nothing."""
    return "".join(
        block["thinking"]
        for block in blocks
        if isinstance(block, dict) and block.get("type") == "thinking" and isinstance(block.get("thinking"), str)
    )


FILLED_KEYS = ("signature", "id", "format", "index")
"""The fields rules 2 and 3 of spec 004 "From a stream" fill in, where the target detail lacks them."""


def rebuild_reasoning_details(fragments: object) -> list[dict[str, Any]]:
    """Merge streamed ``delta.reasoning_details`` fragments into complete details (spec 004 "From a stream").

    The spec's algorithm, rule for rule, over the fragments in arrival order:

    1. A ``reasoning.text`` fragment with text and no signature extends the previous detail if that is an
       unsigned ``reasoning.text`` (its ``text`` is appended); otherwise it starts a new one.
    2. A ``reasoning.text`` fragment with a signature but no text completes the most recent unsigned
       ``reasoning.text`` detail. If there is none, it is kept as its own detail.
    3. A fragment with neither text nor signature only fills in missing fields on the most recent
       ``reasoning.text`` detail; with no such detail it is dropped.
    4. Every other fragment (another type, or text and signature together) is its own detail.

    As in the spec, "has text" means a truthy ``text`` (``""`` counts as no text), "has a signature" means a
    ``signature`` key (even ``""``), and rules 2 and 3 fill in only ``signature``, ``id``, ``format`` and
    ``index``, and only where the target lacks the key. Two choices where the spec's code would raise: a
    fragment without ``type`` counts as another type (rule 4), and an entry that is not a dict is kept as its
    own detail, unchanged.

    Args:
        fragments: the ``delta.reasoning_details`` entries of a stream, in order (a list of dicts as decoded from
            JSON; anything else is refused, below).

    Returns:
        A new list of new dicts (shallow copies); the fragments are not modified.

    Raises:
        ApiError: 400 ``invalid_request`` when ``fragments`` is not a list, or a fragment's ``text`` is neither
            a string nor ``null`` (rule 1 appends it to a string; spec 004 "Reasoning detail" makes it text), with
            ``param`` naming it by its position, ``reasoning_details[1].text``. Nothing is rebuilt then.
    """
    if not isinstance(fragments, list):
        raise invalid_request(
            f"reasoning_details must be an array of fragments, not {type(fragments).__name__}.", "reasoning_details"
        )
    for j, fragment in enumerate(fragments):
        text = fragment.get("text") if isinstance(fragment, dict) else None
        if text is not None and not isinstance(text, str):
            path = f"reasoning_details[{j}].text"
            raise invalid_request(f"{path} must be a string or null, not {type(text).__name__}.", path)
    rebuilder = DetailsRebuilder()
    for fragment in fragments:
        rebuilder.add(fragment)
    return rebuilder.result()


def fragments_from_body(body: bytes) -> list[Any] | None:
    """The reasoning detail fragments of a JSON list ``body`` (``numi-mw rebuild``'s input), or ``None`` when
    ``body`` does not open like a list (an SSE stream, which ``accumulate.rebuild_from_body`` reads).

    Raises:
        ApiError: 400 ``invalid_json`` when ``body`` is empty, or opens like a list that is not JSON; 400
            ``invalid_request`` for a list entry that is not a fragment object (``param`` ``reasoning_details[1]``)
            (``docs/cli.md``).
    """
    from numi_mw.core.codec import decode_lenient
    from numi_mw.core.errors import ApiError

    stripped = body.lstrip()
    if not stripped:
        raise ApiError(
            "invalid_json",
            "The input is empty; send a JSON array of reasoning_details fragments or an SSE stream of chat "
            "completion chunks.",
        )
    if not stripped.startswith(b"["):
        return None
    value = decode_lenient(body)
    if not isinstance(value, list):
        raise ApiError(
            "invalid_json",
            "The input opens like a JSON array but is not JSON; send an array of "
            "reasoning_details fragments or an SSE stream of chunks.",
        )
    for j, entry in enumerate(value):
        if not isinstance(entry, dict):
            path = f"reasoning_details[{j}]"
            raise invalid_request(
                f"{path} must be a reasoning detail fragment (an object), not {type(entry).__name__}.", path
            )
    return value
