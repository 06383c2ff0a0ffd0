"""Reasoning markup splitter (``numi_mw.core.think``): exact pieces, every family, every shape, every split.

``reference`` is a second, whole-text implementation of the rules written another way (one position at a time,
a block's text collected and judged when it ends); the property tests check that any split of any text drawn
from tags, harmony markers and awkward characters gives the reference's pieces.
"""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numi_mw.core.sse import SSEDecoder
from numi_mw.core.think import (
    DEFAULT_SWITCH_CHARS,
    HARMONY_HEADER_CHARS,
    TAG_FAMILIES,
    Piece,
    ReasoningEcho,
    SplitText,
    ThinkSplitter,
    ThinkTags,
    harmony_header,
)

Options = dict[str, bool | int]


def run(*texts: str, fields: bool = False, **kwargs: bool | int) -> list[Piece]:
    """All pieces of a stream fed as ``texts``, flush included, adjacent same-kind pieces merged; with
    ``fields``, the stream carried reasoning in its own fields before its first content text."""
    splitter = ThinkSplitter(**kwargs)  # type: ignore[arg-type]
    if fields:
        splitter.reasoning_in_fields()
    pieces: list[Piece] = []
    for text in texts:
        pieces += splitter.feed(text)
    return merge(pieces + splitter.flush())


def merge(pieces: list[Piece]) -> list[Piece]:
    out: list[Piece] = []
    for kind, text in pieces:
        assert text, "empty piece"
        if out and out[-1][0] == kind and kind != "tool_call":
            out[-1] = (kind, out[-1][1] + text)
        else:
            out.append((kind, text))
    return out


def joined(pieces: list[Piece], kind: str) -> str:
    return "".join(text for k, text in pieces if k == kind)


# --- the reference -------------------------------------------------------------------------------------------

OPENS = dict(TAG_FAMILIES)
CLOSES = frozenset(c for _, c in TAG_FAMILIES)
H_OPENERS = ("<|start|>", "<|channel|>")
H_ENDS = ("<|end|>", "<|return|>", "<|call|>")
H_MARKERS = (*H_OPENERS, "<|message|>", "<|constrain|>", *H_ENDS)
WS = " \t\r\n"


