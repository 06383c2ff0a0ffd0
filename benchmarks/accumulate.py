"""What storing an answer costs: ``Accumulator.feed_sse`` per event, against the least any reader of a stream pays.

- ``stream.accumulate.spec_2000``: the 2,000-event spec-shaped stream, fed one event per call to one new
  ``Accumulator`` (then ``finish`` and ``message``), against ``floor: msgspec decode per event`` (the bare split
  with its one-event fast path, then msgspec's decode of every event's data: what any design that reads every
  chunk costs at least). Time per event, accumulator / floor. ``Accumulator(normalize=False)`` (an answer
  numi_mw already normalized) is shown beside them.
- ``stream.accumulate.fixture.<name>``: the same on the recorded OpenRouter Claude stream (real signatures), when
  ``../shared`` is present.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from benchmarks import payloads
from benchmarks.config import Config
from benchmarks.timing import Measurement, interleave, sync_runner, timed_ratio
from numi_mw.core.accumulate import Accumulator
from numi_mw.core.sse import SSEDecoder

FLOOR = "floor: msgspec decode per event"
ACCUMULATOR = "Accumulator"
AS_IT_IS = "Accumulator(normalize=False)"
RECORDED = "openrouter-claude-sonnet-4.5-reasoning-details"
"""The recorded stream of the fixture row: a signed Claude thinking block, OpenRouter's placeholders, usage."""

TARGET = 6.0
"""Accumulating costs at most this many msgspec decodes of the same event: it decodes once, normalizes (the
sidecar's own path, ``stream.spec_2000.vs_split``) and merges into the message."""


def _accumulate(events: list[bytes], *, normalize: bool = True) -> Callable[[], dict[str, Any]]:
    def run() -> dict[str, Any]:
        accumulator = Accumulator(normalize=normalize)
        for event in events:
            accumulator.feed_sse(event)
        accumulator.finish()
        return accumulator.message()

    return run


def _floor(events: list[bytes]) -> Callable[[], list[Any]]:
    decode = msgspec.json.Decoder().decode

    def run() -> list[Any]:
        decoder = SSEDecoder()
        out = []
        for event in events:
            data = decoder.single_data(event)
            if data is None:
                out.extend(decode(e.data) for e in decoder.feed(event) if e.data and e.data != b"[DONE]")
            elif data != b"[DONE]":
                out.append(decode(data))
        out.extend(decode(e.data) for e in decoder.flush() if e.data and e.data != b"[DONE]")
        return out

    return run


def measurement(name: str, label: str, events: list[bytes], rounds: int, batch: float) -> Measurement:
    accumulate = _accumulate(events)
    message = accumulate()
    if message.get("role") != "assistant" or not message.get("content"):
        raise RuntimeError(f"{name}: the accumulator did not take the stream")
    if _accumulate(events, normalize=False)()["content"] != message["content"]:
        raise RuntimeError(f"{name}: the two accumulators disagree on the answer")
    samples = interleave(
        {
            ACCUMULATOR: sync_runner(accumulate),
            FLOOR: sync_runner(_floor(events)),
            AS_IT_IS: sync_runner(_accumulate(events, normalize=False)),
        },
        rounds,
        batch,
    )
    per_event = {side: [t / len(events) for t in values] for side, values in samples.items()}
    return timed_ratio(
        name,
        f"Accumulator.feed_sse per event vs msgspec's decode of each event, {label} (time per event)",
        per_event,
        ACCUMULATOR,
        FLOOR,
        "<=",
        TARGET,
        extra={"events": len(events)},
        others=[AS_IT_IS],
    )


def measurements(config: Config) -> list[Measurement]:
    out = [
        measurement(
            "stream.accumulate.spec_2000",
            "2,000-event stream shaped like spec 004",
            payloads.spec_stream_events(2000),
            config.rounds,
            config.batch_seconds,
        )
    ]
    raw = payloads.fixture_streams().get(RECORDED)
    if raw is not None:
        out.append(
            measurement(
                f"stream.accumulate.fixture.{RECORDED}",
                f"recorded {RECORDED}.sse",
                payloads.split_events(raw),
                config.fixture_rounds,
                config.batch_seconds,
            )
        )
    return out
