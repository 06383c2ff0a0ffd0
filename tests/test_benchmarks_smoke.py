"""``python -m benchmarks --quick --json`` works: exit 0, JSON lines, every measurement named (numbers not asserted)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

EXPECTED = {
    "asgi.rewrite_2kb",
    "asgi.plain_2kb",
    "request.history_200kb",
    "request.body_8mb",
    "request.body_8mb.memory",
    "stream.spec_2000",
    "stream.spec_2000.vs_split",
    "stream.spec_2000.vs_floor",
    "stream.openrouter_2000",
    "stream.openrouter_2000.vs_floor",
    "stream.think_2000",
    "stream.accumulate.spec_2000",
    "stream.think_start.content",
    "stream.think_start.auto",
    "stream.think_start.reasoning",
    "stream.think_switch",
    "stream.memory",
    "stream.memory.time",
    "bounds.sse_line_64mb.memory",
    "bounds.gzip_bomb.memory",
    "sidecar.json",
    "sidecar.sse",
    "litellm.json",
    "litellm.sse",
    "load.json.no_collapse",
    "load.sse.no_collapse",
    "load.json.portkey.c64",
    "load.json.portkey.c64.p99",
    "load.sse.litellm.c64",
    "latency.first_event.p99_added",
    "latency.gap.p99_added",
    "latency.gap.p99_added.vs_litellm",
    "latency.gap.p99_added.vs_portkey",
    "latency.think_start.content",
    "latency.think_start.reasoning",
    "latency.think_start.auto",
    "latency.think_start.content.hold_back",
    "latency.think_start.reasoning.hold_back",
    "latency.think_start.auto.hold_back",
    "scale.memory_per_stream",
    "scale.rate_with_streams",
    "scale.workers_2_vs_1",
    "scale.access_log",
}


def test_quick_run_prints_json_lines_for_every_measurement() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--json"],
        cwd=REPO,
        capture_output=True,
        timeout=420,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")[-4000:]
    lines = [line for line in result.stdout.decode().splitlines() if line.strip()]
    records: list[dict[str, Any]] = [json.loads(line) for line in lines]
    assert all(isinstance(record, dict) for record in records)

    machines = [r for r in records if r.get("kind") == "machine"]
    assert len(machines) == 1
    assert {"cpu", "cores", "python", "packages"} <= machines[0].keys()
    assert machines[0]["packages"]["numi_mw"]
    assert machines[0]["core"] in ("pure Python", "compiled (mypyc)")

    measurements = {r["name"]: r for r in records if r.get("kind") == "measurement"}
    missing = EXPECTED - measurements.keys()
    assert not missing, f"measurements missing: {sorted(missing)}"
    for record in measurements.values():
        assert {"ratio", "target", "pass", "sides", "spread"} <= record.keys()
        if record["skipped"] is None:
            assert isinstance(record["ratio"], float)
            assert isinstance(record["pass"], bool)
        else:
            assert record["ratio"] is None
    if measurements["litellm.json"]["skipped"] is not None:
        assert "skipped: litellm not installed" in result.stderr.decode()
    stderr = result.stderr.decode()
    if shutil.which("wrk") is None:  # the rows wrk drives are skipped with a notice, never failed
        assert "skipped: wrk not installed" in stderr
        assert measurements["load.json.no_collapse"]["skipped"] == "wrk not installed"
    if measurements["latency.gap.p99_added.vs_litellm"]["skipped"] is not None:
        assert "skipped: litellm: no peer environment" in stderr or "NUMI_MW_PEERS_PY" in os.environ
    for short in ("first_event", "gap"):  # each p99 row shows the floor of the sidecar's stack beside it
        row = measurements[f"latency.{short}.p99_added"]
        assert [side["name"] for side in row["sides"]] == ["numi_mw p99", "direct p99", "relay floor p99"]
        assert {"direct", "relay", "numi_mw"} <= row["extra"]["table"].keys()
    assert records[-1]["kind"] == "summary"
