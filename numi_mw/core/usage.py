"""Usage accounting on chat usage: reasoning inside ``completion_tokens``, and the cost of the answer.

Spec 004 ("Output limits and billing"): "Reasoning tokens are part of completion_tokens and are billed ... Where
an endpoint prices reasoning separately, reasoning tokens use that rate instead of the completion rate, so each
token is charged once"; its usage excerpt adds ``token_count_basis``, ``cost`` and
``cost_details.upstream_inference_cost``. ``account_usage`` makes one chat ``usage`` object so, in place:

1. Counts. Where the provider's row says it counts reasoning outside ``completion_tokens``
   (``ProviderRules.reasoning_outside_completion``: xAI's chat API), ``reasoning_tokens`` are added to
   ``completion_tokens``, unless ``total_tokens`` shows they are already in (it must equal prompt + completion +
   reasoning). ``total_tokens`` is left as it came.
2. Cost, when the usage has none (no ``cost``, or ``null``); a cost the upstream gives is left as it came:

   - a provider that reports its charge in ticks (``ProviderRules.cost_in_usd_ticks``: xAI's
     ``cost_in_usd_ticks``, 10^10 to the dollar) gets that charge as ``cost``;
   - else, with the route's endpoint prices (``catalog.Pricing``, USD per token): prompt tokens at the prompt
     price (cached ones at ``cache_read`` when given), reasoning tokens at ``reasoning`` when given, else at the
     completion price, and the other completion tokens at the completion price. Each token is charged once.

   ``cost`` and ``cost_details`` (``upstream_inference_cost``, and with prices
   ``upstream_inference_prompt_cost`` and ``upstream_inference_completions_cost``, OpenRouter's names) are USD
   as JSON numbers: the products are exact decimals, and the number is the nearest float to the exact sum.
3. ``token_count_basis``, when the usage changed: ``provider_native`` (the provider's own counts, reasoning
   inside ``completion_tokens`` as reported) or ``provider_native_reasoning_added`` (the provider's own counts,
   with its ``reasoning_tokens`` added to ``completion_tokens`` by step 1). A usage numi_mw leaves alone keeps
   what it had.

Anything else in the usage (unknown fields, ``cost_in_usd_ticks`` itself) passes unchanged.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Literal

import msgspec

from numi_mw.core.catalog import Pricing
from numi_mw.core.providers import ProviderRules

TokenCountBasis = Literal["provider_native", "provider_native_reasoning_added"]
TOKEN_COUNT_BASES: tuple[TokenCountBasis, ...] = ("provider_native", "provider_native_reasoning_added")
"""The values of ``token_count_basis`` numi_mw writes (``docs/streaming.md``, "Usage and cost")."""

USD_TICKS = 10**10
"""Ticks to the US dollar in xAI's ``cost_in_usd_ticks`` (xAI's "Cost Tracking" guide)."""


class UsageRules(msgspec.Struct, frozen=True, gc=False):
    """What ``account_usage`` does for one route's answers.

    Attributes:
        pricing: the route's endpoint prices (USD per token), or ``None`` (no catalog, or none published).
        reasoning_outside_completion: the provider counts reasoning outside ``completion_tokens``
            (``ProviderRules.reasoning_outside_completion``).
        cost_in_usd_ticks: the provider reports its charge as ``cost_in_usd_ticks``
            (``ProviderRules.cost_in_usd_ticks``).
    """

    pricing: Pricing | None = None
    reasoning_outside_completion: bool = False
    cost_in_usd_ticks: bool = False


def usage_rules(rules: ProviderRules, pricing: Pricing | None = None) -> UsageRules | None:
    """The ``UsageRules`` of a route with provider ``rules`` and endpoint ``pricing``; ``None`` when there is
    nothing to do (no prompt and completion price, and a provider whose usage is already spec 004's)."""
    priced = pricing is not None and pricing.prompt is not None and pricing.completion is not None
    if not priced and not rules.reasoning_outside_completion and not rules.cost_in_usd_ticks:
        return None
    return UsageRules(pricing if priced else None, rules.reasoning_outside_completion, rules.cost_in_usd_ticks)


def _count(value: Any) -> int | None:
    """A token count: a non-negative ``int`` (not a ``bool``), else ``None``."""
    return value if type(value) is int and value >= 0 else None


def _detail(usage: dict[str, Any], details: str, name: str) -> int:
    """``usage[details][name]`` as a count, 0 when absent or not a count."""
    inner = usage.get(details)
    return (_count(inner.get(name)) or 0) if isinstance(inner, dict) else 0


def _usd(value: Decimal) -> float:
    """A USD amount as a JSON number: the float nearest to the exact decimal."""
    return float(value)


def _rate(price: float | None) -> Decimal:
    """A catalog price (a float read from TOML) as the decimal it was written as (``0.000003``, not the binary
    float's expansion)."""
    return Decimal(repr(price)) if price is not None else Decimal(0)


def _priced_cost(pricing: Pricing, prompt: int, cached: int, completion: int, reasoning: int) -> dict[str, Any]:
    cached = min(cached, prompt)
    cache_rate = _rate(pricing.cache_read if pricing.cache_read is not None else pricing.prompt)
    prompt_cost = (prompt - cached) * _rate(pricing.prompt) + cached * cache_rate
    reasoning = min(reasoning, completion)
    reasoning_rate = _rate(pricing.reasoning if pricing.reasoning is not None else pricing.completion)
    completions_cost = (completion - reasoning) * _rate(pricing.completion) + reasoning * reasoning_rate
    total = prompt_cost + completions_cost
    return {
        "cost": _usd(total),
        "cost_details": {
            "upstream_inference_cost": _usd(total),
            "upstream_inference_prompt_cost": _usd(prompt_cost),
            "upstream_inference_completions_cost": _usd(completions_cost),
        },
    }


def account_usage(usage: Any, rules: UsageRules) -> bool:
    """Make one chat ``usage`` object spec 004's, in place (the steps are this module's docstring).

    Args:
        usage: a chat completion's or a chunk's ``usage`` (anything that is not an object with integer
            ``prompt_tokens`` and ``completion_tokens`` is left alone).
        rules: the route's ``UsageRules``.

    Returns:
        Whether ``usage`` changed.
    """
    if not isinstance(usage, dict):
        return False
    prompt = _count(usage.get("prompt_tokens"))
    completion = _count(usage.get("completion_tokens"))
    if prompt is None or completion is None:
        return False
    reasoning = _detail(usage, "completion_tokens_details", "reasoning_tokens")
    basis: TokenCountBasis = "provider_native"
    changed = False
    if rules.reasoning_outside_completion and reasoning:
        total = usage.get("total_tokens")
        if total is None or (_count(total) is not None and total == prompt + completion + reasoning):
            completion += reasoning
            usage["completion_tokens"] = completion
            basis = "provider_native_reasoning_added"
            changed = True
    if usage.get("cost") is None:
        ticks = _count(usage.get("cost_in_usd_ticks")) if rules.cost_in_usd_ticks else None
        if ticks is not None:
            cost = _usd(Decimal(ticks) / USD_TICKS)
            _set_cost(usage, {"cost": cost, "cost_details": {"upstream_inference_cost": cost}})
            changed = True
        elif rules.pricing is not None:
            cached = _detail(usage, "prompt_tokens_details", "cached_tokens")
            _set_cost(usage, _priced_cost(rules.pricing, prompt, cached, completion, reasoning))
            changed = True
    if changed and (basis != "provider_native" or "token_count_basis" not in usage):
        usage["token_count_basis"] = basis
    return changed


def _set_cost(usage: dict[str, Any], cost: dict[str, Any]) -> None:
    """Write ``cost`` and ``cost_details``; keys of a ``cost_details`` the upstream sent that numi_mw does not
    write stay."""
    usage["cost"] = cost["cost"]
    details = usage.get("cost_details")
    usage["cost_details"] = {**details, **cost["cost_details"]} if isinstance(details, dict) else cost["cost_details"]


def account_completion(data: Any, rules: UsageRules) -> bool:
    """``account_usage`` on the ``usage`` of a decoded chat completion or chunk ``data``; whether it changed."""
    return isinstance(data, dict) and account_usage(data.get("usage"), rules)
