"""The OpenAI Responses adapter: chat completions requests to ``POST /v1/responses`` and its answers back.

Sources: OpenAI's Responses API reference (input items, ``instructions``, function tools, ``tool_choice``,
``reasoning``, ``include``, ``store``, ``text.format``, output items, ``status`` and ``incomplete_details``,
``usage``, stream events), the Python SDK's types (``openai/openai-python`` ``src/openai/types/responses``),
OpenAI's own stateless client (``openai/codex`` ``codex-rs/protocol/src/models.rs``), llama.cpp's
``/v1/responses`` conversion (``server_chat_convert_responses_to_chatcmpl``), spec 004 "Preserve reasoning across
turns", "From a stream" and "Output limits and billing", spec 000 "Provider-Specific Handling".
``docs/wire-apis.md`` has the tables.

Reasoning crosses the wire in both directions:

- back: a ``reasoning`` output item becomes, in order, one ``reasoning.summary`` detail per summary part, one
  ``reasoning.text`` detail per ``reasoning_text`` content part (DeepSeek, LM Studio, llama-server), then one
  ``reasoning.encrypted`` detail (``data`` = ``encrypted_content``, ``id`` = the item id) when the item carries
  encrypted state; all in format ``openai-responses-v1``. ``message.reasoning`` is the visible text: the summary
  parts and reasoning texts joined with ``SEPARATOR``.
- out: the replay is stateless (``store: false``, ``include: ["reasoning.encrypted_content"]``). An assistant
  message's ``openai-responses-v1`` details go back as ``reasoning`` input items before that turn's message and
  function call items: encrypted state as ``{"type": "reasoning", "id", "encrypted_content", "summary"}``,
  reasoning text as ``{"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", ...}]}``
  (llama-server refuses a reasoning item without content). Spec 000 says its adapter does not replay; numi_mw
  does, because a tool loop with encrypted reasoning breaks without it. Another provider's details and plain
  reasoning text mean nothing here: they are left out and counted in the adjustments.

Streamed summaries keep their parts apart for the replay: spec 004's rebuild keeps every streamed
``reasoning.summary`` fragment as a detail of its own, so the fragment that opens a summary part carries the ``id``
of its reasoning item (and starts with ``SEPARATOR`` when visible reasoning came before it), the fragments that go
on with the part carry none. The replay joins them back into the recorded parts (``_reasoning_items``); summary
details without an ``id`` (a buffered answer's, OpenRouter's) are whole parts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from numi_mw.core.adapters.base import (
    Answer,
    ChunkStream,
    RequestFacts,
    Translation,
    WireAdapter,
    call_function,
    chat_completion,
    content_parts,
    count_plain_reasoning,
    event_index,
    function_tool,
    output_limit,
    remember,
)
from numi_mw.core.controls import ReasoningControls
from numi_mw.core.errors import ApiError, invalid_request, upstream_unavailable

FORMAT = "openai-responses-v1"
"""The ``format`` of OpenAI Responses reasoning details (as OpenRouter writes them)."""

SEPARATOR = "\n\n"
"""What ``message.reasoning`` (and the streamed ``delta.reasoning``) puts between two visible reasoning parts
(summary parts, reasoning texts), as most Responses clients do: OpenAI's summary parts each start with a bold
title and end without a line break, so that joined without one they run together (``...safely.**Title**``)."""

ENCRYPTED_INCLUDE = "reasoning.encrypted_content"
"""The ``include`` entry that makes a stateless (``store: false``) answer carry its reasoning state."""

INCOMPLETE_REASONS: dict[str, str] = {"max_output_tokens": "length", "content_filter": "content_filter"}
"""``incomplete_details.reason`` → chat ``finish_reason`` (an unknown or missing one becomes ``length``: the
answer was cut short)."""

PASSED: frozenset[str] = frozenset(
    (
        "temperature",
        "top_p",
        "parallel_tool_calls",
        "user",
        "metadata",
        "store",
        "include",
        "service_tier",
        "truncation",
        "previous_response_id",
        "text",
        "prompt_cache_key",
        "prompt_cache_retention",
        "safety_identifier",
        "max_tool_calls",
        "top_logprobs",
        "background",
        "background_options",
        "conversation",
        "prompt",
        "context_management",
        "prompt_cache_options",
        "moderation",
        "access_programs",
    )
)
"""Request fields that mean the same on both wire APIs, or exist only on Responses (OpenAI's API reference,
``POST /v1/responses``), and pass as they are."""

WRITTEN: frozenset[str] = frozenset(("instructions", "max_output_tokens"))
"""Responses' own fields the translation writes from chat fields (system and developer messages, ``max_tokens``):
a client's own passes when the translation wrote none, and is reported dropped when it did (the chat form wins)."""

CONSUMED: frozenset[str] = frozenset(
    (
        "model",
        "messages",
        "max_tokens",
        "max_completion_tokens",
        "stream",
        "stream_options",
        "tools",
        "tool_choice",
        "response_format",
        "verbosity",
        "reasoning",
        "reasoning_effort",
        "include_reasoning",
    )
)
"""Chat fields the translation reads and writes in the Responses form."""

_CONTROL_KEYS = frozenset(("effort", "enabled", "exclude", "max_tokens"))
"""The attributes of a chat ``reasoning`` object that are controls, not Responses ``reasoning`` attributes."""

_EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}

_encode = msgspec.json.Encoder().encode


# --- request ---------------------------------------------------------------------------------------------------


