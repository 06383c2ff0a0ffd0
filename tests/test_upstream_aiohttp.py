"""The ``aiohttp`` upstream transport: aiohttp's failures as httpx's, connections reused and let go as httpcore's
are, and the option checked when it is given. What it sends and relays end to end runs in the e2e modules, once
per transport (the ``upstream_transport`` fixture)."""

from __future__ import annotations

import asyncio
import datetime
import gc
import importlib.metadata
import ipaddress
import ssl
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import httpx
import pytest
import uvloop
from aiohttp import helpers as aiohttp_helpers
from aiohttp.http_exceptions import HttpProcessingError
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from hypothesis import example, given, settings
from hypothesis import strategies as st
from yarl import URL

from numi_mw.cli import main
from numi_mw.proxy import create_app
from numi_mw.upstream import (
    ClosedBeforeAnswer,
    Outgoing,
    PooledTransport,
    check_upstream_transport,
    send_outgoing,
    send_upstream,
    upstream_request,
)
from numi_mw.upstream_aiohttp import (
    URL_KEPT,
    URL_KEPT_BYTES,
    AiohttpTransport,
    _as_httpx,
    refused_host,
    spelled_apart,
)
from tests.e2e_support import free_port

LIMITS = httpx.Limits(max_connections=None, max_keepalive_connections=100)


@pytest.mark.parametrize(
    ("stage", "error", "expected"),
    [
        ("send", aiohttp.ConnectionTimeoutError("connect"), httpx.ConnectTimeout),
        ("read", aiohttp.SocketTimeoutError("read"), httpx.ReadTimeout),
        ("send", aiohttp.ServerDisconnectedError(), ClosedBeforeAnswer),
        ("read", aiohttp.ServerDisconnectedError(), httpx.RemoteProtocolError),
        ("read", aiohttp.ClientPayloadError("Response payload is not completed"), httpx.RemoteProtocolError),
        (
            "send",
            HttpProcessingError(message="Content-Length can't be present with Transfer-Encoding"),
            httpx.RemoteProtocolError,
        ),
        ("send", aiohttp.ClientOSError(32, "Broken pipe"), httpx.WriteError),
        ("read", aiohttp.ClientOSError(104, "Connection reset by peer"), httpx.ReadError),
        ("read", aiohttp.ClientConnectionError("Connection closed"), httpx.ReadError),
    ],
)
def test_aiohttp_failures_are_the_httpx_errors_httpcore_raises(
    stage: str, error: Exception, expected: type[httpx.TransportError]
) -> None:
    with pytest.raises(httpx.TransportError) as raised, _as_httpx(stage):
        raise error
    assert type(raised.value) is expected
    assert raised.value.__cause__ is error


def test_a_translated_failure_is_freed_without_the_cycle_collector() -> None:
    collecting = gc.isenabled()
    gc.disable()  # only reference counting frees anything meanwhile
    try:
        try:
            with _as_httpx("read"):
                raise aiohttp.ClientPayloadError("Response payload is not completed")
        except httpx.RemoteProtocolError as exc:
            translated = weakref.ref(exc)
            original = weakref.ref(exc.__cause__)
        assert (translated(), original()) == (None, None)
    finally:
        if collecting:
            gc.enable()


async def test_an_upstream_that_refuses_the_connection_is_a_connect_error() -> None:
    async with httpx.AsyncClient(transport=AiohttpTransport(LIMITS)) as client:
        with pytest.raises(httpx.ConnectError):
            await client.get(f"http://127.0.0.1:{free_port()}/v1/models")


