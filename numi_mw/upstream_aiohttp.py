"""The sidecar's default upstream transport, on aiohttp (``numi-mw serve --upstream-transport aiohttp``).

httpx stays the client the sidecar speaks to (its requests, responses and errors); only the connections and the
HTTP/1.1 parsing move to aiohttp's connector and its C parser, which take less CPU per request than httpcore and
h11 (``docs/performance.md``). What reaches the upstream is what httpx's own transport (``httpcore``) sends:
the request's own headers and no others (aiohttp would add ``User-Agent``, ``Accept``, ``Accept-Encoding`` and
``Content-Type``), its path and query byte for byte (aiohttp would re-quote them), its body as it comes, and
failures reach the sidecar as the httpx errors httpcore raises for them, so that they read the same to a client
(``docs/errors.md``). aiohttp 3.14 or newer is a dependency of numi_mw (``upstream.AIOHTTP_MINIMUM``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import aiohttp
import httpx
from aiohttp import hdrs
from aiohttp.client_exceptions import cert_errors, ssl_errors
from aiohttp.client_proto import ResponseHandler
from aiohttp.helpers import ceil_timeout
from aiohttp.http_exceptions import HttpProcessingError
from multidict import CIMultiDict
from yarl import URL

from numi_mw.upstream import ClosedBeforeAnswer, PooledTransport, host_header, upstream_request, whole_headers

MAX_HEADER_BYTES = 100 * 1024
"""The most bytes of one response header line aiohttp parses (its default is 8,190): httpcore takes up to 100 KiB
of response head, so an answer the default transport reads is read here too."""

MAX_HEADER_COUNT = MAX_HEADER_BYTES // 4
"""The most response headers aiohttp parses (its default is 128; httpcore counts none): as many as fit in
``MAX_HEADER_BYTES`` at four bytes each (``a:`` and the line end)."""

URL_KEPT = 256
"""How many upstream URLs an ``AiohttpTransport`` keeps converted (``AiohttpTransport._url``); all are let go when
one more comes."""
URL_KEPT_BYTES = 1024
"""The longest upstream URL, in characters, that an ``AiohttpTransport`` keeps converted: with ``URL_KEPT``, well
under a MiB whatever clients send."""

SKIPPED_AUTO_HEADERS = ("Accept", "Accept-Encoding", "User-Agent", "Content-Type")
"""Headers aiohttp adds to a request that lacks them, which the sidecar does not send: a client that sent none
reaches the upstream without one, as it would directly."""


def _translated(exc: BaseException, stage: str) -> Exception | None:
    """The httpx error httpcore raises for the failure aiohttp raised as ``exc`` (``upstream.failure_kind`` reads
    it), or ``None`` for an exception that is no such failure: a connect timeout ``httpx.ConnectTimeout``, a read
    timeout ``httpx.ReadTimeout``, a connection refused or a DNS or TLS failure ``httpx.ConnectError``, a connection
    the upstream closed before or while answering and an answer that breaks HTTP/1.1 framing
    ``httpx.RemoteProtocolError`` (RFC 9112; ``upstream.ClosedBeforeAnswer`` for a connection closed while the
    request waits for its answer), another socket error ``httpx.ReadError`` (``httpx.WriteError`` while sending).
    ``stage`` is ``send`` or ``read``."""
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout(str(exc))
    if isinstance(exc, aiohttp.ServerTimeoutError | TimeoutError):
        return httpx.ReadTimeout(str(exc) or "the upstream did not answer in time")
    if isinstance(exc, aiohttp.ClientConnectorError):
        return httpx.ConnectError(str(exc))
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        closed: type[httpx.RemoteProtocolError] = ClosedBeforeAnswer if stage == "send" else httpx.RemoteProtocolError
        return closed(str(exc) or type(exc).__name__)
    if isinstance(exc, aiohttp.ClientPayloadError | aiohttp.ClientResponseError):
        return httpx.RemoteProtocolError(str(exc) or type(exc).__name__)
    if isinstance(exc, HttpProcessingError):
        return httpx.RemoteProtocolError(exc.message or type(exc).__name__)
    if isinstance(exc, aiohttp.ClientConnectionError):
        error = httpx.WriteError if stage == "send" else httpx.ReadError
        return error(str(exc) or type(exc).__name__)
    if isinstance(exc, aiohttp.ClientError):
        return httpx.TransportError(str(exc) or type(exc).__name__)
    return None


def _raise_translated(exc: Exception, stage: str) -> None:
    """Raise the httpx error for ``exc`` (``_translated``), from ``exc``; return when there is none (the caller
    re-raises ``exc``). The raised error's traceback holds this frame, so no local of it keeps the error: that would
    make a reference cycle of each failure, left for CPython's cycle collector."""
    error = _translated(exc, stage)
    if error is None:
        return
    try:
        raise error from exc
    finally:
        del error


