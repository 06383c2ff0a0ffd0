"""Reasoning details (``numi_mw.core.details``): spec 004 "Reasoning detail" limits and "From a stream" rebuild."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numi_mw.core.details import (
    MAX_DATA_BYTES,
    MAX_SIGNATURE_BYTES,
    MAX_TEXT_BYTES,
    DetailsRebuilder,
    check_detail_limits,
    rebuild_reasoning_details,
    utf8_size_exceeds,
)
from numi_mw.core.errors import ApiError
from numi_mw.core.sse import SSEDecoder
from tests.conftest import load_case

TEXT = "reasoning.text"
CLAUDE = "anthropic-claude-v1"


def rebuild(fragments: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rebuild_reasoning_details`` that also asserts the fragments are left unchanged."""
    before = copy.deepcopy(fragments)
    merged = rebuild_reasoning_details(fragments)
    assert fragments == before
    assert all(m is not f for m in merged for f in fragments)
    return merged


# --- rule 1: text without signature extends an unsigned reasoning.text ---------------------------------------


def test_spec_stream_example() -> None:
    fragments = [{"type": TEXT, "text": "Spell it out: "}, {"type": TEXT, "text": "s, t, r, a, w, b, e, r, r, y."}]
    assert rebuild(fragments) == [{"type": TEXT, "text": "Spell it out: s, t, r, a, w, b, e, r, r, y."}]


def test_rule_1_extends_previous_unsigned_text() -> None:
    fragments = [
        {"type": TEXT, "text": "a", "format": CLAUDE, "index": 0},
        {"type": TEXT, "text": "b", "format": "other", "index": 5, "id": "x"},
    ]
    # Only the text grows; the first fragment's other fields stay.
    assert rebuild(fragments) == [{"type": TEXT, "text": "ab", "format": CLAUDE, "index": 0}]


def test_rule_1_starts_new_detail_after_signed_or_other_type() -> None:
    fragments = [
        {"type": TEXT, "text": "a", "signature": "S1"},
        {"type": TEXT, "text": "b"},
        {"type": "reasoning.encrypted", "data": "E"},
        {"type": TEXT, "text": "c"},
        {"type": TEXT, "text": "d"},
    ]
    assert rebuild(fragments) == [
        {"type": TEXT, "text": "a", "signature": "S1"},
        {"type": TEXT, "text": "b"},
        {"type": "reasoning.encrypted", "data": "E"},
        {"type": TEXT, "text": "cd"},
    ]


def test_rule_1_first_fragment_starts_a_detail() -> None:
    assert rebuild([{"type": TEXT, "text": "only"}]) == [{"type": TEXT, "text": "only"}]
    assert rebuild([]) == []


# --- rule 2: signature without text completes the most recent unsigned reasoning.text ------------------------


def test_rule_2_signature_only_completes_text() -> None:
    fragments = [
        {"type": TEXT, "text": "Spell it out: "},
        {"type": TEXT, "text": "s, t, r."},
        {"type": TEXT, "signature": "SIG_A", "format": CLAUDE},
    ]
    assert rebuild(fragments) == [
        {"type": TEXT, "text": "Spell it out: s, t, r.", "signature": "SIG_A", "format": CLAUDE}
    ]


def test_rule_2_completes_most_recent_unsigned_even_if_not_last() -> None:
    fragments: list[dict[str, Any]] = [
        {"type": TEXT, "text": "a"},
        {"type": "reasoning.encrypted", "data": "E"},
        {"type": TEXT, "signature": "S", "id": "rs_1", "index": 0, "extra": 1},
    ]
    # Only signature, id, format and index are filled in; other keys of the fragment are not copied.
    assert rebuild(fragments) == [
        {"type": TEXT, "text": "a", "signature": "S", "id": "rs_1", "index": 0},
        {"type": "reasoning.encrypted", "data": "E"},
    ]


def test_rule_2_fills_only_missing_fields() -> None:
    fragments = [
        {"type": TEXT, "text": "a", "id": "keep", "index": 0},
        {"type": TEXT, "signature": "S", "id": "other", "index": 3, "format": CLAUDE},
    ]
    assert rebuild(fragments) == [
        {"type": TEXT, "text": "a", "id": "keep", "index": 0, "signature": "S", "format": CLAUDE}
    ]


def test_rule_2_without_unsigned_text_is_its_own_detail() -> None:
    fragments = [
        {"type": TEXT, "signature": "S0"},
        {"type": TEXT, "text": "a", "signature": "S1"},
        {"type": TEXT, "signature": "S2", "text": ""},
    ]
    assert rebuild(fragments) == [
        {"type": TEXT, "signature": "S0"},
        {"type": TEXT, "text": "a", "signature": "S1"},
        {"type": TEXT, "signature": "S2", "text": ""},
    ]