@asynccontextmanager
async def serving(handle: Callable[[anyio.abc.SocketStream], Awaitable[None]]) -> AsyncIterator[int]:
    """Serve each connection on a loopback port with ``handle`` for at most 10 seconds; yields the port."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    async with listener, anyio.create_task_group() as group:
        group.start_soon(listener.serve, handle)
        try:
            with anyio.fail_after(10):
                yield listener.extra(anyio.abc.SocketAttribute.local_port)
        finally:
            group.cancel_scope.cancel()


@asynccontextmanager
async def counting_server(body: bytes) -> AsyncIterator[tuple[str, list[int]]]:
    """A keep-alive HTTP/1.1 server on loopback answering every request with ``body``; yields its URL and a list
    that gains one entry per connection it accepted."""
    accepted: list[int] = []

    async def handle(stream: anyio.abc.SocketStream) -> None:
        accepted.append(1)
        async with stream:
            buffer = b""
            while True:
                try:
                    data = await stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    return
                buffer += data
                while b"\r\n\r\n" in buffer:
                    _, _, buffer = buffer.partition(b"\r\n\r\n")
                    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: %d\r\n\r\n" % len(body)
                    try:
                        await stream.send(head + body)
                    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                        return

    async with serving(handle) as port:
        yield f"http://127.0.0.1:{port}", accepted


async def test_a_body_read_to_its_end_leaves_its_connection_for_the_next_request() -> None:
    async with (
        counting_server(b"hello") as (url, accepted),
        httpx.AsyncClient(transport=AiohttpTransport(LIMITS)) as client,
    ):
        first = await client.get(f"{url}/a")
        second = await client.get(f"{url}/b")
    assert (first.content, second.content, len(accepted)) == (b"hello", b"hello", 1)


@asynccontextmanager
async def recording_server() -> AsyncIterator[tuple[int, list[bytes]]]:
    """A keep-alive HTTP/1.1 server on loopback that records each request as it came (its head and its
    ``content-length`` bytes of body) and answers ``{}``; yields its port and the list of requests."""
    received: list[bytes] = []

    async def handle(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            buffer = b""
            while True:
                while b"\r\n\r\n" not in buffer:
                    try:
                        buffer += await stream.receive()
                    except (anyio.EndOfStream, anyio.BrokenResourceError):
                        return
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                fields = dict(line.lower().split(b": ", 1) for line in head.split(b"\r\n")[1:])
                length = int(fields.get(b"content-length", b"0"))
                while len(buffer) < length:
                    buffer += await stream.receive()
                received.append(head + b"\r\n\r\n" + buffer[:length])
                buffer = buffer[length:]
                await stream.send(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}")

    async with serving(handle) as port:
        yield port, received


HEADERS = [(b"content-type", b"application/json"), (b"Authorization", b"Bearer sk-1"), (b"x-custom", b"a  b")]


@pytest.mark.parametrize(
    ("method", "url", "headers", "content", "expected"),
    [
        (
            "POST",
            "http://127.0.0.1:{port}/v1/chat/completions",
            HEADERS,
            b'{"a":1}',
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: keep-alive\r\n"
            b"content-type: application/json\r\nAuthorization: Bearer sk-1\r\nx-custom: a  b\r\n"
            b'Content-Length: 7\r\n\r\n{"a":1}',
        ),
        (  # an empty body that needs its length says so, first (httpx's order)
            "post",
            "http://localhost:{port}/v1/x?q=%20y",
            [],
            b"",
            b"POST /v1/x?q=%20y HTTP/1.1\r\nHost: localhost:{port}\r\nContent-Length: 0\r\nConnection: keep-alive\r\n\r\n",
        ),
        (
            "DELETE",
            "http://127.0.0.1:{port}/v1/files/a",
            [(b"accept-encoding", b"identity")],
            b"",
            b"DELETE /v1/files/a HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: keep-alive\r\n"
            b"accept-encoding: identity\r\n\r\n",
        ),
        (  # credentials in the URL: Basic authorization in the client's own header's place
            "POST",
            "http://user:pw@127.0.0.1:{port}/v1/chat/completions",
            HEADERS,
            b"{}",
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: keep-alive\r\n"
            b"content-type: application/json\r\nAuthorization: Basic dXNlcjpwdw==\r\nx-custom: a  b\r\n"
            b"Content-Length: 2\r\n\r\n{}",
        ),
        (  # a framing header given: httpx decides
            "POST",
            "http://127.0.0.1:{port}/v1/chat/completions",
            [(b"Content-Length", b"2")],
            b"{}",
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: keep-alive\r\n"
            b"Content-Length: 2\r\n\r\n{}",
        ),
        (  # a value that is not UTF-8: through httpcore, as it came
            "POST",
            "http://127.0.0.1:{port}/v1/chat/completions",
            [(b"x-name", b"caf\xe9")],
            b"{}",
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: keep-alive\r\n"
            b"x-name: caf\xe9\r\nContent-Length: 2\r\n\r\n{}",
        ),
        (  # an IPv4 address in a short form, which aiohttp refuses: through httpcore, its Host as written
            "POST",
            "http://127.1:{port}/v1/chat/completions",
            HEADERS,
            b"{}",
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.1:{port}\r\nConnection: keep-alive\r\n"
            b"content-type: application/json\r\nAuthorization: Bearer sk-1\r\nx-custom: a  b\r\n"
            b"Content-Length: 2\r\n\r\n{}",
        ),
        (  # the same address as one number
            "GET",
            "http://2130706433:{port}/v1/models",
            [],
            b"",
            b"GET /v1/models HTTP/1.1\r\nHost: 2130706433:{port}\r\nConnection: keep-alive\r\n\r\n",
        ),
        (  # one name repeated in one spelling: aiohttp sends each
            "POST",
            "http://127.0.0.1:{port}/v1/chat/completions",
            [(b"x-tag", b"a"), (b"x-tag", b"b")],
            b"{}",
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: keep-alive\r\n"
            b"x-tag: a\r\nx-tag: b\r\nContent-Length: 2\r\n\r\n{}",
        ),
    ],
    ids=[
        "post",
        "empty-post",
        "delete",
        "credentials",
        "framing",
        "latin-1",
        "short-ipv4",
        "integer-ipv4",
        "repeated",
    ],
)
async def test_a_whole_body_sent_without_a_request_object_is_the_request_httpx_sends(
    request: pytest.FixtureRequest,
    method: str,
    url: str,
    headers: list[tuple[bytes, bytes]],
    content: bytes,
    expected: bytes,
) -> None:
    """``send_whole`` (what the sidecar sends a whole body by) and ``handle_async_request`` of the
    ``upstream_request`` httpx would build, on aiohttp and on httpcore: the same bytes reach the upstream, and the
    same answer comes back."""
    timeout = httpx.Timeout(5.0).as_dict()
    async with recording_server() as (port, received):
        target = httpx.URL(url.format(port=port))
        answers = []
        async with AiohttpTransport(LIMITS) as aiohttp_transport, PooledTransport(LIMITS) as httpcore_transport:
            sent = await aiohttp_transport.send_whole(method, target, headers, content, timeout)
            case = request.node.callspec.id
            if case in ("post", "empty-post", "delete"):
                assert sent._request is None  # no request object made for it
            elif case in ("credentials", "framing"):
                assert sent._request is not None  # httpx made the request (Latin-1: httpcore's answer, without one)
            # the fallback to httpcore is opened for the bytes and the hosts aiohttp cannot send as they came
            fallback = ("latin-1", "short-ipv4", "integer-ipv4")
            assert (aiohttp_transport._httpcore is not None) == (case in fallback)
            answers.append(sent)
            for transport in (aiohttp_transport, httpcore_transport):
                answers.append(
                    await send_upstream(transport, upstream_request(method, target, headers, content, timeout))
                )
            for answer in answers:
                await answer.aread()
    assert received == [expected.replace(b"{port}", str(port).encode())] * 3
    assert [(a.status_code, a.headers.raw, a.content) for a in answers] == [
        (200, [(b"content-type", b"application/json"), (b"content-length", b"2")], b"{}")
    ] * 3


@pytest.mark.parametrize(
    ("host", "refused"),
    [
        ("127.1", True),
        ("2130706433", True),
        ("0177.0.0.1", True),
        ("127.0.0.01", True),
        ("256.0.0.1", True),
        ("1.2.3.4.5", True),
        ("127.0.0.1", False),
        ("0.0.0.0", False),
        ("::1", False),
        ("0x7f.1", False),
        ("localhost", False),
        ("", False),
        (None, False),
    ],
)
def test_the_hosts_aiohttp_refuses_to_connect_to_are_known_before_sending(host: str | None, refused: bool) -> None:
    assert refused_host(host) is refused


@settings(max_examples=300, deadline=None)
@given(st.text(st.sampled_from("0123456789.:x\u0661"), max_size=18))
@example("127.1")
@example("255.255.255.255")
def test_a_host_is_refused_here_where_aiohttp_refuses_it(host: str) -> None:
    """``refused_host`` against aiohttp's own test before it connects (``TCPConnector._resolve_host``)."""
    aiohttp_refuses = (
        aiohttp_helpers.is_ip_address(host) and ":" not in host and not aiohttp_helpers.is_canonical_ipv4_address(host)
    )
    assert refused_host(host) == aiohttp_refuses


