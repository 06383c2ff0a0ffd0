"""``NormalizingTransport`` and ``SyncNormalizingTransport``: httpx transports that apply numi_mw's rules to the
chat completions calls an app sends to providers itself.

Each wraps another transport (by default httpx's own, which opens the connections). A ``POST`` to a path ending in
``/chat/completions`` with a JSON body (``request.is_chat_completions``, the middleware's filter) is prepared by
``numi_mw.core.request.prepare_request`` before it goes out, and its answer goes through the rewriter
``numi_mw.core.response.choose_rewriter`` picks: an SSE stream chunk by chunk as it arrives, a JSON completion
whole. Every other request passes through untouched. ``docs/transport.md`` has the details.

Both transports share ``_Normalizer`` (the options and every step that is not I/O); each shell only reads, sends
and closes, the one with ``await`` and the other without, as httpx's own sync and async twins do.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import NamedTuple

import httpx

from numi_mw.asgi import (
    Headers,
    adjustments_header,
    check_options,
    is_json,
    off_loop,
    without_headers,
)
from numi_mw.core.adapters import WIRE_APIS
from numi_mw.core.catalog import Catalog
from numi_mw.core.errors import ApiError
from numi_mw.core.providers import ProviderRules, WireApi, infer_provider, provider_rules
from numi_mw.core.request import DEFAULT_MAX_BODY_BYTES, is_chat_completions, prepare_request
from numi_mw.core.response import (
    DEFAULT_MAX_EVENT_BYTES,
    DEFAULT_MAX_RESPONSE_BYTES,
    BodyRewriter,
    Bounds,
    ResponseOptions,
    Rewriter,
    StreamRewriter,
)
from numi_mw.core.routing import Route, fixed_route
from numi_mw.core.think import ThinkStart, ThinkTags
from numi_mw.upstream import (
    answer_options,
    answer_rewriter,
    api_keys,
    feed_answer,
    feed_answer_sync,
    relay,
    relay_sync,
    target_url,
    upstream_headers,
    whole_answer,
)

_REQUEST_FRAMING = frozenset((b"content-length", b"transfer-encoding", b"accept-encoding"))
"""What a prepared request loses of the app's headers: its framing (httpx sets the new body's length) and
``accept-encoding``, replaced by ``identity`` so that the answer comes back readable."""

_DECODED_BODY = frozenset((b"content-length", b"content-encoding", b"transfer-encoding"))
"""What a rewritten answer loses of the upstream's headers: its body was decoded and has a new length (a stream, no
fixed one)."""

_CHAT_COMPLETIONS = "/chat/completions"


class _Call(NamedTuple):
    """One chat completions call on its way: the request that goes upstream, what the response side does with its
    answer, and the ``x-numi-mw-adjustments`` header (or none)."""

    request: httpx.Request
    options: ResponseOptions
    extra: Headers

    def rewriter(self, response: httpx.Response) -> Rewriter | None:
        """The rewriter for the upstream's answer, or ``None`` when it passes through (``choose_rewriter``; gzip
        and deflate bodies are read decoded)."""
        return answer_rewriter(self.options, response)

    def passed(self, response: httpx.Response) -> httpx.Response:
        """The upstream's answer as it came, with the adjustments header."""
        for name, value in self.extra:
            response.headers[name.decode("latin-1")] = value.decode("latin-1")
        return response

    def streamed(
        self, response: httpx.Response, rewriter: StreamRewriter, stream: type[_AsyncStream | _SyncStream]
    ) -> httpx.Response:
        """The answer whose body is the upstream's through ``rewriter``, relayed by a ``stream`` of it as it
        arrives: no fixed length, decoded. A body the wrapped transport has read whole already (an
        ``httpx.MockTransport`` answer) is rewritten at once: there is nothing to wait for."""
        body: httpx.SyncByteStream | httpx.AsyncByteStream
        if response.is_stream_consumed:
            try:
                out = rewriter.feed(response.content) + rewriter.finish()
            except ApiError as error:  # past the rewriter's bound, as ``relay`` ends a stream
                out = rewriter.fail(error)
            body = httpx.ByteStream(out)
        else:
            body = stream(response, rewriter)
        headers = without_headers(response.headers.raw, _DECODED_BODY) + self.extra
        return httpx.Response(response.status_code, headers=headers, stream=body, extensions=response.extensions)

    def whole(self, response: httpx.Response, rewriter: BodyRewriter) -> httpx.Response:
        """The answer for the upstream's whole body, which ``rewriter`` was fed (``feed_answer``), with its length."""
        out, status, headers = whole_answer(
            rewriter, response.status_code, response.headers.raw, _DECODED_BODY, listed=False
        )
        extensions = response.extensions
        if status != response.status_code:  # the upstream's reason phrase was for its own status
            extensions = {k: v for k, v in extensions.items() if k != "reason_phrase"}
        return httpx.Response(status, headers=headers + self.extra, content=out, extensions=extensions)