def test_rule_2_empty_signature_counts_as_signed() -> None:
    # The OpenRouter fragment {"text": "", "signature": ""} before any text is kept as its own detail.
    fragments = [{"type": TEXT, "text": "", "signature": "", "index": 0}, {"type": TEXT, "text": "a", "index": 0}]
    assert rebuild(fragments) == [
        {"type": TEXT, "text": "", "signature": "", "index": 0},
        {"type": TEXT, "text": "a", "index": 0},
    ]


# --- rule 3: neither text nor signature only fills missing fields -------------------------------------------


def test_rule_3_fills_missing_format() -> None:
    fragments: list[dict[str, Any]] = [
        {"type": TEXT, "text": "a"},
        {"type": TEXT, "text": "", "format": CLAUDE, "index": 0, "x": 1},
    ]
    assert rebuild(fragments) == [{"type": TEXT, "text": "a", "format": CLAUDE, "index": 0}]


def test_rule_3_targets_most_recent_text_even_if_signed() -> None:
    fragments = [
        {"type": TEXT, "text": "a", "signature": "S"},
        {"type": "reasoning.summary", "summary": "sum"},
        {"type": TEXT, "format": CLAUDE, "signature_extra": "no"},
    ]
    assert rebuild(fragments) == [
        {"type": TEXT, "text": "a", "signature": "S", "format": CLAUDE},
        {"type": "reasoning.summary", "summary": "sum"},
    ]


def test_rule_3_without_text_detail_is_dropped() -> None:
    assert rebuild([{"type": TEXT, "format": CLAUDE}, {"type": TEXT, "text": None}]) == []
    fragments = [{"type": "reasoning.encrypted", "data": "E"}, {"type": TEXT, "text": "", "format": CLAUDE}]
    assert rebuild(fragments) == [{"type": "reasoning.encrypted", "data": "E"}]


def test_rule_3_does_not_overwrite() -> None:
    fragments = [{"type": TEXT, "text": "a", "format": CLAUDE}, {"type": TEXT, "format": "unknown"}]
    assert rebuild(fragments) == [{"type": TEXT, "text": "a", "format": CLAUDE}]


# --- rule 4: every other fragment is its own detail ----------------------------------------------------------


def test_rule_4_other_types_and_signed_text_are_own_details() -> None:
    fragments: list[dict[str, Any]] = [
        {"type": "reasoning.summary", "summary": "s1", "index": 0},
        {"type": "reasoning.summary", "summary": "s2", "index": 0},
        {"type": "reasoning.encrypted", "data": "E", "id": "rs_1", "format": "openai-responses-v1"},
        {"type": "vendor.unknown", "blob": [1, 2]},
        {"type": TEXT, "text": "t", "signature": "S"},
        {"type": TEXT, "text": "u", "signature": "T"},
    ]
    assert rebuild(fragments) == fragments


def test_rule_4_missing_type_and_non_dict_entries_are_kept() -> None:
    fragments: list[Any] = [{"text": "x"}, "odd", {"type": TEXT, "text": "a"}, None]
    assert rebuild_reasoning_details(fragments) == [{"text": "x"}, "odd", {"type": TEXT, "text": "a"}, None]


def test_rebuild_does_not_share_nested_mutation_targets() -> None:
    first = {"type": TEXT, "text": "a"}
    merged = rebuild([first, {"type": TEXT, "signature": "S"}])
    assert first == {"type": TEXT, "text": "a"}
    assert merged == [{"type": TEXT, "text": "a", "signature": "S"}]


# --- handed cases and recorded streams -----------------------------------------------------------------------


