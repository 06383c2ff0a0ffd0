"""``create_app``: the sidecar's Starlette app with one shared ``httpx.AsyncClient``.

The sidecar's ``/v1`` stands for the upstream base URL (which may carry a path, e.g.
``https://openrouter.ai/api/v1``): ``/v1/chat/completions`` reaches ``<base>/chat/completions``. Chat
completions requests are prepared by ``numi_mw.core.request`` and their successful responses go through the
rewriter ``numi_mw.core.response.choose_rewriter`` picks (SSE event by event, JSON bodies whole); every other
method and path, and upstream errors, are forwarded as is. Streams go back event by event as they arrive, never
buffered. ``docs/sidecar.md`` has the details.

Each request takes three steps: build the upstream request (``_Sidecar.outgoing``), send it under the one
mapping of httpx errors to API errors (``numi_mw.upstream.upstream_failure``), and answer
(``_Sidecar.answer``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any, NamedTuple

import httpx
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route as StarletteRoute

from numi_mw.asgi import (
    DEFAULT_MAX_HEADER_BYTES,
    DEFAULT_MAX_HEADER_COUNT,
    HOP_BY_HOP,
    adjustments_header,
    check_headers,
    check_limits,
    check_options,
    check_upstream,
    connection_tokens,
    read_body,
    without_headers,
)
from numi_mw.core.adapters import WIRE_APIS, WireAdapter
from numi_mw.core.catalog import Catalog, Provider, endpoints_listing, models_listing
from numi_mw.core.codec import encode
from numi_mw.core.errors import ApiError, model_not_found
from numi_mw.core.providers import WireApi, infer_provider, provider_rules
from numi_mw.core.request import DEFAULT_MAX_BODY_BYTES, is_chat_completions, prepare_request
from numi_mw.core.response import (
    DEFAULT_MAX_EVENT_BYTES,
    DEFAULT_MAX_RESPONSE_BYTES,
    Bounds,
    ResponseOptions,
    StreamRewriter,
    choose_rewriter,
)
from numi_mw.core.routing import Route, fixed_route
from numi_mw.core.think import ThinkStart, ThinkTags
from numi_mw.upstream import (
    DECODED,
    answer_options,
    api_keys,
    feed_answer,
    relay,
    target_url,
    upstream_failure,
    upstream_headers,
    whole_answer,
)

DEFAULT_TIMEOUT = httpx.Timeout(600.0, connect=10.0)
"""Upstream timeouts in seconds: 10 to connect, 600 for each read (reasoning can take minutes to start)."""

UPSTREAM_LIMITS = httpx.Limits(max_connections=None, max_keepalive_connections=100)
"""Upstream connections: no cap (httpx's default of 100 would make the 101st concurrent stream wait for a free
connection, up to the read timeout, and then fail with 504); up to 100 idle ones are kept for reuse."""

_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
_DROP_REQUEST = HOP_BY_HOP | {b"host", b"content-length", b"accept-encoding"}
_DROP_STREAMED = HOP_BY_HOP | {b"host", b"accept-encoding"}
"""What a body forwarded as it streams loses: its ``content-length`` stays (httpx then sends no chunked framing)."""
_DROP_REWRITTEN = HOP_BY_HOP | {b"content-encoding", b"content-length"}


def _error_response(error: ApiError) -> Response:
    return Response(error.to_bytes(), status_code=error.status, media_type="application/json")


class _NoCookies(httpx.Cookies):
    """Cookies the shared client neither stores nor sends: a ``Set-Cookie`` of one client's answer never reaches
    another client's request (a client's own ``Cookie`` header passes as any header does).

    httpx reads an answer's cookies through a ``urllib`` view of its request whose construction copies the request
    headers with one lookup per header name, each a scan of all headers: time quadratic in the count of headers
    a client sends. Extraction is skipped, so that view is never built.
    """

    def extract_cookies(self, response: httpx.Response) -> None:
        """Keep nothing of ``response``'s cookies."""

    def set_cookie_header(self, request: httpx.Request) -> None:
        """Add no ``Cookie`` header to ``request``."""


class _UpstreamClient(httpx.AsyncClient):
    """The sidecar's shared ``httpx.AsyncClient``, whose cookies are always ``_NoCookies`` (httpx copies cookies
    given to its constructor into a plain ``httpx.Cookies``)."""

    _none = _NoCookies()

    @property
    def cookies(self) -> httpx.Cookies:
        return self._none

    @cookies.setter
    def cookies(self, cookies: httpx._types.CookieTypes) -> None:
        raise AttributeError("the sidecar's upstream client keeps no cookies")


