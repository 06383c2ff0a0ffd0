"""What the shells that send requests upstream themselves share: the sidecar (``numi_mw.proxy``) and the httpx
transports (``numi_mw.transport``).

The upstream URL of a configured provider, the headers its wire API and a configured key need, the one mapping of
httpx errors to API errors, the response options of a prepared request, the client's answer for a buffered body,
and relaying a stream through its rewriter. No reasoning rules here; they are all in ``numi_mw.core``.
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import os
import re
import socket
import time
import unicodedata
import weakref
import zlib
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Literal, NamedTuple
from urllib.parse import unquote_to_bytes

import h11
import httpcore
import httpx
from httpcore._utils import is_socket_readable  # the probe httpcore 1.0's has_expired makes

from numi_mw.asgi import Headers, listed_names, with_length
from numi_mw.core.adapters import WireAdapter
from numi_mw.core.catalog import Catalog
from numi_mw.core.errors import ApiError, bad_path, not_a_path, unreadable_path, upstream_timeout, upstream_unavailable
from numi_mw.core.request import PreparedRequest
from numi_mw.core.response import (
    DEFAULT_BOUNDS,
    BodyRewriter,
    Bounds,
    ResponseOptions,
    Rewriter,
    StreamRewriter,
    choose_rewriter,
    response_options,
    think_tags_for,
)
from numi_mw.core.routing import Route
from numi_mw.core.think import ThinkStart, ThinkTags
from numi_mw.core.usage import usage_rules

log = logging.getLogger("numi_mw.upstream")


class UpstreamPool(httpcore.AsyncConnectionPool):
    """httpcore's connection pool, with requests matched to connections in time linear in the pool's size.

    httpcore 1.0's pool, each time a request starts or ends, probes every pooled connection's socket for a close by
    the server (``has_expired``: a ``select`` call and a fresh dictionary of the stream's attributes, each time) and,
    for every idle connection, counts the whole pool again: with 64 concurrent requests, thousands of calls per
    request, which made throughput fall as concurrency rose. This pool does what httpcore's does in one pass over
    the connections, in which a connection a request holds costs a set lookup and no call (with a thousand open
    streams, each request would otherwise make thousands of calls): it drops closed connections, closes every idle
    one that has expired or that the server closed (``has_expired``, whatever its origin) and the oldest idle ones
    past ``max_keepalive_connections``; a queued request takes the oldest idle connection for its origin, else a new
    connection (up to ``max_connections``, else in place of an idle one). The arguments are
    ``httpcore.AsyncConnectionPool``'s.
    """

    def _assign_requests_to_connections(self) -> list[httpcore.AsyncConnectionInterface]:
        # A connection a request holds is neither idle nor available (HTTP/1.1: one request at a time).
        busy = {id(pool_request.connection) for pool_request in self._requests if pool_request.connection is not None}
        closing: list[httpcore.AsyncConnectionInterface] = []
        kept: list[httpcore.AsyncConnectionInterface] = []
        idle: list[httpcore.AsyncConnectionInterface] = []
        for connection in self._connections:
            if id(connection) in busy:
                kept.append(connection)
            elif connection.is_idle():
                if _idle_expired(connection):  # past its expiry, or closed by the server
                    closing.append(connection)
                else:
                    kept.append(connection)
                    idle.append(connection)
            elif not connection.is_closed():
                kept.append(connection)
        surplus = len(idle) - self._max_keepalive_connections
        if surplus > 0:  # the oldest idle connections go first, as in httpcore's pool
            closing.extend(idle[:surplus])
            gone = {id(connection) for connection in idle[:surplus]}
            kept = [connection for connection in kept if id(connection) not in gone]
            del idle[:surplus]
        self._connections = kept
        for pool_request in self._requests:
            if pool_request.connection is None:  # queued
                taken = self._connection_for(pool_request.request.url.origin, idle, closing)
                if taken is not None:
                    pool_request.assign_to_connection(taken)
        return closing

    def _connection_for(
        self,
        origin: httpcore.Origin,
        idle: list[httpcore.AsyncConnectionInterface],
        closing: list[httpcore.AsyncConnectionInterface],
    ) -> httpcore.AsyncConnectionInterface | None:
        """The connection a request to ``origin`` takes, or ``None`` (it waits): the oldest of the ``idle``
        connections for ``origin`` (each probed for expiry in this pass), else a new one. The connections it closes
        are added to ``closing``; the one it hands out leaves ``idle``."""
        connections = self._connections
        i = 0
        while i < len(idle):
            connection = idle[i]
            if connection.can_handle_request(origin) and connection.is_available():
                del idle[i]
                if not _has_leftover(connection):
                    return connection
                connections.remove(connection)  # its next answer would start with those bytes
                closing.append(connection)
                continue
            i += 1
        if len(connections) >= self._max_connections:
            if not idle:
                return None
            oldest = idle.pop(0)
            connections.remove(oldest)
            closing.append(oldest)
        connection = self.create_connection(origin)
        connections.append(connection)
        return connection


_SOCKETS: weakref.WeakKeyDictionary[httpcore.AsyncNetworkStream, socket.socket | None] = weakref.WeakKeyDictionary()
"""The socket of each open upstream connection's stream, looked up once: anyio builds a fresh dictionary of all of a
stream's attributes for each lookup, which cost more than the ``poll`` that reads the socket."""


def _idle_expired(connection: httpcore.AsyncConnectionInterface) -> bool:
    """``connection.has_expired()`` for an idle connection, as httpcore 1.0 decides it (past its keep-alive expiry,
    else its socket readable: closed by the server, or bytes past its last answer), with the clock read before the
    socket is polled and the socket looked up once per connection (``_SOCKETS``). A connection of another shape (not
    HTTP/1.1 over httpcore's anyio stream) is asked itself."""
    inner = getattr(connection, "_connection", None)
    if not isinstance(inner, httpcore.AsyncHTTP11Connection):
        return connection.has_expired()
    expire_at = inner._expire_at
    if expire_at is not None and time.monotonic() > expire_at:
        return True
    stream = inner._network_stream
    try:
        sock = _SOCKETS[stream]
    except KeyError:
        sock = _SOCKETS[stream] = stream.get_extra_info("socket")
    if sock is None:  # a stream without a socket (a mock backend's): it decides for itself
        return connection.has_expired()
    return is_socket_readable(sock)


class ClosedBeforeAnswer(httpx.RemoteProtocolError):
    """The upstream closed the connection before the head of its answer was whole (no byte of it, or part of its
    status line and headers: neither httpcore nor aiohttp tells the two apart): the one failure after which the
    sidecar sends a request again (``numi_mw.proxy``), since no answer came. A pooled connection the upstream
    had closed meanwhile ends so (llama.cpp's server closes it after every streamed answer although it announces
    keep-alive). An answer that breaks HTTP/1.1 framing is an ``httpx.RemoteProtocolError`` but not this one: the
    upstream did answer, and the request (a generation, which may be billed) is not sent twice."""


_CLOSED_BODY = httpx.ByteStream(b"")
"""The body a closed upstream response is left with (``close_upstream``)."""


async def close_upstream(response: httpx.Response) -> None:
    """Close ``response``, an answer ``send_upstream`` gave (its connection goes back to the pool when its body was
    read to the end, and is closed otherwise), and let go of its body: a closed response never reads its body again
    (httpx raises ``httpx.StreamClosed``), so it is left with an empty one, and what the body held (the transport's
    response and stream reader) is freed now rather than with the response. An answer an ``httpx.AsyncClient``
    gave holds its body's wrapper (``BoundAsyncStream``), which holds the response to set its ``elapsed`` (httpx
    0.28 and 0.29): letting go of the body breaks that reference cycle too, which CPython's cycle collector would
    otherwise have to find. Closing a closed response again changes nothing.

    Raises:
        httpx.RequestError: what ``response.aclose`` raises.
    """
    await response.aclose()
    response.stream = _CLOSED_BODY


_CLOSED_BEFORE_ANSWER = "Server disconnected without sending a response."
"""httpcore 1.0's message for a connection closed before a whole answer head (``httpcore._async.http11``)."""


def _has_leftover(connection: httpcore.AsyncConnectionInterface) -> bool:
    """Whether the upstream sent bytes past its last answer on ``connection`` that h11 has read already (bytes past
    a ``Content-Length`` body, a body on an answer to ``HEAD``): httpcore 1.0 keeps such a connection, and the next
    answer read on it starts with them (a 502 for whichever request comes next). Bytes that come later make the
    connection readable, which ``has_expired`` finds."""
    state = getattr(getattr(connection, "_connection", None), "_h11_state", None)
    return isinstance(state, h11.Connection) and bool(state.trailing_data[0])


class PooledTransport(httpx.AsyncHTTPTransport):
    """``httpx.AsyncHTTPTransport`` (HTTP/1.1, certificates verified, no proxy from the environment) on an
    ``UpstreamPool``, raising ``ClosedBeforeAnswer`` for a connection closed before a whole answer head.

    Args:
        limits: the pool's ``max_connections`` (``None``: no cap), ``max_keepalive_connections`` and
            ``keepalive_expiry`` (seconds).
    """

    def __init__(self, limits: httpx.Limits) -> None:  # httpx's constructor would build a pool of its own
        self._pool = UpstreamPool(
            ssl_context=httpx.create_ssl_context(trust_env=False),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """httpx's, with a connection closed before a whole answer head raised as ``ClosedBeforeAnswer``.

        Raises:
            httpx.TransportError: as httpx raises it.
        """
        try:
            return await super().handle_async_request(request)
        except httpx.RemoteProtocolError as exc:
            if str(exc) == _CLOSED_BEFORE_ANSWER:
                raise ClosedBeforeAnswer(str(exc)) from exc
            raise


UPSTREAM_TRANSPORTS = ("httpcore", "aiohttp")
"""The sidecar's upstream transports (``numi-mw serve --upstream-transport``, ``docs/sidecar.md``): ``aiohttp``
(the default, ``numi_mw.upstream_aiohttp.AiohttpTransport``) or ``httpcore`` (httpx's own, ``PooledTransport``)."""

DEFAULT_UPSTREAM_TRANSPORT = "aiohttp"
"""The sidecar's upstream transport unless told otherwise: under concurrency it takes a third to a half less CPU
per request than ``httpcore`` (``docs/performance.md``, "Under concurrency")."""

AIOHTTP_MINIMUM = (3, 14)
"""The oldest aiohttp release the ``aiohttp`` upstream transport runs on (major, minor)."""


def check_upstream_transport(name: object, transport: object = None) -> str:
    """Check the sidecar's ``upstream_transport`` option when it is given, and return the transport it names
    (``DEFAULT_UPSTREAM_TRANSPORT`` for ``None``), which opens the connections unless ``transport`` is given.

    Args:
        name: one of ``UPSTREAM_TRANSPORTS``, or ``None`` for the default (``DEFAULT_UPSTREAM_TRANSPORT``).
        transport: the ``transport`` option given beside it (``None``: none); it takes the place of the default,
            so it and an explicit ``aiohttp`` exclude each other.

    Raises:
        ValueError: another name; ``aiohttp`` with a ``transport``; ``aiohttp`` when the aiohttp package is not
            installed, or older than ``AIOHTTP_MINIMUM``.
    """
    if name is None:
        if transport is not None:  # the given transport takes the default's place: nothing to check
            return DEFAULT_UPSTREAM_TRANSPORT
        name = DEFAULT_UPSTREAM_TRANSPORT
    if not isinstance(name, str) or name not in UPSTREAM_TRANSPORTS:
        raise ValueError(f"upstream_transport must be one of {', '.join(UPSTREAM_TRANSPORTS)}, not {name!r}")
    if name != "aiohttp":
        return name
    if transport is not None:
        raise ValueError("give either a transport or upstream_transport='aiohttp', not both")
    try:
        version = importlib.metadata.version("aiohttp")
    except importlib.metadata.PackageNotFoundError:
        raise ValueError(
            "upstream_transport 'aiohttp' needs the aiohttp package, a dependency of numi_mw: "
            "pip install 'aiohttp>=3.14'"
        ) from None
    found = tuple(int(part) for part in re.findall(r"\d+", version)[:2])
    if found < AIOHTTP_MINIMUM:
        minimum = ".".join(map(str, AIOHTTP_MINIMUM))
        raise ValueError(
            f"upstream_transport 'aiohttp' needs aiohttp {minimum} or newer, not {version}: pip install 'aiohttp>=3.14'"
        )
    return name


def open_transport(name: str, limits: httpx.Limits) -> httpx.AsyncBaseTransport:
    """A new upstream transport ``name`` (``check_upstream_transport`` passed it) with ``limits``."""
    if name == "aiohttp":
        from numi_mw.upstream_aiohttp import AiohttpTransport

        return AiohttpTransport(limits)
    return PooledTransport(limits)


KEEP_ALIVE = (b"Connection", b"keep-alive")
"""The header httpx's clients send first on every request (``httpx.AsyncClient``'s default headers), which
``upstream_request`` sends too, so that an upstream gets the bytes it always got."""


_FRAMING = frozenset((b"host", b"content-length", b"transfer-encoding"))
"""Headers whose presence changes what ``httpx.Request`` adds (``upstream_request`` leaves such a request to it)."""
_LENGTH_REQUIRED = frozenset(("POST", "PUT", "PATCH"))
"""The methods httpx gives ``Content-Length: 0`` when they have no body."""
_NO_LENGTH = (b"Content-Length", b"0")


def host_header(url: httpx.URL) -> bytes:
    """The ``Host`` header's value httpx sends for ``url`` (its ``netloc``: the host, IDNA-encoded and lower case,
    and a port other than the scheme's), or ``b""`` for a URL without a host, which gets none."""
    return url.netloc if url.host else b""


def whole_headers(
    method: str, host: bytes, headers: list[tuple[bytes, bytes]], content: bytes
) -> list[tuple[bytes, bytes]] | None:
    """The header pairs, in order, that ``httpx.Request(method, url, headers=[KEEP_ALIVE, *headers],
    content=content)`` sends (``httpx._models.Request._prepare``): ``Host`` and, for an empty body that needs one
    (``POST``, ``PUT``, ``PATCH``), ``Content-Length: 0`` first; then ``KEEP_ALIVE`` and ``headers`` as given; a
    body's ``Content-Length`` last. ``None`` when ``headers`` name ``Host``, ``Content-Length`` or
    ``Transfer-Encoding``, whose effect httpx decides itself (``upstream_request`` leaves those to it).

    Args:
        method: the HTTP method, in any case.
        host: the ``Host`` header's value for the upstream URL (``host_header``); ``b""``: no ``Host`` header.
        headers: raw header pairs, names as the client wrote them.
        content: the whole body.
    """
    for name, _ in headers:
        if name.lower() in _FRAMING:
            return None
    raw = [(b"Host", host)] if host else []
    if not content and method.upper() in _LENGTH_REQUIRED:
        raw.append(_NO_LENGTH)
    raw += (KEEP_ALIVE, *headers)
    if content:
        raw.append((b"Content-Length", b"%d" % len(content)))
    return raw


def upstream_request(
    method: str,
    url: httpx.URL,
    headers: list[tuple[bytes, bytes]],
    content: bytes | AsyncIterator[bytes],
    timeout: dict[str, float | None],
) -> httpx.Request:
    """The ``httpx.Request`` that ``httpx.AsyncClient.build_request`` would build for these arguments on a client
    whose only default header is ``Connection: keep-alive`` (``KEEP_ALIVE``, first), with no cookies and no base
    URL, for ``send_upstream``. ``headers`` are sent in their order after it; httpx adds ``Host`` and the body's
    framing (``Content-Length``, or ``Transfer-Encoding: chunked`` for a body of unknown length) as it always
    does (``whole_headers``, for a whole body). Credentials in ``url`` become ``Authorization: Basic`` in the
    client's own ``Authorization`` header's place, as the client's default auth makes them (``httpx.BasicAuth``).

    Args:
        method: the HTTP method.
        url: the upstream URL, as sent (``target_url``).
        headers: raw header pairs, names as the client wrote them.
        content: the body, whole or as it streams.
        timeout: ``httpx.Timeout.as_dict()`` of the upstream timeouts (seconds), the request's ``timeout``
            extension that the transports read.
    """
    extensions = {"timeout": timeout}
    if isinstance(content, bytes) and (raw := whole_headers(method, host_header(url), headers, content)) is not None:
        # what ``httpx.Request(content=...)`` makes of a whole body, its headers normalized once instead of three
        # times
        request = httpx.Request(
            method, url, headers=httpx.Headers(raw), stream=httpx.ByteStream(content), extensions=extensions
        )
        request.read()  # the body as ``content=`` would have it read
    else:
        request = httpx.Request(method, url, headers=[KEEP_ALIVE, *headers], content=content, extensions=extensions)
    if url.userinfo:
        username, password = url.username, url.password
        if username or password:
            next(httpx.BasicAuth(username, password).sync_auth_flow(request))  # sets the header, as its flow does
    return request


async def send_upstream(transport: httpx.AsyncBaseTransport, request: httpx.Request) -> httpx.Response:
    """Send ``request`` (``upstream_request``) through ``transport``; the answer's body is still to be read.

    What ``httpx.AsyncClient.send(request, stream=True)`` does for a client with no auth, no redirects followed,
    no cookies, no event hooks and no proxies, without the client's steps for each of those (about a tenth of the
    sidecar's instructions for a buffered request, ``docs/performance.md``, "No client in between"): the
    transport's answer, with its ``request`` set. Nothing wraps its body, so the answer holds no reference back to
    itself and is freed when its last reference goes.

    Raises:
        httpx.RequestError: as the transport raises it.
    """
    response = await transport.handle_async_request(request)
    response.request = request
    return response


class Outgoing(NamedTuple):
    """One upstream request as the sidecar makes it, the arguments of ``upstream_request``: the method, the URL
    (``target_url``), raw header pairs, the body (whole, or as it streams) and the timeouts
    (``httpx.Timeout.as_dict()``, seconds)."""

    method: str
    url: httpx.URL
    headers: list[tuple[bytes, bytes]]
    content: bytes | AsyncIterator[bytes]
    timeout: dict[str, float | None]


SendWhole = Callable[
    [str, httpx.URL, list[tuple[bytes, bytes]], bytes, dict[str, float | None]], Awaitable[httpx.Response]
]
"""A transport's way to send a whole body without an ``httpx.Request`` (``upstream_aiohttp.AiohttpTransport``'s
``send_whole``): the arguments of ``Outgoing``, the body bytes."""


async def send_outgoing(
    transport: httpx.AsyncBaseTransport, outgoing: Outgoing, send_whole: SendWhole | None = None
) -> httpx.Response:
    """Send ``outgoing`` through ``transport``; the answer's body is still to be read. A whole body goes by
    ``send_whole`` when the caller gives it (the sidecar gives its own aiohttp transport's: the same request without
    an ``httpx.Request`` made for it); anything else as ``upstream_request`` builds it (``send_upstream``).

    Raises:
        httpx.RequestError: as the transport raises it.
    """
    content = outgoing.content
    if send_whole is not None and isinstance(content, bytes):
        return await send_whole(outgoing.method, outgoing.url, outgoing.headers, content, outgoing.timeout)
    return await send_upstream(transport, upstream_request(*outgoing))


DECODED = frozenset(("identity", "gzip", "deflate", ""))
"""Content encodings whose body numi_mw reads to rewrite it (``decoded_body``: ``gzip`` and ``deflate`` through
``Inflater``); a response in another one is not rewritten."""

Stage = Literal["send", "body", "stream"]

_FAILURES: dict[Stage, tuple[str, str, str]] = {
    "send": (
        "The upstream did not answer in time; try again later.",
        "The upstream could not be reached; try again later.",
        "The upstream could not be reached; try again later.",
    ),
    "body": (
        "The upstream did not finish its answer in time; try again.",
        "The upstream response ended early or could not be decoded.",
        "The upstream response ended early or could not be decoded.",
    ),
    "stream": (
        "The upstream stopped sending the stream in time; the answer is incomplete.",
        "The upstream stream could not be decoded; the answer is incomplete.",
        "The upstream stream ended early; the answer is incomplete.",
    ),
}
"""The message for an httpx error at each stage (sending the request, reading a buffered body, relaying a
stream): for a timeout, a body that cannot be decoded, anything else."""


@dataclass(slots=True)
class Exchange:
    """What one request's call upstream was, for the operations layer (``numi_mw.proxy.ops``): names only, never
    a body or a key. ``provider`` stays ``None`` for a request numi_mw answered itself.

    Attributes:
        provider: the name of the provider the request went to.
        wire_api: the wire API the upstream was spoken to in.
        endpoint: the catalog endpoint tag the request was routed to (catalog routes only).
        model: the catalog model id of the route (catalog routes only).
        failure: ``(stage, kind)`` of the upstream failure (``upstream_failure``), when one happened.
    """

    provider: str | None = None
    wire_api: str | None = None
    endpoint: str | None = None
    model: str | None = None
    failure: tuple[Stage, str] | None = None


EXCHANGE: ContextVar[Exchange | None] = ContextVar("numi_mw_exchange", default=None)
"""The ``Exchange`` of the request being served, when an operations layer set one (else ``None``)."""


def note_upstream(name: str, wire_api: str, route: Route | None) -> None:
    """Record in the current ``Exchange`` (when there is one) that the request goes to provider ``name`` in
    ``wire_api``, on ``route`` (a chat completions request's) when given."""
    exchange = EXCHANGE.get()
    if exchange is None:
        return
    exchange.provider, exchange.wire_api = name, wire_api
    if route is not None:
        exchange.endpoint, exchange.model = route.endpoint, route.model


def failure_kind(exc: httpx.RequestError) -> str:
    """The kind of an httpx error, as metrics count it: ``timeout``, ``connect``, ``decode``, ``protocol``
    (the upstream broke HTTP framing or closed the connection) or ``other``."""
    if isinstance(exc, httpx.TimeoutException):
        return "timeout"
    if isinstance(exc, httpx.ConnectError):
        return "connect"
    if isinstance(exc, httpx.DecodingError):
        return "decode"
    if isinstance(exc, httpx.ProtocolError | httpx.ReadError | httpx.WriteError):
        return "protocol"
    return "other"


def upstream_failure(exc: httpx.RequestError, stage: Stage) -> ApiError:
    """The one mapping of an httpx error to the API error the client receives (``docs/errors.md``): 504
    ``upstream_timeout`` for a timeout, else 502 ``upstream_unavailable``. Logged once, as a warning, by stage
    and kind (never the body or the error's text, which can quote upstream bytes), and noted in the current
    ``Exchange``."""
    timeout, undecodable, other = _FAILURES[stage]
    log.warning("upstream %s failed: %s", stage, type(exc).__name__)
    exchange = EXCHANGE.get()
    if exchange is not None:
        exchange.failure = (stage, failure_kind(exc))
    if isinstance(exc, httpx.TimeoutException):
        return upstream_timeout(timeout)
    return upstream_unavailable(undecodable if isinstance(exc, httpx.DecodingError) else other)


def target_url(base_url: str, raw_path: bytes, query: bytes) -> httpx.URL:
    """The upstream URL for a request path, as sent (still percent-encoded): a leading ``/v1`` stands for the base
    URL's path, and the rest is appended to it byte for byte; the base URL's own query comes first, the request's
    after it. The last ``URL_CACHE`` URLs built for a path and query of up to ``URL_CACHE_BYTES`` bytes are kept (an
    ``httpx.URL`` is immutable): a sidecar's requests mostly go to a few paths, and building the URL is most of the
    cost of this step; longer ones, which a client can make unique at will, are built each time.

    Raises:
        ApiError: 400 ``invalid_request`` for a request target that is not a path (``OPTIONS *``), a path that is not
            UTF-8 once percent-decoded (``readable_path``), or one with a dot segment in any form ``has_dot_segment``
            finds, either of which could climb out of the base URL's path.
    """
    if len(raw_path) + len(query) <= URL_CACHE_BYTES:
        return _kept_url(base_url, raw_path, query)
    return _built_url(base_url, raw_path, query)


URL_CACHE = 1024
"""How many upstream URLs ``target_url`` keeps."""
URL_CACHE_BYTES = 512
"""The longest path plus query, in bytes, whose upstream URL ``target_url`` keeps: at most ``URL_CACHE`` of them,
so the cache holds well under a MiB whatever clients send."""


def _built_url(base_url: str, raw_path: bytes, query: bytes) -> httpx.URL:
    if not raw_path.startswith(b"/"):  # ``*``: no path to put under the base URL's
        raise not_a_path()
    text = readable_path(raw_path)
    if text is None:
        raise unreadable_path()
    if has_dot_segment(text):
        raise bad_path()
    if raw_path == b"/v1" or raw_path.startswith(b"/v1/"):
        raw_path = raw_path[3:]
    base, path, base_query = _base_url(base_url)
    merged = b"&".join(part for part in (base_query, query) if part)
    return base.copy_with(raw_path=path + raw_path + (b"?" + merged if merged else b""))


_kept_url = functools.lru_cache(maxsize=URL_CACHE)(_built_url)


@functools.lru_cache(maxsize=256)
def _base_url(base_url: str) -> tuple[httpx.URL, bytes, bytes]:
    """``base_url`` parsed once (a provider's base URL is the same on every request): the URL, its path without
    the trailing ``/``, and its query (a base URL may carry one: ``api-version=...``)."""
    base = httpx.URL(base_url)
    path, _, query = base.raw_path.partition(b"?")
    return base, path.rstrip(b"/"), query


_IIS_ESCAPE = re.compile(rb"%[uU]([0-9A-Fa-f]{4})")
_PERCENT = ord("%")  # an integer: one byte is searched as one (docs/performance.md, "Searching bytes")
_SEPARATORS = re.compile(r"[/\\]")
_PADDING = re.compile(r"^[\s\x00-\x1f\x7f]+|[\s\x00-\x1f\x7f]+$")


def _iis_escape(match: re.Match[bytes]) -> bytes:
    """``%uXXXX`` as the percent-encoded UTF-8 of its code point (a lone surrogate stays undecodable)."""
    char = chr(int(match[1], 16)).encode("utf-8", "surrogatepass")
    return b"".join(b"%%%02X" % byte for byte in char)


def readable_path(raw_path: bytes) -> str | None:
    """``raw_path`` (as sent, percent-encoded) as a server behind the upstream URL may read it: ``%uXXXX`` as the
    code point (IIS's encoding), then percent-decoded once and read as UTF-8 (RFC 3986 section 2.5); ``None`` when
    the decoded bytes are not UTF-8, as with overlong forms (``%c0%ae`` for ``.``, ``%c0%af`` for ``/``) that a
    lenient decoder reads as dots and separators."""
    if raw_path.isascii() and _PERCENT not in raw_path:
        return raw_path.decode("ascii")
    try:
        return unquote_to_bytes(_IIS_ESCAPE.sub(_iis_escape, raw_path)).decode("utf-8")
    except UnicodeDecodeError:
        return None


def has_dot_segment(path: str) -> bool:
    """Whether ``path`` (``readable_path``'s text) has a ``.`` or ``..`` segment as a server behind the upstream
    URL may read it: NFKC-normalized (Unicode Standard Annex 15; full-width ``\uff0e`` is ``.``, ``\uff0f`` and
    ``\uff3c`` are ``/`` and ``\\``, ``\u2025`` is ``..``), split at ``/`` and at ``\\`` (a separator on Windows
    servers), each segment up to its first ``;`` (a path parameter, as in ``..;jsessionid=1``) and without the
    whitespace, NUL and other control characters around it (``..%00``, ``..%20``). RFC 3986 section 5.2.4 removes
    such segments; a path numi_mw forwards keeps its bytes, so it refuses them instead. A name that only holds
    dots (``...``, ``a..b``) or a doubly encoded one (``%252e%252e``) is no dot segment."""
    if not path.isascii():
        path = unicodedata.normalize("NFKC", path)
    for segment in _SEPARATORS.split(path):
        name = segment.partition(";")[0]
        if "." in name and _PADDING.sub("", name) in (".", ".."):
            return True
    return False


def upstream_headers(
    headers: Headers, adapter: WireAdapter | None, key: str | None = None, *, translated: bool = False
) -> Headers:
    """``headers`` (a raw list, changed in place and returned) for an upstream whose wire API is ``adapter``'s
    (``None``: chat completions). ``translated``: the body is the native JSON numi_mw wrote, labelled
    ``content-type: application/json`` whatever the client's label was.

    A configured ``key`` replaces whatever key the client sent, in the wire API's key header (``Authorization:
    Bearer KEY``, or the bare key in ``x-api-key``). For a translated wire API, a client's ``Authorization: Bearer
    KEY`` moves to the adapter's key header and its fixed headers (``anthropic-version``) are added, each unless
    the client sent it (Anthropic's Messages API reference, "Authentication" and "Versions").
    """
    if key is not None:
        target = adapter.api_key_header.encode() if adapter is not None else b"authorization"
        headers = [(k, v) for k, v in headers if k.lower() not in (b"authorization", target)]
        value = key.encode("latin-1")
        headers.append((target, b"Bearer " + value if target == b"authorization" else value))
    if translated:
        headers = with_length(headers, None, content_type=b"application/json")
    if adapter is None:
        return headers
    names = {k.lower() for k, _ in headers}
    target = adapter.api_key_header.encode()
    if target != b"authorization" and target not in names:
        for i, (name, value) in enumerate(headers):
            if name.lower() == b"authorization" and value[:7].lower() == b"bearer ":
                headers[i] = (target, value[7:].strip())
                break
    for header, text in adapter.headers:
        if header.encode() not in names:
            headers.append((header.encode(), text.encode()))
    return headers


_CONTROL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
"""Control characters other than a tab: invalid in a field value (RFC 9110 section 5.5), and refused by uvicorn,
which raises instead of writing the answer."""


_WATCHED = frozenset((b"connection", b"transfer-encoding", b"content-length", b"content-type"))
"""The answer header names ``answer_headers`` reads besides ``drop``."""

_NO_BODY = (204, 304)


def answer_headers(
    headers: Iterable[tuple[bytes, bytes]],
    drop: frozenset[bytes],
    status: int = 200,
    *,
    length: int | None = None,
    content_type: bytes | None = None,
    listed: bool = True,
) -> Headers:
    """The upstream's answer ``headers`` (raw, names as the upstream wrote them, in order) as they go back to the
    client, in one pass over them:

    - without the names in ``drop`` (lower case; the hop-by-hop ones at least, ``asgi.HOP_BY_HOP``), and, when
      ``listed``, the names a ``Connection`` header lists (hop-by-hop too, RFC 9110 section 7.6.1; an httpx
      transport is no hop and keeps them, as the client's own transport would);
    - without a header whose value holds a control character other than a tab (invalid in a field value, RFC 9110
      section 5.5), which the server in front of the sidecar cannot write: the rest of the answer goes on;
    - a body relayed chunk by chunk (``length`` ``None``) goes back without ``content-length`` when the upstream
      framed it with ``transfer-encoding``, which overrides it (RFC 9112 section 6.3; that body goes back chunked,
      and a length beside the chunks would be wrong or ignored), and a ``204`` or ``304`` answer (``status``) has
      no body whatever its ``content-length`` says (RFC 9110 sections 8.6, 15.3.5 and 15.4.5): the server in front
      would wait for that many body bytes;
    - a whole body of ``length`` bytes goes back with ``content-length: length`` at the end instead of the
      upstream's (a ``204`` or ``304`` with none, as above), and with ``content_type``, when given (a rewriter that
      changed the body), instead of the upstream's ``content-type``, just before it.

    A second pass is made only when a ``Connection`` header lists a name outside ``drop``, when a ``content-length``
    came beside ``transfer-encoding``, or when a value holds a control character.
    """
    out: Headers = []
    listing: list[bytes] = []  # the Connection headers' values
    chunked = False
    kept_length = False
    whole = length is not None
    for name, value in headers:
        lowered = name.lower()
        if lowered in _WATCHED:
            if lowered == b"connection":
                if listed:
                    listing.append(value)
            elif lowered == b"transfer-encoding":
                chunked = True
            elif lowered == b"content-length":
                if whole or status in _NO_BODY:
                    continue
                kept_length = lowered not in drop
            elif content_type is not None:  # the rewriter's replaces it
                continue
        if lowered not in drop:
            out.append((name, value))
    named = listed_names(listing, drop) if listing else set()
    if chunked and kept_length:
        named.add(b"content-length")
    if named:  # a Connection header lists a header of the answer's own, or a length came beside the chunks
        out = [(name, value) for name, value in out if name.lower() not in named]
    if _CONTROL.search(b"\t".join([value for _, value in out])):  # one search; a tab is allowed
        out = [(name, value) for name, value in out if not _CONTROL.search(value)]
    if content_type is not None:
        out.append((b"content-type", content_type))
    if length is not None and status not in _NO_BODY:
        out.append((b"content-length", b"%d" % length))
    return out


def api_keys(catalog: Catalog) -> dict[str, str]:
    """The API key of each catalog provider whose ``api_key_env`` names a set environment variable, without the
    whitespace at its end (a key mounted as a secret file ends with a newline); a variable that is empty then
    counts as unset.

    Raises:
        ValueError: a key holds a character that is not visible ASCII (``!`` to ``~``): a control character, a
            space, or a character outside ASCII, which an HTTP header value cannot carry as the key (RFC 9110
            section 5.5, and API keys are ASCII tokens). The message names the variable and the position, never
            the key.
    """
    keys: dict[str, str] = {}
    for provider in catalog.providers:
        env = provider.api_key_env
        key = os.environ.get(env, "").rstrip() if env else ""
        if not key:
            continue
        for position, char in enumerate(key, 1):
            if not "!" <= char <= "~":
                raise ValueError(
                    f"the environment variable {env} (api_key_env of provider {provider.name!r}) holds a character "
                    f"at position {position} that is not visible ASCII; an API key is visible ASCII "
                    "(the key is not shown)"
                )
        keys[provider.name] = key
    return keys


def answer_options(
    prepared: PreparedRequest,
    think_tags: bool | ThinkTags | None,
    think_start: ThinkStart | None,
    bounds: Bounds = DEFAULT_BOUNDS,
) -> ResponseOptions:
    """What the response side does for ``prepared``'s answer: its ``exclude``, the think tags for its route
    (``response.think_tags_for`` with the shell's ``think_tags`` and ``think_start`` and the route's own start),
    the shell's ``bounds``, the route's usage accounting (``usage.usage_rules``: its provider's row and its
    endpoint's prices), and for a translated wire API what the translation needs, ``created`` now (seconds
    since the epoch)."""
    route = prepared.route
    think = think_tags_for(route.rules, think_tags, think_start, route_start=route.think_start)
    created = int(time.time()) if prepared.translation is not None else 0
    usage = usage_rules(route.rules, route.pricing)
    return response_options(
        prepared.translation, prepared.controls.exclude, think, created=created, bounds=bounds, usage=usage
    )


async def feed_answer(upstream: httpx.Response, rewriter: BodyRewriter) -> int:
    """Feed ``rewriter`` the upstream body, decoded step by step as it arrives (``decoded_body``: never read or
    decoded whole first, so that the rewriter's bound holds, ``response.Bounds``); close the upstream response on
    every path. Returns the bytes fed (decoded), for ``asgi.off_loop``.

    Raises:
        ApiError: 502 from ``rewriter.feed`` past its ``max_response_bytes``.
        httpx.RequestError: the body could not be read whole, as httpx raises it (``httpx.DecodingError`` for a
            gzip or deflate body that cannot be decoded).
    """
    size = 0
    try:
        async for piece in decoded_body(upstream):
            size += len(piece)
            rewriter.feed(piece)
    finally:
        await upstream.aclose()
    return size


def feed_answer_sync(upstream: httpx.Response, rewriter: BodyRewriter) -> int:
    """``feed_answer`` for a synchronous upstream response (``decoded_body_sync``)."""
    size = 0
    try:
        for piece in decoded_body_sync(upstream):
            size += len(piece)
            rewriter.feed(piece)
    finally:
        upstream.close()
    return size


DECODE_STEP = 64 * 1024
"""The most bytes one step of decoding a gzip or deflate body yields (``Inflater``)."""


class Inflater:
    """Decodes a ``gzip`` or ``deflate`` body (RFC 9110 section 8.4.1) step by step: each piece it yields is at most
    ``step`` bytes, and the next one is only decoded when the caller asks for it, so that a reader with a bound (the
    rewriter's ``feed``, ``response.Bounds``) stops a small body that decodes to a huge one (a "gzip bomb") before
    more is decoded. httpx's own decoders decode each network read whole (``httpx._decoders``), which for such a
    body is many megabytes at once whatever the bound.

    ``gzip`` is read with the gzip wrapper; ``deflate`` as httpx reads it: the zlib wrapper (RFC 1950), falling back
    to raw deflate (RFC 1951) when the first piece is not one. Bytes after the end of the compressed stream are
    ignored, as httpx ignores them.

    Args:
        encoding: ``gzip`` or ``deflate``.
        step: the most bytes one piece holds (default ``DECODE_STEP``, 64 KiB).

    Raises:
        ValueError: another ``encoding``.
    """

    __slots__ = ("_first", "_raw_fallback", "_zlib", "step")

    def __init__(self, encoding: str, step: int = DECODE_STEP) -> None:
        if encoding not in ("gzip", "deflate"):
            raise ValueError(f"only gzip and deflate are decoded here, not {encoding!r}")
        self.step = step
        self._raw_fallback = encoding == "deflate"
        self._first = True
        self._zlib = zlib.decompressobj(zlib.MAX_WBITS | 16 if encoding == "gzip" else zlib.MAX_WBITS)

    def decode(self, data: bytes) -> Iterator[bytes]:
        """The decoded pieces of ``data`` (the next bytes of the body), each at most ``step`` bytes and non-empty.

        Raises:
            httpx.DecodingError: the bytes are not of the encoding (as httpx raises it).
        """
        first, self._first = self._first, False
        try:
            piece = self._zlib.decompress(data, self.step)
        except zlib.error as exc:
            if not (first and self._raw_fallback):
                raise httpx.DecodingError(str(exc)) from exc
            self._zlib = zlib.decompressobj(-zlib.MAX_WBITS)
            piece = self._step(data)
        while True:
            if piece:
                yield piece
            tail = self._zlib.unconsumed_tail
            if not tail and len(piece) < self.step:  # all input read and no output left pending
                return
            piece = self._step(tail)

    def flush(self) -> bytes:
        """What is left once the body has ended (at most what one last input byte holds).

        Raises:
            httpx.DecodingError: as ``decode``.
        """
        try:
            return self._zlib.flush()
        except zlib.error as exc:  # pragma: no cover - zlib raises on flush only for a stream it cannot end
            raise httpx.DecodingError(str(exc)) from exc

    def _step(self, data: bytes) -> bytes:
        try:
            return self._zlib.decompress(data, self.step)
        except zlib.error as exc:
            raise httpx.DecodingError(str(exc)) from exc


def header_values(headers: httpx.Headers, *names: bytes) -> list[str | None]:
    """What ``headers.get(name)`` gives for each of ``names`` (every value of the header joined with ``", "``,
    decoded as httpx decodes them; ``None`` when there is none), read from the raw pairs in one pass for all of
    them. ``httpx.Headers.get`` raises and catches a ``KeyError`` for a header that is absent, which costs about
    10 k instructions, and an answer seldom has the ``content-encoding`` that every answer is asked for; a pass
    of their own for each name cost about 10 k instructions more for two.

    Args:
        headers: an httpx request's or response's headers.
        names: the header names, lower case.
    """
    found: dict[bytes, list[bytes]] = {}
    for key, value in headers.raw:
        lowered = key.lower()
        if lowered in names:
            found.setdefault(lowered, []).append(value)
    out: list[str | None] = []
    for name in names:
        values = found.get(name)
        if values is None:
            out.append(None)
            continue
        joined = b", ".join(values)
        out.append(joined.decode("ascii") if joined.isascii() else joined.decode(headers.encoding))
    return out


def answer_rewriter(options: ResponseOptions, upstream: httpx.Response) -> Rewriter | None:
    """The rewriter for the ``upstream`` answer to a call with ``options`` (``choose_rewriter``, on its status,
    ``content-type`` and ``content-encoding``), or ``None`` when it passes as it comes; a body in an encoding of
    ``DECODED`` is read decoded (``decoded_body``)."""
    content_type, encoding = header_values(upstream.headers, b"content-type", b"content-encoding")
    return choose_rewriter(options, upstream.status_code, content_type, encoding, decoded=DECODED)


def _inflater(upstream: httpx.Response) -> Inflater | None:
    """The decoder for a body in ``gzip`` or ``deflate``, else ``None`` (identity: read raw)."""
    encoding = (header_values(upstream.headers, b"content-encoding")[0] or "identity").strip().lower()
    return Inflater(encoding) if encoding in ("gzip", "deflate") else None


def _read_already(upstream: httpx.Response) -> bytes | None:
    """The body httpx has read whole already (decoded), or ``None`` when it is still to be read (or was streamed
    away: reading it raises ``httpx.StreamConsumed`` as it would in httpx)."""
    if not upstream.is_stream_consumed:
        return None
    try:
        return upstream.content
    except httpx.ResponseNotRead:
        return None


def raw_body(upstream: httpx.Response) -> AsyncIterable[bytes]:
    """The upstream body's bytes as the transport gives them, each piece as it arrives: the response's own
    ``stream``, with nothing between it and the reader. httpx's ``aiter_raw`` reads the same pieces through an
    async generator of its own (with a chunker and a byte count) for each one, which costs a stream's every event
    a step (``docs/performance.md``, "No client in between"). Like ``aiter_raw`` it marks the body consumed, and
    refuses a body read or closed before; the caller closes the response when done (``relay``, ``feed_answer``).

    Raises:
        httpx.StreamConsumed: the body was read before.
        httpx.StreamClosed: the response was closed before its body was read.
        RuntimeError: the response's stream is not an async one (a synchronous transport's answer).
    """
    if upstream.is_stream_consumed:
        raise httpx.StreamConsumed()
    if upstream.is_closed:
        raise httpx.StreamClosed()
    stream = upstream.stream
    if not isinstance(stream, httpx.AsyncByteStream):
        raise RuntimeError("the upstream answer's body is not an async stream")
    upstream.is_stream_consumed = True
    return stream


def decoded_body(upstream: httpx.Response) -> AsyncIterable[bytes]:
    """The upstream body, as it arrives, decoded from ``gzip`` or ``deflate`` in pieces of at most ``DECODE_STEP``
    bytes (``Inflater``); an identity body as it comes, straight from the transport (``raw_body``: no step of
    numi_mw's or httpx's own for each piece). A body httpx has read whole already (an ``httpx.MockTransport``
    answer) comes as httpx decoded it.

    Raises:
        httpx.RequestError: the body could not be read, or decoded (``httpx.DecodingError``).
    """
    whole = _read_already(upstream)
    if whole is not None:
        return _whole(whole)
    inflater = _inflater(upstream)
    if inflater is None:
        return raw_body(upstream)
    return _inflated(upstream, inflater)


async def _whole(body: bytes) -> AsyncIterator[bytes]:
    """``body`` as one piece, or none when it is empty."""
    if body:
        yield body


async def _inflated(upstream: httpx.Response, inflater: Inflater) -> AsyncIterator[bytes]:
    """The upstream body as it arrives, through ``inflater``."""
    async for chunk in raw_body(upstream):
        for piece in inflater.decode(chunk):
            yield piece
    tail = inflater.flush()
    if tail:
        yield tail


def decoded_body_sync(upstream: httpx.Response) -> Iterator[bytes]:
    """``decoded_body`` for a synchronous upstream response."""
    whole = _read_already(upstream)
    if whole is not None:
        if whole:
            yield whole
        return
    inflater = _inflater(upstream)
    for chunk in upstream.iter_raw():
        if inflater is None:
            yield chunk
            continue
        yield from inflater.decode(chunk)
    if inflater is not None:
        tail = inflater.flush()
        if tail:
            yield tail


def whole_answer(
    rewriter: BodyRewriter,
    status: int,
    headers: Iterable[tuple[bytes, bytes]],
    drop: frozenset[bytes],
    *,
    listed: bool = True,
) -> tuple[bytes, int, Headers]:
    """The client's answer for the whole upstream body ``rewriter`` was fed (``feed_answer``): the bytes, the status
    (the rewriter's when it sets one, else ``status``), and the upstream's ``headers`` as ``answer_headers`` sends
    them back (without the names in ``drop``, lower case, and, when ``listed``, those a ``Connection`` header
    lists), with the body's ``content-length`` (none for a ``204`` or ``304``) and, when the rewriter changed the
    body, its ``content-type``."""
    out = rewriter.finish()
    media = rewriter.content_type if rewriter.changed else None
    status = rewriter.status if rewriter.status is not None else status
    return out, status, answer_headers(headers, drop, status, length=len(out), content_type=media, listed=listed)


async def relay(upstream: httpx.Response, rewriter: StreamRewriter | None) -> AsyncIterator[bytes]:
    """Yield the upstream body as it arrives, through ``rewriter`` when there is one (fed the body decoded step by
    step, ``decoded_body``, so that its event bound stops a gzip bomb early); close the upstream response on every
    path. A stream the upstream breaks off (an ``httpx.RequestError`` while reading) ends with
    ``rewriter.fail``'s error event (``upstream_failure`` at stage ``stream``, logged once), and so does one whose
    event passes the rewriter's bound (the ``ApiError`` its ``feed`` raises); the rest of the upstream body is not
    read.

    Raises:
        httpx.RequestError: the upstream broke off a body relayed without a rewriter. The caller leaves the
            client's response unfinished, so the server closes the connection without the body's end (no last
            chunk, or short of its ``content-length``) and the client sees the break as it would talking to the
            upstream directly (RFC 9112 section 8, "Handling Incomplete Messages").
    """
    try:
        async for chunk in raw_body(upstream) if rewriter is None else decoded_body(upstream):
            if rewriter is None:
                yield chunk
                continue
            out = rewriter.feed(chunk)
            if out:
                yield out
        if rewriter is not None:
            tail = rewriter.finish()
            if tail:
                yield tail
    except httpx.RequestError as exc:
        error = upstream_failure(exc, "stream")
        if rewriter is None:
            raise
        yield rewriter.fail(error)
    except ApiError as error:  # past the rewriter's bound (only a rewriter raises it)
        if rewriter is not None:
            yield rewriter.fail(error)
    finally:
        await upstream.aclose()


def relay_sync(upstream: httpx.Response, rewriter: StreamRewriter | None) -> Iterator[bytes]:
    """``relay`` for a synchronous upstream response: the same steps, each as ``relay`` takes it."""
    try:
        for chunk in upstream.iter_raw() if rewriter is None else decoded_body_sync(upstream):
            if rewriter is None:
                yield chunk
                continue
            out = rewriter.feed(chunk)
            if out:
                yield out
        if rewriter is not None:
            tail = rewriter.finish()
            if tail:
                yield tail
    except httpx.RequestError as exc:
        error = upstream_failure(exc, "stream")
        if rewriter is None:
            raise
        yield rewriter.fail(error)
    except ApiError as error:  # past the rewriter's bound (only a rewriter raises it)
        if rewriter is not None:
            yield rewriter.fail(error)
    finally:
        upstream.close()