def translate(data: dict[str, Any], controls: ReasoningControls, facts: RequestFacts) -> Translation:
    """A prepared chat completions body as an OpenAI Responses request.

    ``data`` has been through the request pipeline with the ``object`` controls form: its controls are the folded
    ``reasoning`` object, whose attributes beyond the controls (Responses' own ``summary``) pass.
    ``controls`` are the folded controls.

    - Messages become input items (``_input``): the leading system and developer messages ``instructions``,
      everything else ``message``, ``function_call`` and ``function_call_output`` items, with the replayed
      reasoning items first in their assistant turn (``_reasoning_items``).
    - ``reasoning``: ``{"effort": E, "summary": "auto"}`` when the request has controls and reasoning is on (no
      ``effort`` for the model's default level), ``{"effort": "none"}`` when off, no ``summary`` with
      ``exclude``; no object without controls (the model's default). Other attributes of a kept ``reasoning``
      object pass (a client's ``summary`` replaces ``"auto"``); ``max_tokens`` has no Responses counterpart and
      is reported dropped (``reasoning.max_tokens``).
    - ``include: ["reasoning.encrypted_content"]`` when the client sent no ``include`` and reasoning can come
      back (not off, not excluded): it carries the state the replay needs. Not added when reasoning is off or
      excluded, where it would carry nothing the client gets, because OpenAI refuses it for models that do not
      reason ("Encrypted content is not supported with this model"); a client of such a model without
      reasoning controls sends ``include: []``. ``store: false`` when the client sent no ``store``: chat
      completions store nothing by default, Responses does, and the replay is stateless.
    - ``max_output_tokens``: ``max_tokens`` or ``max_completion_tokens``, the smaller when both are sent.
    - Fields with no Responses counterpart (``n``, ``stop``, ``seed``, ``logprobs``, the penalties, ...) are
      dropped and reported as ``parameters-dropped=a+b`` (sorted; ``null`` values are not reported).

    Returns:
        The ``Translation``: the native body and the adjustments (``parameters-dropped``,
        ``unsigned-reasoning-dropped``, ``foreign-reasoning-dropped``, ``duplicate-reasoning-dropped``).

    Raises:
        ApiError: 400 ``invalid_request`` for a message numi_mw cannot translate (a message or content part that
            is not an object, content of the wrong type, a tool call without a function), naming its path.
    """
    counts = {"unsigned-reasoning-dropped": 0, "foreign-reasoning-dropped": 0, "duplicate-reasoning-dropped": 0}
    dropped = [
        key
        for key, value in data.items()
        if key not in PASSED and key not in CONSUMED and key not in WRITTEN and value is not None
    ]
    instructions, items = _input(data.get("messages"), counts)
    body: dict[str, Any] = {"model": data.get("model")}
    if instructions is not None:
        body["instructions"] = instructions
    body["input"] = items
    limit = output_limit(data)
    if limit is not None:
        body["max_output_tokens"] = limit
    stream = data.get("stream") is True
    stream_options = data.get("stream_options")
    if stream:
        body["stream"] = True
        if isinstance(stream_options, dict) and "include_obfuscation" in stream_options:
            body["stream_options"] = {"include_obfuscation": stream_options["include_obfuscation"]}
    tools = _tools(data.get("tools"))
    if tools is not None:
        body["tools"] = tools
    tool_choice = _tool_choice(data.get("tool_choice"))
    if tool_choice is not None:
        body["tool_choice"] = tool_choice
    for key, value in data.items():
        if value is None:
            continue
        if key in PASSED:
            body[key] = value
        elif key in WRITTEN:
            if key in body:
                dropped.append(key)
            else:
                body[key] = value
    _text(body, data)
    reasoning = _reasoning(data.get("reasoning"), controls, dropped)
    if reasoning is not None:
        body["reasoning"] = reasoning
    if "include" not in body and not controls.off and not controls.exclude:
        body["include"] = [ENCRYPTED_INCLUDE]
    if "store" not in body:
        body["store"] = False
    adjustments: list[str] = []
    if dropped:
        adjustments.append("parameters-dropped=" + "+".join(sorted(dropped)))
    for name, count in counts.items():
        if count:
            adjustments.append(f"{name}={count}")
    include_usage = isinstance(stream_options, dict) and stream_options.get("include_usage") is True
    model = data.get("model")
    return Translation(
        wire_api="openai-responses",
        body=body,
        adjustments=adjustments,
        model=model if isinstance(model, str) else None,
        stream=stream,
        include_usage=include_usage,
    )


def _reasoning(obj: Any, controls: ReasoningControls, dropped: list[str]) -> dict[str, Any] | None:
    """The Responses ``reasoning`` object for the controls (see ``translate``), or ``None`` for none."""
    if not controls.present:
        return None
    out: dict[str, Any] = {}
    if controls.off:
        out["effort"] = "none"
    elif controls.effort is not None:
        out["effort"] = controls.effort
    shown = not controls.off and not controls.exclude
    extra: dict[str, Any] = {}
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key == "max_tokens":
                if value is not None:
                    dropped.append("reasoning.max_tokens")
            elif key not in _CONTROL_KEYS and value is not None:
                extra[key] = value
    if shown and "summary" not in extra and "generate_summary" not in extra:
        out["summary"] = "auto"
    if not shown:
        extra.pop("summary", None)
        extra.pop("generate_summary", None)
    out.update(extra)
    return out or None


def _input(raw: Any, counts: dict[str, int]) -> tuple[str | None, list[dict[str, Any]]]:
    """(``instructions``, ``input``) for the chat ``messages``.

    The leading system and developer messages whose content is text become ``instructions`` (joined with a
    blank line; the Responses field is one string); later ones stay ``system``/``developer`` input messages in
    place. User messages become ``message`` items (``input_text``/``input_image``/``input_file`` parts),
    assistant messages their reasoning items, an ``output_text`` message and ``function_call`` items, tool
    messages ``function_call_output`` items. Every message item carries ``type: "message"`` (llama-server
    refuses an assistant item without it).
    """
    items: list[dict[str, Any]] = []
    instructions: list[str] = []
    if not isinstance(raw, list):
        return None, items
    seen: set[str] = set()
    leading = True
    for i, message in enumerate(raw):
        path = f"messages[{i}]"
        if not isinstance(message, dict):
            raise invalid_request(f"{path} must be a message object.", path)
        role = message.get("role")
        if role in ("system", "developer") and leading:
            text = _plain_text(message.get("content"))
            if text is not None:
                if text:
                    instructions.append(text)
                continue
        leading = False
        if role == "assistant":
            items.extend(_assistant(message, path, counts, seen))
        elif role == "tool":
            items.append(_tool_output(message, path))
        else:
            content = _input_content(message.get("content"), f"{path}.content")
            items.append({"type": "message", "role": role, "content": content})
    return ("\n\n".join(instructions) if instructions else None), items


