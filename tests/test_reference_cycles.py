"""A request through the sidecar or the middleware leaves no reference cycle behind: everything it made is freed
when its last reference goes, so CPython's cycle collector has nothing of it to find (``upstream.close_upstream``,
the client watch's ``stop``). Cyclic garbage made at each request makes the collector run every few requests, and
each run pauses every request on the event loop. Driven as a real server drives the app (``benchmarks.garbage``:
raw ASGI with a ``receive`` that waits until the answer is sent, as uvicorn's does), against a real loopback
upstream, on each upstream transport."""

from __future__ import annotations

import json

import pytest

from benchmarks.garbage import (
    COMPLETION,
    STREAM,
    bare_app,
    cyclic_garbage,
    drive,
    loopback_upstream,
    main,
    of_libraries,
)
from benchmarks.payloads import plain_2kb
from numi_mw import ReasoningMiddleware
from numi_mw.proxy import create_app
from numi_mw.upstream import UPSTREAM_TRANSPORTS
from tests.response_support import sse_chunks


def _reasoning(answer: bytes, stream: bool) -> str:
    """The reasoning text of an answer, buffered or streamed (its chunks' ``delta.reasoning``)."""
    if not stream:
        return str(json.loads(answer)["choices"][0]["message"]["reasoning"])
    return "".join(
        choice["delta"].get("reasoning") or "" for chunk in sse_chunks(answer) for choice in chunk["choices"]
    )


EXPECTED = {False: _reasoning(COMPLETION, False), True: _reasoning(STREAM, True)}
"""The reasoning the upstream's completion and its stream carry, which reaches the client as it is."""


@pytest.mark.parametrize("transport", UPSTREAM_TRANSPORTS)
@pytest.mark.parametrize("stream", [False, True], ids=["buffered", "stream"])
async def test_a_request_through_the_sidecar_leaves_no_reference_cycle(transport: str, stream: bool) -> None:
    body = plain_2kb(stream=stream)
    async with loopback_upstream() as url:
        app = create_app(url, provider="openrouter", upstream_transport=transport)
        async with app.router.lifespan_context(app):
            first = await drive(app, body)  # the pool's connection and every lazy import made
            with cyclic_garbage() as found:
                answers = [await drive(app, body) for _ in range(3)]
    assert first[0] == 200
    assert [status for status, _ in answers] == [200, 200, 200]
    assert [_reasoning(answer, stream) for _, answer in answers] == [EXPECTED[stream]] * 3
    assert of_libraries(found) == []


async def _app(scope: object, receive: object, send: object) -> None:
    from benchmarks.garbage import _bare_app

    await _bare_app(scope, receive, send)


@pytest.mark.parametrize("stream", [False, True], ids=["buffered", "stream"])
async def test_a_request_through_the_middleware_leaves_no_reference_cycle(stream: bool) -> None:
    body = plain_2kb(stream=stream)
    app = ReasoningMiddleware(bare_app, provider="openrouter")
    await drive(app, body)
    with cyclic_garbage() as found:
        answers = [await drive(app, body) for _ in range(3)]
    assert [status for status, _ in answers] == [200, 200, 200]
    assert [_reasoning(answer, stream) for _, answer in answers] == [EXPECTED[stream]] * 3
    assert of_libraries(found) == []


def test_the_harness_prints_no_cyclic_object_for_any_path(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--requests", "3"]) == 0
    rows = [line.split(" | ") for line in capsys.readouterr().out.splitlines()[2:]]
    assert [(row[0], row[1], row[2]) for row in rows] == [
        (f"| {path}", answer, "0.0; 0.0")
        for path in ("sidecar, httpcore", "sidecar, aiohttp", "middleware")
        for answer in ("buffered", "40-event stream")
    ]
