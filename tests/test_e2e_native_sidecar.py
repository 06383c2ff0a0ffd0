"""End to end: ``numi-mw serve --wire-api anthropic-messages`` between the openai SDK and a replay upstream that
serves recorded Anthropic traffic: the request goes to ``/v1/messages`` translated, with Anthropic's headers, and
the recorded answer comes back as chat completions."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from numi_mw.core.details import rebuild_reasoning_details
from tests.e2e_support import ReplayUpstream, sidecar

pytestmark = pytest.mark.usefixtures("upstream_transport")
"""Every test here runs once per upstream transport (httpcore and aiohttp)."""


@pytest.fixture(scope="module")
def upstream(shared_dir: Path) -> Iterator[ReplayUpstream]:
    """The replay upstream, which answers with the recorded fixtures: skipped with them when ``shared/`` is absent."""
    with ReplayUpstream().running() as replay:
        yield replay


@pytest.fixture(scope="module")
def anthropic_sidecar(upstream: ReplayUpstream, upstream_transport: str) -> Iterator[str]:
    with sidecar(upstream.base_url, "--wire-api", "anthropic-messages", "--timeout", "5") as base_url:
        yield base_url


SIGNED_STREAM = "anthropic-messages/anthropic-haiku-4.5-thinking-then-tool-use.sse"
HISTORY: Any = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Which version?"},
]


def test_the_request_goes_to_messages_translated_with_anthropics_headers(
    shared_dir: Path, upstream: ReplayUpstream, anthropic_sidecar: str
) -> None:
    with openai.OpenAI(base_url=anthropic_sidecar, api_key="sk-ant-test", max_retries=0, timeout=10) as sdk:
        stream = sdk.chat.completions.create(
            model="claude-haiku-4-5",
            messages=HISTORY,
            stream=True,
            reasoning_effort="low",
            extra_headers={"x-replay-fixture": SIGNED_STREAM},
        )
        entries: list[Any] = []
        calls: list[Any] = []
        finish = None
        for chunk in stream:
            delta = chunk.choices[0].delta
            entries.extend((delta.model_extra or {}).get("reasoning_details") or [])
            calls.extend(delta.tool_calls or [])
            finish = chunk.choices[0].finish_reason or finish
    received = upstream.received[-1]
    assert received.path == "/v1/messages"
    assert received.headers["x-api-key"] == "sk-ant-test"
    assert received.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in received.headers
    assert json.loads(received.body) == {
        "model": "claude-haiku-4-5",
        "system": "Be brief.",
        "messages": [{"role": "user", "content": "Which version?"}],
        "max_tokens": 4096 + 2048,  # the answer's default room above the budget
        "stream": True,
        "thinking": {"type": "enabled", "budget_tokens": 2048},
    }
    recorded = (shared_dir / "fixtures" / SIGNED_STREAM).read_text()
    signature = recorded.split('"signature":"')[2].split('"')[0]  # the signature_delta's, byte for byte
    assert [d.get("signature") for d in rebuild_reasoning_details(entries)] == [signature]
    assert (calls[0].function.name, finish) == ("fixed_version", "tool_calls")


def test_a_client_key_header_and_version_are_kept_and_an_error_body_is_translated(
    upstream: ReplayUpstream, anthropic_sidecar: str
) -> None:
    response = httpx.post(
        anthropic_sidecar + "/chat/completions",
        json={"model": "m", "messages": HISTORY},
        headers={"x-api-key": "own", "anthropic-version": "2099-01-01", "x-replay-status": "400"},
        timeout=10,
    )
    received = upstream.received[-1]
    assert (received.headers["x-api-key"], received.headers["anthropic-version"]) == ("own", "2099-01-01")
    # the replay upstream answers a request without a fixture with an OpenAI-style body: passed unchanged
    assert (response.status_code, response.json()) == (400, {"error": {"message": "replay: no fixture named"}})


def test_adjustments_are_reported_in_a_response_header(upstream: ReplayUpstream, anthropic_sidecar: str) -> None:
    history = [
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": "A", "reasoning_content": "plain, unsigned"},
        {"role": "user", "content": "Q2"},
    ]
    response = httpx.post(
        anthropic_sidecar + "/chat/completions",
        json={"model": "m", "messages": history, "seed": 1},
        headers={"x-replay-fixture": "anthropic-messages/anthropic-sonnet-4.5-thinking-signature.buffered.json"},
        timeout=10,
    )
    assert response.status_code == 200
    assert response.headers["x-numi-mw-adjustments"] == "parameters-dropped=seed, unsigned-reasoning-dropped=1"
    assert response.json()["object"] == "chat.completion"


@pytest.fixture(scope="module")
def responses_sidecar(upstream: ReplayUpstream, upstream_transport: str) -> Iterator[str]:
    with sidecar(upstream.base_url, "--wire-api", "openai-responses", "--timeout", "5") as base_url:
        yield base_url


ENCRYPTED_STREAM = "openai-responses/openai-o3-mini-summary-deltas.sse"


def test_responses_the_request_goes_to_responses_and_the_encrypted_state_comes_back_for_the_next_turn(
    shared_dir: Path, upstream: ReplayUpstream, responses_sidecar: str
) -> None:
    with openai.OpenAI(base_url=responses_sidecar, api_key="sk-openai-test", max_retries=0, timeout=10) as sdk:
        with sdk.chat.completions.stream(
            model="o3-mini",
            messages=HISTORY,
            reasoning_effort="high",
            extra_headers={"x-replay-fixture": ENCRYPTED_STREAM},
        ) as stream:
            for _ in stream:
                pass
            message = stream.get_final_completion().choices[0].message
        received = upstream.received[-1]
        assert received.path == "/v1/responses"
        assert received.headers["authorization"] == "Bearer sk-openai-test"
        assert json.loads(received.body) == {
            "model": "o3-mini",
            "instructions": "Be brief.",
            "input": [{"type": "message", "role": "user", "content": "Which version?"}],
            "stream": True,
            "reasoning": {"effort": "high", "summary": "auto"},
            "include": ["reasoning.encrypted_content"],
            "store": False,
        }
        events = [
            json.loads(line[6:])
            for line in (shared_dir / "fixtures" / ENCRYPTED_STREAM).read_text().splitlines()
            if line.startswith("data: ")
        ]
        item = next(
            e["item"] for e in events if e["type"] == "response.output_item.done" and e["item"]["type"] == "reasoning"
        )
        details = [dict(d) for d in (message.model_extra or {})["reasoning_details"]]
        assert [d["data"] for d in details if d["type"] == "reasoning.encrypted"] == [item["encrypted_content"]]
        # the next turn, built from the SDK's own message, gives the reasoning item back as it came
        history: Any = [*HISTORY, message.model_dump(exclude_none=True), {"role": "user", "content": "Thanks."}]
        sdk.chat.completions.create(
            model="o3-mini",
            messages=history,
            extra_headers={"x-replay-fixture": "openai-responses/openai-gpt-5-mini-reasoning-encrypted.buffered.json"},
        )
    replayed = json.loads(upstream.received[-1].body)["input"][1]
    assert replayed == {
        "type": "reasoning",
        "id": item["id"],
        "encrypted_content": item["encrypted_content"],
        "summary": [{"type": "summary_text", "text": part["text"]} for part in item["summary"]],
    }


def test_other_paths_of_an_anthropic_upstream_get_its_headers_too(
    upstream: ReplayUpstream, anthropic_sidecar: str
) -> None:
    httpx.get(anthropic_sidecar + "/models", headers={"authorization": "Bearer sk-ant-x"}, timeout=10)
    received = upstream.received[-1]
    assert (received.path, received.headers["x-api-key"], received.headers["anthropic-version"]) == (
        "/v1/models",
        "sk-ant-x",
        "2023-06-01",
    )
    assert "authorization" not in received.headers


def test_a_catalog_key_replaces_the_clients_in_the_wire_apis_header(tmp_path: Path, upstream: ReplayUpstream) -> None:
    catalog = tmp_path / "catalog.toml"
    catalog.write_text(
        f"""
