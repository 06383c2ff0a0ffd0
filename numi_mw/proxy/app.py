"""``create_app``: the sidecar's Starlette app with one shared upstream transport (``httpx.AsyncBaseTransport``).

The sidecar's ``/v1`` stands for the upstream base URL (which may carry a path, e.g.
``https://openrouter.ai/api/v1``): ``/v1/chat/completions`` reaches ``<base>/chat/completions``. Chat
completions requests are prepared by ``numi_mw.core.request`` and their successful responses go through the
rewriter ``numi_mw.core.response.choose_rewriter`` picks (SSE event by event, JSON bodies whole); every other
method and path, and upstream errors, are forwarded as is. Streams go back event by event as they arrive, never
buffered. ``docs/sidecar.md`` has the details.

Each request takes three steps: build the upstream request (``_Sidecar.outgoing``), send it under the one
mapping of httpx errors to API errors (``numi_mw.upstream.upstream_failure``), and answer
(``_Sidecar.answer``); once the client's body has been read, ``_ClientWatch`` ends all three the moment the client
leaves.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncIterator
from functools import partial
from typing import Any, NamedTuple

import anyio
import anyio.abc
import httpx
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocketClose

from numi_mw.asgi import (
    DEFAULT_MAX_HEADER_BYTES,
    DEFAULT_MAX_HEADER_COUNT,
    HOP_BY_HOP,
    OFF_LOOP_BYTES,
    Headers,
    adjustments_header,
    check_headers,
    check_options,
    check_upstream,
    forwarded_headers,
    off_loop,
    read_body,
)
from numi_mw.core.adapters import WIRE_APIS, WireAdapter
from numi_mw.core.catalog import Catalog, Provider, endpoints_listing, models_listing
from numi_mw.core.codec import encode
from numi_mw.core.errors import ApiError, model_not_found, no_tunnel
from numi_mw.core.providers import WireApi, infer_provider, provider_rules
from numi_mw.core.replay import NO_CONTEXT, StreamStates, answer_states, credential_scope, missing_in_body
from numi_mw.core.request import DEFAULT_MAX_BODY_BYTES, is_chat_completions, prepare_request
from numi_mw.core.response import (
    DEFAULT_MAX_EVENT_BYTES,
    DEFAULT_MAX_RESPONSE_BYTES,
    Bounds,
    ResponseOptions,
    StreamRewriter,
)
from numi_mw.core.routing import Route, fixed_route
from numi_mw.core.structs import check_limits
from numi_mw.core.think import ThinkStart, ThinkTags
from numi_mw.proxy.ops import Operations, check_ops_prefix, internal_error_response
from numi_mw.replay_store import (
    DEFAULT_MAX_VALUE_BYTES,
    DEFAULT_TTL,
    ReplayStore,
    replay_store_option,
    restored_header,
)
from numi_mw.upstream import (
    DEFAULT_UPSTREAM_TRANSPORT,
    ClosedBeforeAnswer,
    Outgoing,
    SendWhole,
    answer_headers,
    answer_options,
    answer_rewriter,
    api_keys,
    check_upstream_transport,
    close_upstream,
    feed_answer,
    note_upstream,
    open_transport,
    relay,
    send_outgoing,
    target_url,
    upstream_failure,
    upstream_headers,
    whole_answer,
)

log = logging.getLogger("numi_mw.proxy")

DEFAULT_TIMEOUT = httpx.Timeout(600.0, connect=10.0)
"""Upstream timeouts in seconds: 10 to connect, 600 for each read (reasoning can take minutes to start)."""

UPSTREAM_LIMITS = httpx.Limits(max_connections=None, max_keepalive_connections=100)
"""Upstream connections: no cap (httpx's default of 100 would make the 101st concurrent stream wait for a free
connection, up to the read timeout, and then fail with 504); up to 100 idle ones are kept for reuse. The pool is
``upstream.UpstreamPool``, whose work per request does not grow with the count of connections."""

_DROP_REQUEST = HOP_BY_HOP | {b"host", b"content-length", b"accept-encoding"}
_DROP_STREAMED = HOP_BY_HOP | {b"host", b"accept-encoding"}
"""What a body forwarded as it streams loses: its ``content-length`` stays (httpx then sends no chunked framing)."""
_DROP_REWRITTEN = HOP_BY_HOP | {b"content-encoding", b"content-length"}


def _error_response(error: ApiError) -> Response:
    return Response(error.to_bytes(), status_code=error.status, media_type="application/json")


class _Sidecar:
    """Configuration and the shared upstream transport; per-request state lives in the locals of ``handle``."""

    def __init__(
        self,
        target: Route | Catalog,
        keys: dict[str, str],
        max_body_bytes: int,
        timeout: httpx.Timeout,
        transport: httpx.AsyncBaseTransport | None,
        think_tags: bool | ThinkTags | None,
        think_start: ThinkStart | None,
        *,
        max_header_count: int = DEFAULT_MAX_HEADER_COUNT,
        max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
        bounds: Bounds | None = None,
        replay: ReplayStore | None = None,
        upstream_transport: str = DEFAULT_UPSTREAM_TRANSPORT,
    ) -> None:
        self.target = target
        self.upstream_transport = upstream_transport
        self.replay = replay
        self.bounds = bounds or Bounds()
        self.max_header_count = max_header_count
        self.max_header_bytes = max_header_bytes
        self.catalog = target if isinstance(target, Catalog) else None
        self.keys = keys
        default = target.providers[0] if isinstance(target, Catalog) else target.provider
        assert default is not None  # a sidecar route always has its upstream
        self.default: Provider = default
        self.max_body_bytes = max_body_bytes
        self.transport = transport
        self.think_tags = think_tags
        self.think_start = think_start
        self.timeouts = timeout.as_dict()  # each upstream request's timeout extension (``upstream_request``)
        self.upstream: httpx.AsyncBaseTransport | None = None
        self.send_whole: SendWhole | None = None  # ``upstream``'s, when the sidecar opened it (``lifespan``)

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        """Open the upstream transport (``upstream``) for the app's life, and close it and the replay store at its
        end. Requests go straight to the transport (``upstream.send_outgoing``): no ``httpx.AsyncClient``, so no
        cookie jar (a ``Set-Cookie`` of one client's answer never reaches another client's request) and no
        redirect followed."""
        async with self.transport or open_transport(self.upstream_transport, UPSTREAM_LIMITS) as transport:
            self.upstream = transport
            # a whole body goes to the sidecar's own aiohttp transport without an ``httpx.Request``; a transport given
            # to ``create_app`` is handed an ``httpx.Request`` for every call (``upstream.send_outgoing``)
            self.send_whole = getattr(transport, "send_whole", None) if self.transport is None else None
            try:
                yield
            finally:
                self.upstream = None
                self.send_whole = None
                if self.replay is not None:
                    await self.replay.aclose()

    def _listing(self, method: str, path: str) -> Response | None:
        """``GET …/models`` and ``GET …/models/{author}/{slug}/endpoints`` served from the catalog."""
        if self.catalog is None or method != "GET":
            return None
        path = path.rstrip("/")
        if path.endswith("/models") or path == "models":
            return _json_response(models_listing(self.catalog))
        _, sep, tail = path.partition("/models/")
        if not sep or not tail.endswith("/endpoints"):
            return None
        model_id = tail.removesuffix("/endpoints")
        model = self.catalog.model(model_id)
        if model is None:
            return _error_response(model_not_found(model_id))
        return _json_response(endpoints_listing(model))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer one request (the ASGI app the router hands every request to): from the catalog (``_listing``), or
        through the upstream while ``_ClientWatch`` watches for the client to leave.

        From the moment the client's body has been read until the answer is sent, a client that leaves cancels
        the call at once, wherever it is (sending, reading a buffered body, relaying a stream), and the upstream
        connection is closed: the upstream stops working (and billing) for nobody. The upstream response is
        closed on every path, shielded from that cancellation. A WebSocket handshake is refused (closed with
        1000), as Starlette's router refuses one it has no route for. On asyncio (uvicorn's event loop) the watch
        is an asyncio task of its own; under another event loop (trio) it runs in an anyio task group.
        """
        if scope["type"] != "http":
            await WebSocketClose()(scope, receive, send)
            return
        request = Request(scope, receive)
        try:
            check_headers(scope["headers"], self.max_header_count, self.max_header_bytes)
        except ApiError as error:
            await _error_response(error)(scope, receive, send)
            return
        if scope["method"] == "CONNECT":  # a tunnel, which a forwarded request cannot be
            await _error_response(no_tunnel())(scope, receive, send)
            return
        listing = self._listing(request.method, scope["path"])
        if listing is not None:
            await listing(scope, receive, send)
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # another event loop than asyncio's (trio): the watch runs in an anyio task group
            async with anyio.create_task_group() as group:
                await self._watched(request, scope, receive, send, group)
                group.cancel_scope.cancel()
            return
        await self._watched(request, scope, receive, send, None)

    async def _watched(
        self, request: Request, scope: Scope, receive: Receive, send: Send, group: anyio.abc.TaskGroup | None
    ) -> None:
        """``__call__``'s call through the upstream, in one cancel scope that ``_ClientWatch`` cancels when the
        client leaves (its task in ``group``, else an asyncio task of its own)."""
        upstream: list[httpx.Response] = []
        call = anyio.CancelScope()  # cancelled by the watch when the client leaves
        watch = _ClientWatch(receive, call, group)
        try:
            with call:
                try:
                    response = await self.handle(request, watch, upstream)
                    await response(scope, receive, send)
                except ClientDisconnect:  # the client left while its body was forwarded: nobody to answer
                    pass
                except httpx.RequestError:  # the upstream broke off a body relayed as is (``relay`` logged it)
                    pass  # the response stays unfinished: the server closes the connection without the body's end
        finally:
            watch.stop()
            if upstream and not upstream[0].is_closed:  # (a body read to its end, or relayed, was closed then)
                await _close_shielded(upstream[0])

    async def handle(self, request: Request, watch: _ClientWatch, upstream: list[httpx.Response]) -> ASGIApp:
        """The response for ``request``; the upstream response, once there is one, is put in ``upstream`` for the
        caller to close."""
        try:
            call = await self.outgoing(request, watch)
            if call is None:  # the client left before its body ended
                return Response(status_code=400)
            transport = self.upstream
            if transport is None:  # pragma: no cover - only without lifespan
                raise RuntimeError("the sidecar's lifespan has not started")
            upstream.append(await _send(transport, call, self.send_whole))
            return await self.answer(upstream[0], call)
        except ApiError as error:
            return _error_response(error)

    async def outgoing(self, request: Request, watch: _ClientWatch) -> _Call | None:
        """The upstream request for ``request``, with the response options when its answer is to be rewritten
        (chat completions); ``None`` when the client left before its body ended.

        A chat completions request on a route whose wire API is translated goes to the base URL plus the
        adapter's path (``/messages``, ``/responses``), with the headers that wire API needs: the client's
        ``Authorization: Bearer KEY`` becomes the adapter's key header (``x-api-key: KEY``) and its fixed
        headers (``anthropic-version``) are added, each unless the client sent it.

        The catalog's key for the provider goes only with what numi_mw serves for the route (``_serves_route``);
        any other method and path goes with the key the client sent, or none.

        A body goes upstream only when the client sent bytes (``_client_body``); ``watch`` is told when the
        client's body has been read whole.

        Raises:
            ApiError: what ``prepare_request`` refuses; 413 over the body limit; 400 for a dot-segment path.
        """
        method = request.method
        content: bytes | AsyncIterator[bytes]
        options: ResponseOptions | None = None
        adjustments: list[str] = []
        adapter: WireAdapter | None = None
        provider = self.default
        raw = request.headers.raw
        path = request.scope.get("raw_path") or request.url.path.encode()
        route: Route | None = None
        scope: str | None = None
        context = NO_CONTEXT
        restored = 0
        if is_chat_completions(method, request.scope["path"]):
            declared = request.headers.get("content-length")
            body = await read_body(request.receive, self.max_body_bytes, declared.encode() if declared else None)
            if body is None:
                return None
            watch.body_read()
            found: dict[str, bytes] | None = None
            if self.replay is not None:  # the turns whose opaque state the client dropped, looked up
                scope = credential_scope(request.headers)
                keys, context = await off_loop(len(body), missing_in_body, body)
                found = await self.replay.lookup(scope, keys)
            if len(body) < OFF_LOOP_BYTES:  # off_loop's own test, here without its coroutine (and partial)
                prepared = prepare_request(
                    body, self.target, headers=request.headers, max_body_bytes=self.max_body_bytes, restored=found
                )
            else:
                prepare = partial(
                    prepare_request, headers=request.headers, max_body_bytes=self.max_body_bytes, restored=found
                )
                prepared = await off_loop(len(body), prepare, body, self.target)
            restored = prepared.restored
            route = prepared.route
            if route.provider is not None:
                provider = route.provider
            content = prepared.body
            options = answer_options(prepared, self.think_tags, self.think_start, self.bounds)
            adjustments = prepared.adjustments
            adapter = WIRE_APIS.get(route.wire_api)
            if adapter is not None:
                path = adapter.path.encode()
        else:
            content = await _client_body(request, watch)
        drop = _DROP_REQUEST if isinstance(content, bytes) else _DROP_STREAMED
        headers = forwarded_headers(raw, drop)
        headers.append((b"accept-encoding", b"identity"))
        if adapter is None:
            adapter = WIRE_APIS.get(provider.wire_api)  # every path of a native upstream needs its headers
        translated = options is not None and options.wire_api in WIRE_APIS  # the body is the JSON numi_mw wrote
        key = self.keys.get(provider.name) if _serves_route(method, request.scope["path"]) else None
        headers = upstream_headers(headers, adapter, key, translated=translated)
        url = target_url(provider.base_url, path, request.scope.get("query_string", b""))
        outgoing = Outgoing(method, url, headers, content, self.timeouts)
        note_upstream(provider.name, route.wire_api if route is not None else provider.wire_api, route)
        return _Call(outgoing, options, adjustments, isinstance(content, bytes), scope, restored, context)

    async def answer(self, upstream: httpx.Response, call: _Call) -> ASGIApp:
        """The client's response for the upstream's: rewritten when the call has response options and
        ``choose_rewriter`` picks a rewriter, else relayed as it comes (the upstream response is closed on every
        path). The call's adjustments go in the ``x-numi-mw-adjustments`` header, the count of turns a replay store
        restored in ``x-numi-mw-restored``; with a replay store, a buffered answer's opaque state is kept
        (``_remember``) before it goes to the client, so that the client's next turn finds it.

        Raises:
            ApiError: 502 or 504 when a buffered body cannot be read whole (``upstream_failure``); 502 when it is
                over ``max_response_bytes`` decoded (the rewriter's bound, ``response.Bounds``).
        """
        rewriter = answer_rewriter(call.options, upstream) if call.options is not None else None
        extra = adjustments_header(call.adjustments) + restored_header(call.restored)
        if rewriter is not None and not isinstance(rewriter, StreamRewriter):
            try:
                size = await feed_answer(upstream, rewriter)
            except httpx.RequestError as exc:
                raise upstream_failure(exc, "body") from None
            body, status, headers = await off_loop(
                size, whole_answer, rewriter, upstream.status_code, upstream.headers.raw, _DROP_REWRITTEN
            )
            if call.scope is not None and 200 <= status < 300:
                await self._remember(call.scope, call.context, body)
            return _Answer(status, headers + extra, body)
        chunks = relay(upstream, rewriter)
        if rewriter is not None and call.scope is not None:
            chunks = _remember_stream(self.replay, call.scope, call.context, chunks)
        drop = _DROP_REWRITTEN if rewriter else HOP_BY_HOP
        headers = answer_headers(upstream.headers.raw, drop, upstream.status_code)
        return _Answer(upstream.status_code, headers + extra, chunks=chunks)

    async def _remember(self, scope: str, context: str, body: bytes) -> None:
        """Keep the opaque state of each choice of a buffered chat completion (``replay.answer_states``: the
        message's ``reasoning_details`` as the answer holds them, keyed by the turn as the client sends it back
        after the request's last message, whose ``replay.turn_context`` is ``context``)."""
        assert self.replay is not None
        await self.replay.keep(scope, await off_loop(len(body), answer_states, body, context))


