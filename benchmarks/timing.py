"""Interleaved rounds, statistics and the measurement record every case produces.

A case hands ``interleave`` its contenders as *batch runners*: ``run(n)`` does the operation ``n`` times and
returns the seconds it took. Each contender's ``n`` is calibrated once so that a batch lasts about
``batch_seconds``; then every round runs one batch of each contender, in an order that rotates from round to
round, so slow drift of a noisy machine (frequency scaling, neighbours) hits all contenders alike. Ratios are
taken per round between contenders of the same round, and their median and spread are reported.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

BatchRunner = Callable[[int], float]
"""``run(n) -> seconds``: do the operation ``n`` times, return the elapsed wall time."""

Direction = Literal["<=", ">="]

MAX_BATCH = 1_000_000
"""Upper bound on the operations in one batch, whatever the calibration says."""


@dataclass(frozen=True, slots=True)
class Spread:
    """Median and spread of a sample."""

    median: float
    q1: float
    q3: float
    min: float
    max: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        if not values:
            raise ValueError("no values")
        ordered = sorted(values)
        if len(ordered) >= 2:
            q1, _, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
        else:
            q1 = q3 = ordered[0]
        return cls(statistics.median(ordered), q1, q3, ordered[0], ordered[-1], len(ordered))


@dataclass(frozen=True, slots=True)
class Side:
    """One contender of a measurement: its name, the median of its figure and the figure's unit."""

    name: str
    median: float
    unit: str
    q1: float | None = None
    q3: float | None = None


@dataclass(slots=True)
class Measurement:
    """One row of the report: a ratio, its target and the contenders' absolute figures.

    Attributes:
        name: stable measurement name (``asgi.rewrite_2kb``, ``request.history_200kb``, ...).
        title: what is compared, for the table.
        ratio: the median ratio (``None`` when skipped).
        spread: median, quartiles and extremes of the per-round ratios.
        direction: ``<=`` when the ratio must not exceed ``target``, ``>=`` when it must reach it.
        target: the target the row must meet (its value, in ``unit``).
        sides: the contenders' medians (absolute figures: reported, never asserted).
        extra: further figures (sizes, errors, counts).
        skipped: why the measurement did not run, or ``None``.
        unit: what ``ratio`` and ``target`` count: ``x`` for a ratio, `` ms`` for a time (a latency row).
    """

    name: str
    title: str
    ratio: float | None
    spread: Spread | None
    direction: Direction
    target: float
    sides: list[Side] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    skipped: str | None = None
    unit: str = "x"

    @property
    def passed(self) -> bool | None:
        if self.ratio is None:
            return None
        return self.ratio <= self.target if self.direction == "<=" else self.ratio >= self.target

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "measurement",
            "name": self.name,
            "title": self.title,
            "ratio": self.ratio,
            "spread": asdict(self.spread) if self.spread is not None else None,
            "target": f"{self.direction} {self.target:g}",
            "unit": self.unit,
            "direction": self.direction,
            "target_value": self.target,
            "pass": self.passed,
            "skipped": self.skipped,
            "sides": [asdict(side) for side in self.sides],
            "extra": self.extra,
        }


def calibrate(run: BatchRunner, batch_seconds: float, limit_seconds: float = 5.0) -> int:
    """The batch size that makes ``run`` last about ``batch_seconds`` (at least 1, at most ``MAX_BATCH``)."""
    n = 1
    deadline = time.perf_counter() + limit_seconds
    while True:
        elapsed = run(n)
        if elapsed >= batch_seconds / 4 or n >= MAX_BATCH or time.perf_counter() > deadline:
            break
        n *= 4
    per_op = elapsed / n
    return max(1, min(MAX_BATCH, round(batch_seconds / per_op))) if per_op > 0 else MAX_BATCH


def interleave(
    contenders: Mapping[str, BatchRunner], rounds: int, batch_seconds: float, *, warmup: bool = True
) -> dict[str, list[float]]:
    """Run ``rounds`` interleaved rounds; returns each contender's seconds per operation, round by round."""
    names = list(contenders)
    if warmup:
        for name in names:
            contenders[name](1)
    sizes = {name: calibrate(contenders[name], batch_seconds) for name in names}
    per_op: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            gc.collect()
            elapsed = contenders[name](sizes[name])
            per_op[name].append(elapsed / sizes[name])
    return per_op


def ratios(numerator: Sequence[float], denominator: Sequence[float]) -> list[float]:
    """Per-round ratios ``numerator[i] / denominator[i]``."""
    return [a / b for a, b in zip(numerator, denominator, strict=True) if b > 0]


def timed_ratio(
    name: str,
    title: str,
    samples: Mapping[str, Sequence[float]],
    numerator: str,
    denominator: str,
    direction: Direction,
    target: float,
    *,
    extra: dict[str, Any] | None = None,
    others: Sequence[str] = (),
) -> Measurement:
    """A measurement from per-operation times: the ratio ``numerator / denominator`` of the same rounds.

    ``others`` are further contenders of the same rounds shown beside the two (reference points such as the
    floor of a design), not part of the ratio."""
    values = ratios(samples[numerator], samples[denominator])
    spread = Spread.of(values)
    sides = []
    for side in (numerator, denominator, *others):
        s = Spread.of(samples[side])
        sides.append(Side(side, s.median, "s/op", s.q1, s.q3))
    return Measurement(name, title, spread.median, spread, direction, target, sides, extra or {})


def sync_runner(operation: Callable[[], object]) -> BatchRunner:
    """A batch runner for a synchronous operation."""

    def run(n: int) -> float:
        start = time.perf_counter()
        for _ in range(n):
            operation()
        return time.perf_counter() - start

    return run
