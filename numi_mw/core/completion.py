"""Buffered chat completions in one reasoning shape (spec 004 "Response fields").

On each choice's ``message``:

- ``reasoning`` (the plain visible text) and ``reasoning_details`` as the provider returned them. When the
  provider returned details but no ``reasoning`` string, ``reasoning`` is their visible text.
- Plain reasoning with no details (``reasoning_content``, ``reasoning`` alone, or reasoning tags inside
  ``content``) becomes ``reasoning`` plus one ``reasoning.text`` detail with format ``unknown``.
- ``reasoning_content`` is removed: its text is in ``reasoning``.
- With ``exclude``, ``reasoning``, ``reasoning_details`` and ``reasoning_content`` are all omitted, and
  reasoning tags with their text are cut from ``content``. Usage passes through unchanged.
"""

from __future__ import annotations

from typing import Any

from numi_mw.core.details import visible_text
from numi_mw.core.fields import REASONING_FIELDS, drop, plain_reasoning, splice
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
            changed = _normalize_message(choice["message"], exclude, think) or changed
    return changed


def _normalize_message(message: dict[str, Any], exclude: bool, think: ThinkTags | None) -> bool:
    content = message.get("content")
    tagged = ""
    changed = False
    if think is not None and isinstance(content, str) and content:
        tagged, rest = think.split_all(content)
        if rest != content:
            message["content"] = rest
            changed = True
    if exclude:
        return drop(message, REASONING_FIELDS) or changed
    reasoning = message.get("reasoning")
    details = message.get("reasoning_details")
    plain = plain_reasoning(message)
    if tagged:
        own = plain or (visible_text(details) if isinstance(details, list) else "")
        if own and own.strip() == tagged.strip():  # the tags repeat the message's own reasoning (llama.cpp's
            tagged = ""  # deepseek-legacy format): one copy (spec 004: read one of the two, never both)
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
        if "reasoning_content" in message:
            del message["reasoning_content"]
            return True
        return changed
    if fields["reasoning"] is None:
        del fields["reasoning"]
    before = {k: message.get(k) for k in REASONING_FIELDS if k in message}
    if before == fields:
        return changed
    splice(message, REASONING_FIELDS, fields)
    return True
