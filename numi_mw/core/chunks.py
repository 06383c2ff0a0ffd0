"""Streamed chat completion chunks in one reasoning shape (spec 004 "Streaming").

``ChunkNormalizer`` is a stateful object, one per stream. It takes decoded ``chat.completion.chunk`` objects and
returns the chunks the client receives:

- A visible reasoning fragment from any source field (``delta.reasoning``, ``delta.reasoning_content``,
  ``reasoning.text`` / ``reasoning.summary`` details, or reasoning tags inside ``delta.content``) goes out as
  ``delta.reasoning`` plus one entry in ``delta.reasoning_details`` carrying the same text, never a second
  copy (a delta split so that it carries one entry per detail gives each part the text of its own entries,
  ``_apart``). Plain reasoning (no detail from the provider) becomes a ``reasoning.text`` entry with format
  ``unknown``. ``delta.reasoning_content`` is removed (its text is in ``delta.reasoning``). A reasoning field
  holding a value numi_mw does not read (not a string, a list of details or null) stays as it came, and nothing is
  added under it (``fields.unread_fields``).
- Every streamed detail entry carries an integer ``index``: the position of the detail it belongs to in the
  spec's rebuild ("From a stream"), the same on every entry of one detail. Each field appears once per detail,
  so that clients that concatenate repeated strings (openai-python's ``chat.completions.stream()`` helper,
  langchain) and clients that keep the last entry's value (pydantic-ai's OpenRouter model) agree: an entry
  that extends a detail carries only ``type``, ``text`` and ``index``; ``id`` goes on the detail's first entry;
  the ``format`` of a ``reasoning.text`` detail that may still grow or be signed goes on its last entry, the
  one with its signature or, for a detail never signed, an entry ``{"type", "format", "index"}`` of its own
  sent when the next detail starts or the reasoning ends. An empty ``signature`` signs nothing and is left
  out; a fragment with no text and an empty signature (the placeholder that opens a thinking block) gives its
  fields to the text detail it opens instead of becoming a detail of its own. Fragments the rebuild drops, or
  that only repeat what their detail has, are dropped. The docs (``docs/streaming.md``, "The shape of streamed
  reasoning") check this shape against every client's merge rule.
- Signature-only fragments, encrypted and summary details pass through in order, with their opaque fields
  untouched. The finish chunk keeps its delta and gets no synthetic detail; text a think splitter still held
  goes out in a chunk of its own just before it. Usage passes through.
- The end of the reasoning: just before the first chunk after it that shows the answer (content text, a tool
  call, a refusal) or finishes the choice, or at the end of the stream, the held format goes out, then, in a
  chunk of its own, ``"reasoning": null`` when more than one delta carried reasoning text and
  ``"reasoning_details": []`` when more than one carried detail entries, each unless the chunk they go before
  (which leaves as it came) sets the field itself, so a client that keeps the last delta's value of these
  fields (openai-node's ``stream()`` helper) keeps nothing rather than a fragment, and keeps whole a reasoning
  that came in one delta. While a choice's reasoning is open, a stream rewriter decodes every chunk (the one
  that ends it may carry no reasoning field at all).
- A choice's state is made when a chunk of it first carries reasoning (a reasoning field that holds something;
  with a think splitter, any chunk: its content is read), on every path alike, so the order in which the end of the
  stream closes the choices, and the choices ``MAX_CHOICES`` counts, do not depend on which chunks were decoded.
- With a think splitter, a chunk that carries reasoning in its own fields tells the splitter so
  (``ThinkSplitter.reasoning_in_fields``): content text before a closing tag that follows, in the same chunk or
  later, is the end of that reasoning. A harmony tool call the splitter finds in ``content`` goes out as
  ``delta.tool_calls`` (an id ``call_<chunk id>_<n>``, the function's name, then its arguments as they stream;
  an index no upstream tool call of the choice has, ``_own_calls``), and the choice's ``finish_reason`` ``stop``
  becomes ``tool_calls``, as vLLM's harmony path sends them.
- With ``exclude``, no reasoning appears at all: the reasoning fields are removed, reasoning tags and their
  text are cut from ``content``, and chunks left with nothing are dropped.

A chunk that needs no change is reported as unchanged, so the shell can send its original bytes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from numi_mw.core.details import FILLED_KEYS, DetailsRebuilder, visible_text
from numi_mw.core.fields import REASONING_FIELDS, plain_reasoning, shown_reasoning, splice, unread_fields
from numi_mw.core.splitter import Piece, ThinkSplitter
from numi_mw.core.think import ThinkTags

UNCHANGED: Final = None
"""What ``ChunkNormalizer.normalize`` returns for a chunk that leaves as it came."""


class _Slow(enum.Enum):
    SLOW = "SLOW"


_SLOW: Final = _Slow.SLOW
"""What ``ChunkNormalizer._fast`` returns for a chunk it leaves to the general path."""


_NO_TEXT = False
"""The stream's rebuilders keep no text (``DetailsRebuilder(track_text=False)``): they only say where each
fragment goes, and memory stays constant in the stream's length. Rule 1's append then changes nothing in them,
so the fast path does not call ``DetailsRebuilder.extend``."""


@dataclass(slots=True)
class _Choice:
    """The per-choice state of one stream."""

    rebuilder: DetailsRebuilder = field(default_factory=lambda: DetailsRebuilder(track_text=_NO_TEXT))
    splitter: ThinkSplitter | None = None
    finished: bool = False
    call_index: int = -1  # the delta index of the last harmony tool call found in content (-1: none yet)
    calls_top: int = 0  # one past the largest tool call index sent (the upstream's and the ones numi_mw gave)
    given: dict[int, Any] = field(default_factory=dict)  # the last indexes numi_mw gave -> whose (``_free_index``)
    moved: dict[Any, int] = field(default_factory=dict)  # an upstream tool call index -> the index it was given
    sent: int = 0  # deltas sent with reasoning (text or detail entries)
    bare: int = 0  # of those, the ones without reasoning text (a signature, a format alone; ``_closing``)
    unlisted: int = 0  # and the ones without detail entries (text beside details of a type not read, ``fields``)
    # (the fast paths, whose deltas all carry text and entries, count ``sent`` alone)
    open: bool = False  # reasoning went out and nothing has shown the answer since (``_closing``)
    held: tuple[int, Any] | None = None  # the open text detail's position and its format, not sent yet
    opener: dict[str, Any] | None = None  # a block-opening placeholder's fields, for the next text detail


_NO_DELTA: Final[dict[str, Any]] = {}
"""The delta of no chunk (the end of a stream), never changed."""

_NOT_OPENER: Final = frozenset(("type", "text", "index"))
"""Fields of a block-opening placeholder that are not kept for the detail it opens (``ChunkNormalizer._emit``)."""

_HOLDING_KEYS: Final = frozenset(("content", "role", *REASONING_FIELDS))
"""Delta keys that never end what a think splitter holds back: content text (it is fed to the splitter), the role,
and reasoning (it may be followed by its own tail in content)."""


MAX_GIVEN_CALLS: Final = 128
"""Of each choice's tool call indexes that numi_mw gave (to harmony tool calls found in content, and to upstream
tool calls moved off an index one of those took), how many it remembers: the last ones (OpenAI takes at most 128
functions per request). An upstream tool call is kept apart only from these, so that a stream that names a
million tool call indexes keeps bounded state; past them it goes on at its own index, as it came
(``docs/streaming.md``, "Streams")."""

_HARMONY: Final = _Slow.SLOW
"""What ``_Choice.given`` holds for an index given to a harmony tool call (no upstream index moved to it)."""


def _free_index(state: _Choice, upstream: Any = _HARMONY) -> int:
    """A new ``tool_calls`` index for a choice, one past every index sent so far, remembered as given to
    ``upstream``'s call (a harmony call's by default). Past ``MAX_GIVEN_CALLS`` the oldest given index is forgotten,
    and with it the move of the upstream call it was given to. Indexes are given in increasing order, so an
    upstream index whose move is forgotten names no index still remembered: its call goes on as it came."""
    index = state.calls_top
    state.calls_top = index + 1
    given = state.given
    given[index] = upstream
    if len(given) > MAX_GIVEN_CALLS:
        oldest = next(iter(given))
        whose = given.pop(oldest)
        if whose is not _HARMONY:
            del state.moved[whose]
    return index


def _own_calls(delta: dict[str, Any], calls: list[Any], state: _Choice) -> dict[str, Any]:
    """``delta`` with the upstream's own ``tool_calls`` entries kept apart from the harmony tool calls found in
    content: an upstream index keeps its number unless numi_mw gave it (``MAX_GIVEN_CALLS``), and then gets the
    next free one, so that clients that merge tool calls by ``index`` never join two calls. Only moved indexes are
    remembered; one kept needs nothing but ``calls_top``."""
    moved = state.moved
    changed = False
    out: list[Any] = []
    for call in calls:
        if isinstance(call, dict) and "index" in call and not isinstance(call["index"], list | dict):
            upstream = call["index"]  # (a list or an object is no index: the call goes as it came)
            index = moved.get(upstream)
            if index is None:
                if type(upstream) is int and upstream not in state.given:
                    index = upstream
                    if upstream >= state.calls_top:
                        state.calls_top = upstream + 1
                else:
                    index = moved[upstream] = _free_index(state, upstream)
            if index != upstream:
                call = {**call, "index": index}
                changed = True
        out.append(call)
    return {**delta, "tool_calls": out} if changed else delta


def _ends(key: str, value: Any) -> bool:
    """Whether a delta's ``key`` carries something that is neither content text nor reasoning, so that text a
    think splitter holds back must go out before it: a tool call (``tool_calls``, ``function_call``), a refusal,
    or any other field with a nonempty list or object (audio, a new kind of block). Metadata strings
    (``channel``) and empty values (``"refusal": ""``, ``"tool_calls": null``) do not."""
    if key in _HOLDING_KEYS:
        return False
    if type(value) is str:
        return key == "refusal" and value != ""
    return isinstance(value, list | dict) and bool(value)


def _shows_output(delta: dict[str, Any]) -> bool:
    """Whether ``delta`` shows something of the answer that is not reasoning: content text (a string or a list
    of parts) or any field ``_ends`` names (a tool call, a refusal, another nonempty field)."""
    content = delta.get("content")
    if (type(content) is str or type(content) is list) and content:
        return True
    for key, value in delta.items():  # noqa: SIM110 (a loop costs less than any() over a generator, per chunk)
        if value and _ends(key, value):
            return True
    return False


def _holds_reasoning(delta: dict[str, Any]) -> bool:
    """Whether a chunk's ``delta`` has a reasoning field that holds something: a value other than ``null``, ``""``
    and ``[]``. A choice's state is made for the first such chunk (``ChunkNormalizer._normalize_choice``)."""
    for key in REASONING_FIELDS:  # noqa: SIM110 (no generator: it runs once per chunk of a choice without state)
        if key in delta and delta[key] not in _NO_REASONING:
            return True
    return False


