"""In-process cases: the middleware in ASGI (hand-built scope/receive/send), request normalization and stream
normalization, each against its comparison in the same interleaved rounds."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from benchmarks import accumulate, baseline, payloads, think
from benchmarks.config import Config
from benchmarks.timing import BatchRunner, Measurement, Side, Spread, interleave, ratios, sync_runner, timed_ratio
from numi_mw import ReasoningMiddleware
from numi_mw.core.adapters import Answer
from numi_mw.core.providers import provider_rules
from numi_mw.core.request import prepare_request
from numi_mw.core.response import ResponseOptions, choose_rewriter
from numi_mw.core.sse import SSEDecoder

PROVIDER = "openrouter"
PATH = "/v1/chat/completions"


# --- 1. the middleware in ASGI -------------------------------------------------------------------------------


def bare_app() -> Starlette:
    """A bare Starlette app: one POST route that reads the body and answers a small JSON object."""

    async def chat(request: Request) -> Response:
        body = await request.body()
        return JSONResponse({"ok": True, "bytes": len(body)})

    return Starlette(routes=[Route(PATH, chat, methods=["POST"])])


class ReplayOnly:
    """The floor of any middleware that reads a request body: read it, give it to the app through a wrapped
    ``receive``, and pass every response message through a wrapped ``send``; no rules at all."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        message = await receive()
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return message

        async def forward(out: Message) -> None:
            await send(out)

        await self.app(scope, replay, forward)


def chat_scope(body: bytes) -> dict[str, object]:
    """The ASGI scope of a chat completions ``POST`` of ``body`` (ASGI spec 2.4), as a server on loopback builds it."""
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": PATH,
        "raw_path": PATH.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1:8000"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"authorization", b"Bearer sk-bench"),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }


async def call_asgi(app: ASGIApp, scope: dict[str, object], body: bytes) -> tuple[int, bytes]:
    """One request through ``app``; returns the status and the response body."""
    given = False
    status = 0
    chunks: list[bytes] = []

    async def receive() -> Message:
        nonlocal given
        if given:
            return {"type": "http.disconnect"}
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(dict(scope), receive, send)
    return status, b"".join(chunks)


def asgi_runner(loop: asyncio.AbstractEventLoop, app: ASGIApp, body: bytes) -> BatchRunner:
    scope = chat_scope(body)

    async def batch(n: int) -> float:
        start = time.perf_counter()
        for _ in range(n):
            await call_asgi(app, scope, body)
        return time.perf_counter() - start

    def run(n: int) -> float:
        return loop.run_until_complete(batch(n))

    return run


def _check_asgi(loop: asyncio.AbstractEventLoop, app: ASGIApp, body: bytes, *, rewritten: bool) -> None:
    """The contender does what it claims: 200, and the app saw a rewritten body exactly when expected."""
    status, out = loop.run_until_complete(call_asgi(app, chat_scope(body), body))
    if status != 200:
        raise RuntimeError(f"ASGI check: status {status}: {out[:200]!r}")
    seen = int(out.split(b'"bytes":')[1].rstrip(b"}"))
    if (seen != len(body)) != rewritten:
        raise RuntimeError(f"ASGI check: the app saw {seen} bytes of {len(body)} (rewrite expected: {rewritten})")


def run_asgi(config: Config) -> list[Measurement]:
    loop = asyncio.new_event_loop()
    try:
        bare = bare_app()
        wrapped = ReasoningMiddleware(bare, provider=PROVIDER)
        rewrite, plain = payloads.request_2kb(), payloads.plain_2kb()
        _check_asgi(loop, bare, rewrite, rewritten=False)
        _check_asgi(loop, wrapped, rewrite, rewritten=True)
        _check_asgi(loop, wrapped, plain, rewritten=False)
        floor = ReplayOnly(bare)
        _check_asgi(loop, floor, plain, rewritten=False)
        samples = interleave(
            {
                "bare, rewrite body": asgi_runner(loop, bare, rewrite),
                "middleware, rewrite body": asgi_runner(loop, wrapped, rewrite),
                "bare, plain body": asgi_runner(loop, bare, plain),
                "middleware, plain body": asgi_runner(loop, wrapped, plain),
                "floor: replay-only middleware": asgi_runner(loop, floor, plain),
                FLOOR_REPLAY_REWRITE: asgi_runner(loop, floor, rewrite),
            },
            config.rounds,
            config.batch_seconds,
        )
    finally:
        loop.close()
    return [
        timed_ratio(
            "asgi.rewrite_2kb",
            "middleware vs bare Starlette app, 2 KB body needing rewrite (time per request)",
            samples,
            "middleware, rewrite body",
            "bare, rewrite body",
            "<=",
            1.3,
            extra={"body_bytes": len(rewrite)},
            others=["floor: replay-only middleware"],
        ),
        timed_ratio(
            "asgi.plain_2kb",
            "middleware vs bare Starlette app, 2 KB body with nothing to normalize (time per request)",
            samples,
            "middleware, plain body",
            "bare, plain body",
            "<=",
            1.10,
            extra={
                "body_bytes": len(plain),
                "floor_ratio": _median_ratio(samples, "floor: replay-only middleware", "bare, plain body"),
            },
            others=["floor: replay-only middleware"],
        ),
        time_over_floor(
            "asgi.plain_2kb.over_floor",
            "middleware over the replay-only middleware, 2 KB body with nothing to normalize (added time per request)",
            samples,
            "middleware, plain body",
            "floor: replay-only middleware",
            2.0,
        ),
        time_over_floor(
            "asgi.rewrite_2kb.over_floor",
            "middleware over the replay-only middleware, 2 KB body needing rewrite (added time per request)",
            samples,
            "middleware, rewrite body",
            FLOOR_REPLAY_REWRITE,
            5.0,
        ),
    ]


