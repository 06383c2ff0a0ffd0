"""Reasoning tag splitter (``numi_mw.core.think``): exact pieces, every family, every split, recorded streams."""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numi_mw.core.sse import SSEDecoder
from numi_mw.core.think import TAG_FAMILIES, Piece, ThinkSplitter


def run(*texts: str, **kwargs: bool | int) -> list[Piece]:
    """All pieces of a stream fed as ``texts``, flush included, adjacent same-kind pieces merged."""
    splitter = ThinkSplitter(**kwargs)  # type: ignore[arg-type]
    pieces: list[Piece] = []
    for text in texts:
        pieces += splitter.feed(text)
    return merge(pieces + splitter.flush())


def merge(pieces: list[Piece]) -> list[Piece]:
    out: list[Piece] = []
    for kind, text in pieces:
        assert text, "empty piece"
        if out and out[-1][0] == kind:
            out[-1] = (kind, out[-1][1] + text)
        else:
            out.append((kind, text))
    return out


def joined(pieces: list[Piece], kind: str) -> str:
    return "".join(text for k, text in pieces if k == kind)


def reference(text: str, *, start_in_reasoning: bool = False) -> list[Piece]:
    """A whole-text, one-position-at-a-time model of the rules (default families, unbounded auto mode)."""
    opens = {o: c for o, c in TAG_FAMILIES}
    closes = [c for _, c in TAG_FAMILIES]
    out: list[Piece] = []
    mode = "reasoning" if start_in_reasoning else "content"
    close: str | None = None
    undecided = not start_in_reasoning
    lead = ""
    i = 0

    def put(kind: str, s: str) -> None:
        if s:
            out.append((kind, s))  # type: ignore[arg-type]

    while i < len(text):
        candidates = ([close] if close else closes) if mode == "reasoning" else list(opens) + closes
        tag = max((t for t in candidates if text.startswith(t, i)), key=len, default=None)
        if tag is None:
            if undecided:
                lead += text[i]
            else:
                put(mode, text[i])
            i += 1
            continue
        i += len(tag)
        if mode == "reasoning":
            mode, close = "content", None
        elif tag in opens:
            if undecided:
                put("content", lead)
                undecided = False
            mode, close = "reasoning", opens[tag]
        elif undecided:
            put("reasoning", lead)
            undecided = False
        # else: a stray closing tag in decided content is dropped
    if undecided:
        put("content", lead)
    return merge(out)


# --- exact outputs -------------------------------------------------------------------------------------------


def test_spec_case_tags_split_across_feeds() -> None:
    splitter = ThinkSplitter()
    assert splitter.feed("<th") == []
    assert splitter.feed("ink>Check units.</th") == [("reasoning", "Check units.")]
    assert splitter.feed("ink>Done.") == [("content", "Done.")]
    assert splitter.flush() == []


@pytest.mark.parametrize(("open_tag", "close_tag"), TAG_FAMILIES)
def test_every_family(open_tag: str, close_tag: str) -> None:
    splitter = ThinkSplitter()
    assert splitter.feed(f"{open_tag}Check units.{close_tag}\n\nDone.") == [
        ("reasoning", "Check units."),
        ("content", "\n\nDone."),
    ]
    assert splitter.flush() == []


@pytest.mark.parametrize(("open_tag", "close_tag"), TAG_FAMILIES)
def test_every_family_one_character_at_a_time(open_tag: str, close_tag: str) -> None:
    text = f"{open_tag}Check units.{close_tag}Done."
    assert run(*text) == [("reasoning", "Check units."), ("content", "Done.")]


def test_tag_split_into_three_feeds() -> None:
    splitter = ThinkSplitter()
    assert splitter.feed("<") == []
    assert splitter.feed("thinking") == []
    assert splitter.feed(">") == []
    assert splitter.feed("plan") == [("reasoning", "plan")]
    assert splitter.feed("</thinking") == []
    assert splitter.feed(">ok") == [("content", "ok")]


def test_whitespace_after_closing_tag_is_kept() -> None:
    assert run("<think>\nr\n</think>\n\nAnswer\n") == [("reasoning", "\nr\n"), ("content", "\n\nAnswer\n")]


def test_opening_tag_after_prose_is_a_tag() -> None:
    splitter = ThinkSplitter()
    assert splitter.feed("Sure. <think>x</think>Done") == [
        ("content", "Sure. "),
        ("reasoning", "x"),
        ("content", "Done"),
    ]
    assert splitter.feed(" then <think>y") == [("content", " then "), ("reasoning", "y")]
    assert splitter.feed("</think>end") == [("content", "end")]