[[providers]]
name = "claude-direct"
base_url = "{upstream.base_url}"
wire_api = "anthropic-messages"
api_key_env = "NUMI_TEST_ANTHROPIC_KEY"

[[models]]
id = "claude-x"

[[models.endpoints]]
tag = "direct"
provider = "claude-direct"
"""
    )
    with sidecar(None, "--catalog", str(catalog), env={"NUMI_TEST_ANTHROPIC_KEY": "sk-catalog"}) as base:
        httpx.post(
            base + "/chat/completions",
            json={"model": "claude-x", "messages": HISTORY},
            headers={
                "x-api-key": "sk-client-own",
                "authorization": "Bearer sk-client",
                "x-replay-fixture": "anthropic-messages/anthropic-sonnet-4.5-thinking-signature.buffered.json",
            },
            timeout=10,
        )
    received = upstream.received[-1]
    assert (received.path, received.headers["x-api-key"]) == ("/v1/messages", "sk-catalog")
    assert "authorization" not in received.headers


def test_an_answer_that_is_not_anthropics_is_a_502_labelled_json(anthropic_sidecar: str) -> None:
    request = {"model": "claude-haiku-4-5", "messages": HISTORY}
    response = httpx.post(f"{anthropic_sidecar}/chat/completions", json=request, headers={"x-replay-html": "1"})
    assert response.status_code == 502
    assert response.headers["content-type"] == "application/json"
    assert response.headers["content-length"] == str(len(response.content))
    assert response.json()["error"] == {
        "message": "The upstream's answer is not JSON; numi_mw cannot translate it.",
        "type": "api_error",
        "code": "upstream_unavailable",
        "param": None,
    }


def test_an_error_page_in_front_of_anthropic_reaches_the_sdk_as_the_openai_style_error(anthropic_sidecar: str) -> None:
    # a load balancer's HTML page with a 503: the openai SDK reads the message from the OpenAI-style body
    sdk = openai.OpenAI(base_url=anthropic_sidecar, api_key="sk-ant-test", max_retries=0, timeout=10)
    with sdk, pytest.raises(openai.InternalServerError) as raised:
        sdk.chat.completions.create(
            model="claude-haiku-4-5", messages=HISTORY, extra_headers={"x-replay-html": "1", "x-replay-status": "503"}
        )
    response = raised.value.response
    assert (response.status_code, response.headers["content-type"]) == (503, "application/json")
    assert response.headers["content-length"] == str(len(response.content))
    assert raised.value.body == {
        "message": "The upstream answered 503: <html>hi</html>",
        "type": "api_error",
        "code": None,
        "param": None,
    }


def test_a_translated_request_goes_upstream_labelled_json_whatever_the_client_labelled_it(
    upstream: ReplayUpstream, anthropic_sidecar: str
) -> None:
    body = json.dumps({"model": "claude-haiku-4-5", "messages": HISTORY}).encode()
    form = {"content-type": "application/x-www-form-urlencoded", "x-replay-fixture": SIGNED_STREAM}  # curl -d
    httpx.post(f"{anthropic_sidecar}/chat/completions", content=body, headers=form, timeout=10)
    received = upstream.received[-1]
    assert (received.path, received.headers["content-type"]) == ("/v1/messages", "application/json")