FLOOR_REPLAY_REWRITE = "floor: replay-only middleware, rewrite body"
"""The replay-only middleware (``ReplayOnly``) given the body that needs a rewrite: the floor of that row."""


def time_over_floor(
    name: str, title: str, samples: dict[str, list[float]], contender: str, floor: str, target_us: float
) -> Measurement:
    """A row of the time ``contender`` adds over ``floor`` in the same rounds: the median of the per-round
    differences, in microseconds, against ``target_us`` (``<=``)."""
    values = [(a - b) * 1e6 for a, b in zip(samples[contender], samples[floor], strict=True)]
    spread = Spread.of(values)
    sides = [Side(side, Spread.of(samples[side]).median, "s/op") for side in (contender, floor)]
    return Measurement(name, title, spread.median, spread, "<=", target_us, sides, {}, unit=" µs")


# --- 2. request normalization ----------------------------------------------------------------------------------

FLOOR_PASS = "floor: one msgspec pass"
"""A reference point: one validating msgspec pass over the body that builds nothing (every field skipped).
Any design that checks the body is JSON costs at least this much."""
FLOOR_DECODE_ENCODE = "floor: msgspec decode+encode"
"""A reference point: msgspec's decode of the whole body to builtins plus its encode, no rules: the floor of a
design that rewrites a decoded body."""


class _Nothing(msgspec.Struct):
    """Matches any JSON object and keeps none of it."""


_skip_decoder = msgspec.json.Decoder(_Nothing)
_decoder = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()


def _decode_encode(body: bytes) -> bytes:
    return _encoder.encode(_decoder.decode(body))


def _median_ratio(samples: dict[str, list[float]], numerator: str, denominator: str) -> float:
    return statistics.median(ratios(samples[numerator], samples[denominator]))


def run_request(config: Config) -> list[Measurement]:
    rules = provider_rules(PROVIDER)
    out: list[Measurement] = []
    cases = (
        ("request.history_200kb", "200 KB history (60 messages)", payloads.history_200kb(), 10.0, 2.5),
        (
            "request.body_8mb",
            f"{config.body_8mb / payloads.MIB:g} MB body ({config.blob_8mb / payloads.MIB:g} MB encrypted detail)",
            payloads.body_8mb(config.body_8mb, config.blob_8mb),
            20.0,
            1.5,
        ),
    )
    for name, label, body, target, pass_target in cases:
        ours = prepare_request(body, rules).body
        theirs = baseline.prepare_request(body)
        if ours != theirs:
            raise RuntimeError(f"{name}: numi_mw and the baseline disagree on the upstream body")
        samples = interleave(
            {
                "baseline (json)": sync_runner(partial(baseline.prepare_request, body)),
                "numi_mw": sync_runner(partial(prepare_request, body, rules)),
                FLOOR_PASS: sync_runner(partial(_skip_decoder.decode, body)),
                FLOOR_DECODE_ENCODE: sync_runner(partial(_decode_encode, body)),
            },
            config.rounds,
            config.batch_seconds,
        )
        out.append(
            timed_ratio(
                name,
                f"prepare_request vs stdlib-json baseline, {label} (speedup)",
                samples,
                "baseline (json)",
                "numi_mw",
                ">=",
                target,
                extra={
                    "body_bytes": len(body),
                    "outputs_identical": True,
                    "floor_speedups": {
                        floor: _median_ratio(samples, "baseline (json)", floor)
                        for floor in (FLOOR_PASS, FLOOR_DECODE_ENCODE)
                    },
                },
                others=[FLOOR_PASS, FLOOR_DECODE_ENCODE],
            )
        )
        out.append(
            timed_ratio(
                f"{name}.vs_pass",
                f"prepare_request vs one msgspec validating pass, {label} (time)",
                samples,
                "numi_mw",
                FLOOR_PASS,
                "<=",
                pass_target,
                extra={"body_bytes": len(body)},
            )
        )
    return out


