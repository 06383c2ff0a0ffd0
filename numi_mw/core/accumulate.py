"""One answer, whole: what an app shows and what it stores (spec 000 "Display" and "Storage"; spec 004
"Response fields", "From a stream", "From a buffered response").

An ``Accumulator`` is fed one answer, either a buffered chat completion (``feed_completion``) or the chunks of
one stream (``feed_chunk`` with decoded chunks, ``feed_sse`` with the raw SSE bytes), in any wire API numi_mw
speaks: a native Anthropic Messages or OpenAI Responses answer is first translated by its adapter
(``core.adapters``), as the sidecar translates it. It gives, per choice, the display text (``reasoning``,
``content``, ``refusal``), the tool calls, the finish reason and ``message()``, the assistant message to store
and send back on the next turn, with ``reasoning_details`` rebuilt by spec 004's rules and opaque fields
(signatures, encrypted data, ids) as the provider sent them; and the answer's ``usage``.

It is sans-I/O (bytes or decoded JSON in, plain data out) and keeps only what the message needs; what it holds is
bounded (``Bounds``, ``docs/history.md``).
"""

from __future__ import annotations

import copy
from typing import Any, Final

from numi_mw.core.adapters import WIRE_APIS, Answer, StreamTranslator
from numi_mw.core.chunks import MAX_CHOICES, UNCHANGED, ChunkNormalizer
from numi_mw.core.codec import UNDECODABLE, decode_lenient
from numi_mw.core.completion import normalize_completion
from numi_mw.core.details import DetailsRebuilder, fragments_from_body, rebuild_reasoning_details, visible_text
from numi_mw.core.errors import ApiError, event_too_large, invalid_request, response_too_large, upstream_unavailable
from numi_mw.core.fields import shown_reasoning
from numi_mw.core.providers import WIRE_API_NAMES, WireApi
from numi_mw.core.response import DEFAULT_BOUNDS, Bounds
from numi_mw.core.sse import EventTooLarge, SSEDecoder, SSEEvent
from numi_mw.core.think import ThinkTags

_USAGE: Final = Answer(include_usage=True)
"""What a native answer's translation needs here: a usage chunk at the end of a stream (``usage``)."""

__all__ = ["AccumulatedChoice", "Accumulator", "rebuild_from_body"]

_OPAQUE: Final = ("text", "summary", "signature", "data")
"""The string fields of a detail fragment counted against the bound (``Bounds.max_response_bytes``)."""


