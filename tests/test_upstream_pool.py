"""The sidecar's upstream connection pool (``numi_mw.upstream.UpstreamPool``) against a real loopback server: it
reuses idle connections, keeps at most ``max_keepalive_connections`` idle ones, and never sends a request on a
connection the server has closed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpcore
import httpx

from numi_mw.upstream import PooledTransport, UpstreamPool

ANSWER = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 2\r\n\r\nok"


@dataclass
class Server:
    """A keep-alive HTTP/1.1 server on 127.0.0.1 that counts the connections it accepts and holds each answer until
    ``release`` is set; with ``close_after`` it closes each connection after answering (without saying so)."""

    close_after: bool = False
    accepted: int = 0
    requests: int = 0
    release: asyncio.Event = field(default_factory=asyncio.Event)
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    port: int = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            while True:
                try:
                    await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    return
                self.requests += 1
                await self.release.wait()
                writer.write(ANSWER)
                await writer.drain()
                if self.close_after:
                    return
        finally:
            writer.close()
            await writer.wait_closed()
            self.closed.set()


@asynccontextmanager
async def serving(server: Server) -> AsyncIterator[Server]:
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    server.port = listener.sockets[0].getsockname()[1]
    try:
        yield server
    finally:
        listener.close()


async def get_all(client: httpx.AsyncClient, server: Server, count: int) -> list[bytes]:
    """Send ``count`` requests at once; the server answers once all of them have arrived (one connection each)."""
    server.release.clear()
    bodies: list[bytes] = [b""] * count

    async def get(i: int) -> None:
        response = await client.get(f"http://127.0.0.1:{server.port}/v1/models")
        bodies[i] = response.content

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            for i in range(count):
                group.start_soon(get, i)
            while server.requests < count:
                await anyio.sleep(0.001)
            server.requests = 0
            server.release.set()
    return bodies


def pool_of(client: httpx.AsyncClient) -> UpstreamPool:
    transport = client._transport
    assert isinstance(transport, PooledTransport)
    pool = transport._pool
    assert isinstance(pool, UpstreamPool)
    return pool


async def test_concurrent_requests_reuse_the_idle_connections() -> None:
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=100)
    async with serving(Server()) as server, httpx.AsyncClient(transport=PooledTransport(limits)) as client:
        assert await get_all(client, server, 8) == [b"ok"] * 8
        assert await get_all(client, server, 8) == [b"ok"] * 8
        assert server.accepted == 8
        assert len(pool_of(client).connections) == 8


async def test_idle_connections_past_the_keepalive_limit_are_closed() -> None:
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=2)
    async with serving(Server()) as server, httpx.AsyncClient(transport=PooledTransport(limits)) as client:
        assert await get_all(client, server, 5) == [b"ok"] * 5
        assert len(pool_of(client).connections) == 2
        assert await get_all(client, server, 5) == [b"ok"] * 5
        assert server.accepted == 8  # 2 kept, 3 new


async def test_a_connection_the_server_closed_is_not_used_again() -> None:
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=100)
    async with (
        serving(Server(close_after=True)) as server,
        httpx.AsyncClient(transport=PooledTransport(limits)) as client,
    ):
        assert await get_all(client, server, 1) == [b"ok"]
        with anyio.fail_after(10):
            await server.closed.wait()
        assert await get_all(client, server, 1) == [b"ok"]
        assert server.accepted == 2


async def test_a_capped_pool_waits_for_a_free_connection() -> None:
    limits = httpx.Limits(max_connections=2, max_keepalive_connections=2)
    async with serving(Server()) as server, httpx.AsyncClient(transport=PooledTransport(limits)) as client:
        server.release.set()
        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:
                for _ in range(6):
                    group.start_soon(client.get, f"http://127.0.0.1:{server.port}/v1/models")
        assert server.accepted == 2


async def test_connections_the_server_closed_are_dropped_when_a_request_goes_to_another_origin() -> None:
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=100)
    async with (
        serving(Server(close_after=True)) as closing,
        serving(Server()) as other,
        httpx.AsyncClient(transport=PooledTransport(limits)) as client,
    ):
        assert await get_all(client, closing, 4) == [b"ok"] * 4
        with anyio.fail_after(10):
            await closing.closed.wait()
            while not all(c.has_expired() for c in pool_of(client).connections):  # every close has arrived
                await anyio.sleep(0.01)
        assert await get_all(client, other, 1) == [b"ok"]
        assert len(pool_of(client).connections) == 1  # the one to the other origin


async def test_a_connection_idle_past_its_keepalive_expiry_is_closed_and_not_used_again() -> None:
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=100, keepalive_expiry=0.05)
    async with serving(Server()) as server, httpx.AsyncClient(transport=PooledTransport(limits)) as client:
        assert await get_all(client, server, 1) == [b"ok"]
        first = pool_of(client).connections[0]
        await anyio.sleep(0.2)
        assert await get_all(client, server, 1) == [b"ok"]
        assert server.accepted == 2
        assert first.is_closed()
        assert pool_of(client).connections != [first]


async def test_a_connection_without_a_socket_decides_its_expiry_itself_as_in_httpcore_pool() -> None:
    """On httpcore's mock network backend a stream has no socket: the pool asks the connection, as httpcore's own
    pool does, and two requests in turn take one connection (a socket of ``None`` would read as closed)."""
    opened: list[int] = []

    class Counting(httpcore.AsyncMockBackend):
        async def connect_tcp(self, *args: Any, **kwargs: Any) -> httpcore.AsyncNetworkStream:
            opened.append(1)
            return await super().connect_tcp(*args, **kwargs)

    answer = [b"HTTP/1.1 200 OK\r\n", b"Content-Length: 2\r\n\r\n", b"ok"]
    for pool_class in (httpcore.AsyncConnectionPool, UpstreamPool):
        opened.clear()
        async with pool_class(network_backend=Counting(answer * 2)) as pool:
            for _ in range(2):
                assert (await pool.request("GET", "http://example.test/")).content == b"ok"
        assert (pool_class.__name__, len(opened)) == (pool_class.__name__, 1)
