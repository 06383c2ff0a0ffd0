"""The incremental splitter of reasoning markup (``<think>...</think>`` and kin, gpt-oss harmony channels) inside
content text.

Some models and servers stream their reasoning inside the answer text instead of a separate reasoning field:
wrapped in tags (DeepSeek-R1 on Groq and Together, Kimi K2 on Bedrock, llama.cpp with ``--reasoning-format
none``, vLLM without a reasoning parser) or in gpt-oss's harmony channels (servers without a harmony parser).
``ThinkSplitter.feed(text)`` takes the content text as it streams, split at any character, and returns
``(kind, text)`` pieces; ``flush()`` ends the stream. The shells send the reasoning pieces in the spec 004
"Streaming" shape. Every rule below gives the same pieces, merged, whatever the split of the text.

Tags:

- An opening tag opens a reasoning block; the block ends at its own closing tag: an opening tag of the same
  family inside it is text and counts one level deeper, so a block that quotes ``<think>...</think>`` keeps the
  quote. A tag of another family inside a block is text. Tags never appear in the output: in content a stray
  closing tag is dropped (with the newlines after it, as below). Opening tags after visible prose are still
  tags.
- Whitespace follows llama.cpp's own parser (``common/chat-auto-parser-generator.cpp``,
  ``analyze_reasoning::build_parser``: ``optspace(start) + reasoning(until(end)) + optspace(end)`` with the
  ``"<think>\\n"`` / ``"\\n</think>\\n\\n"`` markers its differential analysis finds in Qwen3- and
  DeepSeek-style templates; ``common/chat-peg-parser.cpp``, ``common_chat_peg_mapper::from_ast``): one
  ``"\\n"`` right after the opening tag is dropped, the reasoning keeps its trailing whitespace, up to two
  ``"\\n"`` right after the closing tag are dropped, and a block holding only whitespace (spaces, tabs, line
  ends) gives no reasoning. Its leading whitespace is therefore held back until the block's first other
  character.
- A possible partial tag at the end of a fed piece (``"<th"``, ``"</thin"``, ``"◁"``, ``"<|chan"``) is held
  back until the next piece decides it; ``flush()`` emits it as the current kind (it was not a tag after all).
- An unclosed reasoning block at the end: ``flush()`` ends it, its text was reasoning.

Where a stream starts:

- ``content`` (``start_in_reasoning=False``, ``lookahead_chars=0``): text is content until an opening tag.
- ``start_in_reasoning=True``: the chat template opened the tag in the prompt, so the model writes only the
  closing tag; text is reasoning until the first closing tag of any family. An opening tag before any other
  text is the prompt's own tag repeated (llama.cpp with ``reasoning_format: "none"`` puts the template's
  ``<think>`` back in front of the output) and opens that same block.
- auto (``lookahead_chars > 0``): the leading text is held back until the first tag decides: a closing tag
  first makes it reasoning, an opening tag first (or a text longer than ``lookahead_chars`` before any tag, or
  the end of the stream) makes it content. A tag-less stream shows no content until ``lookahead_chars``
  characters or its end have arrived.

From reasoning fields to tags (``reasoning_in_fields``): when a stream carries reasoning in its own fields
(``reasoning_content``, ``reasoning``) and then switches to content, a server whose parser ends the reasoning
late sends the end of the reasoning and its closing tag inside the content. So after reasoning in a chunk's
fields (its content text comes after them), the splitter holds the content text back, at most ``switch_chars``
characters: a closing tag within them makes the held text reasoning (the end of the fields' reasoning), an
opening tag or anything longer makes it content.

gpt-oss harmony (``harmony=True``): ``<|channel|>`` or ``<|start|>`` begins a message header that runs to
``<|message|>`` (at most ``HARMONY_HEADER_CHARS`` characters, else it was not a header: its text is content, and
the text after its bound is read as content, wherever the feeds are cut);
the message body runs to ``<|end|>``, ``<|return|>`` or ``<|call|>``, or to the next header. The ``analysis``
channel is reasoning; ``final`` and ``commentary`` without a recipient (a preamble) are content; a message to
``functions.NAME`` is a tool call: a ``("tool_call", NAME)`` piece, then its body as ``("tool_arguments",
text)`` pieces; a message to any other recipient (a built-in tool) is reasoning. No marker is ever emitted.
The header is read as openai-harmony reads it (``src/encoding.rs``, ``parse_header_from_string``: the channel
after ``<|channel|>`` up to whitespace or ``<``, the recipient a ``to=`` word of the role or channel section);
the channel mapping is vLLM's (``vllm/entrypoints/openai/chat_completion/stream_harmony.py``) and llama.cpp's
(``common/parsers/gpt-oss.cpp``).

Its settings, as a caller gives them, are ``think.ThinkTags``, which builds the splitter for each stream
(``ThinkTags.splitter``); every public name here is importable from ``think`` too.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from typing import Literal

from numi_mw.core import codec

__all__ = [
    "DEFAULT_LOOKAHEAD_CHARS",
    "DEFAULT_SWITCH_CHARS",
    "HARMONY_HEADER_CHARS",
    "MAX_ECHO_CHARS",
    "TAG_FAMILIES",
    "Piece",
    "ReasoningEcho",
    "ThinkSplitter",
    "harmony_header",
]

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

DEFAULT_SWITCH_CHARS = 64
"""Default bound (characters) on content text held back after reasoning came in a stream's own fields: the
end of the reasoning a server's parser let through late is a few tokens and a closing tag, never more."""

