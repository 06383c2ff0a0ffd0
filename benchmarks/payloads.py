"""Deterministic benchmark payloads: request bodies and SSE streams.

- ``request_2kb``: a 2 KB chat completions request, 3 messages, both reasoning shorthands.
- ``plain_2kb``: the same shape with nothing to normalize (no ``reasoning`` anywhere, no ``\\u`` escape).
- ``history_200kb``: a 200 KB request with 60 messages; assistant turns carry ``reasoning_content``, a signed
  ``reasoning.text`` detail and tool calls.
- ``body_8mb``: an 8 MB request whose one ``reasoning.encrypted`` detail holds a 6 MB blob.
- ``spec_stream``: a 2,000-event SSE stream shaped like spec 004's streaming example (reasoning chunks carrying
  ``delta.reasoning`` and a ``reasoning.text`` detail, then content chunks, the finish chunk, a usage chunk and
  ``data: [DONE]``).
- ``fixture_streams``: the recorded ``../shared/fixtures/openai-chat/*.sse`` streams, when present.
- ``local_stream_events``: what a local server streams for the same text, in the shapes its reasoning takes
  (tags in ``content``, only the closing tag, no tags at all, ``reasoning_content``).

Every generator is seeded, so two runs (and two processes) build the same bytes. Sizes are exact: a body is
padded with ASCII filler in its last user message up to the requested size.
"""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path
from typing import Any

KIB = 1024
MIB = 1024 * 1024

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO.parent / "shared" / "fixtures" / "openai-chat"

_SENTENCE = (
    "the model weighs each option before it answers and checks the tool result against the question "
    "so that the final reply is short correct and grounded in the data it was given "
    "Lisbon Porto Faro café naïve résumé weather forecast temperature humidity wind"
)
_WORDS = _SENTENCE.split()

_CHUNK_ID = "6f1c2b8e-3d4a-4f5b-9c7d-2e8a1b0c9d3f"
_MODEL = "openai/gpt-6-luna"


def _compact(value: Any) -> bytes:
    """Compact UTF-8 JSON, as clients send it."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words))


def _blob(rng: random.Random, size: int) -> str:
    """``size`` characters of base64, like a signature or encrypted reasoning state."""
    raw = rng.randbytes(size * 3 // 4 + 3)
    return base64.b64encode(raw).decode()[:size]


def _filler(size: int) -> str:
    pattern = "lorem ipsum dolor sit amet consectetur adipiscing elit "
    return (pattern * (size // len(pattern) + 1))[:size]


def _pad_to(body: dict[str, Any], size: int, message_index: int) -> bytes:
    """Encode ``body`` padded to exactly ``size`` bytes by appending ASCII filler to one message's content."""
    raw = _compact(body)
    missing = size - len(raw)
    if missing < 0:
        raise ValueError(f"payload is already {len(raw)} bytes, over the {size} requested")
    message = body["messages"][message_index]
    message["content"] = message["content"] + _filler(missing)
    raw = _compact(body)
    if len(raw) != size:  # pragma: no cover - filler is ASCII and never escaped
        raise AssertionError(f"padding missed: {len(raw)} != {size}")
    return raw


def _chat_2kb(seed: int, controls: dict[str, Any], *, stream: bool) -> bytes:
    """A 2 KB chat request with 3 messages (seeded text), ``controls`` before the sampling fields."""
    rng = random.Random(seed)
    body: dict[str, Any] = {
        "model": _MODEL,
        "messages": [
            {"role": "system", "content": "You are a concise assistant. " + _text(rng, 20)},
            {"role": "user", "content": "How many times does the letter r appear in strawberry? " + _text(rng, 30)},
            {"role": "user", "content": "Answer in one sentence. "},
        ],
        **controls,
        "max_tokens": 4096,
        "temperature": 0.2,
    }
    if stream:
        body["stream"] = True
    return _pad_to(body, 2 * KIB, 2)


def request_2kb(*, stream: bool = False) -> bytes:
    """A 2 KB request with 3 messages and both shorthands (``reasoning_effort``, ``include_reasoning``)."""
    return _chat_2kb(2, {"reasoning_effort": "high", "include_reasoning": False}, stream=stream)


