"""``python -m benchmarks.tables``: a run's JSON lines as the Markdown table of benchmarks/README.md."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import tables

MACHINE = {
    "kind": "machine",
    "cpu": "Test CPU",
    "cores": 2,
    "python": "3.11.7",
    "packages": {"numi_mw": "0.1.0", "litellm": None},
    "commit": "abc1234",
    "quick": False,
}
PASSED = {
    "kind": "measurement",
    "name": "load.json.litellm.c1",
    "title": "numi_mw req/s / litellm's at 1 connections",
    "ratio": 11.6,
    "unit": "x",
    "target": ">= 1",
    "pass": True,
    "skipped": None,
    "sides": [
        {"name": "numi_mw", "median": 459.7, "unit": "req/s"},
        {"name": "litellm", "median": 39.6, "unit": "req/s"},
    ],
}
MISSED = {
    "kind": "measurement",
    "name": "latency.gap.p99_added",
    "title": "p99 added | per gap",
    "ratio": 9.73,
    "unit": " ms",
    "target": "<= 1",
    "pass": False,
    "skipped": None,
    "sides": [{"name": "numi_mw p99", "median": 0.03827, "unit": "s/op"}],
}
SKIPPED = {
    "kind": "measurement",
    "name": "load.sse.portkey.c1",
    "title": "numi_mw req/s / portkey's",
    "ratio": None,
    "target": ">= 1",
    "pass": None,
    "skipped": "it answers a stream with 500",
    "sides": [],
}
SUMMARY = {"kind": "summary", "seconds": 500.8, "measurements": 3}

EXPECTED = (
    "Run at commit `abc1234` on Test CPU, 2 cores, Python 3.11.7; numi_mw 0.1.0; 501 s in all.\n"
    "\n"
    "| measurement | what it compares | median | target | result | sides (medians) |\n"
    "|---|---|---|---|---|---|\n"
    "| `load.json.litellm.c1` | numi_mw req/s / litellm's at 1 connections | 11.6\u00d7 | >= 1 | pass "
    "| numi_mw 460 req/s; litellm 40 req/s |\n"
    "| `latency.gap.p99_added` | p99 added / per gap | 9.73 ms | <= 1 | miss | numi_mw p99 38.27 ms |\n"
    "| `load.sse.portkey.c1` | numi_mw req/s / portkey's | - | >= 1 | skipped | it answers a stream with 500 |\n"
)


def _run(tmp_path: Path) -> Path:
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in (MACHINE, PASSED, MISSED, SKIPPED, SUMMARY)))
    return path


def test_a_run_becomes_one_table_headed_by_its_machine_and_commit(tmp_path: Path) -> None:
    assert tables.markdown(_run(tmp_path)) == EXPECTED


def test_the_table_goes_between_the_readme_markers_and_replaces_what_was_there(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"# Benchmarks\n\n{tables.START}\nold table\n{tables.END}\n\nafter\n")
    assert tables.main([str(_run(tmp_path)), "--readme", str(readme)]) == 0
    assert readme.read_text() == f"# Benchmarks\n\n{tables.START}\n{EXPECTED}{tables.END}\n\nafter\n"


def test_a_readme_without_the_markers_is_refused_and_left_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# Benchmarks\n")
    assert tables.main([str(_run(tmp_path)), "--readme", str(readme)]) == 2
    assert readme.read_text() == "# Benchmarks\n"
    assert f"has no {tables.START} ... {tables.END} lines" in capsys.readouterr().err
