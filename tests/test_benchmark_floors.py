"""The harness's stream floor does the same work however a stream is cut into reads: it decodes and encodes each
event that mentions ``reasoning`` once, whether the event came alone in a read or inside a read of 1,448 bytes, so
that the ``stream.fixture.*.segments.vs_floor`` rows compare numi_mw with a floor that reads the same events."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from benchmarks import inprocess, payloads
from tests.conftest import SHARED_ABSENT

STREAMS = payloads.fixture_streams()


class _Counting:
    """msgspec's decoder and encoder, counting their calls."""

    def __init__(self) -> None:
        self.decodes = 0
        self.encodes = 0

    def decode(self, data: bytes) -> Any:
        self.decodes += 1
        return msgspec.json.decode(data)

    def encode(self, value: Any) -> bytes:
        self.encodes += 1
        return msgspec.json.encode(value)


def _floor_counts(monkeypatch: pytest.MonkeyPatch, reads: list[bytes]) -> tuple[bytes, int, int]:
    counting = _Counting()
    monkeypatch.setattr(inprocess, "_decoder", counting)
    monkeypatch.setattr(inprocess, "_encoder", counting)
    out = inprocess._floor_stream(reads)()
    return out, counting.decodes, counting.encodes


@pytest.mark.parametrize("stem", sorted(STREAMS) or [pytest.param("", marks=pytest.mark.skip(reason=SHARED_ABSENT))])
def test_floor_reads_every_reasoning_event_in_segments(monkeypatch: pytest.MonkeyPatch, stem: str) -> None:
    raw = STREAMS[stem]
    events = payloads.split_events(raw)
    mentions = sum(1 for event in events if b"reasoning" in event)
    assert mentions > 0
    one, one_decodes, one_encodes = _floor_counts(monkeypatch, events)
    cut, cut_decodes, cut_encodes = _floor_counts(monkeypatch, payloads.split_segments(raw))
    assert (one_decodes, one_encodes) == (mentions, mentions)
    assert (cut_decodes, cut_encodes) == (mentions, mentions)
    assert cut == one
