"""``create_app``: the sidecar's Starlette app with one shared ``httpx.AsyncClient``.

The sidecar's ``/v1`` stands for the upstream base URL (which may carry a path, e.g.
``https://openrouter.ai/api/v1``): ``/v1/chat/completions`` reaches ``<base>/chat/completions``. Chat
completions requests are normalized (``numi_mw.core.request``) and their successful responses too
(``numi_mw.core.response``: SSE event by event, JSON bodies whole); every other method and path, and upstream
errors, are forwarded as is. Streams go back event by event as they arrive, never buffered.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any
from urllib.parse import unquote_to_bytes

import httpx
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from numi_mw.asgi import HOP_BY_HOP, connection_tokens, without_headers
from numi_mw.core.catalog import Catalog, Provider, endpoints_listing, models_listing
from numi_mw.core.codec import encode
from numi_mw.core.errors import ApiError, payload_too_large
from numi_mw.core.providers import ProviderRules, get_provider, infer_provider
from numi_mw.core.reasoning_text import ThinkStart, ThinkTags
from numi_mw.core.request import (
    DEFAULT_MAX_BODY_BYTES,
    PreparedRequest,
    is_chat_completions,
    prepare_request,
    prepare_routed_request,
    rules_for,
)
from numi_mw.core.response import ResponseOptions, ResponseRewriter, response_mode, think_tags_for

log = logging.getLogger("numi_mw.proxy")

DEFAULT_TIMEOUT = httpx.Timeout(600.0, connect=10.0)
"""Upstream timeouts in seconds: 10 to connect, 600 for each read (reasoning can take minutes to start)."""

UPSTREAM_LIMITS = httpx.Limits(max_connections=None, max_keepalive_connections=100)
"""Upstream connections: no cap (httpx's default of 100 would make the 101st concurrent stream wait for a free
connection, up to the read timeout, and then fail with 504); up to 100 idle ones are kept for reuse."""

_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
_DROP_REQUEST = HOP_BY_HOP | {b"host", b"content-length", b"accept-encoding"}
_DROP_REWRITTEN = HOP_BY_HOP | {b"content-length", b"content-encoding"}
_DECODABLE = frozenset(("identity", "gzip", "deflate", "x-gzip", ""))
"""Content encodings httpx decodes without optional packages; a response in another one is not rewritten."""


def _error_response(error: ApiError) -> Response:
    return Response(error.to_bytes(), status_code=error.status, media_type="application/json")


def _upstream_failure(status: int, message: str) -> ApiError:
    """502 ``upstream_unavailable`` or 504 ``upstream_timeout`` (DESIGN.md error table)."""
    return ApiError(status, "upstream_timeout" if status == 504 else "upstream_unavailable", message)


def _upstream_error(status: int, message: str) -> Response:
    """The response for ``_upstream_failure``."""
    return _error_response(_upstream_failure(status, message))


def _no_cookies() -> CookieJar:
    """A cookie jar that accepts no cookie, so the shared client never carries one between requests.

    Passed to ``httpx.AsyncClient`` as a ``CookieJar`` (an ``httpx.Cookies`` would be copied into a new jar
    with the default policy).
    """
    return CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))


class _Sidecar:
    """Configuration and the shared client; per-request state lives in ``handle``'s locals."""

    def __init__(
        self,
        upstream: Provider | None,
        catalog: Catalog | None,
        keys: dict[str, str],
        max_body_bytes: int,
        timeout: httpx.Timeout,
        transport: httpx.AsyncBaseTransport | None,
        think_tags: bool | ThinkTags | None,
        think_start: ThinkStart,
    ) -> None:
        self.upstream = upstream
        self.catalog = catalog
        self.keys = keys
        self.default = upstream if upstream is not None else catalog.providers[0] if catalog else None
        self.max_body_bytes = max_body_bytes
        self.timeout = timeout
        self.transport = transport
        self.think_tags = think_tags
        self.think_start = think_start
        self.client: httpx.AsyncClient | None = None

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        async with httpx.AsyncClient(
            timeout=self.timeout,
            cookies=_no_cookies(),
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

    @staticmethod
    def target(base_url: str, raw_path: bytes, query: bytes) -> httpx.URL:
        """The upstream URL for a sidecar request path, as sent (still percent-encoded): a leading ``/v1`` stands
        for the base URL's path, and the rest is appended to it byte for byte.

        Raises:
            ApiError: 400 ``invalid_request`` for a path with a dot segment (``.``, ``..`` or their
                percent-encoded forms), which could climb out of the base URL's path.
        """
        segments = raw_path.split(b"/")
        if any(unquote_to_bytes(segment) in (b".", b"..") for segment in segments):
            raise ApiError(400, "invalid_request", "The request path may not contain '.' or '..' segments.", None)
        if raw_path == b"/v1" or raw_path.startswith(b"/v1/"):
            raw_path = raw_path[3:]
        base = httpx.URL(base_url.rstrip("/"))
        url = base.copy_with(raw_path=base.raw_path.rstrip(b"/") + raw_path)
        return url.copy_with(query=query) if query else url

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
        model = self.catalog.model(tail.removesuffix("/endpoints"))
        if model is None:
            return _error_response(
                ApiError(404, "model_not_found", f'No model "{tail.removesuffix("/endpoints")}" in the catalog.')
            )
        return _json_response(endpoints_listing(model))

    async def _prepare(self, request: Request) -> tuple[PreparedRequest, Provider, ProviderRules]:
        """Read and prepare a chat completions body; returns it with its provider and rules."""
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            raise payload_too_large(self.max_body_bytes)
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > self.max_body_bytes:
                raise payload_too_large(self.max_body_bytes)
            chunks.append(chunk)
        body = b"".join(chunks)
        if self.catalog is not None:
            prepared, decision = prepare_routed_request(
                body, self.catalog, headers=dict(request.headers), max_body_bytes=self.max_body_bytes
            )
            return prepared, decision.provider, decision.rules
        assert self.upstream is not None
        rules = rules_for(self.upstream)
        return prepare_request(body, rules, max_body_bytes=self.max_body_bytes), self.upstream, rules

    async def handle(self, request: Request) -> Response:
        client = self.client
        if client is None or self.default is None:  # pragma: no cover - only without lifespan
            raise RuntimeError("the sidecar's lifespan has not started")
        method = request.method
        listing = self._listing(method, request.url.path)
        if listing is not None:
            return listing
        content: bytes | AsyncIterator[bytes]
        options: ResponseOptions | None = None
        provider = self.default
        if is_chat_completions(method, request.url.path):
            try:
                prepared, provider, rules = await self._prepare(request)
            except ApiError as error:
                return _error_response(error)
            content = prepared.body
            think = think_tags_for(rules, self.think_tags, self.think_start)
            options = ResponseOptions(exclude=prepared.controls.exclude, think=think)
        else:
            content = request.stream()
        headers = without_headers(request.headers.raw, _DROP_REQUEST | connection_tokens(request.headers.raw))
        headers.append((b"accept-encoding", b"identity"))
        key = self.keys.get(provider.name)
        if key is not None:
            headers = [(k, v) for k, v in headers if k != b"authorization"]
            headers.append((b"authorization", b"Bearer " + key.encode("latin-1")))
        try:
            url = self.target(
                provider.base_url,
                request.scope.get("raw_path") or request.url.path.encode(),
                request.scope.get("query_string", b""),
            )
        except ApiError as error:
            return _error_response(error)
        upstream_request = client.build_request(method, url, headers=headers, content=content)
        try:
            upstream = await client.send(upstream_request, stream=True)
        except httpx.TimeoutException:
            return _upstream_error(504, "The upstream did not answer in time; try again later.")
        except httpx.RequestError as exc:
            log.warning("upstream unreachable: %s", exc)
            return _upstream_error(502, "The upstream could not be reached; try again later.")
        mode = response_mode(upstream.status_code, upstream.headers.get("content-type"))
        if upstream.headers.get("content-encoding", "identity").lower() not in _DECODABLE:
            mode = "pass"  # an encoding httpx cannot decode here: forward it untouched rather than corrupt it
        if options is None or mode == "pass":
            response = StreamingResponse(
                _relay(upstream), status_code=upstream.status_code, background=BackgroundTask(upstream.aclose)
            )
            response.raw_headers = without_headers(upstream.headers.raw, HOP_BY_HOP)
            return response
        rewriter = ResponseRewriter(options, mode)
        response_headers = without_headers(upstream.headers.raw, _DROP_REWRITTEN)
        if mode == "json":
            try:
                body = await upstream.aread()
            except httpx.TimeoutException:
                return _upstream_error(504, "The upstream did not finish its answer in time; try again.")
            except httpx.RequestError as exc:
                log.warning("upstream body unusable: %s", exc)
                return _upstream_error(502, "The upstream response ended early or could not be decoded.")
            finally:
                await upstream.aclose()
            body = rewriter.feed(body) + rewriter.finish()
            response_headers.append((b"content-length", str(len(body)).encode()))
            plain = Response(body, status_code=upstream.status_code)
            plain.raw_headers = response_headers
            return plain
        response = StreamingResponse(
            _relay_rewritten(upstream, rewriter),
            status_code=upstream.status_code,
            background=BackgroundTask(upstream.aclose),
        )
        response.raw_headers = response_headers
        return response


async def _relay(upstream: httpx.Response) -> AsyncIterator[bytes]:
    """Yield the upstream body chunk by chunk as it arrives; close the upstream response on every path."""
    try:
        async for chunk in upstream.aiter_raw():
            yield chunk
    except httpx.RequestError as exc:
        log.warning("upstream stream ended early: %s", exc)
    finally:
        await upstream.aclose()


async def _relay_rewritten(upstream: httpx.Response, rewriter: ResponseRewriter) -> AsyncIterator[bytes]:
    """Yield the normalized SSE body event by event as the upstream sends it; close the upstream on every path.

    An identity-encoded body is read raw (httpx's decoding layer would only copy it); gzip and deflate are
    decoded first."""
    encoded = upstream.headers.get("content-encoding", "identity").lower() not in ("identity", "")
    try:
        async for chunk in upstream.aiter_bytes() if encoded else upstream.aiter_raw():
            out = rewriter.feed(chunk)
            if out:
                yield out
        tail = rewriter.finish()
        if tail:
            yield tail
    except httpx.RequestError as exc:
        log.warning("upstream stream ended early: %s", exc)
        yield rewriter.fail(_broken_stream(exc))
    finally:
        await upstream.aclose()


def _broken_stream(exc: httpx.RequestError) -> ApiError:
    """The error event's error for a stream the upstream broke off after it started (the status was sent)."""
    if isinstance(exc, httpx.TimeoutException):
        return _upstream_failure(504, "The upstream stopped sending the stream in time; the answer is incomplete.")
    if isinstance(exc, httpx.DecodingError):
        return _upstream_failure(502, "The upstream stream could not be decoded; the answer is incomplete.")
    return _upstream_failure(502, "The upstream stream ended early; the answer is incomplete.")


def _json_response(data: Any) -> Response:
    return Response(encode(data), media_type="application/json")


def api_keys(catalog: Catalog) -> dict[str, str]:
    """The API key of each catalog provider whose ``api_key_env`` names a set environment variable."""
    keys: dict[str, str] = {}
    for provider in catalog.providers:
        if provider.api_key_env and os.environ.get(provider.api_key_env):
            keys[provider.name] = os.environ[provider.api_key_env]
    return keys


def create_app(
    upstream: str | None = None,
    *,
    provider: str | None = None,
    catalog: Catalog | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
    transport: httpx.AsyncBaseTransport | None = None,
    think_tags: bool | ThinkTags | None = None,
    think_start: ThinkStart = "content",
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
        timeout: upstream timeouts in seconds (a read timeout applies between chunks).
        transport: an ``httpx`` transport for the upstreams (tests); the default opens real connections.
        think_tags: split ``<think>`` tags out of response content: ``None`` for the provider's default (on for
            ``local``), ``True``/``False`` to force it, or a ``ThinkTags`` with your own tag families.
        think_start: where a stream starts for the think splitter (``reasoning_text.ThinkTags.start``).

    Raises:
        ValueError: neither or both of ``upstream`` and ``catalog``; ``provider`` is not a known provider name.

    Errors reach the client as the OpenAI-style error body: 400 for bad chat completions bodies or an effort
    no endpoint accepts, 413 over the body limit, 503 when strict matching leaves no endpoint, 502
    ``upstream_unavailable``, 504 ``upstream_timeout``. An upstream's own error response is passed through
    unchanged.
    """
    if (upstream is None) == (catalog is None):
        raise ValueError("give either an upstream base URL or a catalog")
    single: Provider | None = None
    if upstream is not None:
        name = get_provider(provider if provider is not None else infer_provider(upstream)).name
        single = Provider(name=name, base_url=upstream)
    sidecar = _Sidecar(
        single,
        catalog,
        api_keys(catalog) if catalog is not None else {},
        max_body_bytes,
        timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout),
        transport,
        think_tags,
        think_start,
    )
    app = Starlette(
        routes=[Route("/{path:path}", sidecar.handle, methods=_METHODS)],
        lifespan=sidecar.lifespan,
    )
    app.state.sidecar = sidecar
    return app