async def test_one_header_name_spelled_two_ways_reaches_the_upstream_as_httpcore_sends_it() -> None:
    """aiohttp would send only the last value of ``X-Tag``, ``x-tag`` and ``X-TAG``: the request goes through httpcore,
    every pair as it came."""
    headers = [(b"X-Tag", b"a"), (b"x-tag", b"b"), (b"X-TAG", b"c")]
    timeout = httpx.Timeout(5.0).as_dict()
    async with recording_server() as (port, received):
        url = httpx.URL(f"http://127.0.0.1:{port}/v1/chat/completions")
        async with AiohttpTransport(LIMITS) as aiohttp_transport, PooledTransport(LIMITS) as httpcore_transport:
            for transport in (aiohttp_transport, httpcore_transport):
                answer = await send_upstream(transport, upstream_request("POST", url, headers, b"{}", timeout))
                assert (answer.status_code, await answer.aread()) == (200, b"{}")
            assert aiohttp_transport._httpcore is not None
    assert (
        received
        == [
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: keep-alive\r\n"
            b"X-Tag: a\r\nx-tag: b\r\nX-TAG: c\r\nContent-Length: 2\r\n\r\n{}" % port
        ]
        * 2
    )


async def test_a_url_yarl_refuses_goes_through_httpcore_and_fails_as_it_does() -> None:
    """``http://a\\b:9/v1``: httpx takes it, yarl does not; the aiohttp transport's fallback, httpcore, sends it, so a
    request to it fails as it does on ``--upstream-transport httpcore`` (no host by that name: ``ConnectError``),
    a body whose header is not UTF-8 too, where yarl's ``ValueError`` reached the sidecar as a 500."""
    url = httpx.URL("http://a\\b:9/v1/models")
    with pytest.raises(ValueError):
        URL(str(url), encoded=True)
    timeout = httpx.Timeout(5.0).as_dict()
    failures = []
    async with AiohttpTransport(LIMITS) as aiohttp_transport, PooledTransport(LIMITS) as httpcore_transport:
        for transport in (aiohttp_transport, httpcore_transport):
            for headers in ([], [(b"x-n", b"caf\xe9")]):
                with pytest.raises(httpx.ConnectError) as info:
                    await send_upstream(transport, upstream_request("GET", url, headers, b"", timeout))
                failures.append(type(info.value))
        with pytest.raises(httpx.ConnectError):  # the sidecar's own way: send_whole
            await send_outgoing(aiohttp_transport, Outgoing("GET", url, [], b"", timeout), aiohttp_transport.send_whole)
        assert aiohttp_transport._httpcore is not None
    assert failures == [httpx.ConnectError] * 4


