"""Usage accounting (spec 004 "Output limits and billing"): reasoning inside ``completion_tokens``, and ``cost``
from the route's endpoint prices, buffered and streamed, checked against the spec's usage excerpt and against
what OpenRouter and xAI charged in recorded answers."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.testclient import TestClient

from numi_mw import ReasoningMiddleware
from numi_mw.catalog_files import default_catalog
from numi_mw.core.adapters import WIRE_APIS, Answer
from numi_mw.core.catalog import Pricing
from numi_mw.core.providers import PROVIDERS
from numi_mw.core.response import JSONRewriter, NativeJSONRewriter, ResponseOptions, SSERewriter
from numi_mw.core.usage import UsageRules, account_usage, usage_rules
from tests.response_support import frame_jsonl, sse_chunks

# The spec's usage excerpt (spec 004 "Output limits and billing"), without the cost it shows.
EXCERPT_COUNTS = {
    "prompt_tokens": 24,
    "completion_tokens": 212,
    "total_tokens": 236,
    "completion_tokens_details": {"reasoning_tokens": 168},
}
# Prices with a separate reasoning rate that give the excerpt's cost: 24 x 0.5 + 44 x 3.75 + 168 x 3.5 = 765 USD
# per million tokens.
EXCERPT_PRICES = Pricing(prompt=0.0000005, completion=0.00000375, reasoning=0.0000035)

XAI_STREAM = "openai-chat/xai-grok-3-mini-reasoning-content.stream.jsonl"
# grok-3-mini's published prices (USD per token): 0.30 per million prompt tokens, 0.075 per million cached, 0.50
# per million completion tokens.
GROK_3_MINI = Pricing(prompt=0.0000003, completion=0.0000005, cache_read=0.000000075)
OPENROUTER_STREAM = "openai-chat/openrouter-claude-sonnet-4.5-reasoning-details.sse"


def xai_usage(shared: Path) -> dict[str, Any]:
    """The usage of the recorded xAI stream's last chunk."""
    lines = (shared / "fixtures" / XAI_STREAM).read_text().splitlines()
    usage: dict[str, Any] = json.loads(lines[-1])["usage"]
    return usage


def test_the_spec_excerpt_gets_its_cost_with_a_separate_reasoning_rate() -> None:
    usage = copy.deepcopy(EXCERPT_COUNTS)
    assert account_usage(usage, UsageRules(EXCERPT_PRICES))
    assert usage == {
        "prompt_tokens": 24,
        "completion_tokens": 212,
        "total_tokens": 236,
        "completion_tokens_details": {"reasoning_tokens": 168},
        "cost": 0.000765,
        "cost_details": {
            "upstream_inference_cost": 0.000765,
            "upstream_inference_prompt_cost": 0.000012,
            "upstream_inference_completions_cost": 0.000753,
        },
        "token_count_basis": "provider_native",
    }


def test_a_cost_the_upstream_gives_is_left_as_it_came() -> None:
    usage = {
        **copy.deepcopy(EXCERPT_COUNTS),
        "token_count_basis": "provider_native",
        "cost": 0.000765,
        "cost_details": {"upstream_inference_cost": 0.000765},
    }
    before = copy.deepcopy(usage)
    assert not account_usage(usage, UsageRules(Pricing(prompt=0.001, completion=0.001)))
    assert usage == before


def test_reasoning_at_the_completion_rate_matches_what_openrouter_charged(shared_dir: Path) -> None:
    """OpenRouter's own cost for a recorded Claude Sonnet 4.5 answer, recomputed from the packaged catalog's
    prices for that endpoint after the cost fields are taken out."""
    chunks = sse_chunks((shared_dir / "fixtures" / OPENROUTER_STREAM).read_bytes())
    recorded = next(chunk["usage"] for chunk in chunks if chunk.get("usage"))
    usage = {k: v for k, v in recorded.items() if k not in ("cost", "cost_details")}
    model = default_catalog().model("anthropic/claude-sonnet-4.5")
    assert model is not None
    assert account_usage(usage, UsageRules(model.endpoints[0].pricing))
    assert usage["cost"] == recorded["cost"] == 0.000669
    assert usage["cost_details"] == {
        "upstream_inference_cost": 0.000669,
        "upstream_inference_prompt_cost": recorded["cost_details"]["upstream_inference_prompt_cost"],
        "upstream_inference_completions_cost": recorded["cost_details"]["upstream_inference_completions_cost"],
    }
    assert usage["completion_tokens"] == 36


