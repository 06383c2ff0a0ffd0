"""A trivial loopback upstream: ``python -m benchmarks.upstream --port N``.

An in-memory Starlette app on uvicorn. ``POST /v1/chat/completions`` answers a fixed completion (spec 004
"Response fields": reasoning and a signed detail), or, when the body asks for ``"stream":true``, a fixed 40-event
SSE stream shaped like spec 004's example, sent event by event. ``GET /v1/models`` lists one model. It listens on
127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator, Sequence

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from benchmarks import payloads

COMPLETION = payloads.completion_body()
EVENTS = payloads.upstream_stream_events()
MODELS = b'{"object":"list","data":[{"id":"bench/model","object":"model","owned_by":"bench"}]}'


async def _events() -> AsyncIterator[bytes]:
    for event in EVENTS:
        yield event


async def chat(request: Request) -> Response:
    body = await request.body()
    if b'"stream":true' in body or b'"stream": true' in body:
        return StreamingResponse(_events(), media_type="text/event-stream")
    return Response(COMPLETION, media_type="application/json")


async def models(request: Request) -> Response:
    return Response(MODELS, media_type="application/json")


def create_app() -> Starlette:
    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/chat/completions", chat, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.upstream", description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    uvicorn.run(create_app(), host="127.0.0.1", port=args.port, log_level=args.log_level)
    return 0


if __name__ == "__main__":
    sys.exit(main())