def _remember_stream(
    replay: ReplayStore | None, scope: str, context: str, chunks: AsyncIterator[bytes]
) -> AsyncIterator[bytes]:
    """The client's stream, with a replay store: as it goes, each chunk feeds a ``replay.StreamStates`` (keyed
    after ``context``, the ``replay.turn_context`` of the request's last message), and the
    opaque state of its choices is kept before the chunk that ends the stream (``data: [DONE]``) goes out, so that
    the client's next turn finds it (as ``_Sidecar._remember`` keeps a buffered answer's before it goes out). A
    stream that ends without ``[DONE]`` (an upstream break) is kept when it ends."""
    if replay is None:
        return chunks
    return _kept_stream(replay, scope, StreamStates(context), chunks)


async def _kept_stream(
    replay: ReplayStore, scope: str, states: StreamStates, chunks: AsyncIterator[bytes]
) -> AsyncIterator[bytes]:
    kept = False
    async for chunk in chunks:
        if not kept and states.feed(chunk):  # the chunk holds the stream's data: [DONE] event
            kept = True
            await replay.keep(scope, states.states())
        yield chunk
    if not kept:
        await replay.keep(scope, states.states())


class _Answer:
    """An answer to the client: the response head, then the whole ``body`` in one ASGI ``http.response.body``
    message, or, for an upstream body relayed as it comes, each chunk of ``chunks`` as one such message the moment
    it is yielded and then the body's end (ASGI spec "HTTP" section). Its head is as given: Starlette's
    ``Response`` would first make the headers of a body it is given (about 9 k instructions a request), which the
    answer's own replace.

    The client's leaving is ``_ClientWatch``'s to notice (it cancels the whole call), so no second task listens
    for it here, as Starlette's ``StreamingResponse`` would start under a server of ASGI spec version below 2.4.

    Raises:
        starlette.requests.ClientDisconnect: the server's ``send`` raised ``OSError`` (ASGI spec 2.4: the client
            has gone).
        httpx.RequestError: from ``chunks`` (``upstream.relay``: the upstream broke off a body relayed as is).
    """

    __slots__ = ("body", "chunks", "headers", "status")

    def __init__(
        self, status: int, headers: Headers, body: bytes = b"", *, chunks: AsyncIterator[bytes] | None = None
    ) -> None:
        self.status = status
        self.headers = headers
        self.body = body
        self.chunks = chunks

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send({"type": "http.response.start", "status": self.status, "headers": self.headers})
            if self.chunks is not None:
                async for chunk in self.chunks:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": self.body, "more_body": False})
        except OSError:
            raise ClientDisconnect() from None