def test_xai_reasoning_goes_into_completion_tokens_and_its_ticks_become_cost(shared_dir: Path) -> None:
    usage = xai_usage(shared_dir)
    rules = usage_rules(PROVIDERS["xai"])
    assert rules is not None
    assert account_usage(usage, rules)
    assert usage == {
        "prompt_tokens": 12,
        "completion_tokens": 342,
        "total_tokens": 354,
        "prompt_tokens_details": {"text_tokens": 12, "audio_tokens": 0, "image_tokens": 0, "cached_tokens": 11},
        "completion_tokens_details": {
            "reasoning_tokens": 340,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
        "num_sources_used": 0,
        "cost_in_usd_ticks": 1721250,
        "cost": 0.000172125,
        "cost_details": {"upstream_inference_cost": 0.000172125},
        "token_count_basis": "provider_native_reasoning_added",
    }


def test_xai_usage_priced_by_the_catalog_comes_to_what_xai_charged(shared_dir: Path) -> None:
    """Without xAI's ticks, the grok-3-mini prices give the charge xAI reported (1721250 ticks): reasoning is
    billed once, at the completion rate, after it was added to ``completion_tokens``."""
    usage = xai_usage(shared_dir)
    del usage["cost_in_usd_ticks"]
    rules = usage_rules(PROVIDERS["xai"], GROK_3_MINI)
    assert rules is not None
    assert account_usage(usage, rules)
    assert (usage["completion_tokens"], usage["cost"], usage["token_count_basis"]) == (
        342,
        0.000172125,
        "provider_native_reasoning_added",
    )
    assert usage["cost_details"] == {
        "upstream_inference_cost": 0.000172125,
        "upstream_inference_prompt_cost": 0.000001125,
        "upstream_inference_completions_cost": 0.000171,
    }


def test_reasoning_already_inside_completion_tokens_is_not_added_twice() -> None:
    usage = {"prompt_tokens": 12, "completion_tokens": 342, "total_tokens": 354}
    usage["completion_tokens_details"] = {"reasoning_tokens": 340}  # type: ignore[assignment]
    rules = usage_rules(PROVIDERS["xai"])
    assert rules is not None
    assert not account_usage(usage, rules)
    assert usage["completion_tokens"] == 342
    assert "token_count_basis" not in usage


@pytest.mark.parametrize(
    "usage",
    [None, "12", {"prompt_tokens": "12", "completion_tokens": 2}, {"prompt_tokens": 1, "completion_tokens": True}],
)
def test_usage_without_counts_is_left_alone(usage: Any) -> None:
    before = copy.deepcopy(usage)
    assert not account_usage(usage, UsageRules(EXCERPT_PRICES, True, True))
    assert usage == before


def test_nothing_to_account_without_prices_or_a_provider_row() -> None:
    assert usage_rules(PROVIDERS["openrouter"]) is None
    assert usage_rules(PROVIDERS["generic"], Pricing(prompt=0.000001)) is None  # no completion price
    assert usage_rules(PROVIDERS["generic"], EXCERPT_PRICES) == UsageRules(EXCERPT_PRICES)
    assert usage_rules(PROVIDERS["xai"]) == UsageRules(None, True, True)


def test_the_streamed_xai_answer_gets_consistent_usage_in_its_last_chunk_only(shared_dir: Path) -> None:
    body = frame_jsonl((shared_dir / "fixtures" / XAI_STREAM).read_bytes())
    plain = SSERewriter(ResponseOptions())
    accounted = SSERewriter(ResponseOptions(usage=usage_rules(PROVIDERS["xai"])))
    before = sse_chunks(plain.feed(body) + plain.finish())
    after = sse_chunks(accounted.feed(body) + accounted.finish())
    assert after[:-1] == before[:-1]
    assert before[-1]["usage"]["completion_tokens"] == 2
    expected = {**before[-1]["usage"], "completion_tokens": 342}
    expected.update(
        cost=0.000172125,
        cost_details={"upstream_inference_cost": 0.000172125},
        token_count_basis="provider_native_reasoning_added",
    )
    assert after[-1] == {**before[-1], "usage": expected}


def test_a_streamed_usage_chunk_without_reasoning_gets_its_cost() -> None:
    """A usage chunk the reasoning prefilter would pass as it came (no ``reasoning`` in its bytes)."""
    usage = {"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14}
    events = [
        {"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "Hi"}}]},
        {"id": "c", "object": "chat.completion.chunk", "choices": [], "usage": usage},
    ]
    body = b"".join(b"data: " + json.dumps(event).encode() + b"\n\n" for event in events) + b"data: [DONE]\n\n"
    rewriter = SSERewriter(ResponseOptions(usage=UsageRules(Pricing(prompt=0.000001, completion=0.000004))))
    out = rewriter.feed(body) + rewriter.finish()
    first, last = out.split(b"\n\n")[:2]
    assert first + b"\n\n" == b"data: " + json.dumps(events[0]).encode() + b"\n\n"
    assert json.loads(last.removeprefix(b"data: "))["usage"] == {
        **usage,
        "cost": 0.000026,
        "cost_details": {
            "upstream_inference_cost": 0.000026,
            "upstream_inference_prompt_cost": 0.00001,
            "upstream_inference_completions_cost": 0.000016,
        },
        "token_count_basis": "provider_native",
    }


def test_a_buffered_answer_gets_its_cost_and_one_without_usage_passes_as_it_came() -> None:
    completion = {
        "id": "c",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}],
        "usage": copy.deepcopy(EXCERPT_COUNTS),
    }
    rewriter = JSONRewriter(ResponseOptions(usage=UsageRules(EXCERPT_PRICES)))
    out = json.loads(rewriter.feed(json.dumps(completion).encode()) + rewriter.finish())
    assert out["usage"]["cost"] == 0.000765
    assert out["usage"]["token_count_basis"] == "provider_native"
    assert {k: v for k, v in out.items() if k != "usage"} == {k: v for k, v in completion.items() if k != "usage"}
    del completion["usage"]
    raw = json.dumps(completion).encode()
    rewriter = JSONRewriter(ResponseOptions(usage=UsageRules(EXCERPT_PRICES)))
    rewriter.feed(raw)
    assert rewriter.finish() is raw
    assert not rewriter.changed


def test_a_translated_anthropic_answer_gets_its_cost() -> None:
    native = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "Hi"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 10, "output_tokens": 20},
    }
    options = ResponseOptions(
        wire_api="anthropic-messages",
        answer=Answer("anthropic/claude-sonnet-4.5"),
        usage=UsageRules(Pricing(prompt=0.000003, completion=0.000015)),
    )
    rewriter = NativeJSONRewriter(options, WIRE_APIS["anthropic-messages"])
    out = json.loads(rewriter.feed(json.dumps(native).encode()) + rewriter.finish())
    assert out["usage"] == {
        "prompt_tokens": 10,
        "completion_tokens": 20,
        "total_tokens": 30,
        "cost": 0.00033,
        "cost_details": {
            "upstream_inference_cost": 0.00033,
            "upstream_inference_prompt_cost": 0.00003,
            "upstream_inference_completions_cost": 0.0003,
        },
        "token_count_basis": "provider_native",
    }


def test_the_middleware_accounts_xai_usage_without_a_catalog(shared_dir: Path) -> None:
    usage = xai_usage(shared_dir)
    answer = {
        "id": "c",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}],
        "usage": usage,
    }

    async def completion(request: Request) -> Response:
        await request.body()
        return JSONResponse(answer)

    app = Starlette(routes=[Route("/v1/chat/completions", completion, methods=["POST"])])
    app.add_middleware(ReasoningMiddleware, provider="xai")
    with TestClient(app) as client:
        response = client.post("/v1/chat/completions", json={"model": "grok-3-mini", "messages": []})
    got = response.json()["usage"]
    assert (got["completion_tokens"], got["cost"], got["token_count_basis"]) == (
        342,
        0.000172125,
        "provider_native_reasoning_added",
    )
    assert response.headers["content-length"] == str(len(response.content))


def test_only_the_xai_row_counts_reasoning_outside_and_reports_ticks() -> None:
    """``docs/providers.md``: one row, ``xai``, has the usage columns (xAI's chat API reference)."""
    assert [name for name, rules in PROVIDERS.items() if rules.reasoning_outside_completion] == ["xai"]
    assert [name for name, rules in PROVIDERS.items() if rules.cost_in_usd_ticks] == ["xai"]
