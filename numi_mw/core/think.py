"""How reasoning markup inside content is split out: ``ThinkTags``, the settings a caller gives (which tag
families, where a stream starts, the bounds on held-back text), and the whole-text split of a buffered message.

The splitter itself, and the rules it follows, are ``numi_mw.core.splitter``; its public names are importable from
here too. ``ThinkTags`` lives apart from it because it checks its arguments and raises ``ValueError`` with a
message: the optional compiled build (``docs/performance.md``, "The compiled core") compiles the splitter and
leaves this module as Python, where a compiled constructor would raise its own ``TypeError`` first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

from numi_mw.core.splitter import (
    DEFAULT_LOOKAHEAD_CHARS,
    DEFAULT_SWITCH_CHARS,
    HARMONY_HEADER_CHARS,
    MAX_ECHO_CHARS,
    TAG_FAMILIES,
    Piece,
    ReasoningEcho,
    ThinkSplitter,
    harmony_header,
)

__all__ = [
    "DEFAULT_LOOKAHEAD_CHARS",
    "DEFAULT_SWITCH_CHARS",
    "HARMONY_HEADER_CHARS",
    "MAX_ECHO_CHARS",
    "TAG_FAMILIES",
    "THINK_STARTS",
    "Piece",
    "ReasoningEcho",
    "SplitText",
    "ThinkSplitter",
    "ThinkStart",
    "ThinkTags",
    "harmony_header",
]

ThinkStart = Literal["content", "reasoning", "auto"]
THINK_STARTS: tuple[ThinkStart, ...] = ("content", "reasoning", "auto")


class SplitText(NamedTuple):
    """A whole text split (``ThinkTags.split_message``).

    Attributes:
        reasoning: the reasoning text, joined (without what repeats the message's own reasoning fields).
        content: the content text, joined.
        tool_calls: harmony tool calls, ``(function name, arguments text)`` in order.
    """

    reasoning: str
    content: str
    tool_calls: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class ThinkTags:
    """How reasoning markup inside ``content`` is split out (spec 000 "Provider-Specific Handling": "Local Chat
    Completions endpoints can return reasoning fields or <think>...</think> text. The adapter separates those
    text tags for display").

    Attributes:
        families: (opening tag, closing tag) pairs; default ``TAG_FAMILIES``. Lists are taken too (as a JSON
            setting gives them) and kept as a tuple of tuples, so that the settings hash and compare as values.
        start: where a stream starts: ``content`` (a tag opens reasoning; a stray closing tag is dropped),
            ``reasoning`` (the chat template opened the tag in the prompt: text is reasoning until a closing
            tag), or ``auto`` (leading text is held back, up to ``lookahead_chars`` characters, until the first
            tag decides). Buffered bodies are split as ``auto`` with no bound (the whole text is known), or as
            ``reasoning`` with that start.
        lookahead_chars: the ``auto`` bound in characters.
        switch_chars: the bound in characters on content held back after reasoning came in a stream's own
            fields (``ThinkSplitter.reasoning_in_fields``); ``0`` turns that off.
        harmony: split gpt-oss harmony channels too.

    Raises:
        ValueError: ``families`` is not a nonempty sequence of (opening, closing) pairs of nonempty strings,
            ``start`` is not one of ``THINK_STARTS``, a bound is not a whole number of characters (0 or more), or
            ``harmony`` is not a boolean.
    """

    families: tuple[tuple[str, str], ...] = TAG_FAMILIES
    start: ThinkStart = "content"
    lookahead_chars: int = DEFAULT_LOOKAHEAD_CHARS
    switch_chars: int = DEFAULT_SWITCH_CHARS
    harmony: bool = True

    def __post_init__(self) -> None:
        families = self.families
        if (
            isinstance(families, str | bytes)
            or not isinstance(families, tuple | list)
            or not families
            or not all(
                isinstance(pair, tuple | list) and len(pair) == 2 and all(isinstance(tag, str) and tag for tag in pair)
                for pair in families
            )
        ):
            raise ValueError(
                f"families must be (opening, closing) pairs of nonempty strings, such as (('<think>', "
                f"'</think>'),), not {families!r}"
            )
        object.__setattr__(self, "families", tuple((opening, closing) for opening, closing in families))
        if self.start not in THINK_STARTS:
            raise ValueError(f"think start {self.start!r} is not one of: {', '.join(THINK_STARTS)}")
        for name in ("lookahead_chars", "switch_chars"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a whole number of characters, 0 or more, not {value!r}")
        if not isinstance(self.harmony, bool):
            raise ValueError(f"harmony must be true or false, not {self.harmony!r}")

    def splitter(self) -> ThinkSplitter:
        """A new splitter for one stream's choice."""
        return ThinkSplitter(
            self.families,
            start_in_reasoning=self.start == "reasoning",
            lookahead_chars=self.lookahead_chars if self.start == "auto" else 0,
            switch_chars=self.switch_chars,
            harmony=self.harmony,
        )

    def split_message(self, text: str, *, fields: str = "") -> SplitText:
        """Split a whole buffered ``content``.

        Args:
            text: the message's content.
            fields: the visible text of the reasoning the message carries in its own fields (``reasoning``,
                ``reasoning_content``, details), which comes before its content. When there is any, text before
                a closing tag within ``switch_chars`` characters is the end of that reasoning, as in a stream, and
                tagged reasoning that repeats it is left out (``ReasoningEcho``).
        """
        splitter = ThinkSplitter(
            self.families,
            start_in_reasoning=self.start == "reasoning",
            lookahead_chars=len(text) + 1,
            switch_chars=self.switch_chars,
            harmony=self.harmony,
        )
        if fields:
            splitter.reasoning_in_fields()
            splitter.field_reasoning(fields, whole=True)
        pieces = splitter.feed(text) + splitter.flush()
        reasoning: list[str] = []
        content: list[str] = []
        calls: list[tuple[str, list[str]]] = []
        for kind, part in pieces:
            if kind == "reasoning":
                reasoning.append(part)
            elif kind == "content":
                content.append(part)
            elif kind == "tool_call":
                calls.append((part, []))
            elif calls:
                calls[-1][1].append(part)
        return SplitText("".join(reasoning), "".join(content), tuple((name, "".join(a)) for name, a in calls))

    def split_all(self, text: str) -> tuple[str, str]:
        """Split a whole buffered ``content`` into ``(reasoning, content)`` (``split_message`` without tool
        calls)."""
        split = self.split_message(text)
        return split.reasoning, split.content
