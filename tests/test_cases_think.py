"""Handed cases of reasoning inside ``content`` (``../shared/cases/public-bugs.json``): TB-05, TB-15, TB-20.

Each runs through the route a sidecar would take for the case's provider (``local``), with the think-tag
settings ``response.think_tags_for`` gives it, streamed at every byte split and buffered.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from numi_mw.core.catalog import load_catalog
from numi_mw.core.providers import provider_rules
from numi_mw.core.request import prepare_request
from numi_mw.core.response import think_tags_for
from numi_mw.core.think import ThinkStart, ThinkTags
from tests.conftest import load_case
from tests.response_support import client_view, rewrite, rewrite_json, sse_chunks

HARMONY_MARKERS = ("<|channel|>", "<|message|>", "<|end|>", "<|start|>", "<|return|>", "<|call|>", "<|constrain|>")


def stream_of(chunks: list[dict[str, Any]]) -> bytes:
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


def buffered_of(chunks: list[dict[str, Any]]) -> bytes:
    """The same answer as one buffered completion: the chunks' content joined."""
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    message = {"role": "assistant", "content": content}
    return json.dumps({"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}).encode()


def every_split(body: bytes, think: ThinkTags) -> bytes:
    """The client's bytes for ``body``, the same whatever byte it is split at (checked)."""
    whole = rewrite(body, think=think)
    for cut in range(1, len(body)):
        assert rewrite(body, think=think, cuts=(cut,)) == whole, f"split at byte {cut}"
    return whole


def content_deltas(out: bytes) -> list[str]:
    return [c["choices"][0]["delta"].get("content") or "" for c in sse_chunks(out) if c.get("choices")]


CATALOG = """
[[providers]]
name = "gpu-box"
base_url = "http://127.0.0.1:8000/v1"
rules = "local"

[[models]]
id = "vendor/hybrid-model"
think_start = "{start}"

[[models.endpoints]]
tag = "gpu-box/vllm"
provider = "gpu-box"
"""


def catalog_think(request: dict[str, Any], start: ThinkStart) -> ThinkTags | None:
    """The think settings the sidecar builds for ``request`` through a catalog whose entry for the model says
    ``think_start = start``, with no ``--think-start``."""
    catalog = load_catalog(CATALOG.format(start=start), "catalog.toml")
    prepared = prepare_request(json.dumps(request).encode(), catalog)
    return think_tags_for(prepared.route.rules, None, None, route_start=prepared.route.think_start)


# --- TB-05: the chat template opened the tag ------------------------------------------------------------------


@pytest.mark.parametrize("start", ["auto", "reasoning"])
def test_tb05_closing_tag_only_under_the_setting_for_such_a_model(shared_dir: Path, start: ThinkStart) -> None:
    case = load_case(shared_dir, "TB-05")
    given, expected = case["input"], case["expected"]["client_stream"]
    assert (given["provider"], given["cli_flags"]) == ("local", [])
    think = catalog_think(given["request"], start)  # the model's catalog entry
    assert think == ThinkTags(start=start)
    assert think_tags_for(provider_rules("local"), None, start) == think  # or --think-start for one upstream
    out = every_split(stream_of(given["upstream_chunks"]), think)
    view = client_view(sse_chunks(out))
    assert (view.reasoning, view.content) == (expected["concat_delta_reasoning"], expected["concat_delta_content"])
    for content in content_deltas(out):
        assert expected["concat_delta_reasoning"] not in content
        assert "think>" not in content and "<" not in content
    buffered = json.loads(rewrite_json(buffered_of(given["upstream_chunks"]), think=think))["choices"][0]["message"]
    assert (buffered["reasoning"], buffered["content"]) == (view.reasoning, view.content)


def test_tb05_an_unknown_model_starts_in_content(shared_dir: Path) -> None:
    """The documented default (``docs/streaming.md``, "Think tags"): an unknown model's text is content until an
    opening tag, so a template-opened block shows as content; its closing tag is dropped."""
    given = load_case(shared_dir, "TB-05")["input"]
    think = think_tags_for(provider_rules("local"))
    assert think == ThinkTags(start="content")
    view = client_view(sse_chunks(every_split(stream_of(given["upstream_chunks"]), think)))
    assert (view.reasoning, view.content) == ("", "Check the log lines first.The disk was full.")


# --- TB-15: gpt-oss harmony channels ---------------------------------------------------------------------------


def test_tb15_harmony_channels_are_split_and_no_marker_reaches_the_client(shared_dir: Path) -> None:
    case = load_case(shared_dir, "TB-15")
    given, expected = case["input"], case["expected"]["client_stream"]
    assert given["provider"] == "local"
    think = think_tags_for(provider_rules("local"))  # the defaults
    assert think is not None
    out = every_split(stream_of(given["upstream_chunks"]), think)
    view = client_view(sse_chunks(out))
    assert (view.reasoning, view.content) == (expected["concat_delta_reasoning"], expected["concat_delta_content"])
    assert view.finish_reason == "stop"
    for content in content_deltas(out):
        assert not any(marker in content for marker in HARMONY_MARKERS)
    buffered = json.loads(rewrite_json(buffered_of(given["upstream_chunks"]), think=think))["choices"][0]["message"]
    assert (buffered["reasoning"], buffered["content"]) == (view.reasoning, view.content)


# --- TB-20: nested think blocks ----------------------------------------------------------------------------------


def test_tb20_a_block_that_quotes_a_tag_keeps_it(shared_dir: Path) -> None:
    case = load_case(shared_dir, "TB-20")
    given = case["input"]
    expected = case["expected"]["client_response.choices[0].message"]
    assert given["provider"] == "local"
    think = think_tags_for(provider_rules("local"))
    body = json.dumps(given["upstream_response"]).encode()
    message = json.loads(rewrite_json(body, think=think))["choices"][0]["message"]
    assert {key: message[key] for key in expected} == expected
    assert message["reasoning_details"] == [
        {"type": "reasoning.text", "text": expected["reasoning"], "format": "unknown"}
    ]
    # the same text streamed, split at any byte
    content = given["upstream_response"]["choices"][0]["message"]["content"]
    chunks = [{"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}]}]
    view = client_view(sse_chunks(every_split(stream_of(chunks), think)))  # type: ignore[arg-type]
    assert (view.reasoning, view.content) == (expected["reasoning"], expected["content"])
