"""Effort to thinking budget (spec 004 "Output limits and billing").

A native adapter that turns an effort hint into a numeric thinking budget caps that generated budget below
the total output limit; an explicit ``reasoning.max_tokens`` is never changed (the upstream validates it).
"""

from __future__ import annotations

EFFORT_BUDGETS: dict[str, int] = {
    "minimal": 1024,
    "low": 2048,
    "medium": 8192,
    "high": 16384,
    "xhigh": 32768,
    "max": 63999,
}
"""Thinking budget in tokens for each named effort (Anthropic's minimum budget is 1,024 tokens)."""


def positive_tokens(value: object) -> int | None:
    """``value`` as a count of tokens when it is a positive whole number as JSON writes one (``1500``, or ``1500.0``
    and ``1e3``, which become ints), else ``None`` (a boolean, a fraction, zero or less, any other type)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def output_limit(body: dict[str, object]) -> int | None:
    """The request's total output limit in tokens: the smaller of ``max_tokens`` and ``max_completion_tokens``
    where each is a positive whole number (``positive_tokens``; a ``null`` one counts as absent), else ``None``
    (no limit known)."""
    limits = [
        tokens
        for value in (body.get("max_tokens"), body.get("max_completion_tokens"))
        if (tokens := positive_tokens(value)) is not None
    ]
    return min(limits) if limits else None


DEFAULT_EFFORT = "medium"
MIN_BUDGET = 1024


def generated_budget(effort: str, max_tokens: object) -> int | None:
    """The thinking budget (tokens) generated for ``effort``, capped below ``max_tokens``.

    Args:
        effort: a key of ``EFFORT_BUDGETS``.
        max_tokens: the request's total output limit in tokens (``output_limit``);
            anything but a positive ``int`` means no limit is known.

    Returns:
        ``min(EFFORT_BUDGETS[effort], max_tokens - 1)``, or ``None`` when that is below ``MIN_BUDGET`` (the
        output limit leaves no room for thinking).

    Raises:
        KeyError: ``effort`` has no budget.
    """
    budget = EFFORT_BUDGETS[effort]
    if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) and max_tokens > 0:
        budget = min(budget, max_tokens - 1)
    return budget if budget >= MIN_BUDGET else None
