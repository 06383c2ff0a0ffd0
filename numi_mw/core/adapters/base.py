"""The types every wire-API adapter shares: the translation of a request, what the answer's translation needs,
and the adapter's row of data."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from numi_mw.core.controls import ReasoningControls
from numi_mw.core.providers import ControlsForm, Replay, WireApi


@dataclass(frozen=True, slots=True)
class RequestFacts:
    """What a translation needs to know beyond the chat body.

    Attributes:
        adaptive: the catalog marks the model's thinking as adaptive (Anthropic ``thinking: {"type": "adaptive"}``
            with ``output_config.effort`` instead of a token budget).
    """

    adaptive: bool = False


@dataclass(slots=True)
class Translation:
    """A chat completions request translated for a native wire API.

    Attributes:
        wire_api: the wire API translated to.
        body: the native request body (a dict numi_mw owns, encoded by the caller).
        adjustments: what numi_mw changed so that the provider accepts the request, each ``name`` or
            ``name=count`` (``unsigned-reasoning-dropped=2``, ``thinking-disabled``); the shells send them in the
            ``x-numi-mw-adjustments`` response header (``docs/wire-apis.md``).
        model: the request's ``model``, for answers that do not name it.
        stream: the request asked for a stream.
        include_usage: the chat request asked for a usage chunk at the end of a stream
            (``stream_options.include_usage``).
    """

    wire_api: WireApi
    body: dict[str, Any]
    adjustments: list[str] = field(default_factory=list)
    model: str | None = None
    stream: bool = False
    include_usage: bool = False


@dataclass(frozen=True, slots=True)
class Answer:
    """What the response side knows of the request when it translates the answer.

    Attributes:
        model: the request's ``model``, used when the answer names none.
        include_usage: send a usage chunk (``choices: []``) at the end of a stream.
        created: the ``created`` time of the chat chunks (seconds since the epoch; the shell's clock, since the
            core has none).
    """

    model: str | None = None
    include_usage: bool = False
    created: int = 0


class StreamTranslator(Protocol):
    """Native stream events in, chat completion chunks out; one per stream.

    ``event(data)`` takes the decoded JSON of one SSE event's data (any ``event:`` name is carried in it as
    ``type`` by both wire APIs) and returns the chat chunks it makes, in order. ``finish()`` is called at the end
    of the upstream body and returns the last chunks. Both raise ``ApiError`` for a stream that reports an error
    or ends before its terminal event, after which the stream ends with the error event.
    """

    def event(self, data: Any) -> list[dict[str, Any]]: ...

    def finish(self) -> list[dict[str, Any]]: ...

    @property
    def done(self) -> bool:
        """The native stream's terminal event has been seen (what comes after it is ignored)."""
        ...


@dataclass(frozen=True, slots=True)
class WireAdapter:
    """One wire API: its data and its translations.

    Attributes:
        wire_api: the wire API's name.
        path: the upstream path a chat completions request goes to, appended to the base URL (``/messages``).
        controls_form: the form the reasoning controls take before translation (``controls.encode_controls``),
            whatever the provider's rules say; the translation reads it from the chat body.
        replay: the row of spec 000's message preparation filter for this wire API, whatever the provider's:
            the adapter itself decides what of the kept reasoning it can send back.
        default_max_tokens: the output limit (tokens) set as ``max_tokens`` when the request gives none, for a
            wire API that requires one (Anthropic Messages); set before the controls are written, so that a
            generated thinking budget is capped below it (spec 004 "Output limits and billing").
        headers: request headers the upstream needs, added when the client did not send them.
        api_key_header: where the client's ``Authorization: Bearer KEY`` goes: ``authorization`` (unchanged) or
            another header name that takes the bare key (``x-api-key``).
        translate: chat body (prepared, a dict) and controls → ``Translation``.
        completion: native buffered body (decoded JSON) → chat completion (a dict).
        stream: → a new ``StreamTranslator``.
        error: native error body (decoded JSON) → the OpenAI-style error body, or ``None`` to pass it unchanged.
    """

    wire_api: WireApi
    path: str
    controls_form: ControlsForm
    replay: Replay
    default_max_tokens: int | None
    headers: tuple[tuple[str, str], ...]
    api_key_header: str
    translate: Callable[[dict[str, Any], ReasoningControls, RequestFacts], Translation]
    completion: Callable[[Any, Answer], dict[str, Any]]
    stream: Callable[[Answer], StreamTranslator]
    error: Callable[[Any], dict[str, Any] | None]
