"""``ReasoningMiddleware``: pure ASGI middleware that normalizes chat completions requests and responses.

Mount it in any ASGI app (Starlette, FastAPI). It rewrites the body of ``POST …/chat/completions`` requests
with a JSON body through ``numi_mw.core.request.prepare_request`` and fixes ``content-length``, then
normalizes the app's successful response through the rewriter ``numi_mw.core.response.choose_rewriter`` picks
(an SSE stream event by event, never buffered; a JSON body whole). Everything else (other paths and methods,
websockets, lifespan, non-JSON bodies, error responses) passes through untouched. ``docs/middleware.md`` has
the details.
"""

from __future__ import annotations

import time
from functools import partial

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from numi_mw.asgi import (
    OFF_LOOP_BYTES,
    adjustments_header,
    check_options,
    is_json,
    off_loop,
    read_body,
    send_error,
    with_length,
)
from numi_mw.core.adapters import WIRE_APIS
from numi_mw.core.errors import ApiError
from numi_mw.core.providers import ProviderRules, WireApi, provider_rules
from numi_mw.core.replay import NO_CONTEXT, StreamStates, answer_states, credential_scope, missing_in_body
from numi_mw.core.request import DEFAULT_MAX_BODY_BYTES, is_chat_completions, prepare_request
from numi_mw.core.response import (
    DEFAULT_MAX_EVENT_BYTES,
    DEFAULT_MAX_RESPONSE_BYTES,
    BodyRewriter,
    Bounds,
    ResponseOptions,
    Rewriter,
    StreamRewriter,
    choose_rewriter,
    response_options,
    think_tags_for,
)
from numi_mw.core.routing import fixed_route
from numi_mw.core.think import ThinkStart, ThinkTags
from numi_mw.core.usage import usage_rules
from numi_mw.replay_store import ReplayStore, replay_store_option, restored_header