# --- 3. stream normalization ----------------------------------------------------------------------------------


def _baseline_stream(events: list[bytes]) -> Callable[[], bytes]:
    def run() -> bytes:
        normalizer = baseline.StreamNormalizer()
        out = [normalizer.feed(event) for event in events]
        out.append(normalizer.finish())
        return b"".join(out)

    return run


def _split_stream(events: list[bytes]) -> Callable[[], bytes]:
    """The bare split with the decoder's own fast path: a chunk that is one whole ``data:`` event is taken as
    it is (``single_data``), anything else goes through ``feed``; every event's bytes come back."""

    def run() -> bytes:
        decoder = SSEDecoder()
        out = []
        for event in events:
            if decoder.single_data(event) is not None:
                out.append(event)
            else:
                out.append(b"".join([e.raw for e in decoder.feed(event)]))
        out.append(b"".join([e.raw for e in decoder.flush()]))
        return b"".join(out)

    return run


FLOOR_STREAM = "floor: msgspec per event"
"""A reference point: the fastest split, then msgspec's decode and encode of every event that mentions
``reasoning`` (no rules): what any rewriter that re-encodes such events costs at least."""


def _floor_stream(events: list[bytes]) -> Callable[[], bytes]:
    # The split loop of ``_split_stream`` is written out again on purpose: a callback per event would add a
    # call to the timed loop of the bare-split comparator and flatter every ratio against it.
    decode, encode = _decoder.decode, _encoder.encode

    def run() -> bytes:
        decoder = SSEDecoder()
        out = []
        for event in events:
            data = decoder.single_data(event)
            if data is None:  # a read of several events, or cut inside one: each event of it as one of a read
                out.append(b"".join([_floor_event(e.raw, e.data, decode, encode) for e in decoder.feed(event)]))
            elif data.find(b"reasoning") < 0 or data == b"[DONE]":  # ``_floor_event``'s rule, written out as above
                out.append(event)
            else:
                out.append(b"data: " + encode(decode(data)) + b"\n\n")
        out.append(b"".join([_floor_event(e.raw, e.data, decode, encode) for e in decoder.flush()]))
        return b"".join(out)

    return run


def _floor_event(
    raw: bytes, data: bytes | None, decode: Callable[[bytes], Any], encode: Callable[[Any], bytes]
) -> bytes:
    """``_floor_stream``'s work for one event the decoder's general path gave: its data decoded and encoded when
    it mentions ``reasoning``, else its bytes."""
    if data is None or data.find(b"reasoning") < 0 or data == b"[DONE]":
        return raw
    return b"data: " + encode(decode(data)) + b"\n\n"


def _per_event(samples: dict[str, list[float]], events: int) -> dict[str, list[float]]:
    return {name: [t / events for t in values] for name, values in samples.items()}


FLOOR_TARGET_SPEC = 1.2
"""The spec-shaped stream: numi_mw's time per event at most this many times the floor's (``FLOOR_STREAM``)."""
FLOOR_TARGET_RECORDED = 1.3
"""Each recorded stream: numi_mw's time per event at most this many times its floor's."""


