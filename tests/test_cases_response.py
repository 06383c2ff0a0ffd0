"""Handed cases from ``../shared/cases/public-bugs.json`` with direction ``stream`` or ``response``.

PB-06 feeds Anthropic Messages SSE events; it needs the Anthropic Messages adapter, which is not built yet.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from numi_mw.core.details import rebuild_reasoning_details
from numi_mw.core.providers import provider_rules
from numi_mw.core.request import prepare_request
from numi_mw.core.think import ThinkTags
from tests.conftest import load_case
from tests.response_support import client_view, rewrite, rewrite_json, sse_chunks


def stream_of(chunks: list[dict[str, Any]]) -> bytes:
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


def buffered_from(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """What a client that buffers the normalized stream stores: reasoning, rebuilt details, content."""
    view = client_view(chunks)
    return {
        "message.reasoning": view.reasoning,
        "message.reasoning_details": rebuild_reasoning_details(view.entries),
        "message.content": view.content,
    }


def without_index(details: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in d.items() if k != "index"} for d in details]


def test_pb01_reasoning_is_not_doubled(shared_dir: Path) -> None:
    case = load_case(shared_dir, "PB-01")
    expected = case["expected"]["client_stream"]
    chunks = sse_chunks(rewrite(stream_of(case["input"])))
    view = client_view(chunks)
    assert view.reasoning == expected["concat_delta_reasoning"]
    assert view.content == expected["concat_delta_content"]
    assert view.finish_reason == expected["finish_reason"]
    for delta in view.chunks_with_reasoning:
        entries = [e for e in delta["reasoning_details"] if e["type"] == "reasoning.text"]
        assert len(entries) == 1
        assert entries[0]["text"] == delta["reasoning"]
        assert json.dumps(delta).count(json.dumps(delta["reasoning"])) == 2
    # The rebuilt details carry the index numi_mw streams (the position of the detail); the rest is the case's.
    assert without_index(rebuild_reasoning_details(view.entries)) == expected["rebuilt_reasoning_details"]
    assert view.sdk_message["reasoning_details"] == rebuild_reasoning_details(view.entries)
    assert view.sdk2_message["reasoning_details"] == rebuild_reasoning_details(view.entries)
    buffered = case["expected"]["if_proxy_buffers_for_non_streaming_client"]
    stored = buffered_from(chunks)
    assert stored["message.reasoning"] == buffered["message.reasoning"]
    assert without_index(stored["message.reasoning_details"]) == buffered["message.reasoning_details"]
    assert stored["message.content"] == buffered["message.content"]


def test_pb03_signature_only_fragment_survives(shared_dir: Path) -> None:
    case = load_case(shared_dir, "PB-03")
    expected = case["expected"]["client_stream"]
    view = client_view(sse_chunks(rewrite(stream_of(case["input"]))))
    signature_entries = [e for e in view.entries if "signature" in e]
    assert [without_index([e])[0] for e in signature_entries] == [expected["must_contain_detail_entry"]]
    assert "text" not in signature_entries[0]
    assert view.reasoning == expected["concat_delta_reasoning"]
    assert view.content == expected["concat_delta_content"]
    rebuilt = rebuild_reasoning_details(view.entries)
    assert without_index(rebuilt) == expected["rebuilt_reasoning_details"]
    assert rebuilt[0]["index"] == 0
    assert view.sdk_message["reasoning_details"] == rebuilt
    assert view.sdk2_message["reasoning_details"] == rebuilt


@pytest.mark.parametrize("cut", range(1, 40))
def test_pb12_think_tag_split_across_chunks(shared_dir: Path, cut: int) -> None:
    case = load_case(shared_dir, "PB-12")
    expected = case["expected"]["client_stream"]
    body = stream_of(case["input"])
    out = rewrite(body, think=ThinkTags(), cuts=(cut * 7 % len(body),))
    chunks = sse_chunks(out)
    view = client_view(chunks)
    assert view.reasoning == expected["concat_delta_reasoning"]
    assert view.content == expected["concat_delta_content"]
    assert view.finish_reason == expected["finish_reason"]
    for chunk in chunks:
        content = chunk["choices"][0]["delta"].get("content") or ""
        for fragment in expected["no_delta_content_contains_any_of"]:
            assert fragment not in content
    rebuilt = rebuild_reasoning_details(view.entries)
    assert [d["text"] for d in rebuilt] == [expected["rebuilt_reasoning_text"]]


def test_pb12_through_the_local_provider_default(shared_dir: Path) -> None:
    case = load_case(shared_dir, "PB-12")
    prepared = prepare_request(b'{"model": "m", "stream": true}', provider_rules("local"))
    assert prepared.controls.exclude is False
    view = client_view(sse_chunks(rewrite(stream_of(case["input"]), think=ThinkTags())))
    assert (view.reasoning, view.content) == ("Check units.", "Done.")


def test_pb16_include_reasoning_false_hides_reasoning(shared_dir: Path) -> None:
    case = load_case(shared_dir, "PB-16")
    request = case["input"]["request"]
    prepared = prepare_request(json.dumps(request).encode(), provider_rules("local"))
    assert json.loads(prepared.body)["reasoning_effort"] == "high"
    out = json.loads(
        rewrite_json(json.dumps(case["input"]["upstream_response"]).encode(), exclude=prepared.controls.exclude)
    )
    expected = case["expected"]
    assert out["choices"][0]["message"] == expected["client_response.choices[0].message"]
    for key in expected["absent_keys_in_message"]:
        assert key not in out["choices"][0]["message"]
    assert out["usage"] == expected["client_response.usage"]


@pytest.mark.parametrize("field", ["reasoning", "reasoning_content"])
def test_pb23_either_field_name_gives_the_same_stream(shared_dir: Path, field: str) -> None:
    case = load_case(shared_dir, "PB-23")
    expected = case["expected"]["client_stream"]
    chunks = json.loads(json.dumps(case["input"]).replace('"reasoning"', f'"{field}"'))
    out = sse_chunks(rewrite(stream_of(chunks)))
    view = client_view(out)
    assert view.reasoning == expected["concat_delta_reasoning"]
    assert view.content == expected["concat_delta_content"]
    assert view.finish_reason == expected["finish_reason"]
    assert len(view.chunks_with_reasoning) == 2
    for delta in view.chunks_with_reasoning:
        assert [e["text"] for e in delta["reasoning_details"]] == [delta["reasoning"]]
        assert "reasoning_content" not in delta
    if field == "reasoning_content":
        assert out == sse_chunks(rewrite(stream_of(case["input"])))
