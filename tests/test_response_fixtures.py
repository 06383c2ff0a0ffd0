"""Every recorded stream and body in ``shared/fixtures/openai-chat`` and ``shared/fixtures/think-tags`` through
the response side: the client's reasoning and content equal the source's, every signature and encrypted blob
survives byte for byte, the openai SDK's accumulation equals the spec's rebuild, and any split of the first
kilobyte gives the same bytes."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from numi_mw.core.details import rebuild_reasoning_details, visible_text
from numi_mw.core.think import ThinkTags
from tests.conftest import SHARED, recordings
from tests.e2e_support import numi_mw_command
from tests.response_support import client_view, frame_jsonl, rewrite, rewrite_by_event, rewrite_json, sse_chunks

CHAT = SHARED / "fixtures" / "openai-chat"
TAGS = SHARED / "fixtures" / "think-tags"


def stream_bytes(path: Path) -> bytes:
    raw = path.read_bytes()
    return frame_jsonl(raw) if path.name.endswith(".jsonl") else raw


def source_text(chunks: list[dict[str, Any]]) -> tuple[str, str, list[Any]]:
    """Reasoning, content and detail fragments as the upstream sent them (choice 0)."""
    reasoning = content = ""
    fragments: list[Any] = []
    for chunk in chunks:
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            details = delta.get("reasoning_details") or []
            fragments.extend(details)
            for value in (delta.get("reasoning"), delta.get("reasoning_content"), visible_text(details)):
                if isinstance(value, str) and value:
                    reasoning += value
                    break
            if isinstance(delta.get("content"), str):
                content += delta["content"]
    return reasoning, content, fragments


def opaque_values(fragments: list[Any]) -> list[str]:
    """The signatures and encrypted data of ``fragments``; an empty signature signs nothing (OpenRouter's
    placeholder that opens a thinking block) and is not one."""
    return [
        f[k]
        for f in fragments
        if isinstance(f, dict)
        for k in ("signature", "data")
        if isinstance(f.get(k), str) and f[k]
    ]


def check_client_stream(out: bytes, reasoning: str, content: str, fragments: list[Any]) -> list[dict[str, Any]]:
    chunks = sse_chunks(out)
    view = client_view(chunks)
    assert view.reasoning == reasoning
    assert view.content == content
    for delta in view.chunks_with_reasoning:
        texts = [
            e.get("text") if e.get("type") == "reasoning.text" else e.get("summary")
            for e in delta["reasoning_details"]
            if e.get("type") in ("reasoning.text", "reasoning.summary") and (e.get("text") or e.get("summary"))
        ]
        assert "".join(texts) == delta["reasoning"]
    assert all(isinstance(entry.get("index"), int) for entry in view.entries)
    rebuilt = rebuild_reasoning_details(view.entries)
    assert view.sdk_message.get("reasoning_details", []) == rebuilt
    assert view.sdk2_message.get("reasoning_details", []) == rebuilt
    assert visible_text(rebuilt) == reasoning
    kept = opaque_values(rebuilt)
    for value in opaque_values(fragments):
        assert value in kept
    assert all(d.get("signature") != "" for d in rebuilt)  # no detail signed with nothing
    return rebuilt


@pytest.mark.parametrize("name", recordings(CHAT, ".sse", ".jsonl"))
def test_recorded_stream(shared_dir: Path, name: str) -> None:
    body = stream_bytes(CHAT / name)
    reasoning, content, fragments = source_text(sse_chunks(body))
    out = rewrite(body)
    check_client_stream(out, reasoning, content, fragments)
    assert rewrite_by_event(body) == out
    assert rewrite_by_event(body, exclude=True) == rewrite(body, exclude=True)
    assert rewrite_by_event(body, think=ThinkTags()) == rewrite(body, think=ThinkTags())
    for cut in range(1, min(len(body), 1024)):
        assert rewrite(body, cuts=(cut,)) == out, f"split at byte {cut}"


@pytest.mark.parametrize("name", recordings(CHAT, ".sse", ".jsonl"))
def test_recorded_stream_excluded(shared_dir: Path, name: str) -> None:
    body = stream_bytes(CHAT / name)
    _, content, _ = source_text(sse_chunks(body))
    chunks = sse_chunks(rewrite(body, exclude=True))
    view = client_view(chunks)
    assert view.content == content
    assert view.reasoning == ""
    assert view.entries == []
    for chunk in chunks:
        for choice in chunk.get("choices") or []:
            assert not {"reasoning", "reasoning_content", "reasoning_details"} & set(choice.get("delta") or {})
            assert choice["delta"] or choice.get("finish_reason") is not None or chunk.get("usage")


@pytest.mark.parametrize("name", recordings(CHAT, ".json"))
def test_recorded_body(shared_dir: Path, name: str) -> None:
    raw = (CHAT / name).read_bytes()
    source = json.loads(raw)["choices"][0]["message"]
    message = json.loads(rewrite_json(raw))["choices"][0]["message"]
    reasoning = next(
        (v for v in (source.get("reasoning"), source.get("reasoning_content")) if isinstance(v, str) and v),
        visible_text(source.get("reasoning_details") or []),
    )
    assert "reasoning_content" not in message
    assert message.get("content") == source.get("content")
    assert message.get("tool_calls") == source.get("tool_calls")
    if source.get("reasoning_details"):
        assert message["reasoning_details"] == source["reasoning_details"]
        assert message["reasoning"] == reasoning
    elif reasoning:
        assert message["reasoning"] == reasoning
        assert message["reasoning_details"] == [{"type": "reasoning.text", "text": reasoning, "format": "unknown"}]
    excluded = json.loads(rewrite_json(raw, exclude=True))
    assert not {"reasoning", "reasoning_content", "reasoning_details"} & set(excluded["choices"][0]["message"])
    assert excluded["choices"][0]["message"]["content"] == source.get("content")
    assert excluded.get("usage") == json.loads(raw).get("usage")


THINK = re.compile(r"(?s)^(.*?)<think>(.*?)</think>(.*)$")


def expected_split(text: str) -> tuple[str, str]:
    """Reasoning and content as llama.cpp's parser splits them: one "\n" after the opening tag and up to two
    after the closing tag are markup (``docs/streaming.md``, "Think tags")."""
    match = THINK.match(text)
    assert match is not None
    before, reasoning, after = match.groups()
    newlines = len(after) - len(after.lstrip("\n"))
    return reasoning.removeprefix("\n"), before + after[min(newlines, 2) :]


def bedrock_as_chat(raw: bytes) -> bytes:
    """The Bedrock ConverseStream fixture's text deltas as OpenAI chat chunks (the tags are what is tested)."""
    chunks = []
    for line in raw.splitlines():
        event = json.loads(line)
        delta = event.get("contentBlockDelta", {}).get("delta", {})
        if "text" in delta:
            chunks.append({"choices": [{"index": 0, "delta": {"content": delta["text"]}, "finish_reason": None}]})
        if "messageStop" in event:
            chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