class _ClientWatch:
    """Watches the client's connection while its call runs (ASGI ``http.disconnect``, ASGI spec "HTTP" section).

    Once the client's body has been read (``body_read``; until then the body's reader owns ``receive``, and
    ``client_left`` is told when it finds the client gone), a task reads ``receive`` until the client leaves and
    then cancels ``call``, the call's scope: wherever the call is (sending, reading a buffered body, relaying a
    stream, an answer the upstream began before the body ended), it ends there. ``stop`` ends the watch when the
    call is over.

    On asyncio the task is asyncio's own, ended by cancelling it, rather than an anyio task group's: per request,
    anyio's group and its cancellation cost about ten times as much (tens of microseconds, a task's ``repr``
    formatted into each cancel message). Under another event loop (trio) it runs in ``group``."""

    __slots__ = ("_call", "_group", "_receive", "_started", "_task")

    def __init__(self, receive: Receive, call: anyio.CancelScope, group: anyio.abc.TaskGroup | None = None) -> None:
        self._receive = receive
        self._call = call
        self._group = group
        self._started = False
        self._task: asyncio.Task[None] | None = None

    def body_read(self) -> None:
        """The client's body has been read whole: watch ``receive`` from now on (once)."""
        if self._started:
            return
        self._started = True
        if self._group is not None:
            self._group.start_soon(self._run)
        else:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def client_left(self) -> None:
        """The body's reader found the client gone (``ClientDisconnect``): end the call."""
        self._call.cancel()

    def stop(self) -> None:
        """End the watch (the call is over). The watch lets go of its task first: the task keeps its cancellation,
        whose traceback holds the task's frame and so this watch, and a watch that still held the task would make a
        reference cycle of each request, left for CPython's cycle collector."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()

    async def _run(self) -> None:
        try:
            while (await self._receive())["type"] != "http.disconnect":
                pass  # the empty ``http.request`` of a request without a body
        except Exception as exc:  # ``receive`` failed: nobody reads the answer either
            log.warning("the server's receive failed while the call ran: %s", type(exc).__name__)
        self._call.cancel()  # not reached when ``stop`` cancelled the task


async def _close_shielded(response: httpx.Response) -> None:
    """Close the upstream ``response`` (its connection goes back to the pool, or is closed), shielded from a
    cancellation of the task meanwhile (a server shutting down)."""
    with anyio.CancelScope(shield=True):
        await close_upstream(response)


async def _client_body(request: Request, watch: _ClientWatch) -> bytes | AsyncIterator[bytes]:
    """The body to forward for a request numi_mw does not rewrite: ``b""`` (none: a ``GET`` gets no framing, a
    ``POST`` ``content-length: 0``) when the client sent no byte, whatever its framing said (no body,
    ``content-length: 0``, an empty chunked body); else the client's bytes as they come, the first chunk read
    before the request is sent. ``watch.body_read`` is called once the body has been read whole.

    Raises:
        starlette.requests.ClientDisconnect: while the body is read, the client left.
    """
    if "content-length" not in request.headers and "transfer-encoding" not in request.headers:
        watch.body_read()
        return b""
    chunks = request.stream().__aiter__()
    async for chunk in chunks:
        if chunk:
            return _rest_of_body(chunk, chunks, watch)
    watch.body_read()
    return b""


async def _rest_of_body(first: bytes, chunks: AsyncIterator[bytes], watch: _ClientWatch) -> AsyncIterator[bytes]:
    """The client's body as httpx sends it upstream. A client that leaves meanwhile ends the whole call
    (``watch.client_left``): the body may be read in a task of the upstream transport's own (aiohttp writes it so),
    where its ``ClientDisconnect`` would read as a failed write to the upstream, and an answer the upstream began
    before the body ended would go on for nobody."""
    yield first
    try:
        async for chunk in chunks:
            yield chunk
    except ClientDisconnect:
        watch.client_left()
        raise
    watch.body_read()


def _serves_route(method: str, path: str) -> bool:
    """Whether numi_mw serves ``method`` and ``path`` for a route, so that a catalog provider's key goes with it:
    ``POST …/chat/completions`` (``is_chat_completions``) and ``GET …/models`` with the paths under it. Any other
    method and path (key management, files, billing) is the client's own business with the provider."""
    if is_chat_completions(method, path):
        return True
    trimmed = path.rstrip("/")
    return method == "GET" and (trimmed.endswith("/models") or trimmed == "models" or "/models/" in trimmed)