@pytest.mark.parametrize(
    ("names", "apart"),
    [
        ([b"X-A", b"x-a"], True),
        ([b"a", b"b", b"A"], True),
        ([b"x-a", b"x-a"], False),
        ([b"Host", b"Connection", b"content-type", b"authorization"], False),
        ([], False),
    ],
)
def test_header_names_spelled_apart_are_known_before_sending(names: list[bytes], apart: bool) -> None:
    assert spelled_apart([(name, b"v") for name in names]) is apart


async def test_a_whole_body_goes_by_send_whole_and_a_streamed_one_as_a_request() -> None:
    """``send_outgoing`` hands a whole body (an empty one too) to the ``send_whole`` it is given, with the call's
    arguments, and returns its answer as it is; a body that streams, or any body without ``send_whole``, goes to
    the transport as an ``httpx.Request``."""
    calls: list[Any] = []
    answer = httpx.Response(201)

    async def send_whole(*args: Any) -> httpx.Response:
        calls.append(args)
        return answer

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(f"request {request.method}")
        return httpx.Response(200)

    async def body() -> AsyncIterator[bytes]:
        yield b"{}"

    url = httpx.URL("http://127.0.0.1:9/v1/files")
    transport = httpx.MockTransport(handler)
    headers = [(b"x-a", b"1")]
    timeout = {"connect": 1.0, "read": 2.0, "write": 3.0, "pool": 4.0}
    assert await send_outgoing(transport, Outgoing("POST", url, headers, b"{}", timeout), send_whole) is answer
    assert await send_outgoing(transport, Outgoing("GET", url, [], b"", timeout), send_whole) is answer
    await send_outgoing(transport, Outgoing("PUT", url, [], body(), {}), send_whole)
    await send_outgoing(transport, Outgoing("PATCH", url, [], b"{}", {}))
    assert calls == [
        ("POST", url, headers, b"{}", timeout),
        ("GET", url, [], b"", timeout),
        "request PUT",
        "request PATCH",
    ]