def plain_2kb(*, stream: bool = False) -> bytes:
    """A 2 KB request with 3 messages and nothing to normalize (the request probe lets it through)."""
    raw = _chat_2kb(3, {}, stream=stream)
    if b"reasoning" in raw or b"\\u" in raw:  # pragma: no cover - guards the payload's purpose
        raise AssertionError("plain_2kb must have nothing to normalize")
    return raw


_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["C", "F"]}},
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search_docs",
            "description": "Search the documentation.",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        },
    },
]


def history_200kb(size: int = 200 * KIB, messages: int = 60) -> bytes:
    """A 200 KB request with ``messages`` messages: a system prompt, then tool loops.

    Each loop is a user question, an assistant turn with ``reasoning_content``, a signed ``reasoning.text``
    detail (``anthropic-claude-v1``) and a tool call, and the tool's answer. Both shorthands are set, so the
    body needs rewriting (the controls, and every assistant turn's ``reasoning_content`` for OpenRouter).
    """
    rng = random.Random(200)
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are a careful assistant. " + _text(rng, 60)}]
    turn = 0
    while len(history) < messages - 1:
        turn += 1
        call_id = f"call_{turn:04d}"
        thought = _text(rng, 120)
        history.append({"role": "user", "content": _text(rng, 80)})
        history.append(
            {
                "role": "assistant",
                "content": None,
                "reasoning_content": thought,
                "reasoning_details": [
                    {
                        "type": "reasoning.text",
                        "text": thought,
                        "signature": _blob(rng, 600),
                        "format": "anthropic-claude-v1",
                        "index": 0,
                    }
                ],
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": json.dumps({"city": rng.choice(_WORDS)})},
                    }
                ],
            }
        )
        history.append({"role": "tool", "tool_call_id": call_id, "content": json.dumps({"report": _text(rng, 70)})})
    history = history[: messages - 1]
    history.append({"role": "user", "content": "Summarize. "})
    body: dict[str, Any] = {
        "model": "anthropic/claude-sonnet-4.5",
        "messages": history,
        "tools": _TOOLS,
        "reasoning_effort": "high",
        "include_reasoning": True,
        "max_tokens": 16000,
    }
    return _pad_to(body, size, len(history) - 1)