@contextlib.contextmanager
def _as_httpx(stage: str) -> Iterator[None]:
    """aiohttp's errors raised inside as the httpx errors httpcore raises for the same failure (``_translated``);
    other exceptions pass unchanged. ``stage`` is ``send`` or ``read``."""
    try:
        yield
    except Exception as exc:
        _raise_translated(exc, stage)
        raise


class _Request(aiohttp.ClientRequest):
    """aiohttp's request, sending what httpx's would:

    - no ``Content-Length: 0`` the caller did not give: aiohttp adds one to every request without a body whose
      method is not ``GET``, ``HEAD``, ``OPTIONS``, ``TRACE`` or ``CONNECT`` (a ``DELETE``, say), where httpx sends
      none (RFC 9110 section 8.6: a request without content need not say so);
    - the body at once after the head, whatever ``Expect: 100-continue`` the client sent (forwarded as any header):
      aiohttp would hold the body until the upstream answers ``100 Continue``, which many never send, where httpx
      does not wait (RFC 9110 section 10.1.1 lets a client not wait).
    """

    def update_body_from_data(self, body: Any, _stacklevel: int = 3) -> None:
        given = hdrs.CONTENT_LENGTH in self.headers
        super().update_body_from_data(body, _stacklevel + 1)
        if body is None and not given:
            self.headers.popall(hdrs.CONTENT_LENGTH, None)

    def update_expect_continue(self, expect: bool = False) -> None:
        """Wait for no ``100 Continue``."""


_CONNECT_KEYWORDS = frozenset(("ssl", "server_hostname", "ssl_shutdown_timeout"))
"""The keywords aiohttp 3.14 hands its connect step for ``create_connection``; a call with any other (a later
aiohttp's) takes aiohttp's own step."""