class _Sidecar:
    """Configuration and the shared client; per-request state lives in the locals of ``handle``."""

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
    ) -> None:
        self.target = target
        self.bounds = bounds or Bounds()
        self.max_header_count = max_header_count
        self.max_header_bytes = max_header_bytes
        self.catalog = target if isinstance(target, Catalog) else None
        self.keys = keys
        default = target.providers[0] if isinstance(target, Catalog) else target.provider
        assert default is not None  # a sidecar route always has its upstream
        self.default: Provider = default
        self.max_body_bytes = max_body_bytes
        self.timeout = timeout
        self.transport = transport
        self.think_tags = think_tags
        self.think_start = think_start
        self.client: httpx.AsyncClient | None = None

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        async with _UpstreamClient(
            timeout=self.timeout,
            follow_redirects=False,
            limits=UPSTREAM_LIMITS,
            transport=self.transport,
            trust_env=False,
        ) as client:
            self.client = client
            try:
                yield
            finally:
                self.client = None

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

    async def handle(self, request: Request) -> Response:
        try:
            check_headers(request.scope["headers"], self.max_header_count, self.max_header_bytes)
        except ApiError as error:
            return _error_response(error)
        listing = self._listing(request.method, request.url.path)
        if listing is not None:
            return listing
        try:
            call = await self.outgoing(request)
            if call is None:  # the client left before its body ended
                return Response(status_code=400)
            client = self.client
            if client is None:  # pragma: no cover - only without lifespan
                raise RuntimeError("the sidecar's lifespan has not started")
            upstream = await _send(client, call)
            return await self.answer(upstream, call)
        except ApiError as error:
            return _error_response(error)

    async def outgoing(self, request: Request) -> _Call | None:
        """The upstream request for ``request``, with the response options when its answer is to be rewritten
        (chat completions); ``None`` when the client left before its body ended.

        A chat completions request on a route whose wire API is translated goes to the base URL plus the
        adapter's path (``/messages``, ``/responses``), with the headers that wire API needs: the client's
        ``Authorization: Bearer KEY`` becomes the adapter's key header (``x-api-key: KEY``) and its fixed
        headers (``anthropic-version``) are added, each unless the client sent it.

        Raises:
            ApiError: what ``prepare_request`` refuses; 413 over the body limit; 400 for a dot-segment path.
        """
        assert self.client is not None
        method = request.method
        content: bytes | AsyncIterator[bytes]
        options: ResponseOptions | None = None
        adjustments: list[str] = []
        adapter: WireAdapter | None = None
        provider = self.default
        raw = request.headers.raw
        path = request.scope.get("raw_path") or request.url.path.encode()
        if is_chat_completions(method, request.url.path):
            declared = request.headers.get("content-length")
            body = await read_body(request.receive, self.max_body_bytes, declared.encode() if declared else None)
            if body is None:
                return None
            prepared = prepare_request(body, self.target, headers=request.headers, max_body_bytes=self.max_body_bytes)
            route = prepared.route
            if route.provider is not None:
                provider = route.provider
            content = prepared.body
            options = answer_options(prepared, self.think_tags, self.think_start, self.bounds)
            adjustments = prepared.adjustments
            adapter = WIRE_APIS.get(route.wire_api)
            if adapter is not None:
                path = adapter.path.encode()
        elif "content-length" in request.headers or "transfer-encoding" in request.headers:
            content = request.stream()  # forwarded as it comes, with the client's content-length when it sent one
        else:
            content = b""  # no body: none is sent (a GET gets no chunked framing)
        drop = _DROP_REQUEST if isinstance(content, bytes) else _DROP_STREAMED
        headers = without_headers(raw, drop | connection_tokens(raw))
        headers.append((b"accept-encoding", b"identity"))
        if adapter is None:
            adapter = WIRE_APIS.get(provider.wire_api)  # every path of a native upstream needs its headers
        translated = options is not None and options.wire_api in WIRE_APIS  # the body is the JSON numi_mw wrote
        headers = upstream_headers(headers, adapter, self.keys.get(provider.name), translated=translated)
        url = target_url(provider.base_url, path, request.scope.get("query_string", b""))
        request_out = self.client.build_request(method, url, headers=headers, content=content)
        return _Call(request_out, options, adjustments, isinstance(content, bytes))

    async def answer(self, upstream: httpx.Response, call: _Call) -> Response:
        """The client's response for the upstream's: rewritten when the call has response options and
        ``choose_rewriter`` picks a rewriter, else relayed as it comes (the upstream response is closed on every
        path). The call's adjustments go in the ``x-numi-mw-adjustments`` header.

        Raises:
            ApiError: 502 or 504 when a buffered body cannot be read whole (``upstream_failure``); 502 when it is
                over ``max_response_bytes`` decoded (the rewriter's bound, ``response.Bounds``).
        """
        rewriter = None
        if call.options is not None:
            rewriter = choose_rewriter(
                call.options,
                upstream.status_code,
                upstream.headers.get("content-type"),
                upstream.headers.get("content-encoding"),
                decoded=DECODED,
            )
        extra = adjustments_header(call.adjustments)
        if rewriter is not None and not isinstance(rewriter, StreamRewriter):
            try:
                await feed_answer(upstream, rewriter)
            except httpx.RequestError as exc:
                raise upstream_failure(exc, "body") from None
            body, status, headers = whole_answer(rewriter, upstream.status_code, upstream.headers.raw, _DROP_REWRITTEN)
            plain = Response(body, status_code=status)
            plain.raw_headers = headers + extra
            return plain
        response = StreamingResponse(
            relay(upstream, rewriter), status_code=upstream.status_code, background=BackgroundTask(upstream.aclose)
        )
        if rewriter is None:
            response.raw_headers = without_headers(upstream.headers.raw, HOP_BY_HOP) + extra
        else:
            response.raw_headers = without_headers(upstream.headers.raw, _DROP_REWRITTEN) + extra
        return response


