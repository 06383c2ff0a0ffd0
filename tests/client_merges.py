"""Small models of how real clients merge streamed chat completion chunks into the message they send back.

Each model takes the chunks of a stream (decoded JSON, choice 0 is read) and returns a ``Replay``: the reasoning
the client shows and the reasoning fields of the assistant message it sends back next turn. The rules were read
in each client's source (the file and function are named on each model); these are models of those rules, not
copies of the code. ``docs/streaming.md`` ("What clients do with the stream") has the same rules as a table.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from openai.lib.streaming._deltas import accumulate_delta

from numi_mw.core.details import rebuild_reasoning_details


@dataclass
class Replay:
    """What one client made of a stream: the reasoning it shows and the reasoning fields it sends back."""

    shown: str = ""
    fields: dict[str, Any] = field(default_factory=dict)


def deltas(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The deltas of choice 0 in order, deep-copied (a model may change them)."""
    out = []
    for chunk in chunks:
        for choice in chunk.get("choices") or []:
            if isinstance(choice, dict) and choice.get("index", 0) == 0 and isinstance(choice.get("delta"), dict):
                out.append(copy.deepcopy(choice["delta"]))
    return out


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def spec_rebuild(chunks: list[dict[str, Any]]) -> Replay:
    """openai-python's raw stream (``client.chat.completions.create(stream=True)``) read as spec 004 "Streaming"
    says: ``delta.reasoning`` concatenated for display, the ``delta.reasoning_details`` entries rebuilt by "From a
    stream" to send back. The SDK itself merges nothing here."""
    shown = ""
    entries: list[Any] = []
    for delta in deltas(chunks):
        shown += _text(delta.get("reasoning"))
        entries.extend(delta.get("reasoning_details") or [])
    fields: dict[str, Any] = {}
    if shown:
        fields["reasoning"] = shown
    rebuilt = rebuild_reasoning_details(entries)
    if rebuilt:
        fields["reasoning_details"] = rebuilt
    return Replay(shown, fields)


def openai_python_stream(chunks: list[dict[str, Any]]) -> Replay:
    """openai-python's ``client.chat.completions.stream()`` helper: every delta goes through
    ``openai/lib/streaming/_deltas.py`` ``accumulate_delta`` (the installed SDK's own function): strings are
    concatenated (``index`` and ``type`` are replaced), a null never overwrites a value, list entries merge by
    ``index``, which is their position in the list. The accumulated message is what goes back."""
    acc: dict[object, object] = {}
    for delta in deltas(chunks):
        accumulate_delta(acc, delta)
    fields = {str(k): v for k, v in acc.items() if k in ("reasoning", "reasoning_content", "reasoning_details")}
    fields = {k: v for k, v in fields.items() if v not in (None, [], "")}
    return Replay(_text(acc.get("reasoning")), fields)


def openai_node_stream(chunks: list[dict[str, Any]]) -> Replay:
    """openai-node's ``client.chat.completions.stream()`` helper (``src/lib/ChatCompletionStream.ts``,
    ``#accumulateChatCompletion``): fields it does not know (``reasoning``, ``reasoning_content``,
    ``reasoning_details``) are copied onto the message with ``Object.assign``, so the last delta that carries one
    decides its value, null included. Display reads the ``chunk`` events' ``delta.reasoning``."""
    shown = ""
    message: dict[str, Any] = {}
    known = ("audio", "content", "refusal", "function_call", "role", "tool_calls")
    for delta in deltas(chunks):
        shown += _text(delta.get("reasoning"))
        message.update({k: v for k, v in delta.items() if k not in known})
    fields = {k: v for k, v in message.items() if v not in (None, [], "")}
    return Replay(shown, fields)


