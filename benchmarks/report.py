"""The machine description and the terminal table."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import numi_mw.core
from benchmarks.timing import Measurement

PACKAGES = ("numi_mw", "msgspec", "starlette", "httpx", "uvicorn", "anyio", "h11", "httptools", "uvloop", "litellm")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict[str, Any]:
    """CPU model, cores, OS, Python and the versions of the packages on the measured path."""
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {
        "kind": "machine",
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "usable_cores": affinity,
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "packages": versions,
        "commit": _commit(),
        "core": numi_mw.core.build(),
    }


def _commit() -> str | None:
    """The repository's commit (short hash, ``+dirty`` when the work tree has changes), or ``None``."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, timeout=10, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain"], capture_output=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.decode().strip() + ("+dirty" if dirty.stdout.strip() else "")


def describe_machine(info: dict[str, Any]) -> str:
    packages = ", ".join(f"{k} {v}" for k, v in info["packages"].items() if v is not None)
    return (
        f"machine: {info['cpu']}, {info['cores']} cores ({info['usable_cores']} usable), {info['os']}\n"
        f"python {info['python']} ({info['implementation']}); {packages}; commit {info.get('commit')}; "
        f"numi_mw core: {info.get('core')}"
    )


def figure(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit in ("s/op", "s/event"):
        if value >= 1e-3:
            return f"{value * 1e3:.2f} ms"
        return f"{value * 1e6:.2f} us"
    if unit == "bytes":
        return f"{value / (1024 * 1024):.1f} MiB" if value >= 1024 * 1024 else f"{value / 1024:.1f} KiB"
    if unit == "req/s":
        return f"{value:.0f} req/s"
    return f"{value:g} {unit}"


def _ratio(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}x" if value < 100 else f"{value:.0f}x"


def table(measurements: list[Measurement]) -> str:
    """The report: one row per measurement (ratio, spread, target, result), then the medians."""
    header = ("measurement", "ratio", "IQR (min-max)", "target", "result", "medians")
    rows: list[tuple[str, ...]] = []
    for m in measurements:
        if m.skipped is not None:
            rows.append((m.name, "-", "-", f"{m.direction} {m.target:g}x", "skipped", m.skipped))
            continue
        spread = "-"
        if m.spread is not None and m.spread.n > 1:
            s = m.spread
            spread = f"{s.q1:.2f}-{s.q3:.2f} ({s.min:.2f}-{s.max:.2f})"
        result = {True: "pass", False: "MISS", None: "-"}[m.passed]
        medians = "; ".join(f"{side.name} {figure(side.median, side.unit)}" for side in m.sides)
        unit = "" if m.name.startswith("stream.memory") and not m.name.endswith(".time") else m.unit
        ratio = f"{m.ratio:.2f}{unit}" if unit != "x" and m.ratio is not None else _ratio(m.ratio)
        rows.append((m.name, ratio, spread, f"{m.direction} {m.target:g}{unit}", result, medians))
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    lines = []
    for row in [header, *rows]:
        cells = [cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    lines.insert(1, "-" * min(160, len(lines[0]) + 40))
    return "\n".join(lines)


def titles(measurements: list[Measurement]) -> str:
    """What each row compares (the ratio is numerator / denominator of its title)."""
    return "\n".join(f"  {m.name}: {m.title}" for m in measurements)
