"""Render the client matrix's report as the Results section of ``docs/clients.md``.

``NUMI_MW_CLIENTS_REPORT=FILE`` makes the tier write every check of every row, direct and through numi_mw, as
JSON; ``python -m tests.clients.report FILE`` prints one table per client: the checks each path fails ("passes"
when none), with FAILS where the path through numi_mw fails a check the direct path passes; then one table of the
rows also run through a sidecar with a replay store, with FAILS where that path fails a check the plain sidecar
passes.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from tests.test_client_matrix import CLIENTS, ROWS

LONGEST = 90
"""Characters of a failure's reason shown in a cell."""


def cell(checks: dict[str, Any], worse: set[str]) -> str:
    failed = [(name, reason) for name, reason in checks.items() if reason is not None]
    if not failed:
        return "passes"
    parts = []
    for name, reason in failed:
        text = " ".join(str(reason).split())
        text = text if len(text) <= LONGEST else text[: LONGEST - 1] + "…"
        parts.append(f"{name.removeprefix('history: ')}: {text}".replace("|", "\\|"))
    mark = "**FAILS**: " if worse else ""
    return mark + "; ".join(parts)


def render(report: dict[str, dict[str, dict[str, Any]]]) -> str:
    lines = [
        "## Results",
        "",
        'Each cell lists the checks that fail (or "passes"); the direct column is what the client loses by itself.',
        "",
    ]
    for client in CLIENTS:
        rows = [row for row in ROWS if row.client is client and row.id in report]
        if not rows:
            continue
        lines += [f"### {client.name}", "", "| recording | | direct | through numi_mw |", "|---|---|---|---|"]
        for row in sorted(rows, key=lambda r: (r.recording.name, r.id)):
            kind = "break mid-stream" if row.error else ("streamed" if row.recording.stream else "buffered")
            direct = report[row.id].get("direct", {})
            through = report[row.id].get("through", {})
            worse = {name for name, reason in through.items() if reason is not None and direct.get(name) is None}
            lines.append(f"| {row.recording.name} | {kind} | {cell(direct, set())} | {cell(through, worse)} |")
        lines.append("")
    return "\n".join(lines + store_section(report))


def store_section(report: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    """The rows run a third time, through a sidecar with a replay store, beside their other two paths (FAILS
    where the store path fails a check the plain sidecar passes)."""
    rows = [row for row in ROWS if "store" in report.get(row.id, {})]
    if not rows:
        return []
    lines = [
        "### Through numi_mw with a replay store",
        "",
        "The clients that drop OpenRouter's signatures and encrypted data, on OpenRouter's recordings, through",
        "`numi-mw serve --replay-store sqlite:///PATH` ([replay-store.md](replay-store.md)):",
        "",
        "| client | recording | | direct | through numi_mw | through numi_mw with a replay store |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        kind = "streamed" if row.recording.stream else "buffered"
        direct = report[row.id].get("direct", {})
        through = report[row.id].get("through", {})
        store = report[row.id]["store"]
        worse = {name for name, reason in store.items() if reason is not None and through.get(name) is None}
        cells = [row.client.name, row.recording.name, kind, cell(direct, set()), cell(through, set())]
        lines.append(f"| {' | '.join(cells)} | {cell(store, worse)} |")
    lines.append("")
    return lines


if __name__ == "__main__":
    with open(sys.argv[1]) as file:
        print(render(json.load(file)))
