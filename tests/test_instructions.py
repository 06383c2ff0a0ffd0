"""``python -m benchmarks.instructions``: its workloads run, and each ratio it prints names two of them."""

from __future__ import annotations

import pytest

from benchmarks import instructions, payloads


def test_every_ratio_names_two_workloads() -> None:
    for name, floor, _ in instructions.FLOOR_RATIOS:
        assert name in instructions.WORKLOADS and floor in instructions.WORKLOADS


@pytest.mark.parametrize("short", sorted(instructions.RECORDED))
def test_a_recorded_stream_workload_and_its_floor_run(short: str) -> None:
    if instructions.RECORDED[short] not in payloads.fixture_streams():
        pytest.skip("shared/fixtures absent")
    for name in (f"stream.{short}", f"stream.floor_{short}"):
        assert name in instructions.WORKLOADS
        instructions._workload(name)(1)  # raises if the stream or the floor cannot run
