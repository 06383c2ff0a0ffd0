"""What operators of a gateway expect from the sidecar: health and readiness probes, Prometheus metrics and one
access log line per request (``docs/sidecar.md``, "Operations").

``Operations`` is an ASGI middleware ``create_app`` puts in front of the sidecar. It answers ``GET
{prefix}/healthz``, ``{prefix}/readyz`` and ``{prefix}/metrics`` itself (never forwarded), and around every other
request it measures sizes and times, counts the request in the app's own ``prometheus_client`` registry and logs
one line on the ``numi_mw.access`` logger. Logs and metrics carry names, sizes and times only: never a body, a
header value, a query string or an exception's text (spec 000: stored traces can hold sensitive content).
``log_config`` is the logging configuration ``numi-mw serve`` hands to uvicorn.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import anyio
import httpx
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.exceptions import HTTPException
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from numi_mw.asgi import send_error
from numi_mw.core.codec import encode
from numi_mw.core.errors import internal_error, method_not_allowed
from numi_mw.upstream import EXCHANGE, Exchange, Outgoing, close_upstream, send_outgoing, target_url

if TYPE_CHECKING:
    from numi_mw.proxy.app import _Sidecar

access_log = logging.getLogger("numi_mw.access")

OPS_PATHS = ("healthz", "readyz", "metrics")
"""The operations paths, under the prefix: ``{prefix}/healthz``, ``{prefix}/readyz``, ``{prefix}/metrics``."""

READY_TTL = 5.0
"""Seconds a readiness answer is reused, so that a storm of probes reaches each upstream at most once in that
time."""

PROBE_TIMEOUT = 2.0
"""Seconds each upstream has to answer the readiness probe, connecting included."""

LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
"""The log levels ``numi-mw serve`` takes, quietest first: uvicorn's names without ``trace``, whose lines carry
every ASGI message whole (a request's headers, ``Authorization`` among them, and its query string)."""

LogFormat = Literal["text", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")

_DURATIONS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
"""Histogram buckets in seconds: reasoning models can take minutes before the first byte."""

_REASONING_TOKENS = re.compile(rb'"reasoning_tokens"\s*:\s*(\d+)')
_KEY = b'"reasoning_tokens"'
_SEAM = 64
"""Bytes on each side of the boundary between two body messages that are searched together, so that a count a
relayed body splits across two messages is read whole (a match is shorter than this)."""


class _TokenCount:
    """The reasoning token count of one response body, read from the usage in the bytes the client receives:
    the last ``"reasoning_tokens": N`` wins (a stream's usage chunk, or a buffered body's ``usage``). A key inside a
    JSON string has its quotes escaped, so only real keys match.

    A count the boundary between two body messages splits is read from the body's last bytes before the boundary
    and the message's first (``_SEAM`` of each; an empty message changes nothing). In an event stream
    (``events``) a message that ends with a blank line (``\\n\\n``) ends an event, and no count of one event's
    JSON reaches into the next: the next message is searched alone, so the stream's usual message (whole events)
    costs one search."""

    __slots__ = ("events", "tail", "value")

    def __init__(self) -> None:
        self.events = False
        self.tail = b""
        self.value: int | None = None

    def feed(self, body: bytes) -> None:
        if not body:  # an empty message (a stream's last) keeps the seam for the next one
            return
        if type(body) is not bytes:  # a memoryview, say, as Starlette's StreamingResponse passes on
            body = bytes(body)
        # ``find``, not ``in``: a bytes needle costs ``in`` a TypeError raised and cleared (docs/performance.md)
        if self.tail:
            seam = self.tail + body[:_SEAM]
            if seam.find(_KEY) >= 0:
                self._scan(seam)
        if body.find(_KEY) >= 0:
            self._scan(body)
        if self.events and body.endswith(b"\n\n"):
            self.tail = b""
        else:  # the last bytes of the body so far, however short the messages they came in
            self.tail = body[-_SEAM:] if len(body) >= _SEAM else (self.tail + body)[-_SEAM:]

    def _scan(self, data: bytes) -> None:
        for match in _REASONING_TOKENS.finditer(data):
            self.value = int(match[1])


def check_ops_prefix(prefix: object) -> str:
    """Check the path prefix of the operations paths.

    Returns:
        ``prefix`` itself: ``""`` (the paths are ``/healthz``, ``/readyz``, ``/metrics``) or a path such as
        ``/numi-mw``.

    Raises:
        ValueError: ``prefix`` is not a string, is not empty and does not start with ``/``, ends with ``/``, has
            an empty, ``.`` or ``..`` segment or a ``?``, ``#`` or ``%``, or is ``/v1`` or under it (the namespace
            the sidecar forwards, which the operations paths must never shadow).
    """
    if not isinstance(prefix, str):
        raise ValueError(f"ops_prefix must be a string such as '' or '/numi-mw', not {prefix!r}")
    if prefix == "":
        return prefix
    segments = prefix.split("/")
    if (
        not prefix.startswith("/")
        or any(segment in ("", ".", "..") for segment in segments[1:])
        or any(char in prefix for char in "?#% ")
    ):
        raise ValueError(
            "ops_prefix must be empty or a path such as /numi-mw: a / before each segment, none empty, . or .. "
            f"(no trailing /), no ?, #, % or space; not {prefix!r}"
        )
    if segments[1] == "v1":
        raise ValueError(f"ops_prefix must not be under /v1, the path the sidecar forwards, not {prefix!r}")
    return prefix


class Metrics:
    """The sidecar's Prometheus metrics, in a registry of its own (two apps in one process never share one).

    Attributes:
        registry: the ``prometheus_client.CollectorRegistry`` that ``{prefix}/metrics`` renders.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        labels = ("route", "provider", "wire_api")
        self.requests = Counter(
            "numi_mw_requests",
            "Requests answered, by route (catalog endpoint tag, else provider; numi_mw: answered by numi_mw), "
            "provider, wire API and status.",
            (*labels, "status"),
            registry=self.registry,
        )
        self.first_byte = Histogram(
            "numi_mw_time_to_first_byte_seconds",
            "Seconds from the request's arrival to the first byte of the response body.",
            labels,
            buckets=_DURATIONS,
            registry=self.registry,
        )
        self.duration = Histogram(
            "numi_mw_request_duration_seconds",
            "Seconds from the request's arrival to the end of the response body.",
            labels,
            buckets=_DURATIONS,
            registry=self.registry,
        )
        self.open_streams = Gauge(
            "numi_mw_open_streams", "Event streams being sent to clients now.", registry=self.registry
        )
        self.reasoning_tokens = Counter(
            "numi_mw_reasoning_tokens",
            "Reasoning tokens in the usage of answers (completion_tokens_details.reasoning_tokens).",
            labels,
            registry=self.registry,
        )
        self.upstream_errors = Counter(
            "numi_mw_upstream_errors",
            "Upstream failures, by stage (send, body, stream) and kind (timeout, connect, decode, protocol, other).",
            ("stage", "kind"),
            registry=self.registry,
        )
        self._answered: dict[tuple[str, str, str, int], tuple[Counter, Histogram, Histogram]] = {}
        self._reasoning: dict[tuple[str, str, str], Counter] = {}

    def answered(
        self, labels: tuple[str, str, str], status: int, ttfb: float, total: float, reasoning: int | None
    ) -> None:
        """Count one answered request with ``labels`` (route, provider, wire API) and ``status``, observe its time
        to the first body byte and its duration (seconds), and add its ``reasoning`` tokens when its usage said
        them (a label set's reasoning series appears with its first count). The labelled children of each label
        set are looked up once (``labels`` of ``prometheus_client`` costs more than the counting), then kept: a
        child stays its metric's until removed, and none is."""
        key = (*labels, status)
        children = self._answered.get(key)
        if children is None:
            children = self._answered[key] = (
                self.requests.labels(*labels, str(status)),
                self.first_byte.labels(*labels),
                self.duration.labels(*labels),
            )
        requests, first_byte, duration = children
        requests.inc()
        first_byte.observe(ttfb)
        duration.observe(total)
        if reasoning is not None:
            counter = self._reasoning.get(labels)
            if counter is None:
                counter = self._reasoning[labels] = self.reasoning_tokens.labels(*labels)
            counter.inc(reasoning)


@dataclass(slots=True)
class _Probe:
    name: str
    ready: bool
    status: int | None = None
    error: str | None = None

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "ready": self.ready}
        if self.status is not None:
            out["status"] = self.status
        if self.error is not None:
            out["error"] = self.error
        return out


class _Readiness:
    """Whether every upstream answers: ``GET {base_url}/models`` without a key, any HTTP status counting as an
    answer, within ``PROBE_TIMEOUT`` seconds; the result is reused for ``READY_TTL`` seconds and one probe runs at
    a time."""

    def __init__(self, sidecar: _Sidecar) -> None:
        self.sidecar = sidecar
        self.lock = anyio.Lock()
        self.checked = -READY_TTL
        self.probes: list[_Probe] = []

    async def answer(self) -> tuple[int, bytes]:
        async with self.lock:
            if time.monotonic() - self.checked >= READY_TTL:
                self.probes = await self._check()
                self.checked = time.monotonic()
        ready = all(probe.ready for probe in self.probes)
        body = {"status": "ready" if ready else "unavailable", "providers": [p.describe() for p in self.probes]}
        return (200 if ready else 503), encode(body)

    async def _check(self) -> list[_Probe]:
        sidecar = self.sidecar
        providers = sidecar.catalog.providers if sidecar.catalog is not None else [sidecar.default]
        probes = [_Probe(provider.name, False, error="NotStarted") for provider in providers]
        transport = sidecar.upstream
        if transport is None:  # the lifespan has not started: nothing can be forwarded yet
            return probes

        async def probe(i: int, base_url: str) -> None:
            try:
                url = target_url(base_url, b"/models", b"")
                request = Outgoing("GET", url, [(b"accept-encoding", b"identity")], b"", sidecar.timeouts)
                response = await send_outgoing(transport, request, sidecar.send_whole)
                await close_upstream(response)
            except (httpx.RequestError, httpx.InvalidURL) as exc:
                probes[i] = _Probe(providers[i].name, False, error=type(exc).__name__)
            else:
                probes[i] = _Probe(providers[i].name, True, status=response.status_code)

        with anyio.move_on_after(PROBE_TIMEOUT):
            async with anyio.create_task_group() as group:
                for i, provider in enumerate(providers):
                    probes[i] = _Probe(provider.name, False, error="Timeout")
                    group.start_soon(probe, i, provider.base_url)
        return probes


def _http_exception_response(exc: HTTPException) -> Response:
    """Starlette's ``ExceptionMiddleware``'s default answer to ``exc`` (its ``http_exception``): the status and
    headers, with the detail as plain text but for 204 and 304, which have no body."""
    if exc.status_code in (204, 304):
        return Response(status_code=exc.status_code, headers=exc.headers)
    return PlainTextResponse(exc.detail, status_code=exc.status_code, headers=exc.headers)


def internal_error_response() -> Response:
    """The answer to a request numi_mw failed on (an exception it did not expect), before a response started: the
    OpenAI-style 500 (``errors.internal_error``) instead of Starlette's plain text, with ``connection: close``. The
    exception is raised on to the server, which logs it and closes the connection; a client told so opens a new
    one for its next request instead of meeting a reset."""
    error = internal_error()
    return Response(error.to_bytes(), error.status, {"connection": "close"}, media_type="application/json")


class Operations:
    """ASGI middleware: the operations paths, and measuring and logging every other request.

    A request the app fails on (an exception numi_mw did not expect) before its response started gets the
    OpenAI-style 500 (``errors.internal_error``) from here, so that its access line and metrics count what was
    sent; the exception is raised on, for the server to log (and with ``whole_stack``, so is an operations path's).

    Args:
        app: the sidecar's ASGI app.
        sidecar: the sidecar (its upstreams and client, for the readiness probe).
        prefix: the operations paths' prefix (``check_ops_prefix``).
        metrics: serve ``{prefix}/metrics`` and count; ``False`` leaves that path to the upstream.
        whole_stack: this is the app's whole middleware stack, without Starlette's ``ServerErrorMiddleware`` around
            it and ``ExceptionMiddleware`` inside (``proxy.app._App``): a fault on an operations path then gets the
            same 500 from here, and a Starlette ``HTTPException`` raised before the response started (an outer
            app's body limit, raised from ``receive``) the answer ``ExceptionMiddleware`` gives it by default.
    """

    def __init__(
        self, app: ASGIApp, *, sidecar: _Sidecar, prefix: str, metrics: bool, whole_stack: bool = False
    ) -> None:
        self.app = app
        self.whole_stack = whole_stack
        self.health = f"{prefix}/healthz"
        self.ready = f"{prefix}/readyz"
        self.metrics_path = f"{prefix}/metrics" if metrics else None
        self.metrics = Metrics() if metrics else None
        self.readiness = _Readiness(sidecar)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if path != self.health and path != self.ready and (path != self.metrics_path or self.metrics is None):
            await self._observed(scope, receive, send)
            return
        started = False

        async def starting(message: Message) -> None:
            nonlocal started
            started = True
            await send(message)

        try:
            if path == self.health:
                await _answer(scope, starting, 200, b'{"status":"ok"}', b"application/json")
            elif path == self.ready:
                status, body = await self.readiness.answer()
                await _answer(scope, starting, status, body, b"application/json")
            else:
                assert self.metrics is not None
                body = generate_latest(self.metrics.registry)
                await _answer(scope, starting, 200, body, CONTENT_TYPE_LATEST.encode())
        except Exception:
            if self.whole_stack and not started:  # else Starlette's ServerErrorMiddleware answers it
                await internal_error_response()(scope, receive, send)
            raise

    async def _observed(self, scope: Scope, receive: Receive, send: Send) -> None:
        start = time.perf_counter()
        exchange = Exchange()
        token = EXCHANGE.set(exchange)
        sizes = [0, 0]  # request bytes, response bytes
        status = 0
        first: float | None = None
        streaming = False
        tokens = _TokenCount()
        count = self.metrics is not None  # the count goes only to the metrics

        async def counting_receive() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                sizes[0] += len(message.get("body", b""))
            return message

        async def observing_send(message: Message) -> None:
            nonlocal status, first, streaming
            if message["type"] == "http.response.start":
                status = message["status"]
                streaming = tokens.events = _is_event_stream(message.get("headers", ()))
                if streaming and self.metrics is not None:
                    self.metrics.open_streams.inc()
            elif message["type"] == "http.response.body":
                body = message.get("body", b"")
                if first is None:
                    first = time.perf_counter()
                sizes[1] += len(body)
                if count:
                    tokens.feed(body)
            await send(message)

        try:
            await self.app(scope, counting_receive, observing_send)
        except Exception as exc:
            if status == 0 and self.whole_stack and isinstance(exc, HTTPException):
                await _http_exception_response(exc)(scope, counting_receive, observing_send)
                return
            if status == 0:  # sent from here, so that the access line and the metrics count its bytes
                with contextlib.suppress(Exception):  # a client gone: the fault is still raised, for the log
                    await internal_error_response()(scope, counting_receive, observing_send)
                status = 500
            raise
        finally:
            EXCHANGE.reset(token)
            end = time.perf_counter()
            if streaming and self.metrics is not None:
                self.metrics.open_streams.dec()
            ttfb = (first if first is not None else end) - start
            self._record(scope, exchange, status, sizes, ttfb, end - start, tokens.value)

    def _record(
        self,
        scope: Scope,
        exchange: Exchange,
        status: int,
        sizes: list[int],
        ttfb: float,
        total: float,
        reasoning: int | None,
    ) -> None:
        route = exchange.endpoint or exchange.provider or "numi_mw"
        if self.metrics is not None:
            labels = (route, exchange.provider or "", exchange.wire_api or "")
            self.metrics.answered(labels, status, ttfb, total, reasoning)
            if exchange.failure is not None:
                self.metrics.upstream_errors.labels(*exchange.failure).inc()
        if not access_log.isEnabledFor(logging.INFO):
            return
        fields: dict[str, Any] = {
            "method": scope["method"],
            "path": scope["path"],
            "status": status,
            "request_bytes": sizes[0],
            "response_bytes": sizes[1],
            "ttfb_s": round(ttfb, 6),
            "total_s": round(total, 6),
            "route": route,
        }
        for key in ("provider", "model", "wire_api"):
            value = getattr(exchange, key)
            if value is not None:
                fields[key] = value
        if exchange.failure is not None:
            fields["upstream_error"] = f"{exchange.failure[0]}:{exchange.failure[1]}"
        access_log.info(_AccessLine(fields), extra={"access": fields})  # its text is built by str()


class _AccessLine:
    """The text of an access line, ``key=value`` fields apart by spaces (``escape_value``), built when a formatter
    asks for the record's message (``TextFormatter``; ``JSONFormatter`` writes the fields themselves)."""

    __slots__ = ("fields",)

    def __init__(self, fields: dict[str, Any]) -> None:
        self.fields = fields

    def __str__(self) -> str:
        # a number's text needs no escape; a string (a path, a model id) may hold anything
        return " ".join(
            [f"{key}={escape_value(value) if type(value) is str else value}" for key, value in self.fields.items()]
        )


def _is_event_stream(headers: Iterable[tuple[bytes, bytes]]) -> bool:
    for name, value in headers:
        if name.lower() == b"content-type":
            return value.split(b";")[0].strip().lower() == b"text/event-stream"
    return False


async def _answer(scope: Scope, send: Send, status: int, body: bytes, media_type: bytes) -> None:
    """A whole response of numi_mw's own: ``GET`` and ``HEAD`` get ``body``; other methods 405 with ``allow`` and
    the OpenAI-style error body (``errors.method_not_allowed``)."""
    if scope["method"] not in ("GET", "HEAD"):
        error = method_not_allowed(scope["method"], scope["path"], "GET, HEAD")
        await send_error(send, error, [(b"cache-control", b"no-store"), (b"allow", b"GET, HEAD")])
        return
    headers = [(b"content-type", media_type), (b"cache-control", b"no-store")]
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body})


