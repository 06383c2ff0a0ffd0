"""Assistant history on its way upstream (spec 004 "Preserve reasoning across turns").

The reasoning / reasoning_content table for sources using the OpenAI-compatible chat format, applied to every
assistant message for the target provider's ``reasoning_field``:

=============================================================  ================================================
You send                                                       Upstream receives
=============================================================  ================================================
nonempty ``reasoning_content``, ``reasoning`` absent or empty  ``reasoning`` on OpenRouter and PPQ, else
                                                               ``reasoning_content`` (the empty ``reasoning``
                                                               dropped)
both fields hold the same string                               one field: the provider's ``reasoning_field``
``reasoning_content: ""``                                      kept as the explicit empty string
``reasoning: ""`` and no ``reasoning_content``                 the empty field omitted
other distinct string values                                   both, unchanged
=============================================================  ================================================

One row the spec's table leaves open, chosen here so that a reply read from numi_mw (which answers with
``reasoning``) replays correctly: nonempty ``reasoning`` with no ``reasoning_content`` is sent as
``reasoning_content`` to providers whose ``reasoning_field`` is ``reasoning_content`` (DeepSeek, Z.AI, Moonshot,
vLLM and llama.cpp require it on tool-call turns).

``reasoning_details`` are never touched: unknown types, unknown fields, empty fragments and order travel as
sent. Values that are not strings (``null``, objects) are left as they are.
"""

from __future__ import annotations

from typing import Any

from numi_mw.core.errors import invalid_request
from numi_mw.core.providers import ReasoningField


def _rename(message: dict[str, Any], old: str, new: str, value: str) -> None:
    """Replace key ``old`` by ``new`` with ``value`` at the same position."""
    items = [(new, value) if k == old else (k, v) for k, v in message.items() if k != new]
    message.clear()
    message.update(items)


def normalize_message(message: dict[str, Any], field: ReasoningField) -> bool:
    """Apply the reasoning / reasoning_content table to one assistant message, in place.

    Args:
        message: an assistant message (decoded JSON object) numi_mw owns.
        field: the target provider's reasoning field.

    Returns:
        Whether ``message`` changed.
    """
    has_r = "reasoning" in message
    has_rc = "reasoning_content" in message
    if not (has_r or has_rc):
        return False
    r = message.get("reasoning")
    rc = message.get("reasoning_content")
    if (has_r and not isinstance(r, str)) or (has_rc and not isinstance(rc, str)):
        return False
    if not has_rc:
        assert isinstance(r, str)
        if r == "":
            del message["reasoning"]
            return True
        if field == "reasoning_content":
            _rename(message, "reasoning", "reasoning_content", r)
            return True
        return False
    assert isinstance(rc, str)
    if rc == "":
        return False
    if not has_r or r == "" or r == rc:
        if field == "reasoning":
            _rename(message, "reasoning_content", "reasoning", rc)
            return True
        if has_r:
            del message["reasoning"]
            return True
        return False
    return False


def normalize_messages(messages: object, field: ReasoningField) -> bool:
    """Apply ``normalize_message`` to every assistant message of ``messages``, in place.

    Returns:
        Whether any message changed.

    Raises:
        ApiError: 400 ``invalid_request`` on ``messages`` when it is not an array, on ``messages[i]`` when an
            item is not an object.
    """
    if not isinstance(messages, list):
        raise invalid_request("messages must be an array of message objects.", "messages")
    changed = False
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise invalid_request(f"messages[{i}] must be a message object.", f"messages[{i}]")
        if message.get("role") == "assistant" and normalize_message(message, field):
            changed = True
    return changed
