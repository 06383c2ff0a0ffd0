"""A paced loopback upstream: ``python -m benchmarks.paced --port N [--gap-ms 20] [--idle-gap-s 3]``.

Like ``benchmarks.upstream`` (Starlette on uvicorn, 127.0.0.1 only), but a stream's events are sent ``--gap-ms``
apart, as a model produces tokens, so that the latency a proxy adds to each event can be seen. What
``POST /v1/chat/completions`` streams depends on the request's ``model``:

- ``"paced-think"``: a 40-event local stream whose reasoning is inside ``<think>`` tags in ``content``
  (``payloads.local_stream_events``), its first answer piece starting with ``ANSWER_MARK``;
- ``"idle"``: one spec-shaped chunk every ``--idle-gap-s`` seconds, ``IDLE_EVENTS`` of them (an open stream that
  is mostly waiting, as a slow model's);
- any other model: the 40-event spec-shaped stream (spec 004's example: reasoning chunks, then content).

A buffered request (no ``"stream":true``) is answered with the harness's fixed completion at once.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator, Sequence

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from benchmarks import payloads

ANSWER_MARK = b"ANSWER"
"""The bytes the think stream's first answer piece starts with: a client finds its first content byte by them."""

IDLE_EVENTS = 100
"""Events of an idle stream (at 3 s apart, five minutes: longer than any measurement holds it)."""


def think_events() -> list[bytes]:
    """The 40-event ``<think>``-tagged local stream, the first answer piece marked with ``ANSWER_MARK``."""
    events = payloads.local_stream_events(40, "tags")
    closing = next(i for i, event in enumerate(events) if b"</think>" in event)
    events[closing + 1] = events[closing + 1].replace(b'"content":"', b'"content":"' + ANSWER_MARK + b" ", 1)
    return events


SPEC_EVENTS = payloads.upstream_stream_events()
THINK_EVENTS = think_events()
IDLE_EVENT = payloads.spec_stream_events(40)[1]
COMPLETION = payloads.completion_body()


def create_app(gap_seconds: float, idle_gap_seconds: float) -> Starlette:
    async def paced(events: list[bytes], gap: float) -> AsyncIterator[bytes]:
        for i, event in enumerate(events):
            if i:
                await anyio.sleep(gap)
            yield event

    async def idle() -> AsyncIterator[bytes]:
        for i in range(IDLE_EVENTS):
            if i:
                await anyio.sleep(idle_gap_seconds)
            yield IDLE_EVENT
        yield b"data: [DONE]\n\n"

    async def chat(request: Request) -> Response:
        body = await request.body()
        if b'"stream":true' not in body and b'"stream": true' not in body:
            return Response(COMPLETION, media_type="application/json")
        if b'"model":"idle"' in body:
            return StreamingResponse(idle(), media_type="text/event-stream")
        events = THINK_EVENTS if b'"model":"paced-think"' in body else SPEC_EVENTS
        return StreamingResponse(paced(events, gap_seconds), media_type="text/event-stream")

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/chat/completions", chat, methods=["POST"]),
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.paced", description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--gap-ms", type=float, default=20.0, help="milliseconds between a stream's events")
    parser.add_argument("--idle-gap-s", type=float, default=3.0, help="seconds between an idle stream's events")
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    app = create_app(args.gap_ms / 1000, args.idle_gap_s)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level=args.log_level, backlog=4096)
    return 0


if __name__ == "__main__":
    sys.exit(main())
