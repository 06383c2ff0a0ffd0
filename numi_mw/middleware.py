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
from numi_mw.core.response import ResponseOptions, ResponseRewriter, response_mode, think_tags_for


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

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_chat_completions(scope["method"], scope["path"]) or not _is_json(scope):
            await self.app(scope, receive, send)
            return
        await _RequestResponder(self, scope, receive, send).run()


def _is_json(scope: Scope) -> bool:
    for key, value in scope["headers"]:
        if key == b"content-type":
            return b"json" in value.lower()
    return True


class _RequestResponder:
    """The per-request state of ``ReasoningMiddleware`` (the Starlette ``GZipResponder`` pattern)."""

    def __init__(self, mw: ReasoningMiddleware, scope: Scope, receive: Receive, send: Send) -> None:
        self.mw = mw
        self.scope = scope
        self.receive = receive
        self.send = send
        self.replayed = False
        self.body = b""
        self.options = ResponseOptions()
        self.rewriter: ResponseRewriter | None = None
        self.held: list[bytes] = []
        self.start: Message = {}

    async def run(self) -> None:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.mw.max_body_bytes:
                await send_error(self.send, payload_too_large(self.mw.max_body_bytes))
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        try:
            prepared = prepare_request(b"".join(chunks), self.mw.rules, max_body_bytes=self.mw.max_body_bytes)
        except ApiError as error:
            await send_error(self.send, error)
            return
        self.body = prepared.body
        self.options = ResponseOptions(exclude=prepared.controls.exclude, think=self.mw.think)
        scope = self.scope
        if prepared.changed:
            headers = [(k, v) for k, v in scope["headers"] if k != b"content-length"]
            headers.append((b"content-length", str(len(self.body)).encode()))
            scope = {**scope, "headers": headers}
        await self.mw.app(scope, self.replay, self.send_normalized)

    async def send_normalized(self, message: Message) -> None:
        """Normalize the wrapped app's response: SSE event by event, a JSON body whole (``core.response``)."""
        kind = message["type"]
        if kind == "http.response.start":
            content_type = None
            for key, value in message.get("headers", []):
                if key.lower() == b"content-type":
                    content_type = value.decode("latin-1")
            mode = response_mode(message["status"], content_type)
            if mode == "pass":
                await self.send(message)
                return
            self.rewriter = ResponseRewriter(self.options, mode)
            headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"content-length"]
            self.start = {**message, "headers": headers}
            if mode == "sse":
                await self.send(self.start)
            return
        rewriter = self.rewriter
        if kind != "http.response.body" or rewriter is None:
            await self.send(message)
            return
        more = message.get("more_body", False)
        if rewriter.mode == "json":
            self.held.append(message.get("body", b""))
            if more:
                return
            out = rewriter.completion(self.held[0] if len(self.held) == 1 else b"".join(self.held))
            start = dict(self.start)
            start["headers"] = [*start["headers"], (b"content-length", str(len(out)).encode())]
            await self.send(start)
            await self.send({"type": "http.response.body", "body": out, "more_body": False})
            return
        out = rewriter.feed(message.get("body", b""))
        if not more:
            out += rewriter.finish()
        if out or not more:
            await self.send({"type": "http.response.body", "body": out, "more_body": more})

    async def replay(self) -> Message:
        """Give the (rewritten) body once, then delegate to the original ``receive``."""
        if self.replayed:
            return await self.receive()
        self.replayed = True
        return {"type": "http.request", "body": self.body, "more_body": False}
