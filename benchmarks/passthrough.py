"""A plain pass-through proxy on the sidecar's stack: ``python -m benchmarks.passthrough --upstream URL --port N``.

Starlette and one shared ``httpx.AsyncClient`` on uvicorn, like ``numi-mw serve``, with none of its rules: the
request body is read and forwarded as is, the response streams back chunk by chunk as is. Hop-by-hop headers
are dropped both ways, as any proxy must. ``/v1`` stands for the upstream base URL, as in the sidecar. It listens
on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import AsyncIterator, Sequence

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from numi_mw.asgi import HOP_BY_HOP

_DROP_REQUEST = HOP_BY_HOP | {b"host", b"content-length"}


def create_app(upstream: str) -> Starlette:
    base = upstream.rstrip("/")
    state: dict[str, httpx.AsyncClient] = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with httpx.AsyncClient(timeout=httpx.Timeout(600.0, connect=10.0), trust_env=False) as client:
            state["client"] = client
            yield

    async def relay(response: httpx.Response) -> AsyncIterator[bytes]:
        try:
            async for chunk in response.aiter_raw():
                yield chunk
        finally:
            await response.aclose()

    async def handle(request: Request) -> Response:
        client = state["client"]
        path = request.url.path
        if path == "/v1" or path.startswith("/v1/"):
            path = path[3:]
        query = request.scope.get("query_string", b"")
        url = base + path + ("?" + query.decode("latin-1") if query else "")
        headers = [(k, v) for k, v in request.headers.raw if k not in _DROP_REQUEST]
        upstream_request = client.build_request(request.method, url, headers=headers, content=await request.body())
        try:
            response = await client.send(upstream_request, stream=True)
        except httpx.HTTPError:
            return Response(b'{"error":{"message":"upstream unavailable"}}', status_code=502)
        out = StreamingResponse(
            relay(response), status_code=response.status_code, background=BackgroundTask(response.aclose)
        )
        out.raw_headers = [(k, v) for k, v in response.headers.raw if k.lower() not in HOP_BY_HOP]
        return out

    methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
    return Starlette(routes=[Route("/{path:path}", handle, methods=methods)], lifespan=lifespan)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.passthrough", description=__doc__)
    parser.add_argument("--upstream", required=True, help="upstream base URL, e.g. http://127.0.0.1:8000/v1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    uvicorn.run(create_app(args.upstream), host="127.0.0.1", port=args.port, log_level=args.log_level)
    return 0


if __name__ == "__main__":
    sys.exit(main())
