"""Smoke test: the scripted GGUF model (tests/llama_model.py) served by a real llama-server."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.llama_model import (
    CONTENT,
    RAW_CONTENT,
    SCRIPT,
    SERVER_REASONING,
    SPLIT_SCRIPT,
    llama_server_binary,
    missing_binary_reason,
    run_llama_server,
    write_model,
)

BINARY = llama_server_binary()

SKIP_REASON = missing_binary_reason(BINARY)

MESSAGES = [{"role": "user", "content": "How many r's are in strawberry?"}]
TIMEOUT = httpx.Timeout(30.0)


@pytest.fixture(scope="module", params=[False, True], ids=["whole_tags", "split_tags"])
def split_tags(request: pytest.FixtureRequest) -> bool:
    value: bool = request.param
    return value


@pytest.fixture(scope="module")
def base_url(split_tags: bool, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not BINARY.is_file():
        pytest.skip(SKIP_REASON)
    model = tmp_path_factory.mktemp("llama") / "scripted.gguf"
    started = time.perf_counter()
    write_model(model, split_tags=split_tags)
    assert time.perf_counter() - started < 1.0
    with run_llama_server(BINARY, model) as url:
        yield url


def _chat(base_url: str, **extra: Any) -> dict[str, Any]:
    response = httpx.post(f"{base_url}/chat/completions", json={"messages": MESSAGES, **extra}, timeout=TIMEOUT)
    response.raise_for_status()
    body: dict[str, Any] = response.json()
    return body


def _stream_deltas(base_url: str, **extra: Any) -> list[dict[str, Any]]:
    deltas: list[dict[str, Any]] = []
    payload = {"messages": MESSAGES, "stream": True, **extra}
    with httpx.stream("POST", f"{base_url}/chat/completions", json=payload, timeout=TIMEOUT) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            for choice in json.loads(line.removeprefix("data: "))["choices"]:
                deltas.append(choice["delta"])
    return deltas


def _joined(deltas: list[dict[str, Any]], key: str) -> str:
    return "".join(delta.get(key) or "" for delta in deltas)


@pytest.mark.llama
def test_reasoning_is_extracted_by_default(base_url: str) -> None:
    body = _chat(base_url)
    choice = body["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert choice["message"]["reasoning_content"] == SERVER_REASONING
    assert choice["message"]["content"] == CONTENT


@pytest.mark.llama
def test_reasoning_format_none_keeps_raw_tags(base_url: str) -> None:
    message = _chat(base_url, reasoning_format="none")["choices"][0]["message"]
    assert message["content"] == RAW_CONTENT
    assert "reasoning_content" not in message


@pytest.mark.llama
def test_thinking_disabled_answers_directly(base_url: str) -> None:
    message = _chat(base_url, chat_template_kwargs={"enable_thinking": False})["choices"][0]["message"]
    assert message["content"] == CONTENT
    assert "reasoning_content" not in message


@pytest.mark.llama
def test_streamed_deltas(base_url: str) -> None:
    deltas = _stream_deltas(base_url)
    assert _joined(deltas, "reasoning_content") == SERVER_REASONING
    assert _joined(deltas, "content") == CONTENT


@pytest.mark.llama
def test_streamed_raw_deltas_are_the_scripted_tokens(base_url: str, split_tags: bool) -> None:
    deltas = _stream_deltas(base_url, reasoning_format="none")
    assert _joined(deltas, "content") == RAW_CONTENT
    pieces = [delta["content"] for delta in deltas if delta.get("content")]
    assert pieces == list(SPLIT_SCRIPT if split_tags else SCRIPT)


def test_write_model_is_deterministic(tmp_path: Path) -> None:
    first, second = tmp_path / "a.gguf", tmp_path / "b.gguf"
    write_model(first)
    write_model(second)
    assert first.read_bytes() == second.read_bytes()