class AccumulatedChoice:
    """One choice of an answer, as far as it has come.

    Attributes:
        index: the choice's ``index``.
        finish_reason: the last ``finish_reason`` that was not ``null``, or ``None``.
        role: the ``role`` the answer gave, or ``None`` (``message()`` then says ``assistant``).
    """

    __slots__ = (
        "_calls",
        "_content",
        "_extra",
        "_message",
        "_reasoning",
        "_rebuilder",
        "_refusal",
        "_seen",
        "finish_reason",
        "index",
        "role",
    )

    def __init__(self, index: int) -> None:
        self.index = index
        self.finish_reason: Any = None
        self.role: Any = None
        self._reasoning: list[str] = []
        self._content: list[str] | None = None  # None: no content string yet
        self._refusal: list[str] | None = None
        self._calls: dict[Any, dict[str, Any]] = {}
        self._extra: dict[str, Any] = {}
        self._rebuilder = DetailsRebuilder()
        self._seen = 0  # detail fragments seen, for the path in an error
        self._message: dict[str, Any] | None = None  # a buffered answer's message

    @property
    def reasoning(self) -> str:
        """The reasoning to display (spec 004 "Streaming": "For display, concatenate delta.reasoning"): each delta's
        ``reasoning`` (or ``reasoning_content``), or the visible text of its details when it has neither; ``""``
        when there is none."""
        if self._message is not None:
            return shown_reasoning(self._message)
        return _joined(self._reasoning) or ""

    @property
    def content(self) -> str | None:
        """The answer's text, or ``None`` when no ``content`` string came."""
        if self._message is not None:
            content = self._message.get("content")
            return content if isinstance(content, str) else None
        joined: str | None = _joined(self._content)
        return joined

    @property
    def refusal(self) -> str | None:
        """The refusal's text, or ``None`` when no ``refusal`` string came."""
        if self._message is not None:
            refusal = self._message.get("refusal")
            return refusal if isinstance(refusal, str) else None
        joined: str | None = _joined(self._refusal)
        return joined

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        """The tool calls (new dicts), in the order of their ``index``: each stream entry of one ``index`` merged
        as the openai SDK merges them (``function.arguments`` concatenated), except that ``id``, ``type`` and
        ``function.name`` are taken once (the first non-empty value: some servers repeat them on every entry) and
        any other field keeps its first non-null value. ``index`` itself is not kept: it is no message field.
        ``function.arguments`` that is not a string (the API reference makes it one) merges as openai-python's
        ``accumulate_delta`` merges values of different types: the first non-null value stays, and a value of
        another type after it is not added (``5`` then ``"x"`` stays ``5``; ``"x"`` then ``5`` stays ``"x"``)."""
        if self._message is not None:
            calls = self._message.get("tool_calls")
            return copy.deepcopy(calls) if isinstance(calls, list) else []
        out = []
        for _, call in sorted(self._calls.items(), key=_call_order):
            merged = dict(call)
            function = merged.get("function")
            if isinstance(function, dict):
                merged["function"] = {k: _joined(v) if k == "arguments" else v for k, v in function.items()}
            out.append(merged)
        return out

    @property
    def reasoning_details(self) -> list[Any]:
        """The reasoning details to send back (new dicts): a stream's fragments rebuilt by spec 004 "From a
        stream", or a buffered message's details as returned ("From a buffered response"); signatures, encrypted
        data and ids byte for byte."""
        if self._message is not None:
            details = self._message.get("reasoning_details")
            return copy.deepcopy(details) if isinstance(details, list) else []
        return [dict(d) if isinstance(d, dict) else d for d in self._rebuilder.result()]

    def message(self) -> dict[str, Any]:
        """The assistant message to store and send back on the next turn (a new dict).

        A buffered answer's message as returned (normalized like any answer numi_mw relays, unless the
        ``Accumulator`` was made with ``normalize=False``). A stream's: ``role`` (``assistant`` when none came),
        ``content`` (``None`` when no content string came), ``refusal``, ``reasoning`` and ``reasoning_details``
        when there are any, ``tool_calls`` when there are any, then every other delta field with its last
        non-null value (spec 004 "Preserve reasoning across turns": unknown fields travel unchanged).
        """
        if self._message is not None:
            return copy.deepcopy(self._message)
        message: dict[str, Any] = {"role": self.role if self.role is not None else "assistant"}
        message["content"] = self.content
        refusal = self.refusal
        if refusal is not None:
            message["refusal"] = refusal
        reasoning = self.reasoning
        if reasoning:
            message["reasoning"] = reasoning
        details = self.reasoning_details
        if details:
            message["reasoning_details"] = details
        calls = self.tool_calls
        if calls:
            message["tool_calls"] = calls
        for key, value in self._extra.items():
            message.setdefault(key, copy.deepcopy(value))
        return message

    def _take(self, choice: dict[str, Any]) -> int:
        """Merge one chunk's choice; returns how many characters it added to what is kept."""
        finish = choice.get("finish_reason")
        if finish is not None:
            self.finish_reason = finish
        delta = choice.get("delta")
        if type(delta) is not dict:
            return 0
        added = 0
        shown = plain = details = None
        for key, value in delta.items():  # one pass over the delta (this runs once per chunk)
            if key == "content":
                if type(value) is str:
                    self._content = _appended(self._content, value)
                    added += len(value)
            elif key == "reasoning":
                if type(value) is str and value:
                    shown = value
            elif key == "reasoning_details":
                if type(value) is list:
                    details = value
            elif key == "reasoning_content":
                if type(value) is str and value:
                    plain = value
            elif key == "tool_calls":
                if type(value) is list:
                    added += self._merge_calls(value)
            elif key == "refusal":
                if type(value) is str:
                    self._refusal = _appended(self._refusal, value)
                    added += len(value)
            elif key == "role":
                if value is not None:
                    self.role = value
            elif value is not None:
                self._extra[key] = value
        if shown is None:
            shown = plain  # ``fields.plain_reasoning``: reasoning, else reasoning_content
        if details is not None:
            added += self._fragments(details)
            if shown is None:
                shown = visible_text(details) or None
        if shown is not None:
            self._reasoning.append(shown)
            added += len(shown)
        return added

    def _fragments(self, details: list[Any]) -> int:
        added = 0
        rebuilder = self._rebuilder
        for fragment in details:
            if isinstance(fragment, dict):
                text = fragment.get("text")
                if text is not None and not isinstance(text, str):
                    # rule 1 appends it to a string (spec 004 "Reasoning detail" makes it text)
                    path = f"reasoning_details[{self._seen}].text"
                    raise invalid_request(f"{path} must be a string or null, not {type(text).__name__}.", path)
                for key in _OPAQUE:
                    value = fragment.get(key)
                    if isinstance(value, str):
                        added += len(value)
            self._seen += 1
            rebuilder.add(fragment)
        return added

    def _merge_calls(self, calls: list[Any]) -> int:
        added = 0
        for call in calls:
            if not isinstance(call, dict):
                continue
            index = call.get("index")
            if type(index) is not int:  # no index (or an odd one): a call with a new id starts a new one
                id_ = call.get("id")
                index = ("noindex", len(self._calls)) if id_ or not self._calls else next(reversed(self._calls))
            merged = self._calls.get(index)
            if merged is None:
                merged = self._calls[index] = {}
            for key, value in call.items():
                if key == "index":
                    continue
                if key == "function" and isinstance(value, dict):
                    function = merged.setdefault("function", {})
                    if not isinstance(function, dict):
                        continue
                    for name, part in value.items():
                        if name == "arguments" and isinstance(part, str):
                            so_far = function.get("arguments")
                            if so_far is None or isinstance(so_far, list):  # (a list: the string parts so far)
                                function["arguments"] = _appended(so_far, part)
                                added += len(part)
                        elif part is not None and part != "" and function.get(name) in (None, ""):
                            function[name] = part
                elif value is not None and value != "" and merged.get(key) in (None, ""):
                    merged[key] = value
        return added


