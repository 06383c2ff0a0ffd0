"""Per-stream state stays bounded however long a stream runs (``docs/streaming.md``, "Streams";
``docs/security.md``, "What a provider sends"): exact outputs at and past each bound, and tracemalloc's current
size flat over many events."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable
from typing import Any

from numi_mw.core.chunks import MAX_GIVEN_CALLS, ChunkNormalizer
from numi_mw.core.think import ThinkTags

GROWTH_SLACK = 32 * 1024
"""Bytes tracemalloc's current size may move between two checkpoints of a bounded stream (dict resizes, interned
small objects); state kept per event grows by far more over the events these tests send."""


def growth(step: Callable[[int], object], warm: int, more: int) -> int:
    """tracemalloc's current size after ``warm + more`` calls of ``step`` minus the size after ``warm`` (bytes)."""
    tracemalloc.start()
    try:
        for i in range(warm):
            step(i)
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        for i in range(warm, warm + more):
            step(i)
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


# --- tool call indexes with think splitting ------------------------------------------------------------------

HARMONY = "<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}<|call|>"
"""One harmony tool call in content (gpt-oss through a server without a harmony parser)."""


def chunk(delta: dict[str, Any]) -> dict[str, Any]:
    return {"id": "c1", "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}


def upstream_call(index: Any, arguments: str = "") -> dict[str, Any]:
    return chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments}}]})


def harmony_calls(count: int) -> ChunkNormalizer:
    """A normalizer with think splitting that has found ``count`` harmony tool calls (indexes 0 to count - 1)."""
    normalizer = ChunkNormalizer(think=ThinkTags())
    for n in range(count):
        [announce, _] = normalizer.normalize(chunk({"content": HARMONY}))  # type: ignore[misc]
        assert announce["choices"][0]["delta"]["tool_calls"][0]["index"] == n
    return normalizer


def sent_index(out: Any) -> Any:
    [one] = out
    return one["choices"][0]["delta"]["tool_calls"][0]["index"]


def test_an_upstream_call_is_kept_apart_from_the_last_max_given_calls_harmony_calls() -> None:
    normalizer = harmony_calls(MAX_GIVEN_CALLS)
    # index 0 is the oldest of the 128 indexes numi_mw gave: the upstream's call 0 still moves off it
    assert sent_index(normalizer.normalize(upstream_call(0, "{"))) == MAX_GIVEN_CALLS
    assert sent_index(normalizer.normalize(upstream_call(0, "}"))) == MAX_GIVEN_CALLS  # the same call goes on there
    assert normalizer.normalize(upstream_call(MAX_GIVEN_CALLS + 7)) is None  # an index never given: as it came
    state = normalizer._choices[0]
    assert (len(state.given), len(state.moved)) == (MAX_GIVEN_CALLS, 1)


def test_past_max_given_calls_an_upstream_call_on_a_forgotten_harmony_index_goes_as_it_came() -> None:
    normalizer = harmony_calls(MAX_GIVEN_CALLS + 1)  # harmony call 0 is forgotten
    assert normalizer.normalize(upstream_call(0, "{")) is None  # index 0 as it came
    assert sent_index(normalizer.normalize(upstream_call(1, "{"))) == MAX_GIVEN_CALLS + 1  # 1 is still remembered
    # a harmony call after them takes the index past every index sent
    [announce, _] = normalizer.normalize(chunk({"content": HARMONY}))  # type: ignore[misc]
    assert sent_index([announce]) == MAX_GIVEN_CALLS + 2


def test_a_moved_call_forgotten_past_max_given_calls_goes_on_at_its_own_index() -> None:
    normalizer = harmony_calls(1)  # harmony call 0
    assert sent_index(normalizer.normalize(upstream_call(0, "{"))) == 1  # moved off 0
    for _ in range(MAX_GIVEN_CALLS - 2):  # indexes 2 to 127 given: 128 remembered, 0 and 1 the oldest
        normalizer.normalize(chunk({"content": HARMONY}))
    assert sent_index(normalizer.normalize(upstream_call(0, "x"))) == 1
    normalizer.normalize(chunk({"content": HARMONY}))  # index 128 given: 0 is forgotten
    assert sent_index(normalizer.normalize(upstream_call(0, "y"))) == 1
    normalizer.normalize(chunk({"content": HARMONY}))  # index 129 given: 1 (the move of call 0) is forgotten
    assert normalizer.normalize(upstream_call(0, "z")) is None  # goes on at its own index, as it came
    state = normalizer._choices[0]
    assert (len(state.given), state.moved) == (MAX_GIVEN_CALLS, {})


def test_tool_call_state_stays_flat_over_many_upstream_and_harmony_calls() -> None:
    normalizer = ChunkNormalizer(think=ThinkTags())
    harmony = chunk({"content": HARMONY})

    def step(i: int) -> None:  # harmony call i takes index 2i; the upstream's call 2i then moves to 2i + 1
        normalizer.normalize({**harmony, "choices": [dict(harmony["choices"][0])]})
        normalizer.normalize(upstream_call(2 * i, "{}"))

    assert growth(step, 2 * MAX_GIVEN_CALLS, 10_000) < GROWTH_SLACK
    state = normalizer._choices[0]
    assert (len(state.given), len(state.moved)) == (MAX_GIVEN_CALLS, MAX_GIVEN_CALLS // 2)
