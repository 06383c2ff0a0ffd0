"""End to end: usage and cost through ``numi-mw serve --catalog FILE`` with the real openai SDK, recorded answers
served on loopback (spec 004 "Output limits and billing")."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.e2e_support import ReplayUpstream, sidecar

CATALOG = """
[[providers]]
name = "xai"
base_url = "{base}"

[[providers]]
name = "deepseek"
base_url = "{base}"

[[models]]
id = "x-ai/grok-3-mini"

[[models.endpoints]]
tag = "xai"
provider = "xai"
model = "grok-3-mini"
pricing = {{ prompt = 0.0000003, completion = 0.0000005, cache_read = 0.000000075 }}

[[models]]
id = "deepseek/deepseek-reasoner"

[[models.endpoints]]
tag = "deepseek"
provider = "deepseek"
model = "deepseek-reasoner"
pricing = {{ prompt = 0.00000055, completion = 0.00000219 }}
"""


@pytest.fixture(scope="module")
def client(shared_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    with ReplayUpstream().running() as upstream:
        path = tmp_path_factory.mktemp("usage") / "catalog.toml"
        path.write_text(CATALOG.format(base=upstream.base_url))
        with (
            sidecar(None, "--catalog", str(path)) as url,
            openai.OpenAI(base_url=url, api_key="sk-client", max_retries=0, timeout=10) as sdk,
        ):
            yield sdk


def streamed_usage(client: openai.OpenAI, model: str, fixture: str) -> dict[str, Any]:
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Hi"}],
        stream=True,
        stream_options={"include_usage": True},
        extra_headers={"x-replay-fixture": fixture},
    )
    usages = [chunk.usage.model_dump(exclude_none=True) for chunk in stream if chunk.usage is not None]
    assert len(usages) == 1
    return usages[0]


def test_xai_usage_arrives_consistent_with_xais_own_charge(client: openai.OpenAI) -> None:
    usage = streamed_usage(client, "x-ai/grok-3-mini", "openai-chat/xai-grok-3-mini-reasoning-content.stream.jsonl")
    assert (usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]) == (12, 342, 354)
    assert usage["completion_tokens_details"]["reasoning_tokens"] == 340
    assert (usage["cost"], usage["cost_details"], usage["token_count_basis"]) == (
        0.000172125,
        {"upstream_inference_cost": 0.000172125},
        "provider_native_reasoning_added",
    )


def test_a_priced_endpoint_adds_the_cost_of_its_answer(client: openai.OpenAI) -> None:
    usage = streamed_usage(client, "deepseek/deepseek-reasoner", "openai-chat/deepseek-reasoner-reasoning-content.sse")
    # 6 prompt tokens at 0.55 and 212 completion tokens (198 of them reasoning) at 2.19 USD per million
    assert json.loads(json.dumps(usage)) == {
        "prompt_tokens": 6,
        "completion_tokens": 212,
        "total_tokens": 218,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 198},
        "prompt_cache_hit_tokens": 0,
        "prompt_cache_miss_tokens": 6,
        "cost": 0.00046758,
        "cost_details": {
            "upstream_inference_cost": 0.00046758,
            "upstream_inference_prompt_cost": 0.0000033,
            "upstream_inference_completions_cost": 0.00046428,
        },
        "token_count_basis": "provider_native",
    }