def _holds_nothing(delta: dict[str, Any]) -> bool:
    """Whether ``delta`` holds nothing but reasoning fields of no value (``{"reasoning_content": ""}``, a null):
    its chunk goes with an empty delta, never dropped (only ``exclude`` drops a chunk it empties), so that the
    event keeps its place and its ``id`` line, as one with ``"reasoning": ""`` does."""
    return all(key in REASONING_FIELDS and not value for key, value in delta.items())


def _ends_hold(delta: dict[str, Any]) -> bool:
    """Whether ``delta`` ends what a think splitter holds back (``_ends``)."""
    return any(_ends(key, value) for key, value in delta.items())


MAX_CHOICES: Final = 128
"""The most choices of one stream the normalizer follows (OpenAI's ``n`` is at most 128). A chunk's choice with any
other ``index`` once this many have state passes through as it came (``docs/streaming.md``, "Memory"), so a stream
that names a million choice indexes keeps bounded state, and nothing of it is lost or changed; with ``exclude``
its reasoning fields are still taken out (``_excluded``)."""


class _ChoiceStates(dict[Any, _Choice]):
    """The per-choice states of one stream by choice ``index``; a state is made on first use (``__missing__``,
    so that a lookup of a known choice stays a plain dict lookup). ``think`` is set after construction, which
    then stays ``dict``'s own (one is made per stream)."""

    __slots__ = ("think",)

    think: ThinkTags | None

    def follows(self, index: Any) -> bool:
        """Whether the choice ``index`` has a state or may get one: at most ``MAX_CHOICES`` per stream."""
        return index in self or len(self) < MAX_CHOICES

    def __missing__(self, index: Any) -> _Choice:
        state = _Choice(splitter=self.think.splitter() if self.think is not None else None)
        self[index] = state
        return state


_FAST_NONE: Final = 0
"""``ChunkNormalizer``'s fast path for the commonest chunks (its ``_fast_path``): none, every chunk takes the
general path (tests set it to check a fast path against the general one)."""
_FAST_PLAIN: Final = 1
"""The fast path of a stream with neither ``exclude`` nor think splitting (``ChunkNormalizer._fast``)."""
_FAST_THINK: Final = 2
"""The fast path of a stream with think splitting (``ChunkNormalizer._fast_think``)."""
_FAST_EXCLUDE: Final = 3
"""The fast path of a stream with ``exclude`` and no think splitting (``ChunkNormalizer._fast_exclude``)."""

_REASONING_KEYS: Final = frozenset(REASONING_FIELDS)
_NO_REASONING: Final[tuple[Any, ...]] = (None, "", [])
"""What a reasoning field holds when it holds none (as ``in``: ``==`` each)."""

CONTENT_TEXT: Final = 1
"""``ChunkNormalizer.repeat`` after a fragment in ``delta.reasoning_content`` extended the open text detail."""
PLAIN_TEXT: Final = 2
"""``ChunkNormalizer.repeat`` after a fragment in ``delta.reasoning`` alone extended the open text detail."""
SHOWN_TEXT: Final = 3
"""``ChunkNormalizer.repeat`` after a fragment in ``delta.reasoning`` and the same text in its one ``reasoning.text``
entry extended the open text detail."""
DETAIL_TEXT: Final = 4
"""``ChunkNormalizer.repeat`` after a fragment in one ``reasoning.text`` entry alone extended the open text detail."""
THINK_TEXT: Final = 5
"""``ChunkNormalizer.repeat`` after ``delta.content`` that a think splitter read as reasoning, whole, extended the open
text detail."""
THINK_CONTENT: Final = 6
"""``ChunkNormalizer.repeat`` after ``delta.content`` that a think splitter read as content, whole, with no reasoning
open: the chunk went as it came."""
ANSWER_TEXT: Final = 7
"""``ChunkNormalizer.repeat`` after ``delta.content`` text beside reasoning fields that hold none (OpenRouter's
``"reasoning": null, "reasoning_details": []``, DeepSeek's ``"reasoning_content": null``), with no reasoning open:
the chunk went as it came, or without those fields."""