def test_leading_space_then_tag_mid_chunk_like_kimi() -> None:
    assert run(" <think> plan </think> answer") == [
        ("content", " "),
        ("reasoning", " plan "),
        ("content", " answer"),
    ]


def test_unclosed_tag_flushes_as_reasoning() -> None:
    splitter = ThinkSplitter()
    assert splitter.feed("<think>abc") == [("reasoning", "abc")]
    assert splitter.feed("def</thi") == [("reasoning", "def")]
    assert splitter.flush() == [("reasoning", "</thi")]


def test_partial_tag_that_was_not_a_tag() -> None:
    splitter = ThinkSplitter()
    assert splitter.feed("<think>r</think>a <th") == [("reasoning", "r"), ("content", "a ")]
    assert splitter.feed("x") == [("content", "<thx")]
    assert splitter.feed(" 1 <") == [("content", " 1 ")]
    assert splitter.flush() == [("content", "<")]


def test_only_closing_tag_start_auto_mode() -> None:
    splitter = ThinkSplitter()
    assert splitter.feed("Let me see") == []
    assert splitter.feed(" more.</th") == []
    assert splitter.feed("ink>\n\nAnswer") == [("reasoning", "Let me see more."), ("content", "\n\nAnswer")]
    assert splitter.feed(" <think>again</think>!") == [
        ("content", " "),
        ("reasoning", "again"),
        ("content", "!"),
    ]
    assert splitter.flush() == []


def test_only_closing_tag_of_another_family() -> None:
    assert run("plan◁/think▷answer") == [("reasoning", "plan"), ("content", "answer")]


def test_auto_mode_without_tags_is_content_at_flush() -> None:
    splitter = ThinkSplitter()
    assert splitter.feed("Hello") == []
    assert splitter.feed(" world <") == []
    assert splitter.flush() == [("content", "Hello world <")]


def test_auto_mode_bound_releases_content() -> None:
    splitter = ThinkSplitter(lookahead_chars=5)
    assert splitter.feed("abc") == []
    assert splitter.feed("def") == [("content", "abcdef")]
    # Decided as content: a closing tag without an opening tag is dropped (content never carries a tag).
    assert splitter.feed("</think>x") == [("content", "x")]
    assert splitter.feed("<think>y") == [("reasoning", "y")]


def test_auto_mode_exactly_at_bound_still_holds() -> None:
    splitter = ThinkSplitter(lookahead_chars=5)
    assert splitter.feed("abcde") == []
    assert splitter.feed("</think>z") == [("reasoning", "abcde"), ("content", "z")]


def test_lookahead_zero_turns_auto_mode_off() -> None:
    splitter = ThinkSplitter(lookahead_chars=0)
    assert splitter.feed("abc") == [("content", "abc")]
    assert splitter.feed("</think>d") == [("content", "d")]


def test_start_in_reasoning() -> None:
    splitter = ThinkSplitter(start_in_reasoning=True)
    assert str(splitter.mode) == "reasoning"
    assert splitter.feed("Check") == [("reasoning", "Check")]
    assert splitter.feed(" units.</think>Done.") == [("reasoning", " units."), ("content", "Done.")]
    assert str(splitter.mode) == "content"
    assert splitter.feed("<think>more") == [("reasoning", "more")]
    assert splitter.flush() == []
    assert str(splitter.mode) == "reasoning"  # reset to the initial state


def test_start_in_reasoning_accepts_any_family_closing_tag() -> None:
    assert run("a<|end_of_thought|>b", start_in_reasoning=True) == [("reasoning", "a"), ("content", "b")]


def test_nested_opening_tag_inside_reasoning_is_text() -> None:
    assert run("<think>a<think>b</think>c") == [("reasoning", "a<think>b"), ("content", "c")]


def test_closing_tag_of_another_family_inside_reasoning_is_text() -> None:
    assert run("<think>a</thinking>b</think>c") == [("reasoning", "a</thinking>b"), ("content", "c")]


def test_stray_closing_tag_after_decided_content_is_dropped() -> None:
    assert run("<think>a</think>b</think>c") == [("reasoning", "a"), ("content", "bc")]


def test_think_prefix_of_thinking() -> None:
    assert run("<thinking>a</thinking>b") == [("reasoning", "a"), ("content", "b")]
    assert run("<think", "ing>a</think", "ing>b") == [("reasoning", "a"), ("content", "b")]
    assert run("<thinker>x") == [("content", "<thinker>x")]


def test_empty_feeds_and_empty_reasoning() -> None:
    splitter = ThinkSplitter()
    assert splitter.feed("") == []
    assert splitter.feed("<think></think>") == []
    assert splitter.feed("x") == [("content", "x")]
    assert splitter.feed("") == []
    assert splitter.flush() == []


