"""Reasoning details: size limits and the rebuild of streamed fragments (spec 004 "Reasoning detail",
"From a stream").

A reasoning detail is a dict such as ``{"type": "reasoning.text", "text": "...", "signature": "...",
"format": "anthropic-claude-v1", "index": 0}``; types are ``reasoning.text``, ``reasoning.summary`` and
``reasoning.encrypted``, and unknown types and fields travel unchanged (DESIGN.md "Decisions" 4). Details are
plain dicts here, never Structs, so nothing the spec does not name is lost.
"""

from __future__ import annotations

from typing import Any

from numi_mw.core.errors import ApiError

__all__ = [
    "MAX_DATA_BYTES",
    "MAX_SIGNATURE_BYTES",
    "MAX_TEXT_BYTES",
    "check_detail_limits",
    "rebuild_reasoning_details",
    "utf8_size_exceeds",
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
            ``messages[3].reasoning_details[0].text`` (DESIGN.md "Errors, one table").
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
                    raise ApiError(
                        400,
                        "invalid_request",
                        f"{path} is larger than {limit_name} ({limit} bytes of UTF-8); send reasoning details "
                        "back as the provider returned them, or leave this one out.",
                        path,
                    )


def _latest_text(merged: list[Any], *, unsigned_only: bool) -> dict[str, Any] | None:
    """The most recent ``reasoning.text`` detail of ``merged`` (without a signature if ``unsigned_only``)."""
    for detail in reversed(merged):
        if (
            isinstance(detail, dict)
            and detail.get("type") == "reasoning.text"
            and not (unsigned_only and "signature" in detail)
        ):
            return detail
    return None


def rebuild_reasoning_details(fragments: list[dict[str, Any]]) -> list[dict[str, Any]]:
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
        fragments: the ``delta.reasoning_details`` entries of a stream, in order (dicts as decoded from JSON).

    Returns:
        A new list of new dicts (shallow copies); the fragments are not modified.
    """
    merged: list[Any] = []
    for fragment in fragments:
        if not isinstance(fragment, dict):
            merged.append(fragment)
            continue
        has_text = bool(fragment.get("text"))
        signed = "signature" in fragment
        if fragment.get("type") != "reasoning.text" or (has_text and signed):
            merged.append(dict(fragment))  # rule 4
        elif has_text:  # rule 1
            last = merged[-1] if merged else None
            if isinstance(last, dict) and last.get("type") == "reasoning.text" and "signature" not in last:
                last["text"] = last.get("text", "") + fragment["text"]
            else:
                merged.append(dict(fragment))
        else:  # rule 2 (signed) or rule 3 (neither text nor signature)
            target = _latest_text(merged, unsigned_only=signed)
            if target is None:
                if signed:
                    merged.append(dict(fragment))
                continue
            for key in ("signature", "id", "format", "index"):
                if key in fragment and key not in target:
                    target[key] = fragment[key]
    return merged