class ReasoningMiddleware:
    """Normalize reasoning in chat completions requests before the wrapped app sees them, and in its answers.

    Args:
        app: the wrapped ASGI application.
        provider: the target provider whose rules apply (a name of ``numi_mw.PROVIDERS``: ``openrouter``,
            ``ppq``, ``openai``, ``inception``, ``anthropic``, ``zai``, ``deepseek``, ``local``, ``generic``), or
            a ``ProviderRules``.
        max_body_bytes: request body limit in bytes (a positive ``int``); a larger body gets 413
            ``payload_too_large``.
        think_tags: split ``<think>`` tags out of response content (``response.think_tags_for``).
        think_start: where a stream starts for the think splitter: ``content``, ``reasoning`` or ``auto``
            (``ThinkTags.start``).
        preserve_reasoning: replay reasoning in history where the provider takes it (spec 000 "The Message
            Preparation Filter", with preservation on); ``False`` filters as the table's "preservation
            disabled" rows say.
        wire_api: the wire API the app forwards to: ``openai-chat`` (default), ``anthropic-messages`` or
            ``openai-responses``. With a native one the app receives the translated request body (which it
            sends to ``/v1/messages`` or ``/v1/responses``) and its native answer goes back to the client as a
            chat completion (``docs/wire-apis.md``).
        max_event_bytes: the most bytes of one SSE event of the app's answer held (default 16 MiB); past it the
            stream ends with its error event and the rest of the app's body is dropped (``docs/security.md``).
        max_response_bytes: the most bytes of one buffered JSON answer of the app held (default 64 MiB); past it
            the client gets 502 ``upstream_unavailable`` (``docs/security.md``).
        replay_store: keep the opaque reasoning state of the app's answers, buffered and streamed, and put it
            back on later requests whose history lost it (``docs/replay-store.md``): ``None`` (off, the default), a
            ``sqlite:///PATH`` or ``redis://HOST:PORT/DB`` URL opened with the default bounds, or a ``ReplayStore``
            (``numi_mw.replay_store.open_replay_store`` with its own time to live, size bound and key). The count
            of turns restored goes in the ``x-numi-mw-restored`` response header.

    Raises:
        ValueError: ``provider`` is not a known provider name, ``wire_api`` not a known wire API, or another
            option has the wrong type or range (``asgi.check_options``); a replay store URL that
            ``replay_store.open_replay_store`` refuses.

    Bad requests on a chat completions path (not JSON, wrong shape) get the OpenAI-style error body with
    status 400 and never reach the wrapped app (``docs/errors.md``).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        provider: str | ProviderRules = "generic",
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        think_tags: bool | ThinkTags | None = None,
        think_start: ThinkStart = "content",
        preserve_reasoning: bool = True,
        wire_api: WireApi = "openai-chat",
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        replay_store: str | ReplayStore | None = None,
    ) -> None:
        check_options(
            max_body_bytes=max_body_bytes,
            think_tags=think_tags,
            think_start=think_start,
            preserve_reasoning=preserve_reasoning,
            wire_api=wire_api,
        )
        self.bounds = Bounds(max_event_bytes, max_response_bytes)  # checks both (``check_limits``)
        self.replay = replay_store_option(replay_store)
        self.app = app
        self.rules = provider if isinstance(provider, ProviderRules) else provider_rules(provider)
        self.route = fixed_route(self.rules, preserve=preserve_reasoning, wire_api=wire_api)
        self.translated = wire_api in WIRE_APIS
        self.max_body_bytes = max_body_bytes
        self.think = think_tags_for(self.rules, think_tags, think_start)
        self.usage = usage_rules(self.rules)  # the provider's row; no catalog, so no prices and no cost from them
        self._including = ResponseOptions(exclude=False, think=self.think, bounds=self.bounds, usage=self.usage)
        self._excluding = ResponseOptions(exclude=True, think=self.think, bounds=self.bounds, usage=self.usage)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_chat_completions(scope["method"], scope["path"]):
            await self.app(scope, receive, send)
            return
        is_json, accepts_encoding, declared = _scan_headers(scope)
        if not is_json and not self.translated:  # a translated route's handler can only take the native body
            await self.app(scope, receive, send)
            return
        try:
            body = await read_body(receive, self.max_body_bytes, declared)
            if body is None:  # the client left
                return
            tenant: str | None = None
            context = NO_CONTEXT
            found: dict[str, bytes] | None = None
            if self.replay is not None:  # the turns whose opaque state the client dropped, looked up
                tenant = credential_scope(_credentials(scope["headers"]))
                keys, context = await off_loop(len(body), missing_in_body, body)
                found = await self.replay.lookup(tenant, keys)
            if len(body) < OFF_LOOP_BYTES:  # off_loop's own test, here without its coroutine (and partial)
                prepared = prepare_request(body, self.route, max_body_bytes=self.max_body_bytes, restored=found)
            else:
                prepare = partial(prepare_request, body, self.route, max_body_bytes=self.max_body_bytes, restored=found)
                prepared = await off_loop(len(body), prepare)
        except ApiError as error:
            await send_error(send, error)
            return
        if prepared.changed:  # the app now gets the whole body at once: its length, no chunked framing
            native = b"application/json" if prepared.translation is not None else None  # the JSON numi_mw wrote
            headers = with_length(
                scope["headers"], len(prepared.body), _REQUEST_FRAMING, lowered=True, content_type=native
            )
            scope = {**scope, "headers": headers}
        elif accepts_encoding:
            scope = {**scope, "headers": [(k, v) for k, v in scope["headers"] if k != b"accept-encoding"]}
        extensions = scope.get("extensions")
        if extensions and not _BODY_BY_OTHER_MEANS.isdisjoint(extensions):
            scope = {**scope, "extensions": {k: v for k, v in extensions.items() if k not in _BODY_BY_OTHER_MEANS}}
        if prepared.translation is None:
            options = self._excluding if prepared.controls.exclude else self._including
        else:
            options = response_options(
                prepared.translation,
                prepared.controls.exclude,
                self.think,
                created=int(time.time()),
                bounds=self.bounds,
                usage=self.usage,
            )
        extra = None
        if prepared.adjustments or prepared.restored:
            extra = adjustments_header(prepared.adjustments) + restored_header(prepared.restored)
        remember = None
        if self.replay is not None and tenant is not None:
            remember = _Remember(self.replay, tenant, context)
        await self.app(scope, _Replay(prepared.body, receive), _NormalizingSend(options, send, extra, remember))


class _Remember:
    """Keep the opaque state of a chat completion's choices in the replay store, under the request's credential
    scope: of a buffered answer (``replay.answer_states``), or of a stream fed as it goes to the client
    (``replay.StreamStates``), kept before its last message goes out; keyed after ``context``, the
    ``replay.turn_context`` of the request's last message (``replay.missing_in_body``)."""

    __slots__ = ("context", "replay", "stream", "tenant")

    def __init__(self, replay: ReplayStore, tenant: str, context: str) -> None:
        self.replay = replay
        self.tenant = tenant
        self.context = context
        self.stream = StreamStates(context)

    async def __call__(self, body: bytes) -> None:
        await self.replay.keep(self.tenant, await off_loop(len(body), answer_states, body, self.context))

    async def stream_ended(self) -> None:
        """Keep what the stream's bytes (``stream.feed``) carried; called before its last message goes out."""
        await self.replay.keep(self.tenant, self.stream.states())


