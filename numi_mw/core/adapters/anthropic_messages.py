"""The Anthropic Messages adapter: chat completions requests to ``POST /v1/messages`` and its answers back.

Sources: Anthropic's Messages API reference (request fields, content blocks, ``thinking``, stream events,
``stop_reason``, ``usage``), its extended-thinking guide (thinking blocks in history, sampling with thinking),
spec 004 "Preserve reasoning across turns" and "Output limits and billing", spec 000 "Provider-Specific
Handling". ``docs/wire-apis.md`` has the tables.

Reasoning crosses the wire in both directions without loss:

- out: ``reasoning.text`` details with a signature become ``thinking`` blocks (text and signature verbatim),
  Anthropic-format ``reasoning.encrypted`` details become ``redacted_thinking`` blocks, first in their turn and
  in their order. Unsigned text and another provider's opaque state cannot be sent as thinking: they are left
  out and counted in the adjustments.
- back: ``thinking`` becomes ``reasoning`` plus a ``reasoning.text`` detail (format ``anthropic-claude-v1``,
  signature kept), ``redacted_thinking`` a ``reasoning.encrypted`` detail.
"""

from __future__ import annotations

from typing import Any

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
from numi_mw.core.fields import THINKING_BLOCKS

FORMAT = "anthropic-claude-v1"
"""The ``format`` of Anthropic's reasoning details (as OpenRouter writes them)."""

VERSION = "2023-06-01"
"""The ``anthropic-version`` header sent when the client sends none (Anthropic's current API version)."""

DEFAULT_MAX_TOKENS = 4096
"""``max_tokens`` when the chat request gives no output limit (Anthropic requires one; LiteLLM and llama.cpp
default to the same)."""

FINISH_REASONS: dict[str, str] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
"""``stop_reason`` → chat ``finish_reason`` (an unknown one becomes ``stop``)."""

PASSED: frozenset[str] = frozenset(
    (
        "top_k",
        "container",
        "context_management",
        "mcp_servers",
        "output_config",
        "inference_geo",
        "thinking",
        "temperature",
        "top_p",
        "cache_control",
        "speed",
        "diagnostics",
        "user_profile_id",
        "workspace_id",
    )
)
"""Request fields that mean the same on both wire APIs, or exist only on Anthropic's (its Messages API reference,
``POST /v1/messages``), and pass as they are."""

WRITTEN: frozenset[str] = frozenset(("system", "stop_sequences"))
"""Anthropic's own fields the translation writes from chat fields (system messages, ``stop``): a client's own
passes when the translation wrote none, and is reported dropped when it did (the chat form wins)."""

CONSUMED: frozenset[str] = frozenset(
    (
        "model",
        "messages",
        "max_tokens",
        "max_completion_tokens",
        "stop",
        "stream",
        "stream_options",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "user",
        "response_format",
        "reasoning",
        "reasoning_effort",
        "metadata",
        "service_tier",
    )
)
"""Chat fields the translation reads and writes in Anthropic's form."""

SERVICE_TIERS = frozenset(("auto", "standard_only"))
"""Anthropic's ``service_tier`` values; OpenAI's (``default``, ``flex``, ...) mean nothing there."""

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


# --- request ---------------------------------------------------------------------------------------------------


