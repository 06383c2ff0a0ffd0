"""End to end: ``numi-mw serve --catalog FILE`` routing between two providers on loopback."""

from __future__ import annotations

import json
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.client_shapes import litellm_assistant
from tests.e2e_support import ReplayUpstream, sidecar
from tests.response_support import rewrite_json

pytestmark = pytest.mark.usefixtures("upstream_transport")
"""Every test here runs once per upstream transport (httpcore and aiohttp)."""


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
    upstreams: tuple[ReplayUpstream, ReplayUpstream], tmp_path_factory: pytest.TempPathFactory, upstream_transport: str
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


PACKAGED_URLS = ('base_url = "https://openrouter.ai/api/v1"', 'base_url = "http://127.0.0.1:8000/v1"')


@pytest.fixture(scope="module")
def packaged_base_url(
    upstreams: tuple[ReplayUpstream, ReplayUpstream], tmp_path_factory: pytest.TempPathFactory, upstream_transport: str
) -> Iterator[str]:
    """The sidecar on the packaged catalog, its OpenRouter provider on the first replay upstream and its local
    provider on the second (only the two base URLs changed)."""
    alpha, beta = upstreams
    text = resources.files("numi_mw").joinpath("catalog.toml").read_text()
    assert [text.count(url) for url in PACKAGED_URLS] == [1, 1]
    text = text.replace(PACKAGED_URLS[0], f'base_url = "{alpha.base_url}"')
    text = text.replace(PACKAGED_URLS[1], f'base_url = "{beta.base_url}"')
    path = tmp_path_factory.mktemp("packaged") / "catalog.toml"
    path.write_text(text)
    with sidecar(None, "--catalog", str(path), env={"OPENROUTER_API_KEY": ""}) as url:
        yield url


def deepseek_turn_kept_as_details(shared: Path) -> dict[str, Any]:
    """The recorded DeepSeek tool-call turn as numi_mw answers it, kept by a client as details alone."""
    answer = json.loads(rewrite_json((shared / "fixtures" / FIXTURE).read_bytes()))["choices"][0]["message"]
    return {k: answer[k] for k in ("role", "content", "tool_calls", "reasoning_details")}


@pytest.mark.parametrize(
    ("model", "upstream", "field"),
    [
        # the local DeepSeek distill takes text alone: the details' text becomes its reasoning_content
        ("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", 1, "reasoning_content"),
        # OpenRouter reads the details back and gives DeepSeek its reasoning_content itself
        ("deepseek/deepseek-r1", 0, "reasoning_details"),
    ],
)
def test_the_packaged_catalog_gives_a_deepseek_tool_turn_its_reasoning(
    shared_dir: Path,
    upstreams: tuple[ReplayUpstream, ReplayUpstream],
    packaged_base_url: str,
    model: str,
    upstream: int,
    field: str,
) -> None:
    turn = deepseek_turn_kept_as_details(shared_dir)
    recorded = json.loads((shared_dir / "fixtures" / FIXTURE).read_text())["choices"][0]["message"]
    messages = [
        {"role": "user", "content": "Roll a die; I guess 4."},
        turn,
        {"role": "tool", "tool_call_id": turn["tool_calls"][0]["id"], "content": "4"},
    ]
    response = httpx.post(
        f"{packaged_base_url}/chat/completions",
        json={"model": model, "messages": messages},
        headers={"x-replay-fixture": FIXTURE},
        timeout=10,
    )
    assert response.status_code == 200
    sent = json.loads(upstreams[upstream].received[-1].body)["messages"][1]
    expected = {k: turn[k] for k in ("role", "content", "tool_calls")}
    expected[field] = recorded["reasoning_content"] if field == "reasoning_content" else turn["reasoning_details"]
    assert sent == expected


@pytest.mark.parametrize(
    ("model", "upstream"), [("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", 1), ("deepseek/deepseek-r1", 0)]
)
def test_the_packaged_catalog_reads_litellms_provider_specific_fields(
    shared_dir: Path,
    upstreams: tuple[ReplayUpstream, ReplayUpstream],
    packaged_base_url: str,
    model: str,
    upstream: int,
) -> None:
    answer = json.loads(rewrite_json((shared_dir / "fixtures" / FIXTURE).read_bytes()))["choices"][0]["message"]
    turn = litellm_assistant(answer)
    messages = [
        {"role": "user", "content": "Roll a die; I guess 4."},
        turn,
        {"role": "tool", "tool_call_id": answer["tool_calls"][0]["id"], "content": "4"},
    ]
    response = httpx.post(
        f"{packaged_base_url}/chat/completions",
        json={"model": model, "messages": messages},
        headers={"x-replay-fixture": FIXTURE},
        timeout=10,
    )
    assert response.status_code == 200
    sent = json.loads(upstreams[upstream].received[-1].body)["messages"][1]
    expected = {"content": answer["content"], "role": "assistant", "tool_calls": answer["tool_calls"]}
    if upstream == 1:  # local: the text once, as reasoning_content
        expected["reasoning_content"] = answer["reasoning"]
    else:  # OpenRouter: the text as reasoning and the details it reads back
        expected |= {"reasoning": answer["reasoning"], "reasoning_details": answer["reasoning_details"]}
    assert sent == expected
