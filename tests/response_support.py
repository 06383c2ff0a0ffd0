"""Helpers for response tests: run bytes through the core's ``SSERewriter`` and read the client's view."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any

from openai.lib.streaming._deltas import accumulate_delta

from benchmarks.payloads import split_events
from numi_mw.core import chunks as chunks_module
from numi_mw.core.chunks import ChunkNormalizer
from numi_mw.core.response import JSONRewriter, ResponseOptions, SSERewriter
from numi_mw.core.sse import SSEDecoder
from numi_mw.core.think import ThinkTags


def general_path_only(*, exclude: bool = False, think: ThinkTags | None = None) -> ChunkNormalizer:
    """A ``ChunkNormalizer`` with its fast paths switched off, to check them against: every chunk takes the general
    path. Set through its attribute rather than a subclass, since the compiled core's classes take none."""
    normalizer = ChunkNormalizer(exclude=exclude, think=think)
    normalizer._fast_path = chunks_module._FAST_NONE
    return normalizer


def rewrite(body: bytes, *, exclude: bool = False, think: ThinkTags | None = None, cuts: tuple[int, ...] = ()) -> bytes:
    """The client's bytes for an upstream SSE ``body`` fed in pieces cut at ``cuts``."""
    rewriter = SSERewriter(ResponseOptions(exclude=exclude, think=think))
    bounds = [0, *cuts, len(body)]
    out = [rewriter.feed(body[a:b]) for a, b in itertools.pairwise(bounds)]
    return b"".join(out) + rewriter.finish()


def rewrite_by_event(body: bytes, *, exclude: bool = False, think: ThinkTags | None = None) -> bytes:
    """The client's bytes for ``body`` fed one event per chunk, as most upstreams send it (so the decoder's
    one-event fast path, ``SSEDecoder.single_data``, carries most events)."""
    rewriter = SSERewriter(ResponseOptions(exclude=exclude, think=think))
    out = [rewriter.feed(event) for event in split_events(body)]
    return b"".join(out) + rewriter.finish()


def rewrite_json(body: bytes, *, exclude: bool = False, think: ThinkTags | None = None) -> bytes:
    rewriter = JSONRewriter(ResponseOptions(exclude=exclude, think=think))
    return rewriter.feed(body) + rewriter.finish()


def sse_chunks(body: bytes) -> list[dict[str, Any]]:
    """The chat completion chunks (JSON data of the events, without ``[DONE]``) of an SSE body."""
    decoder = SSEDecoder()
    chunks = []
    for event in decoder.feed(body) + decoder.flush():
        if event.data is not None and not event.is_done:
            chunks.append(json.loads(event.data))
    return chunks


def data_events(body: bytes) -> list[bytes]:
    """The events of an SSE body that are one ``data:`` line and its blank line, as bytes, in order."""
    return [event for event in split_events(body) if event.startswith(b"data: ")]


def frame_jsonl(raw: bytes) -> bytes:
    """``.jsonl`` fixture lines (SSE framing removed by their source) framed as an SSE stream."""
    return b"".join(b"data: " + line + b"\n\n" for line in raw.splitlines() if line.strip()) + b"data: [DONE]\n\n"


def accumulate_delta_2x(acc: dict[str, Any], delta: dict[str, Any]) -> dict[str, Any]:
    """How openai-python 2.x accumulates a delta (``openai.lib.streaming._deltas``, before 3.x): the same merge
    by ``index`` and string concatenation, except that a list met for the first time is taken as it is, so two
    entries of one ``index`` inside the first delta that carries the list stay two entries."""
    for key, value in delta.items():
        if acc.get(key) is None or key in ("index", "type"):
            acc[key] = value
            continue
        old = acc[key]
        if isinstance(old, str) and isinstance(value, str):
            acc[key] = old + value
        elif isinstance(old, dict) and isinstance(value, dict):
            accumulate_delta_2x(old, value)
        elif isinstance(old, list) and isinstance(value, list):
            for entry in value:
                index = entry["index"]
                if index < len(old):
                    accumulate_delta_2x(old[index], entry)
                else:
                    old.insert(index, entry)
    return acc


@dataclass
class ClientView:
    """What a client reads from normalized chunks (choice 0)."""

    reasoning: str = ""
    content: str = ""
    entries: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str | None = None
    sdk_message: dict[str, Any] = field(default_factory=dict)
    sdk2_message: dict[str, Any] = field(default_factory=dict)  # the same through openai-python 2.x's merge
    chunks_with_reasoning: list[dict[str, Any]] = field(default_factory=list)


def client_view(chunks: list[dict[str, Any]]) -> ClientView:
    view = ClientView()
    acc: dict[object, object] = {}
    acc2: dict[str, Any] = {}
    for chunk in chunks:
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if isinstance(delta.get("reasoning"), str):
                view.reasoning += delta["reasoning"]
                view.chunks_with_reasoning.append(delta)
            if isinstance(delta.get("content"), str):
                view.content += delta["content"]
            view.entries.extend(delta.get("reasoning_details") or [])
            if choice.get("finish_reason") is not None:
                view.finish_reason = choice["finish_reason"]
            accumulate_delta(acc, json.loads(json.dumps(delta)))
            accumulate_delta_2x(acc2, json.loads(json.dumps(delta)))
    view.sdk_message = {str(k): v for k, v in acc.items()}
    view.sdk2_message = acc2
    return view