class _Call(NamedTuple):
    """One upstream call: the request, the response options when its answer is rewritten, the adjustments, and
    whether its body can be sent again (bytes, not a stream the client is still sending)."""

    request: httpx.Request
    options: ResponseOptions | None
    adjustments: list[str]
    replayable: bool


async def _send(client: httpx.AsyncClient, call: _Call) -> httpx.Response:
    """Send the call's request under the one mapping of httpx errors (``upstream_failure``).

    A request whose body is bytes is sent once more when the upstream closed a kept-alive connection before
    answering (``RemoteProtocolError`` before any response byte): llama.cpp's server closes the connection after
    every streamed answer although it announces keep-alive, and a pooled client meets that on its next request.

    Raises:
        ApiError: 502 or 504 (``upstream_failure``).
    """
    try:
        try:
            return await client.send(call.request, stream=True)
        except httpx.RemoteProtocolError:
            if not call.replayable:
                raise
            return await client.send(call.request, stream=True)
    except httpx.RequestError as exc:
        raise upstream_failure(exc, "send") from None


def _json_response(data: Any) -> Response:
    return Response(encode(data), media_type="application/json")


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
            go to the catalog's first provider.
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
        think_tags: split ``<think>`` tags out of response content (``response.think_tags_for``).
        think_start: where a stream starts for the think splitter (``ThinkTags.start``); ``None``: the catalog
            model's ``think_start``, else ``content``.
        preserve_reasoning: with ``upstream``, replay reasoning in history where the provider takes it (spec 000
            "The Message Preparation Filter" with preservation on); a catalog says it per model.
        wire_api: with ``upstream``, the wire API it speaks (default ``openai-chat``): with
            ``anthropic-messages`` or ``openai-responses`` chat completions requests go to ``<upstream>/messages``
            or ``<upstream>/responses``, translated, and their answers come back as chat completions
            (``docs/wire-apis.md``); a catalog says it per provider.

    Raises:
        ValueError: neither or both of ``upstream`` and ``catalog``; ``upstream`` is not an ``http://`` or
            ``https://`` URL with a host; ``provider`` is not a known provider name; ``wire_api`` is not a known
            wire API, or is given with a catalog; an option of the wrong type or range (``max_body_bytes``,
            ``max_header_count``, ``max_header_bytes``, ``max_event_bytes``, ``max_response_bytes``, ``timeout``,
            ``think_tags``, ``think_start``, ``preserve_reasoning``).

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
    check_limits(
        max_header_count=max_header_count,
        max_header_bytes=max_header_bytes,
        max_event_bytes=max_event_bytes,
        max_response_bytes=max_response_bytes,
    )
    if not isinstance(timeout, httpx.Timeout) and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0
    ):
        raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
    if upstream is not None:
        check_upstream(upstream)
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
        bounds=Bounds(max_event_bytes, max_response_bytes),
    )
    app = Starlette(
        routes=[StarletteRoute("/{path:path}", sidecar.handle, methods=_METHODS)],
        lifespan=sidecar.lifespan,
    )
    app.state.sidecar = sidecar
    return app