def _plain_text(content: Any) -> str | None:
    """The text of a system message's content when it is text only (a string, or text parts joined), else
    ``None``."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    texts: list[str] = []
    for part in content:
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            return None
        texts.append(part["text"])
    return "".join(texts)


def _input_content(content: Any, path: str) -> Any:
    """Chat content of a user, system or developer message as Responses content: a string as it is (``""`` for
    none), a list as input parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return [_input_part(part) for part in content_parts(content, path)]


def _input_part(part: dict[str, Any]) -> Any:
    """One chat content part as a Responses input part: ``text`` → ``input_text``, ``image_url`` →
    ``input_image`` (the URL as a string, ``detail`` as sent or ``"auto"``, which Responses requires), ``file``
    → ``input_file``; anything else (``input_audio``, Responses' own parts) passes as it is."""
    kind = part.get("type")
    if kind == "text":
        return {"type": "input_text", "text": part.get("text")}
    if kind == "image_url":
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
        detail = image.get("detail") if isinstance(image, dict) else None
        return {"type": "input_image", "image_url": url, "detail": detail if detail is not None else "auto"}
    if kind == "file" and isinstance(part.get("file"), dict):
        file = part["file"]
        out: dict[str, Any] = {"type": "input_file"}
        out.update((key, file[key]) for key in ("file_id", "file_data", "filename") if key in file)
        return out
    return part


def _assistant(message: dict[str, Any], path: str, counts: dict[str, int], seen: set[str]) -> list[dict[str, Any]]:
    """An assistant message as input items: its reasoning items, then its text (and ``refusal``) as one
    ``message`` item of ``output_text`` parts, then one ``function_call`` item per tool call (the order of a
    Responses answer's own output)."""
    items = _reasoning_items(message, counts, seen)
    parts = _output_parts(message.get("content"), f"{path}.content")
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal:
        parts.append({"type": "refusal", "refusal": refusal})
    if parts:
        items.append({"type": "message", "role": "assistant", "content": parts})
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        items.extend(_function_call(call, f"{path}.tool_calls[{j}]") for j, call in enumerate(calls))
    return items


def _output_parts(content: Any, path: str) -> list[Any]:
    """Assistant content as ``output_text`` parts (always parts: OpenAI, OpenAI's own client and llama-server all
    take them); empty text is left out, ``refusal`` and other parts pass as they are."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "output_text", "text": content}] if content else []
    parts: list[Any] = []
    for part in content_parts(content, path):
        if part.get("type") == "text":
            text = part.get("text")
            if text != "":
                parts.append({"type": "output_text", "text": text})
        else:
            parts.append(part)
    return parts


def _function_call(call: Any, path: str) -> dict[str, Any]:
    """A chat tool call as a ``function_call`` item: ``call_id`` is the chat call's ``id`` and the arguments stay
    a JSON string (an object is encoded; none or ``""`` becomes ``"{}"``, what OpenAI sends for no arguments).
    No item ``id``: the chat call has none, and OpenAI's own stateless client sends none either."""
    function = call_function(call, path)
    arguments = function.get("arguments")
    if arguments is None or arguments == "":
        arguments = "{}"
    elif not isinstance(arguments, str):
        arguments = _encode(arguments).decode()
    return {"type": "function_call", "call_id": call.get("id"), "name": function.get("name"), "arguments": arguments}


def _tool_output(message: dict[str, Any], path: str) -> dict[str, Any]:
    """A tool message as a ``function_call_output`` item: string content as it is (``""`` for none), a list of
    parts as input parts."""
    content = message.get("content")
    output = _input_content(content, f"{path}.content")
    return {"type": "function_call_output", "call_id": message.get("tool_call_id"), "output": output}


@dataclass(slots=True)
class _Group:
    """The details of one reasoning item, gathered for the replay.

    Attributes:
        id: the item id (from the encrypted detail, or from a streamed summary part's first fragment).
        summary: the summary parts' texts.
        texts: the reasoning texts (``reasoning_text`` content).
        encrypted: the encrypted state.
        details: how many details went into the group (for the count when it is dropped).
    """

    id: str | None = None
    summary: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    encrypted: str | None = None
    details: int = 0

    def item(self) -> dict[str, Any] | None:
        """The reasoning input item, or ``None`` when the group holds nothing the upstream can take."""
        summary = [{"type": "summary_text", "text": text} for text in self.summary if text]
        if self.encrypted is not None:
            out: dict[str, Any] = {"type": "reasoning"}
            if self.id is not None:
                out["id"] = self.id
            out["encrypted_content"] = self.encrypted
            out["summary"] = summary
            return out
        if self.texts:
            content = [{"type": "reasoning_text", "text": text} for text in self.texts]
            return {"type": "reasoning", "summary": summary, "content": content}
        return None


