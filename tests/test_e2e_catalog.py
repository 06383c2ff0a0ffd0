"""End to end: ``numi-mw serve --catalog FILE`` routing between two providers on loopback."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.e2e_support import ReplayUpstream, sidecar

CATALOG = """
[[providers]]
name = "openrouter"
base_url = "{alpha}"
api_key_env = "NUMI_E2E_ALPHA_KEY"

[[providers]]
name = "gpu-box"
base_url = "{beta}"
rules = "local"

[[models]]
id = "vendor/listed"
reasoning_mode = "effort"
preserve_reasoning = true

[[models.endpoints]]
tag = "alpha/primary"
provider = "openrouter"
supported_parameters = ["max_tokens", "reasoning", "include_reasoning"]
reasoning = {{ supported_efforts = ["low", "medium", "high"], default_effort = "medium", mandatory = false }}

[[models]]
id = "vendor/local"
reasoning_mode = "effort"

[[models.endpoints]]
tag = "beta/vllm"
provider = "gpu-box"
model = "local-32b"
"""


@pytest.fixture(scope="module")
def upstreams() -> Iterator[tuple[ReplayUpstream, ReplayUpstream]]:
    with ReplayUpstream().running() as alpha, ReplayUpstream().running() as beta:
        yield alpha, beta


@pytest.fixture(scope="module")
def base_url(
    upstreams: tuple[ReplayUpstream, ReplayUpstream], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    alpha, beta = upstreams
    path = tmp_path_factory.mktemp("catalog") / "catalog.toml"
    path.write_text(CATALOG.format(alpha=alpha.base_url, beta=beta.base_url))
    with sidecar(None, "--catalog", str(path), env={"NUMI_E2E_ALPHA_KEY": "sk-alpha"}) as url:
        yield url


@pytest.fixture
def client(base_url: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=base_url, api_key="sk-client", max_retries=0, timeout=10) as sdk:
        yield sdk


FIXTURE = "openai-chat/deepseek-v4-flash-reasoning-content-tool-call.buffered.json"


def test_each_model_reaches_its_provider(
    shared_dir: Path, upstreams: tuple[ReplayUpstream, ReplayUpstream], client: openai.OpenAI
) -> None:
    alpha, beta = upstreams
    history: Any = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Yo", "reasoning": "Greet."},
        {"role": "user", "content": "Again"},
    ]
    client.chat.completions.create(
        model="vendor/listed", messages=history, reasoning_effort="high", extra_headers={"x-replay-fixture": FIXTURE}
    )
    assert json.loads(alpha.received[-1].body) == {
        "model": "vendor/listed",
        "messages": history,
        "reasoning": {"effort": "high"},
    }
    assert alpha.received[-1].headers["authorization"] == "Bearer sk-alpha"
    completion = client.chat.completions.create(
        model="vendor/local", messages=history, reasoning_effort="high", extra_headers={"x-replay-fixture": FIXTURE}
    )
    assert json.loads(beta.received[-1].body) == {
        "model": "local-32b",
        "messages": [history[0], {"role": "assistant", "content": "Yo"}, history[2]],
        "reasoning_effort": "high",
    }
    assert beta.received[-1].headers["authorization"] == "Bearer sk-client"
    assert (completion.choices[0].message.model_extra or {})["reasoning_details"][0]["format"] == "unknown"


def test_an_unaccepted_effort_never_leaves_the_sidecar(
    upstreams: tuple[ReplayUpstream, ReplayUpstream], base_url: str
) -> None:
    alpha, beta = upstreams
    before = (len(alpha.received), len(beta.received))
    response = httpx.post(
        f"{base_url}/chat/completions",
        json={"model": "vendor/listed", "reasoning_effort": "xhigh", "messages": []},
        timeout=10,
    )
    assert response.status_code == 400
    assert response.json() == {
        "error": {
            "message": 'No endpoint of model "vendor/listed" accepts reasoning effort "xhigh"; use one of: none, low, medium, high, or omit it to use the model\'s default.',
            "type": "invalid_request_error",
            "code": "invalid_request",
            "param": "reasoning.effort",
        }
    }
    assert (len(alpha.received), len(beta.received)) == before


def test_models_and_endpoints_are_served_from_the_catalog(
    upstreams: tuple[ReplayUpstream, ReplayUpstream], client: openai.OpenAI, base_url: str
) -> None:
    alpha, beta = upstreams
    before = (len(alpha.received), len(beta.received))
    assert [m.id for m in client.models.list().data] == ["vendor/listed", "vendor/local"]
    listing = httpx.get(f"{base_url}/models", timeout=10).json()
    assert listing["data"][0]["reasoning"] == {
        "supported_efforts": ["low", "medium", "high"],
        "default_effort": "medium",
        "mandatory": False,
    }
    assert "reasoning" not in listing["data"][1]
    endpoints = httpx.get(f"{base_url}/models/vendor/listed/endpoints", timeout=10).json()
    assert [(e["tag"], e["supported_parameters"], e["reasoning"]) for e in endpoints["data"]["endpoints"]] == [
        (
            "alpha/primary",
            ["max_tokens", "reasoning", "include_reasoning"],
            {"supported_efforts": ["low", "medium", "high"], "default_effort": "medium", "mandatory": False},
        )
    ]
    missing = httpx.get(f"{base_url}/models/vendor/nope/endpoints", timeout=10)
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "model_not_found"
    assert (len(alpha.received), len(beta.received)) == before
