"""Buffered chat completions in one reasoning shape (spec 004 "Response fields").

On each choice's ``message``:

- ``reasoning`` (the plain visible text) and ``reasoning_details`` as the provider returned them. When the
  provider returned details but no ``reasoning`` string, ``reasoning`` is their visible text.
- Plain reasoning with no details (``reasoning_content``, ``reasoning`` alone, or reasoning tags inside
  ``content``) becomes ``reasoning`` plus one ``reasoning.text`` detail with format ``unknown``.
- ``reasoning_content`` is removed: its text is in ``reasoning``. A reasoning field holding a value numi_mw does
  not read (not a string, a list of details or null) stays as it came, and nothing is added under it
  (``fields.unread_fields``).
- With ``exclude``, ``reasoning``, ``reasoning_details`` and ``reasoning_content`` are all omitted, and
  reasoning tags with their text are cut from ``content``. Usage passes through unchanged.
- Think splitting reads ``content`` as a stream's splitter would, with the message's own reasoning fields
  coming first (``ThinkTags.split_message(fields=...)``): tagged reasoning that repeats them is left out, by the
  rule streams follow (``think.ReasoningEcho``); harmony tool calls found in it are appended
  to ``message.tool_calls`` (ids as in a stream, ``chunks.tool_call_id``), ``content`` becomes ``null`` when
  nothing else is left of it, and ``finish_reason`` ``stop`` becomes ``tool_calls``.
"""

from __future__ import annotations

from typing import Any

from numi_mw.core.chunks import tool_call_id
from numi_mw.core.details import visible_text
from numi_mw.core.fields import REASONING_FIELDS, drop, plain_reasoning, shown_reasoning, splice, unread_fields
from numi_mw.core.think import ThinkTags


def normalize_completion(data: Any, *, exclude: bool = False, think: ThinkTags | None = None) -> bool:
    """Normalize a decoded chat completion in place.

    Args:
        data: the decoded response body (anything that is not a chat completion is left alone).
        exclude: reasoning is excluded from the response.
        think: split reasoning tags out of ``message.content`` with these settings (``auto`` start: a closing
            tag with no opening tag makes the text before it reasoning).

    Returns:
        Whether ``data`` changed.
    """
    if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
        return False
    changed = False
    for choice in data["choices"]:
        if isinstance(choice, dict) and isinstance(choice.get("message"), dict):
            calls = _normalize_message(choice["message"], exclude, think, data)
            if calls is not None:
                changed = True
                if calls and choice.get("finish_reason") == "stop":
                    choice["finish_reason"] = "tool_calls"
    return changed


def _normalize_message(
    message: dict[str, Any], exclude: bool, think: ThinkTags | None, completion: dict[str, Any]
) -> int | None:
    """Normalize one message in place; ``None`` when it did not change, else how many harmony tool calls were
    found in its content."""
    calls = _split_content(message, think, completion) if think is not None else None
    changed = _normalize_reasoning(message, exclude, calls)
    if calls is None:
        return 0 if changed else None
    return len(calls[1])


def _split_content(
    message: dict[str, Any], think: ThinkTags, completion: dict[str, Any]
) -> tuple[str, tuple[tuple[str, str], ...]] | None:
    """Split ``message.content`` in place: ``None`` when it was left as it was, else the tagged reasoning and
    the harmony tool calls (name, arguments) taken out of it."""
    content = message.get("content")
    if not isinstance(content, str) or not content:
        return None
    split = think.split_message(content, fields=shown_reasoning(message))
    if split.content == content and not split.reasoning and not split.tool_calls:
        return None
    message["content"] = split.content if split.content or not split.tool_calls else None
    if split.tool_calls:
        existing = message.get("tool_calls")
        calls = list(existing) if isinstance(existing, list) else []
        for index, (name, arguments) in enumerate(split.tool_calls):
            call = {"id": tool_call_id(completion, index), "type": "function"}
            calls.append({**call, "function": {"name": name, "arguments": arguments}})
        message["tool_calls"] = calls
    return split.reasoning, split.tool_calls


def _normalize_reasoning(
    message: dict[str, Any], exclude: bool, split: tuple[str, tuple[tuple[str, str], ...]] | None
) -> bool:
    """The reasoning fields of ``message``, with the tagged reasoning ``split`` took from its content (an echo of
    the message's own reasoning already left out) added after them; returns whether anything changed (the content
    split included)."""
    tagged = split[0] if split is not None else ""
    changed = split is not None
    if exclude:
        return drop(message, REASONING_FIELDS) or changed
    reasoning = message.get("reasoning")
    details = message.get("reasoning_details")
    plain = plain_reasoning(message)
    kept = unread_fields(message)  # values not read, which stay as they came
    fields: dict[str, Any] = {}
    if isinstance(details, list) and details:
        shown = reasoning if isinstance(reasoning, str) and reasoning else visible_text(details) or plain
        if tagged:
            # Reasoning tags in content come after the provider's own reasoning, as in a stream.
            shown = (shown or "") + tagged
            details = [*details, {"type": "reasoning.text", "text": tagged, "format": "unknown"}]
        fields["reasoning"] = shown
        fields["reasoning_details"] = details
    elif plain is not None or tagged:
        text = (plain or "") + tagged
        fields["reasoning"] = text
        fields["reasoning_details"] = [{"type": "reasoning.text", "text": text, "format": "unknown"}]
    else:
        if "reasoning_content" in message and "reasoning_content" not in kept:
            del message["reasoning_content"]
            return True
        return changed
    if fields["reasoning"] is None:
        del fields["reasoning"]
    fields.update(kept)
    before = {k: message.get(k) for k in REASONING_FIELDS if k in message}
    if before == fields:
        return changed
    splice(message, REASONING_FIELDS, fields)
    return True