def _excluded_text(delta: dict[str, Any], fields: int) -> int:
    """Where the one text of ``delta``, whose ``fields`` reasoning fields ``_fast_exclude`` took out, stands: one
    reasoning fragment (``CONTENT_TEXT``, ``PLAIN_TEXT``, ``SHOWN_TEXT``, ``DETAIL_TEXT``, as the fast path of shown
    reasoning names them; what goes out holds no text), or the answer's ``content`` beside reasoning fields that
    hold none (``ANSWER_TEXT``; it goes out without them); ``0`` for anything else. What goes out for such a chunk
    depends on the state of no choice (``ExcludedRepeat``)."""
    reasoning = delta.get("reasoning")
    details = delta.get("reasoning_details")
    text = None
    if type(details) is list and len(details) == 1:
        entry = details[0]
        if type(entry) is dict and entry.get("type") == "reasoning.text":
            text = entry.get("text")
    if fields == 1:
        if type(delta.get("reasoning_content")) is str and delta["reasoning_content"]:
            return CONTENT_TEXT
        if type(reasoning) is str and reasoning:
            return PLAIN_TEXT
        if type(text) is str and text:
            return DETAIL_TEXT
    elif fields == 2 and "reasoning_content" not in delta and type(text) is str and text:
        if reasoning == text:
            return SHOWN_TEXT
        return DETAIL_TEXT if reasoning is None or reasoning == "" else 0
    content = delta.get("content")
    if type(content) is str and content and all(delta.get(key) in _NO_REASONING for key in REASONING_FIELDS):
        return ANSWER_TEXT  # the answer's text, beside reasoning fields that hold nothing
    return 0


class Repeat:
    """The state of one choice in which ``ChunkNormalizer``'s fast path rewrote a fragment that extends its open text
    detail (at position ``pos``), for a chunk of the same bytes but its text (``shapes.ChunkShape``): the fast path
    rewrites such a chunk the same way while the choice's reasoning is still open at that detail. With a think
    splitter, it must also read the text as the same kind, whole; ``pos`` ``-1``: the content a splitter read, which
    goes as it came while no reasoning is open."""

    __slots__ = ("envelope", "normalizer", "pos", "splitter", "state")

    def __init__(
        self,
        normalizer: ChunkNormalizer,
        state: _Choice,
        pos: int,
        envelope: dict[str, Any],
        splitter: ThinkSplitter | None = None,
    ) -> None:
        self.normalizer = normalizer
        self.state = state
        self.pos = pos
        self.envelope = envelope
        self.splitter = splitter  # the choice's, when the text was content a think splitter read

    def repeated(self, text: bytes) -> bool:
        """Whether the fast path would rewrite such a chunk with the text whose JSON string contents are ``text``
        now as it did; if so, what it does to the state is done (the fragment is counted as sent, the chunk's
        envelope is the last one): ``True``."""
        state = self.state
        splitter = self.splitter
        if self.pos < 0:  # content a think splitter reads (``THINK_CONTENT``), while no reasoning is open
            if state.open or splitter is None or not splitter.takes_whole(text, "content"):
                return False
            self.normalizer._envelope = self.envelope
            return True
        if not state.open or state.rebuilder.open_text != self.pos:
            return False
        if splitter is not None and not splitter.takes_whole(text, "reasoning"):
            return False
        state.sent += 1
        self.normalizer._envelope = self.envelope
        return True


_NO_STATE: Final = _Choice()
"""The state ``AnswerRepeat`` and ``ExcludedRepeat`` are made with: they read none."""


class AnswerRepeat(Repeat):
    """``Repeat`` for the answer's text beside reasoning fields that hold none (``ANSWER_TEXT``): the fast path
    sends such a chunk the same way while no reasoning is open (``ChunkNormalizer.open_reasoning``; one that is
    would be closed first)."""

    __slots__ = ()

    def repeated(self, text: bytes) -> bool:
        """Whether no reasoning is open; if so the chunk's envelope becomes the last one: ``True``."""
        normalizer = self.normalizer
        if normalizer.open_reasoning:
            return False
        normalizer._envelope = self.envelope
        return True


class ExcludedRepeat(Repeat):
    """``Repeat`` for a fragment ``ChunkNormalizer._fast_exclude`` took out: what goes out for a chunk of the same
    bytes but its text does not depend on the choice's state or the text (its reasoning fields are taken out,
    whatever they hold); the chunk's envelope becomes the last one."""

    __slots__ = ()

    def repeated(self, text: bytes) -> bool:
        """``True``: the fast path takes the fragment out as it did; the chunk's envelope is the last one."""
        self.normalizer._envelope = self.envelope
        return True