def translate(data: dict[str, Any], controls: ReasoningControls, facts: RequestFacts) -> Translation:
    """A prepared chat completions body as an Anthropic Messages request.

    ``data`` has been through the request pipeline with the ``anthropic-thinking`` controls form, so its
    ``thinking`` object (if any) is Anthropic's already, and its ``max_tokens`` is set.

    Returns:
        The ``Translation``: the native body and the adjustments made so that Anthropic accepts it.

    Raises:
        ApiError: 400 ``invalid_request`` for a message numi_mw cannot translate (a tool call whose arguments are
            not a JSON object, content of the wrong type), naming its path.
    """
    adjustments: list[str] = []
    counts = {"foreign-reasoning-dropped": 0, "unsigned-reasoning-dropped": 0}
    system, messages = _messages(data.get("messages"), counts)
    body: dict[str, Any] = {"model": data.get("model")}
    if system:
        body["system"] = system[0]["text"] if len(system) == 1 and set(system[0]) == {"type", "text"} else system
    body["messages"] = messages
    limit = output_limit(data)
    body["max_tokens"] = DEFAULT_MAX_TOKENS if limit is None else limit
    stop = data.get("stop")
    if isinstance(stop, str):
        body["stop_sequences"] = [stop]
    elif isinstance(stop, list) and stop:
        body["stop_sequences"] = stop
    if data.get("stream") is True:
        body["stream"] = True
    tools = _tools(data.get("tools"))
    if tools is not None:
        body["tools"] = tools
    tool_choice = _tool_choice(data.get("tool_choice"), data.get("parallel_tool_calls"))
    if tool_choice is not None:
        body["tool_choice"] = tool_choice
    elif isinstance(data.get("tool_choice"), dict):
        adjustments.append("tool-choice-dropped")
    unsent = _metadata(body, data)
    output_format = _output_format(data.get("response_format"), adjustments)
    written = {key for key in WRITTEN if key in body}
    for key, value in data.items():
        if value is not None and (key in PASSED or (key in WRITTEN and key not in written)):
            body[key] = value
    if output_format is not None:
        _set_output_config(body, "format", output_format)
    if facts.adaptive:
        _adaptive(body, controls)
    _thinking_rules(body, adjustments)
    dropped = sorted(
        {key for key in data if key not in PASSED and key not in CONSUMED and (key not in WRITTEN or key in written)}
        | unsent
    )
    if dropped:
        adjustments.append("parameters-dropped=" + "+".join(dropped))
    for name, count in counts.items():
        if count:
            adjustments.append(f"{name}={count}")
    stream_options = data.get("stream_options")
    include_usage = isinstance(stream_options, dict) and stream_options.get("include_usage") is True
    model = data.get("model")
    return Translation(
        "anthropic-messages",
        body,
        adjustments,
        model if isinstance(model, str) else None,
        data.get("stream") is True,
        include_usage,
    )


def _metadata(body: dict[str, Any], data: dict[str, Any]) -> set[str]:
    """``user`` → ``metadata.user_id``; a ``metadata`` object that holds only ``user_id`` is Anthropic's own and
    passes, unless ``user`` wrote another (the chat form wins); chat's ``metadata`` (OpenAI's stored-completion
    tags) has no counterpart, nor has an OpenAI ``service_tier``. Returns the fields not sent, for the one
    ``parameters-dropped`` entry."""
    metadata = data.get("metadata")
    ours = isinstance(metadata, dict) and set(metadata) == {"user_id"}
    user = data.get("user")
    if isinstance(user, str) and user:
        body["metadata"] = {"user_id": user}
    elif ours:
        body["metadata"] = metadata
    # chat's metadata, or Anthropic's own whose user_id the chat user replaced
    dropped = {"metadata"} if metadata is not None and body.get("metadata") != metadata else set()
    tier = data.get("service_tier")
    if isinstance(tier, str) and tier in SERVICE_TIERS:  # (a tier that is an object is no key of a set)
        body["service_tier"] = tier
    elif tier is not None:
        dropped.add("service_tier")
    return dropped