def ai_sdk_openrouter(chunks: list[dict[str, Any]]) -> Replay:
    """The AI SDK OpenRouter provider (``@openrouter/ai-sdk-provider``, ``doStream``'s transform and the message
    conversion): a ``reasoning.text`` entry is merged into the last accumulated detail when that is a
    ``reasoning.text`` too, whatever its ``index`` (text appended, ``signature`` and ``format`` the first truthy
    value, other fields from the first entry); any other entry is a detail of its own. Display reads the entries'
    text when a delta has entries, else ``delta.reasoning``, until the answer's text starts. Sent back: the
    details, without ``reasoning.text`` ones of format ``anthropic-claude-v1`` (the default when absent) or
    ``google-gemini-v1`` that lack a signature, and the shown reasoning beside them when any detail is left."""
    shown = ""
    text_started = False
    details: list[dict[str, Any]] = []
    for delta in deltas(chunks):
        entries = delta.get("reasoning_details") or []
        if entries:
            for entry in entries:
                last = details[-1] if details else None
                if entry.get("type") == "reasoning.text" and last is not None and last.get("type") == "reasoning.text":
                    last["text"] = (last.get("text") or "") + (entry.get("text") or "")
                    last["signature"] = last.get("signature") or entry.get("signature")
                    last["format"] = last.get("format") or entry.get("format")
                else:
                    details.append(dict(entry))
            if not text_started:
                for entry in entries:
                    if entry.get("type") == "reasoning.text":
                        shown += entry.get("text") or ""
                    elif entry.get("type") == "reasoning.summary" and entry.get("summary"):
                        shown += entry["summary"]
        elif delta.get("reasoning") and not text_started:
            shown += delta["reasoning"]
        if delta.get("content"):
            text_started = True
    kept = [
        d
        for d in details
        if d.get("type") != "reasoning.text"
        or (d.get("format") or "anthropic-claude-v1") not in ("anthropic-claude-v1", "google-gemini-v1")
        or d.get("signature")
    ]
    fields: dict[str, Any] = {}
    if kept:
        fields = {"reasoning": shown, "reasoning_details": kept} if shown else {"reasoning_details": kept}
    return Replay(shown, fields)


def ai_sdk_openai_compatible(chunks: list[dict[str, Any]]) -> Replay:
    """The AI SDK OpenAI-compatible provider (``@ai-sdk/openai-compatible``, the chat model's ``doStream``): per
    delta ``reasoning_content``, or ``reasoning`` when that is null or absent, is appended when not empty;
    details are not read. Sent back as ``reasoning_content``."""
    shown = ""
    for delta in deltas(chunks):
        value = delta.get("reasoning_content")
        if value is None:
            value = delta.get("reasoning")
        shown += _text(value)
    return Replay(shown, {"reasoning_content": shown} if shown else {})


def litellm_openai(chunks: list[dict[str, Any]]) -> Replay:
    """LiteLLM's ``openai/`` route: ``litellm/types/utils.py`` ``Delta.__init__`` takes ``reasoning`` as
    ``reasoning_content`` when that is null, and ``stream_chunk_builder``
    (``litellm_core_utils/streaming_chunk_builder_utils.py``, ``get_combined_reasoning_content``) joins the
    non-null values; details are not carried into the built message."""
    shown = ""
    for delta in deltas(chunks):
        value = delta.get("reasoning_content")
        if value is None:
            value = delta.get("reasoning")
        shown += _text(value)
    return Replay(shown, {"reasoning_content": shown} if shown else {})


def litellm_openrouter(chunks: list[dict[str, Any]]) -> Replay:
    """LiteLLM's ``openrouter/`` route: ``llms/openrouter/chat/transformation.py``
    ``OpenRouterChatCompletionStreamingHandler.chunk_parser`` sets ``reasoning_content`` to ``delta.reasoning``,
    then the ``openai/`` route's joining applies."""
    shown = "".join(_text(delta.get("reasoning")) for delta in deltas(chunks))
    return Replay(shown, {"reasoning_content": shown} if shown else {})


def langchain_openai(chunks: list[dict[str, Any]]) -> Replay:
    """langchain-openai's ``ChatOpenAI`` (``chat_models/base.py``, ``_convert_delta_to_message_chunk``): no
    reasoning field of a chat completions stream is read (its module docstring says so)."""
    return Replay()


