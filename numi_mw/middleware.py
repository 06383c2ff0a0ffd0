"""``ReasoningMiddleware``: pure ASGI middleware that normalizes chat completions requests and responses.

Mount it in any ASGI app (Starlette, FastAPI). It rewrites the body of ``POST …/chat/completions`` requests
with a JSON body through ``numi_mw.core.request.prepare_request`` and fixes ``content-length``, then
normalizes the app's successful response through ``numi_mw.core.response`` (an SSE stream event by event, never
buffered; a JSON body whole). Everything else (other paths and methods, websockets, lifespan, non-JSON bodies,
error responses) passes through untouched.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from numi_mw.asgi import send_error
from numi_mw.core.errors import ApiError, payload_too_large
from numi_mw.core.providers import ProviderRules, get_provider
from numi_mw.core.reasoning_text import ThinkStart, ThinkTags
from numi_mw.core.request import DEFAULT_MAX_BODY_BYTES, is_chat_completions, prepare_request
from numi_mw.core.response import (
    Mode,
    ResponseOptions,
    ResponseRewriter,
    normalize_completion_body,
    response_mode,
    think_tags_for,
)


class ReasoningMiddleware:
    """Normalize reasoning in chat completions requests before the wrapped app sees them.

    Args:
        app: the wrapped ASGI application.
        provider: the target provider whose rules apply (``openrouter``, ``ppq``, ``openai``, ``inception``,
            ``anthropic``, ``zai``, ``deepseek``, ``local``, ``generic``), or a ``ProviderRules``.
        max_body_bytes: request body limit in bytes; a larger body gets 413 ``payload_too_large``.
        think_tags: split ``<think>`` tags out of response content: ``None`` for the provider's default (on for
            ``local``), ``True``/``False`` to force it, or a ``ThinkTags`` with your own tag families.
        think_start: where a stream starts for the think splitter (``reasoning_text.ThinkTags.start``).

    Raises:
        ValueError: ``provider`` is not a known provider name.

    Bad requests on a chat completions path (not JSON, wrong shape) get the OpenAI-style error body with
    status 400 and never reach the wrapped app.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        provider: str | ProviderRules = "generic",
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        think_tags: bool | ThinkTags | None = None,
        think_start: ThinkStart = "content",
    ) -> None:
        self.app = app
        self.rules = provider if isinstance(provider, ProviderRules) else get_provider(provider)
        self.max_body_bytes = max_body_bytes
        self.think = think_tags_for(self.rules, think_tags, think_start)
        self._including = ResponseOptions(exclude=False, think=self.think)
        self._excluding = ResponseOptions(exclude=True, think=self.think)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_chat_completions(scope["method"], scope["path"]):
            await self.app(scope, receive, send)
            return
        is_json, accepts_encoding = _scan_headers(scope)
        if not is_json:
            await self.app(scope, receive, send)
            return
        body = await self._read_body(receive, send)
        if body is None:
            return
        try:
            prepared = prepare_request(body, self.rules, max_body_bytes=self.max_body_bytes)
        except ApiError as error:
            await send_error(send, error)
            return
        if prepared.changed:  # the app now gets the whole body at once: its length, no chunked framing
            headers = [(k, v) for k, v in scope["headers"] if k not in _REQUEST_FRAMING]
            headers.append((b"content-length", str(len(prepared.body)).encode()))
            scope = {**scope, "headers": headers}
        elif accepts_encoding:
            scope = {**scope, "headers": [(k, v) for k, v in scope["headers"] if k != b"accept-encoding"]}
        options = self._excluding if prepared.controls.exclude else self._including
        await self.app(scope, _Replay(prepared.body, receive), _ResponseNormalizer(options, send))

    async def _read_body(self, receive: Receive, send: Send) -> bytes | None:
        """The whole request body, or ``None`` when the client left or the body is over the limit (then the
        413 error has been sent)."""
        message = await receive()
        if message["type"] != "http.request":
            return None
        body: bytes = message.get("body", b"")
        if message.get("more_body", False):
            chunks = [body]
            size = len(body)
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    return None
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > self.max_body_bytes:
                    break
                chunks.append(chunk)
                if not message.get("more_body", False):
                    return b"".join(chunks)
        elif len(body) <= self.max_body_bytes:
            return body
        await send_error(send, payload_too_large(self.max_body_bytes))
        return None