def reference(
    text: str,
    *,
    start_in_reasoning: bool = False,
    lookahead_chars: int = 64 * 1024,
    switch_chars: int = DEFAULT_SWITCH_CHARS,
    fields: bool = False,
) -> list[Piece]:
    """The rules of ``numi_mw.core.think`` on a whole text, one position at a time (default families)."""
    out: list[Piece] = []

    def put(kind: str, s: str) -> None:
        if s:
            if out and out[-1][0] == kind and kind != "tool_call":
                out[-1] = (kind, out[-1][1] + s)  # type: ignore[assignment]
            else:
                out.append((kind, s))  # type: ignore[arg-type]

    state = "implicit" if start_in_reasoning else "lead" if lookahead_chars > 0 else "content"
    bound, switch = lookahead_chars, False
    if fields and switch_chars > 0:
        state, bound, switch = "lead", switch_chars, True
    lead = block = header = ""
    family = ""  # the opening tag of the current block ("" in the implicit block)
    depth = 0
    strip_nl = False  # the block was opened by a tag: one "\n" after it is markup
    nl_after = 0
    body = ""

    def end_block() -> None:
        nonlocal state, block, nl_after, family, depth
        reasoning = block.removeprefix("\n") if strip_nl else block
        if reasoning.strip(WS):
            put("reasoning", reasoning)
        state, block, nl_after, family, depth = "content", "", 2, "", 0

    def content_char(ch: str) -> None:
        nonlocal nl_after, lead
        if nl_after and ch == "\n":
            nl_after -= 1
            return
        nl_after = 0
        if state == "lead":
            lead += ch
        else:
            put("content", ch)

    i = 0
    while i < len(text):
        if state in ("content", "lead"):
            candidates = [*OPENS, *CLOSES, *H_MARKERS]
        elif state == "block":
            candidates = [family, OPENS[family]]
        elif state == "implicit":
            candidates = [*OPENS, *CLOSES, *H_OPENERS]
        elif state == "header":
            candidates = ["<|message|>", "<|start|>", *H_ENDS]
        else:
            candidates = list(H_MARKERS)
        tag = max((t for t in candidates if text.startswith(t, i)), key=len, default="")
        if not tag:
            ch = text[i]
            i += 1
            if state in ("content", "lead"):
                content_char(ch)
            elif state in ("block", "implicit"):
                block += ch
            elif state == "header":
                header += ch
                if len(header) > HARMONY_HEADER_CHARS:  # too long to be a header: it was content, and so is
                    for marker in H_MARKERS:  # what follows, read as content
                        header = header.replace(marker, "")
                    put("content", header)
                    state, header = "content", ""
            else:
                put(body, ch)
            continue
        i += len(tag)
        if state in ("content", "lead"):
            if tag in OPENS or tag in H_OPENERS:
                if state == "lead":
                    put("content", lead)
                    lead = ""
                nl_after = 0
                if tag in OPENS:
                    state, family, depth, block, strip_nl = "block", tag, 1, "", True
                else:
                    state, header = "header", tag if tag == "<|channel|>" else ""
            elif tag in CLOSES:
                if state == "lead" and len(lead) <= bound:
                    if switch or lead.strip(WS):
                        put("reasoning", lead)
                else:
                    put("content", lead)
                state, nl_after, lead = "content", 2, ""
        elif state == "block":
            if tag == family:
                depth += 1
                block += tag
            else:
                depth -= 1
                if depth:
                    block += tag
                else:
                    end_block()
        elif state == "implicit":
            if tag in OPENS:
                if block.strip(WS):
                    state, family, depth, strip_nl = "block", tag, 2, False
                    block += tag
                else:
                    state, family, depth, block, strip_nl = "block", tag, 1, "", True
            elif tag in CLOSES:
                end_block()
            else:
                if block.strip(WS):
                    put("reasoning", block)
                state, block, header = "header", "", tag if tag == "<|channel|>" else ""
        elif state == "header":
            if tag == "<|message|>":
                kind, name = harmony_header(header)
                if kind == "tool_call":
                    put("tool_call", name)
                    kind = "tool_arguments"
                state, body, header = "body", kind, ""
            elif tag == "<|start|>":
                header = ""
            else:
                state, header = "content", ""
        elif tag in H_ENDS:
            state = "content"
        elif tag in H_OPENERS:
            state, header = "header", tag if tag == "<|channel|>" else ""
    if state == "lead":
        put("content", lead)
    elif state in ("block", "implicit"):
        reasoning = block.removeprefix("\n") if strip_nl else block
        if reasoning.strip(WS):
            put("reasoning", reasoning)
    return out


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
    assert splitter.feed(f"{open_tag}\nCheck units.\n{close_tag}\n\nDone.") == [
        ("reasoning", "Check units.\n"),
        ("content", "Done."),
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


# The outputs of the scripted model (tests/llama_model.py) as the real llama-server 0.3.36 splits them with
# reasoning_format "deepseek": (raw text, reasoning_content, content). tests/test_e2e_llama.py checks the same
# against the server itself.
LLAMA_CPP_SPLITS = [
    ("<think>\nSpell it out.\n</think>\n\nThree r's.", "Spell it out.\n", "Three r's."),
    ("<think>Plan.</think>Answer.", "Plan.", "Answer."),
    ("<think>\nOnly thinking.\n</think>", "Only thinking.\n", ""),
    ("<think>\nStill thinking more", "Still thinking more", ""),
    ("Just the answer.", "", "Just the answer."),
    ("<think>\n\n\n</think>\n\nAnswer.", "", "Answer."),
    ("<think>\n\nDeep.\n\n</think>\n\n\nAnswer.", "\nDeep.\n\n", "\nAnswer."),
    ("<think> spaced </think>  Answer.", " spaced ", "  Answer."),
    ("<think>\r\nA\r\n</think>\r\n\r\nB", "\r\nA\r\n", "\r\n\r\nB"),
]


@pytest.mark.parametrize(("raw", "reasoning", "content"), LLAMA_CPP_SPLITS)
@pytest.mark.parametrize("lookahead_chars", [0, 1000])
def test_whitespace_is_split_as_llama_cpp_splits_it(
    raw: str, reasoning: str, content: str, lookahead_chars: int
) -> None:
    for i in range(len(raw) + 1):
        pieces = run(raw[:i], raw[i:], lookahead_chars=lookahead_chars)
        assert (joined(pieces, "reasoning"), joined(pieces, "content")) == (reasoning, content), i
    assert ThinkTags().split_message(raw) == SplitText(reasoning, content)


def test_whitespace_only_reasoning_is_held_until_text_decides() -> None:
    splitter = ThinkSplitter(lookahead_chars=0)
    assert splitter.feed("<think>\n") == []
    assert splitter.feed("\n  ") == []
    assert splitter.feed("x") == [("reasoning", "\n  x")]
    assert splitter.feed("</think>\n") == []
    assert splitter.feed("\nA") == [("content", "A")]


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
    assert splitter.feed("ink>\n\nAnswer") == [("reasoning", "Let me see more."), ("content", "Answer")]
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


def test_auto_mode_bound_does_not_depend_on_the_split() -> None:
    # a closing tag that starts after more than the bound is a stray tag, whether or not a feed ended before it
    assert run("abcdef</think>x", lookahead_chars=5) == [("content", "abcdefx")]
    assert run("abc", "def</think>x", lookahead_chars=5) == [("content", "abcdefx")]


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


def test_start_in_reasoning_takes_a_repeated_opening_tag_as_the_same_block() -> None:
    # llama.cpp with reasoning_format "none" puts the template's "<think>\n" back in front of the output
    raw = "<think>\nSpell it out.\n</think>\n\nThree r's."
    for i in range(len(raw) + 1):
        assert run(raw[:i], raw[i:], start_in_reasoning=True) == [
            ("reasoning", "Spell it out.\n"),
            ("content", "Three r's."),
        ], i


def test_start_in_reasoning_whitespace_only_block_gives_no_reasoning() -> None:
    assert run("\n\n</think>\n\nHi", start_in_reasoning=True) == [("content", "Hi")]


# --- nesting -------------------------------------------------------------------------------------------------


def test_a_block_ends_at_its_own_closing_tag() -> None:
    text = "<think>Outer plan <think>inner note</think> continues</think>Visible answer."
    expected = [("reasoning", "Outer plan <think>inner note</think> continues"), ("content", "Visible answer.")]
    for i in range(len(text) + 1):
        assert run(text[:i], text[i:]) == expected, i


def test_a_quoted_opening_tag_without_its_closing_tag_keeps_the_block_open() -> None:
    assert run("<think>a<think>b</think>c") == [("reasoning", "a<think>b</think>c")]


def test_a_quoted_tag_in_a_template_opened_block_nests() -> None:
    assert run("plan <think>q</think> more</think>answer", start_in_reasoning=True) == [
        ("reasoning", "plan <think>q</think> more"),
        ("content", "answer"),
    ]


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
    splitter = ThinkSplitter([("[[", "]]")], lookahead_chars=0, harmony=False)
    assert splitter.feed("a[") == [("content", "a")]
    assert splitter.feed("[b]") == [("reasoning", "b")]
    assert splitter.feed("]c<think>") == [("content", "c<think>")]


@pytest.mark.parametrize(
    "kwargs",
    [{"families": []}, {"families": [("", "</x>")]}, {"lookahead_chars": -1}, {"switch_chars": -1}],
    ids=repr,
)
def test_invalid_arguments(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        ThinkSplitter(**kwargs)  # type: ignore[arg-type]


# --- from reasoning fields to tags ---------------------------------------------------------------------------


def test_content_before_a_closing_tag_after_reasoning_fields_is_reasoning() -> None:
    splitter = ThinkSplitter(lookahead_chars=0)
    splitter.reasoning_in_fields()
    assert splitter.feed(" more") == []
    assert splitter.feed(".</th") == []
    assert splitter.feed("ink>\n\nAnswer") == [("reasoning", " more."), ("content", "Answer")]
    assert splitter.feed(" and </think> no more") == [("content", " and  no more")]


def test_the_switch_holds_at_most_its_bound() -> None:
    splitter = ThinkSplitter(lookahead_chars=0, switch_chars=8)
    splitter.reasoning_in_fields()
    assert splitter.feed("12345678") == []  # exactly the bound: still held
    assert splitter.feed("9") == [("content", "123456789")]
    assert splitter.feed("</think>x") == [("content", "x")]
    assert run("123456789</think>x", fields=True, lookahead_chars=0, switch_chars=8) == [("content", "123456789x")]


def test_the_switch_ends_at_an_opening_tag_or_the_end() -> None:
    assert run("Answer <think>more</think>!", fields=True, lookahead_chars=0) == [
        ("content", "Answer "),
        ("reasoning", "more"),
        ("content", "!"),
    ]
    assert run("Three r's.", fields=True, lookahead_chars=0) == [("content", "Three r's.")]


@pytest.mark.parametrize("kwargs", [{"lookahead_chars": 0}, {}, {"start_in_reasoning": True}], ids=repr)
def test_the_switch_applies_whatever_the_start(kwargs: Options) -> None:
    # a server that parsed the reasoning into fields sends only the answer in content, with no tag
    assert run("Three r's.", fields=True, **kwargs) == [("content", "Three r's.")]
    assert run("end.</think>\n\nThree r's.", fields=True, **kwargs) == [
        ("reasoning", "end."),
        ("content", "Three r's."),
    ]


def test_no_switch_inside_a_block_or_after_content_was_held() -> None:
    splitter = ThinkSplitter(lookahead_chars=0)
    splitter.feed("<think>a")
    splitter.reasoning_in_fields()
    assert splitter.feed("b</think>c") == [("reasoning", "b"), ("content", "c")]
    splitter = ThinkSplitter()  # auto: "x" is already held when the fields come
    assert splitter.feed("x") == []
    splitter.reasoning_in_fields()
    assert splitter.feed("</think>y") == [("reasoning", "x"), ("content", "y")]
    splitter = ThinkSplitter(lookahead_chars=0, switch_chars=0)  # switched off
    splitter.reasoning_in_fields()
    assert splitter.feed("a</think>b") == [("content", "ab")]


@pytest.mark.parametrize("kwargs", [{"lookahead_chars": 0}, {}], ids=repr)
def test_end_hold_releases_held_content_and_a_partial_tag_as_content(kwargs: Options) -> None:
    splitter = ThinkSplitter(**kwargs)  # type: ignore[arg-type]
    splitter.reasoning_in_fields()
    assert splitter.feed("Let me check. <th") == []
    assert splitter.end_hold() == [("content", "Let me check. <th")]  # a tool call came: it was content
    assert splitter.feed("</think>ok") == [("content", "ok")]  # a closing tag after it is a stray tag
    splitter = ThinkSplitter(lookahead_chars=0)
    assert splitter.feed("Hi <thi") == [("content", "Hi ")]
    assert splitter.end_hold() == [("content", "<thi")]
    assert splitter.end_hold() == []


def test_end_hold_changes_nothing_inside_reasoning() -> None:
    splitter = ThinkSplitter(lookahead_chars=0)
    assert splitter.feed("<think>plan </thi") == [("reasoning", "plan ")]
    assert splitter.end_hold() == []
    assert splitter.feed("nk>done") == [("content", "done")]
    splitter = ThinkSplitter(start_in_reasoning=True)
    assert splitter.feed("\n") == []
    assert splitter.end_hold() == []
    assert splitter.feed("a</think>b") == [("reasoning", "\na"), ("content", "b")]


# --- tagged reasoning that repeats the reasoning fields -----------------------------------------------------


def echo_run(fields: str, *pieces: Piece, end: bool = True) -> list[Piece]:
    echo = ReasoningEcho()
    echo.fields(fields)
    out = merge(echo.filter(list(pieces)))
    return merge(out + echo.settle()) if end else out


def test_tagged_reasoning_equal_to_the_fields_is_dropped() -> None:
    assert echo_run("R", ("reasoning", "R"), ("content", "Answer")) == [("content", "Answer")]
    # surrounding whitespace is ignored (llama.cpp keeps the reasoning's trailing whitespace in tags)
    assert echo_run("\nPlan.", ("reasoning", " Plan.\n"), ("content", "Done")) == [("content", "Done")]
    assert echo_run("Plan.\n\n", ("reasoning", "Plan."), ("content", "Done")) == [("content", "Done")]
    # at the end of the answer (or a tool call, a finish) as at the content
    assert echo_run("a <b", ("reasoning", "a "), ("reasoning", "<b")) == []


def test_tagged_reasoning_that_differs_goes_out_all_of_it_at_once() -> None:
    echo = ReasoningEcho()
    echo.fields("Spell it out.")
    assert echo.filter([("reasoning", "Spell")]) == []
    assert echo.filter([("reasoning", " it")]) == []
    assert echo.filter([("reasoning", " now")]) == [("reasoning", "Spell it now")]  # differs: out at once
    assert echo.filter([("reasoning", ".")]) == [("reasoning", ".")]  # and the rest as it comes
    assert echo.filter([("content", "x")]) == [("content", "x")]
    assert echo.filter([("reasoning", "Spell")]) == [("reasoning", "Spell")]  # a new phase, no fields in it


def test_tagged_reasoning_shorter_than_the_fields_goes_out_when_the_content_begins() -> None:
    assert echo_run("Plan. More.", ("reasoning", "Plan."), end=False) == []
    assert echo_run("Plan. More.", ("reasoning", "Plan."), ("content", "\n"), ("content", "Done"), end=False) == [
        ("content", "\n"),  # whitespace only: not yet the content
        ("reasoning", "Plan."),
        ("content", "Done"),
    ]
    assert echo_run("Plan. More.", ("reasoning", "Plan.")) == [("reasoning", "Plan.")]
    assert echo_run("Plan.", ("reasoning", "  ")) == [("reasoning", "  ")]  # whitespace is not "Plan."


def test_what_is_held_is_never_longer_than_the_fields_but_for_whitespace() -> None:
    echo = ReasoningEcho()
    echo.fields("ab")
    assert echo.filter([("reasoning", "\n a")]) == []
    assert echo.filter([("reasoning", "b \n")]) == []
    assert echo.filter([("reasoning", "c")]) == [("reasoning", "\n ab \nc")]  # ran past the fields
    echo = ReasoningEcho()
    echo.fields("a")
    assert echo.filter([("reasoning", "a b")]) == [("reasoning", "a b")]
    echo.fields("a b")  # fields after the tagged text are not compared with it
    assert echo.settle() == []


def test_without_fields_tagged_reasoning_passes_and_fields_come_in_any_pieces() -> None:
    echo = ReasoningEcho()
    pieces: list[Piece] = [("reasoning", "x"), ("content", "y")]
    assert echo.filter(pieces) is pieces
    assert not echo.active
    for part in ("  ", "Sp", "el", "l"):
        echo.fields(part)
    assert echo.active
    assert echo.filter([("reasoning", "S"), ("reasoning", "pe")]) == []
    assert echo.filter([("reasoning", "ll"), ("tool_call", "f"), ("tool_arguments", "{}")]) == [
        ("tool_call", "f"),
        ("tool_arguments", "{}"),
    ]
    assert not echo.active


def test_a_buffered_message_drops_the_echo_by_the_same_rule() -> None:
    think = ThinkTags()
    assert think.split_message("<think>R</think>Answer", fields="R") == SplitText("", "Answer")
    assert think.split_message("<think>\nR\n</think>\n\nAnswer", fields=" R") == SplitText("", "Answer")
    assert think.split_message("<think>tagged</think>answer", fields="own") == SplitText("tagged", "answer")
    assert think.split_message("R</think>Answer", fields="R") == SplitText("", "Answer")  # the switch's tail
    assert think.split_message(" more.</think>Answer", fields="Let me think") == SplitText(" more.", "Answer")


# --- gpt-oss harmony -----------------------------------------------------------------------------------------


def test_harmony_channels() -> None:
    text = "<|channel|>analysis<|message|>Simple sum.<|end|><|start|>assistant<|channel|>final<|message|>four"
    expected = [("reasoning", "Simple sum."), ("content", "four")]
    for i in range(len(text) + 1):
        for j in range(i, len(text) + 1, 7):
            assert run(text[:i], text[i:j], text[j:], lookahead_chars=0) == expected, (i, j)
    assert ThinkTags().split_message(text + "<|return|>") == SplitText("Simple sum.", "four")


def test_harmony_tool_call() -> None:
    text = (
        "<|channel|>analysis<|message|>Need the weather.<|end|>"
        '<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Lisbon"}'
        "<|call|>"
    )
    expected = [
        ("reasoning", "Need the weather."),
        ("tool_call", "get_weather"),
        ("tool_arguments", '{"city":"Lisbon"}'),
    ]
    for i in range(len(text) + 1):
        assert run(text[:i], text[i:], lookahead_chars=0) == expected, i
    split = ThinkTags().split_message(text)
    assert split == SplitText("Need the weather.", "", (("get_weather", '{"city":"Lisbon"}'),))


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("<|channel|>analysis", ("reasoning", "")),
        ("assistant<|channel|>final", ("content", "")),
        ("assistant<|channel|>commentary", ("content", "")),  # a preamble is shown
        ("assistant", ("content", "")),
        ("assistant<|channel|>commentary to=functions.get_weather <|constrain|>json", ("tool_call", "get_weather")),
        ("assistant to=functions.lookup<|channel|>commentary<|constrain|>json", ("tool_call", "lookup")),
        ("<|channel|>commentary to=functions.f<|constrain|>json", ("tool_call", "f")),
        ("assistant<|channel|>analysis to=browser.search code", ("reasoning", "")),
        ("<|channel|>commentary to=assistant", ("content", "")),
    ],
)
def test_harmony_header(header: str, expected: tuple[str, str]) -> None:
    assert harmony_header(header) == expected