def withheld_exception(exc: BaseException) -> str:
    """A traceback of ``exc`` and the exceptions it was raised from or during, with every frame but none of the
    exceptions' text: an exception's message can quote request or upstream bytes (an HTTP parser's error quotes
    the line it could not read)."""
    parts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    chain: list[BaseException] = []
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        chain.append(current)
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    for i, item in enumerate(reversed(chain)):
        if i:
            parts.append("\nDuring handling of the above exception, another exception occurred:\n\n")
        parts.append("Traceback (most recent call last):\n")
        parts.extend(traceback.format_tb(item.__traceback__))
        parts.append(f"{type(item).__module__}.{type(item).__qualname__} (message withheld)")
    return "".join(parts)


_LINE_ESCAPES: dict[int, str] = {
    **{code: f"\\x{code:02x}" for code in (*range(0x20), 0x7F, *range(0x80, 0xA0))},
    0x5C: "\\\\",
    0x2028: "\\u2028",
    0x2029: "\\u2029",
}
"""What a text log line escapes: C0 and C1 control characters and DEL as ``\\xNN``, the Unicode line and paragraph
separators as ``\\uNNNN`` (every character ``str.splitlines`` breaks at, and terminal escape sequences), and the
backslash as ``\\\\`` so that an escape in the text cannot pass for one of these."""