HARMONY_HEADER_CHARS = 256
"""Bound (characters) on a harmony message header (``<|start|>assistant<|channel|>commentary
to=functions.NAME <|constrain|>json``); a longer text before ``<|message|>`` was no header."""

Kind = Literal["reasoning", "content", "tool_call", "tool_arguments"]
Piece = tuple[Kind, str]

_CONTENT: Kind = "content"
_REASONING: Kind = "reasoning"
_TOOL_CALL: Kind = "tool_call"
_TOOL_ARGUMENTS: Kind = "tool_arguments"

_WHITESPACE = " \t\r\n"  # llama.cpp's whitespace-only test (common_chat_peg_mapper::from_ast)

_START = "<|start|>"
_CHANNEL = "<|channel|>"
_MESSAGE = "<|message|>"
_CONSTRAIN = "<|constrain|>"
_END = "<|end|>"
_RETURN = "<|return|>"
_CALL = "<|call|>"
_HARMONY_OPENERS = (_START, _CHANNEL)
_HARMONY_ENDS = (_END, _RETURN, _CALL)
_HARMONY_MARKERS = (_START, _CHANNEL, _MESSAGE, _CONSTRAIN, _END, _RETURN, _CALL)

# Parser states. A reasoning block of a known family is keyed by its opening tag in the tag tables.
_S_CONTENT = 0  # content: opening tags open blocks, closing tags are stray, harmony headers start
_S_LEAD = 1  # content text held back until a tag decides (auto start, or the switch from reasoning fields)
_S_BLOCK = 2  # inside a reasoning block of a known family (``_open``, ``_close``, ``_depth``)
_S_IMPLICIT = 3  # reasoning from the start of the stream, family unknown (start_in_reasoning)
_S_HEADER = 4  # a harmony message header, up to <|message|>
_S_BODY = 5  # a harmony message body (``_body``: its kind)

_LEAD_AUTO = 0
_LEAD_SWITCH = 1


class _Table:
    """The tags searched for in one state: their first characters, the tags by first character (longest
    first), the proper prefixes of the tags and the longest tag's length."""

    __slots__ = ("by_first", "longest", "prefixes", "triggers")

    def __init__(self, tags: Iterable[str]) -> None:
        ordered = sorted(dict.fromkeys(tags), key=len, reverse=True)
        by_first: dict[str, list[str]] = {}
        for tag in ordered:
            by_first.setdefault(tag[0], []).append(tag)
        self.by_first = {first: tuple(group) for first, group in by_first.items()}
        self.triggers = tuple(self.by_first)
        self.prefixes = frozenset(tag[:k] for tag in ordered for k in range(1, len(tag)))
        self.longest = max(map(len, ordered))


@lru_cache(maxsize=32)
def _tables(
    pairs: tuple[tuple[str, str], ...], harmony: bool
) -> tuple[dict[str, str], frozenset[str], dict[int | str, _Table], tuple[str, ...]]:
    """The tag tables of a splitter for ``pairs`` (built once per set of families and shared: a splitter is made
    per stream): the closing tag of each opening tag, the closing tags, the tags of each state and every tag's
    first character."""
    open_to_close: dict[str, str] = {}
    for o, c in pairs:
        open_to_close.setdefault(o, c)
    opens = tuple(open_to_close)
    closes = tuple(dict.fromkeys(c for _, c in pairs))
    markers = _HARMONY_MARKERS if harmony else ()
    openers = _HARMONY_OPENERS if harmony else ()
    tables: dict[int | str, _Table] = {
        _S_CONTENT: _Table((*opens, *closes, *markers)),
        _S_IMPLICIT: _Table((*opens, *closes, *openers)),
    }
    tables[_S_LEAD] = tables[_S_CONTENT]
    for o in opens:
        tables[o] = _Table((o, open_to_close[o]))
    if harmony:
        tables[_S_HEADER] = _Table((_MESSAGE, _START, *_HARMONY_ENDS))
        tables[_S_BODY] = _Table(_HARMONY_MARKERS)
    triggers = tuple(dict.fromkeys(c for table in tables.values() for c in table.triggers))
    return open_to_close, frozenset(closes), tables, triggers