async def test_a_transport_given_to_the_sidecar_is_handed_every_request_as_an_httpx_request() -> None:
    """Only the transport the sidecar opens itself is sent whole bodies without an ``httpx.Request``: an
    ``AiohttpTransport`` subclass given to ``create_app`` gets each call through its ``handle_async_request``."""
    seen: list[str] = []

    class Marking(AiohttpTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            seen.append(request.method)
            request.headers["x-marked"] = "1"
            return await super().handle_async_request(request)

    async with recording_server() as (port, received):
        app = create_app(f"http://127.0.0.1:{port}/v1", provider="openrouter", transport=Marking(LIMITS))
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://sidecar") as client,
        ):
            chat = await client.post("/v1/chat/completions", json={"model": "m", "messages": []})
            models = await client.get("/v1/models")
    assert (chat.status_code, models.status_code, seen) == (200, 200, ["POST", "GET"])
    assert [request.split(b"\r\n")[0] for request in received] == [
        b"POST /v1/chat/completions HTTP/1.1",
        b"GET /v1/models HTTP/1.1",
    ]
    assert all(b"\r\nx-marked: 1\r\n" in request for request in received)


def test_an_upstream_url_is_converted_once_per_parsed_url_and_as_given(monkeypatch: pytest.MonkeyPatch) -> None:
    transport = AiohttpTransport(LIMITS)
    url = httpx.URL("http://user:pw@127.0.0.1:8000/v1/chat%2Fcompletions?a=%20b")
    texts: list[str] = []
    monkeypatch.setattr(httpx.URL, "__str__", lambda self: texts.append("str") or str(self._uri_reference))
    converted = transport._url(url)
    assert (str(converted.url), converted.host, converted.credentials) == (
        "http://127.0.0.1:8000/v1/chat%2Fcompletions?a=%20b",  # as given; credentials left out
        b"127.0.0.1:8000",
        True,
    )
    assert transport._url(url) == converted
    assert len(texts) == 1  # the second time, the kept conversion
    request = upstream_request("POST", url, [], b"{}", {})  # its URL is a copy of the one given
    assert (request.url is not url, transport._url(request.url), len(texts)) == (True, converted, 1)
    equal = httpx.URL("http://user:pw@127.0.0.1:8000/v1/chat%2Fcompletions?a=%20b")  # parsed anew: converted anew
    assert (transport._url(equal), len(texts)) == (converted, 2)


def test_the_converted_urls_kept_are_bounded_in_count_and_length() -> None:
    transport = AiohttpTransport(LIMITS)
    long = httpx.URL("http://127.0.0.1:8000/v1/" + "a" * URL_KEPT_BYTES)
    assert transport._url(long) == (URL(str(long), encoded=True), b"127.0.0.1:8000", False, False)
    assert transport._urls == {}  # too long to keep
    urls = [httpx.URL(f"http://127.0.0.1:8000/v1/{i}") for i in range(URL_KEPT + 1)]
    for url in urls:
        transport._url(url)
    assert len(transport._urls) == 1  # all let go when one more came
    assert transport._url(urls[-1]).url == URL(str(urls[-1]))


async def test_a_body_closed_before_its_end_closes_its_connection() -> None:
    async with (
        counting_server(b"x" * 1_000_000) as (url, accepted),
        httpx.AsyncClient(transport=AiohttpTransport(LIMITS)) as client,
    ):
        async with client.stream("GET", f"{url}/a") as response:
            first = await response.aiter_raw().__anext__()
        second = await client.get(f"{url}/b")
    assert (len(first) > 0, len(second.content), len(accepted)) == (True, 1_000_000, 2)