def _call_order(item: tuple[Any, Any]) -> tuple[int, int]:
    """Tool calls by their ``index``; those without one after them, in the order they came."""
    key = item[0]
    return (0, key) if type(key) is int else (1, key[1])


def _appended(parts: list[str] | None, value: str) -> list[str]:
    if parts is None:
        return [value]
    parts.append(value)
    return parts


def _joined(parts: Any) -> Any:
    """The text of a list of parts, joined once (the list keeps the joined text), or the value itself."""
    if not isinstance(parts, list):
        return parts
    if len(parts) > 1:
        parts[:] = ["".join(parts)]
    return parts[0] if parts else ""


class Accumulator:
    """Accumulate one answer, streamed or buffered, into what an app displays and stores (spec 000 "Display" and
    "Storage"; ``docs/history.md``).

    Args:
        wire_api: the wire API the answer comes in: ``openai-chat`` (chat completions, the default), or
            ``anthropic-messages`` / ``openai-responses``, whose native events and bodies are translated into chat
            completions by numi_mw's adapters first (``docs/wire-apis.md``).
        think: split reasoning tags out of ``content`` with these settings (``ThinkTags``), for a server that puts
            reasoning in ``<think>`` tags; ``None`` leaves content as it came.
        normalize: put the answer in numi_mw's one reasoning shape first, as the sidecar does
            (``docs/streaming.md``): plain ``reasoning_content`` becomes ``reasoning`` with a ``reasoning.text``
            detail of format ``unknown``, and OpenRouter's empty placeholder that opens a thinking block is no
            detail of its own. ``False`` reads the answer as it is (an answer numi_mw already normalized, or to
            see spec 004's rebuild of exactly the fragments given, as ``numi-mw rebuild`` does).
        bounds: what it may hold: ``max_event_bytes`` of one SSE event, and ``max_response_bytes`` characters of
            text kept (content, reasoning, refusals, tool call arguments and the detail fields ``text``,
            ``summary``, ``signature`` and ``data``); 16 MiB and 64 MiB by default (``core.response.Bounds``).

    Raises:
        ValueError: for a ``wire_api`` numi_mw does not speak, a ``think`` that is neither ``None`` nor a
            ``ThinkTags``, a ``normalize`` that is not a ``bool``, or ``bounds`` that are not a ``Bounds``.

    Attributes:
        choices: the choices so far by their ``index`` (``AccumulatedChoice``), at most
            ``chunks.MAX_CHOICES`` (128); a choice whose ``index`` is not an integer is not kept.
        usage: the last ``usage`` that was not ``null``, as sent (chat completions' form; a native answer's usage
            as its adapter translates it), or ``None``.
        chunks: how many chunks (decoded JSON values) it was fed, with those of an SSE stream.
        done: whether an SSE stream's ``data: [DONE]`` event has been fed (the stream's end, for a chat
            completions stream).
    """

    __slots__ = (
        "_adapter",
        "_decoder",
        "_finished",
        "_held",
        "_normalizer",
        "_translator",
        "bounds",
        "choices",
        "chunks",
        "done",
        "normalize",
        "think",
        "usage",
        "wire_api",
    )

    def __init__(
        self,
        *,
        wire_api: WireApi = "openai-chat",
        think: ThinkTags | None = None,
        normalize: bool = True,
        bounds: Bounds = DEFAULT_BOUNDS,
    ) -> None:
        if wire_api not in WIRE_API_NAMES:
            raise ValueError(f"wire_api must be one of {', '.join(WIRE_API_NAMES)}, not {wire_api!r}")
        if think is not None and not isinstance(think, ThinkTags):
            raise ValueError(f"think must be None or a ThinkTags, not {think!r}")
        if type(normalize) is not bool:
            raise ValueError(f"normalize must be True or False, not {normalize!r}")
        if not isinstance(bounds, Bounds):
            raise ValueError(f"bounds must be a numi_mw.core.response.Bounds, not {bounds!r}")
        self.wire_api = wire_api
        self.think = think
        self.normalize = normalize
        self.bounds = bounds
        self.choices: dict[int, AccumulatedChoice] = {}
        self.usage: Any = None
        self.chunks = 0
        self.done = False
        self._held = 0
        self._finished = False
        self._adapter = WIRE_APIS.get(wire_api)
        self._translator: StreamTranslator | None = None
        self._normalizer = ChunkNormalizer(think=think) if normalize or think is not None else None
        self._decoder: SSEDecoder | None = None

    def message(self, index: int = 0) -> dict[str, Any]:
        """``choices[index].message()``: the assistant message to store (``AccumulatedChoice.message``).

        Raises:
            KeyError: when the answer has no choice ``index`` (nothing fed yet, a buffered answer whose
                ``choices`` is empty or holds no message object for it, a stream whose chunks never named it);
                ``choices`` lists the ones it has.
        """
        state = self.choices.get(index)
        if state is None:
            raise KeyError(f"the answer has no choice {index!r} (choices: {sorted(self.choices)})")
        return state.message()

    def feed_chunk(self, chunk: Any) -> None:
        """Take one chunk of a stream: a decoded ``chat.completion.chunk`` (a dict, e.g. openai-python's
        ``chunk.model_dump()``, extra fields included), or with a native ``wire_api`` one decoded event of its
        stream. The dict is not modified.

        Raises:
            ApiError: past ``bounds.max_response_bytes`` (502 ``upstream_unavailable``), with more than
                ``MAX_CHOICES`` choices (502), for a native stream's error event (its status), or for a detail
                fragment whose ``text`` is neither a string nor ``null`` (400 ``invalid_request``, ``param``
                ``reasoning_details[n].text``, ``n`` its place among the choice's fragments).
        """
        self.chunks += 1
        if self._adapter is not None:
            translator = self._stream()
            if translator.done:
                return
            for translated in translator.event(chunk):
                self._normalized(translated)
            return
        if self._normalizer is not None and isinstance(chunk, dict):
            chunk = _fresh(chunk)
        self._normalized(chunk)

    def feed_sse(self, data: bytes) -> None:
        """Take the next bytes of an SSE stream (split anywhere); comments and ``data: [DONE]`` are skipped.

        Args:
            data: ``bytes`` (or ``bytearray`` / ``memoryview``), as read from the wire; SSE is UTF-8
                (WHATWG HTML, "Server-sent events").

        Raises:
            TypeError: when ``data`` is not bytes (a ``str`` included: encode it, ``text.encode()``); nothing
                is taken.
            ApiError: as ``feed_chunk``; 400 ``invalid_json`` for an event whose data is not JSON; 502
                ``upstream_unavailable`` for an event over ``bounds.max_event_bytes``.
        """
        if not isinstance(data, bytes):
            if not isinstance(data, bytearray | memoryview):
                raise TypeError(
                    f"feed_sse takes the stream's bytes, not {type(data).__name__}; a decoded chunk goes to "
                    "feed_chunk, text to feed_sse(text.encode())"
                )
            data = bytes(data)
        decoder = self._decoder
        if decoder is None:
            decoder = self._decoder = SSEDecoder(self.bounds.max_event_bytes)
        single = decoder.single_data(data)  # the common case: one whole ``data:`` event
        if single is not None:
            self._data(single)
            return
        if decoder.single_comment(data):  # a whole keep-alive comment: nothing to take
            return
        lines = decoder.data_lines(data)  # several such events read at once
        if lines is not None:
            for line in lines:
                self._data(line)
            return
        try:
            split = decoder.split_lines(data)  # a read cut inside events: its whole events, the rest
            lines, events = ([], decoder.feed(data)) if split is None else split
        except EventTooLarge as exc:
            raise event_too_large(exc.limit) from None
        for line in lines:
            self._data(line)
        self._events(events)

    def feed_completion(self, body: Any) -> None:
        """Take a whole buffered answer: a chat completion (or a native wire API's body), as bytes or decoded
        JSON (not modified). Its choices' messages are kept as returned (spec 004 "From a buffered response"),
        normalized unless ``normalize=False``.

        Raises:
            ApiError: 400 ``invalid_json`` for bytes that are not JSON; 400 ``invalid_request`` for a chat
                completion that is no object with a ``choices`` array; a native body its adapter cannot translate
                (502 ``upstream_unavailable``); past ``bounds.max_response_bytes`` bytes.
        """
        if isinstance(body, bytes | bytearray | memoryview):
            if len(body) > self.bounds.max_response_bytes:
                raise response_too_large(self.bounds.max_response_bytes)
            value = decode_lenient(bytes(body))
            if value is UNDECODABLE:
                raise ApiError("invalid_json", "The completion is not JSON; send the answer's body as it came.")
        else:
            value = copy.deepcopy(body)
        if self._adapter is not None:
            value = self._adapter.completion(value, _USAGE)
        if not isinstance(value, dict) or not isinstance(value.get("choices"), list):
            raise invalid_request("The completion is not an object with a choices array.", "choices")
        if self.normalize or self.think is not None:
            normalize_completion(value, think=self.think)
        if value.get("usage") is not None:
            self.usage = value["usage"]
        for choice in value["choices"]:
            if not isinstance(choice, dict) or not isinstance(choice.get("message"), dict):
                continue
            state = self._choice(choice.get("index", 0))
            if state is None:
                continue
            state._message = choice["message"]
            state.role = choice["message"].get("role")
            if choice.get("finish_reason") is not None:
                state.finish_reason = choice["finish_reason"]

    def finish(self) -> None:
        """End of the stream: take the event an SSE stream left without its blank line, what a native stream's
        translation and a think splitter still hold, and the format a stream's last text detail still held
        (``docs/streaming.md``, "Streams"). Call it once, after the last chunk; a second call does nothing.

        Raises:
            ApiError: as ``feed_chunk``; a native stream that ended before its terminal event (502
                ``upstream_unavailable``); what came before stays readable.
        """
        if self._finished:
            return
        self._finished = True
        if self._decoder is not None:
            self._events(self._decoder.flush())
        if self._adapter is not None and self._translator is not None and not self._translator.done:
            for translated in self._translator.finish():
                self._normalized(translated)
        if self._normalizer is not None:
            for chunk in self._normalizer.finish():
                self._take(chunk)

    # --- the stream's steps --------------------------------------------------------------------------------------

    def _stream(self) -> StreamTranslator:
        translator = self._translator
        if translator is None:
            assert self._adapter is not None
            translator = self._translator = self._adapter.stream(_USAGE)
        return translator

    def _events(self, events: list[SSEEvent]) -> None:
        for event in events:
            if event.data is not None:
                self._data(event.data)

    def _data(self, data: bytes) -> None:
        """Take one SSE event's data (``[DONE]`` is skipped)."""
        if data == b"[DONE]":
            self.done = True
            return
        value = decode_lenient(data)  # NaN and lone surrogates included, as the sidecar reads them
        if value is UNDECODABLE:
            raise ApiError("invalid_json", f"An SSE event is not JSON ({data[:80]!r}); send whole chunks.")
        if self._adapter is not None:
            self.feed_chunk(value)
        else:
            self._fed(value)

    def _fed(self, value: Any) -> None:
        """``feed_chunk`` of a value this accumulator decoded itself (nobody else holds it: no copy)."""
        self.chunks += 1
        self._normalized(value)

    def _normalized(self, chunk: Any) -> None:
        normalizer = self._normalizer
        if normalizer is None:
            self._take(chunk)
            return
        out = normalizer.normalize(chunk)
        if out is UNCHANGED:
            self._take(chunk)
        else:
            for item in out:
                self._take(item)

    def _take(self, chunk: Any) -> None:
        if not isinstance(chunk, dict):
            return
        usage = chunk.get("usage")
        if usage is not None:
            self.usage = usage
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            return
        for choice in choices:
            if type(choice) is not dict:
                continue
            state = self._choice(choice.get("index", 0))
            if state is None:
                continue
            self._held += state._take(choice)
            if self._held > self.bounds.max_response_bytes:
                self.choices.clear()
                raise response_too_large(self.bounds.max_response_bytes)

    def _choice(self, index: Any) -> AccumulatedChoice | None:
        if type(index) is not int:
            return None  # no choice numi_mw can name (``docs/streaming.md``, "Values numi_mw does not read")
        state = self.choices.get(index)
        if state is None:
            if len(self.choices) >= MAX_CHOICES:
                raise upstream_unavailable(f"The answer has more than {MAX_CHOICES} choices; numi_mw keeps no more.")
            state = self.choices[index] = AccumulatedChoice(index)
        return state


