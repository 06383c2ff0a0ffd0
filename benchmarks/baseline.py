"""The baseline: a straightforward stdlib-``json`` implementation of the rules numi_mw applies.

What a developer would write by hand, clearly and idiomatically, without numi_mw: decode the body with
``json.loads``, apply the rules on dicts, encode with ``json.dumps``. It is not deliberately slow; it does the
same work the numi_mw core is measured doing on these payloads:

- Request (spec 004 "Request controls", "Other fields"): ``reasoning_effort`` folds into ``reasoning.effort``
  and ``include_reasoning`` into ``reasoning.exclude``, the shorthands winning, at the key's position; then the
  reasoning / reasoning_content table on every assistant message for an OpenRouter target (the reasoning text
  travels as ``reasoning``); then the reasoning detail size limits (text and summary 4 MiB, signature 1 MiB,
  data 8 MiB), with the cheap ``len`` test first as anyone would write it. The body is re-encoded as compact
  UTF-8 JSON when it changed.
- Stream (spec 004 "Streaming"): split the body into events at blank lines, ``json.loads`` each data line, give
  a reasoning fragment that lacks one its ``reasoning.text`` detail (``reasoning_content`` moved to
  ``reasoning``), ``json.dumps`` it back. Comments and ``data: [DONE]`` pass through.
"""

from __future__ import annotations

import json
from typing import Any

_LIMITS = (
    ("text", 4 * 1024 * 1024),
    ("summary", 4 * 1024 * 1024),
    ("signature", 1024 * 1024),
    ("data", 8 * 1024 * 1024),
)