def _reasoning_items(message: dict[str, Any], counts: dict[str, int], seen: set[str]) -> list[dict[str, Any]]:
    """The reasoning input items an assistant message's details carry back (spec 004 "Preserve reasoning across
    turns"), in their order.

    Only details of format ``openai-responses-v1`` (or none) count. A ``reasoning.encrypted`` detail closes one
    item: it takes the summaries with its ``id`` (streamed ones) or, for details without one, the summaries and
    reasoning texts just before it. A summary detail without ``id`` is one summary part (a buffered answer's,
    OpenRouter's), except after a streamed part's opener: a stream's rebuild keeps every summary fragment as a
    detail of its own (spec 004 "From a stream", rule 4), and ``StreamTranslator`` puts the item ``id`` on the
    fragment that opens a part only, after ``SEPARATOR`` when visible reasoning came before it (removed here),
    so the fragments without ``id`` that follow it are joined back to it (reasoning texts just before a part's
    opener belong to its item). Reasoning texts with no encrypted detail after them make an item of
    ``reasoning_text`` content with ``summary: []`` (DeepSeek, LM Studio, llama-server). The item keeps its
    ``id``; ``content`` is not sent beside encrypted state (OpenAI's own client leaves it out).

    Counted and left out: details of another format, of an unknown type or not objects, and encrypted details
    without data (``foreign-reasoning-dropped``); plain reasoning (``reasoning.text`` of format ``unknown``, and
    ``reasoning`` / ``reasoning_content`` text on a message without details) and summaries with no encrypted
    state to go with them, which the upstream cannot take alone (``unsigned-reasoning-dropped``); an item whose
    ``id`` an earlier item of the request already had (``duplicate-reasoning-dropped``: OpenAI refuses a
    duplicate item).
    """
    details = message.get("reasoning_details")
    if not isinstance(details, list) or not details:
        count_plain_reasoning(message, counts)
        return []
    groups: list[_Group] = []
    by_id: dict[str, _Group] = {}
    pending: _Group | None = None  # the open group of details without an id
    streaming: _Group | None = None  # the group whose streamed summary part an id-less fragment continues
    first = True  # no visible reasoning detail yet: a part opened here has no SEPARATOR before it
    for detail in details:
        kind = detail.get("type") if isinstance(detail, dict) else None
        if isinstance(detail, dict) and kind == "reasoning.text" and detail.get("format") == "unknown":
            if detail.get("text"):
                counts["unsigned-reasoning-dropped"] += 1  # plain reasoning (spec 004: format unknown)
            continue
        if not isinstance(detail, dict) or detail.get("format") not in (None, FORMAT):
            counts["foreign-reasoning-dropped"] += 1
            continue
        ident = detail.get("id") if isinstance(detail.get("id"), str) and detail.get("id") else None
        if kind == "reasoning.encrypted":
            data = detail.get("data")
            if not isinstance(data, str) or not data:
                counts["foreign-reasoning-dropped"] += 1
                continue
            group = by_id.get(ident) if ident is not None else None
            if group is None or group.encrypted is not None:
                if pending is not None and pending.encrypted is None:
                    group = pending
                else:
                    group = _Group()
                    groups.append(group)
            if ident is not None:
                group.id = ident
                by_id[ident] = group
            group.encrypted = data
            group.details += 1
            pending = streaming = None
            continue
        if kind not in ("reasoning.summary", "reasoning.text"):
            counts["foreign-reasoning-dropped"] += 1
            continue
        text = detail.get("text") if kind == "reasoning.text" else detail.get("summary", detail.get("text"))
        if not isinstance(text, str) or not text:
            continue
        opening = first
        first = False
        if kind == "reasoning.summary" and ident is not None:  # a streamed part opens: the item's id marks it
            group = by_id.get(ident) or pending or _Group()
            if ident not in by_id:  # its first part: the item's reasoning texts streamed before it join it
                if group is not pending:
                    groups.append(group)
                group.id = ident
                by_id[ident] = group
            pending = None
            if not opening and text.startswith(SEPARATOR):
                text = text[len(SEPARATOR) :]
            group.summary.append(text)
            streaming = group
        elif kind == "reasoning.summary" and streaming is not None and streaming.summary:
            group = streaming  # a streamed fragment goes on with the part its opener began
            group.summary[-1] += text
        else:
            if pending is None:
                pending = _Group()
                groups.append(pending)
            group = pending
            streaming = None
            (group.summary if kind == "reasoning.summary" else group.texts).append(text)
        group.details += 1
    items: list[dict[str, Any]] = []
    for group in groups:
        item = group.item()
        if item is None:
            counts["unsigned-reasoning-dropped"] += group.details
        elif group.id is not None and group.encrypted is not None and group.id in seen:
            counts["duplicate-reasoning-dropped"] += 1
        else:
            if group.id is not None and group.encrypted is not None:
                seen.add(group.id)
            items.append(item)
    return items


def _tools(tools: Any) -> list[Any] | None:
    """Chat function tools as flat Responses function tools. ``strict`` is sent always, ``false`` when the chat
    tool did not set it: Responses makes functions strict by default, chat completions does not. A function
    without ``parameters`` gets an empty object schema. Other entries (Responses' own tools, such as
    ``web_search``) pass as they are."""
    if not isinstance(tools, list):
        return None
    out: list[Any] = []
    for tool in tools:
        function = function_tool(tool)
        if function is not None:
            entry: dict[str, Any] = {"type": "function", "name": function.get("name")}
            if function.get("description") is not None:
                entry["description"] = function["description"]
            parameters = function.get("parameters")
            entry["parameters"] = parameters if isinstance(parameters, dict) else dict(_EMPTY_PARAMETERS)
            strict = function.get("strict")
            entry["strict"] = strict if isinstance(strict, bool) else False
            out.append(entry)
        else:
            out.append(tool)
    return out


def _tool_choice(choice: Any) -> Any:
    """``tool_choice``: the strings (``auto``, ``none``, ``required``) as they are; a named function
    ``{"type": "function", "function": {"name": X}}`` flat as ``{"type": "function", "name": X}``; chat's
    ``allowed_tools`` flat as Responses' (``mode`` and flat function entries); any other object (Responses'
    own forms) as it is."""
    if not isinstance(choice, dict):
        return choice
    kind = choice.get("type")
    if kind == "function" and isinstance(choice.get("function"), dict):
        return {"type": "function", "name": choice["function"].get("name")}
    if kind == "allowed_tools" and isinstance(choice.get("allowed_tools"), dict):
        allowed = choice["allowed_tools"]
        tools = allowed.get("tools")
        flat = [
            tool if (function := function_tool(tool)) is None else {"type": "function", "name": function.get("name")}
            for tool in (tools if isinstance(tools, list) else [])
        ]
        return {"type": "allowed_tools", "mode": allowed.get("mode"), "tools": flat}
    return choice


def _text(body: dict[str, Any], data: dict[str, Any]) -> None:
    """``response_format`` as ``text.format`` and ``verbosity`` as ``text.verbosity``, merged into a ``text``
    object the client sent (whose own ``format`` and ``verbosity``, Responses' native fields, win)."""
    text_format = _text_format(data.get("response_format"))
    verbosity = data.get("verbosity")
    if text_format is None and verbosity is None:
        return
    text = dict(body["text"]) if isinstance(body.get("text"), dict) else {}
    if text_format is not None and "format" not in text:
        text["format"] = text_format
    if verbosity is not None and "verbosity" not in text:
        text["verbosity"] = verbosity
    body["text"] = text


