"""The event loop ``numi-mw serve`` runs on (``numi_mw.serve_loop``): uvloop, with every pending connection accepted
in one go, where libuv accepts one each time the loop polls (libuv's "unix: don't accept() connections in a
loop"). Real sockets on 127.0.0.1; every wait is bounded."""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

import pytest

from numi_mw import serve_loop
from numi_mw.serve_loop import GreedyServer, new_event_loop

uvloop = pytest.importorskip("uvloop", reason="uvloop is not installed (it comes with uvicorn[standard])")


class _Echo(asyncio.Protocol):
    """Answers each read with the same bytes, and records that it was made."""

    made: ClassVar[list[_Echo]] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: Any = transport  # uvloop's TCPTransport, not a subclass of asyncio.Transport
        _Echo.made.append(self)

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)


class _FailsOnce:
    """A listening socket whose first ``accept`` raises ``error``; then the real one's."""

    def __init__(self, real: socket.socket, error: OSError) -> None:
        self.real = real
        self.error = error
        self.failed = False

    def fileno(self) -> int:
        return self.real.fileno()

    def accept(self) -> Any:
        if not self.failed:
            self.failed = True
            raise self.error
        return self.real.accept()


def _run(scenario: Callable[[asyncio.AbstractEventLoop], Awaitable[None]]) -> None:
    loop = new_event_loop()
    try:
        loop.run_until_complete(asyncio.wait_for(scenario(loop), 20))
    finally:
        loop.close()


def test_the_loop_is_uvloop_and_a_plain_server_accepts_greedily() -> None:
    async def scenario(loop: asyncio.AbstractEventLoop) -> None:
        assert isinstance(loop, uvloop.Loop)
        server = await loop.create_server(_Echo, "127.0.0.1", 0, backlog=64)
        try:
            assert isinstance(server, GreedyServer)
            assert server.is_serving()
            assert server.get_loop() is loop
            assert [sock.getsockname()[0] for sock in server.sockets] == ["127.0.0.1"]
        finally:
            server.close()
            await server.wait_closed()
        assert not server.is_serving()

    _run(scenario)


def test_one_reader_call_accepts_every_pending_connection() -> None:
    """Twelve connections wait in the listen queue; one call of the reader takes all twelve (libuv's own server
    would take one), and each then answers as a connection of uvloop's own server does."""
    _Echo.made = []

    async def scenario(loop: asyncio.AbstractEventLoop) -> None:
        server = await loop.create_server(_Echo, "127.0.0.1", 0, backlog=64, start_serving=False)
        assert isinstance(server, GreedyServer) and not server.is_serving()
        port = server.sockets[0].getsockname()[1]
        await server.start_serving()
        listener = server._listeners[0]
        loop.remove_reader(listener.fileno())  # the test calls the reader itself, once
        clients = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(12)]
        try:
            server._accept(listener)
            with pytest.raises(BlockingIOError):  # nothing is left pending
                listener.accept()
            assert len(server._connecting) == 12
            await asyncio.gather(*server._connecting)
            assert len(_Echo.made) == 12
            for number, client in enumerate(clients):
                client.setblocking(False)
                await loop.sock_sendall(client, b"ping %d" % number)
                assert await loop.sock_recv(client, 100) == b"ping %d" % number
        finally:
            for client in clients:
                client.close()
            server.close()
            await server.wait_closed()

    _run(scenario)


def test_a_reader_call_accepts_at_most_the_backlog() -> None:
    _Echo.made = []

    async def scenario(loop: asyncio.AbstractEventLoop) -> None:
        server = await loop.create_server(_Echo, "127.0.0.1", 0, backlog=2)
        assert isinstance(server, GreedyServer)
        listener = server._listeners[0]
        loop.remove_reader(listener.fileno())
        port = server.sockets[0].getsockname()[1]
        # Linux queues one connection more than the backlog
        clients = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(3)]
        try:
            server._accept(listener)
            assert len(server._connecting) == 2
            server._accept(listener)
            assert len(server._connecting) == 3
        finally:
            await asyncio.gather(*server._connecting)
            for client in clients:
                client.close()
            server.close()

    _run(scenario)


def test_close_stops_accepting_and_leaves_open_connections() -> None:
    async def scenario(loop: asyncio.AbstractEventLoop) -> None:
        server = await loop.create_server(_Echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"before")
        assert await reader.readexactly(6) == b"before"
        server.close()
        await server.wait_closed()
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"after")  # the connection accepted before the close still answers
        assert await reader.readexactly(5) == b"after"
        writer.close()

    _run(scenario)


