"""Assistant history on its way upstream: the message preparation filter of spec 000 ("The Message Preparation
Filter") and the reasoning / reasoning_content table of spec 004 ("Preserve reasoning across turns").

Both tables, with the rows numi_mw adds where the specs are silent, are in ``docs/providers.md``. In short: the
filter removes internal metadata and the reasoning fields the route cannot take (``prepare_messages``); the
table then names the plain reasoning text for the provider (``normalize_messages``): ``reasoning`` for
OpenRouter and PPQ, ``reasoning_content`` for the others. ``reasoning_details`` that stay are never touched:
unknown types, unknown fields, empty fragments and order travel as sent. Reasoning a client keeps in
``provider_specific_fields`` (LiteLLM) is read first as the message's own (``unheld``).
"""

from __future__ import annotations

from typing import Any, Final

from numi_mw.core.details import thinking_text, visible_text
from numi_mw.core.errors import ApiError, invalid_request
from numi_mw.core.fields import HELD_FIELD, HELD_REASONING_FIELDS, PLAIN_FIELDS, THINKING_BLOCKS, rename, splice
from numi_mw.core.providers import ReasoningField, Replay

ABSENT: Final = 0
"""A plain reasoning field that is absent or ``null`` (the reasoning / reasoning_content table's kinds)."""
EMPTY: Final = 1
"""A plain reasoning field that is the empty string."""
TEXT: Final = 2
"""A plain reasoning field that is a nonempty string."""


def _kind(value: object) -> int | None:
    """``value``'s kind for the table (``ABSENT``, ``EMPTY``, ``TEXT``), or ``None`` when it is not a string."""
    if value is None:
        return ABSENT
    if isinstance(value, str):
        return TEXT if value else EMPTY
    return None


def normalize_message(message: dict[str, Any], field: ReasoningField) -> bool:
    """Apply the reasoning / reasoning_content table to one assistant message, in place (``apply_table``; a
    message with a plain reasoning field that is neither a string nor ``null`` is left as it is).

    Args:
        message: an assistant message (decoded JSON object) numi_mw owns.
        field: the target provider's reasoning field.

    Returns:
        Whether ``message`` changed.
    """
    r = message.get("reasoning")
    rc = message.get("reasoning_content")
    r_kind, rc_kind = _kind(r), _kind(rc)
    if r_kind is None or rc_kind is None:
        return False
    return apply_table(message, field, r_kind, rc_kind, r_kind == TEXT and r == rc)


def apply_table(message: dict[str, Any], field: ReasoningField, r: int, rc: int, same: bool) -> bool:
    """Spec 004's reasoning / reasoning_content table ("Preserve reasoning across turns", with numi_mw's rows in
    ``docs/providers.md``) on one assistant message, in place, from what its two plain fields are.

    A ``null`` field counts as absent, and goes when the other one is written; a field that moves keeps its value
    object as it is (``fields.rename``), so a caller may hold the values in any form (decoded, or ``msgspec.Raw``
    in ``spliced``).

    Args:
        message: the assistant message, whose plain reasoning fields are strings or ``null`` where present.
        field: the target provider's reasoning field.
        r: the kind of ``reasoning`` (``ABSENT``, ``EMPTY`` or ``TEXT``).
        rc: the kind of ``reasoning_content``.
        same: both are ``TEXT`` and hold the same string.

    Returns:
        Whether ``message`` changed.
    """
    if rc == ABSENT:
        if r == ABSENT:  # nothing but nulls (a client that keeps the last delta's null): nothing to send
            nulls = [key for key in PLAIN_FIELDS if key in message]
            for key in nulls:
                del message[key]
            return bool(nulls)
        if r == EMPTY:
            del message["reasoning"]
            return True
        if field == "reasoning_content":
            rename(message, "reasoning", "reasoning_content", message["reasoning"])
            return True
        if "reasoning_content" in message:  # a null beside the reasoning it would name: absent
            del message["reasoning_content"]
            return True
        return False
    if rc == EMPTY:
        if r == EMPTY:  # both empty: one representation, the explicit empty reasoning_content
            del message["reasoning"]
            return True
        return False
    if r != TEXT or same:
        if field == "reasoning":
            rename(message, "reasoning_content", "reasoning", message["reasoning_content"])
            return True
        if "reasoning" in message:
            del message["reasoning"]
            return True
        return False
    return False


def normalize_messages(messages: list[Any], field: ReasoningField) -> bool:
    """Apply ``normalize_message`` to every assistant message of ``messages``, in place (items that are not
    objects are skipped: ``prepare_messages`` refuses them first).

    Returns:
        Whether any message changed.
    """
    changed = False
    for message in messages:
        if type(message) is dict and message.get("role") == "assistant" and normalize_message(message, field):
            changed = True
    return changed


def _not_a_list() -> ApiError:
    return invalid_request("messages must be an array of message objects.", "messages")


def _not_an_object(i: int) -> ApiError:
    return invalid_request(f"messages[{i}] must be a message object.", f"messages[{i}]")


_STRUCTURED = ("reasoning_details", THINKING_BLOCKS)
"""The fields of signed or encrypted reasoning state on a message: spec 004's details, and thinking blocks."""


