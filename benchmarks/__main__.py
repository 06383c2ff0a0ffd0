"""``python -m benchmarks``: run the benchmark harness from the repository root (see ``benchmarks/README.md``)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from functools import partial
from pathlib import Path

from benchmarks import inprocess, load, loopback, memory, plots, report
from benchmarks.config import Config, make_config
from benchmarks.timing import Measurement
from numi_mw.upstream import DEFAULT_UPSTREAM_TRANSPORT

CASES = (
    "asgi",
    "request",
    "request-memory",
    "stream",
    "stream-memory",
    "bounds-memory",
    "sidecar",
    "litellm",
    "load",
    "latency",
    "scale",
)
"""Case names for ``--cases``, in the order they run."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="numi_mw benchmarks: ratios against the bare app, a stdlib-json baseline and other proxies.",
    )
    parser.add_argument("--quick", action="store_true", help="few rounds and small sizes (one to two minutes)")
    parser.add_argument("--json", action="store_true", help="JSON lines on stdout (the table goes to stderr)")
    parser.add_argument(
        "--cases",
        type=lambda value: [name.strip() for name in value.split(",") if name.strip()],
        default=list(CASES),
        metavar="NAME,...",
        help=f"cases to run (default: all): {', '.join(CASES)}",
    )
    parser.add_argument("--rounds", type=int, default=None, metavar="N", help="interleaved rounds of every case")
    parser.add_argument(
        "--upstream-transport",
        default=DEFAULT_UPSTREAM_TRANSPORT,
        metavar="NAME",
        help="numi-mw serve --upstream-transport of every sidecar started: aiohttp (default) or httpcore",
    )
    parser.add_argument(
        "--json-out",
        type=Path,
        default=None,
        metavar="PATH",
        help="also write the JSON lines to PATH, and the plots (PNG, needs matplotlib) beside it",
    )
    return parser


def _runners(
    config: Config, say: Callable[[str], None], cases: Sequence[str]
) -> list[tuple[str, Callable[[], list[Measurement]]]]:
    runners: list[tuple[str, Callable[[], list[Measurement]]]] = [
        ("asgi", partial(inprocess.run_asgi, config)),
        ("request", partial(inprocess.run_request, config)),
        ("request-memory", partial(memory.run_request_memory, config)),
        ("stream", partial(inprocess.run_stream, config)),
        ("stream-memory", partial(memory.run_stream_memory, config)),
        ("bounds-memory", partial(memory.run_bounds_memory, config)),
    ]
    if "sidecar" in cases or "litellm" in cases:
        runners.append(
            (
                "sidecar" if "sidecar" in cases else "litellm",
                partial(loopback.run_loopback, config, sidecar="sidecar" in cases, litellm="litellm" in cases, say=say),
            )
        )
    runners += [
        ("load", partial(load.load_rows, config, say)),
        ("latency", partial(load.latency_rows, config, say)),
        ("scale", partial(load.scale_rows, config, say)),
    ]
    return [(name, run) for name, run in runners if name in cases]


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    unknown = [name for name in args.cases if name not in CASES]
    if unknown:
        _parser().error(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(CASES)}")
    try:
        config = make_config(quick=args.quick, rounds=args.rounds, upstream_transport=args.upstream_transport)
    except ValueError as exc:
        _parser().error(str(exc))
    terminal = sys.stderr if args.json else sys.stdout

    def say(text: str) -> None:
        print(text, file=terminal, flush=True)

    info = report.machine()
    if args.json_out is not None:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
    out_file = args.json_out.open("w") if args.json_out is not None else None

    def emit(record: dict[str, object]) -> None:
        line = json.dumps(record)
        if args.json:
            print(line, flush=True)
        if out_file is not None:
            out_file.write(line + "\n")
            out_file.flush()

    emit({**info, "quick": config.quick, "config": _config_json(config)})
    say(report.describe_machine(info))
    say(f"numi-mw serve --upstream-transport {config.upstream_transport}")
    measurements: list[Measurement] = []
    started = time.perf_counter()
    for name, run in _runners(config, say, args.cases):
        case_start = time.perf_counter()
        say(f"== {name}")
        results = run()
        for measurement in results:
            emit(measurement.to_json())
        measurements += results
        say(f"   {time.perf_counter() - case_start:.1f} s")
    elapsed = time.perf_counter() - started
    say("")
    say(report.table(measurements))
    say("")
    say(report.titles(measurements))
    mode = "--quick" if config.quick else "default"
    say(f"\n{mode} run, {elapsed:.0f} s; ratios are medians of interleaved rounds, absolute times are not asserted")
    emit({"kind": "summary", "seconds": elapsed, "measurements": len(measurements)})
    if out_file is not None:
        out_file.close()
        for line in plots.draw(args.json_out):
            say(line)
    return 0


def _config_json(config: Config) -> dict[str, object]:
    return asdict(config)


if __name__ == "__main__":
    sys.exit(main())