_VALUE_ESCAPES: dict[int, str] = {**_LINE_ESCAPES, 0x20: "\\x20"}

_JSON_ESCAPES: dict[int, str] = {code: f"\\u{code:04x}" for code in (0x7F, *range(0x80, 0xA0), 0x2028, 0x2029)}
"""What a JSON log line escapes beyond what ``json.dumps`` does (the C0 controls, the quote, the backslash): DEL, the
C1 controls and the Unicode line and paragraph separators, as ``\\uNNNN``. Any of them can only stand inside a
string of the line, where the escape reads back as the same character."""


def escape_line(text: str) -> str:
    """``text`` with every character that could end a log line or fake an escape (``_LINE_ESCAPES``) escaped:
    a logged value (a percent-decoded path, a model name) can then never start a forged line. Text with none of
    them comes back as it is without being translated: every character ``_LINE_ESCAPES`` names but the backslash
    is one ``str.isprintable`` refuses."""
    if text.isprintable() and "\\" not in text:
        return text
    return text.translate(_LINE_ESCAPES)


def escape_value(text: str) -> str:
    """``escape_line`` and the space as ``\\x20``: a ``key=value`` field of the text access line, which can then
    never add a forged field to its line."""
    if " " not in text:
        return escape_line(text)  # the space is all _VALUE_ESCAPES adds to _LINE_ESCAPES
    return text.translate(_VALUE_ESCAPES)