def _text_format(response_format: Any) -> Any:
    """``response_format`` as Responses' ``text.format``: a JSON schema flat (``name``, ``description``,
    ``schema``, ``strict``), ``json_object`` and ``text`` as they are named there; another value passes as it
    is (the upstream judges it)."""
    if not isinstance(response_format, dict):
        return None
    kind = response_format.get("type")
    if kind == "json_schema" and isinstance(response_format.get("json_schema"), dict):
        schema = response_format["json_schema"]
        out: dict[str, Any] = {"type": "json_schema", "name": schema.get("name")}
        if schema.get("description") is not None:
            out["description"] = schema["description"]
        out["schema"] = schema.get("schema")
        if schema.get("strict") is not None:
            out["strict"] = schema["strict"]
        return out
    if kind in ("json_object", "text"):
        return {"type": kind}
    return response_format


# --- answers ---------------------------------------------------------------------------------------------------


def usage(native: Any) -> dict[str, Any] | None:
    """Responses ``usage`` as chat usage: ``prompt_tokens`` is ``input_tokens`` (which already counts the cached
    tokens), ``completion_tokens`` is ``output_tokens`` (reasoning included), ``total_tokens`` as reported (or the
    sum), ``prompt_tokens_details.cached_tokens`` and ``completion_tokens_details.reasoning_tokens`` when the
    upstream reports them (llama-server sends no ``output_tokens_details``)."""
    if not isinstance(native, dict):
        return None

    def number(value: Any) -> int:
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    prompt = number(native.get("input_tokens"))
    completion = number(native.get("output_tokens"))
    total = native.get("total_tokens")
    out: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": number(total) if isinstance(total, int) else prompt + completion,
    }
    details = native.get("input_tokens_details")
    if isinstance(details, dict) and "cached_tokens" in details:
        out["prompt_tokens_details"] = {"cached_tokens": number(details["cached_tokens"])}
    details = native.get("output_tokens_details")
    if isinstance(details, dict) and "reasoning_tokens" in details:
        out["completion_tokens_details"] = {"reasoning_tokens": number(details["reasoning_tokens"])}
    return out


def _finish_reason(response: dict[str, Any], calls: bool, status: Any = None) -> str:
    """``incomplete`` → ``length`` or ``content_filter`` by ``incomplete_details.reason``; else ``tool_calls``
    when the answer called a function, ``stop`` otherwise."""
    if (status or response.get("status")) == "incomplete":
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        return INCOMPLETE_REASONS.get(reason, "length") if isinstance(reason, str) else "length"
    return "tool_calls" if calls else "stop"


def _failure(error: Any, what: str = "an error") -> ApiError:
    """502 ``upstream_unavailable`` carrying an upstream error's code and message."""
    if isinstance(error, dict):
        code = error.get("code")
        if code is None and error.get("type") != "error":
            code = error.get("type")
        message = error.get("message")
        if code is not None:
            return upstream_unavailable(f"The upstream reported {what}: {code}: {message}")
        if message is not None:
            return upstream_unavailable(f"The upstream reported {what}: {message}")
    return upstream_unavailable(f"The upstream reported {what} without a message.")


def _reasoning_details(item: dict[str, Any], details: list[dict[str, Any]], visible: list[str]) -> None:
    """A reasoning item's details, appended in order: its summary parts, its reasoning texts, then its encrypted
    state (an empty ``encrypted_content``, which llama-server sends, is none); each ``index`` is the detail's
    position. Empty texts make no detail."""
    summary = item.get("summary")
    for part in summary if isinstance(summary, list) else []:
        text = part.get("text") if isinstance(part, dict) else None
        if isinstance(text, str) and text:
            details.append({"type": "reasoning.summary", "summary": text, "format": FORMAT, "index": len(details)})
            visible.append(text)
    content = item.get("content")
    for part in content if isinstance(content, list) else []:
        if isinstance(part, dict) and part.get("type") == "reasoning_text":
            text = part.get("text")
            if isinstance(text, str) and text:
                details.append({"type": "reasoning.text", "text": text, "format": FORMAT, "index": len(details)})
                visible.append(text)
    encrypted = item.get("encrypted_content")
    if isinstance(encrypted, str) and encrypted:
        detail: dict[str, Any] = {"type": "reasoning.encrypted", "data": encrypted}
        if isinstance(item.get("id"), str):
            detail["id"] = item["id"]
        detail["format"] = FORMAT
        detail["index"] = len(details)
        details.append(detail)


def _call(item: dict[str, Any]) -> dict[str, Any]:
    """A ``function_call`` item as a chat tool call: its ``id`` is the ``call_id`` (the one a tool result
    names), not the item id."""
    arguments = item.get("arguments")
    return {
        "id": item.get("call_id"),
        "type": "function",
        "function": {"name": item.get("name"), "arguments": arguments if isinstance(arguments, str) else "{}"},
    }


UNFINISHED = frozenset(("queued", "in_progress", "cancelled"))
"""Statuses of a Responses ``Response`` that is not an answer (OpenAI API reference, "The response object":
``background`` requests answer at once with ``queued``; ``cancelled`` ends one): no chat completion carries them."""