def _error_response(error: ApiError) -> httpx.Response:
    """``error`` as the answer: its status and the OpenAI-style error body (``docs/errors.md``)."""
    return httpx.Response(error.status, headers=[(b"content-type", b"application/json")], content=error.to_bytes())


class _Normalizer:
    """What both transports share: the options, checked once, and the steps of a call that are not I/O."""

    __slots__ = (
        "bounds",
        "keys",
        "max_body_bytes",
        "preserve",
        "reads_any_type",
        "routes",
        "target",
        "think_start",
        "think_tags",
        "wire_api",
    )

    def __init__(
        self,
        provider: str | ProviderRules | None,
        catalog: Catalog | None,
        max_body_bytes: int,
        think_tags: bool | ThinkTags | None,
        think_start: ThinkStart | None,
        preserve_reasoning: bool,
        wire_api: WireApi | None,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        check_options(
            max_body_bytes=max_body_bytes,
            think_tags=think_tags,
            think_start=think_start,
            preserve_reasoning=preserve_reasoning,
            wire_api=wire_api,
            catalog=catalog,
        )
        self.bounds = Bounds(max_event_bytes, max_response_bytes)  # checks both (``check_limits``)
        if catalog is not None and provider is not None:
            raise ValueError("give either a provider or a catalog")
        self.target: Route | Catalog | None = catalog
        if provider is not None:
            rules = provider if isinstance(provider, ProviderRules) else provider_rules(provider)
            self.target = fixed_route(rules, preserve=preserve_reasoning, wire_api=wire_api)
        self.keys = api_keys(catalog) if catalog is not None else {}
        self.max_body_bytes = max_body_bytes
        self.think_tags = think_tags
        self.think_start = think_start
        self.preserve = preserve_reasoning
        self.wire_api = wire_api
        self.routes: dict[str, Route] = {}  # inferred fixed routes, by provider name
        # a route that may be translated reads the body whatever its content-type: its upstream takes only JSON
        self.reads_any_type = catalog is not None or wire_api in WIRE_APIS

    def touches(self, request: httpx.Request) -> bool:
        """Whether ``request`` is a chat completions call to normalize: ``POST`` to a path ending in
        ``/chat/completions`` with a JSON body (a ``content-type`` with ``json``, or none; any, on a route that may
        be translated)."""
        if not is_chat_completions(request.method, request.url.path):
            return False
        if self.reads_any_type:
            return True
        content_type = request.headers.get("content-type")
        return is_json(content_type.encode("latin-1") if content_type is not None else None)

    def route_for(self, url: httpx.URL) -> Route | Catalog:
        """The configured target, or without one the fixed route of the provider the URL's host means
        (``infer_provider``: ``api.deepseek.com`` is ``deepseek``, a loopback host ``local``, any other
        ``generic``)."""
        if self.target is not None:
            return self.target
        name = infer_provider(str(url))
        route = self.routes.get(name)
        if route is None:
            route = fixed_route(provider_rules(name), preserve=self.preserve, wire_api=self.wire_api)
            self.routes[name] = route
        return route

    def outgoing(self, request: httpx.Request, body: bytes) -> _Call:
        """The call for the app's chat completions ``request`` whose whole body is ``body``.

        The request that goes upstream carries the prepared body, ``accept-encoding: identity`` and the app's other
        headers and extensions (timeouts). On a translated wire API it goes to the adapter's path in place of
        ``/chat/completions`` (``/messages``, ``/responses``), its key in the wire API's header; through a catalog,
        to the chosen endpoint's provider (``<base_url>/chat/completions`` or the adapter's path) with that
        provider's key when its ``api_key_env`` is set.

        Raises:
            ApiError: what ``prepare_request`` refuses (400, 413, 503; ``docs/errors.md``).
        """
        prepared = prepare_request(
            body, self.route_for(request.url), headers=request.headers, max_body_bytes=self.max_body_bytes
        )
        route = prepared.route
        adapter = WIRE_APIS.get(route.wire_api)
        drop = _REQUEST_FRAMING
        key = None
        url = request.url
        if route.provider is not None:  # through a catalog: the endpoint's provider is the upstream
            path = adapter.path if adapter is not None else _CHAT_COMPLETIONS
            url = target_url(route.provider.base_url, path.encode(), url.query)
            drop = drop | {b"host"}
            key = self.keys.get(route.provider.name)
        elif adapter is not None:
            url = url.copy_with(path=url.path.rstrip("/").removesuffix(_CHAT_COMPLETIONS) + adapter.path)
        headers = without_headers(request.headers.raw, drop)
        headers.append((b"accept-encoding", b"identity"))
        headers = upstream_headers(headers, adapter, key, translated=adapter is not None)
        out = httpx.Request(request.method, url, headers=headers, content=prepared.body, extensions=request.extensions)
        options = answer_options(prepared, self.think_tags, self.think_start, self.bounds)
        return _Call(out, options, adjustments_header(prepared.adjustments))


class NormalizingTransport(httpx.AsyncBaseTransport):
    """An ``httpx.AsyncBaseTransport`` that normalizes the chat completions calls it carries, for an
    ``httpx.AsyncClient`` (``AsyncOpenAI(http_client=httpx.AsyncClient(transport=NormalizingTransport(...)))``).

    Args:
        transport: the transport that sends the requests (default ``httpx.AsyncHTTPTransport()``); give your own
            for TLS, connection limits, retries or HTTP/2, which a client does not pass to a custom transport.
        provider: the provider whose rules apply (a name of ``numi_mw.PROVIDERS``, or a ``ProviderRules``); ``None``
            infers it from each request's host (``numi_mw.infer_provider``).
        catalog: route each chat completions call through this catalog instead (``numi_mw.load_catalog``): it
            goes to the chosen endpoint's provider, with that provider's key (from the environment variable its
            ``api_key_env`` names, read now) in place of the app's.
        max_body_bytes: request body limit in bytes (a positive ``int``); a larger body gets 413
            ``payload_too_large``.
        think_tags: split ``<think>`` tags out of response content (``response.think_tags_for``; ``None``: on for
            the providers whose servers put them there, such as ``local``).
        think_start: where a stream starts for the think splitter: ``content``, ``reasoning`` or ``auto``
            (``ThinkTags.start``); ``None``: a catalog model's ``think_start``, else ``content``.
        preserve_reasoning: replay reasoning in history where the provider takes it (spec 000 "The Message
            Preparation Filter", with preservation on); ``False`` filters as the table's "preservation disabled"
            rows say. A catalog says it per model.
        wire_api: the wire API the provider speaks: ``openai-chat`` (the default), ``anthropic-messages`` or
            ``openai-responses``; with a native one a call to ``…/chat/completions`` goes to ``…/messages`` or
            ``…/responses`` translated, and its answer comes back as chat completions (``docs/wire-apis.md``). A
            catalog says it per provider.
        max_event_bytes: the most bytes of one SSE event of an answer held (default 16 MiB); past it the stream
            ends with its error event (``docs/security.md``).
        max_response_bytes: the most bytes of one buffered answer held, decoded (default 64 MiB); past it the
            answer is 502 ``upstream_unavailable`` (``docs/security.md``).

    Raises:
        ValueError: ``provider`` is not a known provider name, ``wire_api`` not a known wire API, ``catalog`` not
            a ``Catalog`` or given with ``provider`` or ``wire_api``, ``transport`` not an
            ``httpx.AsyncBaseTransport``, or another option of the wrong type or range (``asgi.check_options``); a
            catalog provider's key that is not visible ASCII once its trailing whitespace is stripped
            (``upstream.api_keys``).

    A call the rules refuse (not JSON, wrong shape, over the limit) is answered with the OpenAI-style error body
    and its status, and never sent (``docs/errors.md``). Errors of the wrapped transport (connect, timeout) are
    raised as they are, but for a stream that breaks off after it started, which ends with the error event.
    """

    def __init__(
        self,
        transport: httpx.AsyncBaseTransport | None = None,
        *,
        provider: str | ProviderRules | None = None,
        catalog: Catalog | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        think_tags: bool | ThinkTags | None = None,
        think_start: ThinkStart | None = None,
        preserve_reasoning: bool = True,
        wire_api: WireApi | None = None,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        if transport is not None and not isinstance(transport, httpx.AsyncBaseTransport):
            raise ValueError(f"transport must be an httpx.AsyncBaseTransport, not {transport!r}")
        self._normalizer = _Normalizer(
            provider,
            catalog,
            max_body_bytes,
            think_tags,
            think_start,
            preserve_reasoning,
            wire_api,
            max_event_bytes,
            max_response_bytes,
        )
        self._transport = transport if transport is not None else httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        normalizer = self._normalizer
        if not normalizer.touches(request):
            return await self._transport.handle_async_request(request)
        try:
            body = await request.aread()
            call = await off_loop(len(body), normalizer.outgoing, request, body)
        except ApiError as error:
            return _error_response(error)
        response = await self._transport.handle_async_request(call.request)
        rewriter = call.rewriter(response)
        if rewriter is None:
            return call.passed(response)
        if isinstance(rewriter, StreamRewriter):
            return call.streamed(response, rewriter, _AsyncStream)
        try:
            size = await feed_answer(response, rewriter)
        except ApiError as error:  # past the rewriter's bound
            return _error_response(error)
        return await off_loop(size, call.whole, response, rewriter)

    async def aclose(self) -> None:
        await self._transport.aclose()


class SyncNormalizingTransport(httpx.BaseTransport):
    """``NormalizingTransport`` for an ``httpx.Client`` (``OpenAI(http_client=httpx.Client(transport=
    SyncNormalizingTransport(...)))``): the same options, checks and answers.

    The name follows httpx's pairs that mark both variants (``SyncByteStream`` and ``AsyncByteStream``): the
    async transport keeps the plain name, so the sync one takes the ``Sync`` prefix.

    Args:
        transport: the transport that sends the requests (default ``httpx.HTTPTransport()``).
        provider, catalog, max_body_bytes, think_tags, think_start, preserve_reasoning, wire_api, max_event_bytes,
            max_response_bytes: as for ``NormalizingTransport``.

    Raises:
        ValueError: as ``NormalizingTransport``; ``transport`` not an ``httpx.BaseTransport``.
    """

    def __init__(
        self,
        transport: httpx.BaseTransport | None = None,
        *,
        provider: str | ProviderRules | None = None,
        catalog: Catalog | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        think_tags: bool | ThinkTags | None = None,
        think_start: ThinkStart | None = None,
        preserve_reasoning: bool = True,
        wire_api: WireApi | None = None,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        if transport is not None and not isinstance(transport, httpx.BaseTransport):
            raise ValueError(f"transport must be an httpx.BaseTransport, not {transport!r}")
        self._normalizer = _Normalizer(
            provider,
            catalog,
            max_body_bytes,
            think_tags,
            think_start,
            preserve_reasoning,
            wire_api,
            max_event_bytes,
            max_response_bytes,
        )
        self._transport = transport if transport is not None else httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        normalizer = self._normalizer
        if not normalizer.touches(request):
            return self._transport.handle_request(request)
        try:
            call = normalizer.outgoing(request, request.read())
        except ApiError as error:
            return _error_response(error)
        response = self._transport.handle_request(call.request)
        rewriter = call.rewriter(response)
        if rewriter is None:
            return call.passed(response)
        if isinstance(rewriter, StreamRewriter):
            return call.streamed(response, rewriter, _SyncStream)
        try:
            feed_answer_sync(response, rewriter)
        except ApiError as error:  # past the rewriter's bound
            return _error_response(error)
        return call.whole(response, rewriter)

    def close(self) -> None:
        self._transport.close()


class _AsyncStream(httpx.AsyncByteStream):
    """The rewritten body of a streamed answer: each upstream chunk through the rewriter as it arrives, the
    rewriter's ``finish`` at the end and its ``fail`` (the error event) when the upstream breaks off
    (``upstream.relay``); closing it closes the upstream response."""

    def __init__(self, upstream: httpx.Response, rewriter: StreamRewriter) -> None:
        self._upstream = upstream
        self._rewriter = rewriter

    def __aiter__(self) -> AsyncIterator[bytes]:
        return relay(self._upstream, self._rewriter)

    async def aclose(self) -> None:
        await self._upstream.aclose()


class _SyncStream(httpx.SyncByteStream):
    """``_AsyncStream`` for the sync transport (``upstream.relay_sync``)."""

    def __init__(self, upstream: httpx.Response, rewriter: StreamRewriter) -> None:
        self._upstream = upstream
        self._rewriter = rewriter

    def __iter__(self) -> Iterator[bytes]:
        return relay_sync(self._upstream, self._rewriter)

    def close(self) -> None:
        self._upstream.close()
