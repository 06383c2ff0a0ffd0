"""The stream client of the latency and memory rows, run in its own process so that its work is not the proxy's.

``python -m benchmarks.streams latency --url URL --streams N --seconds S [--model M] [--header K:V]...`` keeps
``N`` streams open at once for ``S`` seconds (each worker starts a new stream when its last one ends) and prints
one JSON object: percentiles of the time to the first event and of every gap between two events, as this client
sees them (milliseconds), and the time to the first event carrying ``paced.ANSWER_MARK`` when the stream has it.

``python -m benchmarks.streams hold --url URL --streams N --seconds S`` opens ``N`` streams, prints
``ready K`` once each has sent its first event (or after ``S`` seconds), then keeps reading them until its standard
input closes or ``S`` seconds pass.

The client is raw asyncio sockets: HTTP/1.1 with one connection per stream, the events found by their blank line
(``\\n\\n``) in the bytes received, so that it costs little per event. Everything is on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from benchmarks.paced import ANSWER_MARK

MAX_STREAMS_PER_WORKER = 10_000
"""Count bound of one worker's loop, besides its time bound."""


@dataclass
class Tally:
    first: list[float] = field(default_factory=list)
    gaps: list[float] = field(default_factory=list)
    answer: list[float] = field(default_factory=list)
    streams: int = 0
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)


def _request(url: str, model: str, headers: Sequence[str]) -> tuple[str, int, bytes]:
    parts = urlsplit(url)
    body = (
        b'{"model":"'
        + model.encode()
        + b'","stream":true,"messages":[{"role":"user","content":"Count the r in strawberry."}]}'
    )
    lines = [
        f"POST {parts.path} HTTP/1.1",
        f"Host: {parts.hostname}:{parts.port}",
        "Content-Type: application/json",
        "Authorization: Bearer sk-bench",
        f"Content-Length: {len(body)}",
        "Connection: close",
        *headers,
    ]
    head = ("\r\n".join(lines) + "\r\n\r\n").encode()
    return parts.hostname or "127.0.0.1", parts.port or 80, head + body


async def _one_stream(
    host: str, port: int, request: bytes, tally: Tally, timeout: float, ready: asyncio.Event | None = None
) -> None:
    start = time.perf_counter()
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    try:
        writer.write(request)
        buffer = b""
        header_done = False
        times: list[float] = []
        answer_at: float | None = None
        tail = b""
        deadline = start + timeout
        while True:
            chunk = await asyncio.wait_for(reader.read(65536), max(0.001, deadline - time.perf_counter()))
            now = time.perf_counter()
            if not chunk:
                break
            if not header_done:
                buffer += chunk
                end = buffer.find(b"\r\n\r\n")
                if end < 0:
                    continue
                status = buffer.split(b" ", 2)[1:2]
                if status != [b"200"]:
                    raise RuntimeError(f"status {buffer[:200]!r}")
                header_done = True
                chunk = buffer[end + 4 :]
            seen = tail + chunk
            count = seen.count(b"\n\n") - tail.count(b"\n\n")
            times.extend([now] * count)
            if answer_at is None and ANSWER_MARK in seen:
                answer_at = now
            if count and ready is not None and not ready.is_set():
                ready.set()
            tail = seen[-16:]
            if b"data: [DONE]" in seen:
                break
        if not times or b"[DONE]" not in tail:
            raise RuntimeError(f"incomplete stream ({len(times)} events)")
        tally.first.append((times[0] - start) * 1e3)
        tally.gaps.extend((b - a) * 1e3 for a, b in itertools.pairwise(times))
        if answer_at is not None:
            tally.answer.append((answer_at - start) * 1e3)
        tally.streams += 1
    finally:
        writer.close()


async def one_after_another(url: str, count: int, model: str = "paced") -> Tally:
    """``count`` streams from the chat completions ``url``, one after another, each on a new connection, as the
    ``latency`` case's client sends them; raises ``RuntimeError`` (or ``OSError``, ``TimeoutError``) on a stream that
    does not end with ``[DONE]`` within 60 seconds."""
    host, port, request = _request(url, model, ())
    tally = Tally()
    for _ in range(count):
        await _one_stream(host, port, request, tally, timeout=60.0)
    return tally


def _percentiles(values: list[float]) -> dict[str, float] | None:
    if len(values) < 2:
        return {"p50": values[0], "p99": values[0], "n": 1} if values else None
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return {"p50": cuts[49], "p99": cuts[98], "n": len(values)}


async def latency(url: str, streams: int, seconds: float, model: str, headers: Sequence[str]) -> dict[str, object]:
    host, port, request = _request(url, model, headers)
    tally = Tally()
    deadline = time.perf_counter() + seconds

    async def worker(i: int) -> None:
        await asyncio.sleep(0.02 * (i % 50) / 50)  # spread the starts over one event gap
        for _ in range(MAX_STREAMS_PER_WORKER):
            if time.perf_counter() >= deadline:
                return
            try:
                await _one_stream(host, port, request, tally, timeout=seconds + 30)
            except (TimeoutError, OSError, RuntimeError) as exc:
                tally.errors += 1
                if len(tally.error_samples) < 3:
                    tally.error_samples.append(repr(exc)[:300])
                await asyncio.sleep(0.05)

    await asyncio.wait_for(asyncio.gather(*(worker(i) for i in range(streams))), seconds + 60)
    return {
        "streams": streams,
        "completed": tally.streams,
        "errors": tally.errors,
        "error_samples": tally.error_samples,
        "first_event_ms": _percentiles(tally.first),
        "gap_ms": _percentiles(tally.gaps),
        "answer_ms": _percentiles(tally.answer),
    }


async def hold(url: str, streams: int, seconds: float, model: str) -> None:
    host, port, request = _request(url, model, ())
    tally = Tally()
    readies = [asyncio.Event() for _ in range(streams)]
    tasks = [
        asyncio.ensure_future(_one_stream(host, port, request, tally, seconds, readies[i])) for i in range(streams)
    ]
    deadline = time.perf_counter() + seconds
    for ready in readies:
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            break
        try:
            await asyncio.wait_for(ready.wait(), remaining)
        except TimeoutError:
            break
    print(f"ready {sum(r.is_set() for r in readies)}", flush=True)
    loop = asyncio.get_running_loop()
    stdin_closed = loop.run_in_executor(None, sys.stdin.read)
    await asyncio.wait([stdin_closed], timeout=max(0.0, deadline - time.perf_counter()))
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.streams", description=__doc__)
    parser.add_argument("mode", choices=("latency", "hold"))
    parser.add_argument("--url", required=True, help="the chat completions URL")
    parser.add_argument("--streams", type=int, required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--model", default="paced")
    parser.add_argument("--header", action="append", default=[], help="an extra request header, NAME: VALUE")
    args = parser.parse_args(argv)
    if args.mode == "latency":
        print(json.dumps(asyncio.run(latency(args.url, args.streams, args.seconds, args.model, args.header))))
    else:
        asyncio.run(hold(args.url, args.streams, args.seconds, args.model))
    return 0


if __name__ == "__main__":
    sys.exit(main())
