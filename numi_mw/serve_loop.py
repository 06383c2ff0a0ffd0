"""The event loop a one-process ``numi-mw serve`` runs on: uvloop, with every pending connection accepted at once.

libuv, uvloop's core, accepts one connection each time the loop polls for I/O (libuv 1.45 and later: "unix: don't
accept() connections in a loop", libuv pull request 3696). On a loop that is busy serving, one poll comes after
all the work that was ready, so a burst of new connections is taken one per round of work: with 64 connections
opened at once, the last one's first answer came 222-250 ms later, where no request took over 42 ms inside the
sidecar (``docs/performance.md``, "Accepting a burst of connections"). asyncio's own loop accepts up to the listen
backlog at once but costs more CPU per request. So the sidecar keeps uvloop and accepts as asyncio does: each
listening socket is watched by a reader of this module that accepts every pending connection (``socket.accept``
until ``EAGAIN``, at most the backlog) and hands each to uvloop (``loop.connect_accepted_socket``), whose transport
is of the kind its own server makes (TCP, ``TCP_NODELAY`` set), though counted by no server (``GreedyServer``).

Servers with TLS (``ssl=``) are uvloop's own, unchanged; without uvloop (Windows, PyPy) the loop is asyncio's,
which already accepts this way. ``numi-mw serve --workers N`` does not use it: its workers share one listening
socket, and one that took a whole burst would keep those connections while the others idle (``docs/sidecar.md``,
"The server").
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
from collections.abc import Callable
from typing import Any

ACCEPT_RETRY_SECONDS = 1.0
"""How long a listening socket is left alone after ``accept`` failed for want of resources (``EMFILE``,
``ENFILE``, ``ENOBUFS``, ``ENOMEM``): asyncio's own pause (``asyncio.constants.ACCEPT_RETRY_DELAY``)."""

_OUT_OF_RESOURCES = frozenset((errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM))

_log = logging.getLogger("numi_mw.serve")


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new event loop for ``numi-mw serve`` (uvicorn's ``loop`` setting, ``numi_mw.serve_loop:new_event_loop``):
    uvloop's, accepting every pending connection at once (``GreedyServer``), or asyncio's where uvloop is not
    installed."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover (uvloop comes with uvicorn[standard] where it builds)
        return asyncio.new_event_loop()

    class Loop(uvloop.Loop):
        async def create_server(  # type: ignore[override]
            self, protocol_factory: Callable[[], asyncio.BaseProtocol], *args: Any, **kwargs: Any
        ) -> asyncio.AbstractServer:
            if kwargs.get("ssl") is not None:
                return await super().create_server(protocol_factory, *args, **kwargs)
            start = kwargs.pop("start_serving", True)
            inner = await super().create_server(protocol_factory, *args, start_serving=False, **kwargs)
            server = GreedyServer(self, inner, protocol_factory, kwargs.get("backlog", 100))
            if start:
                await server.start_serving()
            return server

    return Loop()


UVICORN_LOOP = f"{__name__}:{new_event_loop.__name__}"
"""uvicorn's ``loop`` setting for ``new_event_loop`` (``numi_mw.serve_loop:new_event_loop``): what ``numi-mw serve``
with one process and the harness's relay floor run on (``uvicorn --loop``, ``uvicorn.Config(loop=...)``)."""


class GreedyServer(asyncio.AbstractServer):
    """uvloop's server ``inner``, bound and not listening, served by readers of this loop that accept every
    pending connection at once.

    Args:
        loop: the uvloop loop.
        inner: the server ``loop.create_server(..., start_serving=False)`` made: its sockets are bound, and it
            closes them.
        protocol_factory: what makes each connection's protocol.
        backlog: the listen backlog, and the most connections one reader call accepts (at least one).

    Unlike asyncio's and uvloop's servers, ``wait_closed`` does not wait for the connections accepted before
    ``close`` to end: their transports belong to no server (``connect_accepted_socket``). uvicorn waits for its
    connections itself.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        inner: asyncio.AbstractServer,
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        backlog: int,
    ) -> None:
        self._loop = loop
        self._inner = inner
        self._factory = protocol_factory
        self._backlog = backlog
        self._batch = max(backlog, 1)  # a reader call that accepted none would be called again at once, forever
        self._listeners: list[socket.socket] = []  # a duplicate of each of inner's sockets, while serving
        self._connecting: set[asyncio.Task[Any]] = set()
        self._closed = False
        self._forever: asyncio.Future[None] | None = None

    @property
    def sockets(self) -> tuple[Any, ...]:
        """The listening sockets (uvloop's); none once closed."""
        return tuple(self._inner.sockets)  # type: ignore[attr-defined]

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def is_serving(self) -> bool:
        return bool(self._listeners)

    async def start_serving(self) -> None:
        """Listen on each socket and accept from it (nothing when already serving or closed)."""
        if self._listeners or self._closed:
            return
        for inner in self.sockets:
            listener = socket.socket(fileno=os.dup(inner.fileno()))
            listener.setblocking(False)
            listener.listen(self._backlog)
            self._listeners.append(listener)
            self._loop.add_reader(listener.fileno(), self._accept, listener)

    def _accept(self, listener: socket.socket) -> None:
        for _ in range(self._batch):
            try:
                connection, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return  # nothing more is pending
            except ConnectionAbortedError:
                continue  # that one was reset before it was taken; others may be pending
            except OSError as exc:
                if exc.errno not in _OUT_OF_RESOURCES:
                    raise
                _log.error("cannot accept connections (%s); trying again in %s seconds", exc, ACCEPT_RETRY_SECONDS)
                self._loop.remove_reader(listener.fileno())
                self._loop.call_later(ACCEPT_RETRY_SECONDS, self._resume, listener)
                return
            connection.setblocking(False)
            task = self._loop.create_task(self._loop.connect_accepted_socket(self._factory, connection))
            self._connecting.add(task)
            task.add_done_callback(self._connected)

    def _connected(self, task: asyncio.Task[Any]) -> None:
        """A connection's start ended: a failure (the protocol factory raised, say) goes to the loop's exception
        handler, as a failure in uvloop's own server does."""
        self._connecting.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            self._loop.call_exception_handler(
                {"message": "a connection accepted by numi_mw.serve_loop could not start", "exception": error}
            )

    def _resume(self, listener: socket.socket) -> None:
        if listener in self._listeners:
            self._loop.add_reader(listener.fileno(), self._accept, listener)

    def close(self) -> None:
        """Stop accepting and close the listening sockets; open connections stay (as asyncio's ``close``)."""
        self._closed = True
        for listener in self._listeners:
            self._loop.remove_reader(listener.fileno())
            listener.close()
        self._listeners = []
        self._inner.close()
        if self._forever is not None and not self._forever.done():
            self._forever.cancel()

    async def wait_closed(self) -> None:
        """Wait until the listening sockets are closed (not for open connections, above)."""
        await self._inner.wait_closed()

    async def serve_forever(self) -> None:
        """Serve until cancelled or closed, then close (as asyncio's ``serve_forever``).

        Raises:
            RuntimeError: the server is closed, or already being awaited by another ``serve_forever``.
        """
        if self._closed:
            raise RuntimeError(f"{self!r} is closed")
        if self._forever is not None:
            raise RuntimeError(f"{self!r} is already being awaited on serve_forever()")
        await self.start_serving()
        self._forever = self._loop.create_future()
        try:
            await self._forever
        finally:
            self._forever = None
            self.close()
            await self.wait_closed()