class ChunkNormalizer:
    """Normalize the chunks of one chat completions stream (spec 004 "Streaming").

    Args:
        exclude: reasoning is excluded (``reasoning.exclude`` or ``include_reasoning: false``).
        think: split reasoning tags out of ``delta.content`` with these settings; ``None`` leaves content as is.
    """

    __slots__ = ("_choices", "_envelope", "_fast_path", "exclude", "open_reasoning", "repeat", "think")

    def __init__(self, *, exclude: bool = False, think: ThinkTags | None = None) -> None:
        self.exclude = exclude
        self.think = think
        self.open_reasoning = False  # a choice's reasoning went out and is not closed yet (``_closing``)
        self._fast_path = _FAST_THINK if think is not None else _FAST_EXCLUDE if exclude else _FAST_PLAIN
        self._choices = states = _ChoiceStates()
        states.think = think
        self._envelope: dict[str, Any] | None = None
        # set by the fast path when it extended the open text detail (``CONTENT_TEXT``, ...); its reader resets it
        self.repeat = 0

    def repeat_of(self, chunk: dict[str, Any]) -> Repeat:
        """The state of the one choice of ``chunk``, the chunk just normalized, for ``Repeat``."""
        kind = self.repeat
        # these read the state of no choice, and make none: the full path made none for an answer chunk
        if self.exclude and kind not in (THINK_TEXT, THINK_CONTENT):
            return ExcludedRepeat(self, _NO_STATE, -1, chunk)
        if kind == ANSWER_TEXT:
            return AnswerRepeat(self, _NO_STATE, -1, chunk)
        state = self._choices[chunk["choices"][0].get("index", 0)]
        splitter = state.splitter if kind in (THINK_TEXT, THINK_CONTENT) else None
        return Repeat(self, state, -1 if kind == THINK_CONTENT else state.rebuilder.open_text, chunk, splitter)

    def normalize(self, data: Any) -> list[dict[str, Any]] | None:
        """Normalize one decoded chunk.

        Args:
            data: the JSON value of one SSE event's ``data``.

        Returns:
            ``UNCHANGED`` (``None``) when the chunk leaves as it came, else the chunks to send in its place (an
            empty list drops it); when there are several and the last is ``data`` itself, that one is unchanged
            (chunks that end the reasoning go before it) and may go as its original bytes. Values that are not
            chat completion chunks are left unchanged.
        """
        if not isinstance(data, dict):
            return UNCHANGED
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices:
            return UNCHANGED
        self._envelope = data
        if len(choices) == 1:
            # ``_follows`` written out, since this runs once per chunk: a delta choice of a followed index
            choice = choices[0]
            if type(choice) is dict:
                delta = choice.get("delta")
                index = choice.get("index", 0)
                states = self._choices
                if type(delta) is dict and type(index) is int and (index in states or len(states) < MAX_CHOICES):
                    fast_path = self._fast_path
                    if fast_path == _FAST_PLAIN:
                        if choice.get("finish_reason") is None:
                            fast = self._fast(data, choice, delta, index)
                        else:
                            fast = self._fast_finish(delta, index)
                        if fast is not _SLOW:
                            return fast
                    elif fast_path == _FAST_THINK:
                        fast = self._fast_think(data, choice)
                        if fast is not _SLOW:
                            return fast
                    elif fast_path == _FAST_EXCLUDE and choice.get("finish_reason") is None:
                        return self._fast_exclude(data, choice, delta, index)
        results: list[list[Any]] = []
        changed = False
        for choice in choices:
            if self._follows(choice):
                entries = self._normalize_choice(choice)
            else:  # no state for it: as it came, but for its reasoning fields with exclude
                entries = _excluded(choice) if self.exclude else UNCHANGED
            if entries is UNCHANGED:
                results.append([choice])
            else:
                changed = True
                results.append(entries)
        if not changed:
            return UNCHANGED
        return _chunks_of(data, results)

    def _fast_exclude(
        self, data: dict[str, Any], choice: dict[str, Any], delta: dict[str, Any], index: int
    ) -> list[dict[str, Any]] | None:
        """The chunk of a stream with ``exclude`` and no think splitting (``choice``, ``data``'s one choice, a delta
        choice of a followed ``index`` that does not finish): its reasoning fields taken out, the chunk dropped when
        nothing else is left of it (``_unless_emptied``; one with usage keeps it, with no choice). Same output as the
        general path, key order included: with ``exclude`` no reasoning ever goes out, so none is open to close."""
        rest = {key: value for key, value in delta.items() if key not in _REASONING_KEYS}
        if len(rest) == len(delta):  # no reasoning field
            return UNCHANGED
        if _holds_reasoning(delta):
            self._choices[index]  # followed from now on, as the general path makes the choice's state
        self.repeat = _excluded_text(delta, len(delta) - len(rest))
        if rest:
            kept = _unless_emptied({**choice, "delta": rest})
            if kept is not None:
                return [{**data, "choices": [kept]}]
        else:
            for key, value in choice.items():  # ``_carries_more`` written out (no generator: once per chunk)
                if value is not None and key not in _CHOICE_KEYS:
                    return [{**data, "choices": [{**choice, "delta": rest}]}]
        return [] if data.get("usage") is None else [{**data, "choices": []}]

    def _fast_think(self, data: dict[str, Any], choice: Any) -> list[dict[str, Any]] | Literal[_Slow.SLOW] | None:
        """The common chunk of a stream with a think splitter (one choice; a delta of ``content`` text and perhaps
        ``role``, as local servers stream tokens): when the splitter gives one content or reasoning piece for it,
        the delta is built directly; any other outcome takes the general path's entries. ``_SLOW`` for any other
        chunk. Same output as the general path, key order included."""
        if type(choice) is not dict:
            return _SLOW
        delta = choice.get("delta")
        if type(delta) is not dict or choice.get("finish_reason") is not None:
            return _SLOW
        content = delta.get("content")
        size = len(delta)
        if type(content) is not str or not content or (size != 1 and (size != 2 or "role" not in delta)):
            return _SLOW
        state = self._choices[choice.get("index", 0)]
        splitter = state.splitter
        assert splitter is not None  # a stream with think settings has a splitter per choice
        pieces = splitter.feed(content)
        if len(pieces) == 1:
            kind, text = pieces[0]
            fields: dict[str, Any] | None = None
            if kind == "content":
                if not state.open:  # else it may end the reasoning: the general path (``_closing``)
                    if text == content:
                        self.repeat = THINK_CONTENT
                        return UNCHANGED
                    fields = {"content": text}
            elif kind == "reasoning" and not self.exclude:
                if state.rebuilder.open_text >= 0:  # the text extends the open detail (``_emit``, rule 1)
                    self.repeat = THINK_TEXT
                fields = self._piece_fields(pieces[0], state)
                self._sent(state, text=True, listed=True)
            if fields is not None:
                choice["delta"] = {"role": delta["role"], **fields} if size == 2 else fields
                return [data]
        entries = self._entries(choice, delta, state, pieces, split=True, finishing=False)
        return UNCHANGED if entries is UNCHANGED else _chunks_of(data, [entries])

    def _fast(
        self, data: dict[str, Any], choice: dict[str, Any], delta: dict[str, Any], index: int
    ) -> list[dict[str, Any]] | Literal[_Slow.SLOW] | None:
        """The common reasoning chunk (one choice; an unsigned text fragment that extends the open detail, with
        ``reasoning`` the same text or absent, or a plain ``reasoning`` / ``reasoning_content`` string), and the
        common chunk without reasoning while none is open, handled without the general machinery; ``_SLOW`` for
        anything else. Same output as the general path, key order included. ``choice`` is ``data``'s one choice:
        a delta choice (``_is_delta_choice``) of a followed index that does not finish (``normalize`` checked it),
        ``delta`` and ``index`` its ``delta`` and ``index``.
        """
        if "reasoning_content" in delta:
            plain = delta["reasoning_content"]
            if "reasoning" in delta or "reasoning_details" in delta:
                return _SLOW
            if plain is None or plain == "":  # nothing visible (DeepSeek's content chunks): the key goes
                rest = {k: v for k, v in delta.items() if k != "reasoning_content"}  # (``{}``: ``_holds_nothing``)
                if self.open_reasoning:  # it may end the reasoning: a new entry, so that data is not changed
                    return self._fast_after(data, {**choice, "delta": rest})
                choice["delta"] = rest
                content = rest.get("content")
                if type(content) is str and content:
                    self.repeat = ANSWER_TEXT
                return [data]
            if type(plain) is not str:
                return _SLOW
            state = self._choices[index]
            pos = state.rebuilder.open_text  # ``_plain_entries``, its common case inline
            if pos >= 0:
                entries: list[Any] = [{"type": "reasoning.text", "text": plain, "index": pos}]
                self.repeat = CONTENT_TEXT
            else:
                entries = self._plain_entries(state, plain)
            fields: dict[str, Any] = {}
            for key, value in delta.items():
                if key == "reasoning_content":
                    fields["reasoning"] = plain
                else:
                    fields[key] = value
            fields["reasoning_details"] = entries
            choice["delta"] = fields
            state.sent += 1  # ``_sent``, inline on the common path
            if not state.open:
                state.open = self.open_reasoning = True
            return [data]
        reasoning = delta.get("reasoning")
        details = delta.get("reasoning_details")
        if type(details) is list and len(details) == 1:
            fragment = details[0]
            if type(fragment) is not dict:
                return _SLOW
            kind = fragment.get("type")
            if kind == "reasoning.summary":
                return self._fast_summary(data, index, delta, fragment, reasoning)
            if kind == "reasoning.encrypted":  # opaque state shows no text (OpenAI's reasoning items via OpenRouter)
                return self._fast_no_text(data, choice, delta, index, fragment, reasoning)
            if kind != "reasoning.text":
                return _SLOW
            text = fragment.get("text")
            if not text:
                return self._fast_no_text(data, choice, delta, index, fragment, reasoning)
            if type(text) is not str or "signature" in fragment:
                return _SLOW
            shown = reasoning == text
            if not shown and reasoning is not None and reasoning != "":
                return _SLOW
            state = self._choices[index]
            rebuilder = state.rebuilder
            pos = rebuilder.open_text
            if pos < 0 and state.held is not None:
                return _SLOW
            if not shown:
                delta["reasoning"] = text  # details only (Anthropic-style): their text becomes delta.reasoning
            state.sent += 1  # ``_sent``, inline on the common path
            if not state.open:
                state.open = self.open_reasoning = True
            if pos >= 0:  # rule 1 extends the open detail (no call: _NO_TEXT): only type, text and index go out
                self.repeat = SHOWN_TEXT if shown else DETAIL_TEXT
                if shown and len(fragment) == 3 and fragment.get("index") == pos:
                    return UNCHANGED
                delta["reasoning_details"] = [{"type": "reasoning.text", "text": text, "index": pos}]
                return [data]
            where = ("new", len(rebuilder.details))  # ``_emit``'s new text detail: its format held
            entry = dict(fragment)
            opener = state.opener
            if opener is not None:  # the fields of the placeholder that opened it
                state.opener = None
                for key, value in opener.items():
                    entry.setdefault(key, value)
            if "format" in entry:
                state.held = (where[1], entry.pop("format"))
            entry["index"] = where[1]
            rebuilder.add(entry, where)
            if shown and len(entry) == len(fragment) and entry == fragment:
                return UNCHANGED
            delta["reasoning_details"] = [entry]
            return [data]
        if type(details) is list and not details and (reasoning is None or reasoning == ""):
            # nothing visible, no fragment (OpenRouter's content chunks)
            if self.open_reasoning:
                return self._fast_after(data, choice)
            content = delta.get("content")
            if type(content) is str and content:
                self.repeat = ANSWER_TEXT
            return UNCHANGED
        if "reasoning" not in delta and "reasoning_details" not in delta:
            # no reasoning field at all (a translated stream's content chunks)
            return self._fast_after(data, choice) if self.open_reasoning else UNCHANGED
        if "reasoning_details" not in delta and type(reasoning) is str and reasoning:
            state = self._choices[index]
            pos = state.rebuilder.open_text  # ``_plain_entries``, its common case inline
            if pos >= 0:
                delta["reasoning_details"] = [{"type": "reasoning.text", "text": reasoning, "index": pos}]
                self.repeat = PLAIN_TEXT
            else:
                delta["reasoning_details"] = self._plain_entries(state, reasoning)
            state.sent += 1  # ``_sent``, inline on the common path
            if not state.open:
                state.open = self.open_reasoning = True
            return [data]
        return _SLOW

    def _fast_summary(
        self, data: dict[str, Any], index: int, delta: dict[str, Any], fragment: dict[str, Any], shown: Any
    ) -> list[dict[str, Any]] | Literal[_Slow.SLOW] | None:
        """``_fast`` for one ``reasoning.summary`` fragment beside ``reasoning`` of the same text (a translated
        Responses stream's summary deltas): rule 4 makes it a detail of its own, so only its ``index`` is set."""
        summary = fragment["summary"] if "summary" in fragment else fragment.get("text")
        if type(shown) is not str or not shown or summary != shown:
            return _SLOW
        state = self._choices[index]
        if state.held is not None or state.opener is not None:
            return _SLOW
        rebuilder = state.rebuilder
        where = ("new", len(rebuilder.details))
        self._sent(state, text=True, listed=True)
        if fragment.get("index") == where[1]:
            rebuilder.add(fragment, where)
            return UNCHANGED
        entry = dict(fragment)
        entry["index"] = where[1]
        rebuilder.add(entry, where)
        delta["reasoning_details"] = [entry]
        return [data]

    def _fast_no_text(
        self,
        data: dict[str, Any],
        choice: dict[str, Any],
        delta: dict[str, Any],
        index: int,
        fragment: dict[str, Any],
        shown: Any,
    ) -> list[dict[str, Any]] | Literal[_Slow.SLOW] | None:
        """``_fast`` for one fragment that shows no text beside no visible ``reasoning`` (``shown``): a
        ``reasoning.text`` fragment without text, as Anthropic's thinking block streams its start and end through
        OpenRouter (a placeholder with an empty ``signature`` that opens it, the ``format`` of the block, its
        ``signature``), or a ``reasoning.encrypted`` one (OpenAI's reasoning items, Anthropic's redacted thinking
        blocks, as OpenRouter streams them). ``_emit`` places it; the delta
        goes out with what it emitted as its details, or none, dropped when nothing is left of the chunk. Same output
        as the general path, key order included."""
        if shown is not None and shown != "":
            return _SLOW
        state = self._choices[index]
        emitted: list[Any] = []
        self._emit(state, fragment, emitted)
        if len(emitted) == 1:  # it carries reasoning
            self._sent(state, text=False, listed=True)
            if emitted[0] == fragment:
                return UNCHANGED
            delta["reasoning_details"] = emitted
            return [data]
        if emitted:  # (a held format released before a new detail)
            rest = {**delta, "reasoning_details": emitted}
        else:
            rest = {key: value for key, value in delta.items() if key != "reasoning_details"}
            if rest and not (state.open and _shows_output(rest)):  # no detail, nothing to close: the fields go
                choice["delta"] = rest
                return [data]
        entries = [entry for entry in _delta_entries(choice, [rest]) if entry["delta"] or _carries_more(entry)]
        return _chunks_of(data, [self._close_after_reasoning(state, entries)])

    def _fast_finish(self, delta: dict[str, Any], index: int) -> Literal[_Slow.SLOW] | None:
        """The chunk that finishes a choice whose reasoning is closed (or never opened), its reasoning fields empty or
        absent (OpenRouter's ``"reasoning": null, "reasoning_details": []``): it goes as it came, and the choice is
        finished. ``_SLOW`` for any other finishing chunk. Same output as the general path."""
        if "reasoning_content" in delta:
            return _SLOW
        reasoning = delta.get("reasoning")
        if reasoning is not None and reasoning != "":
            return _SLOW
        if "reasoning_details" in delta:  # (``null`` would be taken out)
            details = delta["reasoning_details"]
            if type(details) is not list or details:
                return _SLOW
        state = self._choices.get(index)  # (no reasoning: no state made, ``_normalize_choice``)
        if state is not None:
            if state.open or state.call_index >= 0:
                return _SLOW
            state.finished = True
        return UNCHANGED

    def _fast_after(self, data: dict[str, Any], entry: dict[str, Any]) -> list[dict[str, Any]] | None:
        """``_fast`` for a chunk without reasoning while a choice's reasoning is open: ``entry`` is its choice
        (``data``'s own when unchanged, else a new one without a null ``reasoning_content``). The chunk closes
        that reasoning when it shows the answer (``_close_after_reasoning``). Same output as the general path."""
        state = self._choices.get(entry.get("index", 0))  # (no reasoning: no state made, ``_normalize_choice``)
        if state is not None and state.open and _shows_output(entry["delta"]):
            # ``_close_after_reasoning`` of the one entry, which carries no reasoning: the closing goes before it
            closing = self._closing(state, entry)
            if closing:
                closing.append(entry)
                return _chunks_of(data, [closing])
        if entry is data["choices"][0]:
            return UNCHANGED
        return _chunks_of(data, [[entry]])

    def _follows(self, choice: Any) -> bool:
        """Whether ``choice`` is normalized: a choice the normalizer reads (``_is_delta_choice``) of a choice index
        it follows (``MAX_CHOICES``); any other leaves as it came."""
        return _is_delta_choice(choice) and self._choices.follows(choice.get("index", 0))

    def _sent(self, state: _Choice, *, text: bool, listed: bool) -> None:
        """A delta with reasoning goes out for ``state``'s choice (``text``: its ``reasoning`` is text; ``listed``:
        its ``reasoning_details`` holds entries)."""
        state.sent += 1
        if not text:
            state.bare += 1
        if not listed:
            state.unlisted += 1
        state.open = True
        self.open_reasoning = True

    def _plain_entries(self, state: _Choice, text: str) -> list[Any]:
        """``_emit`` of the ``reasoning.text`` detail (format ``unknown``) for plain reasoning ``text``, with the
        common case (it extends the open detail: only ``type``, ``text`` and ``index``) taken directly."""
        pos = state.rebuilder.open_text
        if pos < 0:
            entries: list[Any] = []
            self._emit(state, {"type": "reasoning.text", "text": text, "format": "unknown"}, entries)
            return entries
        return [{"type": "reasoning.text", "text": text, "index": pos}]  # rule 1 extends it (no call: _NO_TEXT)

    def _normalize_choice(self, choice: dict[str, Any]) -> list[dict[str, Any]] | None:
        """The choice entries to send for ``choice`` (one per delta, in order), or ``UNCHANGED``."""
        delta: dict[str, Any] = choice["delta"]
        index = choice.get("index", 0)
        states = self._choices
        state = states.get(index)
        if state is None:  # made when the choice first carries reasoning (or content, for a think splitter)
            state = states[index] if states.think is not None or _holds_reasoning(delta) else _Choice()
        finishing = choice.get("finish_reason") is not None
        content = delta.get("content")
        splitter = state.splitter
        split = splitter is not None and isinstance(content, str) and content != ""
        flush = finishing and splitter is not None and not state.finished
        if finishing:
            state.finished = True
        ends = flush or (splitter is not None and not state.finished and _ends_hold(delta))
        if not (split or ends or any(key in delta for key in REASONING_FIELDS)) and not (
            state.open and (finishing or _shows_output(delta))  # it ends the reasoning (``_closing``)
        ):
            return UNCHANGED

        pieces: list[Piece] = []
        if splitter is not None:
            calls = delta.get("tool_calls")
            if type(calls) is list and calls:
                delta = _own_calls(delta, calls, state)
            own = shown_reasoning(delta)
            if own:
                splitter.reasoning_in_fields()  # a closing tag in the content after it ends this reasoning
                if not self.exclude:
                    splitter.field_reasoning(own)  # it comes before the chunk's content: an echo of it is dropped
            if split:
                assert isinstance(content, str)
                pieces = splitter.feed(content)
            if ends:  # held text keeps its place before the tool call or the finish
                pieces = _merge(pieces + (splitter.flush() if flush else splitter.end_hold()))
        return self._entries(choice, delta, state, pieces, split=split, finishing=finishing)

    def _entries(
        self,
        choice: dict[str, Any],
        delta: dict[str, Any],
        state: _Choice,
        pieces: list[Piece],
        *,
        split: bool,
        finishing: bool,
    ) -> list[dict[str, Any]] | None:
        """The choice entries for ``delta`` and the splitter's ``pieces`` of it, or ``UNCHANGED``."""
        main = _with_reasoning(delta, self._reasoning_fields(delta, state), split)
        piece_deltas = [self._piece_fields(piece, state) for piece in pieces]
        piece_deltas = [d for d in piece_deltas if d]
        if not piece_deltas:
            deltas = [main]
        elif not split:
            deltas = [*piece_deltas, main]  # text a splitter held goes out before this chunk (a tool call, a finish)
        else:  # the content's pieces after the chunk's reasoning and before its tool calls
            late = {key: value for key, value in main.items() if _ends(key, value)}
            head = {key: value for key, value in main.items() if key not in late} if late else main
            if not head.keys() & {"content", "tool_calls", *REASONING_FIELDS}:
                deltas = [{**head, **piece_deltas[0]}, *piece_deltas[1:]]
            else:
                deltas = [head, *piece_deltas]
            if late:
                if "tool_calls" in deltas[-1] or deltas[-1].keys() & late.keys():
                    deltas.append(late)
                else:
                    deltas[-1] = {**deltas[-1], **late}
        entries = _delta_entries(choice, deltas)
        if state.call_index >= 0 and finishing and choice.get("finish_reason") == "stop":
            entries[-1]["finish_reason"] = "tool_calls"
        if self.exclude or piece_deltas or not _holds_nothing(delta):
            entries = [e for e in entries if e["delta"] or e.get("finish_reason") is not None or _carries_more(e)]
        if self.exclude:
            entries = [kept for e in entries if (kept := _unless_emptied(e)) is not None]
            if not entries:
                return []
        entries = self._close_after_reasoning(state, entries)
        if entries[-1:] == [choice]:
            if len(entries) == 1:
                return UNCHANGED
            entries[-1] = choice  # unchanged after what closes the reasoning: it goes as it came (``_chunks_of``)
        return entries

    def _close_after_reasoning(self, state: _Choice, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``entries`` (one choice's, in order) with the reasoning closed before the first one after it that shows
        something else (content text, a tool call, a refusal, any other nonempty field) or finishes the choice
        (``_closing``); entries that carry reasoning are counted (``state.sent``). An entry that carries reasoning
        and finishes the choice (vLLM sends a stream's last tokens with its ``finish_reason``, reasoning ones when
        the output limit cuts the reasoning) goes as two: its delta without the finish reason, then, after what
        closes the reasoning, an empty delta with it (and the choice's other fields, but for ``logprobs``, which
        belong to the tokens)."""
        out: list[dict[str, Any]] = []
        for entry in entries:
            delta = entry["delta"]
            reasoning = delta.get("reasoning")
            details = delta.get("reasoning_details")
            text = type(reasoning) is str and reasoning != ""
            listed = type(details) is list and len(details) > 0
            if text or listed:  # it carries reasoning: a nonempty ``reasoning`` or detail entries
                self._sent(state, text=text, listed=listed)
                if entry.get("finish_reason") is not None:
                    finish = {key: value for key, value in entry.items() if key != "logprobs"}
                    finish["delta"] = {}
                    out.append({**entry, "finish_reason": None})
                    out.extend(self._closing(state, finish))
                    out.append(finish)
                    continue
            elif state.open and (entry.get("finish_reason") is not None or _shows_output(delta)):
                out.extend(self._closing(state, entry))
            out.append(entry)
        return out

    def _closing(self, state: _Choice, entry: dict[str, Any] | None, index: Any = 0) -> list[dict[str, Any]]:
        """The entries that close the choice's reasoning before ``entry``, which is left as it is (``None`` at the
        end of the stream, for the choice ``index``; ``docs/streaming.md``, "Streams"):

        - the held ``format`` of the open text detail (``_release``), in a delta of its own;
        - in one delta, ``"reasoning": null`` when more than one delta carried reasoning text (``state.sent`` but
          ``state.bare``) and ``"reasoning_details": []`` when more than one carried detail entries (``state.sent``
          but ``state.unlisted``, the released format counted), each unless ``entry``'s delta sets that field
          itself (as OpenRouter's answer chunks do): a client that keeps only the last delta's value of a field it
          does not know (openai-node's ``stream()`` helper) then keeps nothing rather than a fragment, and keeps
          whole a text that came in one delta.
        """
        state.open = False
        state.opener = None
        if entry is not None:
            index = entry.get("index", index)
        out: list[dict[str, Any]] = []
        if state.held is not None:
            released: list[Any] = []
            self._release(state, released)
            state.sent += 1
            state.bare += 1
            out.append({"index": index, "delta": {"reasoning_details": released}, "finish_reason": None})
        delta = entry["delta"] if entry is not None else _NO_DELTA
        cleared: dict[str, Any] = {}
        if state.sent - state.bare > 1 and "reasoning" not in delta:
            cleared["reasoning"] = None
        if state.sent - state.unlisted > 1 and "reasoning_details" not in delta:
            cleared["reasoning_details"] = []
        if cleared:
            out.append({"index": index, "delta": cleared, "finish_reason": None})
        for other in self._choices.values():  # (no generator: it runs once per reasoning)
            if other.open:
                break
        else:
            self.open_reasoning = False
        return out

    def _piece_fields(self, piece: Piece, state: _Choice) -> dict[str, Any]:
        kind, text = piece
        if kind == "content":
            return {"content": text}
        if kind == "tool_call":
            index = state.call_index = _free_index(state)
            call = {"index": index, "id": tool_call_id(self._envelope, index), "type": "function"}
            return {"tool_calls": [{**call, "function": {"name": text, "arguments": ""}}]}
        if kind == "tool_arguments":
            if state.call_index < 0:
                return {}
            return {"tool_calls": [{"index": state.call_index, "function": {"arguments": text}}]}
        if self.exclude:
            return {}
        entries: list[Any] = []
        self._emit(state, {"type": "reasoning.text", "text": text, "format": "unknown"}, entries)
        return {"reasoning": text, "reasoning_details": entries}

    def _reasoning_fields(self, delta: dict[str, Any], state: _Choice) -> dict[str, Any]:
        """The reasoning fields of the normalized delta (empty with ``exclude``)."""
        if self.exclude:
            return {}
        details = delta.get("reasoning_details")
        reasoning = delta.get("reasoning")
        plain = plain_reasoning(delta)
        fields = unread_fields(delta)
        if "reasoning" in delta and plain is None:
            fields["reasoning"] = reasoning
        shows = reasoning is None or type(reasoning) is str  # else a value not read holds the field (``fields``)
        if not isinstance(details, list):
            if plain is not None:
                if shows:
                    fields["reasoning"] = plain
                if details is None:
                    fields["reasoning_details"] = self._plain_entries(state, plain)
            return fields
        shown = visible_text(details)
        emitted: list[Any] = []
        if plain is not None and not shown:
            self._emit(state, {"type": "reasoning.text", "text": plain, "format": "unknown"}, emitted)
        for fragment in details:
            self._emit(state, fragment, emitted)
        text = shown or plain
        if text is not None and shows:
            fields["reasoning"] = text
        if emitted or not details:
            fields["reasoning_details"] = emitted
        return fields

    def _emit(self, state: _Choice, fragment: Any, out: list[Any]) -> None:
        """Append to ``out`` the entries to stream for ``fragment`` (``docs/streaming.md``, "The shape of
        streamed reasoning"): its detail's ``index`` set; ``id`` and other fields that do not grow on the detail's first
        entry only; the ``format`` of a ``reasoning.text`` detail that may still grow or be signed held back for
        its last entry (the one with its signature, else ``_release``); an empty ``signature`` left out, and a
        placeholder of one (no text) kept for the next text detail instead of becoming a detail of its own."""
        rebuilder = state.rebuilder
        if type(fragment) is dict and fragment.get("signature") == "" and fragment.get("type") == "reasoning.text":
            fragment = {key: value for key, value in fragment.items() if key != "signature"}  # "" signs nothing
            if not fragment.get("text") and rebuilder.open_text < 0:  # a block's opening placeholder
                state.opener = {key: value for key, value in fragment.items() if key not in _NOT_OPENER}
                return
        where = rebuilder.target(fragment)
        if where is None:
            return
        action, pos = where
        if action == "extend":  # rule 1: only the growing fields, in one order on every path
            entry: Any = {"type": "reasoning.text", "text": fragment["text"], "index": pos}
        elif action == "new":
            self._release(state, out)  # the previous detail's held format goes before the next detail
            opener, state.opener = state.opener, None
            if type(fragment) is not dict:
                entry = fragment
            else:
                entry = dict(fragment)
                if entry.get("type") == "reasoning.text" and "signature" not in entry:  # it may grow, or be signed
                    if opener:
                        for key, value in opener.items():
                            entry.setdefault(key, value)
                    if "format" in entry:
                        state.held = (pos, entry.pop("format"))
                entry["index"] = pos
        else:  # rules 2 and 3 fill fields the detail lacks
            target = rebuilder.details[pos]
            held = state.held is not None and state.held[0] == pos
            entry = {"type": fragment.get("type")}
            for key in FILLED_KEYS:
                if key in fragment and key not in target and key != "index" and not (held and key == "format"):
                    entry[key] = fragment[key]
            if "signature" in entry:
                if held:  # the signature completes the detail: its format goes with it
                    assert state.held is not None
                    entry["format"] = state.held[1]
                    state.held = None
            elif "format" in entry and pos == rebuilder.open_text:
                state.held = (pos, entry.pop("format"))
            if len(entry) == 1:
                return
            entry["index"] = pos
        rebuilder.add(entry, where)
        out.append(entry)

    def _release(self, state: _Choice, out: list[Any]) -> None:
        """Append to ``out`` the held ``format`` of the open text detail as an entry of its own, ``{"type":
        "reasoning.text", "format": ..., "index": ...}``: neither text nor signature, so spec 004's rule 3 fills
        it into the most recent ``reasoning.text`` detail, which the open one is."""
        held = state.held
        if held is None:
            return
        state.held = None
        pos, value = held
        state.rebuilder.details[pos]["format"] = value  # rule 3's fill (the detail stays the open one)
        out.append({"type": "reasoning.text", "format": value, "index": pos})

    def finish(self) -> list[dict[str, Any]]:
        """End of the stream (``[DONE]`` or the last byte): chunks for text a think splitter still holds, and the
        close of reasoning nothing has closed yet (``_closing``).

        Only choices that never sent a ``finish_reason`` can hold text or open reasoning here (some servers never
        send one): a finishing chunk that carries reasoning is closed at once (``_close_after_reasoning``).
        """
        envelope = self._envelope
        if envelope is None:
            return []
        out: list[dict[str, Any]] = []
        for index, state in self._choices.items():
            entries: list[dict[str, Any]] = []
            if state.splitter is not None and not state.finished:
                state.finished = True
                for piece in state.splitter.flush():
                    fields = self._piece_fields(piece, state)
                    if fields:
                        entries.append({"index": index, "delta": fields, "finish_reason": None})
                entries = self._close_after_reasoning(state, entries)
            if state.open:
                entries.extend(self._closing(state, None, index))
            for choice in entries:
                out.append({**envelope, "choices": [choice], **({"usage": None} if "usage" in envelope else {})})
        return out


def _chunks_of(data: dict[str, Any], results: list[list[Any]]) -> list[dict[str, Any]]:
    """The chunks to send for ``data`` whose choices became ``results`` (each choice's entries, in order): one
    chunk when every choice has at most one entry (dropped when none is left and it carries no usage), else one
    chunk per entry, usage on the last. When ``data`` has one choice and its last entry is that very choice
    (unchanged, after chunks put before it), the last chunk is ``data`` itself, so its bytes can go as they came."""
    if len(results) == 1:  # one choice, as most chunks have: no generator
        entries = results[0]
        if len(entries) > 1:
            if entries[-1] is data["choices"][0]:
                before = [{**data, "choices": [entry]} for entry in entries[:-1]]
                if "usage" in data:
                    for chunk in before:
                        chunk["usage"] = None
                return [*before, data]
        elif entries:
            return [{**data, "choices": [entries[0]]}]
        else:
            return [] if data.get("usage") is None else [{**data, "choices": []}]
    elif all(len(entries) <= 1 for entries in results):
        kept = [entries[0] for entries in results if entries]
        if not kept and data.get("usage") is None:
            return []
        return [{**data, "choices": kept}]
    chunks = [{**data, "choices": [entry]} for entries in results for entry in entries]
    if "usage" in data:
        for chunk in chunks[:-1]:
            chunk["usage"] = None
    return chunks


_CHOICE_KEYS: Final = frozenset(("index", "delta", "finish_reason"))
"""The choice keys a normalizer sets; any other one with a value (``logprobs``, a provider's own) is the upstream's."""


def _carries_more(entry: dict[str, Any]) -> bool:
    """Whether a choice ``entry`` carries a value beyond its delta and finish reason (``logprobs``, a provider's own
    field), so that it is never dropped for an empty delta."""
    return any(value is not None for key, value in entry.items() if key not in _CHOICE_KEYS)


def _excluded(choice: Any) -> list[Any] | None:
    """A choice the normalizer does not follow (``_follows``: past ``MAX_CHOICES``, an ``index`` that is not an
    integer, no ``delta`` object), as it goes out with ``exclude``: the reasoning fields of its ``delta`` taken out,
    which needs no state, and the entry dropped when nothing is left (``_unless_emptied``); those of a ``message``
    object in place of the delta (a whole message in a stream chunk, as some servers send) taken out likewise, the
    entry kept. ``UNCHANGED`` when it has none. With think splitting, tagged reasoning in its ``content`` stays:
    cutting it needs the choice's state."""
    if type(choice) is not dict:
        return UNCHANGED
    field = "delta" if type(choice.get("delta")) is dict else "message"
    value = choice.get(field)
    if type(value) is not dict or _REASONING_KEYS.isdisjoint(value):
        return UNCHANGED
    entry = {**choice, field: {key: item for key, item in value.items() if key not in _REASONING_KEYS}}
    if field == "message":
        return [entry]
    kept = _unless_emptied(entry)
    return [] if kept is None else [kept]


def _unless_emptied(entry: dict[str, Any]) -> dict[str, Any] | None:
    """``entry`` as it goes out with ``exclude``: ``None`` (dropped) when taking the reasoning out left its delta
    with nothing but an empty ``content`` (``null`` or ``""``) and it neither finishes the choice nor carries
    anything else; when that delta holds the ``role`` (a stream's first chunk), only the role is kept, which
    clients read from the first chunk (``docs/streaming.md``, "Excluded reasoning")."""
    delta = entry["delta"]
    if entry.get("finish_reason") is not None or _carries_more(entry):
        return entry
    for key, value in delta.items():
        if not (key == "role" or (key == "content" and (value is None or value == ""))):
            return entry
    if "role" not in delta:
        return None
    if len(delta) == 1:
        return entry
    return {**entry, "delta": {"role": delta["role"]}}


def _delta_entries(choice: dict[str, Any], deltas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The choice entries of ``choice`` for its normalized ``deltas``, in order, each kept apart by detail (``_apart``):
    the choice's fields with each delta, the finish reason on the last only."""
    deltas = [part for d in deltas for part in _apart(d)]
    entries = [{**choice, "delta": d, "finish_reason": None} for d in deltas[:-1]]
    entries.append({**choice, "delta": deltas[-1]})
    return entries


def _apart(delta: dict[str, Any]) -> list[dict[str, Any]]:
    """``delta`` as one delta per run of ``reasoning_details`` entries with distinct ``index`` values.

    Two entries of one detail in one delta (a text and its signature, say) are merged by the spec's rebuild and
    by current openai SDKs alike, but older SDKs (2.x) take a delta's first list of entries as it is, without
    merging by ``index``, and then merge later entries into the wrong detail. Each entry after a repeated index
    goes out in a delta of its own (the other fields stay with the first), so every client sees one entry per
    detail per chunk (``docs/streaming.md``). Each of those deltas keeps the promise of a reasoning fragment
    (spec 004 "Streaming": ``delta.reasoning`` for display, the details to rebuild): its ``reasoning`` is the
    visible text of its own entries (``details.visible_text``), and a delta whose entries show no text carries
    no ``reasoning``, so that joining ``reasoning`` over the stream gives the details' text once. (A
    ``reasoning`` that is not the visible text of all the entries, which the normalizer never makes, stays on
    the first delta.)
    """
    details = delta.get("reasoning_details")
    if not isinstance(details, list) or len(details) < 2:
        return [delta]
    groups: list[list[Any]] = [[]]
    seen: set[Any] = set()
    for entry in details:
        index = entry.get("index") if isinstance(entry, dict) else None
        if isinstance(index, list | dict):
            index = None  # not an index numi_mw sets (``_emit`` sets integers): it groups with nothing
        if index is not None and index in seen:
            groups.append([])
            seen = set()
        groups[-1].append(entry)
        if index is not None:
            seen.add(index)
    if len(groups) == 1:
        return [delta]
    reasoning = delta.get("reasoning")
    texts = [visible_text(group) for group in groups]
    if type(reasoning) is not str or reasoning != "".join(texts):
        return [{**delta, "reasoning_details": groups[0]}, *({"reasoning_details": group} for group in groups[1:])]
    first = {**delta, "reasoning": texts[0], "reasoning_details": groups[0]}
    if not texts[0]:
        del first["reasoning"]
    rest = [
        {"reasoning": text, "reasoning_details": group} if text else {"reasoning_details": group}
        for text, group in zip(texts[1:], groups[1:], strict=True)
    ]
    return [first, *rest]


def tool_call_id(envelope: Any, index: int) -> str:
    """The id of the ``index``-th harmony tool call found in a completion's content: ``call_<id>_<index>`` with
    the completion's (or chunk's) ``id``, or ``call_<index>`` when it has none. The upstream gives none (it saw
    no tool call), so like vLLM (``make_tool_call_id``) numi_mw makes one; built from the completion's id it is
    unique wherever that id is, and the same in every chunk."""
    completion = envelope.get("id") if isinstance(envelope, dict) else None
    return f"call_{completion}_{index}" if isinstance(completion, str) and completion else f"call_{index}"


def _merge(pieces: list[Piece]) -> list[Piece]:
    merged: list[Piece] = []
    for kind, text in pieces:
        if merged and merged[-1][0] == kind and kind != "tool_call":
            merged[-1] = (kind, merged[-1][1] + text)
        elif text:
            merged.append((kind, text))
    return merged


def _with_reasoning(delta: dict[str, Any], fields: dict[str, Any], split: bool) -> dict[str, Any]:
    """A copy of ``delta`` with its reasoning fields replaced by ``fields`` (and without ``content`` when it was
    split), keys in ``delta``'s order: ``reasoning`` stands where ``reasoning_content`` stood when the delta had
    no ``reasoning``; new keys go last."""
    out = {k: v for k, v in delta.items() if not (split and k == "content")}
    if "reasoning" in fields and "reasoning" not in delta:
        splice(out, ("reasoning_content",), {"reasoning": fields["reasoning"]})
    for key in REASONING_FIELDS:
        if key in fields:
            out[key] = fields[key]
        else:
            out.pop(key, None)
    return out


def _is_delta_choice(choice: Any) -> bool:
    """Whether ``choice`` is one the normalizer reads: an object with a ``delta`` object and an integer ``index``
    (or none: it counts as 0). Any other choice (an ``index`` that is a string, a list, an object, ``true``...)
    is not a chat completion choice numi_mw knows how to follow and leaves as it came, so a provider's odd value
    never stops the stream (``docs/streaming.md``, "Values numi_mw does not read")."""
    return type(choice) is dict and type(choice.get("delta")) is dict and (type(choice.get("index", 0)) is int)