@pytest.mark.parametrize("name", recordings(TAGS, ".sse", ".jsonl"))
def test_recorded_think_tag_stream(shared_dir: Path, name: str) -> None:
    raw = (TAGS / name).read_bytes()
    body = bedrock_as_chat(raw) if name.endswith(".jsonl") else raw
    _, tagged, _ = source_text(sse_chunks(body))
    reasoning, content = expected_split(tagged)
    out = rewrite(body, think=ThinkTags())
    rebuilt = check_client_stream(out, reasoning, content, [])
    assert rebuilt == [{"type": "reasoning.text", "text": reasoning, "format": "unknown", "index": 0}]
    assert rewrite_by_event(body, think=ThinkTags()) == out
    assert rewrite_by_event(body, think=ThinkTags(), exclude=True) == rewrite(body, think=ThinkTags(), exclude=True)
    for chunk in sse_chunks(out):
        for choice in chunk["choices"]:
            assert "<think>" not in (choice["delta"].get("content") or "")
            assert "</think>" not in (choice["delta"].get("content") or "")
    for cut in range(1, min(len(body), 1024)):
        assert rewrite(body, think=ThinkTags(), cuts=(cut,)) == out, f"split at byte {cut}"
    excluded = client_view(sse_chunks(rewrite(body, think=ThinkTags(), exclude=True)))
    assert (excluded.reasoning, excluded.content, excluded.entries) == ("", content, [])


@pytest.mark.parametrize("name", recordings(TAGS, ".json"))
def test_recorded_think_tag_body(shared_dir: Path, name: str) -> None:
    raw = (TAGS / name).read_bytes()
    reasoning, content = expected_split(json.loads(raw)["choices"][0]["message"]["content"])
    message = json.loads(rewrite_json(raw, think=ThinkTags()))["choices"][0]["message"]
    assert message["content"] == content
    assert message["reasoning"] == reasoning
    assert message["reasoning_details"] == [{"type": "reasoning.text", "text": reasoning, "format": "unknown"}]


@pytest.mark.parametrize("name", [*recordings(CHAT, ".sse", ".jsonl", ".json"), *recordings(TAGS, ".sse", ".json")])
def test_numi_mw_response_prints_what_the_core_gives(shared_dir: Path, name: str, tmp_path: Path) -> None:
    """``numi-mw response`` on every recorded file writes exactly the bytes the shells send."""
    folder, provider, think = (TAGS, "local", ThinkTags()) if (TAGS / name).exists() else (CHAT, "openrouter", None)
    body = stream_bytes(folder / name) if not name.endswith(".json") else (folder / name).read_bytes()
    request = tmp_path / "request.json"
    request.write_text('{"model": "m"}')
    result = subprocess.run(
        [*numi_mw_command(), "response", "--request", str(request), "--provider", provider],
        input=body,
        capture_output=True,
        timeout=60,
        check=True,
    )
    expected = rewrite_json(body, think=think) if name.endswith(".json") else rewrite(body, think=think)
    assert result.stdout == expected