class _Call(NamedTuple):
    """One upstream call: the request, the response options when its answer is rewritten, the adjustments,
    whether its body can be sent again (bytes, not a stream the client is still sending), the client's credential
    scope when a replay store keeps its answer, how many turns the store restored, and the context its answer is
    kept under (``replay.missing_in_body``)."""

    outgoing: Outgoing
    options: ResponseOptions | None
    adjustments: list[str]
    replayable: bool
    scope: str | None = None
    restored: int = 0
    context: str = NO_CONTEXT


async def _send(transport: httpx.AsyncBaseTransport, call: _Call, send_whole: SendWhole | None) -> httpx.Response:
    """Send the call's request under the one mapping of httpx errors (``upstream_failure``), a whole body by
    ``send_whole`` when there is one (``upstream.send_outgoing``).

    A request whose body is bytes is sent once more when the upstream closed the connection before the head of its
    answer was whole (``upstream.ClosedBeforeAnswer``): llama.cpp's server closes the connection after every streamed
    answer although it announces keep-alive, and a pooled client meets that on its next request. An answer that
    breaks HTTP/1.1 framing is not sent for again: the upstream answered. An answer whose status is outside 100 to
    599 (RFC 9110 section 15) is a 502 too.

    Raises:
        ApiError: 502 or 504 (``upstream_failure``).
    """
    try:
        try:
            response = await send_outgoing(transport, call.outgoing, send_whole)
        except ClosedBeforeAnswer:
            if not call.replayable:
                raise
            response = await send_outgoing(transport, call.outgoing, send_whole)
        if not 100 <= response.status_code <= 599:  # RFC 9110 section 15: no server can send it on
            await close_upstream(response)
            raise httpx.RemoteProtocolError(f"status {response.status_code} is outside 100 to 599")
    except httpx.RequestError as exc:
        raise upstream_failure(exc, "send") from None
    return response