def completion(native: Any, answer: Answer) -> dict[str, Any]:
    """An OpenAI Responses ``Response`` as a chat completion (spec 004 "Response fields").

    ``message.content`` is the ``output_text`` of the message items (``None`` when there is none),
    ``message.refusal`` their refusals, ``tool_calls`` the ``function_call`` items, ``reasoning`` and
    ``reasoning_details`` the reasoning items (``_reasoning_details``; ``reasoning`` only when there is visible
    text). Other items (server tools such as ``web_search_call``) have no chat field. ``created`` is the shell's
    clock (``answer.created``), as in a translated stream.

    Raises:
        ApiError: 502 ``upstream_unavailable`` for a ``failed`` response (its error's code and message kept), for
            one that is not finished (``UNFINISHED``: a ``background`` request's answer) and for a body that is not
            a Response.
    """
    if isinstance(native, dict) and native.get("status") == "failed":
        raise _failure(native.get("error"))
    if isinstance(native, dict) and isinstance(native.get("status"), str) and native["status"] in UNFINISHED:
        raise upstream_unavailable(
            f"The upstream's Responses answer is not finished (status {native['status']!r}), and a chat completion "
            "cannot carry one that is not: send the request without background."
        )
    if not isinstance(native, dict) or not isinstance(native.get("output"), list):
        raise upstream_unavailable(
            "The upstream's answer is not an OpenAI Responses response; numi_mw cannot translate it."
        )
    texts: list[str] = []
    refusals: list[str] = []
    visible: list[str] = []
    details: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for item in native["output"]:
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "message" and isinstance(item.get("content"), list):
            for part in item["content"]:
                if not isinstance(part, dict):
                    continue
                if part.get("type") == "output_text" and isinstance(part.get("text"), str):
                    texts.append(part["text"])
                elif part.get("type") == "refusal" and isinstance(part.get("refusal"), str):
                    refusals.append(part["refusal"])
        elif kind == "function_call":
            calls.append(_call(item))
        elif kind == "reasoning":
            _reasoning_details(item, details, visible)
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    if refusals:
        message["refusal"] = "".join(refusals)
    if visible:
        message["reasoning"] = SEPARATOR.join(visible)
    if details:
        message["reasoning_details"] = details
    if calls:
        message["tool_calls"] = calls
    return chat_completion(native, answer, message, _finish_reason(native, bool(calls)), usage(native.get("usage")))


MAX_PART_RUNS: Final = 16
"""Of each kind of part of one output item (summary, reasoning text, content, refusal), how many runs of
consecutive part indexes with deltas a stream translator remembers (``_Parts``). Parts stream in order, so a run
per kind is the rule (a million parts of one item are one run); past 16 runs, the lowest is forgotten and the
``.done`` text of its parts, in the item's ``response.output_item.done``, goes out again (nothing is lost;
``docs/streaming.md``, "Streams"). The same bound holds part indexes that are no integers, the last 16 kept."""


class _Parts:
    """The parts of one output item that had deltas (or whose ``.done`` text went out), as ``(kind, index)`` keys:
    integer indexes as runs ``[start, end)`` per kind, other keys by recency, each bounded by ``MAX_PART_RUNS``."""

    __slots__ = ("_other", "_runs")

    def __init__(self) -> None:
        self._runs: dict[str, list[list[int]]] = {}  # kind -> runs, sorted, disjoint and not touching
        self._other: dict[tuple[str, Any], None] = {}  # keys with an index that is no integer, oldest first

    def __contains__(self, key: tuple[str, Any]) -> bool:
        kind, index = key
        if type(index) is not int:
            return key in self._other
        return any(start <= index < end for start, end in self._runs.get(kind, ()))

    def add(self, key: tuple[str, Any]) -> bool:
        """Remember ``key``; whether it is new (not remembered before). Past ``MAX_PART_RUNS`` the lowest run of
        its kind (or the oldest other key) is forgotten."""
        kind, index = key
        if type(index) is not int:
            if key in self._other:
                return False
            self._other[key] = None
            if len(self._other) > MAX_PART_RUNS:
                del self._other[next(iter(self._other))]
            return True
        runs = self._runs.setdefault(kind, [])
        if runs:  # the common cases: the part of the latest run, or the next part in order
            last = runs[-1]
            if last[0] <= index < last[1]:
                return False
            if last[1] == index:
                last[1] = index + 1
                return True
        at = 0
        while at < len(runs) and runs[at][1] < index:
            at += 1
        if at < len(runs) and runs[at][0] <= index < runs[at][1]:
            return False
        if at < len(runs) and runs[at][1] == index:  # it extends a run, which may now touch the next one
            runs[at][1] = index + 1
            if at + 1 < len(runs) and runs[at + 1][0] == index + 1:
                runs[at][1] = runs.pop(at + 1)[1]
        elif at < len(runs) and runs[at][0] == index + 1:  # it extends the next run downward
            runs[at][0] = index
        else:
            runs.insert(at, [index, index + 1])
        if len(runs) > MAX_PART_RUNS:
            del runs[0]
        return True


@dataclass(slots=True)
class _Item:
    """One output item of a stream.

    Attributes:
        kind: the item ``type`` (``reasoning``, ``message``, ``function_call``, ...).
        id: the item id, when known.
        position: its ``output_index`` (or its ordinal, for servers that send none): the ``index`` of its details.
        call: its ordinal among the function calls (``tool_calls[].index``), once announced; ``-1`` before.
        streamed: the parts that had deltas, as ``(kind, index)``: ``("summary", j)``, ``("text", j)``
            (reasoning text), ``("content", j)``, ``("refusal", j)``, ``("arguments", 0)``; their ``.done`` text
            is then not sent again (``_Parts``: bounded by ``MAX_PART_RUNS``).
        encrypted: its encrypted state was sent.
        done: its ``response.output_item.done`` came.
    """

    kind: Any
    id: str | None
    position: int
    call: int = -1
    streamed: _Parts = field(default_factory=_Parts)
    encrypted: bool = False
    done: bool = False