def _lc_merge_dicts(left: dict[str, Any], right: dict[str, Any]) -> dict[str, Any]:
    """langchain-core ``utils/_merge.py`` ``merge_dicts``, as documented there: a key missing or null on the left
    takes the right value; a null on the right changes nothing; strings are concatenated, except an ``id`` equal
    on both sides; an integer ``index`` is replaced; lists merge by ``merge_lists``; dicts recursively."""
    merged = dict(left)
    for key, value in right.items():
        if key not in merged or (value is not None and merged[key] is None):
            merged[key] = value
        elif value is None:
            continue
        elif isinstance(merged[key], str):
            if not (key == "id" and merged[key] == value):
                merged[key] += value
        elif isinstance(merged[key], dict):
            merged[key] = _lc_merge_dicts(merged[key], value)
        elif isinstance(merged[key], list):
            merged[key] = _lc_merge_lists(merged[key], value)
        elif isinstance(merged[key], int) and not isinstance(merged[key], bool):
            merged[key] = value if key in ("index", "created", "timestamp") else merged[key] + value
    return merged


def _lc_merge_lists(left: list[Any], right: list[Any]) -> list[Any]:
    """langchain-core ``merge_lists``: an entry with an integer ``index`` merges (``merge_dicts``, its ``type``
    left out) into the entry of the same ``index`` whose ``id`` does not disagree; any other entry is appended."""
    merged = list(left)
    for entry in right:
        if isinstance(entry, dict) and isinstance(entry.get("index"), int):
            same = [
                i
                for i, old in enumerate(merged)
                if isinstance(old, dict)
                and old.get("index") == entry["index"]
                and (old.get("id") in (None, "") or entry.get("id") in (None, "") or old.get("id") == entry.get("id"))
            ]
            if same:
                rest = {k: v for k, v in entry.items() if k != "type"}
                merged[same[0]] = _lc_merge_dicts(merged[same[0]], rest)
                continue
        merged.append(entry)
    return merged


def _lc_openrouter_replay_details(details: list[Any]) -> list[Any]:
    """langchain-openrouter ``chat_models.py`` ``_merge_reasoning_details`` then ``_strip_ephemeral_reasoning_ids``
    at replay: consecutive entries of one ``(type, index)`` become one (texts joined, other fields the last
    non-null value); ``rs_`` ids are removed."""
    out: list[Any] = []
    for entry in details:
        last = out[-1] if out else None
        if (
            isinstance(entry, dict)
            and entry.get("index") is not None
            and isinstance(last, dict)
            and last.get("index") == entry.get("index")
            and last.get("type", "") == entry.get("type", "")
        ):
            for key, value in entry.items():
                if key == "text":
                    last["text"] = (last.get("text") or "") + (value or "")
                elif value is not None:
                    last[key] = value
        else:
            out.append(dict(entry) if isinstance(entry, dict) else entry)
    return [
        {k: v for k, v in d.items() if not (k == "id" and isinstance(v, str) and v.startswith("rs_"))}
        if isinstance(d, dict)
        else d
        for d in out
    ]


def langchain_openrouter(chunks: list[dict[str, Any]]) -> Replay:
    """langchain-openrouter's ``ChatOpenRouter`` (``chat_models.py``): per chunk a truthy ``reasoning`` becomes
    ``additional_kwargs["reasoning_content"]`` and truthy ``reasoning_details`` are kept; ``AIMessageChunk``
    addition merges ``additional_kwargs`` with langchain-core's ``merge_dicts``; ``_convert_message_to_dict``
    sends back ``reasoning`` and the merged details."""
    kwargs: dict[str, Any] = {}
    for delta in deltas(chunks):
        extra: dict[str, Any] = {}
        if delta.get("reasoning"):
            extra["reasoning_content"] = delta["reasoning"]
        if delta.get("reasoning_details"):
            extra["reasoning_details"] = delta["reasoning_details"]
        kwargs = _lc_merge_dicts(kwargs, extra)
    fields: dict[str, Any] = {}
    if "reasoning_content" in kwargs:
        fields["reasoning"] = kwargs["reasoning_content"]
    if "reasoning_details" in kwargs:
        fields["reasoning_details"] = _lc_openrouter_replay_details(kwargs["reasoning_details"])
    return Replay(_text(kwargs.get("reasoning_content")), fields)


def langchain_deepseek(chunks: list[dict[str, Any]]) -> Replay:
    """langchain-deepseek's ``ChatDeepSeek`` (``chat_models.py``, ``_convert_chunk_to_generation_chunk``):
    ``reasoning_content``, or ``reasoning`` when that is null or absent, goes into
    ``additional_kwargs["reasoning_content"]`` (joined by ``merge_dicts``); the message sent back is
    langchain-openai's, without it."""
    shown = ""
    for delta in deltas(chunks):
        value = delta.get("reasoning_content")
        if value is None:
            value = delta.get("reasoning")
        shown += _text(value)
    return Replay(shown, {})