def _json_response(data: Any) -> Response:
    return Response(encode(data), media_type="application/json")


async def _internal_error(request: Request, exc: Exception) -> Response:
    """``ops.internal_error_response``, for Starlette's ``ServerErrorMiddleware`` when the app has its full middleware
    stack (``_App``): it sends it for a fault outside ``ops.Operations`` (which answers its own) and raises the
    exception again, for the server to log."""
    return internal_error_response()


class _App(Starlette):
    """The sidecar's Starlette app, whose middleware stack is ``ops.Operations`` alone in front of the router.

    Starlette puts its ``ServerErrorMiddleware`` around every app's middleware and its ``ExceptionMiddleware``
    inside it, and each wraps ``send`` in a coroutine of its own, which every message of every answer then passes
    through: two more steps for each event of a stream. Here ``Operations`` does their work itself
    (``whole_stack``): it answers a fault with the OpenAI-style 500 and raises it on to the server, and a Starlette
    ``HTTPException`` (which only an outer app's ``receive`` raises here: its body limit) as ``ExceptionMiddleware``
    answers it by default. An app given routes or mounts, more middleware (``add_middleware``), exception handlers,
    a ``max_body_size`` or ``debug`` gets Starlette's own stack (``Starlette.build_middleware_stack``), with those
    in it.
    """

    def build_middleware_stack(self) -> ASGIApp:
        if (
            self.debug
            or getattr(self, "max_body_size", None) is not None
            or self.exception_handlers != {Exception: _internal_error}
            or self.router.routes
            or len(self.user_middleware) != 1
        ):
            return super().build_middleware_stack()
        cls, args, kwargs = self.user_middleware[0]
        if cls is not Operations:
            return super().build_middleware_stack()
        return Operations(self.router, *args, whole_stack=True, **kwargs)