_FRAGMENTS = st.lists(
    st.fixed_dictionaries(
        {"type": st.sampled_from([TEXT, "reasoning.summary", "reasoning.encrypted"])},
        optional={
            "text": st.sampled_from(["", "a", "b"]),
            "signature": st.sampled_from(["", "sig"]),
            "format": st.just(CLAUDE),
        },
    ),
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(fragments=_FRAGMENTS)
def test_open_text_is_the_last_unsigned_text_detail(fragments: list[dict[str, Any]]) -> None:
    rebuilder = DetailsRebuilder()
    for fragment in fragments:
        rebuilder.add(fragment)
        details = rebuilder.details
        last_open = bool(details) and details[-1].get("type") == TEXT and "signature" not in details[-1]
        assert rebuilder.open_text == (len(details) - 1 if last_open else -1)


def test_open_text_closes_when_rule_2_signs_the_last_detail() -> None:
    rebuilder = DetailsRebuilder()
    assert rebuilder.add({"type": TEXT, "text": "a"}) == ("new", 0)
    assert rebuilder.open_text == 0
    assert rebuilder.add({"type": TEXT, "text": "b"}) == ("extend", 0)
    assert rebuilder.add({"type": TEXT, "signature": "sig"}) == ("fill", 0)
    assert rebuilder.open_text == -1
    assert rebuilder.add({"type": TEXT, "text": "c"}) == ("new", 1)
    assert rebuilder.open_text == 1
    assert rebuilder.result() == [{"type": TEXT, "text": "ab", "signature": "sig"}, {"type": TEXT, "text": "c"}]


def test_case_pb_03_signature_only_delta(shared_dir: Path) -> None:
    case = load_case(shared_dir, "PB-03")
    fragments = [
        detail
        for chunk in case["input"]
        for choice in chunk["choices"][:1]
        for detail in choice["delta"].get("reasoning_details", [])
    ]
    assert rebuild(fragments) == case["expected"]["client_stream"]["rebuilt_reasoning_details"]


def test_case_pb_04_fragments_consolidated(shared_dir: Path) -> None:
    case = load_case(shared_dir, "PB-04")
    assert rebuild(case["input"]) == case["expected"]["rebuilt_reasoning_details"]


def _streamed_details(path: Path) -> list[dict[str, Any]]:
    decoder = SSEDecoder()
    events = decoder.feed(path.read_bytes()) + decoder.flush()
    return [
        detail
        for event in events
        if event.data is not None and not event.is_done
        for choice in json.loads(event.data).get("choices", [])
        for detail in (choice.get("delta") or {}).get("reasoning_details") or []
    ]


def test_recorded_openrouter_claude_stream(shared_dir: Path) -> None:
    fragments = _streamed_details(
        shared_dir / "fixtures" / "openai-chat" / "openrouter-claude-sonnet-4.5-reasoning-details.sse"
    )
    merged = rebuild(fragments)
    # The leading {"text": "", "signature": ""} fragment is a signed detail of its own (rule 2, no unsigned
    # text yet); the text fragments then merge and the signature-only fragment completes them.
    assert merged[0] == {"type": TEXT, "text": "", "signature": "", "format": CLAUDE, "index": 0}
    assert len(merged) == 2
    assert merged[1]["text"] == "This is a simple arithmetic question. 2+2 equals 4."
    assert merged[1]["signature"].startswith("Et0BCkgIChACGAIqQA2s")
    assert (merged[1]["format"], merged[1]["index"], merged[1]["type"]) == (CLAUDE, 0, TEXT)


def test_recorded_openrouter_o3_encrypted_stream(shared_dir: Path) -> None:
    fragments = _streamed_details(
        shared_dir / "fixtures" / "openai-chat" / "openrouter-o3-encrypted-reasoning-details.sse"
    )
    assert fragments
    assert rebuild(fragments) == fragments  # rule 4: encrypted details pass as they are


# --- limits --------------------------------------------------------------------------------------------------


def _messages(field: str, value: Any, *, at: int = 1, detail_at: int = 0) -> list[Any]:
    details: list[Any] = [{"type": TEXT, "text": "fine"} for _ in range(detail_at)]
    details.append({"type": TEXT, field: value})
    return [{"role": "user", "content": "hi"}] * at + [{"role": "assistant", "reasoning_details": details}]


@pytest.mark.parametrize(
    ("field", "limit"),
    [
        ("text", MAX_TEXT_BYTES),
        ("summary", MAX_TEXT_BYTES),
        ("signature", MAX_SIGNATURE_BYTES),
        ("data", MAX_DATA_BYTES),
    ],
)
def test_limit_boundary_ascii(field: str, limit: int) -> None:
    check_detail_limits(_messages(field, "a" * limit))
    with pytest.raises(ApiError) as info:
        check_detail_limits(_messages(field, "a" * (limit + 1)))
    assert info.value.param == f"messages[1].reasoning_details[0].{field}"


@pytest.mark.parametrize(
    "value",
    ["é" * (MAX_SIGNATURE_BYTES // 2), "😀" * (MAX_SIGNATURE_BYTES // 4), "€" * (MAX_SIGNATURE_BYTES // 3) + "a"],
    ids=["2-byte", "4-byte", "3-byte"],
)
def test_limit_boundary_multibyte(value: str) -> None:
    assert len(value.encode()) == MAX_SIGNATURE_BYTES
    check_detail_limits(_messages("signature", value))
    with pytest.raises(ApiError):
        check_detail_limits(_messages("signature", value + "a"))
    # One character fewer but one byte more: the last character replaced by a wider one.
    wider = value[:-1] + {"é": "€", "😀": "😀a", "a": "é"}[value[-1]]
    assert len(wider.encode()) == MAX_SIGNATURE_BYTES + 1
    with pytest.raises(ApiError):
        check_detail_limits(_messages("signature", wider))


def test_limit_counts_bytes_not_characters() -> None:
    value = "é" * (MAX_SIGNATURE_BYTES // 2 + 1)  # fewer characters than the limit, more bytes
    assert len(value) < MAX_SIGNATURE_BYTES
    with pytest.raises(ApiError):
        check_detail_limits(_messages("signature", value))


def test_limit_error_body() -> None:
    with pytest.raises(ApiError) as info:
        check_detail_limits(_messages("signature", "s" * (MAX_SIGNATURE_BYTES + 1)))
    err = info.value
    assert (err.status, err.code) == (400, "invalid_request")
    body = err.body()
    assert body == {
        "error": {
            "message": body["error"]["message"],
            "type": "invalid_request_error",
            "code": "invalid_request",
            "param": "messages[1].reasoning_details[0].signature",
        }
    }
    assert body["error"]["param"] == "messages[1].reasoning_details[0].signature"
    assert "messages[1].reasoning_details[0].signature" in body["error"]["message"]
    assert "1 MiB" in body["error"]["message"]


def test_limit_error_path_names_indexes() -> None:
    with pytest.raises(ApiError) as info:
        check_detail_limits(_messages("text", "t" * (MAX_TEXT_BYTES + 1), at=3, detail_at=2))
    assert info.value.body()["error"]["param"] == "messages[3].reasoning_details[2].text"


def test_limit_first_field_over_wins() -> None:
    big_sig = "s" * (MAX_SIGNATURE_BYTES + 1)
    big_data = "d" * (MAX_DATA_BYTES + 1)
    messages = [{"reasoning_details": [{"type": "x", "data": big_data, "signature": big_sig}]}]
    with pytest.raises(ApiError) as info:
        check_detail_limits(messages)
    assert info.value.param == "messages[0].reasoning_details[0].signature"


def test_limits_ignore_other_shapes() -> None:
    huge = "x" * (MAX_DATA_BYTES + 1)
    check_detail_limits(
        [
            "not a message",
            {"role": "user", "content": huge},
            {"role": "assistant", "reasoning_details": "not a list"},
            {"role": "assistant", "reasoning_details": [huge, None, 3, ["text", huge]]},
            {"role": "assistant", "reasoning_details": [{"type": TEXT, "text": None, "signature": ["s"]}]},
            {"role": "assistant", "reasoning_details": [{"type": TEXT, "id": huge, "format": huge, "other": huge}]},
        ]
    )
    check_detail_limits([])


def test_utf8_size_exceeds() -> None:
    assert utf8_size_exceeds("", 0) is False
    assert utf8_size_exceeds("a", 0) is True
    assert utf8_size_exceeds("abc", 3) is False
    assert utf8_size_exceeds("abcd", 3) is True
    assert utf8_size_exceeds("é", 1) is True
    assert utf8_size_exceeds("😀" * 2, 8) is False
    assert utf8_size_exceeds("😀" * 2, 7) is True
    assert utf8_size_exceeds("\ud800", 3) is False  # lone surrogate: 3 bytes, no UnicodeEncodeError
    assert utf8_size_exceeds("\ud800", 2) is True


def test_a_stream_is_rebuilt_from_the_fragments_of_choice_zero_by_its_index() -> None:
    from numi_mw.core.accumulate import rebuild_from_body

    def event(*choices: tuple[int, str]) -> bytes:
        entries = [
            {"index": i, "delta": {"reasoning_details": [{"type": "reasoning.text", "text": t}]}} for i, t in choices
        ]
        return b"data: " + json.dumps({"choices": entries}).encode() + b"\n\n"

    body = event((1, "ONE"), (0, "ZERO")) + event((0, "-zero2"))
    assert rebuild_from_body(body) == [{"type": "reasoning.text", "text": "ZERO-zero2"}]


def test_fragments_are_read_from_what_the_sidecar_sends_nan_and_lone_surrogates_included() -> None:
    from numi_mw.core.accumulate import rebuild_from_body

    body = (
        b'data: {"choices":[{"index":0,"delta":{"reasoning_details":[{"type":"reasoning.text","text":"a\\ud83d"}]},'
        b'"logprobs":{"content":[{"logprob":-Infinity}]}}]}\n\n'
        b'data: {"choices":[{"index":false,"delta":{"reasoning_details":[{"type":"reasoning.text","text":"X"}]}}]}\n\n'
    )
    assert rebuild_from_body(body) == [{"type": "reasoning.text", "text": "a\ud83d"}]