def pydantic_ai_openai(chunks: list[dict[str, Any]]) -> Replay:
    """pydantic-ai's ``OpenAIChatModel`` (``models/openai/_chat_streaming.py`` ``_map_thinking_delta``): per delta
    the first of ``reasoning`` and ``reasoning_content`` that is a nonempty string is appended to a thinking part
    whose id is that field's name; ``_chat_model.py`` sends it back in that field (``auto`` mode)."""
    parts: dict[str, str] = {}
    for delta in deltas(chunks):
        for name in ("reasoning", "reasoning_content"):
            value = delta.get(name)
            if value and isinstance(value, str):
                parts[name] = parts.get(name, "") + value
                break
    return Replay("".join(parts.values()), dict(parts))


def pydantic_ai_openrouter(chunks: list[dict[str, Any]]) -> Replay:
    """pydantic-ai's ``OpenRouterModel`` (``models/openrouter.py`` ``OpenRouterStreamedResponse._map_thinking_delta``
    with ``_parts_manager.py`` ``handle_thinking_delta`` and ``messages.py`` ``ThinkingPartDelta``): a delta with
    entries maps each to the thinking part keyed by ``(type, index)``: text (or summary) appended, ``signature``
    (or ``data``) the last non-null value, ``id`` the first entry's, and ``format``, ``index`` and ``type`` the last
    entry's, a missing ``format`` counting as null. A delta without entries falls back to ``OpenAIChatModel``.
    ``_reasoning_details.py`` ``into_reasoning_detail`` sends each part back as one detail."""
    parts: dict[tuple[Any, Any], dict[str, Any]] = {}
    plain = pydantic_ai_openai(chunks)  # deltas without entries: the OpenAI model's fields
    shown = ""
    for delta in deltas(chunks):
        entries = delta.get("reasoning_details") or []
        if not entries:
            for name in ("reasoning", "reasoning_content"):
                value = delta.get(name)
                if value and isinstance(value, str):
                    shown += value
                    break
            continue
        for position, entry in enumerate(entries):
            kind = entry.get("type")
            index = entry.get("index") if entry.get("index") is not None else position
            content = entry.get("summary") if kind == "reasoning.summary" else entry.get("text")
            signature = entry.get("data") if kind == "reasoning.encrypted" else entry.get("signature")
            details = {"format": entry.get("format"), "index": entry.get("index"), "type": kind}
            part = parts.get((kind, index))
            if part is None:
                parts[(kind, index)] = {
                    "id": entry.get("id"),
                    "content": content or "",
                    "signature": signature,
                    **details,
                }
            else:
                part["content"] += content or ""
                if signature is not None:
                    part["signature"] = signature
                part.update(details)
            shown += content or ""
    replayed = []
    for part in parts.values():
        detail: dict[str, Any] = {
            "id": part["id"],
            "format": part["format"],
            "index": part["index"],
            "type": part["type"],
        }
        if part["type"] == "reasoning.text":
            detail.update(text=part["content"], signature=part["signature"])
        elif part["type"] == "reasoning.summary":
            detail["summary"] = part["content"]
        else:
            detail["data"] = part["signature"]
        replayed.append(detail)
    fields: dict[str, Any] = {"reasoning_details": replayed} if replayed else dict(plain.fields)
    return Replay(shown, fields)


CLIENTS: dict[str, Callable[[list[dict[str, Any]]], Replay]] = {
    "openai-python raw (spec rebuild)": spec_rebuild,
    "openai-python .stream()": openai_python_stream,
    "openai-node .stream()": openai_node_stream,
    "AI SDK openrouter": ai_sdk_openrouter,
    "AI SDK openai-compatible": ai_sdk_openai_compatible,
    "LiteLLM openai/": litellm_openai,
    "LiteLLM openrouter/": litellm_openrouter,
    "langchain-openai": langchain_openai,
    "langchain-openrouter": langchain_openrouter,
    "langchain-deepseek": langchain_deepseek,
    "pydantic-ai OpenAI": pydantic_ai_openai,
    "pydantic-ai OpenRouter": pydantic_ai_openrouter,
}
"""Every modelled client by name."""