def create_app(
    upstream: str | None = None,
    *,
    provider: str | None = None,
    catalog: Catalog | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_header_count: int = DEFAULT_MAX_HEADER_COUNT,
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
    transport: httpx.AsyncBaseTransport | None = None,
    think_tags: bool | ThinkTags | None = None,
    think_start: ThinkStart | None = None,
    preserve_reasoning: bool = True,
    wire_api: WireApi | None = None,
    ops_prefix: str = "",
    metrics: bool = True,
    replay_store: str | ReplayStore | None = None,
    replay_ttl: float = DEFAULT_TTL,
    replay_max_bytes: int = DEFAULT_MAX_VALUE_BYTES,
    replay_key_env: str | None = None,
    upstream_transport: str | None = None,
) -> Starlette:
    """Build the sidecar app: in front of one upstream, or routing through a model catalog.

    Args:
        upstream: the upstream base URL, e.g. ``https://openrouter.ai/api/v1`` or ``http://127.0.0.1:8000/v1``
            (single-upstream mode).
        provider: with ``upstream``, the provider whose rules apply; inferred from the upstream host when
            ``None`` (``numi_mw.core.providers.infer_provider``).
        catalog: route every chat completions request through this catalog instead (catalog mode): each goes
            to the base URL of its chosen endpoint's provider, with that provider's key (from the environment
            variable ``api_key_env`` names, read now) in place of the client's ``Authorization``. ``GET
            …/models`` and ``GET …/models/{author}/{slug}/endpoints`` are served from the catalog; other paths
            go to the catalog's first provider, with its key only for ``GET`` under ``…/models``, else with the
            key the client sent, or none (``_serves_route``).
        max_body_bytes: request body limit in bytes (413 ``payload_too_large`` above it).
        max_header_count: the most request headers taken (default 256); more get 431
            ``request_header_fields_too_large`` before any body byte is read (``docs/security.md``).
        max_header_bytes: the most bytes of request header names and values taken, summed (default 64 KiB); more
            get 431 ``request_header_fields_too_large`` likewise.
        max_event_bytes: the most bytes of one upstream SSE event held (default 16 MiB); past it the stream ends
            with its error event (502 ``upstream_unavailable``).
        max_response_bytes: the most bytes of one buffered upstream answer held, decoded (default 64 MiB); past it
            the client gets 502 ``upstream_unavailable``.
        timeout: upstream timeouts in seconds (a read timeout applies between chunks).
        transport: an ``httpx`` transport for the upstreams (tests); the default opens real connections.
        upstream_transport: what opens those connections (``upstream.UPSTREAM_TRANSPORTS``): ``aiohttp`` (the
            default when no ``transport`` is given: less CPU per request under concurrency) or ``httpcore``
            (httpx's own); what they send and how failures read are the same (``docs/sidecar.md``, "Upstream
            transport"). Each lifespan (each worker) opens its own.
        think_tags: split ``<think>`` tags out of response content (``response.think_tags_for``).
        think_start: where a stream starts for the think splitter (``ThinkTags.start``); ``None``: the catalog
            model's ``think_start``, else ``content``.
        preserve_reasoning: with ``upstream``, replay reasoning in history where the provider takes it (spec 000
            "The Message Preparation Filter" with preservation on); a catalog says it per model.
        wire_api: with ``upstream``, the wire API it speaks (default ``openai-chat``): with
            ``anthropic-messages`` or ``openai-responses`` chat completions requests go to ``<upstream>/messages``
            or ``<upstream>/responses``, translated, and their answers come back as chat completions
            (``docs/wire-apis.md``); a catalog says it per provider.
        ops_prefix: where the operations paths are (``numi_mw.proxy.ops``): ``{ops_prefix}/healthz``,
            ``{ops_prefix}/readyz``, ``{ops_prefix}/metrics``, answered by numi_mw and never forwarded; ``""`` puts
            them at the root, outside the ``/v1`` the sidecar forwards (``docs/sidecar.md``, "Operations").
        metrics: count requests in Prometheus metrics served at ``{ops_prefix}/metrics``; ``False`` leaves that
            path to the upstream.
        replay_store: keep the opaque reasoning state of the assistant turns the sidecar relays and put it back on
            later requests whose history lost it (``docs/replay-store.md``): ``None`` (off, the default),
            ``sqlite:///PATH``, ``redis://HOST:PORT/DB``, or a ``ReplayStore``; opened now (an SQLite file is
            created ``0600``).
        replay_ttl: with a URL, seconds a stored value lives (default 86400, 24 hours).
        replay_max_bytes: with a URL, the largest value kept, in bytes (default 4 MiB).
        replay_key_env: with a URL, the environment variable holding the AES key that encrypts values at rest
            (``replay_store.encryption_key``; default none: values are kept as they are).

    Raises:
        ValueError: neither or both of ``upstream`` and ``catalog``; ``upstream`` is not an ``http://`` or
            ``https://`` URL with a host, or it or a catalog provider's base URL is one httpx refuses
            (``asgi.check_upstream``); ``provider`` is not a known provider name; ``wire_api`` is not a known
            wire API, or is given with a catalog; an option of the wrong type or range (``max_body_bytes``,
            ``max_header_count``, ``max_header_bytes``, ``max_event_bytes``, ``max_response_bytes``, ``timeout``
            (a finite number of seconds),
            ``think_tags``, ``think_start``, ``preserve_reasoning``, ``transport``, ``ops_prefix``, ``metrics``); a
            replay store URL, option or key that ``replay_store.replay_store_option`` refuses; an
            ``upstream_transport`` that ``upstream.check_upstream_transport`` refuses (an unknown name, ``aiohttp``
            beside a ``transport``, or aiohttp missing or too old); a catalog provider's
            key that is not visible ASCII once its trailing whitespace is stripped (``upstream.api_keys``).

    Errors reach the client as the OpenAI-style error body (``docs/errors.md``). An upstream's own error
    response is passed through unchanged.
    """
    if (upstream is None) == (catalog is None):
        raise ValueError("give either an upstream base URL or a catalog")
    check_options(
        max_body_bytes=max_body_bytes,
        think_tags=think_tags,
        think_start=think_start,
        preserve_reasoning=preserve_reasoning,
        wire_api=wire_api,
        catalog=catalog,
    )
    check_limits(max_header_count=max_header_count, max_header_bytes=max_header_bytes)
    bounds = Bounds(max_event_bytes, max_response_bytes)  # checks both (``check_limits``)
    if not isinstance(timeout, httpx.Timeout) and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout < math.inf
    ):
        raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
    if isinstance(timeout, httpx.Timeout) and any(
        value is not None and not 0 < value < math.inf
        for value in (timeout.connect, timeout.read, timeout.write, timeout.pool)
    ):
        raise ValueError(f"timeout's values must be positive numbers of seconds or None, not {timeout!r}")
    if transport is not None and not isinstance(transport, httpx.AsyncBaseTransport):
        raise ValueError(f"transport must be an httpx.AsyncBaseTransport, not {transport!r}")
    opened = check_upstream_transport(upstream_transport, transport)
    if upstream is not None:
        check_upstream(upstream)
    else:  # a catalog's base URLs passed its own rule when it was loaded; httpx must take them too
        assert catalog is not None
        for listed in catalog.providers:
            check_upstream(listed.base_url)
    check_ops_prefix(ops_prefix)
    if not isinstance(metrics, bool):
        raise ValueError(f"metrics must be true or false, not {metrics!r}")
    replay = replay_store_option(replay_store, ttl=replay_ttl, max_value_bytes=replay_max_bytes, key_env=replay_key_env)
    target: Route | Catalog
    if upstream is not None:
        name = provider_rules(provider if provider is not None else infer_provider(upstream)).name
        single = Provider(name=name, base_url=upstream, wire_api=wire_api or "openai-chat")
        target = fixed_route(single, preserve=preserve_reasoning)
    else:
        assert catalog is not None
        target = catalog
    sidecar = _Sidecar(
        target,
        api_keys(catalog) if catalog is not None else {},
        max_body_bytes,
        timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout),
        transport,
        think_tags,
        think_start,
        max_header_count=max_header_count,
        max_header_bytes=max_header_bytes,
        bounds=bounds,
        replay=replay,
        upstream_transport=opened,
    )
    app = _App(
        middleware=[Middleware(Operations, sidecar=sidecar, prefix=ops_prefix, metrics=metrics)],
        exception_handlers={Exception: _internal_error},
        lifespan=sidecar.lifespan,
    )
    # no routes: every method and every path (a route pattern refuses a path holding %0a) reaches the sidecar
    app.router.default = sidecar
    app.state.sidecar = sidecar
    return app