async def test_the_tls_context_is_built_when_the_transport_is_made_not_in_a_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built: list[bool] = []
    create = httpx.create_ssl_context

    def counted(**kwargs: object) -> object:
        built.append(True)
        return create(**kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(httpx, "create_ssl_context", counted)
    transport = AiohttpTransport(LIMITS)
    made = len(built)
    async with counting_server(b"hello") as (url, _), httpx.AsyncClient(transport=transport) as client:
        response = await client.get(f"{url}/a")
    assert (made, len(built), response.content) == (1, 1, b"hello")


class _CountingLoop(uvloop.Loop):  # type: ignore[misc]
    """uvloop's event loop, counting the lookups asked of it (``getaddrinfo``: each one a trip to libuv's thread
    pool) and the connections it opens to a given host."""

    def __init__(self) -> None:
        super().__init__()
        self.lookups: list[object] = []
        self.connects: list[object] = []

    async def getaddrinfo(self, host: object, port: object, **kwargs: Any) -> Any:
        self.lookups.append(host)
        return await super().getaddrinfo(host, port, **kwargs)

    async def create_connection(self, *args: Any, **kwargs: Any) -> Any:
        self.connects.append(args[1] if len(args) > 1 else kwargs.get("host"))
        return await super().create_connection(*args, **kwargs)


def test_a_new_connection_to_an_address_is_opened_by_the_event_loop_without_a_lookup() -> None:
    # aiohttp's own path (a socket, then uvloop's sock_connect) asked getaddrinfo on libuv's thread pool for
    # 127.0.0.1 on every new connection
    async def two_connections() -> tuple[bytes, int, _CountingLoop]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, _CountingLoop)
        async with counting_server(b"hello") as (url, accepted):
            loop.lookups.clear()  # the listener's own
            first = AiohttpTransport(LIMITS)
            second = AiohttpTransport(LIMITS)  # its own pool: a second new connection
            async with httpx.AsyncClient(transport=first) as a, httpx.AsyncClient(transport=second) as b:
                body = (await a.get(f"{url}/a")).content + (await b.get(f"{url}/b")).content
        return body, len(accepted), loop

    with asyncio.Runner(loop_factory=_CountingLoop) as runner:
        body, accepted, loop = runner.run(two_connections())
    assert (body, accepted, loop.lookups, loop.connects) == (b"hellohello", 2, [], ["127.0.0.1", "127.0.0.1"])


async def test_a_connect_that_does_not_finish_in_time_is_a_connect_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    loop = asyncio.get_running_loop()

    async def never(*args: object, **kwargs: object) -> None:
        await asyncio.sleep(60)

    monkeypatch.setattr(loop, "create_connection", never)
    monkeypatch.setattr(loop, "sock_connect", never)  # (aiohttp's own path for several addresses)
    timeout = httpx.Timeout(5.0, connect=0.05)
    async with httpx.AsyncClient(transport=AiohttpTransport(LIMITS), timeout=timeout) as client:
        with anyio.fail_after(5), pytest.raises(httpx.ConnectTimeout):
            await client.get(f"http://127.0.0.1:{free_port()}/v1/models")


