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
sent. A ``null`` field counts as absent: it goes when the other field is written in its place (or, as an empty
``reasoning`` does, beside a nonempty ``reasoning_content``). Both fields empty become the explicit empty
``reasoning_content``. Other values that are not strings (objects, numbers) leave the message as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
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
    r = message.get("reasoning")  # a null field counts as absent (and goes when the other one is written)
    rc = message.get("reasoning_content")
    if (r is not None and not isinstance(r, str)) or (rc is not None and not isinstance(rc, str)):
        return False
    if rc is None:
        if r is None:
            return False
        if r == "":
            del message["reasoning"]
            return True
        if field == "reasoning_content":
            _rename(message, "reasoning", "reasoning_content", r)
            return True
        if "reasoning_content" in message:  # a null beside the reasoning it would name: absent
            del message["reasoning_content"]
            return True
        return False
    if rc == "":
        if r == "":  # both empty: one representation, the explicit empty reasoning_content
            del message["reasoning"]
            return True
        return False
    if r is None or r == "" or r == rc:
        if field == "reasoning":
            _rename(message, "reasoning_content", "reasoning", rc)
            return True
        if "reasoning" in message:
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


@dataclass(frozen=True, slots=True)
class Route:
    """What the message preparation filter needs to know about the chosen route (spec 000).

    Attributes:
        provider: the endpoint's provider name (``openrouter``, ``openai``, ``anthropic``, ...).
        reasoning: the model supports reasoning (catalog ``reasoning_mode`` is not ``none``).
        preserve: the catalog's ``preserve_reasoning`` for the model.
    """

    provider: str
    reasoning: bool = True
    preserve: bool = False


_PLAIN = ("reasoning_content", "reasoning")
_DIRECT = frozenset(("openai", "inception"))
_ANTHROPIC = frozenset(("anthropic", "anthropic_compat"))
_OPENROUTER = frozenset(("openrouter", "ppq"))


def _keeps(route: Route, message: dict[str, Any]) -> tuple[bool, bool]:
    """(keep plain reasoning text, keep reasoning_details) for one assistant message: spec 000's table."""
    if not route.reasoning or route.provider in _DIRECT:
        return False, False
    if route.provider in _ANTHROPIC:
        return True, False
    if route.provider in _OPENROUTER:
        if route.preserve:
            return True, True
        return False, bool(message.get("tool_calls"))
    return route.preserve, False


def prepare_messages(messages: list[Any], route: Route) -> list[Any]:
    """The message preparation filter of spec 000 ("The Message Preparation Filter"), per route.

    Makes a copy of each message, removes internal metadata (keys starting with ``_``), and on assistant
    messages removes the reasoning fields the route cannot take:

    ==========================================  =========================  ====================================
    Route or capability                          reasoning_content          reasoning_details
    ==========================================  =========================  ====================================
    model without reasoning support             removed                    removed
    direct ``openai`` or ``inception``          removed                    removed
    ``anthropic`` or ``anthropic_compat``       kept (for thinking blocks) removed
    ``openrouter`` (and ``ppq``), preserving    kept                       kept
    ``openrouter`` (and ``ppq``), not           removed                    kept on tool-call messages only
    other reasoning-capable routes              kept only when preserving  removed
    ==========================================  =========================  ====================================

    "reasoning_content" stands for the plain reasoning text in either spelling (``reasoning_content`` or
    ``reasoning``); the reasoning / reasoning_content table (``normalize_messages``) then names it for the
    provider. PPQ follows OpenRouter (spec 004 pairs them).

    Args:
        messages: the request's messages (decoded JSON; never mutated).
        route: the chosen route.

    Returns:
        A new list; messages that change are new dicts, the others are the same objects.

    Raises:
        ApiError: 400 ``invalid_request`` when ``messages`` is not an array of objects.
    """
    if not isinstance(messages, list):
        raise invalid_request("messages must be an array of message objects.", "messages")
    prepared: list[Any] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise invalid_request(f"messages[{i}] must be a message object.", f"messages[{i}]")
        drop = [key for key in message if key.startswith("_")]
        if message.get("role") == "assistant":
            keep_plain, keep_details = _keeps(route, message)
            if not keep_plain:
                drop.extend(key for key in _PLAIN if key in message)
            if not keep_details and "reasoning_details" in message:
                drop.append("reasoning_details")
        prepared.append({k: v for k, v in message.items() if k not in drop} if drop else message)
    return prepared
