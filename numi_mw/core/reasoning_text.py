"""Shared pieces of response normalization: think-tag settings and the visible text of reasoning details."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from numi_mw.core.think import DEFAULT_LOOKAHEAD_CHARS, TAG_FAMILIES, ThinkSplitter

ThinkStart = Literal["content", "reasoning", "auto"]


@dataclass(frozen=True, slots=True)
class ThinkTags:
    """How reasoning tags inside ``content`` are split out (spec 000 "Provider-Specific Handling", local).

    Attributes:
        families: (opening tag, closing tag) pairs; default ``think.TAG_FAMILIES``.
        start: where a stream starts: ``content`` (a tag opens reasoning; a stray closing tag is dropped),
            ``reasoning`` (the chat template opened the tag in the prompt: text is reasoning until a closing
            tag), or ``auto`` (leading text is held back, up to ``lookahead_chars`` characters, until the first
            tag decides). Buffered bodies are always split as ``auto`` with no bound: the whole text is known.
        lookahead_chars: the ``auto`` bound in characters.
    """

    families: tuple[tuple[str, str], ...] = TAG_FAMILIES
    start: ThinkStart = "content"
    lookahead_chars: int = DEFAULT_LOOKAHEAD_CHARS

    def splitter(self) -> ThinkSplitter:
        """A new splitter for one stream's choice."""
        return ThinkSplitter(
            self.families,
            start_in_reasoning=self.start == "reasoning",
            lookahead_chars=self.lookahead_chars if self.start == "auto" else 0,
        )

    def split_all(self, text: str) -> tuple[str, str]:
        """Split a whole buffered ``content`` into ``(reasoning, content)``."""
        splitter = ThinkSplitter(
            self.families, start_in_reasoning=self.start == "reasoning", lookahead_chars=len(text) + 1
        )
        pieces = splitter.feed(text) + splitter.flush()
        reasoning = "".join(t for kind, t in pieces if kind == "reasoning")
        content = "".join(t for kind, t in pieces if kind == "content")
        return reasoning, content


def visible_text(details: list[Any]) -> str:
    """The displayable text of reasoning details: ``text`` of ``reasoning.text`` and ``summary`` (or ``text``)
    of ``reasoning.summary`` entries, concatenated in order. Encrypted and unknown entries show nothing."""
    parts: list[str] = []
    for detail in details:
        if not isinstance(detail, dict):
            continue
        kind = detail.get("type")
        if kind == "reasoning.text":
            value = detail.get("text")
        elif kind == "reasoning.summary":
            value = detail.get("summary", detail.get("text"))
        else:
            continue
        if isinstance(value, str):
            parts.append(value)
    return "".join(parts)


REASONING_KEYS = ("reasoning", "reasoning_content", "reasoning_details")
"""The message and delta fields that carry reasoning; all removed when reasoning is excluded."""
