"""The msgspec Structs of the response side: the rewriters' options and bounds, one SSE event, and the views that
decode only part of a chunk.

They live apart from the modules that use them (``response``, ``sse``, ``chunks``) so that those modules can be
compiled by the optional mypyc build (``docs/performance.md``, "The compiled core"): mypyc erases a Struct's
annotations and drops the options of its ``class`` line, and msgspec would then decode into other types than the
rules read. This module stays Python in that build. Each public name is also importable from the module that
documents it (``response.ResponseOptions``, ``response.Bounds``, ``sse.SSEEvent``).
"""

from __future__ import annotations

from typing import Any

import msgspec

from numi_mw.core.adapters import Answer
from numi_mw.core.providers import WIRE_API_NAMES, WireApi
from numi_mw.core.think import ThinkTags
from numi_mw.core.usage import UsageRules

__all__ = [
    "DEFAULT_BOUNDS",
    "DEFAULT_MAX_EVENT_BYTES",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "Bounds",
    "ChoiceProbe",
    "ChunkHead",
    "ChunkProbe",
    "ResponseOptions",
    "SSEEvent",
    "check_limits",
]


def check_limits(**limits: object) -> None:
    """Check limits given by keyword (``max_header_count=256``): each must be a positive whole number.

    Raises:
        ValueError: a limit is not a positive ``int`` (``bool`` is refused), naming the keyword.
    """
    for name, value in limits.items():
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            unit = "headers" if name.endswith("count") else "bytes"
            raise ValueError(f"{name} must be a positive whole number of {unit}, not {value!r}")


DEFAULT_MAX_EVENT_BYTES = 16 * 1024 * 1024
"""The most bytes of one upstream SSE event a stream rewriter holds (``--max-event-bytes``, ``max_event_bytes``):
16 MiB, far above any chat chunk (a chunk is one token or one tool-call fragment; a whole image in base64 is a few
MiB), and the bound on what one stream holds (``docs/security.md``)."""

DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024 * 1024
"""The most bytes of one buffered upstream answer, decoded, a body rewriter holds (``--max-response-bytes``,
``max_response_bytes``): 64 MiB, as the request body limit (``request.DEFAULT_MAX_BODY_BYTES``), since a long answer
comes back as the next request's history (``docs/security.md``)."""


class Bounds(msgspec.Struct, frozen=True, gc=False):
    """What one rewriter may hold (``docs/security.md``, "Bounds"). Past either, ``feed`` raises ``ApiError``
    (502 ``upstream_unavailable``, naming the limit and its flag) after the rewriter let go of what it held; the
    shell then ends a stream with ``fail(error)`` and answers a buffered body with the error.

    Attributes:
        max_event_bytes: the most bytes of one SSE event (positive ``int``).
        max_response_bytes: the most bytes of one buffered answer, counted decoded (positive ``int``).
    """

    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES

    def __post_init__(self) -> None:
        """Raises ``ValueError`` when either bound is not a positive ``int`` (``check_limits``)."""
        check_limits(max_event_bytes=self.max_event_bytes, max_response_bytes=self.max_response_bytes)


DEFAULT_BOUNDS = Bounds()


class ResponseOptions(msgspec.Struct, frozen=True, gc=False):
    """What the response side does for one request.

    Attributes:
        exclude: keep reasoning out of the response (spec 004: "With exclude: true, both fields are omitted").
        think: split reasoning tags out of ``content`` with these settings, or ``None``.
        wire_api: the wire API the answer comes in; any but ``openai-chat`` is translated back by its adapter
            (``core.adapters``).
        answer: what that translation needs of the request (``adapters.Answer``; the shell sets its
            ``created`` time); ``None`` on chat completions routes.
        bounds: what the rewriter may hold (``Bounds``).
        usage: the usage accounting of the route (``usage.usage_rules``: reasoning inside ``completion_tokens``,
            ``cost`` from the endpoint's prices), or ``None`` to pass usage as it came.
    """

    exclude: bool = False
    think: ThinkTags | None = None
    wire_api: WireApi = "openai-chat"
    answer: Answer | None = None
    bounds: Bounds = DEFAULT_BOUNDS
    usage: UsageRules | None = None

    def __post_init__(self) -> None:
        """Raises ``ValueError`` naming the first attribute whose value is not of its type (``wire_api``: not one
        of ``providers.WIRE_API_NAMES``)."""
        if type(self.exclude) is not bool:
            raise ValueError(f"exclude must be true or false, not {self.exclude!r}")
        if self.wire_api not in WIRE_API_NAMES:
            raise ValueError(f"wire_api must be one of {', '.join(WIRE_API_NAMES)}, not {self.wire_api!r}")
        for name, kind, what in _OPTION_TYPES:
            value = getattr(self, name)
            if value is not None and not isinstance(value, kind):
                raise ValueError(f"{name} must be {what} or None, not {value!r}")
        if not isinstance(self.bounds, Bounds):
            raise ValueError(f"bounds must be a Bounds, not {self.bounds!r}")


_OPTION_TYPES: tuple[tuple[str, type, str], ...] = (
    ("think", ThinkTags, "a ThinkTags"),
    ("answer", Answer, "an Answer"),
    ("usage", UsageRules, "a UsageRules"),
)
"""The attributes of ``ResponseOptions`` that hold one type or ``None``: name, type, the type in a message."""


class SSEEvent(msgspec.Struct, gc=False):
    """One SSE event as it arrived.

    Attributes:
        raw: the exact original bytes of the event, its field and comment lines and its terminating blank line
            with their original line ends. Re-emit it unchanged to pass the event through byte for byte.
        data: the values of the event's ``data`` lines joined with ``b"\\n"`` (the one optional space after the
            colon removed); ``None`` when the event has no ``data`` field at all (``b""`` for ``data:``).
        event: the value of the last ``event`` field (UTF-8, invalid bytes replaced), or ``None``.
        id: the value of the last ``id`` field of this event (UTF-8, invalid bytes replaced), or ``None``.
            Like WHATWG, an ``id`` value containing NUL is ignored.
        is_comment_only: ``True`` when the event consists of ``:`` comment lines only, such as the keep-alive
            ``: OPENROUTER PROCESSING`` followed by a blank line.
    """

    raw: bytes
    data: bytes | None = None
    event: str | None = None
    id: str | None = None
    is_comment_only: bool = False

    @property
    def is_done(self) -> bool:
        """``True`` for the OpenAI-style end-of-stream sentinel ``data: [DONE]``."""
        return self.data == b"[DONE]"


class ChunkHead(msgspec.Struct, gc=False):
    """A view of the fields of a stream's chunk that its error chunk repeats (``ApiError.stream_chunk``)."""

    id: Any = None
    created: Any = None
    model: Any = None


class ChoiceProbe(msgspec.Struct, gc=False):
    """A view of one choice of a chat chunk: its delta (``ChunkProbe``)."""

    delta: Any = None


class ChunkProbe(msgspec.Struct, gc=False):
    """A view of a chat chunk's choices that skips its envelope (the check of a repeated shape's cut,
    ``shapes.shape_of``)."""

    choices: list[ChoiceProbe]
