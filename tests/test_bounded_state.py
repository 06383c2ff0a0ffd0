"""Per-stream state stays bounded however long a stream runs (``docs/streaming.md``, "Streams";
``docs/security.md``, "What a provider sends"): exact outputs at and past each bound, and tracemalloc's current
size flat over many events."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable
from typing import Any

from numi_mw.core.adapters import openai_responses
from numi_mw.core.adapters.base import Answer
from numi_mw.core.adapters.openai_responses import MAX_PART_RUNS
from numi_mw.core.chunks import MAX_GIVEN_CALLS, ChunkNormalizer
from numi_mw.core.think import MAX_ECHO_CHARS, ReasoningEcho, ThinkTags

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


# --- the parts of one Responses output item ------------------------------------------------------------------


def responses_stream() -> openai_responses.StreamTranslator:
    translator = openai_responses.StreamTranslator(Answer("m"))
    translator.event({"type": "response.created", "response": {"id": "resp_1", "model": "m"}})
    translator.event({"type": "response.output_item.added", "output_index": 0, "item": {"type": "reasoning"}})
    return translator


def summary_delta(translator: openai_responses.StreamTranslator, index: Any, text: str) -> list[dict[str, Any]]:
    event = {"type": "response.reasoning_summary_text.delta", "output_index": 0, "summary_index": index}
    return translator.event({**event, "delta": text})


def summaries(chunks: list[dict[str, Any]]) -> list[str]:
    return [c["choices"][0]["delta"]["reasoning_details"][0]["summary"] for c in chunks]


def item_done(translator: openai_responses.StreamTranslator, parts: int) -> list[str]:
    summary = [{"type": "summary_text", "text": f"p{j}"} for j in range(parts)]
    item = {"type": "reasoning", "summary": summary}
    return summaries(translator.event({"type": "response.output_item.done", "output_index": 0, "item": item}))


def test_an_item_remembers_max_part_runs_runs_of_streamed_parts() -> None:
    translator = responses_stream()
    for j in range(0, 2 * MAX_PART_RUNS, 2):  # parts 0, 2, ..., 30 stream: 16 runs of one part each
        summary_delta(translator, j, f"p{j}")
    # the item's .done sends only the parts that had no deltas, once each
    assert item_done(translator, 2 * MAX_PART_RUNS) == [f"\n\np{j}" for j in range(1, 2 * MAX_PART_RUNS, 2)]


def test_past_max_part_runs_the_lowest_run_is_forgotten_and_its_done_text_goes_out_again() -> None:
    translator = responses_stream()
    for j in range(0, 2 * MAX_PART_RUNS + 1, 2):  # parts 0, 2, ..., 32: 17 runs, part 0's is forgotten
        summary_delta(translator, j, f"p{j}")
    expected = ["\n\np0", *(f"\n\np{j}" for j in range(1, 2 * MAX_PART_RUNS + 1, 2))]
    assert item_done(translator, 2 * MAX_PART_RUNS + 1) == expected


def test_parts_that_stream_in_order_are_one_run_however_many() -> None:
    translator = responses_stream()
    for j in range(3 * MAX_PART_RUNS):
        summary_delta(translator, j, f"p{j}")
    assert item_done(translator, 3 * MAX_PART_RUNS) == []


def test_past_max_part_runs_part_keys_that_are_no_integers_forget_the_oldest() -> None:
    translator = responses_stream()
    for k in range(MAX_PART_RUNS + 1):  # "k0" ... "k16": "k0" is forgotten
        summary_delta(translator, f"k{k}", "x")
    done = {"type": "response.reasoning_summary_text.done", "output_index": 0}
    assert translator.event({**done, "summary_index": "k1", "text": "x"}) == []
    assert summaries(translator.event({**done, "summary_index": "k0", "text": "x"})) == ["\n\nx"]


def test_part_state_stays_flat_over_many_parts_of_one_item() -> None:
    translator = responses_stream()
    assert growth(lambda j: summary_delta(translator, j, "s"), 1000, 20_000) < GROWTH_SLACK
    assert item_done(translator, 21_000) == []


# --- the echo of field reasoning in tags -----------------------------------------------------------------------

R = "reasoning"


def test_an_echo_longer_than_max_echo_chars_is_dropped_and_what_is_held_stays_bounded() -> None:
    echo = ReasoningEcho()
    for i in range(3 * MAX_ECHO_CHARS // 1000):  # llama.cpp's legacy echo: each token in both places
        text = f"{i:08d}" * 125
        echo.fields(text)
        assert echo.filter([(R, text)]) == []
        assert sum(map(len, echo._held)) <= MAX_ECHO_CHARS
    assert echo.filter([("content", "Answer")]) == [("content", "Answer")]


def test_held_text_of_max_echo_chars_shorter_than_the_field_reasoning_still_goes_out() -> None:
    echo = ReasoningEcho()
    echo.fields("y" * MAX_ECHO_CHARS)
    assert echo.filter([(R, "y" * MAX_ECHO_CHARS)]) == []
    echo.fields("z")
    assert echo.filter([("content", "Answer")]) == [(R, "y" * MAX_ECHO_CHARS), ("content", "Answer")]


def test_held_text_past_max_echo_chars_that_matches_is_the_echo_and_is_dropped() -> None:
    echo = ReasoningEcho()
    echo.fields("y" * MAX_ECHO_CHARS)
    assert echo.filter([(R, "y" * MAX_ECHO_CHARS)]) == []
    echo.fields("yz")
    assert echo.filter([(R, "y")]) == []  # one character past the bound: the 64 Ki held characters are the echo
    assert echo._held == []
    assert echo.filter([("content", "Answer")]) == [("content", "Answer")]  # the shorter rest is the echo's too


def test_held_whitespace_past_max_echo_chars_goes_out_as_it_came() -> None:
    echo = ReasoningEcho()
    echo.fields("R")
    assert echo.filter([(R, " " * MAX_ECHO_CHARS)]) == []  # at the bound: held
    assert echo.filter([(R, " ")]) == [(R, " " * (MAX_ECHO_CHARS + 1))]
    assert echo.filter([(R, "R")]) == [(R, "R")]  # the rest of the phase goes out as it comes
    started = ReasoningEcho()  # whitespace after matched text
    started.fields("R")
    assert started.filter([(R, "R"), (R, " " * (MAX_ECHO_CHARS - 1))]) == []  # at the bound: held
    assert started.filter([(R, " ")]) == []  # past it: the matched "R" is the echo, the whitespace stays held
    assert started._held == [" " * MAX_ECHO_CHARS]
    assert started.filter([(R, " ")]) == [(R, " " * (MAX_ECHO_CHARS + 1))]  # past it alone: it goes out


def test_field_reasoning_max_echo_chars_ahead_of_held_text_is_forgotten_and_the_held_text_goes_out() -> None:
    at = ReasoningEcho()
    at.fields("a" + "b" * (MAX_ECHO_CHARS - 1))
    assert at.filter([(R, "a")]) == []
    at.fields("b")  # 64 Ki characters not matched yet: still compared
    assert at.filter([(R, "b" * MAX_ECHO_CHARS)]) == []
    past = ReasoningEcho()
    past.fields("a" + "b" * (MAX_ECHO_CHARS - 1))
    assert past.filter([(R, "a")]) == []
    past.fields("bb")  # one more: the field reasoning is forgotten
    assert (past._parts, past._f) == ([], "")
    assert past.filter([(R, "b")]) == [(R, "ab")]  # the held text goes out before the rest, as it came
    assert past.filter([("content", "Answer")]) == [("content", "Answer")]
    settled = ReasoningEcho()
    settled.fields("ab")
    assert settled.filter([(R, "a")]) == []
    settled.fields("c" * MAX_ECHO_CHARS)
    assert settled.settle() == [(R, "a")]


def test_echo_state_stays_flat_over_a_long_echo_and_over_long_field_reasoning_after_held_text() -> None:
    echo = ReasoningEcho()

    def step(i: int) -> None:
        text = f"{i:08d}" * 4
        echo.fields(text)
        assert echo.filter([(R, text)]) == []

    assert growth(step, 1000, 20_000) < GROWTH_SLACK
    ahead = ReasoningEcho()
    ahead.fields("ab")
    assert ahead.filter([(R, "a")]) == []
    assert growth(lambda i: ahead.fields(f"{i:08d}" * 4), 1000, 20_000) < GROWTH_SLACK
