"""The floor of the sidecar's own stack: ``python -m benchmarks.relay --upstream URL --port N``.

What ``numi-mw serve`` runs on, with nothing else: uvicorn with httptools and its loop (uvloop, accepting a burst of
connections at once: ``numi_mw.serve_loop``), a bare ASGI app, and one ``aiohttp.ClientSession`` to the upstream (no
Starlette, no httpx, no operations layer, no reasoning rules). The request body is read whole and forwarded; the answer
is relayed piece by piece as aiohttp reads it, so a stream stays a stream. The path and query go as the client sent them
(still percent-encoded). Hop-by-hop headers, and those a ``Connection`` header lists, are dropped both ways (RFC 9110
section 7.6.1) by the sidecar's own functions (``asgi.forwarded_headers``, ``upstream.answer_headers``: an answer keeps
its ``content-length`` unless it came chunked), and aiohttp adds none of its default request headers (``User-Agent``,
``Accept``, ``Accept-Encoding``, ``Content-Type``), as in the sidecar. ``/v1`` stands for the upstream base URL. An
upstream that cannot be reached gets a 502 with an OpenAI-style error body. It listens on 127.0.0.1 only.

The same-stack pass-through (``benchmarks.passthrough``) keeps Starlette and httpx's client, which the sidecar
has left behind, and costs more per request than the sidecar itself; this relay is what a request through the
sidecar cannot cost less than, whatever numi_mw does (``docs/performance.md``, "The floor of the stack").
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

import aiohttp
import uvicorn
from yarl import URL

from numi_mw.asgi import HOP_BY_HOP, forwarded_headers
from numi_mw.serve_loop import UVICORN_LOOP
from numi_mw.upstream import answer_headers
from numi_mw.upstream_aiohttp import SKIPPED_AUTO_HEADERS

_DROP_REQUEST = HOP_BY_HOP | {b"host", b"content-length"}
_UNAVAILABLE = b'{"error":{"message":"upstream unavailable","type":"upstream_error","code":"upstream_unavailable"}}'


class Relay:
    """The ASGI app: every method and path under ``/v1`` to the same path under ``upstream`` (a base URL)."""

    def __init__(self, upstream: str) -> None:
        self.base = upstream.rstrip("/")
        self.session: aiohttp.ClientSession | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        path: bytes = scope.get("raw_path") or scope["path"].encode()
        if path == b"/v1" or path.startswith(b"/v1/"):
            path = path[3:]
        query = scope.get("query_string", b"")
        url = URL(self.base + (path + (b"?" + query if query else b"")).decode("latin-1"), encoded=True)
        sent = forwarded_headers(scope["headers"], _DROP_REQUEST)
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in sent]
        assert self.session is not None  # opened by the lifespan
        try:
            response = await self.session.request(
                scope["method"], url, data=body or None, headers=headers, allow_redirects=False
            )
        except (aiohttp.ClientError, OSError):
            start = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(_UNAVAILABLE))]
            await send({"type": "http.response.start", "status": 502, "headers": start})
            await send({"type": "http.response.body", "body": _UNAVAILABLE})
            return
        try:
            answer = answer_headers(response.raw_headers, HOP_BY_HOP, response.status)
            await send({"type": "http.response.start", "status": response.status, "headers": answer})
            async for piece in response.content.iter_any():
                await send({"type": "http.response.body", "body": piece, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            response.release()

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.session = aiohttp.ClientSession(
                    connector=aiohttp.TCPConnector(limit=0),
                    skip_auto_headers=SKIPPED_AUTO_HEADERS,
                    cookie_jar=aiohttp.DummyCookieJar(),
                    auto_decompress=False,
                    trust_env=False,
                    timeout=aiohttp.ClientTimeout(total=None, sock_connect=10.0, sock_read=600.0),
                )
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self.session is not None:
                    await self.session.close()
                await send({"type": "lifespan.shutdown.complete"})
                return


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.relay", description=__doc__.split("\n")[0])
    parser.add_argument("--upstream", required=True, help="upstream base URL, e.g. http://127.0.0.1:8000/v1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    uvicorn.run(
        Relay(args.upstream),
        host="127.0.0.1",
        port=args.port,
        loop=UVICORN_LOOP,  # the sidecar's loop: uvloop, accepting a burst at once
        http="httptools",
        log_level=args.log_level,
        access_log=False,
        server_header=False,
        date_header=False,
        proxy_headers=False,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
