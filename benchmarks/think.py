"""Think splitting (reasoning inside ``content`` on ``local`` routes): what it costs per event, and how long each
``think_start`` setting holds the answer back.

- ``stream.think_2000``: ``SSERewriter`` with think splitting on a 2,000-event local stream whose reasoning is
  inside ``<think>`` tags (``payloads.local_stream_events``, the spec-shaped stream's text) against
  ``SSERewriter`` on the 2,000-event spec-shaped stream (the ``stream.spec_2000`` row's numi_mw side), time per
  event; the splitter alone (``ThinkSplitter.feed`` on the same content texts) is shown beside them.
- ``stream.think_start.content``, ``.auto``, ``.reasoning`` and ``stream.think_switch``: added time to the first
  content byte. A 300-event local stream arrives at a local server's pace (one event every ``PACE`` seconds);
  each event goes through an ``SSERewriter`` as it arrives, its processing timed; the figure is the time the
  client gets its first content byte minus the time the upstream sent the first byte of the answer. Each row is
  the shape its setting is for: ``content`` and ``auto`` on a stream with no tags (an unknown model that writes
  none), ``reasoning`` on a stream with only the closing tag (a template that opens it), the switch on a stream
  whose reasoning came in ``reasoning_content`` (llama.cpp's default), under the default setting. Every shape
  under every setting is in the row's ``extra`` (``null`` where the answer never shows as content, and
  ``wrong_split`` where the client's split is not the shape's).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from benchmarks import payloads
from benchmarks.config import Config
from benchmarks.timing import Measurement, Spread, interleave, sync_runner, timed_ratio
from numi_mw.core.response import ResponseOptions, SSERewriter
from numi_mw.core.sse import SSEDecoder
from numi_mw.core.think import DEFAULT_SWITCH_CHARS, THINK_STARTS, ThinkSplitter, ThinkStart, ThinkTags

PACE = 0.020
"""Seconds between two upstream events: 50 tokens per second, a local server's pace."""

LATENCY_EVENTS = 300
"""Events of the stream the latency rows replay."""


def rewrite_stream(events: list[bytes], think: ThinkTags | None = None) -> Callable[[], bytes]:
    """A run of ``events`` through one new ``SSERewriter`` (per run) with ``think``; returns its output."""
    options = ResponseOptions(think=think)

    def run() -> bytes:
        rewriter = SSERewriter(options)
        out = [rewriter.feed(event) for event in events]
        out.append(rewriter.finish())
        return b"".join(out)

    return run


def _contents(events: list[bytes], key: str = "content") -> list[str]:
    """The ``delta.content`` (or other ``key``) texts of a stream's events."""
    texts = []
    for event in events:
        data = event.removeprefix(b"data: ").strip()
        if data.startswith(b"{"):
            for choice in json.loads(data).get("choices") or []:
                text = choice["delta"].get(key)
                if text:
                    texts.append(text)
    return texts


def _split(body: bytes) -> tuple[str, str]:
    """The reasoning and content a client reads from an SSE body."""
    reasoning = content = ""
    decoder = SSEDecoder()
    for event in decoder.feed(body) + decoder.flush():
        if event.data is None or event.is_done:
            continue
        for choice in json.loads(event.data).get("choices") or []:
            reasoning += choice["delta"].get("reasoning") or ""
            content += choice["delta"].get("content") or ""
    return reasoning, content


def cost_measurement(config: Config) -> Measurement:
    """``stream.think_2000``: the think splitter's cost per event on a tagged stream beside the plain stream."""
    plain = payloads.spec_stream_events(2000)
    tagged = payloads.local_stream_events(2000, "tags")
    texts = _contents(tagged)
    think = ThinkTags()
    reasoning, content = _split(rewrite_stream(tagged, think)())
    if "<think>" in content or not reasoning or not content:
        raise RuntimeError("stream.think_2000: the tagged stream was not split")

    def splitter_alone() -> None:
        splitter = ThinkSplitter(lookahead_chars=0)
        for text in texts:
            splitter.feed(text)
        splitter.flush()

    samples = interleave(
        {
            "numi_mw, plain stream": sync_runner(rewrite_stream(plain, None)),
            "numi_mw + think, tagged stream": sync_runner(rewrite_stream(tagged, think)),
            "think splitter alone": sync_runner(splitter_alone),
        },
        config.rounds,
        config.batch_seconds,
    )
    per_event = {name: [t / len(plain) for t in values] for name, values in samples.items()}
    splitter = Spread.of(per_event["think splitter alone"]).median
    return timed_ratio(
        "stream.think_2000",
        "SSERewriter with think splitting on a 2,000-event stream with <think> tags in content vs SSERewriter on "
        "the 2,000-event spec-shaped stream (time per event)",
        per_event,
        "numi_mw + think, tagged stream",
        "numi_mw, plain stream",
        "<=",
        1.5,
        extra={"events": len(tagged), "splitter_us_per_event": splitter * 1e6},
        others=["think splitter alone"],
    )