def _credentials(headers: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """The request's ``authorization`` and ``x-api-key`` values (the first of each), for its replay scope."""
    found: dict[str, str] = {}
    for key, value in headers:
        if key in (b"authorization", b"x-api-key") and key.decode() not in found:
            found[key.decode()] = value.decode("latin-1")
    return found


_REQUEST_FRAMING = frozenset((b"content-length", b"transfer-encoding", b"accept-encoding"))
"""Request headers a rewritten chat completions request loses on its way to the app: its framing, and
``accept-encoding``, so that a compression middleware inside this one leaves the answer readable."""


_BODY_BY_OTHER_MEANS = frozenset(("http.response.pathsend", "http.response.zerocopysend"))
"""ASGI extensions whose messages carry an answer's body instead of ``http.response.body`` ones: a chat completions
request reaches the app without them, so that its answer comes in body messages numi_mw reads (Starlette's
``FileResponse`` then sends the file that way), as ``accept-encoding`` goes so that it comes uncompressed."""


def _scan_headers(scope: Scope) -> tuple[bool, bool, bytes | None]:
    """One pass over the request headers: whether the body is JSON (the first ``content-type`` has ``json``, or
    there is none), whether there is an ``accept-encoding`` header, and the ``content-length`` value."""
    content_type: bytes | None = None
    accepts_encoding = False
    declared: bytes | None = None
    for key, value in scope["headers"]:
        if key == b"content-type":
            if content_type is None:
                content_type = value
        elif key == b"accept-encoding":
            accepts_encoding = True
        elif key == b"content-length":
            declared = value
    return is_json(content_type), accepts_encoding, declared


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


class _NormalizingSend:
    """The wrapped app's ``send``: its response through the rewriter ``choose_rewriter`` picks at the start (an
    SSE stream event by event, a JSON body whole), or untouched when it picks none. ``extra`` headers (the
    ``x-numi-mw-adjustments`` and ``x-numi-mw-restored`` ones, or none) go on the response start; ``remember``,
    with a replay store, is given a successful JSON body before it goes on, and a successful stream as it goes
    (kept before its last message). Past a bound of the rewriter (its ``feed``
    raises ``ApiError``) a stream ends with its error event, a JSON body becomes the error response, and the rest
    of the app's body is dropped."""

    __slots__ = (
        "ended",
        "extra",
        "options",
        "remember",
        "send",
        "size",
        "split",
        "start",
        "started",
        "stream",
        "whole",
    )

    start: Message  # set by the answer's start when a rewriter was chosen, with size and split for a JSON body
    size: int
    split: bool

    def __init__(
        self,
        options: ResponseOptions,
        send: Send,
        extra: list[tuple[bytes, bytes]] | None = None,
        remember: _Remember | None = None,
    ) -> None:
        self.options = options
        self.remember = remember
        self.send = send
        self.extra = extra
        self.started = False
        # the rewriter the start chose, by kind, told apart once there rather than on each message
        self.stream: StreamRewriter | None = None
        self.whole: BodyRewriter | None = None
        self.ended = False  # the response was ended past a bound: the app's further messages are dropped

    async def __call__(self, message: Message) -> None:
        stream = self.stream
        if stream is not None and message["type"] == "http.response.body":
            if self.ended:
                return
            more = message.get("more_body", False)
            try:
                out = stream.feed(message.get("body", b""))
                if not more:
                    out += stream.finish()
            except ApiError as error:  # past the rewriter's bound
                out, more, self.ended = stream.fail(error), False, True
            remember = self.remember
            if remember is not None:
                remember.stream.feed(out)
                if not more and 200 <= self.start["status"] < 300:
                    await remember.stream_ended()
            if out or not more:
                await self.send({"type": "http.response.body", "body": out, "more_body": more})
        elif (whole := self.whole) is not None:  # the start is held until the JSON body is whole
            if self.ended:
                return
            if message["type"] != "http.response.body":
                await self._release(whole, message)
                return
            try:
                await self._whole_body(whole, message)
            except ApiError as error:  # past the rewriter's bound: the start was held, the error goes instead
                self.ended = True
                await send_error(self.send, error)
        elif not self.started and message["type"] == "http.response.start":
            self.started = True
            if self.extra:
                message = {**message, "headers": [*message.get("headers", ()), *self.extra]}
            rewriter = self._choose(message)
            if rewriter is None:
                await self.send(message)
            elif isinstance(rewriter, StreamRewriter):
                self.stream = rewriter
                self.start = {**message, "headers": with_length(message.get("headers", ()), None)}
                await self.send(self.start)
            else:
                self.whole = rewriter
                self.start = message  # held until the body is whole: its length may change
                self.size = 0  # bytes of the JSON body so far
                self.split = False  # the JSON body came in more than one message
        else:  # before the start or after it, anything else, and every message of an answer with no rewriter
            await self.send(message)

    def _choose(self, start: Message) -> Rewriter | None:
        content_type = encoding = None
        for key, value in start.get("headers", ()):
            name = key.lower()
            if name == b"content-type":
                content_type = value.decode("latin-1")
            elif name == b"content-encoding":
                encoding = value.decode("latin-1")
        # a body the app compressed cannot be read here: no rewriter, it goes out as the app sent it
        return choose_rewriter(self.options, start["status"], content_type, encoding)

    async def _whole_body(self, rewriter: BodyRewriter, message: Message) -> None:
        body = message.get("body", b"")
        self.size += len(body)
        rewriter.feed(body)
        if message.get("more_body", False):
            self.split = True
            return
        out = rewriter.finish() if self.size < OFF_LOOP_BYTES else await off_loop(self.size, rewriter.finish)
        self.whole = None  # the answer is whole: anything the app sends after it goes to the server as it comes
        start = self.start
        if self.remember is not None and 200 <= (rewriter.status or start["status"]) < 300:
            await self.remember(out)
        if not rewriter.changed:
            await self.send(start)
            if not self.split:  # it came in one message: both go on as they came
                await self.send(message)
                return
        else:
            headers = with_length(start.get("headers", ()), len(out), content_type=rewriter.content_type)
            start = {**start, "headers": headers}
            if rewriter.status is not None:
                start["status"] = rewriter.status
            await self.send(start)
        await self.send({"type": "http.response.body", "body": out, "more_body": False})

    async def _release(self, rewriter: BodyRewriter, message: Message) -> None:
        """Anything but a body while a JSON answer's start is held: an ASGI extension that sends the body its own
        way (``http.response.pathsend``, ``http.response.zerocopysend``), or an app's messages out of order. The
        start goes as the app sent it, then the body bytes held so far, then ``message``, in the app's order; the
        rest of the answer passes as the app sends it, unread, like an answer in an encoding numi_mw cannot read."""
        self.whole = None
        await self.send(self.start)
        held = rewriter.held()
        if held:
            await self.send({"type": "http.response.body", "body": held, "more_body": True})
        await self.send(message)
