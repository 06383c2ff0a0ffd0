"""What each request leaves to CPython's cycle collector: ``python -m benchmarks.garbage``.

An object in a reference cycle is not freed when its last outside reference goes; it waits for the cycle
collector, which runs once allocations outnumber frees by 700 (``gc.get_threshold``) and pauses every request on
the event loop while it runs. A request that leaves cycles behind makes the collector run every few requests.

For each path (the sidecar on each upstream transport, buffered and streamed, and the middleware around a bare
ASGI app), the harness's 2 KB request is driven as a server drives it (raw ASGI: a ``receive`` that waits until
the answer is sent, as uvicorn's does) against a loopback upstream in this process that answers the harness's
completion or its 40-event stream. It prints, over ``--requests`` requests after a warm-up one:

- ``cyclic objects per request``: the objects only the cycle collector frees (``gc.DEBUG_SAVEALL``), of the
  libraries a request goes through (numi_mw, httpx, httpcore, aiohttp, starlette, anyio) and of any other kind;
- ``collections per 1,000 requests``: how often the collector ran meanwhile, at its default thresholds.

Everything listens on 127.0.0.1; every request is bounded in time (``WAIT``).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import anyio

from benchmarks import payloads
from benchmarks.inprocess import chat_scope

WAIT = 10.0
"""The longest one request may take, in seconds (a bound, never a measure)."""

LIBRARIES = ("numi_mw", "httpx", "httpcore", "aiohttp", "starlette", "anyio")
"""The packages a request through numi_mw goes through, by top-level module name."""

COMPLETION = payloads.completion_body()
STREAM = b"".join(payloads.upstream_stream_events())


def answer_for(body: bytes) -> tuple[bytes, bytes]:
    """The upstream's answer to a chat completions ``body``: its content and media type (the stream when the body
    asks for one)."""
    if b'"stream":true' in body or b'"stream": true' in body:
        return STREAM, b"text/event-stream"
    return COMPLETION, b"application/json"


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A keep-alive HTTP/1.1 upstream: each request's answer (``answer_for``) with its ``content-length``, until
    the client closes the connection."""
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            length = 0
            for line in head.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            content, media = answer_for(await reader.readexactly(length))
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n%s" % (media, len(content), content)
            )
            await writer.drain()
    finally:
        writer.close()


@asynccontextmanager
async def loopback_upstream() -> AsyncIterator[str]:
    """A loopback upstream (``_serve``) on a free port of 127.0.0.1; yields its base URL (``http://…/v1``)."""
    handlers: set[asyncio.Task[None]] = set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.add(task)
        await _serve(reader, writer)

    listener = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        listener.close()
        pending = {task for task in handlers if not task.done()}
        if pending:  # the client has closed its connections: each handler ends on its own
            _, pending = await asyncio.wait(pending, timeout=WAIT)
        for task in pending:
            task.cancel()


async def drive(app: Any, body: bytes) -> tuple[int, bytes]:
    """One request of ``body`` through the ASGI ``app`` as a server drives it: ``receive`` gives the body, then
    waits until the answer has been sent whole before it says the client left. Returns the status and the body.

    Raises:
        TimeoutError: the request took longer than ``WAIT`` seconds.
    """
    sent = asyncio.Event()
    given = False
    status = 0
    chunks: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        await sent.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                sent.set()

    with anyio.fail_after(WAIT):
        await app(chat_scope(body), receive, send)
    return status, b"".join(chunks)


@contextmanager
def cyclic_garbage() -> Iterator[list[str]]:
    """Collects the objects made inside that only the cycle collector frees: yields a list that holds, once the
    block ends, their type names (``module.qualname``), sorted."""
    found: list[str] = []
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield found
        gc.collect()
        found.extend(f"{type(thing).__module__}.{type(thing).__qualname__}" for thing in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    found.sort()


def of_libraries(names: list[str]) -> list[str]:
    """The names of ``names`` (``cyclic_garbage``'s) whose module is of one of ``LIBRARIES``."""
    return [name for name in names if name.split(".")[0] in LIBRARIES]


@contextmanager
def collections_counted() -> Iterator[list[int]]:
    """Counts the cycle collector's runs inside (any generation), at its thresholds: yields a one-item list."""
    runs = [0]

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            runs[0] += 1

    gc.collect()
    gc.callbacks.append(count)
    try:
        yield runs
    finally:
        gc.callbacks.remove(count)


async def bare_app(scope: Any, receive: Any, send: Any) -> None:
    """The app behind the middleware: the upstream's answer for the body it receives, in one message."""
    message = await receive()
    content, media = answer_for(message["body"])
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", media)]})
    await send({"type": "http.response.body", "body": content, "more_body": False})


async def _measure(path: str, transport: str | None, stream: bool, requests: int) -> tuple[float, float, float]:
    """``(cyclic objects of LIBRARIES per request, all cyclic objects per request, collections per 1,000)``."""
    from numi_mw import ReasoningMiddleware
    from numi_mw.proxy import create_app

    body = payloads.request_2kb(stream=stream)

    async def run(app: Any) -> tuple[float, float, float]:
        await drive(app, body)
        with cyclic_garbage() as found:
            for _ in range(requests):
                await drive(app, body)
        with collections_counted() as runs:
            for _ in range(requests):
                await drive(app, body)
        return len(of_libraries(found)) / requests, len(found) / requests, runs[0] * 1000 / requests

    if path == "middleware":
        return await run(ReasoningMiddleware(bare_app, provider="openrouter"))
    async with loopback_upstream() as url:
        app = create_app(url, provider="openrouter", upstream_transport=transport)
        async with app.router.lifespan_context(app):
            return await run(app)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.garbage", description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1000, help="requests per path (default 1000)")
    args = parser.parse_args(argv)
    if args.requests < 1:
        parser.error("--requests must be at least 1")
    from numi_mw.upstream import UPSTREAM_TRANSPORTS

    paths = [("sidecar", transport) for transport in UPSTREAM_TRANSPORTS] + [("middleware", None)]
    print("| path | answer | cyclic objects per request (of the libraries; all) | collections per 1,000 requests |")
    print("|---|---|---|---|")
    for path, transport in paths:
        for stream in (False, True):
            ours, every, runs = asyncio.run(_measure(path, transport, stream, args.requests))
            name = f"{path}, {transport}" if transport else path
            answer = "40-event stream" if stream else "buffered"
            print(f"| {name} | {answer} | {ours:.1f}; {every:.1f} | {runs:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