def _text(content: Any, path: str) -> list[dict[str, Any]]:
    """Chat content (a string or a list of parts) as Anthropic content blocks."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks: list[dict[str, Any]] = []
    for part in content_parts(content, path):
        block = _part(part)
        if block is not None:
            blocks.append(block)
    return blocks


def _part(part: dict[str, Any]) -> dict[str, Any] | None:
    """One chat content part as an Anthropic block: text and images translated, anything else (Anthropic's own
    block types, which some clients send) passed as it is. An empty text part is left out (Anthropic refuses
    empty text blocks)."""
    kind = part.get("type")
    if kind == "text":
        text = part.get("text")
        if text == "":
            return None
        block: dict[str, Any] = {"type": "text", "text": text}
    elif kind == "image_url":
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
        block = {"type": "image", "source": _image_source(url)}
    else:
        return part
    if "cache_control" in part:
        block["cache_control"] = part["cache_control"]
    return block


def _image_source(url: Any) -> dict[str, Any]:
    """An image URL as an Anthropic image source: a ``data:`` URL as base64 data, anything else as a URL."""
    if isinstance(url, str) and url.startswith("data:") and ";base64," in url:
        media_type, _, data = url[5:].partition(";base64,")
        return {"type": "base64", "media_type": media_type, "data": data}
    return {"type": "url", "url": url}


def _thinking_blocks(message: dict[str, Any], counts: dict[str, int]) -> list[dict[str, Any]]:
    """The thinking blocks an assistant message's reasoning carries back (spec 004 "Preserve reasoning across
    turns"): signed ``reasoning.text`` → ``thinking``, ``reasoning.encrypted`` → ``redacted_thinking``, both
    only in Anthropic's format (or with none: on an Anthropic route unlabeled opaque state is taken for
    Anthropic's). When the details give none, LiteLLM's ``thinking_blocks`` on the message (Anthropic's blocks
    as they came) are taken, the signed and redacted ones as they are. The rest is counted: text without a
    signature (an empty signature is none; a summary in Anthropic's format is such text), and opaque state of
    another provider (a signature or encrypted data in another format, other providers' summaries), which means
    nothing to Anthropic."""
    details = message.get("reasoning_details")
    blocks: list[dict[str, Any]] = []
    if isinstance(details, list):
        for detail in details:
            if not isinstance(detail, dict):
                counts["foreign-reasoning-dropped"] += 1
                continue
            kind = detail.get("type")
            ours = detail.get("format") in (None, FORMAT)
            signature = detail.get("signature")
            signed = isinstance(signature, str) and signature != ""
            if kind == "reasoning.text" and signed and ours:
                blocks.append({"type": "thinking", "thinking": detail.get("text") or "", "signature": signature})
            elif kind == "reasoning.encrypted" and ours and isinstance(detail.get("data"), str):
                blocks.append({"type": "redacted_thinking", "data": detail["data"]})
            elif kind == "reasoning.text" and not signed:
                if detail.get("text"):
                    counts["unsigned-reasoning-dropped"] += 1
            elif kind == "reasoning.summary" and ours:  # Anthropic's own summarized text: text, never signed
                if detail.get("summary"):
                    counts["unsigned-reasoning-dropped"] += 1
            else:
                counts["foreign-reasoning-dropped"] += 1
    held = message.get(THINKING_BLOCKS)
    if not blocks and isinstance(held, list):  # LiteLLM's own form of the same blocks, when no detail gave them
        for block in held:
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "thinking" and isinstance(block.get("signature"), str) and block["signature"] != "":
                blocks.append(
                    {"type": "thinking", "thinking": block.get("thinking") or "", "signature": block["signature"]}
                )
            elif kind == "redacted_thinking" and isinstance(block.get("data"), str):
                blocks.append({"type": "redacted_thinking", "data": block["data"]})
            elif kind == "thinking" and block.get("thinking"):
                counts["unsigned-reasoning-dropped"] += 1
            else:
                counts["foreign-reasoning-dropped"] += 1
        if blocks:
            return blocks
    if not isinstance(details, list) or not details:  # the plain text beside details is the same reasoning
        count_plain_reasoning(message, counts)
    return blocks


def _tool_use(call: Any, path: str) -> dict[str, Any]:
    function = call_function(call, path)
    arguments = function.get("arguments")
    if arguments is None or arguments == "":
        tool_input: Any = {}
    else:
        try:
            tool_input = _decode(arguments) if isinstance(arguments, str) else arguments
        except msgspec.DecodeError:
            tool_input = None
        except RecursionError:  # msgspec's decode past the interpreter's recursion limit
            raise invalid_request(
                f"{path}.function.arguments is nested too deeply to decode.", f"{path}.function.arguments"
            ) from None
        if not isinstance(tool_input, dict):
            raise invalid_request(
                f"{path}.function.arguments is not a JSON object; Anthropic takes a tool's input as an object.",
                f"{path}.function.arguments",
            )
    return {"type": "tool_use", "id": call.get("id"), "name": function.get("name"), "input": tool_input}


def _messages(raw: Any, counts: dict[str, int]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(``system`` blocks, ``messages``) for the chat ``messages``: system and developer messages go to
    ``system`` in order; tool messages become ``tool_result`` blocks of one user turn (consecutive ones
    merged, a user message that follows joins them); assistant messages become blocks, thinking first."""
    system: list[dict[str, Any]] = []
    out: list[dict[str, Any]] = []
    if not isinstance(raw, list):
        return system, out
    for i, message in enumerate(raw):
        path = f"messages[{i}]"
        role = message.get("role")
        if role in ("system", "developer"):
            system.extend(_text(message.get("content"), f"{path}.content"))
            continue
        if role == "tool":
            result: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.get("tool_call_id")}
            content = message.get("content")
            if isinstance(content, str):
                result["content"] = content
            elif content is not None:  # parts, or content of the wrong type refused as a user message's is
                result["content"] = _text(content, f"{path}.content")
            _append(out, "user", [result])
            continue
        if role == "assistant":
            blocks = _thinking_blocks(message, counts)
            blocks.extend(_text(message.get("content"), f"{path}.content"))
            calls = message.get("tool_calls")
            if isinstance(calls, list):
                blocks.extend(_tool_use(call, f"{path}.tool_calls[{j}]") for j, call in enumerate(calls))
            if blocks or i == len(raw) - 1:
                out.append({"role": "assistant", "content": blocks})
            continue
        content = message.get("content")
        blocks = _text(content, f"{path}.content")
        if out and out[-1]["role"] == "user" and _is_results(out[-1]):
            out[-1]["content"].extend(blocks)
        elif isinstance(content, str) and blocks:
            out.append({"role": "user", "content": content})
        else:
            out.append({"role": "user", "content": blocks})
    return system, out


def _append(out: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    if out and out[-1]["role"] == role and isinstance(out[-1]["content"], list) and _is_results(out[-1]):
        out[-1]["content"].extend(blocks)
    else:
        out.append({"role": role, "content": blocks})


def _is_results(message: dict[str, Any]) -> bool:
    content = message["content"]
    return isinstance(content, list) and bool(content) and content[0].get("type") == "tool_result"


def _tools(tools: Any) -> list[Any] | None:
    """Chat function tools as Anthropic tools (``input_schema``); other entries (Anthropic's own server tools)
    pass as they are."""
    if not isinstance(tools, list):
        return None
    out: list[Any] = []
    for tool in tools:
        function = function_tool(tool)
        if function is not None:
            entry: dict[str, Any] = {"name": function.get("name")}
            if "description" in function:
                entry["description"] = function["description"]
            entry["input_schema"] = function.get("parameters") or {"type": "object", "properties": {}}
            if "strict" in function:
                entry["strict"] = function["strict"]
            if "cache_control" in tool:
                entry["cache_control"] = tool["cache_control"]
            out.append(entry)
        else:
            out.append(tool)
    return out


def _tool_choice(choice: Any, parallel: Any) -> dict[str, Any] | None:
    """``tool_choice`` (``auto``, ``required``, ``none``, a named function) and ``parallel_tool_calls: false``."""
    out: dict[str, Any] | None
    if choice == "auto":
        out = {"type": "auto"}
    elif choice == "required":
        out = {"type": "any"}
    elif choice == "none":
        out = {"type": "none"}
    elif isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        out = {"type": "tool", "name": choice["function"].get("name")}
    elif isinstance(choice, dict) and choice.get("type") in ("auto", "any", "tool", "none"):
        out = choice  # Anthropic's own form
    else:
        out = None  # chat's allowed_tools and other forms have no Anthropic counterpart (reported)
    if parallel is False:
        out = {"type": "auto"} if out is None else out
        if out.get("type") != "none":
            out = {**out, "disable_parallel_tool_use": True}
    return out


def _output_format(response_format: Any, adjustments: list[str]) -> dict[str, Any] | None:
    """``response_format`` as Anthropic's ``output_config.format``: a JSON schema carries over; ``json_object``
    has no counterpart and is reported."""
    if not isinstance(response_format, dict):
        return None
    kind = response_format.get("type")
    if kind == "json_schema" and isinstance(response_format.get("json_schema"), dict):
        schema = response_format["json_schema"].get("schema")
        return {"type": "json_schema", "schema": schema}
    if kind == "json_object":
        adjustments.append("response-format-dropped")
    return None


_ADAPTIVE_EFFORTS = ("low", "medium", "high", "max")


def _adaptive(body: dict[str, Any], controls: ReasoningControls) -> None:
    """A model the catalog marks adaptive: a generated budget becomes ``thinking: {"type": "adaptive"}`` and the
    effort goes to ``output_config.effort`` (the nearest of low, medium, high, max; minimal counts as low). An
    explicit ``reasoning.max_tokens`` keeps its budget."""
    thinking = body.get("thinking")
    if not isinstance(thinking, dict) or thinking.get("type") != "enabled" or controls.max_tokens is not None:
        return
    effort = controls.effort if isinstance(controls.effort, str) else "medium"
    if effort not in _ADAPTIVE_EFFORTS:
        effort = {"minimal": "low", "xhigh": "max"}.get(effort, "medium")
    body["thinking"] = {"type": "adaptive"}
    _set_output_config(body, "effort", effort)


def _set_output_config(body: dict[str, Any], key: str, value: Any) -> None:
    """Set ``output_config[key]`` beside what the client's own ``output_config`` holds.

    Raises:
        ApiError: 400 ``invalid_request`` naming ``output_config`` when the client's is neither an object nor
            ``null``: Anthropic takes an object there, and the translation cannot add to anything else.
    """
    own = body.get("output_config")
    if own is not None and not isinstance(own, dict):
        raise invalid_request("output_config must be an object (Anthropic Messages API).", "output_config")
    body["output_config"] = {**(own or {}), key: value}


def _thinking_rules(body: dict[str, Any], adjustments: list[str]) -> None:
    """Keep Anthropic's documented rules on thinking, adjusting the request rather than sending one it refuses:

    - thinking on in a tool loop (the request ends with tool results), and the assistant turn of that loop does
      not start with a thinking block (the client dropped it): thinking is turned off for this request
      (``thinking-disabled=history``). The turn is every assistant message since the last user message that is
      not tool results alone; without interleaved thinking only its first message carries thinking;
    - thinking on with a final assistant message (a prefill, which Anthropic takes only without extended
      thinking): thinking off (``thinking-disabled=prefill``);
    - thinking on with ``tool_choice`` forcing a tool (manual thinking refuses it): thinking off
      (``thinking-disabled=tool-choice``);
    - thinking off: a final assistant message carries no thinking block (``thinking-blocks-dropped``);
    - thinking on: ``temperature`` other than 1, ``top_k``, and ``top_p`` below 0.95 are removed
      (``temperature-removed`` and so on).
    """
    thinking = body.get("thinking")
    on = isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")
    messages = body["messages"]
    reason = None
    if on and _tool_turn_without_thinking(messages):
        reason = "history"
    elif on and messages and messages[-1]["role"] == "assistant":
        reason = "prefill"
    elif (
        on
        and isinstance(thinking, dict)
        and thinking.get("type") == "enabled"
        and isinstance(body.get("tool_choice"), dict)
        and body["tool_choice"].get("type") in ("any", "tool")
    ):
        reason = "tool-choice"
    if reason is not None:
        body["thinking"] = {"type": "disabled"}
        adjustments.append(f"thinking-disabled={reason}")
        on = False
    if not on and messages and messages[-1]["role"] == "assistant":
        blocks = messages[-1]["content"]
        kept = [b for b in blocks if not (isinstance(b, dict) and b.get("type") in ("thinking", "redacted_thinking"))]
        if len(kept) != len(blocks):
            messages[-1]["content"] = kept
            adjustments.append("thinking-blocks-dropped")
    if on:
        if "temperature" in body and body["temperature"] != 1:
            del body["temperature"]
            adjustments.append("temperature-removed")
        if "top_k" in body:
            del body["top_k"]
            adjustments.append("top-k-removed")
        top_p = body.get("top_p")
        if isinstance(top_p, int | float) and not isinstance(top_p, bool) and top_p < 0.95:
            del body["top_p"]
            adjustments.append("top-p-removed")


def _tool_turn_without_thinking(messages: list[dict[str, Any]]) -> bool:
    """Whether the request ends with tool results and the first assistant message of that tool loop's turn
    (the first after the last user message that is not tool results alone) does not start with a thinking
    block."""
    if not messages or messages[-1]["role"] != "user" or not _is_results(messages[-1]):
        return False
    start = 0
    for i in range(len(messages) - 1, -1, -1):
        message = messages[i]
        if message["role"] == "user" and not _only_results(message):
            start = i + 1
            break
    first = next((m for m in messages[start:] if m["role"] == "assistant"), None)
    if first is None:
        return False
    blocks = first["content"]
    head = blocks[0] if isinstance(blocks, list) and blocks else None
    return not (isinstance(head, dict) and head.get("type") in ("thinking", "redacted_thinking"))


def _only_results(message: dict[str, Any]) -> bool:
    content = message["content"]
    return (
        isinstance(content, list)
        and bool(content)
        and all(isinstance(block, dict) and block.get("type") == "tool_result" for block in content)
    )


# --- answers ---------------------------------------------------------------------------------------------------


def usage(native: Any) -> dict[str, Any] | None:
    """Anthropic ``usage`` as chat usage: ``prompt_tokens`` is input plus cache writes and reads (Anthropic's
    ``input_tokens`` excludes both), ``completion_tokens`` is ``output_tokens`` (thinking included),
    ``prompt_tokens_details.cached_tokens`` the cache reads and ``cache_write_tokens`` the writes (as OpenRouter
    names them), ``completion_tokens_details.reasoning_tokens`` Anthropic's ``thinking_tokens`` when it reports
    them."""
    if not isinstance(native, dict):
        return None

    def number(value: Any) -> int:
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    read = number(native.get("cache_read_input_tokens"))
    written = number(native.get("cache_creation_input_tokens"))
    prompt = number(native.get("input_tokens")) + read + written
    completion = number(native.get("output_tokens"))
    out: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if "cache_read_input_tokens" in native or "cache_creation_input_tokens" in native:
        out["prompt_tokens_details"] = {"cached_tokens": read, "cache_write_tokens": written}
    details = native.get("output_tokens_details")
    if isinstance(details, dict) and "thinking_tokens" in details:
        out["completion_tokens_details"] = {"reasoning_tokens": number(details["thinking_tokens"])}
    return out


def _finish_reason(stop_reason: Any) -> str:
    return FINISH_REASONS.get(stop_reason, "stop") if isinstance(stop_reason, str) else "stop"


def completion(native: Any, answer: Answer) -> dict[str, Any]:
    """An Anthropic ``Message`` as a chat completion (spec 004 "Response fields").

    Raises:
        ApiError: 502 ``upstream_unavailable`` when the body is not a Message; for an Anthropic error body (one sent
            with a success status), with its type and message, as for an ``error`` event in a stream.
    """
    if isinstance(native, dict) and native.get("type") == "error":
        raise _upstream_error(native.get("error"))
    if not isinstance(native, dict) or not isinstance(native.get("content"), list):
        raise upstream_unavailable("The upstream's answer is not an Anthropic message; numi_mw cannot translate it.")
    texts: list[str] = []
    reasoning: list[str] = []
    details: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for block in native["content"]:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "thinking":
            detail = _text_detail(block.get("thinking"), block.get("signature"), len(details))
            if "text" in detail:
                reasoning.append(detail["text"])
            details.append(detail)
        elif kind == "redacted_thinking":
            details.append({"type": "reasoning.encrypted", "data": block.get("data"), "format": FORMAT})
            details[-1]["index"] = len(details) - 1
        elif kind == "tool_use":
            calls.append(_call(block))
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    if reasoning:
        message["reasoning"] = "".join(reasoning)
    if details:
        message["reasoning_details"] = details
    if calls:
        message["tool_calls"] = calls
    return chat_completion(
        native, answer, message, _finish_reason(native.get("stop_reason")), usage(native.get("usage"))
    )


def _text_detail(text: Any, signature: Any, index: int) -> dict[str, Any]:
    """A thinking block's ``reasoning.text`` detail: its text when it has any, its signature when it has one
    (an empty signature, which llama.cpp sends, is no signature)."""
    detail: dict[str, Any] = {"type": "reasoning.text"}
    if isinstance(text, str) and text:
        detail["text"] = text
    if isinstance(signature, str) and signature:
        detail["signature"] = signature
    detail["format"] = FORMAT
    detail["index"] = index
    return detail


def _arguments(tool_input: Any) -> str:
    """A ``tool_use`` block's ``input`` as a chat tool call's ``arguments`` text (``"{}"`` when it has none)."""
    return _encode(tool_input).decode() if tool_input is not None else "{}"


def _call(block: dict[str, Any]) -> dict[str, Any]:
    arguments = _arguments(block.get("input"))
    return {"id": block.get("id"), "type": "function", "function": {"name": block.get("name"), "arguments": arguments}}


class StreamTranslator(ChunkStream):
    """Anthropic stream events in, chat completion chunks out (spec 004 "Streaming"); one per stream.

    Blocks are tracked by their ``index``, so a delta reaches its own block even when blocks interleave (llama.cpp
    sends a thinking block's signature after the text block began). A thinking fragment goes out as
    ``delta.reasoning`` plus a ``reasoning.text`` entry; a signature as a signature-only entry; a redacted block,
    which arrives whole, as a ``reasoning.encrypted`` entry; a tool call's input as argument deltas (``{}`` when
    it streamed none). The finish chunk has an empty delta; a usage chunk follows when the request asked for one.
    """

    __slots__ = ("_blocks", "_calls", "_details", "_finish", "_usage")

    def __init__(self, answer: Answer) -> None:
        super().__init__(answer)
        self._usage: dict[str, Any] = {}
        self._finish = "stop"
        self._blocks: dict[
            Any, list[Any]
        ] = {}  # index -> [kind, detail position or tool ordinal, streamed, a tool's start input]
        self._details = 0
        self._calls = 0

    def _count(self, native: dict[str, Any]) -> None:
        """Take an event's ``usage`` counts over those before, but for a ``null`` one, which keeps the count before
        it: ``message_delta``'s usage may hold ``null`` input and cache counts (Anthropic's Python SDK,
        ``MessageDeltaUsage``, and its stream accumulator, which overwrites a count only when it is not ``null``)."""
        self._usage.update({key: value for key, value in native.items() if value is not None})

    def event(self, data: Any) -> list[dict[str, Any]]:
        """The chat chunks for one event (``message_start``, ``content_block_*``, ``message_delta``,
        ``message_stop``, ``ping``, ``error``; unknown events make none).

        Raises:
            ApiError: 502 ``upstream_unavailable`` for an ``error`` event (its message kept).
        """
        if not isinstance(data, dict) or self.done:
            return []
        kind = data.get("type")
        if kind == "content_block_delta":
            return self._delta(event_index(data.get("index")), data.get("delta"))
        if kind == "content_block_start":
            return self._start(event_index(data.get("index")), data.get("content_block"))
        if kind == "content_block_stop":
            return self._stop(event_index(data.get("index")))
        if kind == "message_start":
            message = data.get("message")
            if not isinstance(message, dict):
                message = {}
            self._id = message.get("id")
            self._model = message.get("model") or self.answer.model
            if isinstance(message.get("usage"), dict):
                self._count(message["usage"])
            return [self._chunk({"role": "assistant", "content": ""})]
        if kind == "message_delta":
            delta = data.get("delta")
            if isinstance(delta, dict) and delta.get("stop_reason") is not None:
                self._finish = _finish_reason(delta["stop_reason"])
            if isinstance(data.get("usage"), dict):
                self._count(data["usage"])  # cumulative: it overrides message_start's counts
            return []
        if kind == "message_stop":
            self.done = True
            out = [self._chunk({}, self._finish)]
            if self.answer.include_usage:
                out.append({**out[0], "choices": [], "usage": usage(self._usage)})
            return out
        if kind == "error":
            raise _upstream_error(data.get("error"))
        return []

    def _start(self, index: Any, block: Any) -> list[dict[str, Any]]:
        if not isinstance(block, dict):
            return []
        kind = block.get("type")
        if kind == "thinking":
            remember(self._blocks, index, ["thinking", self._details, False])
            self._details += 1
            text = block.get("thinking")
            out = self._delta(index, {"type": "thinking_delta", "thinking": text}) if text else []
            signature = block.get("signature")
            if isinstance(signature, str) and signature:
                out += self._delta(index, {"type": "signature_delta", "signature": signature})
            return out
        if kind == "redacted_thinking":
            position = self._details
            self._details += 1
            remember(self._blocks, index, ["redacted", position, True])
            detail = {"type": "reasoning.encrypted", "data": block.get("data"), "format": FORMAT, "index": position}
            return [self._chunk({"reasoning_details": [detail]})]
        if kind == "tool_use":
            ordinal = self._calls
            self._calls += 1
            remember(self._blocks, index, ["tool", ordinal, False, block.get("input")])
            call = {
                "index": ordinal,
                "id": block.get("id"),
                "type": "function",
                "function": {"name": block.get("name"), "arguments": ""},
            }
            return [self._chunk({"tool_calls": [call]})]
        if kind == "text":
            remember(self._blocks, index, ["text", 0, False])
            text = block.get("text")
            return [self._chunk({"content": text})] if isinstance(text, str) and text else []
        remember(self._blocks, index, ["other", 0, False])  # server tools and their results: the server ran them
        return []

    def _delta(self, index: Any, delta: Any) -> list[dict[str, Any]]:
        if not isinstance(delta, dict):
            return []
        state = self._blocks.get(index)
        kind = delta.get("type")
        if kind == "text_delta":
            text = delta.get("text")
            return [self._chunk({"content": text})] if isinstance(text, str) and text else []
        if kind == "thinking_delta":
            text = delta.get("thinking")
            if not isinstance(text, str) or not text:
                return []
            position = state[1] if state is not None else self._details
            entry = {"type": "reasoning.text", "text": text, "format": FORMAT, "index": position}
            return [self._chunk({"reasoning": text, "reasoning_details": [entry]})]
        if kind == "signature_delta":
            signature = delta.get("signature")
            if not isinstance(signature, str) or not signature:  # llama.cpp signs with "": no signature
                return []
            position = state[1] if state is not None else self._details
            entry = {"type": "reasoning.text", "signature": signature, "format": FORMAT, "index": position}
            return [self._chunk({"reasoning_details": [entry]})]
        if kind == "input_json_delta" and state is not None and state[0] == "tool":
            partial = delta.get("partial_json")
            if not isinstance(partial, str) or not partial:
                return []
            state[2] = True
            return [self._chunk({"tool_calls": [{"index": state[1], "function": {"arguments": partial}}]})]
        return []

    def _stop(self, index: Any) -> list[dict[str, Any]]:
        state = self._blocks.get(index)
        if state is not None and state[0] == "tool" and not state[2]:
            # no input streamed: the input the block started with (Anthropic's own stream accumulator keeps it
            # until an input_json_delta replaces it), else an empty object
            state[2] = True
            arguments = _arguments(state[3])
            return [self._chunk({"tool_calls": [{"index": state[1], "function": {"arguments": arguments}}]})]
        return []

    def finish(self) -> list[dict[str, Any]]:
        """End of the upstream body.

        Raises:
            ApiError: 502 ``upstream_unavailable`` when the stream ended before ``message_stop``.
        """
        if not self.done:
            raise upstream_unavailable(
                "The upstream stream ended before its message_stop event; the answer is incomplete."
            )
        return []


def _upstream_error(error: Any) -> ApiError:
    if isinstance(error, dict):
        return upstream_unavailable(f"The upstream reported an error: {error.get('type')}: {error.get('message')}")
    return upstream_unavailable("The upstream reported an error.")


def error_body(native: Any) -> dict[str, Any] | None:
    """An Anthropic error body (``{"type": "error", "error": {"type", "message"}}``) as the OpenAI-style error
    body, its message and type kept; anything else ``None`` (passed unchanged)."""
    if not isinstance(native, dict) or native.get("type") != "error" or not isinstance(native.get("error"), dict):
        return None
    error = native["error"]
    kind = error.get("type")
    return {"error": {"message": error.get("message"), "type": kind, "code": kind, "param": None}}


ADAPTER = WireAdapter(
    wire_api="anthropic-messages",
    path="/messages",
    controls_form="anthropic-thinking",
    replay="details",
    default_max_tokens=DEFAULT_MAX_TOKENS,
    headers=(("anthropic-version", VERSION),),
    api_key_header="x-api-key",
    translate=translate,
    completion=completion,
    stream=StreamTranslator,
    error=error_body,
)
