"""Memory cases, each measured in a fresh subprocess for isolation (``python -m benchmarks.memory ...``).

- ``request``: the peak memory ``prepare_request`` (or the baseline) needs for the large body, over what the
  process holds before the call (the body itself is already in memory). Measured twice: tracemalloc's peak of
  Python allocations during the call (the figure the target is checked on: deterministic, counts the output
  too), and the growth of peak RSS (``VmHWM`` reset through ``/proc/self/clear_refs`` where the kernel allows).
- ``stream``: events fed one by one through one ``SSERewriter``, every other one a chunk of the spec-shaped
  stream and every other one a new detail on one of 300 choices (``payloads.many_details_event``), so that
  state kept per detail or per choice shows; tracemalloc's current size after the checkpoint (10k events) and
  at the end (100k events), and the time per event in the first and the last window of that many events (a run
  without tracemalloc).
- ``bounds``: the sidecar app (in-process, raw ASGI drive, an upstream that sends 64 KiB network reads) relaying a
  stream whose one data line is 64 MiB, and answering a buffered completion sent as a gzip bomb (255 KiB that
  decode to 256 MiB); tracemalloc's peak and the growth of peak RSS during each, against the bound that holds
  (``--max-event-bytes``, ``--max-response-bytes``; ``docs/security.md``).
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks import baseline, payloads
from benchmarks.config import Config
from benchmarks.timing import Measurement, Side, Spread

REPO = payloads.REPO


def _status_bytes(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as file:
            file.write("5")
    except OSError:
        return False
    return True


def _request_worker(impl: str, path: Path) -> dict[str, Any]:
    from numi_mw.core.providers import provider_rules
    from numi_mw.core.request import prepare_request

    rules = provider_rules("openrouter")
    prepare: Callable[[bytes], bytes]
    if impl == "numi_mw":

        def prepare(body: bytes) -> bytes:
            return prepare_request(body, rules).body

    else:
        prepare = baseline.prepare_request
    prepare(payloads.request_2kb())  # warm up code paths
    body = path.read_bytes()
    gc.collect()
    reset = _reset_peak_rss()
    rss_before = _status_bytes("VmRSS")
    start = time.perf_counter()
    out = prepare(body)
    seconds = time.perf_counter() - start
    peak_rss = _status_bytes("VmHWM")
    out_bytes = len(out)
    del out
    gc.collect()
    tracemalloc.start()
    out = prepare(body)
    _, traced_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del out
    rss_growth = peak_rss - rss_before if reset and peak_rss is not None and rss_before is not None else None
    return {
        "impl": impl,
        "body_bytes": len(body),
        "out_bytes": out_bytes,
        "seconds": seconds,
        "traced_peak": traced_peak,
        "rss_growth": rss_growth,
        "rss_reset": reset,
    }


def _stream_worker(events: int, checkpoint: int, seconds: float) -> dict[str, Any]:
    from numi_mw.core.response import ResponseOptions, SSERewriter

    spec = payloads.spec_stream_events(2000)
    cycle, tail = spec[:-3], spec[-3:]
    many = payloads.many_details_event

    def event_at(i: int) -> bytes:
        return cycle[(i // 2) % len(cycle)] if i % 2 == 0 else many(i // 2)

    deadline = time.perf_counter() + seconds / 2

    # Timing run, without tracemalloc: time per event in the first and the last window of ``checkpoint`` events.
    rewriter = SSERewriter(ResponseOptions())
    window_start = time.perf_counter()
    first_window = last_window = None
    timed = 0
    for i in range(events):
        rewriter.feed(event_at(i))
        timed = i + 1
        if timed % checkpoint == 0:
            now = time.perf_counter()
            if first_window is None:
                first_window = (now - window_start) / checkpoint
            last_window = (now - window_start) / checkpoint
            window_start = now
            if now > deadline:
                break
    del rewriter

    # Memory run, under tracemalloc (the payload events were allocated before it started).
    gc.collect()
    tracemalloc.start()
    rewriter = SSERewriter(ResponseOptions())
    deadline = time.perf_counter() + seconds / 2
    at_checkpoint = None
    fed = 0
    for i in range(events):
        rewriter.feed(event_at(i))
        fed = i + 1
        if fed == checkpoint:
            gc.collect()
            at_checkpoint = tracemalloc.get_traced_memory()[0]
        if fed % 1000 == 0 and time.perf_counter() > deadline:
            break
    gc.collect()
    at_end = tracemalloc.get_traced_memory()[0]
    for event in tail:
        rewriter.feed(event)
    rewriter.finish()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "events_requested": events,
        "checkpoint": checkpoint,
        "timed_events": timed,
        "first_window_s_per_event": first_window,
        "last_window_s_per_event": last_window,
        "fed_events": fed,
        "current_at_checkpoint": at_checkpoint,
        "current_at_end": at_end,
        "traced_peak": peak,
        "completed": fed == events and timed == events,
    }


_READ = 65536
"""The size of one network read of the upstream body (httpcore reads at most 64 KiB at a time)."""


def _bounds_worker(case: str) -> dict[str, Any]:
    import asyncio
    import zlib

    import httpx

    from numi_mw.proxy import create_app

    class Reads(httpx.AsyncByteStream):
        def __init__(self, pieces: Callable[[], Any]) -> None:
            self.pieces = pieces

        async def __aiter__(self) -> Any:
            for piece in self.pieces():
                yield piece

    if case == "sse_line":
        size = 64 * payloads.MIB

        def line() -> Any:
            yield b'data: {"choices":[{"index":0,"delta":{"content":"'
            piece = b"x" * _READ
            for _ in range(size // _READ):
                yield piece

        headers = {"content-type": "text/event-stream"}
        make = line
        request = b'{"model": "m", "stream": true}'
    else:
        size = 256 * payloads.MIB
        compress = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
        zeros = b"0" * payloads.MIB
        bomb = compress.compress(b'{"choices":[{"index":0,"message":{"content":"')
        bomb += b"".join(compress.compress(zeros) for _ in range(size // payloads.MIB)) + compress.flush()

        def reads() -> Any:
            for start in range(0, len(bomb), _READ):
                yield bomb[start : start + _READ]

        headers = {"content-type": "application/json", "content-encoding": "gzip"}
        make = reads
        request = b'{"model": "m"}'

    def answer(_: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers=headers, stream=Reads(make))

    app = create_app("http://127.0.0.1:9/v1", transport=httpx.MockTransport(answer))
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions", "query_string": b"", "root_path": "",
        "headers": [(b"content-type", b"application/json")], "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 2),
    }  # fmt: skip
    out: dict[str, Any] = {}

    async def drive() -> None:
        out.update(status=None, sent=0)
        calls = 0

        async def receive() -> dict[str, Any]:
            nonlocal calls
            calls += 1
            if calls == 1:
                return {"type": "http.request", "body": request, "more_body": False}
            await asyncio.sleep(3600)
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                out["status"] = message["status"]
            else:
                out["sent"] += len(message.get("body", b""))

        async with app.router.lifespan_context(app):  # type: ignore[attr-defined]
            await asyncio.wait_for(app(scope, receive, send), 300)

    gc.collect()
    reset = _reset_peak_rss()
    rss_before = _status_bytes("VmRSS")
    asyncio.run(drive())
    peak_rss = _status_bytes("VmHWM")
    gc.collect()
    tracemalloc.start()
    asyncio.run(drive())
    _, traced_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss_growth = peak_rss - rss_before if reset and peak_rss is not None and rss_before is not None else None
    return {"case": case, "size": size, "traced_peak": traced_peak, "rss_growth": rss_growth, **out}


def run_bounds_memory(config: Config) -> list[Measurement]:
    from numi_mw.core.response import DEFAULT_MAX_EVENT_BYTES, DEFAULT_MAX_RESPONSE_BYTES

    measurements = []
    for case, name, what, bound in (
        ("sse_line", "bounds.sse_line_64mb.memory", "a 64 MiB SSE line", DEFAULT_MAX_EVENT_BYTES),
        ("gzip_bomb", "bounds.gzip_bomb.memory", "a gzip bomb (256 MiB decoded)", DEFAULT_MAX_RESPONSE_BYTES),
    ):
        result = _run_worker(["bounds", case], 300)
        ratio = result["traced_peak"] / bound
        sides = [Side("traced peak", result["traced_peak"], "bytes"), Side("bound", bound, "bytes")]
        if result["rss_growth"] is not None:
            sides.append(Side("RSS growth", result["rss_growth"], "bytes"))
        measurements.append(
            Measurement(
                name,
                f"sidecar peak memory relaying {what} / the bound that refuses it",
                ratio,
                Spread(ratio, ratio, ratio, ratio, ratio, 1),
                "<=",
                1.25,
                sides,
                result,
            )
        )
    return measurements


def _run_worker(args: Sequence[str], timeout: float) -> dict[str, Any]:
    """Run ``python -m benchmarks.memory ARGS`` and return the JSON object it prints."""
    process = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.memory", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=10)
    if process.returncode != 0:
        raise RuntimeError(f"memory worker {list(args)} failed ({process.returncode}): {stderr.decode()[-2000:]}")
    result: dict[str, Any] = json.loads(stdout.decode().strip().splitlines()[-1])
    return result


def run_request_memory(config: Config) -> list[Measurement]:
    body = payloads.body_8mb(config.body_8mb, config.blob_8mb)
    with tempfile.TemporaryDirectory(prefix="numi-mw-bench-") as tmp:
        path = Path(tmp) / "body.json"
        path.write_bytes(body)
        del body
        results = {impl: _run_worker(["request", impl, str(path)], 120) for impl in ("numi_mw", "baseline")}
    size = results["numi_mw"]["body_bytes"]
    ratio = results["numi_mw"]["traced_peak"] / size
    sides = [Side(f"{impl} traced peak", results[impl]["traced_peak"], "bytes") for impl in ("numi_mw", "baseline")] + [
        Side(f"{impl} RSS growth", results[impl]["rss_growth"], "bytes")
        for impl in ("numi_mw", "baseline")
        if results[impl]["rss_growth"] is not None
    ]
    return [
        Measurement(
            "request.body_8mb.memory",
            f"peak extra memory of prepare_request / body size, {size / payloads.MIB:g} MB body",
            ratio,
            Spread(ratio, ratio, ratio, ratio, ratio, 1),
            "<=",
            2.0,
            sides,
            {
                "body_bytes": size,
                "baseline_ratio": results["baseline"]["traced_peak"] / size,
                "numi_mw_rss_growth_ratio": (
                    results["numi_mw"]["rss_growth"] / size if results["numi_mw"]["rss_growth"] is not None else None
                ),
                "workers": results,
            },
        )
    ]


def run_stream_memory(config: Config) -> list[Measurement]:
    args = ["stream", str(config.memory_events), str(config.memory_checkpoint), str(config.memory_seconds)]
    result = _run_worker(args, config.memory_seconds * 2 + 60)
    k, n = result["checkpoint"], result["fed_events"]
    growth = result["current_at_end"] - (result["current_at_checkpoint"] or 0)
    per_event = growth / max(1, n - k)
    label = f"{n:,} events" + (
        "" if result["completed"] else f" (stopped by the time limit; {config.memory_events:,} asked)"
    )
    memory = Measurement(
        "stream.memory",
        f"SSERewriter memory retained per event between event {k:,} and event {n:,} (bytes/event)",
        per_event,
        Spread(per_event, per_event, per_event, per_event, per_event, 1),
        "<=",
        0.5,
        [
            Side(f"traced after {k:,}", result["current_at_checkpoint"], "bytes"),
            Side(f"traced after {n:,}", result["current_at_end"], "bytes"),
        ],
        {"growth_bytes": growth, "label": label, **result},
    )
    first, last = result["first_window_s_per_event"], result["last_window_s_per_event"]
    slowdown = last / first if first and last else None
    timing = Measurement(
        "stream.memory.time",
        f"SSERewriter time per event, last {k:,} events vs first {k:,} of {result['timed_events']:,}",
        slowdown,
        Spread(slowdown, slowdown, slowdown, slowdown, slowdown, 1) if slowdown is not None else None,
        "<=",
        1.5,
        [Side(f"first {k:,}", first, "s/event"), Side(f"last {k:,}", last, "s/event")],
        {"timed_events": result["timed_events"]},
    )
    return [memory, timing]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.memory", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    request = commands.add_parser("request")
    request.add_argument("impl", choices=["numi_mw", "baseline"])
    request.add_argument("path", type=Path)
    stream = commands.add_parser("stream")
    stream.add_argument("events", type=int)
    stream.add_argument("checkpoint", type=int)
    stream.add_argument("seconds", type=float)
    bounds = commands.add_parser("bounds")
    bounds.add_argument("case", choices=["sse_line", "gzip_bomb"])
    args = parser.parse_args(argv)
    if args.command == "request":
        result = _request_worker(args.impl, args.path)
    elif args.command == "bounds":
        result = _bounds_worker(args.case)
    else:
        result = _stream_worker(args.events, args.checkpoint, args.seconds)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