_REQUEST_FRAMING = (b"content-length", b"transfer-encoding", b"accept-encoding")
"""Request headers a chat completions request loses on its way to the app: the framing of a rewritten body,
and ``accept-encoding``, so that a compression middleware inside this one leaves the answer readable."""


def _scan_headers(scope: Scope) -> tuple[bool, bool]:
    """One pass over the request headers: whether the body is JSON (the first ``content-type`` has ``json``,
    or there is none) and whether there is an ``accept-encoding`` header."""
    content_type: bytes | None = None
    accepts_encoding = False
    for key, value in scope["headers"]:
        if key == b"content-type":
            if content_type is None:
                content_type = value
        elif key == b"accept-encoding":
            accepts_encoding = True
    return content_type is None or b"json" in content_type.lower(), accepts_encoding


class _Replay:
    """The wrapped app's ``receive``: the (rewritten) body once, then the original ``receive``."""

    __slots__ = ("body", "receive")

    def __init__(self, body: bytes, receive: Receive) -> None:
        self.body: bytes | None = body
        self.receive = receive

    async def __call__(self) -> Message:
        body = self.body
        if body is None:
            return await self.receive()
        self.body = None
        return {"type": "http.request", "body": body, "more_body": False}


class _ResponseNormalizer:
    """The wrapped app's ``send``: its successful response normalized by ``core.response`` (an SSE stream event
    by event, a JSON body whole; anything else untouched)."""

    __slots__ = ("held", "mode", "options", "rewriter", "send", "start")

    def __init__(self, options: ResponseOptions, send: Send) -> None:
        self.options = options
        self.send = send
        self.mode: Mode | None = None
        self.rewriter: ResponseRewriter | None = None
        self.start: Message = {}
        self.held: list[bytes] = []

    async def __call__(self, message: Message) -> None:
        mode = self.mode
        if mode is None:
            if message["type"] == "http.response.start":
                self._begin(message)
                if self.mode != "json":
                    await self.send(self.start)
                return
        elif mode != "pass" and message["type"] == "http.response.body":
            if mode == "json":
                await self._json_body(message)
            else:
                await self._sse_body(message)
            return
        await self.send(message)

    def _begin(self, message: Message) -> None:
        content_type = None
        encoded = False
        for key, value in message.get("headers", ()):
            name = key.lower()
            if name == b"content-type":
                content_type = value.decode("latin-1")
            elif name == b"content-encoding":
                encoded = value.strip().lower() not in (b"identity", b"")
        # a compressed body cannot be read here: it goes out as the app sent it
        self.mode = mode = "pass" if encoded else response_mode(message["status"], content_type)
        self.start = message
        if mode == "sse":
            self.rewriter = ResponseRewriter(self.options, mode)
            headers = [(k, v) for k, v in message.get("headers", ()) if k.lower() != b"content-length"]
            self.start = {**message, "headers": headers}

    async def _json_body(self, message: Message) -> None:
        chunk = message.get("body", b"")
        if message.get("more_body", False):
            self.held.append(chunk)
            return
        body = b"".join([*self.held, chunk]) if self.held else chunk
        out = normalize_completion_body(body, self.options)
        if out is chunk:  # unchanged, and it came in one message: both messages go on as they came
            await self.send(self.start)
            await self.send(message)
            return
        start = self.start
        if out is not body:
            headers = [(k, v) for k, v in start.get("headers", ()) if k.lower() != b"content-length"]
            headers.append((b"content-length", str(len(out)).encode()))
            start = {**start, "headers": headers}
        await self.send(start)
        await self.send({"type": "http.response.body", "body": out, "more_body": False})

    async def _sse_body(self, message: Message) -> None:
        rewriter = self.rewriter
        assert rewriter is not None
        more = message.get("more_body", False)
        out = rewriter.feed(message.get("body", b""))
        if not more:
            out += rewriter.finish()
        if out or not more:
            await self.send({"type": "http.response.body", "body": out, "more_body": more})
