"""Plots of a run's JSON lines: ``python -m benchmarks.plots RUN.jsonl`` writes PNGs beside the file.

- ``throughput.png``: requests/s against connections (``wrk``), one line per target (direct, pass-through,
  numi_mw, LiteLLM, Portkey), buffered and streamed side by side;
- ``p99.png``: wrk's p99 latency against connections, the same lines;
- ``latency.png``: p50 and p99 of the time to the first event and of the inter-event gaps against concurrent
  paced streams, one line per target.

The data are the ``table`` entries in the ``extra`` of the ``load.*.no_collapse`` and ``latency.gap.p99_added``
rows. Needs matplotlib; ``draw`` uses the peer environment's (``NUMI_MW_PEERS_PY``) when this interpreter has none.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

COLORS = {
    "direct": "#777777",
    "pass-through": "#1f77b4",
    "relay": "#ff7f0e",
    "numi_mw": "#d62728",
    "litellm": "#2ca02c",
    "portkey": "#9467bd",
}


def _records(path: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if record.get("kind") == "measurement" and record["skipped"] is None:
            out[record["name"]] = record
    return out


def render(path: Path) -> list[Path]:
    """Write the PNGs for the run in ``path`` beside it; returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = _records(path)
    written: list[Path] = []
    load = {kind: rows.get(f"load.{kind}.no_collapse") for kind in ("json", "sse")}
    for figure, field, label in (("throughput", "rate", "requests/s"), ("p99", "p99_ms", "p99 latency (ms)")):
        if not any(load.values()):
            break
        fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=False)
        for ax, (kind, row) in zip(axes, load.items(), strict=True):
            ax.set_title("buffered completion" if kind == "json" else "40-event stream")
            ax.set_xscale("log", base=2)
            ax.set_xlabel("concurrent connections (wrk)")
            ax.set_ylabel(label)
            ax.set_yscale("log")  # the direct upstream answers ten times what any proxy does
            for target, series in (row or {}).get("extra", {}).get("table", {}).items():
                if not series:
                    continue
                xs = sorted(int(c) for c in series)
                ax.plot(xs, [series[str(c)][field] for c in xs], marker="o", label=target, color=COLORS.get(target))
            ax.legend(fontsize=8)
        fig.tight_layout()
        out = path.with_name(f"{figure}.png")
        fig.savefig(out, dpi=80)
        plt.close(fig)
        written.append(out)
    latency = rows.get("latency.gap.p99_added")
    if latency is not None:
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        for ax, key, title in (
            (axes[0], "first_event_ms", "time to the first event"),
            (axes[1], "gap_ms", "inter-event gap (paced 20 ms)"),
        ):
            ax.set_title(title)
            ax.set_xlabel("concurrent paced streams")
            ax.set_ylabel("ms")
            ax.set_xscale("log")
            ax.set_yscale("log")  # a slow peer's seconds would flatten the others' milliseconds
            for target, series in latency["extra"]["table"].items():
                xs = sorted(int(c) for c in series if series[c].get(key))
                for pct, style in (("p50", "--"), ("p99", "-")):
                    ys = [series[str(c)][key][pct] for c in xs]
                    ax.plot(xs, ys, style, marker="o", color=COLORS.get(target), label=f"{target} {pct}")
            ax.legend(fontsize=7)
        fig.tight_layout()
        out = path.with_name("latency.png")
        fig.savefig(out, dpi=80)
        plt.close(fig)
        written.append(out)
    return written


def draw(path: Path) -> list[str]:
    """Plot the run in ``path`` with this interpreter's matplotlib or the peer environment's; notices to print."""
    if importlib.util.find_spec("matplotlib") is not None:
        return [f"plot: {p}" for p in render(path)]
    peer = os.environ.get("NUMI_MW_PEERS_PY")
    python = Path(peer) / "bin" / "python" if peer else None
    if python is None or not python.exists():
        return ['skipped: plots: matplotlib not installed (eval "$(.ci/build-peer-envs)" provides it)']
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run(
        [str(python), "-m", "benchmarks.plots", str(path)], env=env, capture_output=True, timeout=300, check=False
    )
    if out.returncode != 0:
        return [f"plots failed: {out.stderr.decode(errors='replace')[-500:]}"]
    return out.stdout.decode().splitlines()


def main() -> int:
    for written in render(Path(sys.argv[1])):
        print(f"plot: {written}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