class ThinkSplitter:
    """Split streamed content text into reasoning and content pieces at reasoning markup (module docstring).

    Args:
        families: (opening tag, closing tag) pairs; default ``TAG_FAMILIES``. Tags must be nonempty.
        start_in_reasoning: the caller knows the stream starts inside reasoning (the opening tag was in the
            prompt); text is reasoning until the first closing tag of any family.
        lookahead_chars: auto mode bound (characters, not bytes) on the leading text held back before the first
            tag, when ``start_in_reasoning`` is false; ``0`` turns auto mode off (leading text is content at
            once, and a closing tag before any opening tag is dropped). A closing tag that starts after more
            than ``lookahead_chars`` characters of held text no longer makes it reasoning.
        switch_chars: bound (characters) on the content text held back after ``reasoning_in_fields``; ``0``
            turns the switch off.
        harmony: split gpt-oss harmony channels too.

    Raises:
        ValueError: no families, an empty tag, or a negative bound.

    Pieces are ``("reasoning", text)``, ``("content", text)``, and for harmony tool calls ``("tool_call",
    name)`` followed by its ``("tool_arguments", text)``. One instance per stream (per choice). After
    ``flush()`` it is back in its initial state.
    """

    __slots__ = (
        "_body",
        "_close",
        "_closes",
        "_depth",
        "_direct",
        "_echo",
        "_fresh",
        "_harmony",
        "_header",
        "_lead",
        "_lead_kind",
        "_lead_len",
        "_lookahead",
        "_nl_after",
        "_open",
        "_open_to_close",
        "_pending",
        "_skip_nl",
        "_start_in_reasoning",
        "_state",
        "_switch",
        "_tables",
        "_trigger_bytes",
        "_triggers",
        "_ws",
    )

    def __init__(
        self,
        families: Iterable[tuple[str, str]] = TAG_FAMILIES,
        *,
        start_in_reasoning: bool = False,
        lookahead_chars: int = DEFAULT_LOOKAHEAD_CHARS,
        switch_chars: int = DEFAULT_SWITCH_CHARS,
        harmony: bool = True,
    ) -> None:
        pairs = tuple((str(o), str(c)) for o, c in families)
        if not pairs:
            raise ValueError("ThinkSplitter needs at least one tag family")
        if any(not o or not c for o, c in pairs):
            raise ValueError("reasoning tags must be nonempty strings")
        if lookahead_chars < 0 or switch_chars < 0:
            raise ValueError("lookahead_chars and switch_chars must be >= 0")
        self._open_to_close, self._closes, self._tables, self._triggers = _tables(pairs, harmony)
        self._trigger_bytes = tuple(codec.encode(trigger)[1:-1] for trigger in self._triggers)
        self._harmony = harmony
        self._start_in_reasoning = start_in_reasoning
        self._lookahead = lookahead_chars
        self._switch = switch_chars
        self._echo: ReasoningEcho | None = None  # made by the first ``field_reasoning``
        self._reset()

    def _reset(self) -> None:
        self._open = ""  # the opening tag of the current block ("" for none or unknown)
        self._close: str | None = None
        self._depth = 0
        self._skip_nl = False  # drop one "\n" next (right after an opening tag)
        self._fresh = False  # in a block before its first character that is not whitespace
        self._ws = ""  # the whitespace held meanwhile
        self._nl_after = 0  # "\n" still to drop right after a closing tag
        self._lead: list[str] = []
        self._lead_len = 0
        self._lead_kind = _LEAD_AUTO
        self._header = ""
        self._body: Kind = _CONTENT
        self._pending = ""
        if self._start_in_reasoning:
            self._state = _S_IMPLICIT
            self._fresh = True
        elif self._lookahead > 0:
            self._state = _S_LEAD
        else:
            self._state = _S_CONTENT
        self._direct: Kind | None = None
        self._update_direct()

    @property
    def mode(self) -> Kind:
        """The kind of the text being read now: ``"reasoning"``, ``"content"`` or, inside a harmony tool call,
        ``"tool_arguments"``."""
        state = self._state
        if state in (_S_BLOCK, _S_IMPLICIT):
            return _REASONING
        if state == _S_BODY:
            return self._body
        return _CONTENT

    def reasoning_in_fields(self) -> None:
        """The stream has just carried reasoning in its own fields (content text fed next, in the same chunk or
        later, comes after it): from now on, content text is held back (at most ``switch_chars`` characters)
        until a tag decides whether it is the end of that reasoning (a closing tag) or content. Nothing changes
        inside a reasoning block, inside harmony markup, or after content text was already held or read as
        reasoning."""
        if self._switch <= 0:
            return
        state = self._state
        if not (
            state == _S_CONTENT
            or (state == _S_LEAD and self._lead_kind == _LEAD_AUTO and self._lead_len == 0)
            or (state == _S_IMPLICIT and self._fresh and not self._ws and not self._pending)
        ):
            return
        self._state = _S_LEAD
        self._lead_kind = _LEAD_SWITCH
        self._fresh = False
        self._direct = None

    def end_hold(self) -> list[Piece]:
        """Something that is not content text has come (a tool call, a refusal, the choice's finish): content text
        held back until a tag decides (auto start, the switch from reasoning fields) and a possible partial tag at
        the end of content go out now, as content, so that they keep their place before it. Nothing changes inside
        reasoning or harmony markup.

        Returns:
            The pieces released, as for ``feed``.
        """
        out: list[Piece] = []
        state = self._state
        if state in (_S_CONTENT, _S_LEAD):
            pending = self._pending
            if pending:
                self._pending = ""
                self._emit(out, pending)
            if state == _S_LEAD:
                self._release_lead(out)
        out = self._settle(out)
        self._update_direct()
        return out

    def field_reasoning(self, text: str, *, whole: bool = False) -> None:
        """The stream (or message) carried reasoning ``text`` in its own fields, before the content text fed next:
        tagged reasoning that repeats it is dropped, by the rule of ``ReasoningEcho`` (with ``whole``, for a whole
        message's reasoning, without ``MAX_ECHO_CHARS``)."""
        if not text:
            return
        echo = self._echo
        if echo is None:
            echo = self._echo = ReasoningEcho(None if whole else MAX_ECHO_CHARS)
        echo.fields(text)
        self._direct = None  # every piece goes through the echo rule

    def feed(self, text: str) -> list[Piece]:
        """Add the next piece of content text; return the pieces it decides, in order.

        Args:
            text: the next content text of the stream (a str, split at any character).

        Returns:
            ``(kind, text)`` pieces; adjacent pieces of the same kind are merged (but for ``tool_call``) and empty
            pieces left out. Text that cannot be decided yet (a possible partial tag at the end, leading text in
            auto mode, leading whitespace of a block) is held back for a later ``feed`` or ``flush``.
        """
        direct = self._direct
        if direct is not None and not self._pending:
            for trigger in self._triggers:
                if trigger in text:
                    break
            else:
                return [(direct, text)] if text else []
        out: list[Piece] = []
        if self._pending:
            text = self._pending + text
            self._pending = ""
        self._scan(text, out)
        echo = self._echo
        if echo is not None and echo.active:
            out = echo.filter(out)
            if not echo.active:
                self._update_direct()
        return out

    def takes_whole(self, raw: bytes, kind: Kind) -> bool:
        """Whether ``feed`` of the text whose JSON string contents are ``raw`` (as msgspec's encoder writes them,
        ``shapes.canonical_text``) would give it back as one piece of ``kind`` and change nothing: the splitter reads
        that kind with nothing held, and no character that may start a tag is in the text (each is in ``raw`` as
        its encoder's bytes wherever it is in the text)."""
        if self._direct != kind or self._pending:
            return False
        for trigger in self._trigger_bytes:  # (no generator: it runs once per chunk)
            if raw.find(trigger) >= 0:  # not ``in``, which first tries a bytes needle as an integer
                break
        else:
            return True
        return False

    def flush(self) -> list[Piece]:
        """End the stream: return the held-back text and reset the splitter.

        A held-back partial tag is emitted as the current kind (it was not a tag); leading text held in auto mode
        or after the switch is content (no closing tag came); a block holding only whitespace gives nothing;
        an unfinished harmony header is dropped.

        Returns:
            The remaining pieces, as for ``feed``.
        """
        out: list[Piece] = []
        pending = self._pending
        self._pending = ""
        if pending:
            self._emit(out, pending)
            if self._state == _S_HEADER and len(self._header) > HARMONY_HEADER_CHARS:
                self._abandon_header(out)  # the partial tag took the header past its bound: it was content
        if self._state == _S_LEAD:
            self._release_lead(out)
        out = self._settle(out)
        self._reset()
        return out

    def _settle(self, out: list[Piece]) -> list[Piece]:
        """``out`` through the echo rule, the phase of reasoning ended after it (``ReasoningEcho.settle``)."""
        echo = self._echo
        if echo is None or not echo.active:
            return out
        out = echo.filter(out)
        for kind, text in echo.settle():
            _put(out, kind, text)
        return out

    # --- scanning ----------------------------------------------------------------------------------------------

    def _key(self) -> int | str:
        state = self._state
        return self._open if state == _S_BLOCK else state

    def _scan(self, text: str, out: list[Piece]) -> None:
        n = len(text)
        pos = 0  # start of the text not emitted yet
        search = 0  # where the search for the next tag goes on
        nexts: dict[str, int] = {}  # trigger character -> its next index at or after some earlier search
        while True:
            table = self._tables[self._key()]
            i = -1
            for trigger in table.triggers:
                j = nexts.get(trigger, -2)
                if j == -2 or (j != -1 and j < search):
                    j = text.find(trigger, search)
                    nexts[trigger] = j
                if j != -1 and (i == -1 or j < i):
                    i = j
            if self._state == _S_HEADER:  # a header ends being one at its bound's next character, wherever the
                room = HARMONY_HEADER_CHARS - len(self._header)  # feeds are cut: from there the text is content
                end = n if i == -1 else i
                if end - pos > room:
                    cut = pos + room + 1
                    self._header += text[pos:cut]
                    self._abandon_header(out)
                    pos = search = cut
                    continue
            if i == -1:
                break
            tag = ""
            for candidate in table.by_first[text[i]]:
                if text.startswith(candidate, i):
                    tag = candidate
                    break
            if not tag:
                if n - i < table.longest and text[i:] in table.prefixes:
                    if pos < i:
                        self._emit(out, text[pos:i])
                    self._pending = text[i:]
                    self._end_of_feed(out)
                    return
                search = i + 1
                continue
            if pos < i:
                self._emit(out, text[pos:i])
            pos = search = i + len(tag)
            self._on_tag(tag, out)
        if pos < n:
            self._emit(out, text[pos:])
        self._end_of_feed(out)

    def _end_of_feed(self, out: list[Piece]) -> None:
        state = self._state
        if state == _S_LEAD:
            bound = self._lookahead if self._lead_kind == _LEAD_AUTO else self._switch
            if self._lead_len > bound:
                self._release_lead(out)
        self._update_direct()

    def _update_direct(self) -> None:
        """The kind a fed text without any tag character goes out as directly, or ``None`` for the general path."""
        state = self._state
        if state == _S_CONTENT:
            self._direct = None if self._nl_after else _CONTENT
        elif state in (_S_BLOCK, _S_IMPLICIT):
            self._direct = None if self._skip_nl or self._fresh else _REASONING
        elif state == _S_BODY:
            self._direct = self._body
        else:
            self._direct = None
        if self._echo is not None and self._echo.active:
            self._direct = None

    # --- output ------------------------------------------------------------------------------------------------

    def _emit(self, out: list[Piece], text: str) -> None:
        """Take ``text`` (no tag in it) in the current state."""
        state = self._state
        kind: Kind
        if state in (_S_CONTENT, _S_LEAD):
            if self._nl_after:
                k = 0
                limit = min(self._nl_after, len(text))
                while k < limit and text[k] == "\n":
                    k += 1
                text = text[k:]
                self._nl_after = 0 if text else self._nl_after - k
                if not text:
                    return
            if state == _S_LEAD:
                self._lead.append(text)
                self._lead_len += len(text)
                return
            kind = _CONTENT
        elif state in (_S_BLOCK, _S_IMPLICIT):
            if self._skip_nl:
                self._skip_nl = False
                if text[0] == "\n":
                    text = text[1:]
                    if not text:
                        return
            if self._fresh:
                if not text.lstrip(_WHITESPACE):
                    self._ws += text
                    return
                self._fresh = False
                text = self._ws + text
                self._ws = ""
            kind = _REASONING
        elif state == _S_HEADER:
            self._header += text
            return
        else:
            kind = self._body
        if out and out[-1][0] == kind:
            out[-1] = (kind, out[-1][1] + text)
        else:
            out.append((kind, text))

    def _release_lead(self, out: list[Piece]) -> None:
        """The held leading text is content."""
        text = "".join(self._lead)
        self._lead = []
        self._lead_len = 0
        self._state = _S_CONTENT
        _put(out, _CONTENT, text)

    # --- tags --------------------------------------------------------------------------------------------------

    def _open_block(self, tag: str) -> None:
        self._state = _S_BLOCK
        self._open = tag
        self._close = self._open_to_close[tag]
        self._depth = 1
        self._skip_nl = True
        self._fresh = True
        self._ws = ""

    def _end_block(self) -> None:
        self._state = _S_CONTENT
        self._open = ""
        self._close = None
        self._depth = 0
        self._skip_nl = False
        self._fresh = False
        self._ws = ""  # a block of whitespace only gives no reasoning
        self._nl_after = 2

    def _on_tag(self, tag: str, out: list[Piece]) -> None:
        state = self._state
        if state == _S_BLOCK:
            if tag == self._close:
                self._depth -= 1
                if self._depth == 0:
                    self._end_block()
                    return
            else:
                self._depth += 1
            self._emit(out, tag)  # a nested tag of the block's family is text
        elif state in (_S_CONTENT, _S_LEAD):
            if tag in self._open_to_close:
                if state == _S_LEAD:
                    self._release_lead(out)
                self._nl_after = 0
                self._open_block(tag)
            elif tag in self._closes:
                if state == _S_LEAD:
                    self._close_lead(out)
                else:  # a stray closing tag in content is dropped (content never carries a tag), and the
                    self._nl_after = 2  # newlines after it are markup like those after any closing tag
            elif tag in _HARMONY_OPENERS:
                if state == _S_LEAD:
                    self._release_lead(out)
                self._nl_after = 0
                self._start_header(tag)
            # else: a stray harmony marker in content is dropped
        elif state == _S_IMPLICIT:
            if tag in self._open_to_close:
                fresh = self._fresh
                self._open_block(tag)
                if not fresh:  # a quoted tag after reasoning text: one level deeper in a block of its family
                    self._depth = 2
                    self._skip_nl = False
                    self._fresh = False
                    self._emit(out, tag)
                # else: the prompt's own opening tag, repeated: the same block
            elif tag in self._closes:
                self._end_block()
            else:
                self._ws = ""
                self._fresh = False
                self._start_header(tag)
        elif state == _S_HEADER:  # within its bound: ``_scan`` ends a header at its bound's next character
            if tag == _MESSAGE:
                self._start_body(out)
            elif tag == _START:
                self._header = ""
            else:
                self._header = ""  # a message ended inside its header: nothing to show
                self._state = _S_CONTENT
        else:  # _S_BODY
            if tag in _HARMONY_ENDS:
                self._state = _S_CONTENT
            elif tag in _HARMONY_OPENERS:
                self._start_header(tag)
            # else: <|message|> or <|constrain|> inside a body is dropped

    def _close_lead(self, out: list[Piece]) -> None:
        """A closing tag while text is held: within the bound the held text was reasoning."""
        bound = self._lookahead if self._lead_kind == _LEAD_AUTO else self._switch
        if self._lead_len > bound:
            self._release_lead(out)  # the tag came too late: it is a stray tag in content
            self._nl_after = 2
            return
        text = "".join(self._lead)
        self._lead = []
        self._lead_len = 0
        if self._lead_kind == _LEAD_SWITCH or text.lstrip(_WHITESPACE):
            _put(out, _REASONING, text)
        self._end_block()

    def _start_header(self, tag: str) -> None:
        self._state = _S_HEADER
        self._header = tag if tag == _CHANNEL else ""

    def _abandon_header(self, out: list[Piece]) -> None:
        """A header too long to be one: its text (without markers) is content."""
        text = self._header
        for marker in _HARMONY_MARKERS:
            text = text.replace(marker, "")
        self._header = ""
        self._state = _S_CONTENT
        _put(out, _CONTENT, text)

    def _start_body(self, out: list[Piece]) -> None:
        kind, name = harmony_header(self._header)
        self._header = ""
        self._state = _S_BODY
        if kind == _TOOL_CALL:
            out.append((_TOOL_CALL, name))
            self._body = _TOOL_ARGUMENTS
        else:
            self._body = kind


