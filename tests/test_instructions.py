"""``python -m benchmarks.instructions``: its workloads run, and each ratio it prints names two of them."""

from __future__ import annotations

import httpx
import pytest

from benchmarks import instructions, payloads, upstream
from tests.conftest import SHARED_ABSENT


def test_every_ratio_names_two_workloads() -> None:
    for name, floor, _ in instructions.FLOOR_RATIOS:
        assert name in instructions.WORKLOADS and floor in instructions.WORKLOADS


@pytest.mark.parametrize("short", sorted(instructions.RECORDED))
def test_a_recorded_stream_workload_and_its_floor_run(short: str) -> None:
    if instructions.RECORDED[short] not in payloads.fixture_streams():
        pytest.skip(SHARED_ABSENT)
    for name in (f"stream.{short}", f"stream.floor_{short}"):
        assert name in instructions.WORKLOADS
        instructions._workload(name)(1)  # raises if the stream or the floor cannot run


@pytest.mark.parametrize("name", sorted(instructions.NATIVE))
def test_a_translated_stream_workload_runs(name: str) -> None:
    if instructions.NATIVE[name] not in payloads.native_streams():
        pytest.skip(SHARED_ABSENT)
    assert name in instructions.WORKLOADS
    instructions._workload(name)(1)  # raises unless the whole stream was translated


def test_every_server_ratio_names_two_server_workloads() -> None:
    for name, floor in instructions.SERVER_RATIOS:
        assert name in instructions.SERVER_WORKLOADS and floor in instructions.SERVER_WORKLOADS


STREAMED = frozenset(
    (
        "sidecar.stream.httpcore",
        "sidecar.stream.aiohttp",
        "sidecar.stream_new_upstream.aiohttp",
        "floor.passthrough_stream",
        "floor.relay_stream",
        "sidecar.stream_paced.aiohttp",
        "floor.relay_stream_paced",
    )
)
"""The server workloads that send the streamed request (every other one the buffered request)."""


@pytest.mark.parametrize("name", sorted(instructions.SERVER_WORKLOADS))
def test_a_server_workload_serves_its_requests(name: str) -> None:
    """Each server starts in front of the harness's upstream and answers the workload's requests (here without
    callgrind, which only counts them)."""
    marker = instructions._request(name)[1]
    assert marker == (b"data: [DONE]" if name in STREAMED else b'"choices"')
    with instructions._serving(name, None) as (_, url):
        instructions.send(name, url, 2)  # raises unless both are answered whole


async def test_the_closing_upstream_closes_each_connection_after_its_answer() -> None:
    for close, expected in ((False, None), (True, "close")):
        app = upstream.create_app(close=close)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://upstream") as client:
            answered = await client.post("/v1/chat/completions", content=payloads.request_2kb())
        assert (answered.status_code, answered.headers.get("connection")) == (200, expected)
        assert answered.content == payloads.completion_body()
