"""A trivial loopback upstream: ``python -m benchmarks.upstream --port N``.

An in-memory Starlette app on uvicorn. ``POST /v1/chat/completions`` answers a fixed completion (spec 004
"Response fields": reasoning and a signed detail), or, when the body asks for ``"stream":true``, a fixed 40-event
SSE stream shaped like spec 004's example, sent event by event. ``GET /v1/models`` lists one model. It listens on
127.0.0.1 only. With ``--close`` every answer says ``Connection: close`` and uvicorn closes its connection after
it, so a proxy in front opens a new upstream connection for each request.
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
from starlette.types import ASGIApp, Message, Receive, Scope, Send

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


class _Closing:
    """ASGI middleware: every answer's head gets ``Connection: close`` (uvicorn then closes the connection)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def closing(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), (b"connection", b"close")]}
            await send(message)

        await self.app(scope, receive, closing)


def create_app(*, close: bool = False) -> ASGIApp:
    app = Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/chat/completions", chat, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
        ]
    )
    return _Closing(app) if close else app


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.upstream", description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log-level", default="warning")
    parser.add_argument("--close", action="store_true", help="close each connection after its answer")
    args = parser.parse_args(argv)
    uvicorn.run(create_app(close=args.close), host="127.0.0.1", port=args.port, log_level=args.log_level)
    return 0


if __name__ == "__main__":
    sys.exit(main())
