"""End-to-end helpers: a replay upstream on loopback and the real ``numi-mw serve`` process.

The replay upstream serves recorded provider traffic as recorded and remembers every request it received.
Which recording it serves is chosen by the test with request headers (the sidecar forwards them):
``x-replay-fixture`` (a path under ``shared/fixtures``), ``x-replay-status``, ``x-replay-delay`` (seconds
before the response starts), ``x-replay-drip`` (seconds between SSE events) and ``x-replay-break-after`` (the
number of whole SSE events sent before the connection drops mid-event).
"""

from __future__ import annotations

import contextlib
import gzip
import os
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from benchmarks.loopback import free_port, numi_mw_command, stop_process, wait_for_port
from benchmarks.payloads import split_events
from tests.conftest import SHARED, SIDECAR_TRANSPORT

MODELS = {"object": "list", "data": [{"id": "replay/model", "object": "model", "owned_by": "replay"}]}


def fixture_body(name: str) -> tuple[bytes, str]:
    """The recorded body of fixture ``name`` and its media type; ``.jsonl`` lines are framed as SSE."""
    path = SHARED / "fixtures" / name
    raw = path.read_bytes()
    if name.endswith(".jsonl"):
        lines = [line for line in raw.splitlines() if line.strip()]
        return b"".join(b"data: " + line + b"\n\n" for line in lines) + b"data: [DONE]\n\n", "text/event-stream"
    if name.endswith(".sse"):
        return raw, "text/event-stream"
    return raw, "application/json"


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class ReplayUpstream:
    """A Starlette app on loopback, run by uvicorn in a thread."""

    port: int = field(default_factory=free_port)
    received: list[Received] = field(default_factory=list)
    closed_streams: list[str] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def chat(self, request: Request) -> Response:
        body = await request.body()
        self.received.append(Received(request.method, request.url.path, dict(request.headers), body))
        delay = float(request.headers.get("x-replay-delay", "0"))
        if delay:
            await anyio.sleep(delay)
        status = int(request.headers.get("x-replay-status", "200"))
        if request.headers.get("x-replay-broken-gzip"):
            headers = {"content-encoding": "gzip"}
            media = request.headers["x-replay-broken-gzip"]
            return Response(b"this is not gzip", status_code=status, media_type=media, headers=headers)
        if request.headers.get("x-replay-html"):  # an answer that is no API's: a proxy's page
            return Response(b"<html>hi</html>", status_code=status, media_type="text/html")
        name = request.headers.get("x-replay-fixture")
        if name is None:
            return JSONResponse({"error": {"message": "replay: no fixture named"}}, status_code=status)
        raw, media_type = fixture_body(name)
        if media_type != "text/event-stream":
            return Response(raw, status_code=status, media_type=media_type, headers={"set-cookie": "replay=1"})
        drip = float(request.headers.get("x-replay-drip", "0"))
        if request.headers.get("x-replay-gzip"):  # the stream gzip-compressed, sent in 97-byte pieces
            packed = gzip.compress(raw)
            pieces = [packed[i : i + 97] for i in range(0, len(packed), 97)]
            return StreamingResponse(
                iter(pieces), status_code=status, media_type=media_type, headers={"content-encoding": "gzip"}
            )
        cut = request.headers.get("x-replay-break-after")
        events = self._events(name, raw, drip, None if cut is None else int(cut))
        return StreamingResponse(events, status_code=status, media_type=media_type)

    async def _events(self, name: str, raw: bytes, drip: float, cut: int | None) -> AsyncIterator[bytes]:
        try:
            for number, event in enumerate(split_events(raw)):
                if number == cut:  # half an event, then the connection drops (uvicorn aborts it)
                    yield event[: len(event) // 2]
                    raise ConnectionAbortedError("replay: the stream breaks off here")
                yield event
                if drip:
                    await anyio.sleep(drip)
        finally:
            self.closed_streams.append(name)

    async def other(self, request: Request) -> Response:
        self.received.append(
            Received(
                request.method, request.scope["raw_path"].decode("latin-1"), dict(request.headers), await request.body()
            )
        )
        return JSONResponse({"path": request.scope["raw_path"].decode("latin-1")})

    async def models(self, request: Request) -> Response:
        self.received.append(Received(request.method, request.url.path, dict(request.headers), b""))
        return JSONResponse(MODELS)

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/v1/messages", self.chat, methods=["POST"]),
                Route("/v1/responses", self.chat, methods=["POST"]),
                Route("/v1/models", self.models, methods=["GET"]),
                Route("/{path:path}", self.other, methods=["GET", "POST"]),
            ]
        )

    @contextlib.contextmanager
    def running(self) -> Iterator[ReplayUpstream]:
        with serving(self.app(), self.port):
            yield self


@contextlib.contextmanager
def serving(app: Any, port: int) -> Iterator[None]:
    """Run the ASGI ``app`` with uvicorn on ``127.0.0.1:port`` in a thread while the block runs (start and stop
    each bounded by 10 s)."""
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError(f"the server on port {port} did not start within 10 s")
        time.sleep(0.01)
    try:
        yield
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@contextlib.contextmanager
def sidecar(upstream: str | None, *args: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """Run ``numi-mw serve [--upstream UPSTREAM] ARGS`` on a free loopback port, on the upstream transport of the
    ``upstream_transport`` fixture (default httpcore); yields its ``/v1`` base URL."""
    port = free_port()
    command = [*numi_mw_command(), "serve", "--port", str(port), "--log-level", "warning"]
    command += ["--upstream-transport", SIDECAR_TRANSPORT[0]]
    if upstream is not None:
        command += ["--upstream", upstream]
    environment = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    process = subprocess.Popen([*command, *args], env=environment)
    try:
        wait_for_port(port, process)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        stop_process(process)