class _SecondStamp:
    """A log line's date and time to the second, ``time.strftime(form, convert(created))``, formatted once per
    second (a sidecar writes an access line per request); the caller adds the milliseconds."""

    __slots__ = ("_convert", "_form", "_second", "_text")

    def __init__(self, form: str, convert: Callable[[float], time.struct_time]) -> None:
        self._form = form
        self._convert = convert
        self._second = -1
        self._text = ""

    def __call__(self, created: float) -> str:
        second = int(created)
        if second != self._second:
            self._text = time.strftime(self._form, self._convert(created))
            self._second = second
        return self._text


class TextFormatter(logging.Formatter):
    """``TIME LEVEL LOGGER: MESSAGE`` on one line: the message with its control characters and backslashes escaped
    (``escape_line``; the access line escapes each value itself, spaces too, ``escape_value``); an exception's
    traceback, on the lines after it, without its text (``withheld_exception``)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")
        self._stamp = _SecondStamp(self.default_time_format, self.converter)

    def format(self, record: logging.LogRecord) -> str:
        """``logging.Formatter.format``; an access line (no exception, no stack) takes only its steps that such a
        line needs: the message, the time, the format string's line (its values are escaped already)."""
        if type(getattr(record, "access", None)) is not dict or record.exc_info or record.exc_text or record.stack_info:
            return super().format(record)
        record.message = record.getMessage()
        record.asctime = self.formatTime(record)
        return super().formatMessage(record)

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        """``logging.Formatter.formatTime`` (``2026-12-04 04:01:29,259``, local time), its date and time formatted
        once per second (``_SecondStamp``)."""
        return f"{self._stamp(record.created)},{int(record.msecs):03d}"  # logging.Formatter.default_msec_format

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = super().formatMessage(record)
        return line if isinstance(getattr(record, "access", None), dict) else escape_line(line)

    def formatException(self, ei: Any) -> str:
        return withheld_exception(ei[1]) if ei and ei[1] is not None else ""

    def formatStack(self, stack_info: str) -> str:
        return stack_info


