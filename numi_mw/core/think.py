"""Incremental splitter of reasoning tags (``<think>...</think>`` and kin) inside content text.

Some models and servers stream their reasoning inside the answer text, wrapped in tags, instead of a separate
reasoning field (DeepSeek-R1 on Groq and Together, Kimi K2 on Bedrock). ``ThinkSplitter.feed(text)`` takes
the content text as it streams, split at any character, and returns ``("reasoning", text)`` and
``("content", text)`` pieces; ``flush()`` ends the stream. The shells then send the reasoning pieces in the
spec 004 "Streaming" shape.

Rules:

- An opening tag switches to reasoning; the closing tag of the same family switches back to content. Tags never
  appear in the output. Inside reasoning only that closing tag is special (an opening tag there is text). In
  content a stray closing tag is dropped (content never carries a tag).
- Opening tags after visible prose are still tags: ``"Sure. <think>x</think>Done"`` gives content ``"Sure. "``,
  reasoning ``"x"``, content ``"Done"``.
- Text is never stripped: the ``"\\n\\n"`` usually following ``</think>`` stays in the content.
- A possible partial tag at the end of a fed piece (``"<th"``, ``"</thin"``, ``"◁"``) is held back until the next
  piece decides it; ``flush()`` emits it as the current kind (it was not a tag after all).
- An unclosed reasoning tag at the end: ``flush()`` emits the rest as reasoning.
- Streams that start inside reasoning (a chat template that puts ``<think>`` in the prompt, so the model only
  writes the closing tag): pass ``start_in_reasoning=True`` when that is known. Otherwise the splitter decides by
  itself (auto mode): until the first tag, it holds back the leading text (up to ``lookahead_chars``
  characters). If a closing tag comes first, the held text is reasoning; if an opening tag comes first, or the
  held text grows past ``lookahead_chars``, or the stream ends, it is content. The price is latency: a stream
  without any tag shows no content until ``lookahead_chars`` characters or the end have arrived, so use the
  splitter only for models that emit tags, or lower ``lookahead_chars`` (``0`` turns auto mode off).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

__all__ = ["DEFAULT_LOOKAHEAD_CHARS", "TAG_FAMILIES", "Piece", "ThinkSplitter", "ThinkStart", "ThinkTags"]

TAG_FAMILIES: tuple[tuple[str, str], ...] = (
    ("<think>", "</think>"),
    ("<thinking>", "</thinking>"),
    ("<reasoning>", "</reasoning>"),
    ("<|begin_of_thought|>", "<|end_of_thought|>"),
    ("◁think▷", "◁/think▷"),
)
"""Default tag families: (opening tag, closing tag)."""

DEFAULT_LOOKAHEAD_CHARS = 64 * 1024
"""Default bound (characters) on leading text held back in auto mode before the first tag."""

Kind = Literal["reasoning", "content"]
Piece = tuple[Kind, str]

_CONTENT: Kind = "content"
_REASONING: Kind = "reasoning"

# Parser states that search for more than one closing tag (a state awaiting one closing tag is keyed by it).
_S_CONTENT = 0  # content: opening tags
_S_AUTO = 1  # auto mode before the first tag: opening and closing tags
_S_ANY_CLOSE = 2  # reasoning from the start (start_in_reasoning): any closing tag


def _prefixes(tags: Iterable[str]) -> frozenset[str]:
    """Every proper, nonempty prefix of each tag."""
    return frozenset(tag[:k] for tag in tags for k in range(1, len(tag)))


class ThinkSplitter:
    """Split streamed content text into reasoning and content pieces at reasoning tags.

    Args:
        families: (opening tag, closing tag) pairs; default ``TAG_FAMILIES``. Tags must be nonempty.
        start_in_reasoning: the caller knows the stream starts inside reasoning (the opening tag was in the
            prompt); text is reasoning until the first closing tag of any family.
        lookahead_chars: auto mode bound (characters, not bytes) on the leading text held back before the first
            tag, when ``start_in_reasoning`` is false; ``0`` turns auto mode off (leading text is content at
            once, and a closing tag before any opening tag is dropped). The bound is checked at the end of
            each ``feed``, so near the bound the decision can depend on how the text was chunked; below it the
            output never does.

    Raises:
        ValueError: no families, an empty tag, or a negative ``lookahead_chars``.

    One instance per stream (per choice). After ``flush()`` it is back in its initial state.
    """

    __slots__ = (
        "_close",
        "_lead",
        "_lead_len",
        "_longest_prefix",
        "_lookahead",
        "_mode",
        "_open_to_close",
        "_pending",
        "_prefix_sets",
        "_start_in_reasoning",
        "_tags_by_state",
        "_undecided",
    )

    def __init__(
        self,
        families: Iterable[tuple[str, str]] = TAG_FAMILIES,
        *,
        start_in_reasoning: bool = False,
        lookahead_chars: int = DEFAULT_LOOKAHEAD_CHARS,
    ) -> None:
        pairs = tuple((str(o), str(c)) for o, c in families)
        if not pairs:
            raise ValueError("ThinkSplitter needs at least one tag family")
        if any(not o or not c for o, c in pairs):
            raise ValueError("reasoning tags must be nonempty strings")
        if lookahead_chars < 0:
            raise ValueError("lookahead_chars must be >= 0")
        self._open_to_close: dict[str, str] = {}
        for o, c in pairs:
            self._open_to_close.setdefault(o, c)
        opens = tuple(self._open_to_close)
        closes = tuple(dict.fromkeys(c for _, c in pairs))
        # Tags searched for in each state (see _state), with their proper prefixes.
        self._tags_by_state: dict[int | str, tuple[str, ...]] = {
            _S_CONTENT: opens + tuple(c for c in closes if c not in self._open_to_close),
            _S_AUTO: opens + tuple(c for c in closes if c not in self._open_to_close),
            _S_ANY_CLOSE: closes,
        }
        for c in closes:
            self._tags_by_state[c] = (c,)
        self._prefix_sets = {key: _prefixes(tags) for key, tags in self._tags_by_state.items()}
        self._longest_prefix = {key: max(map(len, tags)) - 1 for key, tags in self._tags_by_state.items()}
        self._start_in_reasoning = start_in_reasoning
        self._lookahead = lookahead_chars
        self._reset()

    def _reset(self) -> None:
        self._mode: Kind = _REASONING if self._start_in_reasoning else _CONTENT
        # The closing tag that ends the current reasoning (None: any family's closing tag).
        self._close: str | None = None
        self._undecided = not self._start_in_reasoning and self._lookahead > 0
        self._lead: list[str] = []
        self._lead_len = 0
        self._pending = ""

    @property
    def mode(self) -> Kind:
        """The kind of the text being read now: ``"reasoning"`` or ``"content"``."""
        return self._mode

    @property
    def holds_reasoning(self) -> bool:
        """Whether text held back so far may turn out to be reasoning: leading text in auto mode, or a possible
        partial tag inside reasoning."""
        return (self._undecided and self._lead_len > 0) or (self._mode == _REASONING and self._pending != "")

    def feed(self, text: str) -> list[Piece]:
        """Add the next piece of content text; return the pieces it decides, in order.

        Args:
            text: the next content text of the stream (a str, split at any character).

        Returns:
            ``(kind, text)`` pieces with ``kind`` ``"reasoning"`` or ``"content"``; adjacent pieces of the same
            kind are merged and empty pieces left out. Text that cannot be decided yet (a possible partial tag at
            the end, or leading text in auto mode) is held back for a later ``feed`` or ``flush``.
        """
        out: list[Piece] = []
        self._scan(self._pending + text if self._pending else text, out)
        return out

    def flush(self) -> list[Piece]:
        """End the stream: return the held-back text and reset the splitter.

        A held-back partial tag is emitted as the current kind (it was not a tag); leading text held in auto mode
        is content (no closing tag came); the rest of an unclosed reasoning tag is reasoning.

        Returns:
            The remaining pieces, as for ``feed``.
        """
        out: list[Piece] = []
        pending = self._pending
        self._pending = ""
        self._emit(out, pending)
        if self._undecided:
            self._release_lead(out, _CONTENT)
        self._reset()
        return out

    def _state(self) -> int | str:
        """The key of the tags searched for now: a closing tag awaited in reasoning, or an ``_S_*`` value."""
        if self._mode == _REASONING:
            return _S_ANY_CLOSE if self._close is None else self._close
        return _S_AUTO if self._undecided else _S_CONTENT

    def _emit(self, out: list[Piece], text: str) -> None:
        if not text:
            return
        if self._undecided:
            self._lead.append(text)
            self._lead_len += len(text)
            return
        if out and out[-1][0] == self._mode:
            out[-1] = (self._mode, out[-1][1] + text)
        else:
            out.append((self._mode, text))

    def _release_lead(self, out: list[Piece], kind: Kind) -> None:
        self._undecided = False
        text = "".join(self._lead)
        self._lead = []
        self._lead_len = 0
        if text:
            if out and out[-1][0] == kind:
                out[-1] = (kind, out[-1][1] + text)
            else:
                out.append((kind, text))

    def _on_tag(self, tag: str, out: list[Piece]) -> None:
        if self._mode == _REASONING:
            self._mode = _CONTENT
            self._close = None
        elif tag in self._open_to_close:
            if self._undecided:
                self._release_lead(out, _CONTENT)
            self._mode = _REASONING
            self._close = self._open_to_close[tag]
        elif self._undecided:  # a closing tag before any opening tag (auto mode): the leading text was reasoning
            self._release_lead(out, _REASONING)
        # else: a stray closing tag in decided content is dropped: content never carries a tag

    def _scan(self, text: str, out: list[Piece]) -> None:
        pos = 0
        found: dict[str, int] = {}  # tag -> next index at or after some earlier pos, -1 for none
        while True:
            best = -1
            best_tag = ""
            for tag in self._tags_by_state[self._state()]:
                i = found.get(tag, -2)
                if i == -2 or (i != -1 and i < pos):
                    i = text.find(tag, pos)
                    found[tag] = i
                if i != -1 and (best == -1 or i < best or (i == best and len(tag) > len(best_tag))):
                    best = i
                    best_tag = tag
            if best == -1:
                break
            self._emit(out, text[pos:best])
            pos = best + len(best_tag)
            self._on_tag(best_tag, out)
        hold = self._partial_tag_len(text, pos)
        end = len(text) - hold
        self._emit(out, text[pos:end])
        self._pending = text[end:]
        if self._undecided and self._lead_len > self._lookahead:
            self._release_lead(out, _CONTENT)

    def _partial_tag_len(self, text: str, pos: int) -> int:
        """Length of the longest suffix of ``text[pos:]`` that is a proper prefix of a tag searched for now."""
        state = self._state()
        prefixes = self._prefix_sets[state]
        n = len(text)
        for k in range(min(self._longest_prefix[state], n - pos), 0, -1):
            if text[n - k :] in prefixes:
                return k
        return 0


ThinkStart = Literal["content", "reasoning", "auto"]
THINK_STARTS: tuple[ThinkStart, ...] = ("content", "reasoning", "auto")


@dataclass(frozen=True, slots=True)
class ThinkTags:
    """How reasoning tags inside ``content`` are split out (spec 000 "Provider-Specific Handling": "Local Chat
    Completions endpoints can return reasoning fields or <think>...</think> text").

    Attributes:
        families: (opening tag, closing tag) pairs; default ``TAG_FAMILIES``.
        start: where a stream starts: ``content`` (a tag opens reasoning; a stray closing tag is dropped),
            ``reasoning`` (the chat template opened the tag in the prompt: text is reasoning until a closing
            tag), or ``auto`` (leading text is held back, up to ``lookahead_chars`` characters, until the first
            tag decides). Buffered bodies are always split as ``auto`` with no bound: the whole text is known.
        lookahead_chars: the ``auto`` bound in characters.

    Raises:
        ValueError: ``start`` is not one of ``THINK_STARTS``, or ``lookahead_chars`` is negative.
    """

    families: tuple[tuple[str, str], ...] = TAG_FAMILIES
    start: ThinkStart = "content"
    lookahead_chars: int = DEFAULT_LOOKAHEAD_CHARS

    def __post_init__(self) -> None:
        if self.start not in THINK_STARTS:
            raise ValueError(f"think start {self.start!r} is not one of: {', '.join(THINK_STARTS)}")
        if self.lookahead_chars < 0:
            raise ValueError("lookahead_chars must be >= 0")

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