def stream_measurements(
    name: str,
    label: str,
    events: list[bytes],
    rounds: int,
    batch: float,
    *,
    floor_target: float = FLOOR_TARGET_RECORDED,
    count: int | None = None,
) -> list[Measurement]:
    """The rows of one stream fed as ``events`` (the reads each side is handed, in order): numi_mw against the
    stdlib-``json`` baseline, its floor and the bare split, each as time per SSE event; ``count`` is the stream's
    number of events when a read is not one event (``payloads.split_segments``)."""
    count = len(events) if count is None else count
    numi, base, split = think.rewrite_stream(events), _baseline_stream(events), _split_stream(events)
    if split() != b"".join(events):
        raise RuntimeError(f"{name}: the SSE split does not give the stream back")
    numi()  # raises if numi_mw cannot take the stream
    base()
    samples = _per_event(
        interleave(
            {
                "numi_mw": sync_runner(numi),
                "baseline (json)": sync_runner(base),
                "SSE split": sync_runner(split),
                FLOOR_STREAM: sync_runner(_floor_stream(events)),
            },
            rounds,
            batch,
        ),
        count,
    )
    extra = {"events": count, "stream_bytes": sum(len(e) for e in events)}
    return [
        timed_ratio(
            name,
            f"SSERewriter vs stdlib-json baseline, {label} (speedup per event)",
            samples,
            "baseline (json)",
            "numi_mw",
            ">=",
            4.0,
            extra={**extra, "floor_speedup": _median_ratio(samples, "baseline (json)", FLOOR_STREAM)},
            others=[FLOOR_STREAM],
        ),
        timed_ratio(
            f"{name}.vs_floor",
            f"SSERewriter vs msgspec decode+encode of each event that mentions reasoning, {label} (time per event)",
            samples,
            "numi_mw",
            FLOOR_STREAM,
            "<=",
            floor_target,
            extra=extra,
        ),
        timed_ratio(
            f"{name}.vs_split",
            f"SSERewriter vs bare SSE split (SSEDecoder, one-event fast path), {label} (time per event)",
            samples,
            "numi_mw",
            "SSE split",
            "<=",
            3.0,
            extra=extra,
        ),
    ]


def _numi_native(wire: str, events: list[bytes]) -> Callable[[], bytes]:
    options = ResponseOptions(wire_api=wire, answer=Answer())  # type: ignore[arg-type]

    def run() -> bytes:
        rewriter = choose_rewriter(options, 200, "text/event-stream")
        assert rewriter is not None
        out = [rewriter.feed(event) for event in events]
        out.append(rewriter.finish())
        return b"".join(out)

    return run


def _baseline_native(wire: str, events: list[bytes]) -> Callable[[], bytes]:
    kind = baseline.AnthropicStream if wire == "anthropic-messages" else baseline.ResponsesStream

    def run() -> bytes:
        translator = kind()
        out = [translator.feed(event) for event in events]
        out.append(translator.finish())
        return b"".join(out)

    return run


def native_stream_measurement(wire: str, events: list[bytes], rounds: int, batch: float) -> Measurement:
    """One translated wire API's recorded stream: numi_mw's translation and normalization against a
    straightforward ``json`` translation of the same events (``baseline.AnthropicStream``, ``ResponsesStream``)."""
    numi, base = _numi_native(wire, events), _baseline_native(wire, events)
    if not numi().endswith(b"data: [DONE]\n\n"):
        raise RuntimeError(f"{wire}: numi_mw did not translate the whole stream")
    base()
    samples = _per_event(
        interleave({"numi_mw": sync_runner(numi), "baseline (json)": sync_runner(base)}, rounds, batch), len(events)
    )
    return timed_ratio(
        f"stream.adapter.{wire}",
        f"{wire} stream translated to chat chunks vs a stdlib-json translation (speedup per event)",
        samples,
        "baseline (json)",
        "numi_mw",
        ">=",
        2.0,
        extra={"events": len(events)},
    )


def run_stream(config: Config) -> list[Measurement]:
    out = stream_measurements(
        "stream.spec_2000",
        "2,000-event stream shaped like spec 004",
        payloads.spec_stream_events(2000),
        config.rounds,
        config.batch_seconds,
        floor_target=FLOOR_TARGET_SPEC,
    )
    out += stream_measurements(
        "stream.openrouter_2000",
        "2,000-event stream shaped like spec 004, its answer chunks as OpenRouter streams them",
        payloads.spec_stream_events(2000, empty_fields=True),
        config.rounds,
        config.batch_seconds,
        floor_target=FLOOR_TARGET_SPEC,
    )
    out.append(think.cost_measurement(config))  # beside the plain stream's row
    out += accumulate.measurements(config)  # what storing the answer costs
    for stem, raw in payloads.fixture_streams().items():
        events = payloads.split_events(raw)
        out += stream_measurements(
            f"stream.fixture.{stem}", f"recorded {stem}.sse", events, config.fixture_rounds, config.batch_seconds
        )
        # the same stream as a network hands it over: reads of one TCP segment's payload, cut inside events
        out += stream_measurements(
            f"stream.fixture.{stem}.segments",
            f"recorded {stem}.sse in reads of {payloads.SEGMENT:,} bytes",
            payloads.split_segments(raw),
            config.fixture_rounds,
            config.batch_seconds,
            count=len(events),
        )
    for wire, raw in payloads.native_streams().items():
        events = payloads.split_events(raw)
        out.append(native_stream_measurement(wire, events, config.fixture_rounds, config.batch_seconds))
    out += think.latency_measurements(config)
    return out
