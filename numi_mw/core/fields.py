"""The reasoning fields by name, and the in-place key edits every rule uses on a decoded JSON object.

Names (spec 004 "Request controls", "Other fields", "Response fields"):

- ``PLAIN_FIELDS``: the plain reasoning text of a message or delta, in either spelling (``reasoning``, as
  OpenRouter writes it, or ``reasoning_content``, as DeepSeek, Z.AI, vLLM and llama.cpp write it).
- ``REASONING_FIELDS``: those and ``reasoning_details``: everything a message or delta carries of reasoning.
- ``SHORTHANDS`` and ``CONTROL_FIELDS``: the request controls, the ``reasoning`` object and its shorthands.
- ``THINKING_BLOCKS``: Anthropic's thinking blocks as LiteLLM writes them on a message (``{"type": "thinking",
  "thinking", "signature"}``, ``{"type": "redacted_thinking", "data"}``): signed reasoning state, like details.
- ``HELD_FIELD`` and ``HELD_REASONING_FIELDS``: ``provider_specific_fields``, where LiteLLM keeps the message
  fields its ``Message`` does not declare (``litellm/types/utils.py``) and sends them back on the next turn, and
  the reasoning fields that may be in it.

A rewritten object keeps its key order, so that what numi_mw sends reads like what it received: ``splice``
puts new keys where the old ones stood.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any, Final

from numi_mw.core.details import visible_text

PLAIN_FIELDS: Final = ("reasoning", "reasoning_content")
REASONING_FIELDS: Final = (*PLAIN_FIELDS, "reasoning_details")
SHORTHANDS: Final = ("reasoning_effort", "include_reasoning")
THINKING_BLOCKS: Final = "thinking_blocks"
HELD_FIELD: Final = "provider_specific_fields"
HELD_REASONING_FIELDS: Final = (*REASONING_FIELDS, THINKING_BLOCKS)
CONTROL_FIELDS: Final = ("reasoning", *SHORTHANDS)


def plain_reasoning(obj: Mapping[str, Any]) -> str | None:
    """The plain reasoning text of a message or delta: its first nonempty string of ``reasoning`` and
    ``reasoning_content``, in that order, or ``None``."""
    for key in PLAIN_FIELDS:
        value = obj.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def shown_reasoning(obj: Mapping[str, Any]) -> str:
    """The reasoning text a message or delta holds as a client reads it: its plain reasoning (``plain_reasoning``),
    else the visible text of its ``reasoning_details`` list (``details.visible_text``: Anthropic-style details
    alone), else ``""``: the reasoning ``Accumulator`` shows for a buffered answer (spec 004 "Streaming": "For
    display, concatenate delta.reasoning"), and the text a think splitter tells an echo of in the content from new
    text."""
    text = plain_reasoning(obj)
    if text is not None:
        return text
    details = obj.get("reasoning_details")
    return visible_text(details) if isinstance(details, list) else ""


def unread_fields(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The reasoning fields of ``obj`` that hold a value numi_mw does not read, which stay as they came: a
    ``reasoning`` or ``reasoning_content`` that is neither a string nor null (a number, an object, a list), a
    ``reasoning_details`` that is neither a list nor null. Beside a ``reasoning`` kept so, a ``reasoning_content``
    text stays too, since ``reasoning`` cannot take it. The text of the others goes into ``reasoning`` and
    details as usual; nothing is added under a field kept (``docs/streaming.md``, "Values numi_mw does not
    read")."""
    kept: dict[str, Any] = {}
    reasoning = obj.get("reasoning")
    if reasoning is not None and type(reasoning) is not str:
        kept["reasoning"] = reasoning
        if "reasoning_content" in obj:
            kept["reasoning_content"] = obj["reasoning_content"]
    content = obj.get("reasoning_content")
    if content is not None and type(content) is not str:
        kept["reasoning_content"] = content
    details = obj.get("reasoning_details")
    if details is not None and type(details) is not list:
        kept["reasoning_details"] = details
    return kept


def splice(obj: dict[str, Any], old: Collection[str], new: Mapping[str, Any]) -> None:
    """Replace the keys ``old`` of ``obj`` by the items of ``new``, in place, keeping the order of the others.

    The items of ``new`` stand where the first key of ``old`` that ``obj`` has stood, or at the end when it has
    none; a key of ``new`` found elsewhere in ``obj`` moves there. ``new`` may be empty (the keys just go).
    """
    items: list[tuple[str, Any]] = []
    placed = False
    for k, v in obj.items():
        if k in old:
            if not placed:
                items.extend(new.items())
                placed = True
        elif k not in new:
            items.append((k, v))
    if not placed:
        items.extend(new.items())
    obj.clear()
    obj.update(items)


def rename(obj: dict[str, Any], old: str, new: str, value: Any) -> None:
    """``splice(obj, (old,), {new: value})`` for a key ``obj`` has. It runs once per assistant message of a
    history, so only the keys after ``old`` move (each taken out and put back at the end, in order); the object is
    not rebuilt (measured: 0.50 µs against 0.85 µs for a rebuild, on an assistant message of five keys)."""
    keys = list(obj)
    after = keys[keys.index(old) + 1 :]
    del obj[old]
    obj.pop(new, None)  # where it stood before, if anywhere
    obj[new] = value
    for key in after:
        if key != new:
            obj[key] = obj.pop(key)


def drop(obj: dict[str, Any], keys: Iterable[str]) -> bool:
    """Delete ``keys`` from ``obj`` where present, in place; returns whether any was."""
    changed = False
    for key in keys:
        if key in obj:
            del obj[key]
            changed = True
    return changed