def unheld(message: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``message`` without ``provider_specific_fields`` (``fields.HELD_FIELD``), whose reasoning an
    assistant message carries at its top level instead (``docs/providers.md``, "Reasoning a client keeps
    elsewhere").

    A reasoning field in it (``reasoning``, ``reasoning_content``, ``reasoning_details``, ``thinking_blocks``)
    stands where the key stood, unless the message has its own: the top level wins, so the reasoning is never
    there twice. Plain text counts as one field in either spelling: a message with ``reasoning`` or
    ``reasoning_content`` of its own takes neither from inside. A ``null`` field counts as absent. Values move as
    they are (signatures and encrypted data untouched); what else is inside (LiteLLM keeps there every field of
    an answer its ``Message`` does not declare) goes with the key, as does the key of any other message: no
    chat completions API reads it in a request.
    """
    held = message.get(HELD_FIELD)
    lifted: dict[str, Any] = {}
    if isinstance(held, dict) and message.get("role") == "assistant":
        has_text = any(message.get(key) is not None for key in PLAIN_FIELDS)
        for key in HELD_REASONING_FIELDS:
            value = held.get(key)
            if value is None or message.get(key) is not None or (has_text and key in PLAIN_FIELDS):
                continue
            lifted[key] = value
    out = dict(message)
    splice(out, (HELD_FIELD,), lifted)
    return out


def _structured_text(message: dict[str, Any]) -> str:
    """The visible text of a message's details, else of its thinking blocks."""
    details, blocks = message.get("reasoning_details"), message.get(THINKING_BLOCKS)
    text = visible_text(details) if isinstance(details, list) else ""
    return text or (thinking_text(blocks) if isinstance(blocks, list) else "")


def _keeps(replay: Replay, reasoning: bool, preserve: bool, message: dict[str, Any]) -> tuple[bool, bool]:
    """(keep plain reasoning text, keep reasoning_details) for one assistant message: spec 000's table."""
    if not reasoning or replay == "none":
        return False, False
    if replay == "text":
        return True, False
    if replay == "details":
        if preserve:
            return True, True
        return False, bool(message.get("tool_calls"))
    return preserve, False


def prepare_messages(
    messages: object, replay: Replay, *, reasoning: bool = True, preserve: bool = True, metadata: bool = True
) -> list[dict[str, Any]]:
    """The message preparation filter of spec 000 ("The Message Preparation Filter"), for one route.

    Makes a copy of each message it changes, removes internal metadata (keys starting with ``_``), reads the
    reasoning a message keeps in ``provider_specific_fields`` as its own (``unheld``), and on assistant messages
    removes the reasoning fields the route cannot take, by its row of the table (``ProviderRules.replay``; the
    table itself is in ``docs/providers.md``), where details stand for ``thinking_blocks`` too:

    - ``none`` (direct ``openai`` or ``inception``), or a model without reasoning support: text and details
      removed;
    - ``text`` (``anthropic``): text kept for conversion to thinking blocks, details removed;
    - ``details`` (``openrouter``, ``ppq``, ``generic``): both kept when preserving; otherwise details kept on
      tool-call messages only;
    - ``preserved-text`` (other reasoning-capable routes): text kept only when preserving, details removed.

    The reasoning text is either spelling (``reasoning_content`` or ``reasoning``); the reasoning /
    reasoning_content table (``normalize_messages``) then names it for the provider. Where the row keeps the text
    but removes the details and a message carries details without text (a client that sends back only
    ``reasoning_details``), the details' visible text (``details.visible_text``; without any, that of its
    thinking blocks, ``details.thinking_text``) becomes its ``reasoning_content``, so that the reasoning is not
    lost (numi_mw's choice; spec 000 is silent).

    Args:
        messages: the request's messages (decoded JSON; never mutated).
        replay: the route's row of the table.
        reasoning: the model supports reasoning (catalog ``reasoning_mode`` is not ``none``).
        preserve: preservation is on (catalog ``preserve_reasoning``; on for a single upstream).
        metadata: look for internal metadata and ``provider_specific_fields``; ``False`` when the caller knows
            that every key is one chat completions defines (``request.probe`` shows it), which saves a look at
            every key.

    Returns:
        ``messages`` itself when no message changes; else a new list in which the messages that change are new
        dicts and the others the same objects.

    Raises:
        ApiError: 400 ``invalid_request`` when ``messages`` is not an array of objects.
    """
    if not isinstance(messages, list):
        raise _not_a_list()
    prepared: list[dict[str, Any]] | None = None
    for i, sent in enumerate(messages):
        if not isinstance(sent, dict):
            raise _not_an_object(i)
        message = unheld(sent) if metadata and HELD_FIELD in sent else sent
        drop: list[str] = []
        text: str | None = None  # reasoning text made from details the route cannot take
        if metadata:
            for key in message:
                if key < "`" and key[:1] == "_":  # "_" sorts just below "`" and every lower-case letter
                    drop = [key for key in message if key[:1] == "_"]
                    break
        if message.get("role") == "assistant":
            keep_plain, keep_details = _keeps(replay, reasoning, preserve, message)
            if not keep_plain:
                drop.extend(key for key in PLAIN_FIELDS if key in message)
            if not keep_details:
                structured = [key for key in _STRUCTURED if key in message]
                if structured:
                    drop.extend(structured)
                    if keep_plain and not any(message.get(key) for key in PLAIN_FIELDS):
                        text = _structured_text(message)
        if drop or message is not sent:
            if prepared is None:
                prepared = messages[:i]
            copy = {k: v for k, v in message.items() if k not in drop}
            if text:
                copy["reasoning_content"] = text
            prepared.append(copy)
        elif prepared is not None:
            prepared.append(sent)
    return messages if prepared is None else prepared