def _fresh(chunk: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``chunk`` down to its deltas, which is what the normalizer may change in place."""
    choices = chunk.get("choices")
    if not isinstance(choices, list):
        return chunk
    fresh = []
    for choice in choices:
        if type(choice) is dict:
            choice = dict(choice)
            if type(choice.get("delta")) is dict:
                choice["delta"] = dict(choice["delta"])
        fresh.append(choice)
    return {**chunk, "choices": fresh}


def rebuild_from_body(body: bytes) -> list[Any]:
    """The reasoning details to send back for ``body`` (``numi-mw rebuild``): a JSON list of streamed
    ``reasoning_details`` fragments, or an SSE stream of chat completion chunks, whose choice 0 (by its ``index``)
    is read as it is (``Accumulator(normalize=False)``), rebuilt by spec 004 "From a stream".

    Raises:
        ApiError: 400 ``invalid_json`` when ``body`` is empty, or opens like a list that is not JSON, or has an
            SSE event that is not JSON; 400 ``invalid_request`` when it is neither a list nor a stream of chunks,
            has a list entry that is not a fragment object (``param`` ``reasoning_details[1]``), or a fragment
            ``text`` that is neither a string nor ``null`` (``reasoning_details[1].text``) (``docs/cli.md``).
    """
    fragments = fragments_from_body(body)
    if fragments is not None:
        return rebuild_reasoning_details(fragments)
    whole = Bounds(max_event_bytes=len(body) + 1, max_response_bytes=2 * len(body) + 1)  # all of it is here
    accumulator = Accumulator(normalize=False, bounds=whole)
    accumulator.feed_sse(body)
    accumulator.finish()
    if not accumulator.chunks:
        raise invalid_request(
            "The input is neither a JSON array of reasoning_details fragments nor an SSE stream of chat completion "
            "chunks."
        )
    choice = accumulator.choices.get(0)
    return choice.reasoning_details if choice is not None else []