def harmony_header(header: str) -> tuple[Kind, str]:
    """What a harmony message with this header is: ``("tool_call", NAME)`` for a recipient ``functions.NAME``,
    ``("reasoning", "")`` for the ``analysis`` channel or another recipient (a built-in tool), else
    ``("content", "")`` (``final``, ``commentary`` preambles, no channel).

    Args:
        header: the text between ``<|start|>`` (or from ``<|channel|>``) and ``<|message|>``, markers kept:
            ``"assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"``.

    The header is read as openai-harmony's ``parse_header_from_string`` reads it (``src/encoding.rs``).
    """
    channel = ""
    at = header.find(_CHANNEL)
    if at >= 0:
        rest = header[at + len(_CHANNEL) :]
        end = len(rest)
        for k, char in enumerate(rest):
            if char.isspace() or char == "<":
                end = k
                break
        channel = rest[:end]
        header = header[:at] + " " + rest[end:]
    recipient = ""
    for word in header.replace(_CONSTRAIN, " ").split():
        if word.startswith("to="):
            recipient = word[3:]
            break
    if recipient.startswith("functions.") and len(recipient) > len("functions."):
        return _TOOL_CALL, recipient[len("functions.") :]
    if recipient and recipient not in ("assistant", "all"):
        return _REASONING, ""
    return (_REASONING if channel == "analysis" else _CONTENT), ""