def _self_signed() -> tuple[bytes, bytes]:
    """A certificate for 127.0.0.1 (as an IP address subject alternative name) signed by its own key, and that key,
    both in PEM."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "numi-mw test")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    pem = certificate.public_bytes(serialization.Encoding.PEM)
    secret = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return pem, secret


@asynccontextmanager
async def tls_server(body: bytes, tmp_path: Path) -> AsyncIterator[tuple[str, bytes]]:
    """A TLS server on loopback (a certificate for 127.0.0.1 no public authority signed) that answers one request
    on each connection with ``body``; yields its URL and the certificate."""
    pem, secret = _self_signed()
    (tmp_path / "cert.pem").write_bytes(pem)
    (tmp_path / "key.pem").write_bytes(secret)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % len(body) + body)
            await writer.drain()
        except (OSError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"https://127.0.0.1:{port}", pem


async def test_a_tls_upstream_is_verified_and_answers_through_the_new_connection(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    async with tls_server(b"secret hello", tmp_path) as (url, pem):
        async with httpx.AsyncClient(transport=AiohttpTransport(LIMITS)) as client:
            with anyio.fail_after(10), pytest.raises(httpx.ConnectError) as refused:
                await client.get(f"{url}/a")  # certifi's authorities never signed it
        create = httpx.create_ssl_context

        def trusting(**kwargs: Any) -> ssl.SSLContext:
            context = create(**kwargs)
            context.load_verify_locations(cadata=pem.decode())
            return context

        monkeypatch.setattr(httpx, "create_ssl_context", trusting)
        async with httpx.AsyncClient(transport=AiohttpTransport(LIMITS)) as client:
            with anyio.fail_after(10):
                answered = await client.get(f"{url}/a")
    assert "CERTIFICATE_VERIFY_FAILED" in str(refused.value)
    assert (answered.status_code, answered.content) == (200, b"secret hello")


@pytest.mark.parametrize(
    ("name", "transport", "message"),
    [
        ("urllib3", None, "upstream_transport must be one of httpcore, aiohttp, not 'urllib3'"),
        (1, None, "upstream_transport must be one of httpcore, aiohttp, not 1"),
        (
            "aiohttp",
            httpx.MockTransport(lambda request: httpx.Response(200)),
            "give either a transport or upstream_transport='aiohttp', not both",
        ),
    ],
)
def test_the_option_is_checked_when_it_is_given(name: object, transport: object, message: str) -> None:
    with pytest.raises(ValueError) as raised:
        check_upstream_transport(name, transport)
    assert str(raised.value) == message
    with pytest.raises(ValueError) as raised:
        create_app("http://127.0.0.1:9/v1", upstream_transport=name, transport=transport)  # type: ignore[arg-type]
    assert str(raised.value) == message


def test_aiohttp_is_the_default_and_a_given_transport_takes_its_place() -> None:
    from starlette.testclient import TestClient

    from numi_mw.upstream import DEFAULT_UPSTREAM_TRANSPORT, PooledTransport

    assert DEFAULT_UPSTREAM_TRANSPORT == "aiohttp"
    check_upstream_transport(None)
    mock = httpx.MockTransport(lambda request: httpx.Response(200))
    check_upstream_transport(None, mock)  # the given transport is used: no option to refuse
    for kwargs, kind in (
        ({}, AiohttpTransport),
        ({"upstream_transport": "httpcore"}, PooledTransport),
        ({"transport": mock}, httpx.MockTransport),
    ):
        app = create_app("http://127.0.0.1:9/v1", **kwargs)  # type: ignore[arg-type]
        with TestClient(app):
            assert type(app.state.sidecar.upstream) is kind


def test_aiohttp_missing_or_too_old_is_refused_with_the_install_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    assert main(["serve", "--upstream", "http://127.0.0.1:9/v1", "--upstream-transport", "aiohttp"]) == 2
    assert capsys.readouterr().err == (
        "numi-mw serve: --upstream-transport 'aiohttp' needs the aiohttp package, a dependency of numi_mw: "
        "pip install 'aiohttp>=3.14'\n"
    )
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "3.13.3")
    with pytest.raises(ValueError) as raised:
        check_upstream_transport("aiohttp")
    assert str(raised.value) == (
        "upstream_transport 'aiohttp' needs aiohttp 3.14 or newer, not 3.13.3: pip install 'aiohttp>=3.14'"
    )


def test_serve_offers_the_two_transports(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        main(["serve", "--upstream", "http://127.0.0.1:9/v1", "--upstream-transport", "urllib3"])
    assert raised.value.code == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith("numi-mw serve: error: argument --upstream-transport: invalid choice: 'urllib3'")
    assert last.index("httpcore") < last.index("aiohttp")  # the choices, in this order, however argparse quotes them


def test_timeouts_are_httpxs_as_aiohttp_counts_them() -> None:
    """The sidecar's ``Timeout(2, connect=10)``: 10 s to open a connection, 12 s to wait for one and open it
    (httpx's pool timeout plus its connect timeout), 2 s for each read; 4 s for writing the request and waiting for
    the answer's head together (write plus read)."""
    assert AiohttpTransport(LIMITS)._timeout(httpx.Timeout(2, connect=10).as_dict()) == (
        aiohttp.ClientTimeout(total=None, connect=12, sock_connect=10, sock_read=2),
        4,
    )