def _answer_start(shape: str, events: int) -> int:
    """The index of the upstream event that carries the answer's first byte (``local_stream_events``)."""
    return 0 if shape == "plain" else max(1, int((events - 3) * 0.6))


def first_content_delay(events: list[bytes], shape: str, think: ThinkTags) -> float | None:
    """Seconds from the upstream's first answer byte to the client's first content byte, events arriving every
    ``PACE`` seconds and each processed as it arrives (processing timed); ``None`` when no content came."""
    rewriter = SSERewriter(ResponseOptions(think=think))
    free = 0.0  # when the rewriter is done with the events so far
    answer = _answer_start(shape, len(events)) * PACE
    for index, event in enumerate(events):
        start = max(index * PACE, free)
        began = time.perf_counter()
        out = rewriter.feed(event)
        free = start + time.perf_counter() - began
        if b'"content":"' in out and _split(out)[1]:
            return free - answer
    began = time.perf_counter()
    out = rewriter.finish()
    free += time.perf_counter() - began
    return free - answer if _split(out)[1] else None


def _expected(shape: str, events: list[bytes]) -> tuple[str, str]:
    """The split a client should read for a shape: the reasoning and answer texts as the stream carries them."""
    texts = _contents(events)
    if shape == "plain":
        return "", "".join(texts)
    if shape == "fields":
        return "".join(_contents(events, "reasoning_content")), "".join(texts)
    joined = "".join(texts).removeprefix("<think>\n")
    head, _, tail = joined.partition("\n</think>\n\n")
    return head + "\n", tail


ROWS: tuple[tuple[str, ThinkStart, str], ...] = (
    ("stream.think_start.content", "content", "plain"),
    ("stream.think_start.auto", "auto", "plain"),
    ("stream.think_start.reasoning", "reasoning", "closing"),
    ("stream.think_switch", "content", "fields"),
)
"""Each latency row: its name, the setting and the stream shape it is measured on."""


def latency_measurements(config: Config) -> list[Measurement]:
    """Added time to the first content byte for each ``think_start`` value, and for the switch from reasoning
    fields (module docstring)."""
    streams = {shape: payloads.local_stream_events(LATENCY_EVENTS, shape) for shape in payloads.LOCAL_SHAPES}
    settings = {start: ThinkTags(start=start) for start in THINK_STARTS}
    matrix: dict[str, dict[str, float | str | None]] = {}
    for shape, events in streams.items():
        row: dict[str, float | str | None] = {}
        for start, think in settings.items():
            if _split(rewrite_stream(events, think)()) != _expected(shape, events):
                row[start] = "wrong_split"
                continue
            delay = first_content_delay(events, shape, think)
            row[start] = None if delay is None else round(delay * 1e3, 3)
        matrix[shape] = row
    out = []
    for name, start, shape in ROWS:
        events = streams[shape]
        delays = []
        for _ in range(config.rounds):
            delay = first_content_delay(events, shape, settings[start])
            if delay is None:
                raise RuntimeError(f"{name}: no content reached the client")
            delays.append(delay * 1e3)
        spread = Spread.of(delays)
        target = _target(name, events, shape)
        title = f"added time to the first content byte, think_start {start}, {shape} stream at {1 / PACE:g} events/s"
        out.append(
            Measurement(
                name,
                title,
                spread.median,
                spread,
                "<=",
                target,
                extra={"events": len(events), "pace_s": PACE, "by_shape_ms": matrix},
                unit=" ms",
            )
        )
    return out


def _target(name: str, events: list[bytes], shape: str) -> float:
    """The row's bound in milliseconds: what its setting may hold by design, plus 1 ms of processing.

    ``auto`` may hold a tag-less answer to its end; the switch holds at most ``DEFAULT_SWITCH_CHARS``
    characters, which on this stream is the events up to the first that makes the held text longer; the others
    hold nothing.
    """
    if name == "stream.think_start.auto":
        return (len(events) - 2 - _answer_start(shape, len(events))) * PACE * 1e3 + 1.0
    if name == "stream.think_switch":
        held = 0
        for index, text in enumerate(_contents(events)):
            held += len(text)
            if held > DEFAULT_SWITCH_CHARS:
                return index * PACE * 1e3 + 1.0
        return (len(events) - 2 - _answer_start(shape, len(events))) * PACE * 1e3 + 1.0
    return 1.0
