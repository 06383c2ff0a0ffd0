"""What the replay store keeps and puts back, without I/O: turn keys, scopes, opaque state, restoration.

Many clients lose the opaque reasoning state of an assistant turn between turns (signatures, encrypted and
redacted details, OpenAI Responses reasoning item ids): spec 004 "Preserve reasoning across turns" asks for it
back unchanged, and spec 000 ("Storage", "Replay") keeps storage apart from replay. A shell with a replay store
(``numi_mw.replay_store``) keeps that state for each assistant turn it relays and puts it back on a later request
whose history carries the turn without it; the request pipeline then runs spec 000's filter on the restored
history as on any other (``request.prepare_request``, ``restored=``), so the route's row still decides what the
provider receives.

- The turn key (``turn_key``): a SHA-256 digest of what identifies an assistant turn when the client sends it
  back: its tool call ids, in order, else its content (a string, or the text of its text parts) together with
  its context (``turn_context``), the message just before it: at store time the last message of the request the
  answer replies to (``missing_in_body`` gives it with the keys to look up), at restore time the message before
  the turn in the history. So two conversations whose turns say the same thing after different messages never
  share a key.
- The scope (``credential_scope``): a SHA-256 digest of the client's credential (``Authorization``, without a
  ``Bearer`` prefix, else ``x-api-key``), so that one tenant never reads another's state; a request with no
  credential is in ``ANONYMOUS_SCOPE``.
- The value (``opaque_state``, ``answer_states``): the message's ``reasoning_details`` list as JSON bytes, when at
  least one detail carries opaque state; from a buffered answer, the bytes as the provider sent them.

``docs/replay-store.md`` has the whole picture.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from typing import Any, Final, NamedTuple

import msgspec

from numi_mw.core import codec
from numi_mw.core.accumulate import Accumulator
from numi_mw.core.errors import ApiError
from numi_mw.core.fields import HELD_FIELD, THINKING_BLOCKS

ANONYMOUS_SCOPE: Final = "anonymous"
"""The scope of requests that carry no credential (no ``Authorization``, no ``x-api-key``): they share one
scope, as they share whatever upstream key the shell adds (a catalog's keys). A deployment that serves several
tenants gives each its own credential, or its own store."""

RESPONSES_FORMAT: Final = "openai-responses-v1"
"""The ``format`` of OpenAI Responses reasoning details, whose ``id`` is the reasoning item id the Responses API
needs back (``core.adapters.openai_responses``)."""

_SCOPE_TAG = b"numi-mw scope\x00"
_TOOLS_TAG = b"numi-mw turn tool_calls\x00"
_CONTENT_TAG = b"numi-mw turn content\x00"
_CONTEXT_TAG = b"numi-mw turn context\x00"

NO_CONTEXT: Final = hashlib.sha256(_CONTEXT_TAG).hexdigest()
"""The context of an assistant turn with no message before it (the first message of a history, or the answer to a
request with no messages): ``turn_context(None)``."""


def credential_scope(headers: Mapping[str, str]) -> str:
    """The scope of a request: the hex SHA-256 digest of its credential, or ``ANONYMOUS_SCOPE``.

    Args:
        headers: the client's request headers, lower-case names (a Starlette ``Headers`` or a plain dict).

    The credential is the ``Authorization`` value without its ``Bearer`` prefix, else the ``x-api-key`` value
    (Anthropic's key header), stripped; so one key gives one scope in either header. The key itself is never
    kept: only its digest.
    """
    value = headers.get("authorization") or ""
    value = value.strip()
    if value[:7].lower() == "bearer ":
        value = value[7:].strip()
    if not value:
        value = (headers.get("x-api-key") or "").strip()
    if not value:
        return ANONYMOUS_SCOPE
    return hashlib.sha256(_SCOPE_TAG + value.encode("utf-8", "surrogateescape")).hexdigest()


def _content_text(content: object) -> bytes | None:
    """What identifies a turn by its content: a string as UTF-8; an array of text parts as their joined text
    (a client may send back a string answer as parts); any other array as its JSON; nothing when empty."""
    if isinstance(content, str):
        return content.encode("utf-8", "surrogateescape") if content else None
    if isinstance(content, list) and content:
        if all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content):
            text = "".join(p["text"] for p in content)
            return text.encode("utf-8", "surrogateescape") if text else None
        return codec.encode(content)
    return None


def turn_context(message: object) -> str:
    """The context of the assistant turn that follows ``message``: the hex SHA-256 digest of the message's role, its
    ``tool_call_id`` (a tool result's), its tool call ids in order (an assistant turn's) and its content text
    (``_content_text``: a string, the joined text of text parts, any other array as its JSON), each field that is
    absent or not of its type taken as empty; ``NO_CONTEXT`` when ``message`` is not an object (``None``: nothing
    before the turn).

    Only what a client sends back unchanged goes in: never reasoning, which the client may drop.
    """
    if not isinstance(message, dict):
        return NO_CONTEXT
    role = message.get("role")
    call_id = message.get("tool_call_id")
    fields = [
        role.encode("utf-8", "surrogateescape") if isinstance(role, str) else b"",
        call_id.encode("utf-8", "surrogateescape") if isinstance(call_id, str) else b"",
        _call_ids(message) or b"",
        _content_text(message.get("content")) or b"",
    ]
    return hashlib.sha256(_CONTEXT_TAG + b"\x00".join(fields)).hexdigest()


def _call_ids(message: Mapping[str, Any]) -> bytes | None:
    """The message's nonempty tool call ids, in order, joined by NUL; ``None`` when it has none."""
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return None
    ids = [c["id"] for c in calls if isinstance(c, dict) and isinstance(c.get("id"), str) and c["id"]]
    return "\x00".join(ids).encode("utf-8", "surrogateescape") if ids else None


def turn_key(message: object, context: str) -> str | None:
    """The key of an assistant turn: the hex SHA-256 digest of its tool call ids (in order) when it has any, else
    of its context and its content (``_content_text``); ``None`` for anything else (not an assistant message, or
    one with neither).

    Args:
        message: the assistant message, as the client sends it back or as the answer holds it.
        context: ``turn_context`` of the message just before it (for an answer, of the request's last message).

    A tool call id is unique to its turn (the provider makes it), so a turn with tool calls is keyed by them alone.
    Content is not unique ("ok"), so a turn without tool calls is keyed by its content after the message before it:
    two turns of one scope share a key only when both their content and the message before them are the same.
    """
    if not isinstance(message, dict) or message.get("role") != "assistant":
        return None
    ids = _call_ids(message)
    if ids is not None:
        return hashlib.sha256(_TOOLS_TAG + ids).hexdigest()
    text = _content_text(message.get("content"))
    if text is None:
        return None
    return hashlib.sha256(_CONTENT_TAG + context.encode() + b"\x00" + text).hexdigest()


def _lacking(messages: list[Any]) -> Iterator[tuple[dict[str, Any], str]]:
    """Each assistant turn of ``messages`` that lacks its opaque state (``has_state``) and has a key, with its key
    (``turn_key``, its context the message before it), in order."""
    before: object = None
    for message in messages:
        if isinstance(message, dict) and message.get("role") == "assistant" and not has_state(message):
            key = turn_key(message, turn_context(before))
            if key is not None:
                yield message, key
        before = message


def is_opaque(detail: object) -> bool:
    """Whether a reasoning detail (or a thinking block) carries state a client cannot rebuild: a nonempty
    ``signature``, nonempty ``data`` (``reasoning.encrypted``, ``redacted_thinking``), or an ``id`` in OpenAI
    Responses' format (the reasoning item id); spec 004 "Reasoning detail"."""
    if not isinstance(detail, dict):
        return False
    for key in ("signature", "data"):
        value = detail.get(key)
        if isinstance(value, str) and value:
            return True
    ident = detail.get("id")
    return detail.get("format") == RESPONSES_FORMAT and isinstance(ident, str) and bool(ident)


def _carries(holder: Mapping[str, Any]) -> bool:
    for key in ("reasoning_details", THINKING_BLOCKS):
        value = holder.get(key)
        if isinstance(value, list) and any(is_opaque(item) for item in value):
            return True
    return False


def has_state(message: Mapping[str, Any]) -> bool:
    """Whether an assistant message still carries opaque state: in ``reasoning_details`` or ``thinking_blocks``,
    on the message or in its ``provider_specific_fields`` (where LiteLLM keeps them)."""
    if _carries(message):
        return True
    held = message.get(HELD_FIELD)
    return isinstance(held, dict) and _carries(held)


def opaque_state(message: object) -> bytes | None:
    """What to store of an assistant message: its ``reasoning_details`` list as JSON bytes when at least one detail
    is opaque (``is_opaque``), else ``None`` (plain reasoning text the client keeps, or nothing, is not stored).
    The list is kept whole and in order: unknown types, unknown fields and empty fragments with it."""
    if not isinstance(message, dict):
        return None
    details = message.get("reasoning_details")
    if not isinstance(details, list) or not any(is_opaque(d) for d in details):
        return None
    return codec.encode(details)


class _AnswerMessage(msgspec.Struct, gc=False):
    role: Any = None
    content: Any = None
    tool_calls: Any = None
    reasoning_details: msgspec.Raw = msgspec.Raw()


class _AnswerChoice(msgspec.Struct, gc=False):
    message: _AnswerMessage | None = None


class _Answer(msgspec.Struct, gc=False):
    choices: list[_AnswerChoice] = []


_answer_decoder = msgspec.json.Decoder(_Answer)


def answer_states(body: bytes, context: str) -> list[tuple[str, bytes]]:
    """``(turn key, value)`` for each choice of a buffered chat completion whose message carries opaque state: the
    value is its ``reasoning_details`` exactly as the answer's bytes hold them, the key that of the message as the
    client sends it back (``turn_key``) after ``context`` (``missing_in_body``'s, the request's last message).
    Nothing for a body that is not a chat completion."""
    try:
        answer = _answer_decoder.decode(body)
    except (msgspec.DecodeError, RecursionError):
        return []
    out: list[tuple[str, bytes]] = []
    for choice in answer.choices:
        message = choice.message
        if message is None or not message.reasoning_details:
            continue
        raw = bytes(message.reasoning_details)
        try:
            details = codec.decoder.decode(raw)
        except (msgspec.DecodeError, RecursionError):  # pragma: no cover - the answer decoded as a whole
            continue
        if not isinstance(details, list) or not any(is_opaque(d) for d in details):
            continue
        role = message.role if message.role is not None else "assistant"
        key = turn_key({"role": role, "content": message.content, "tool_calls": message.tool_calls}, context)
        if key is not None:
            out.append((key, raw))
    return out


class StreamStates:
    """The opaque state of a streamed chat completion, collected from the stream as the client receives it (what a
    shell with a replay store keeps, as ``answer_states`` gives it for a buffered answer).

    Fed the stream's bytes as they go to the client (``feed``: an SSE stream numi_mw already normalized, split
    anywhere), it gives at the end (``states``) ``(turn key, value)`` for each choice whose assistant message
    carries opaque state: the ``reasoning_details`` rebuilt by spec 004 "From a stream" (``Accumulator`` with
    ``normalize=False``), as JSON bytes, signatures and encrypted data as they came, keyed as the client sends
    the turn back (``turn_key``) after ``context`` (``missing_in_body``'s, the request's last message). A stream
    it cannot read (an event over the accumulator's bounds, one that is not
    JSON) gives nothing: the answer still goes to the client as it is, it is only not kept.
    """

    __slots__ = ("_accumulator", "_context", "_failed")

    def __init__(self, context: str) -> None:
        self._accumulator = Accumulator(normalize=False)
        self._context = context
        self._failed = False

    def feed(self, data: bytes) -> bool:
        """Take the next bytes of the stream (any split); ``True`` once its ``data: [DONE]`` event has been taken
        (the stream's end: ``states`` can be read)."""
        if self._failed:
            return False
        try:
            self._accumulator.feed_sse(data)
        except ApiError:
            self._failed = True
            return False
        return self._accumulator.done

    def states(self) -> list[tuple[str, bytes]]:
        """``(turn key, value)`` for each choice with opaque state, in choice order; call once the stream has
        ended (or its ``[DONE]`` has been fed)."""
        if self._failed:
            return []
        try:
            self._accumulator.finish()
        except ApiError:
            return []
        out: list[tuple[str, bytes]] = []
        for index in sorted(self._accumulator.choices):
            message = self._accumulator.choices[index].message()
            value = opaque_state(message)
            key = turn_key(message, self._context) if value is not None else None
            if key is not None and value is not None:
                out.append((key, value))
        return out


def missing(messages: object) -> list[str]:
    """The keys of the assistant turns of ``messages`` that lack their opaque state (``has_state``), each once, in
    order of first appearance; nothing when ``messages`` is not a list. Linear in the number of turns."""
    if not isinstance(messages, list):
        return []
    keys: list[str] = []
    seen: set[str] = set()
    for _, key in _lacking(messages):
        if key not in seen:
            seen.add(key)
            keys.append(key)
    return keys


class Lookup(NamedTuple):
    """What a shell with a replay store needs of a request (``missing_in_body``)."""

    keys: list[str]
    """The keys to look up: ``missing`` of the request's messages."""
    context: str
    """The context of the request's answer: ``turn_context`` of its last message (``NO_CONTEXT`` when it has none),
    for ``answer_states`` and ``StreamStates`` to key the answer as the client will send it back."""


class _TurnView(msgspec.Struct, gc=False):
    role: Any = None
    content: Any = None
    tool_call_id: Any = None
    tool_calls: Any = None
    reasoning_details: Any = None
    thinking_blocks: Any = None
    provider_specific_fields: Any = None


class _BodyView(msgspec.Struct, gc=False):
    messages: list[_TurnView | list[Any] | str | float | bool | None] = []


_body_decoder = msgspec.json.Decoder(_BodyView)


def missing_in_body(body: bytes) -> Lookup:
    """``missing`` of a request body's messages and the context of its answer (``Lookup``), read in one decode
    without building the fields they skip; no keys and ``NO_CONTEXT`` for a body that is not JSON or not of the
    chat completions shape (the request pipeline then refuses it)."""
    try:
        view = _body_decoder.decode(body)
    except (msgspec.DecodeError, RecursionError):
        return Lookup([], NO_CONTEXT)
    messages = [
        {f: getattr(m, f) for f in m.__struct_fields__ if getattr(m, f) is not None} if isinstance(m, _TurnView) else m
        for m in view.messages
    ]
    return Lookup(missing(messages), turn_context(messages[-1] if messages else None))


def restore(messages: object, found: Mapping[str, bytes]) -> int:
    """Put stored state back on the assistant turns of ``messages`` that lack it, in place.

    Args:
        messages: the request's decoded messages (owned by the caller).
        found: stored values by turn key (``missing`` gives the keys to look up).

    Each turn is keyed after the message before it in ``messages`` (``turn_key``, ``turn_context``). A turn that
    still has its state (``has_state``) is left alone. A restored turn's ``reasoning_details`` is the
    stored list (the details the client kept without their state are replaced by the whole list the turn had);
    a stored value that is not a JSON array is skipped.

    Returns:
        The count of turns restored.
    """
    if not isinstance(messages, list) or not found:
        return 0
    count = 0
    for message, key in list(_lacking(messages)):
        value = found.get(key)
        if value is None:
            continue
        try:
            details = codec.decoder.decode(value)
        except (msgspec.DecodeError, RecursionError):
            continue
        if not isinstance(details, list):
            continue
        message["reasoning_details"] = details
        count += 1
    return count
