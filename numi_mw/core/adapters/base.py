"""The types every wire-API adapter shares: the translation of a request, what the answer's translation needs,
and the adapter's row of data."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from numi_mw.core.controls import ReasoningControls
from numi_mw.core.errors import invalid_request
from numi_mw.core.fields import PLAIN_FIELDS
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
        default_max_tokens: the tokens left for the answer when the request gives no output limit, for a wire API
            that requires one (Anthropic Messages): ``max_tokens`` is then this plus the thinking budget
            (``request.default_max_tokens``), set before the controls are written, so that a generated budget is
            capped below it (spec 004 "Output limits and billing").
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


# --- pieces both translations use -----------------------------------------------------------------------------


def output_limit(data: dict[str, Any]) -> Any:
    """The output limit a native wire API gets for a chat body ``data``: ``max_tokens`` or
    ``max_completion_tokens``, the smaller of the two when both are numbers, a whole-number float (``1e3``) as an
    int; ``None`` when the client sent neither. (``request.check_output_limits`` has refused anything but a
    positive whole number already.)"""
    limits = [data[key] for key in ("max_tokens", "max_completion_tokens") if data.get(key) is not None]
    limits = [int(value) if isinstance(value, float) and value.is_integer() else value for value in limits]
    if not limits:
        return None
    numbers = [value for value in limits if isinstance(value, int) and not isinstance(value, bool)]
    return min(numbers) if len(numbers) == len(limits) else limits[0]


def event_index(value: Any) -> Any:
    """A native event's ``index`` (a block's, a part's) as the key its stream state is kept under: a JSON scalar
    as it is; a list or an object, which no wire API sends and which cannot be a key, as ``None``, the key of an
    event that names no index. Any value the upstream sends is then read, never raised on."""
    return None if isinstance(value, _CONTAINERS) else value


_CONTAINERS = (list, dict)


MAX_TRACKED = 1024
"""How many blocks (Anthropic) or output items (Responses) of one stream a translator keeps state for; past it,
the oldest is forgotten (``remember``), so a stream that names a million blocks keeps bounded state."""


def remember(states: dict[Any, Any], key: Any, state: Any) -> None:
    """``states[key] = state``, the oldest entry forgotten when ``states`` holds more than ``MAX_TRACKED``. An event
    for a forgotten block or item is read as one for a block or item not seen before: its text, signatures and
    data still go out (``docs/wire-apis.md``)."""
    states[key] = state
    if len(states) > MAX_TRACKED:
        del states[next(iter(states))]


def call_function(call: Any, path: str) -> dict[str, Any]:
    """The ``function`` object of the chat tool call at ``path`` (``messages[2].tool_calls[0]``).

    Raises:
        ApiError: 400 ``invalid_request`` naming ``path`` when ``call`` is not a tool call object with a function.
    """
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        raise invalid_request(f"{path} must be a tool call object with a function.", path)
    function: dict[str, Any] = call["function"]
    return function


def content_parts(content: Any, path: str) -> list[dict[str, Any]]:
    """The parts of chat message content at ``path`` that is neither a string nor ``null`` (the callers take
    those first): a list of part objects.

    Raises:
        ApiError: 400 ``invalid_request`` naming the content or the part that is not an object.
    """
    if not isinstance(content, list):
        raise invalid_request(f"{path} must be a string or an array of content parts.", path)
    for i, part in enumerate(content):
        if not isinstance(part, dict):
            raise invalid_request(f"{path}[{i}] must be a content part object.", f"{path}[{i}]")
    return content


def function_tool(tool: Any) -> dict[str, Any] | None:
    """The ``function`` object of a chat function tool (``{"type": "function", "function": {...}}``); ``None`` for
    any other entry of ``tools`` (a wire API's own tools, which pass as they are)."""
    if isinstance(tool, dict) and tool.get("type") == "function" and isinstance(tool.get("function"), dict):
        function: dict[str, Any] = tool["function"]
        return function
    return None


def count_plain_reasoning(message: dict[str, Any], counts: dict[str, int]) -> None:
    """Count an assistant message's plain reasoning text (``reasoning`` or ``reasoning_content``) as
    ``unsigned-reasoning-dropped``: a native wire API takes back only signed or encrypted state. Called for a
    message without details (where details exist, the plain text is the same reasoning)."""
    for key in PLAIN_FIELDS:
        value = message.get(key)
        if isinstance(value, str) and value:
            counts["unsigned-reasoning-dropped"] += 1
            return


def chat_completion(
    native: dict[str, Any],
    answer: Answer,
    message: dict[str, Any],
    finish_reason: str,
    usage: dict[str, Any] | None,
) -> dict[str, Any]:
    """A chat completion (one choice) for a translated answer: ``id`` and ``model`` from the native body (the
    request's model when it names none), ``created`` from ``answer``, ``usage`` when reported."""
    out: dict[str, Any] = {
        "id": native.get("id"),
        "object": "chat.completion",
        "created": answer.created,
        "model": native.get("model") or answer.model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
    }
    if usage is not None:
        out["usage"] = usage
    return out


class ChunkStream:
    """What both stream translators keep: the ``Answer``, whether the terminal event was seen (``done``), and the
    answer's ``id`` and ``model`` once the stream names them; ``_chunk`` makes one chat chunk of choice 0."""

    __slots__ = ("_id", "_model", "answer", "done")

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.done = False
        self._id: Any = None
        self._model: Any = answer.model

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": self._id,
            "object": "chat.completion.chunk",
            "created": self.answer.created,
            "model": self._model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