def _dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def _fold_controls(body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """Fold the shorthands into ``reasoning``; returns the new body and whether it changed."""
    effort = body.get("reasoning_effort")
    include = body.get("include_reasoning")
    if "reasoning_effort" not in body and "include_reasoning" not in body and body.get("reasoning", {}) is not None:
        return body, False
    reasoning = body.get("reasoning")
    if reasoning is not None and not isinstance(reasoning, dict):
        raise ValueError("reasoning must be an object")
    folded = dict(reasoning or {})
    if effort is not None:
        if not isinstance(effort, str):
            raise ValueError("reasoning_effort must be a string")
        folded["effort"] = effort
    if include is not None:
        if not isinstance(include, bool):
            raise ValueError("include_reasoning must be a boolean")
        folded["exclude"] = not include
    keep = reasoning is not None or effort is not None or include is not None
    out: dict[str, Any] = {}
    for key, value in body.items():
        if key in ("reasoning", "reasoning_effort", "include_reasoning"):
            if keep and "reasoning" not in out:
                out["reasoning"] = folded
        else:
            out[key] = value
    return out, True


def _normalize_assistant(message: dict[str, Any]) -> bool:
    """The reasoning / reasoning_content table for an OpenRouter target; returns whether it changed."""
    r = message.get("reasoning")
    rc = message.get("reasoning_content")
    if "reasoning_content" not in message:
        if r == "":
            del message["reasoning"]
            return True
        return False
    if not isinstance(rc, str) or rc == "" or ("reasoning" in message and not isinstance(r, str)):
        return False
    if r is None or r == "" or r == rc:
        renamed = {}
        for key, value in message.items():
            if key == "reasoning_content":
                renamed["reasoning"] = rc
            elif key != "reasoning":
                renamed[key] = value
        message.clear()
        message.update(renamed)
        return True
    return False


def _check_limits(messages: list[Any]) -> None:
    for message in messages:
        for detail in message.get("reasoning_details") or []:
            for field, limit in _LIMITS:
                value = detail.get(field)
                if isinstance(value, str) and len(value) > limit // 4 and len(value.encode()) > limit:
                    raise ValueError(f"reasoning detail {field} over {limit} bytes")


def prepare_request(body: bytes) -> bytes:
    """Normalize a chat completions request body for an OpenRouter target; the bytes to send upstream."""
    data = json.loads(body)
    if not isinstance(data, dict):
        raise ValueError("the body must be a JSON object")
    data, changed = _fold_controls(data)
    messages = data.get("messages", [])
    if not isinstance(messages, list):
        raise ValueError("messages must be an array")
    for message in messages:
        if message.get("role") == "assistant" and _normalize_assistant(message):
            changed = True
    _check_limits(messages)
    return _dumps(data) if changed else body


def _normalize_chunk(chunk: Any) -> None:
    """Give every reasoning fragment of a chunk its ``reasoning.text`` detail, in place."""
    for choice in chunk.get("choices") or []:
        delta = choice.get("delta") or {}
        text = delta.pop("reasoning_content", None) or delta.get("reasoning")
        if not text:
            continue
        delta["reasoning"] = text
        if not delta.get("reasoning_details"):
            delta["reasoning_details"] = [{"type": "reasoning.text", "text": text, "format": "unknown"}]


class StreamNormalizer:
    """Per-event stream normalization with ``json``: ``feed(bytes) -> bytes``, then ``finish() -> bytes``."""

    def __init__(self) -> None:
        self.buffer = b""

    def feed(self, chunk: bytes) -> bytes:
        self.buffer += chunk
        out: list[bytes] = []
        while (end := self.buffer.find(b"\n\n")) != -1:
            event, self.buffer = self.buffer[: end + 2], self.buffer[end + 2 :]
            out.append(self._event(event))
        return b"".join(out)

    def finish(self) -> bytes:
        rest, self.buffer = self.buffer, b""
        return self._event(rest) if rest else b""

    def _event(self, event: bytes) -> bytes:
        data = [line[5:].strip() for line in event.split(b"\n") if line.startswith(b"data:")]
        if not data or data == [b"[DONE]"]:
            return event
        try:
            chunk = json.loads(b"\n".join(data))
        except ValueError:
            return event
        if isinstance(chunk, dict):
            _normalize_chunk(chunk)
        return b"data: " + _dumps(chunk) + b"\n\n"


class _NativeStream(StreamNormalizer):
    """A native stream translated to chat chunks with ``json``, as one would write it by hand: split at blank
    lines (``StreamNormalizer.feed``), ``json.loads`` each data line, one chat chunk per reasoning, text or tool
    event, ``json.dumps`` it; ``[DONE]`` at the end. Subclasses map one event."""

    def __init__(self) -> None:
        super().__init__()
        self.id: Any = None
        self.model: Any = None

    def finish(self) -> bytes:
        return super().finish() + b"data: [DONE]\n\n"

    def _event(self, event: bytes) -> bytes:
        data = [line[5:].strip() for line in event.split(b"\n") if line.startswith(b"data:")]
        if not data or data == [b"[DONE]"]:
            return b""
        try:
            value = json.loads(b"\n".join(data))
        except ValueError:
            return b""
        delta, finish = self.translate(value)
        if delta is None:
            return b""
        chunk = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": 0,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return b"data: " + _dumps(chunk) + b"\n\n"

    def translate(self, value: Any) -> tuple[dict[str, Any] | None, str | None]:
        raise NotImplementedError


class AnthropicStream(_NativeStream):
    """Anthropic Messages events to chat chunks with ``json``."""

    def translate(self, value: Any) -> tuple[dict[str, Any] | None, str | None]:
        kind = value.get("type")
        if kind == "message_start":
            self.id, self.model = value["message"].get("id"), value["message"].get("model")
            return {"role": "assistant", "content": ""}, None
        if kind == "content_block_delta":
            delta = value["delta"]
            if delta["type"] == "thinking_delta" and delta["thinking"]:
                detail = {"type": "reasoning.text", "text": delta["thinking"], "format": "anthropic-claude-v1"}
                return {"reasoning": delta["thinking"], "reasoning_details": [detail]}, None
            if delta["type"] == "signature_delta":
                detail = {"type": "reasoning.text", "signature": delta["signature"], "format": "anthropic-claude-v1"}
                return {"reasoning_details": [detail]}, None
            if delta["type"] == "text_delta":
                return {"content": delta["text"]}, None
        if kind == "message_delta":
            return {}, {"end_turn": "stop", "tool_use": "tool_calls"}.get(value["delta"].get("stop_reason"), "stop")
        return None, None


class ResponsesStream(_NativeStream):
    """OpenAI Responses events to chat chunks with ``json``."""

    def translate(self, value: Any) -> tuple[dict[str, Any] | None, str | None]:
        kind = value.get("type")
        if kind == "response.created":
            self.id, self.model = value["response"].get("id"), value["response"].get("model")
            return {"role": "assistant", "content": ""}, None
        if kind == "response.reasoning_summary_text.delta":
            detail = {"type": "reasoning.summary", "summary": value["delta"], "format": "openai-responses-v1"}
            return {"reasoning": value["delta"], "reasoning_details": [detail]}, None
        if kind == "response.output_item.done" and value["item"].get("type") == "reasoning":
            item = value["item"]
            detail = {
                "type": "reasoning.encrypted",
                "data": item.get("encrypted_content"),
                "id": item.get("id"),
                "format": "openai-responses-v1",
            }
            return {"reasoning_details": [detail]}, None
        if kind == "response.output_text.delta":
            return {"content": value["delta"]}, None
        if kind == "response.completed":
            return {}, "stop"
        return None, None