def test_a_harmony_preamble_and_two_tool_calls() -> None:
    text = (
        "<|channel|>commentary<|message|>Checking both.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.a<|message|>{}<|call|>"
        "<|start|>assistant<|channel|>commentary to=functions.b<|message|>{}<|call|>"
    )
    assert run(text, lookahead_chars=0) == [
        ("content", "Checking both."),
        ("tool_call", "a"),
        ("tool_arguments", "{}"),
        ("tool_call", "b"),
        ("tool_arguments", "{}"),
    ]


def test_a_long_text_after_a_harmony_marker_was_no_header() -> None:
    text = "<|start|>" + "x" * (HARMONY_HEADER_CHARS + 1) + "<|message|>y"
    assert run(text, lookahead_chars=0) == [("content", "x" * (HARMONY_HEADER_CHARS + 1) + "y")]
    assert run(text[:200], text[200:], lookahead_chars=0) == run(text, lookahead_chars=0)
    # and at the end of the answer, with no marker after it
    text = "<|start|>" + "x" * (HARMONY_HEADER_CHARS + 1)
    assert run(text, lookahead_chars=0) == [("content", "x" * (HARMONY_HEADER_CHARS + 1))]


def test_stray_harmony_markers_in_content_are_dropped_and_a_cut_header_is_markup() -> None:
    assert run("a<|end|>b<|return|>c", lookahead_chars=0) == [("content", "abc")]
    assert run("a<|start|>assistant<|chan", lookahead_chars=0) == [("content", "a")]