def _put(out: list[Piece], kind: Kind, text: str) -> None:
    """Append ``text`` of ``kind`` to ``out``, joined to the last piece when it is of the same kind (a tool call
    starts a new piece every time)."""
    if not text:
        return
    if out and out[-1][0] == kind and kind != _TOOL_CALL:
        out[-1] = (kind, out[-1][1] + text)
    else:
        out.append((kind, text))


MAX_ECHO_CHARS = 65536
"""In a stream, the most characters ``ReasoningEcho`` keeps of each of: field reasoning that no tagged text has
matched yet, and tagged text held (``docs/streaming.md``, "Streams" and "From reasoning fields to tags").

- Field reasoning past it: the phase has no echo. The field reasoning is forgotten; text held goes out before the
  next tagged text (or at the end of the phase), and the phase's tagged reasoning goes out as it comes.
- Held text past it that has matched the field reasoning: what it matched is the echo and is dropped (64 Ki
  characters the same are no coincidence), and the comparison goes on from there; what is held after it that
  matches is dropped at the end of the phase too, even when shorter than the field reasoning.
- Held whitespace that nothing has compared yet (before any tagged text, or after the match) past it: no echo; it
  goes out, and the rest of the phase's tagged reasoning as it comes.

So a long reasoning phase keeps bounded memory, and a long echo is still dropped."""