class _Connector(aiohttp.TCPConnector):
    """aiohttp's connector, but a new connection to an upstream with one address (an IP address, or a name that
    resolves to one) is opened by the event loop's own ``create_connection(host=..., port=...)``.

    aiohttp opens every connection through ``aiohappyeyeballs``: a socket made in Python, then the loop's
    ``sock_connect``. On uvloop, ``sock_connect`` hands even an IP address to ``getaddrinfo`` on libuv's pool of
    four threads (it asks with no socket type, which uvloop's shortcut for numeric addresses does not take), so each
    new connection waited for a thread and the loop's wake-up, and a burst of new streams queued on those four
    threads. ``create_connection`` with the address takes uvloop's shortcut (and asyncio's, ``_ipaddr_info``) and
    connects in the loop. What the connection is, how long its connect may take (``sock_connect``, rounded as
    aiohttp rounds it) and the errors it raises are aiohttp's, in the same order as its own method (on uvloop the
    operating system's message of a refused connection reads ``Connection refused`` where ``sock_connect``'s read
    ``Connect call failed (address)``; aiohttp's message names the host and port either way). While more than one
    address is left to try, aiohttp's happy eyeballs (RFC 8305) connects; the sidecar sets no local address or
    socket factory, which only that path would use.
    """

    async def _wrap_create_connection(
        self,
        *args: Any,
        addr_infos: list[Any],
        req: aiohttp.ClientRequest,
        timeout: aiohttp.ClientTimeout,
        client_error: type[Exception] = aiohttp.ClientConnectorError,
        **kwargs: Any,
    ) -> tuple[asyncio.Transport, ResponseHandler]:
        if len(addr_infos) != 1 or len(args) != 1 or not kwargs.keys() <= _CONNECT_KEYWORDS:
            return await super()._wrap_create_connection(
                *args, addr_infos=addr_infos, req=req, timeout=timeout, client_error=client_error, **kwargs
            )
        family, _, proto, _, address = addr_infos[0]
        factory: Callable[[], ResponseHandler] = args[0]
        try:
            async with ceil_timeout(timeout.sock_connect, ceil_threshold=timeout.ceil_threshold):
                return await self._loop.create_connection(
                    factory, address[0], address[1], family=family, proto=proto, **kwargs
                )
        except cert_errors as exc:
            raise aiohttp.ClientConnectorCertificateError(req.connection_key, exc) from exc
        except ssl_errors as exc:
            raise aiohttp.ClientConnectorSSLError(req.connection_key, exc) from exc
        except OSError as exc:
            if exc.errno is None and isinstance(exc, asyncio.TimeoutError):
                raise
            raise client_error(req.connection_key, exc) from exc


class _Body(httpx.AsyncByteStream):
    """An aiohttp response's body as httpx reads it: each piece as it arrives (nothing held back for a fuller
    read), errors as httpx's (``_translated``). Closing it returns the connection to the pool when the body was
    read to its end, and closes the connection otherwise (aiohttp's ``release``).

    It is its own iterator, each step one ``readany`` of aiohttp's stream reader: no generator stands between the
    upstream's bytes and httpx for each piece a stream brings."""

    __slots__ = ("_content", "_response")

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self._content = response.content

    def __aiter__(self) -> _Body:
        return self

    async def __anext__(self) -> bytes:
        try:
            chunk = await self._content.readany()
        except Exception as exc:
            _raise_translated(exc, "read")
            raise
        if not chunk:
            raise StopAsyncIteration
        return chunk

    async def aclose(self) -> None:
        self._response.release()


class _Target(NamedTuple):
    """An upstream URL as ``AiohttpTransport`` sends to it (``AiohttpTransport._url``): yarl's URL, without
    credentials; the ``Host`` header's value (``httpx.URL.netloc``, ``b""`` without a host); whether the URL held
    credentials; whether aiohttp refuses its host (``refused_host``), so that it goes through httpcore."""

    url: URL
    host: bytes
    credentials: bool
    refused: bool


def refused_host(host: str | None) -> bool:
    """Whether aiohttp refuses to connect to ``host`` (yarl's ``raw_host``), where httpcore connects: a host of
    digits and dots, which the C library's resolver reads as an IPv4 address, that is not four decimal numbers up to
    255 without leading zeros (``127.1``, ``127.0.1``, ``2130706433``, ``017700000001``; aiohttp 3.14's "not a
    canonical IPv4 address", its ``connector.TCPConnector._resolve_host``). A hexadecimal form (``0x7f.1``) is a
    name to aiohttp, which its resolver looks up as httpcore's does."""
    if not host or not host.replace(".", "").isdigit():  # (an IPv6 address holds a ``:``)
        return False
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        return True
    return False


def spelled_apart(raw: list[tuple[bytes, bytes]]) -> bool:
    """Whether two of the header names in ``raw`` (name and value pairs) differ in case alone (``X-A`` and
    ``x-a``): aiohttp 3.14 sends only the last value of such names (``ClientSession._prepare_headers`` sets each new
    spelling, which replaces the others), where httpcore sends every pair as it came. Names repeated in one spelling
    are sent whole by both."""
    lowered = {name.lower() for name, _ in raw}
    return len(lowered) != len(raw) and len({name for name, _ in raw}) != len(lowered)