def test_harmony_off_leaves_the_markers() -> None:
    text = "<|channel|>final<|message|>four"
    assert run(text, lookahead_chars=0, harmony=False) == [("content", text)]


# --- any split -----------------------------------------------------------------------------------------------

SAMPLES = [
    "<think>\nCheck units.\n</think>\n\nDone.",
    "Intro <thinking>plan ◁ < </thi</thinking> answer <|begin_of_thought|>x<|end_of_thought|>y",
    "reasoning first, no opening tag.</reasoning>content ◁think▷r2◁/think▷ é😀 <",
    "no tags at all < <th </ ◁",
    "<think>Outer <think>inner</think> tail</think>\n\n\nEnd",
    "<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>final<|message|>b<|return|>",
    "\n\n<think>\n \n</think>\n<think>\nx</think>",
]


@pytest.mark.parametrize("text", SAMPLES)
@pytest.mark.parametrize(
    "options",
    [{}, {"start_in_reasoning": True}, {"lookahead_chars": 0}, {"lookahead_chars": 0, "fields": True}],
    ids=repr,
)
def test_split_at_every_character(text: str, options: Options) -> None:
    whole = run(text, **options)
    assert whole == reference(text, **options)  # type: ignore[arg-type]
    for i in range(len(text) + 1):
        for j in (i, (i + len(text)) // 2, len(text)):
            if j >= i:
                pieces = run(text[:i], text[i:j], text[j:], **options)
                assert pieces == whole, (i, j)


_PIECES = st.sampled_from(
    [
        *(tag for family in TAG_FAMILIES for tag in family),
        *H_MARKERS,
        "analysis",
        "final",
        "commentary",
        " to=functions.f",
        " to=browser.search",
        "<|constrain|>json",
        "<",
        "</",
        "<th",
        "<|",
        "|>",
        "think",
        "ing",
        ">",
        "|",
        "◁",
        "▷",
        "/",
        "a",
        "b c",
        " ",
        "\n",
        "\n\n",
        "\t",
        "é",
        "😀",
    ]
)


_TEXT = st.text(alphabet="ab <\n\t", max_size=6)
_SHAPES = st.one_of(
    _PIECES,
    st.builds(  # a whole block, newlines after it
        lambda family, text, newlines: family[0] + text + family[1] + "\n" * newlines,
        st.sampled_from(TAG_FAMILIES),
        _TEXT,
        st.integers(0, 3),
    ),
    st.builds(  # a block that quotes a block of its family
        lambda family, outer, inner, newlines: (
            family[0] + outer + family[0] + inner + family[1] + outer + family[1] + "\n" * newlines
        ),
        st.sampled_from(TAG_FAMILIES),
        _TEXT,
        _TEXT,
        st.integers(0, 3),
    ),
    st.builds(  # reasoning that only the closing tag ends
        lambda text, close, newlines: text + close + "\n" * newlines,
        _TEXT,
        st.sampled_from(sorted(CLOSES)),
        st.integers(0, 3),
    ),
    st.builds(  # a harmony message
        lambda header, text, end: header + "<|message|>" + text + end,
        st.sampled_from(
            [
                "<|channel|>analysis",
                "<|start|>assistant<|channel|>final",
                "<|start|>assistant<|channel|>commentary",
                "<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json",
            ]
        ),
        _TEXT,
        st.sampled_from([*H_ENDS, ""]),
    ),
    st.text(alphabet=" \n\t", min_size=1, max_size=4),
)

_OPTIONS = st.fixed_dictionaries(
    {
        "start": st.sampled_from(["content", "reasoning", "auto", "auto-small"]),
        "fields": st.booleans(),
        "switch_chars": st.sampled_from([0, 3, 10, DEFAULT_SWITCH_CHARS]),
    }
)


def _options(drawn: dict[str, object]) -> Options:
    start = drawn["start"]
    return {
        "start_in_reasoning": start == "reasoning",
        "lookahead_chars": {"content": 0, "reasoning": 0, "auto": 1000, "auto-small": 6}[str(start)],
        "switch_chars": int(drawn["switch_chars"]),  # type: ignore[call-overload]
        "fields": bool(drawn["fields"]),
    }


@settings(max_examples=300, deadline=None)
@given(shapes=st.lists(_SHAPES, max_size=8), drawn=_OPTIONS)
def test_every_cut_of_a_shaped_text_gives_the_same_pieces(shapes: list[str], drawn: dict[str, object]) -> None:
    text = "".join(shapes)
    options = _options(drawn)
    whole = run(text, **options)
    assert whole == reference(text, **options)  # type: ignore[arg-type]
    for i in range(len(text) + 1):
        assert run(text[:i], text[i:], **options) == whole, i


@settings(max_examples=400, deadline=None)
@given(
    pieces=st.lists(_SHAPES, max_size=40),
    cuts=st.lists(st.integers(0, 400), max_size=12),
    start=st.sampled_from(["content", "reasoning", "auto", "auto-small"]),
    fields=st.booleans(),
    switch_chars=st.sampled_from([0, 3, 10, DEFAULT_SWITCH_CHARS]),
)
def test_any_chunking_gives_the_same_pieces(
    pieces: list[str], cuts: list[int], start: str, fields: bool, switch_chars: int
) -> None:
    """Every shape (tags, nesting, whitespace, the auto and switch bounds, harmony channels and tool calls)
    under any split of the text gives the reference's pieces."""
    text = "".join(pieces)
    options: Options = {
        "start_in_reasoning": start == "reasoning",
        "lookahead_chars": {"content": 0, "reasoning": 0, "auto": 1000, "auto-small": 6}[start],
        "switch_chars": switch_chars,
        "fields": fields,
    }
    bounds = [0, *sorted(min(c, len(text)) for c in cuts), len(text)]
    chunks = [text[a:b] for a, b in pairwise(bounds)]
    whole = run(text, **options)
    assert whole == reference(text, **options)  # type: ignore[arg-type]
    assert run(*chunks, **options) == whole


def test_long_text_scans_fast() -> None:
    text = ("x" * 999 + "\n") * 2000
    splitter = ThinkSplitter(start_in_reasoning=True)
    out = [p for i in range(0, len(text), 3) for p in splitter.feed(text[i : i + 3])] + splitter.flush()
    assert joined(out, "reasoning") == text
    many = "<a " * 20000  # a trigger character everywhere, and no tag
    splitter = ThinkSplitter(lookahead_chars=0)
    assert joined(splitter.feed(many) + splitter.flush(), "content") == many


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
    assert content.startswith("<think>\n")
    head, _, tail = content[len("<think>\n") :].partition("</think>")
    assert merge(pieces) == [("reasoning", head), ("content", tail.removeprefix("\n\n"))]
    assert ThinkTags().split_message(content) == SplitText(head, tail.removeprefix("\n\n"))


@pytest.mark.parametrize(
    "name", ["groq-deepseek-r1-distill-raw-think-tags.buffered.json", "together-deepseek-r1-think-tags.buffered.json"]
)
def test_recorded_buffered_content(shared_dir: Path, name: str) -> None:
    body = json.loads((shared_dir / "fixtures" / "think-tags" / name).read_text())
    content = body["choices"][0]["message"]["content"]
    pieces = run(content)
    assert [kind for kind, _ in pieces] == ["reasoning", "content"]
    assert content.startswith("<think>\n" + pieces[0][1] + "</think>\n")
    assert content.endswith(pieces[1][1])


def test_a_header_past_its_bound_is_content_from_its_bound_on_however_the_feeds_are_cut() -> None:
    """Text after a harmony marker stops being a header at the character past ``HARMONY_HEADER_CHARS``; from there
    it is read as content (a tag in it is a tag), the same in one feed and cut anywhere."""
    text = "<|channel|>" + "x" * 300 + "<think>"
    expected = [("content", "x" * 300)]  # the header's text, markers dropped; the trailing <think> opens nothing
    assert run(text, lookahead_chars=0) == expected
    assert run(text[:-7], text[-7:], lookahead_chars=0) == expected
    assert run(*text, lookahead_chars=0) == expected  # one character per feed


def test_a_partial_tag_at_the_end_that_takes_a_header_past_its_bound_is_content() -> None:
    """A stream that ends inside a tag (``<|mess``) after a header of 254 characters: those characters take the
    header past its bound, so it was no header and its text, the partial tag included, is content."""
    text = "<|start|>" + "x" * 254 + "<|mess"
    expected = [("content", "x" * 254 + "<|mess")]
    assert reference(text, lookahead_chars=0, switch_chars=0) == expected
    assert run(text, lookahead_chars=0) == expected
    assert run(text[:-3], text[-3:], lookahead_chars=0) == expected
    short = "<|start|>" + "x" * 100 + "<|mess"  # within the bound: an unfinished header, dropped
    assert run(short, lookahead_chars=0) == [] == reference(short, lookahead_chars=0, switch_chars=0)