class ReasoningEcho:
    """Drops tagged reasoning that repeats the reasoning a stream or a message carries in its own fields (spec 004
    "Streaming": read one of the two, never both). llama.cpp with ``--reasoning-format deepseek-legacy`` sends
    each thinking token twice: in ``reasoning_content`` and, inside ``<think>`` tags, in ``content``.

    One rule for streams and buffered bodies, so that both give the same text: ``fields`` takes the field
    reasoning and ``filter`` the splitter's pieces, in the order they come (a message's fields before its
    content). A phase of reasoning ends at the next content that is not whitespace only, a harmony tool call, or
    ``settle`` (a tool call, a finish, the end):

    - Tagged reasoning before any field reasoning of the phase goes out as it comes.
    - After field reasoning, tagged reasoning is held while, without its surrounding whitespace, it is the start
      of the phase's field reasoning (without its leading whitespace): what is held is never longer than the
      field reasoning, apart from the whitespace around it.
    - As soon as it differs from the field reasoning or runs past it, all of it goes out, and so does the rest
      of the phase's tagged reasoning, as it comes.
    - At the end of the phase held text equal to the field reasoning, ignoring surrounding whitespace, is dropped
      (an echo); other held text goes out. The phase's field reasoning is then forgotten.
    - In a stream, field reasoning that runs ``MAX_ECHO_CHARS`` ahead of the tagged text is forgotten, and the
      phase's tagged reasoning then goes out as it comes (held text first): an echo follows its field reasoning
      closely (llama.cpp sends both in one chunk), and a phase of field reasoning alone keeps bounded memory.
      Held text past ``MAX_ECHO_CHARS`` characters is the echo as far as it matched, and is dropped; see
      ``MAX_ECHO_CHARS`` for whitespace.

    Attributes:
        active: field reasoning came in the current phase (``filter`` returns its pieces unchanged otherwise).
    """

    __slots__ = (
        "_echoed",
        "_f",
        "_fs",
        "_held",
        "_held_len",
        "_limit",
        "_m",
        "_parts",
        "_parts_len",
        "_passing",
        "_started",
        "_tail",
        "active",
    )

    def __init__(self, limit: int | None = MAX_ECHO_CHARS) -> None:
        self._limit = limit  # ``MAX_ECHO_CHARS`` in a stream; ``None`` for a whole message, already in memory
        self._reset()

    def _reset(self) -> None:
        self.active = False  # field reasoning came in this phase
        self._parts: list[str] = []  # field reasoning not joined into ``_f`` yet
        self._parts_len = 0  # its length in characters
        self._f = ""  # field reasoning without its leading whitespace, from some point at or before ``_m``
        self._fs = False  # the field reasoning had a character that is not whitespace
        self._m = 0  # the end of the match of the held text in ``_f``
        self._held: list[str] = []  # the tagged reasoning held, as it came
        self._held_len = 0  # its length in characters
        self._echoed = False  # held text past ``MAX_ECHO_CHARS`` was taken as the echo (``_bound``)
        self._started = False  # the held text had a character that is not whitespace
        self._tail = ""  # the held text's trailing whitespace, not compared yet
        self._passing = False  # the phase's tagged reasoning differed: it goes out as it comes

    def fields(self, text: str) -> None:
        """The visible text of reasoning that came in its own fields (``reasoning``, ``reasoning_content``, the
        details)."""
        if text and not self._passing:
            self.active = True
            self._parts.append(text)
            self._parts_len += len(text)
            limit = self._limit
            if limit is not None and self._parts_len + len(self._f) - self._m > limit:
                # no tagged echo has followed this much field reasoning: the phase has none, and memory stays
                # bounded (a late echo would go out as it came, as any tagged text that differs); text held goes
                # out before the next tagged text, or at the end of the phase
                self._passing = True
                self._parts = []
                self._parts_len = 0
                self._f = ""
                self._m = 0

    def filter(self, pieces: list[Piece]) -> list[Piece]:
        """The pieces to send for a splitter's ``pieces``: tagged reasoning held or dropped as above, held text
        that goes out in its place before the piece that ended its phase."""
        if not self.active:
            return pieces
        out: list[Piece] = []
        for kind, text in pieces:
            if kind == _REASONING:
                if self.active:
                    text = self._tagged(text)
            elif kind != _CONTENT or text.strip(_WHITESPACE):
                self._settle(out)
            _put(out, kind, text)
        return out

    def settle(self) -> list[Piece]:
        """End the phase (a tool call or a finish came, or the answer ended): the held text that goes out."""
        out: list[Piece] = []
        self._settle(out)
        return out

    def _tagged(self, text: str) -> str:
        """Take tagged reasoning ``text``; return what goes out now."""
        if self._passing:
            if self._held:  # held before the field reasoning was forgotten: it goes out first, as it came
                text = "".join(self._held) + text
                self._held = []
                self._held_len = 0
            return text
        self._held.append(text)
        self._held_len += len(text)
        out = self._compare(text)
        if out or self._limit is None or self._held_len <= self._limit:
            return out
        return self._bound(self._limit)

    def _bound(self, limit: int) -> str:
        """Held text past ``limit`` characters (``MAX_ECHO_CHARS``): what it matched of the field reasoning is the
        echo and is dropped, and the comparison goes on from there; held whitespace not compared yet (before any
        text, or after the match) past ``limit`` is no echo and goes out with the rest of the phase (``_diverge``).
        Returns what goes out now."""
        tail = self._tail if self._started else "".join(self._held)
        if len(tail) > limit:
            return self._diverge()
        self._echoed = True
        self._held = [tail] if tail else []
        self._held_len = len(tail)
        return ""

    def _diverge(self) -> str:
        """The held text differs from the field reasoning: all of it goes out now, and the rest of the phase's
        tagged reasoning as it comes."""
        self._passing = True
        held = "".join(self._held)
        self._held = []
        self._held_len = 0
        self._parts = []
        self._parts_len = 0
        self._f = ""
        self._tail = ""
        return held

    def _compare(self, text: str) -> str:
        """Compare tagged reasoning ``text``, already held, with the field reasoning; return what goes out now."""
        if not self._started:
            text = text.lstrip(_WHITESPACE)
            if not text:
                return ""
            self._started = True
        core = text.rstrip(_WHITESPACE)
        if not core:
            self._tail += text
            return ""
        need = self._tail + core if self._tail else core
        if len(self._f) - self._m < len(need) and self._parts:
            self._join()
        if not self._f.startswith(need, self._m):
            return self._diverge()
        self._m += len(need)
        self._tail = text[len(core) :]
        return ""

    def _join(self) -> None:
        """Join the new field reasoning to what the held text has not matched yet."""
        text = "".join(self._parts)
        self._parts = []
        self._parts_len = 0
        if not self._fs:
            text = text.lstrip(_WHITESPACE)
            self._fs = bool(text)
        self._f = self._f[self._m :] + text
        self._m = 0

    def _settle(self, out: list[Piece]) -> None:
        if not self.active:
            return
        if self._held:
            rest = self._f[self._m :].strip(_WHITESPACE) or any(p.strip(_WHITESPACE) for p in self._parts)
            if (rest and not self._echoed) or self._passing:  # shorter than the field reasoning: not an echo
                _put(out, _REASONING, "".join(self._held))
        self._reset()