class StreamTranslator(ChunkStream):
    """OpenAI Responses stream events in, chat completion chunks out (spec 004 "Streaming"); one per stream.

    Items are tracked by ``item_id``, else by ``output_index`` (llama-server sends no ``output_index``, no
    ``sequence_number``). A summary or reasoning-text fragment goes out as ``delta.reasoning`` plus one
    ``reasoning.summary`` (``summary``; the item ``id`` on a part's first fragment) or ``reasoning.text``
    (``text``) entry with the same text, ``SEPARATOR`` first when it opens a part after earlier visible reasoning
    (as in ``completion``); encrypted
    state, taken only from ``response.output_item.done`` (the one in ``.added`` may be partial), as one
    ``reasoning.encrypted`` entry; text as ``delta.content``, refusals as ``delta.refusal``, function calls as
    ``delta.tool_calls`` (announced at ``.added`` with ``id`` = ``call_id``, then argument deltas). A part with no
    deltas sends its ``.done`` text once (LM Studio streams no arguments; an o3 stream has its message only in
    ``output_item.done``), never both (within ``MAX_PART_RUNS``); items the terminal response holds that never had
    their ``.done`` are sent from it. ``response.completed`` / ``response.incomplete`` end the stream: a finish
    chunk with an empty delta, then a usage chunk when the request asked for one and the upstream reported usage.
    """

    __slots__ = ("_by_id", "_by_index", "_calls", "_items", "_started", "_visible")

    def __init__(self, answer: Answer) -> None:
        super().__init__(answer)
        self._started = False
        self._visible = False  # visible reasoning went out: the next part opens with SEPARATOR
        self._by_id: dict[str, _Item] = {}
        self._by_index: dict[int, _Item] = {}
        self._items = 0
        self._calls = 0

    def event(self, data: Any) -> list[dict[str, Any]]:
        """The chat chunks for one event (``response.*`` events and ``error``; unknown events make none).

        Raises:
            ApiError: 502 ``upstream_unavailable`` for ``response.failed`` and ``error`` events (llama-server's
                ``{"error": {...}}`` without a type too), their code and message kept.
        """
        if not isinstance(data, dict) or self.done:
            return []
        kind = data.get("type")
        out = self._dispatch(kind, data)  # first: the deltas, most of a stream's events
        if out:
            return out if self._started else self._begin() + out
        if kind in ("response.created", "response.in_progress", "response.queued"):
            response = data.get("response")
            if isinstance(response, dict) and not self._started:
                self._id = response.get("id")
                self._model = response.get("model") or self.answer.model
            return self._begin()
        if kind == "error" or (kind is None and "error" in data):
            raise _failure(data.get("error") if isinstance(data.get("error"), dict) else data, "an error")
        if kind == "response.failed":
            response = data.get("response")
            raise _failure(response.get("error") if isinstance(response, dict) else None, "a failed response")
        return out

    def _begin(self) -> list[dict[str, Any]]:
        if self._started:
            return []
        self._started = True
        return [self._chunk({"role": "assistant", "content": ""})]

    def _dispatch(self, kind: Any, data: dict[str, Any]) -> list[dict[str, Any]]:
        if kind == "response.reasoning_summary_text.delta":
            return self._reasoning(self._state(data, "reasoning"), "summary", data.get("summary_index"), data, True)
        if kind == "response.reasoning_text.delta":
            return self._reasoning(self._state(data, "reasoning"), "text", data.get("content_index"), data, True)
        if kind == "response.output_text.delta":
            return self._content(self._state(data, "message"), "content", data.get("content_index"), data, True)
        if kind == "response.function_call_arguments.delta":
            return self._arguments(self._state(data, "function_call"), data.get("delta"), True)
        if kind == "response.output_item.added":
            return self._added(data)
        if kind == "response.output_item.done":
            return self._item_done(data, data.get("item"))
        if kind == "response.reasoning_summary_text.done":
            return self._reasoning(self._state(data, "reasoning"), "summary", data.get("summary_index"), data, False)
        if kind == "response.reasoning_summary_part.done":
            part = data.get("part")
            state = self._state(data, "reasoning")
            return self._reasoning(state, "summary", data.get("summary_index"), part, False)
        if kind == "response.reasoning_text.done":
            return self._reasoning(self._state(data, "reasoning"), "text", data.get("content_index"), data, False)
        if kind == "response.output_text.done":
            return self._content(self._state(data, "message"), "content", data.get("content_index"), data, False)
        if kind == "response.refusal.delta":
            return self._content(self._state(data, "message"), "refusal", data.get("content_index"), data, True)
        if kind == "response.refusal.done":
            return self._content(self._state(data, "message"), "refusal", data.get("content_index"), data, False)
        if kind == "response.content_part.done":
            return self._part_done(data)
        if kind == "response.function_call_arguments.done":
            return self._arguments(self._state(data, "function_call"), data.get("arguments"), False)
        if kind in ("response.completed", "response.incomplete"):
            return self._terminal(kind, data.get("response"))
        return []

    def _state(self, data: dict[str, Any], kind: str, item: Any = None) -> _Item:
        """The item an event belongs to, by ``item_id`` (or the item's own ``id``), else by ``output_index``;
        a new one (of ``kind``) when it is unknown."""
        ident = item.get("id") if isinstance(item, dict) else data.get("item_id")
        state = None
        if isinstance(ident, str):
            state = self._by_id.get(ident)
            if state is not None:  # the common case: an item known by its id, kept under it
                return state
        index = data.get("output_index")
        index = index if isinstance(index, int) and not isinstance(index, bool) else None
        if index is not None:
            state = self._by_index.get(index)
        if state is None:
            state = _Item(kind, ident if isinstance(ident, str) else None, index if index is not None else self._items)
            self._items += 1
            if index is not None:
                remember(self._by_index, index, state)
        if state.id is None and isinstance(ident, str):
            state.id = ident
        if state.id is not None and state.id not in self._by_id:
            remember(self._by_id, state.id, state)
        return state

    def _reasoning(self, state: _Item, part: str, index: Any, source: Any, delta: bool) -> list[dict[str, Any]]:
        """A summary (``part`` ``summary``) or reasoning-text (``text``) fragment: from a delta event, or the
        ``.done`` text of a part that had no deltas (``source`` is the event or the part)."""
        text = (source.get("delta") if delta else source.get("text")) if isinstance(source, dict) else None
        key = (part, event_index(index) if index is not None else 0)
        if not isinstance(text, str) or not text or (not delta and key in state.streamed):
            return []
        opening = state.streamed.add(key)
        if opening and self._visible:
            text = SEPARATOR + text
        self._visible = True
        entry: dict[str, Any]
        if part == "summary":
            entry = {"type": "reasoning.summary", "summary": text}
            if opening and state.id is not None:  # marks where a part opens, for the replay
                entry["id"] = state.id
        else:
            entry = {"type": "reasoning.text", "text": text}
        entry["format"] = FORMAT
        entry["index"] = state.position
        return [self._chunk({"reasoning": text, "reasoning_details": [entry]})]

    def _content(self, state: _Item, part: str, index: Any, source: Any, delta: bool) -> list[dict[str, Any]]:
        """Message text (``part`` ``content``) or a refusal (``refusal``): a delta, or the ``.done`` text of a part
        that had no deltas (``source`` is the event or the part)."""
        text = None
        if isinstance(source, dict):
            text = source.get("delta") if delta else source.get("text" if part == "content" else "refusal")
        key = (part, event_index(index) if index is not None else 0)
        if not isinstance(text, str) or not text or (not delta and key in state.streamed):
            return []
        state.streamed.add(key)
        return [self._chunk({part: text})]

    def _announce(self, state: _Item, item: dict[str, Any]) -> list[dict[str, Any]]:
        """A function call's first chunk (``id`` = ``call_id``, its name, the arguments ``.added`` already holds
        or ``""``)."""
        state.call = self._calls
        self._calls += 1
        arguments = item.get("arguments")
        if isinstance(arguments, str) and arguments:
            state.streamed.add(("arguments", 0))
        else:
            arguments = ""
        function = {"name": item.get("name"), "arguments": arguments}
        call = {"index": state.call, "id": item.get("call_id"), "type": "function", "function": function}
        return [self._chunk({"tool_calls": [call]})]

    def _arguments(self, state: _Item, arguments: Any, delta: bool) -> list[dict[str, Any]]:
        """Argument text of an announced call: a delta, or the whole arguments of a call that had no deltas.
        Deltas of a call never announced wait for its ``output_item.done``."""
        if state.call < 0 or not isinstance(arguments, str) or not arguments:
            return []
        if not delta and ("arguments", 0) in state.streamed:
            return []
        state.streamed.add(("arguments", 0))
        return [self._chunk({"tool_calls": [{"index": state.call, "function": {"arguments": arguments}}]})]

    def _added(self, data: dict[str, Any]) -> list[dict[str, Any]]:
        item = data.get("item")
        if not isinstance(item, dict):
            return []
        state = self._state(data, str(item.get("type")), item)
        if item.get("type") == "function_call" and state.call < 0:
            return self._announce(state, item)
        return []  # a reasoning item's encrypted_content here may be partial: it is taken at .done

    def _part_done(self, data: dict[str, Any]) -> list[dict[str, Any]]:
        part = data.get("part")
        if not isinstance(part, dict):
            return []
        kind = part.get("type")
        index = data.get("content_index")
        if kind == "output_text":
            return self._content(self._state(data, "message"), "content", index, part, False)
        if kind == "refusal":
            return self._content(self._state(data, "message"), "refusal", index, part, False)
        if kind == "reasoning_text":
            return self._reasoning(self._state(data, "reasoning"), "text", index, part, False)
        return []

    def _item_done(self, data: dict[str, Any], item: Any) -> list[dict[str, Any]]:
        """An item's ``.done``: the text, arguments and summaries that had no deltas, then a reasoning item's
        encrypted state."""
        if not isinstance(item, dict):
            return []
        kind = item.get("type")
        state = self._state(data, str(kind), item)
        if state.done:
            return []
        state.done = True
        out: list[dict[str, Any]] = []
        if kind == "reasoning":
            summary = item.get("summary")
            for j, part in enumerate(summary if isinstance(summary, list) else []):
                if isinstance(part, dict):
                    out += self._reasoning(state, "summary", j, part, False)
            content = item.get("content")
            for j, part in enumerate(content if isinstance(content, list) else []):
                if isinstance(part, dict) and part.get("type") == "reasoning_text":
                    out += self._reasoning(state, "text", j, part, False)
            encrypted = item.get("encrypted_content")
            if isinstance(encrypted, str) and encrypted and not state.encrypted:
                state.encrypted = True
                entry: dict[str, Any] = {"type": "reasoning.encrypted", "data": encrypted}
                if state.id is not None:
                    entry["id"] = state.id
                entry["format"] = FORMAT
                entry["index"] = state.position
                out.append(self._chunk({"reasoning_details": [entry]}))
        elif kind == "message":
            content = item.get("content")
            for j, part in enumerate(content if isinstance(content, list) else []):
                if isinstance(part, dict) and part.get("type") == "output_text":
                    out += self._content(state, "content", j, part, False)
                elif isinstance(part, dict) and part.get("type") == "refusal":
                    out += self._content(state, "refusal", j, part, False)
        elif kind == "function_call":
            if state.call < 0:
                return self._announce(state, item)
            out += self._arguments(state, item.get("arguments"), False)
        return out

    def _terminal(self, kind: Any, response: Any) -> list[dict[str, Any]]:
        """``response.completed`` / ``response.incomplete``: the items that never had their ``.done``, the finish
        chunk and the usage chunk."""
        if not isinstance(response, dict):
            response = {}
        out: list[dict[str, Any]] = []
        output = response.get("output")
        for position, item in enumerate(output if isinstance(output, list) else []):
            if isinstance(item, dict):
                out += self._item_done({"output_index": position}, item)
        status = response.get("status") or ("incomplete" if kind == "response.incomplete" else "completed")
        self.done = True
        out.append(self._chunk({}, _finish_reason(response, self._calls > 0, status)))
        translated = usage(response.get("usage"))
        if self.answer.include_usage and translated is not None:
            out.append({**out[-1], "choices": [], "usage": translated})
        return out

    def finish(self) -> list[dict[str, Any]]:
        """End of the upstream body.

        Raises:
            ApiError: 502 ``upstream_unavailable`` when the stream ended before ``response.completed`` (or
                ``response.incomplete``).
        """
        if not self.done:
            raise upstream_unavailable(
                "The upstream stream ended before its response.completed event; the answer is incomplete."
            )
        return []


def error_body(native: Any) -> dict[str, Any] | None:
    """OpenAI's error bodies are the OpenAI-style error body already: passed unchanged."""
    return None


ADAPTER = WireAdapter(
    wire_api="openai-responses",
    path="/responses",
    controls_form="object",
    replay="details",
    default_max_tokens=None,
    headers=(),
    api_key_header="authorization",
    translate=translate,
    completion=completion,
    stream=StreamTranslator,
    error=error_body,
)