def body_8mb(size: int = 8 * MIB, blob: int = 6 * MIB) -> bytes:
    """An 8 MB request: one assistant turn's ``reasoning.encrypted`` detail holds a ``blob``-byte (6 MB) string.

    The rest is a pasted document in the first user message, a tool call and its result, and both shorthands.
    """
    rng = random.Random(8)
    body: dict[str, Any] = {
        "model": "openai/o3",
        "messages": [
            {"role": "system", "content": "You are a careful assistant."},
            {"role": "user", "content": "Read this document. "},
            {
                "role": "assistant",
                "content": None,
                "reasoning_details": [
                    {
                        "type": "reasoning.encrypted",
                        "data": _blob(rng, blob),
                        "id": "rs_0123456789abcdef",
                        "format": "openai-responses-v1",
                        "index": 0,
                    }
                ],
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "search_docs", "arguments": '{"query":"section 4"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": _text(rng, 200)},
            {"role": "user", "content": "What does section 4 say?"},
        ],
        "tools": _TOOLS,
        "reasoning_effort": "medium",
        "include_reasoning": False,
        "max_tokens": 32000,
    }
    return _pad_to(body, size, 1)


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    chunk = {
        "id": _CHUNK_ID,
        "object": "chat.completion.chunk",
        "created": 1790000000,
        "model": _MODEL,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + _compact(chunk) + b"\n\n"


def many_details_event(i: int, choices: int = 300) -> bytes:
    """Event ``i`` of a stream with many details and many choices: choice ``i % choices`` gets a new detail, a
    signed ``reasoning.text`` (text and signature together: a detail of its own) or, every other time, a
    ``reasoning.encrypted`` one, each with its own text, signature or data (about 300 bytes), as a provider that
    sends many choices and many thinking blocks would. Made on the fly, so a long run holds none of them."""
    unique = f"{i:08d}" * 30
    if i % 2:
        detail: dict[str, Any] = {"type": "reasoning.encrypted", "data": unique, "format": "anthropic-claude-v1"}
    else:
        detail = {"type": "reasoning.text", "text": f"Step {i}. ", "signature": unique, "format": "anthropic-claude-v1"}
    chunk = {
        "id": _CHUNK_ID,
        "object": "chat.completion.chunk",
        "created": 1790000000,
        "model": "openai/gpt-6-luna",
        "choices": [{"index": i % choices, "delta": {"reasoning_details": [detail]}, "finish_reason": None}],
    }
    return b"data: " + _compact(chunk) + b"\n\n"


def spec_stream_events(events: int = 2000, reasoning_share: float = 0.6, *, empty_fields: bool = False) -> list[bytes]:
    """The events (each ending with its blank line) of a stream shaped like spec 004's streaming example.

    ``reasoning_share`` of the events are reasoning chunks (``delta.reasoning`` plus one ``reasoning.text``
    detail with the same text; the first also sets ``role``), the rest content chunks, then the finish chunk
    (empty delta), a usage chunk (``choices: []``) and ``data: [DONE]``. With ``empty_fields`` the content chunks
    carry ``"reasoning": null, "reasoning_details": []`` too, as OpenRouter streams the answer.
    """
    if events < 5:
        raise ValueError("a stream needs at least 5 events")
    rng = random.Random(2000)
    body = events - 3
    reasoning = max(1, int(body * reasoning_share))
    out: list[bytes] = []
    for i in range(body):
        text = _text(rng, rng.randint(1, 4)) + " "
        if i < reasoning:
            delta: dict[str, Any] = {"role": "assistant"} if i == 0 else {}
            delta["reasoning"] = text
            delta["reasoning_details"] = [{"type": "reasoning.text", "text": text}]
        else:
            delta = {"content": text, "reasoning": None, "reasoning_details": []} if empty_fields else {"content": text}
        out.append(_chunk(delta))
    out.append(_chunk({}, "stop"))
    usage = {
        "id": _CHUNK_ID,
        "object": "chat.completion.chunk",
        "created": 1790000000,
        "model": _MODEL,
        "choices": [],
        "usage": {
            "prompt_tokens": 24,
            "completion_tokens": body,
            "total_tokens": body + 24,
            "completion_tokens_details": {"reasoning_tokens": reasoning},
        },
    }
    out.append(b"data: " + _compact(usage) + b"\n\n")
    out.append(b"data: [DONE]\n\n")
    return out


LOCAL_SHAPES = ("tags", "closing", "plain", "fields")
"""The shapes of ``local_stream_events``."""


def local_stream_events(events: int = 2000, shape: str = "tags", reasoning_share: float = 0.6) -> list[bytes]:
    """The events of a local server's stream with the text of ``spec_stream_events`` (same seed, same words).

    Every chunk carries one piece of text, as a server streams tokens: ``reasoning_share`` of the body is
    reasoning, the rest the answer; then the finish chunk, a usage chunk and ``data: [DONE]``. ``shape`` says
    where the reasoning goes:

    - ``tags``: inside ``content``, ``<think>\\n`` in front of the first piece and ``\\n</think>\\n\\n`` after
      the last (a model that writes both tags, or llama.cpp with ``reasoning_format: "none"``);
    - ``closing``: inside ``content`` with only the closing tag (the chat template opened it in the prompt);
    - ``plain``: no reasoning at all: every piece is answer text (a model that writes no tags);
    - ``fields``: in ``delta.reasoning_content`` (a server that parses the reasoning, llama.cpp's default).
    """
    if events < 5:
        raise ValueError("a stream needs at least 5 events")
    if shape not in LOCAL_SHAPES:
        raise ValueError(f"shape must be one of {', '.join(LOCAL_SHAPES)}")
    rng = random.Random(2000)
    body = events - 3
    reasoning = 0 if shape == "plain" else max(1, int(body * reasoning_share))
    out: list[bytes] = []
    for i in range(body):
        text = _text(rng, rng.randint(1, 4)) + " "
        delta: dict[str, Any] = {"role": "assistant"} if i == 0 else {}
        if i < reasoning and shape == "fields":
            delta["reasoning_content"] = text
        else:
            if shape == "tags" and i == 0:
                text = "<think>\n" + text
            if shape in ("tags", "closing") and i == reasoning - 1:
                text += "\n</think>\n\n"
            delta["content"] = text
        out.append(_chunk(delta))
    out.append(_chunk({}, "stop"))
    usage = {"id": _CHUNK_ID, "object": "chat.completion.chunk", "created": 1790000000, "model": _MODEL}
    tokens = {"prompt_tokens": 24, "completion_tokens": body, "total_tokens": body + 24}
    out.append(b"data: " + _compact({**usage, "choices": [], "usage": tokens}) + b"\n\n")
    out.append(b"data: [DONE]\n\n")
    return out


def spec_stream(events: int = 2000) -> bytes:
    """The 2,000-event stream of ``spec_stream_events`` as one body."""
    return b"".join(spec_stream_events(events))


def split_events(raw: bytes) -> list[bytes]:
    """Split an SSE body after each ``\\n\\n`` (every byte kept), as an upstream sends it event by event."""
    parts = raw.split(b"\n\n")
    events = [part + b"\n\n" for part in parts[:-1]]
    if parts[-1]:
        events.append(parts[-1])
    return events


SEGMENT = 1448
"""A TCP segment's payload on Ethernet, in bytes (1,500 less 52 of IP and TCP headers with timestamps): the reads
a remote provider's stream arrives in, cut wherever the network cuts it, inside events."""


def split_segments(raw: bytes) -> list[bytes]:
    """Cut an SSE body into reads of ``SEGMENT`` bytes (every byte kept), as a network hands it over."""
    return [raw[at : at + SEGMENT] for at in range(0, len(raw), SEGMENT)]


def fixture_streams() -> dict[str, bytes]:
    """The recorded ``../shared/fixtures/openai-chat/*.sse`` streams by file stem; empty when absent."""
    if not FIXTURES.is_dir():
        return {}
    return {path.stem: path.read_bytes() for path in sorted(FIXTURES.glob("*.sse"))}


NATIVE_STREAMS = {
    "anthropic-messages": "anthropic-messages/anthropic-sonnet-4-thinking-stream.sse",
    "openai-responses": "openai-responses/openai-o3-mini-summary-deltas.sse",
}
"""One recorded stream per translated wire API (``../shared/fixtures/``): thinking then text, and four summary
parts then text."""


def native_streams() -> dict[str, bytes]:
    """The recorded stream of each translated wire API by its name; empty when ``../shared`` is absent."""
    root = FIXTURES.parent
    return {wire: (root / name).read_bytes() for wire, name in NATIVE_STREAMS.items() if (root / name).is_file()}


COMPLETION: dict[str, Any] = {
    "id": "gen-bench-1",
    "object": "chat.completion",
    "created": 1790000000,
    "model": _MODEL,
    "choices": [
        {
            "index": 0,
            "finish_reason": "stop",
            "message": {
                "role": "assistant",
                "content": 'The letter r appears three times in "strawberry".',
                "reasoning": "Spell it out: s, t, r, a, w, b, e, r, r, y. That is r at positions 3, 8 and 9.",
                "reasoning_details": [
                    {
                        "type": "reasoning.text",
                        "text": "Spell it out: s, t, r, a, w, b, e, r, r, y. That is r at positions 3, 8 and 9.",
                        "signature": "EqQBCkgIBxABGAIqQ" + "A" * 200,
                        "format": "anthropic-claude-v1",
                    }
                ],
            },
        }
    ],
    "usage": {"prompt_tokens": 24, "completion_tokens": 212, "total_tokens": 236},
}
"""The buffered completion the loopback upstream answers with (spec 004 "Response fields")."""


def completion_body() -> bytes:
    return _compact(COMPLETION)


def upstream_stream_events() -> list[bytes]:
    """The short stream the loopback upstream sends (40 events, spec 004 shape)."""
    return spec_stream_events(40)
