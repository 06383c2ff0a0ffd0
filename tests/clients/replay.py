"""The client matrix's replay upstream: recorded provider traffic served on loopback, every request body kept.

A Starlette app run by uvicorn in a thread on 127.0.0.1 (a random free port). For ``POST .../chat/completions``
the request headers choose the answer (clients send them as their default or extra headers; the sidecar forwards
them):

- ``x-matrix-job``: the job the request belongs to; the replay counts the requests of each job (its turns);
- ``x-replay-fixture``: the recording answering the job's first request (a path under ``shared/fixtures``): a
  ``.sse`` as recorded, a ``.stream.jsonl`` framed as ``data: ...`` events plus ``data: [DONE]``, a ``.json`` as
  a buffered body; a stream goes out one SSE event per chunk;
- ``x-replay-then``: the recording answering the job's later requests (turn 2 needs an answer, not a tool loop);
- ``x-replay-break-after``: on the first request, the number of whole SSE events sent before the connection
  drops inside the next event.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from benchmarks.loopback import free_port
from benchmarks.payloads import split_events
from tests.e2e_support import fixture_body


@dataclass
class ClientReplay:
    """The replay upstream; ``requests[job]`` holds the decoded request bodies of each job in arrival order."""

    port: int = field(default_factory=free_port)
    requests: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def chat(self, request: Request) -> Response:
        job = request.headers.get("x-matrix-job", "")
        received = self.requests[job]
        received.append(msgspec.json.decode(await request.body()))
        first = len(received) == 1
        name = request.headers.get("x-replay-fixture" if first else "x-replay-then")
        if name is None:
            return JSONResponse({"error": {"message": "replay: no recording named"}}, status_code=400)
        raw, media_type = fixture_body(name)
        if media_type != "text/event-stream":
            return Response(raw, media_type=media_type)
        cut = request.headers.get("x-replay-break-after") if first else None
        return StreamingResponse(self._events(raw, None if cut is None else int(cut)), media_type=media_type)

    @staticmethod
    async def _events(raw: bytes, cut: int | None) -> AsyncIterator[bytes]:
        for number, event in enumerate(split_events(raw)):
            if number == cut:  # half an event, then the connection drops (uvicorn aborts the response)
                yield event[: len(event) // 2]
                raise ConnectionAbortedError("replay: the stream breaks off here")
            yield event

    @contextlib.contextmanager
    def running(self) -> Iterator[ClientReplay]:
        app = Starlette(routes=[Route("/v1/chat/completions", self.chat, methods=["POST"])])
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="critical", lifespan="off")
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 10
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("the client matrix's replay upstream did not start within 10 s")
            time.sleep(0.01)
        try:
            yield self
        finally:
            server.should_exit = True
            thread.join(timeout=10)