def test_out_of_file_descriptors_pauses_accepting_and_says_why(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As asyncio's server: ``EMFILE`` from ``accept`` stops the reader for ``ACCEPT_RETRY_SECONDS``, with an
    error logged; then it watches the socket again, and the connection that waited is taken."""
    monkeypatch.setattr(serve_loop, "ACCEPT_RETRY_SECONDS", 0.3)
    _Echo.made = []

    async def scenario(loop: asyncio.AbstractEventLoop) -> None:
        server = await loop.create_server(_Echo, "127.0.0.1", 0)
        assert isinstance(server, GreedyServer)
        real = server._listeners[0]
        exhausted = _FailsOnce(real, OSError(errno.EMFILE, "Too many open files"))
        server._listeners[0] = exhausted  # type: ignore[call-overload]
        loop.add_reader(real.fileno(), server._accept, exhausted)  # type: ignore[arg-type]
        port = server.sockets[0].getsockname()[1]
        with caplog.at_level(logging.ERROR, logger="numi_mw.serve"):
            client = socket.create_connection(("127.0.0.1", port), timeout=5)
            for _ in range(100):
                if exhausted.failed:
                    break
                await asyncio.sleep(0.01)
        assert [record.getMessage() for record in caplog.records] == [
            "cannot accept connections ([Errno 24] Too many open files); trying again in 0.3 seconds"
        ]
        try:
            await asyncio.sleep(0.1)
            assert _Echo.made == []  # not watched while it waits
            for _ in range(100):
                if _Echo.made:
                    break
                await asyncio.sleep(0.05)
            assert len(_Echo.made) == 1  # watched again: the waiting connection was taken
        finally:
            client.close()
            server._listeners[0] = real
            server.close()

    _run(scenario)


def test_another_accept_error_is_raised() -> None:
    class _Broken:
        def fileno(self) -> int:
            return -1

        def accept(self) -> Any:
            raise OSError(errno.EINVAL, "Invalid argument")

    async def scenario(loop: asyncio.AbstractEventLoop) -> None:
        server = await loop.create_server(_Echo, "127.0.0.1", 0)
        assert isinstance(server, GreedyServer)
        with pytest.raises(OSError) as raised:
            server._accept(_Broken())  # type: ignore[arg-type]
        assert raised.value.errno == errno.EINVAL
        server.close()

    _run(scenario)


def test_a_tls_server_is_uvloops_own() -> None:
    async def scenario(loop: asyncio.AbstractEventLoop) -> None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server = await loop.create_server(_Echo, "127.0.0.1", 0, ssl=context)
        assert not isinstance(server, GreedyServer)
        server.close()

    _run(scenario)


def test_serve_forever_serves_until_cancelled_then_closes() -> None:
    async def scenario(loop: asyncio.AbstractEventLoop) -> None:
        server = await loop.create_server(_Echo, "127.0.0.1", 0, start_serving=False)
        port = server.sockets[0].getsockname()[1]
        serving = asyncio.ensure_future(server.serve_forever())
        await asyncio.sleep(0)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"x")
        assert await reader.readexactly(1) == b"x"
        serving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await serving
        assert not server.is_serving()
        writer.close()

    _run(scenario)


def test_a_backlog_of_zero_still_accepts() -> None:
    """Linux takes a listen backlog of 0 as one pending connection; a reader call then accepts one, where one that
    accepted none would be called again at once, forever."""
    _Echo.made = []

    async def scenario(loop: asyncio.AbstractEventLoop) -> None:
        server = await loop.create_server(_Echo, "127.0.0.1", 0, backlog=0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"zero")
        assert await reader.readexactly(4) == b"zero"
        assert len(_Echo.made) == 1
        writer.close()
        server.close()

    _run(scenario)


def test_a_connection_reset_before_it_is_taken_does_not_stop_the_others() -> None:
    _Echo.made = []

    async def scenario(loop: asyncio.AbstractEventLoop) -> None:
        server = await loop.create_server(_Echo, "127.0.0.1", 0)
        assert isinstance(server, GreedyServer)
        real = server._listeners[0]
        loop.remove_reader(real.fileno())
        port = server.sockets[0].getsockname()[1]
        clients = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(2)]
        try:
            aborted = _FailsOnce(real, ConnectionAbortedError(errno.ECONNABORTED, "Software caused connection abort"))
            server._accept(aborted)  # type: ignore[arg-type]
            assert aborted.failed
            assert len(server._connecting) == 2
            await asyncio.gather(*server._connecting)
            assert len(_Echo.made) == 2
        finally:
            for client in clients:
                client.close()
            server.close()

    _run(scenario)


def test_a_connection_that_cannot_start_goes_to_the_loops_exception_handler() -> None:
    class _Refused(Exception):
        pass

    def refusing_factory() -> asyncio.Protocol:
        raise _Refused("no protocol")

    async def scenario(loop: asyncio.AbstractEventLoop) -> None:
        handled: list[dict[str, Any]] = []
        loop.set_exception_handler(lambda _loop, context: handled.append(context))
        server = await loop.create_server(refusing_factory, "127.0.0.1", 0)
        assert isinstance(server, GreedyServer)
        port = server.sockets[0].getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port), timeout=5)
        try:
            for _ in range(200):
                if handled:
                    break
                await asyncio.sleep(0.01)
            assert [context["message"] for context in handled] == [
                "a connection accepted by numi_mw.serve_loop could not start"
            ]
            assert isinstance(handled[0]["exception"], _Refused)
            assert server._connecting == set()
        finally:
            client.close()
            server.close()

    _run(scenario)


def test_serve_forever_refuses_a_closed_server_and_a_second_caller_and_ends_at_close() -> None:
    async def scenario(loop: asyncio.AbstractEventLoop) -> None:
        server = await loop.create_server(_Echo, "127.0.0.1", 0, start_serving=False)
        serving = asyncio.ensure_future(server.serve_forever())
        await asyncio.sleep(0)
        with pytest.raises(RuntimeError, match="already being awaited on serve_forever"):
            await server.serve_forever()
        server.close()  # ends the first serve_forever, as asyncio's close does
        with pytest.raises(asyncio.CancelledError):
            await serving
        with pytest.raises(RuntimeError, match="is closed"):
            await server.serve_forever()
        await server.start_serving()  # a closed server does not listen again
        assert not server.is_serving()

    _run(scenario)