class JSONFormatter(logging.Formatter):
    """One JSON object per line: ``time`` (ISO 8601, UTC), ``level``, ``logger``, then the access log's fields
    (``method``, ``path``, ``status``, ``request_bytes``, ``response_bytes``, ``ttfb_s``, ``total_s``, ``route``
    and, when known, ``provider``, ``model``, ``wire_api``, ``upstream_error``) or ``message``; ``exception``
    holds a traceback without the exception's text. Text other than ASCII stays as it is, but for the characters
    that could break the line or reach a terminal as a control (``_JSON_ESCAPES``)."""

    def __init__(self) -> None:
        super().__init__()
        self._stamp = _SecondStamp("%Y-%m-%dT%H:%M:%S", time.gmtime)

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": f"{self._stamp(record.created)}.{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        access = getattr(record, "access", None)
        if isinstance(access, dict):
            out.update(access)
        else:
            out["message"] = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            out["exception"] = withheld_exception(record.exc_info[1])
        line = json.dumps(out, ensure_ascii=False)
        if line.isascii() and "\x7f" not in line:  # nothing of _JSON_ESCAPES: not translated
            return line
        return line.translate(_JSON_ESCAPES)


def lean_log_records() -> None:
    """Leave out of this process's log records what no ``numi-mw serve`` formatter writes (``TextFormatter``,
    ``JSONFormatter``): the calling file, line and function, the thread, the process id, the multiprocessing
    name and, on Python 3.12 and later, the asyncio task's name. These are the switches the Python logging HOWTO
    lists under "Optimization" (``logging._srcfile``, ``logThreads``, ``logProcesses``, ``logMultiprocessing``,
    ``logAsyncioTasks``); with one access line per request they cost the sidecar's event loop a few microseconds
    each time. Called once by each ``numi-mw serve`` process; an app served another way
    (``proxy.create_app``) leaves its process's logging alone."""
    for name, value in LEAN_LOG_SWITCHES.items():
        if hasattr(logging, name):  # logAsyncioTasks: Python 3.12 and later
            setattr(logging, name, value)


LEAN_LOG_SWITCHES: dict[str, Any] = {
    "_srcfile": None,
    "logThreads": False,
    "logProcesses": False,
    "logMultiprocessing": False,
    "logAsyncioTasks": False,
}
"""The ``logging`` module's switches ``lean_log_records`` sets, with the value it gives each."""


def log_config(level: str, log_format: LogFormat, *, access_log: bool = True) -> dict[str, Any]:
    """The ``logging.config.dictConfig`` configuration ``numi-mw serve`` gives uvicorn (``log_config``): the
    ``numi_mw`` and uvicorn loggers write to stderr at ``level`` (``LOG_LEVELS``: ``critical``, ``error``,
    ``warning``, ``info``, ``debug``; never uvicorn's ``trace``, which logs headers and queries) through
    ``TextFormatter`` or ``JSONFormatter``; uvicorn's own access log is replaced by ``numi_mw.access``, whose
    line per request ``access_log=False`` (``--no-access-log``) leaves out whatever the level; ``httpx`` and
    ``httpcore``, which log whole upstream URLs (a query can carry a key) at ``info``, log warnings only.

    Raises:
        ValueError: ``level`` is not one of ``LOG_LEVELS`` (``trace`` included); ``log_format`` is not ``text`` or
            ``json``; ``access_log`` is not a ``bool``.
    """
    if level not in LOG_LEVELS:
        raise ValueError(f"level must be one of {', '.join(LOG_LEVELS)}, not {level!r}")
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log_format must be one of {', '.join(LOG_FORMATS)}, not {log_format!r}")
    if not isinstance(access_log, bool):
        raise ValueError(f"access_log must be true or false, not {access_log!r}")
    formatter = TextFormatter if log_format == "text" else JSONFormatter
    name = level.upper()
    handler = {"handlers": ["stderr"], "level": name, "propagate": False}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"numi_mw": {"()": f"{__name__}.{formatter.__name__}"}},
        "handlers": {
            "stderr": {"class": "logging.StreamHandler", "formatter": "numi_mw", "stream": "ext://sys.stderr"}
        },
        "loggers": {
            "numi_mw": handler,
            "uvicorn": handler,
            "uvicorn.error": {"level": name},
            "uvicorn.access": {"handlers": [], "level": "CRITICAL", "propagate": False},
            # the access line is logged at info: above it, none is built
            **({} if access_log else {"numi_mw.access": {"level": "WARNING"}}),
            # httpx logs each request's whole URL at info, query string included
            "httpx": {"level": "WARNING"},
            "httpcore": {"level": "WARNING"},
        },
    }