def test_custom_families() -> None:
    splitter = ThinkSplitter([("[[", "]]")], lookahead_chars=0)
    assert splitter.feed("a[") == [("content", "a")]
    assert splitter.feed("[b]") == [("reasoning", "b")]
    assert splitter.feed("]c<think>") == [("content", "c<think>")]


@pytest.mark.parametrize("kwargs", [{"families": []}, {"families": [("", "</x>")]}, {"lookahead_chars": -1}], ids=repr)
def test_invalid_arguments(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        ThinkSplitter(**kwargs)  # type: ignore[arg-type]


# --- any split -----------------------------------------------------------------------------------------------

SAMPLES = [
    "<think>\nCheck units.\n</think>\n\nDone.",
    "Intro <thinking>plan ◁ < </thi</thinking> answer <|begin_of_thought|>x<|end_of_thought|>y",
    "reasoning first, no opening tag.</reasoning>content ◁think▷r2◁/think▷ é😀 <",
    "no tags at all < <th </ ◁",
]


@pytest.mark.parametrize("text", SAMPLES)
@pytest.mark.parametrize("start_in_reasoning", [False, True])
def test_split_at_every_character(text: str, start_in_reasoning: bool) -> None:
    whole = run(text, start_in_reasoning=start_in_reasoning)
    assert whole == reference(text, start_in_reasoning=start_in_reasoning)
    for i in range(len(text) + 1):
        for j in (i, (i + len(text)) // 2, len(text)):
            if j >= i:
                pieces = run(text[:i], text[i:j], text[j:], start_in_reasoning=start_in_reasoning)
                assert pieces == whole, (i, j)


_PIECES = st.sampled_from(
    [
        *(tag for family in TAG_FAMILIES for tag in family),
        "<",
        "</",
        "<th",
        "think",
        "ing",
        ">",
        "|",
        "◁",
        "▷",
        "/",
        "a",
        " ",
        "\n",
        "é",
        "😀",
    ]
)


@settings(max_examples=200, deadline=None)
@given(
    pieces=st.lists(_PIECES, max_size=30),
    cuts=st.lists(st.integers(0, 300), max_size=10),
    start_in_reasoning=st.booleans(),
)
def test_any_chunking_gives_the_same_pieces(pieces: list[str], cuts: list[int], start_in_reasoning: bool) -> None:
    text = "".join(pieces)
    bounds = [0, *sorted(min(c, len(text)) for c in cuts), len(text)]
    chunks = [text[a:b] for a, b in pairwise(bounds)]
    whole = run(text, start_in_reasoning=start_in_reasoning)
    assert whole == reference(text, start_in_reasoning=start_in_reasoning)
    assert run(*chunks, start_in_reasoning=start_in_reasoning) == whole


def test_long_text_scans_fast() -> None:
    text = ("x" * 999 + "\n") * 2000
    splitter = ThinkSplitter(start_in_reasoning=True)
    out = [p for i in range(0, len(text), 3) for p in splitter.feed(text[i : i + 3])] + splitter.flush()
    assert joined(out, "reasoning") == text


# --- recorded streams ----------------------------------------------------------------------------------------


def test_recorded_groq_stream_matches_buffered_split(shared_dir: Path) -> None:
    folder = shared_dir / "fixtures" / "think-tags"
    decoder = SSEDecoder()
    events = decoder.feed((folder / "groq-deepseek-r1-distill-raw-think-tags.sse").read_bytes()) + decoder.flush()
    splitter = ThinkSplitter()
    pieces: list[Piece] = []
    content = ""
    for event in events:
        if event.data is None or event.is_done:
            continue
        for choice in json.loads(event.data).get("choices", []):
            text = choice.get("delta", {}).get("content")
            if text:
                content += text
                pieces += splitter.feed(text)
    pieces += splitter.flush()
    assert content.startswith("<think>")
    head, _, tail = content[len("<think>") :].partition("</think>")
    assert merge(pieces) == [("reasoning", head), ("content", tail)]


@pytest.mark.parametrize(
    "name", ["groq-deepseek-r1-distill-raw-think-tags.buffered.json", "together-deepseek-r1-think-tags.buffered.json"]
)
def test_recorded_buffered_content(shared_dir: Path, name: str) -> None:
    body = json.loads((shared_dir / "fixtures" / "think-tags" / name).read_text())
    content = body["choices"][0]["message"]["content"]
    pieces = run(content)
    assert [kind for kind, _ in pieces] == ["reasoning", "content"]
    assert "<think>" + pieces[0][1] + "</think>" + pieces[1][1] == content