class AiohttpTransport(httpx.AsyncBaseTransport):
    """An ``httpx.AsyncBaseTransport`` on one ``aiohttp.ClientSession`` (HTTP/1.1, certificates verified with
    httpx's default context, no proxy or ``.netrc`` from the environment, no cookies kept, bodies not decoded: httpx
    and ``upstream.decoded_body`` decode them as with the default transport).

    The TLS context (``httpx.create_ssl_context``: loading the certificate store takes a few hundred
    milliseconds) is built when the transport is made, as httpx's own transport builds it, so that the sidecar
    builds it at start-up rather than in its first request; the session is opened on the first request, in the
    running event loop, and closed by ``aclose``.

    Args:
        limits: ``max_connections`` (``None``: no cap) and ``keepalive_expiry`` (seconds an idle connection is
            kept); aiohttp keeps every idle connection up to that expiry, so ``max_keepalive_connections`` has no
            counterpart.

    Timeouts come from each request's ``timeout`` extension, as httpx sets it (seconds): ``connect`` bounds opening
    a connection, ``pool`` plus ``connect`` the wait for a connection and its opening together, ``read`` each wait
    for the upstream's next bytes once the request is written. aiohttp times no write, so writing the request and
    waiting for the answer's head are bounded together by ``write`` plus ``read`` (``httpx.WriteTimeout`` past
    it).

    A request with a header value that is not UTF-8 (Latin-1 text, say) goes through the default transport
    (``upstream.PooledTransport``) instead: aiohttp writes header values as UTF-8 and could not send those bytes
    as they came. So does a request with two header names that differ in case alone (``spelled_apart``: aiohttp
    would send only the last one's value), one to a host aiohttp refuses and httpcore connects to (``refused_host``:
    an IPv4 address in digits and dots other than four numbers, ``127.1``), and one to a URL yarl refuses. An
    unasked ``101 Switching Protocols`` is an ``httpx.RemoteProtocolError``, as httpcore raises.
    """

    def __init__(self, limits: httpx.Limits) -> None:
        self._limits = limits
        self._ssl = httpx.create_ssl_context(trust_env=False)
        self._session: aiohttp.ClientSession | None = None
        self._httpcore: httpx.AsyncBaseTransport | None = None
        self._timeouts: dict[tuple[float | None, ...], tuple[aiohttp.ClientTimeout, float | None]] = {}
        self._urls: dict[int, tuple[object, _Target]] = {}

    def _open(self) -> aiohttp.ClientSession:
        limits = self._limits
        connector = _Connector(
            limit=limits.max_connections or 0,
            limit_per_host=0,
            keepalive_timeout=limits.keepalive_expiry if limits.keepalive_expiry is not None else 5.0,
            ssl=self._ssl,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            request_class=_Request,
            skip_auto_headers=SKIPPED_AUTO_HEADERS,
            cookie_jar=aiohttp.DummyCookieJar(),
            auto_decompress=False,
            trust_env=False,
            timeout=aiohttp.ClientTimeout(total=None),
            max_line_size=MAX_HEADER_BYTES,
            max_field_size=MAX_HEADER_BYTES,
            max_headers=MAX_HEADER_COUNT,
        )
        # The sidecar sends a request again itself after a connection closed before a whole answer head
        # (``upstream.ClosedBeforeAnswer``); aiohttp would first do so on its own for GET, PUT, DELETE and the like.
        self._session._retry_connection = False
        return self._session

    def _url(self, url: httpx.URL) -> _Target:
        """``url`` as aiohttp is to send it: as given, no re-quoting, and without credentials (httpx has turned them
        into the ``Authorization`` header), with its ``Host`` value and whether it held credentials. The last
        conversions of URLs up to ``URL_KEPT_BYTES`` long are kept by the parsed URL that an ``httpx.URL`` holds,
        which every ``httpx.URL`` made from another shares (an ``httpx.Request`` copies the URL it is given) and which
        ``upstream.target_url`` keeps per path: the text of an ``httpx.URL`` and yarl's parse of it cost about 16 k
        instructions a request, its ``Host`` value about 8 k. An entry holds that parsed URL, so no other object can
        take its ``id`` while it is kept. The parsed URL is httpx's own attribute (``_uri_reference``); were it gone,
        the ``httpx.URL`` itself would be the key, and a copy a miss."""
        parsed: object = getattr(url, "_uri_reference", url)
        kept = self._urls.get(id(parsed))
        if kept is not None and kept[0] is parsed:
            return kept[1]
        text = str(url)
        out = URL(text, encoded=True)
        credentials = out.raw_user is not None or out.raw_password is not None
        if credentials:
            out = out.with_user(None)
        target = _Target(out, host_header(url), credentials, refused_host(out.raw_host))
        if len(text) <= URL_KEPT_BYTES:
            if len(self._urls) >= URL_KEPT:
                self._urls.clear()
            self._urls[id(parsed)] = (parsed, target)
        return target

    def _timeout(self, given: dict[str, float | None]) -> tuple[aiohttp.ClientTimeout, float | None]:
        """The aiohttp timeout for a request's httpx ``timeout`` extension ``given`` (``httpx.Timeout.as_dict()``,
        seconds), and the seconds that bound writing the request and waiting for the answer's head together
        (``write`` plus ``read``; ``None``: no bound). One pair per distinct set of timeouts."""
        key = (given.get("connect"), given.get("read"), given.get("pool"), given.get("write"))
        timeouts = self._timeouts.get(key)
        if timeouts is None:
            connect, read, pool, write = key
            # aiohttp's connect bounds the wait for a pooled connection and opening a new one together
            waited = pool + connect if pool is not None and connect is not None else None
            bound = write + read if write is not None and read is not None else None
            timeout = aiohttp.ClientTimeout(total=None, connect=waited, sock_connect=connect, sock_read=read)
            timeouts = self._timeouts[key] = (timeout, bound)
        return timeouts

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` and return the response with its body still to be read.

        Raises:
            httpx.TransportError: as ``_as_httpx`` maps aiohttp's errors.
        """
        headers: CIMultiDict[str] = CIMultiDict()
        data: bytes | httpx.AsyncByteStream | None
        whole = isinstance(request.stream, httpx.ByteStream)  # a body given as bytes, which httpx has read
        if whole:
            data = request.content or None
        else:
            assert isinstance(request.stream, httpx.AsyncByteStream)  # an async client's body of unknown length
            data = request.stream
        raw = request.headers.raw
        target: _Target | None
        try:
            target = self._url(request.url)  # ValueError: a URL yarl refuses
            for name, value in raw:
                if not whole and name.lower() == b"transfer-encoding":
                    continue  # a body of unknown length: aiohttp writes the chunked framing and this header itself
                # aiohttp writes them as UTF-8: bytes that are not (Latin-1 text, say) raise UnicodeDecodeError
                headers.add(name.decode(), value.decode())
        except ValueError:
            target = None
        # a URL or host aiohttp refuses, or headers it would not send as they came: httpcore sends them
        if target is None or target.refused or spelled_apart(raw):
            return await self._fallback().handle_async_request(request)
        timeout = request.extensions.get("timeout", {})
        response = await self._send(request.method, target.url, headers, data, timeout)
        response.request = request
        return response

    async def send_whole(
        self,
        method: str,
        url: httpx.URL,
        headers: list[tuple[bytes, bytes]],
        content: bytes,
        timeout: dict[str, float | None],
    ) -> httpx.Response:
        """What ``handle_async_request(upstream.upstream_request(method, url, headers, content, timeout))`` sends
        and returns, for a whole body, without the ``httpx.Request`` in between: the same header pairs in the same
        order (``upstream.whole_headers``), the same body, the same timeouts, errors and fallback. Building that
        request and reading its headers back cost about 9 % of the sidecar's instructions for a buffered
        request (``docs/performance.md``, "No request object in between"). An answer sent this way has no
        ``request``.

        Args:
            method: the HTTP method, in any case.
            url: the upstream URL (``upstream.target_url``).
            headers: raw header pairs, names as the client wrote them, each name in one spelling: the sidecar's come
                from the ASGI server, in lower case. Two names that differ in case alone (``spelled_apart``), which
                ``handle_async_request`` sends through httpcore, are not looked for here (the check costs about 1 %
                of a request): aiohttp would send only the last one's value.
            content: the whole body.
            timeout: ``httpx.Timeout.as_dict()`` of the upstream timeouts (seconds).

        Raises:
            httpx.TransportError: as ``_as_httpx`` maps aiohttp's errors.
        """
        sent = self._whole(method, url, headers, content)
        if sent is None:
            return await self.handle_async_request(upstream_request(method, url, headers, content, timeout))
        target, fields = sent
        return await self._send(method.upper(), target, fields, content or None, timeout)

    def _whole(
        self, method: str, url: httpx.URL, headers: list[tuple[bytes, bytes]], content: bytes
    ) -> tuple[URL, list[tuple[str, str]]] | None:
        """The URL and the header pairs, decoded, that ``send_whole`` gives aiohttp; ``None`` where the
        ``httpx.Request`` decides what is sent: credentials in the URL, a caller's framing header
        (``upstream.whole_headers``); and where ``handle_async_request``'s fallback, httpcore, sends it: a URL yarl
        refuses, a host aiohttp refuses, a header that is not UTF-8."""
        try:
            target = self._url(url)
        except ValueError:
            return None
        raw = None if target.credentials or target.refused else whole_headers(method, target.host, headers, content)
        if raw is None:
            return None
        try:
            return target.url, [(name.decode(), value.decode()) for name, value in raw]
        except UnicodeDecodeError:
            return None

    async def _send(
        self,
        method: str,
        url: URL,
        headers: CIMultiDict[str] | list[tuple[str, str]],
        data: bytes | httpx.AsyncByteStream | None,
        given: dict[str, float | None],
    ) -> httpx.Response:
        """Send one request through the session, under the timeouts ``given`` (``httpx.Timeout.as_dict()``); the
        answer as httpx's, its body still to be read."""
        timeout, limit = self._timeout(given)
        session = self._session or self._open()
        with _as_httpx("send"):
            # aiohttp times neither a write nor the wait for the head while the body is still being written:
            # both together are bounded by the write and read timeouts summed (a read timeout alone bounds the
            # wait once the body is written).
            try:
                async with asyncio.timeout(limit) as bound:
                    response = await session.request(
                        method,
                        url,
                        headers=headers,
                        data=data,
                        allow_redirects=False,
                        compress=False,
                        timeout=timeout,
                    )
            except TimeoutError:
                if bound.expired():
                    raise httpx.WriteTimeout("the upstream did not take the request in time") from None
                raise
        if response.status == 101:  # no request asks to switch protocols (Upgrade is hop-by-hop, never sent)
            response.close()
            raise httpx.RemoteProtocolError("the upstream switched protocols unasked (101)")
        reason = (response.reason or "").encode("utf-8", "surrogateescape")
        return httpx.Response(
            response.status,
            headers=list(response.raw_headers),
            stream=_Body(response),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": reason},
        )

    def _fallback(self) -> httpx.AsyncBaseTransport:
        """The default transport (``upstream.PooledTransport``, same limits), for a request whose headers aiohttp
        cannot send as they came, or to a URL or host it refuses; opened on first use."""
        if self._httpcore is None:
            self._httpcore = PooledTransport(self._limits)
        return self._httpcore

    async def aclose(self) -> None:
        """Close the session and its connections (and the fallback transport's)."""
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()
        if self._httpcore is not None:
            fallback, self._httpcore = self._httpcore, None
            await fallback.aclose()
