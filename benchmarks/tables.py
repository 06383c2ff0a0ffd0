"""The figures of a run as Markdown: ``python -m benchmarks.tables RUN.jsonl [--readme benchmarks/README.md]``.

Reads the JSON lines a run wrote (``python -m benchmarks --json-out RUN.jsonl``) and prints one table of every
measurement (its name, what it compares, the median ratio or value, the target, pass/miss/skipped and each side's
median), headed by the machine and the commit. With ``--readme`` it writes that text into the file between the
lines ``<!-- figures:start -->`` and ``<!-- figures:end -->`` instead, so that the page shows the run its plots
come from.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.report import figure

START = "<!-- figures:start -->"
END = "<!-- figures:end -->"


def _number(value: float) -> str:
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _value(row: dict[str, Any]) -> str:
    if row.get("ratio") is None:
        return "-"
    unit = row.get("unit") or "x"
    text = _number(float(row["ratio"]))
    return f"{text}\u00d7" if unit == "x" else f"{text} {unit.strip()}"  # the multiplication sign


def _sides(row: dict[str, Any]) -> str:
    sides = [f"{side['name']} {figure(side['median'], side['unit'])}" for side in row.get("sides") or []]
    return "; ".join(sides).replace("|", "/")


def markdown(path: Path) -> str:
    """The Markdown text of the run in ``path`` (JSON lines: a ``machine`` line, ``measurement`` lines, a
    ``summary`` line)."""
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    machine: dict[str, Any] = next((r for r in records if r.get("kind") == "machine"), {})
    summary: dict[str, Any] = next((r for r in records if r.get("kind") == "summary"), {})
    packages = ", ".join(f"{name} {version}" for name, version in (machine.get("packages") or {}).items() if version)
    lines = [
        f"Run at commit `{machine.get('commit', '?')}` on {machine.get('cpu', '?')}, "
        f"{machine.get('cores', '?')} cores, "
        f"Python {machine.get('python', '?')}; {packages}; {_number(float(summary.get('seconds', 0)))} s in all"
        f"{' (--quick)' if machine.get('quick') else ''}.",
        "",
        "| measurement | what it compares | median | target | result | sides (medians) |",
        "|---|---|---|---|---|---|",
    ]
    for row in records:
        if row.get("kind") != "measurement":
            continue
        result = "skipped" if row.get("skipped") else ("pass" if row.get("pass") else "miss")
        sides = row["skipped"] if row.get("skipped") else _sides(row)
        title = str(row.get("title", "")).replace("|", "/")
        lines.append(f"| `{row['name']}` | {title} | {_value(row)} | {row.get('target', '')} | {result} | {sides} |")
    return "\n".join(lines) + "\n"


def into_readme(readme: Path, text: str) -> None:
    """Replace what lies between ``START`` and ``END`` in ``readme`` with ``text``.

    Raises:
        ValueError: ``readme`` lacks either marker line.
    """
    page = readme.read_text()
    if START not in page or END not in page:
        raise ValueError(f"{readme} has no {START} ... {END} lines to write the figures between")
    head, rest = page.split(START, 1)
    _, tail = rest.split(END, 1)
    readme.write_text(f"{head}{START}\n{text}{END}{tail}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tables", description=__doc__)
    parser.add_argument("run", type=Path, help="the JSON lines of a run (python -m benchmarks --json-out PATH)")
    parser.add_argument("--readme", type=Path, help="write the table into this page between its figure markers")
    args = parser.parse_args(argv)
    text = markdown(args.run)
    if args.readme is None:
        sys.stdout.write(text)
        return 0
    try:
        into_readme(args.readme, text)
    except ValueError as error:
        sys.stderr.write(f"python -m benchmarks.tables: {error}\n")
        return 2
    print(f"figures written into {args.readme}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
