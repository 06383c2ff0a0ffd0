"""Instructions per operation, counted by callgrind: figures that do not move with the machine's load.

``python -m benchmarks.instructions`` runs each workload under ``valgrind --tool=callgrind`` twice, for ``N`` and
``2N`` iterations, and prints the difference divided by ``N``: the instructions one iteration costs, start-up
and imports cancelled out. ``PYTHONHASHSEED`` is fixed, so a second run gives the same figures to within a
fraction of a percent. Compare two checkouts by running it in each (the workloads use only public names).

Workloads (``--workloads`` picks some):

- ``request.plain_2kb``, ``request.rewrite_2kb``, ``request.history_200kb``: ``prepare_request`` on the harness's
  payloads for an OpenRouter route;
- ``request.body_8mb``: ``prepare_request`` on the 8 MB body;
- ``floor.pass_200kb``, ``floor.pass_8mb``: one msgspec validating pass over those bodies that builds nothing
  (the floor of the request rows, ``inprocess.FLOOR_PASS``);
- ``asgi.plain_2kb``, ``asgi.rewrite_2kb``: one request through ``ReasoningMiddleware`` around the bare app;
- ``floor.asgi_2kb``: one plain 2 KB request through the replay-only middleware (``inprocess.ReplayOnly``), the
  floor the middleware rows are measured over; ``floor.asgi_rewrite_2kb``: the same with the 2 KB body that needs
  a rewrite (the floor of ``asgi.rewrite_2kb.over_floor``);
- ``stream.spec_2000``: the 2,000-event spec-shaped stream through one ``SSERewriter`` (per stream);
- ``stream.floor_2000``: the same stream through the floor of ``stream.spec_2000.vs_floor`` (``inprocess.FLOOR_STREAM``:
  the bare split, then msgspec's decode and encode of each event that mentions ``reasoning``), so that the ratio of
  the two is one the machine's load does not move;
- ``stream.think_2000``: the 2,000-event local stream with ``<think>`` tags in ``content``
  (``payloads.local_stream_events``) through one ``SSERewriter`` that splits them (per stream);
- ``stream.deepseek``, ``stream.groq``, ``stream.claude``: the recorded streams of ``RECORDED`` (DeepSeek
  reasoner, groq gpt-oss, OpenRouter Claude; ``../shared/fixtures/openai-chat``), cut into events, each through
  one ``SSERewriter`` (per stream), and ``stream.floor_deepseek``, ``stream.floor_groq``, ``stream.floor_claude``
  the same streams through the floor, as for ``stream.floor_2000``.

Needs valgrind (Debian's ``valgrind`` package); each workload takes about a minute.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence

from benchmarks.inprocess import FLOOR_TARGET_RECORDED, FLOOR_TARGET_SPEC

WORKLOADS: dict[str, int] = {
    "request.plain_2kb": 200,
    "request.rewrite_2kb": 200,
    "request.history_200kb": 4,
    "floor.pass_200kb": 4,
    "request.body_8mb": 1,
    "floor.pass_8mb": 1,
    "asgi.plain_2kb": 200,
    "asgi.rewrite_2kb": 200,
    "floor.asgi_2kb": 200,
    "floor.asgi_rewrite_2kb": 200,
    "stream.spec_2000": 2,
    "stream.floor_2000": 2,
    "stream.think_2000": 2,
    "stream.deepseek": 8,
    "stream.floor_deepseek": 8,
    "stream.groq": 60,
    "stream.floor_groq": 60,
    "stream.claude": 60,
    "stream.floor_claude": 60,
}
"""Each workload with its ``N`` (iterations of the shorter run)."""

RECORDED: dict[str, str] = {
    "deepseek": "deepseek-reasoner-reasoning-content",
    "groq": "groq-gpt-oss-120b-reasoning-tool-call",
    "claude": "openrouter-claude-sonnet-4.5-reasoning-details",
}
"""The recorded-stream workloads' short names and their fixtures' stems (``payloads.fixture_streams``)."""


def _workload(name: str) -> Callable[[int], None]:
    import msgspec

    from benchmarks import payloads
    from benchmarks.inprocess import ReplayOnly, _Nothing, _scope, bare_app, call_asgi
    from numi_mw import ReasoningMiddleware, ResponseOptions, SSERewriter, fixed_route, prepare_request, provider_rules
    from numi_mw.core.think import ThinkTags

    route = fixed_route(provider_rules("openrouter"))
    if name.startswith("floor.pass"):
        body = payloads.history_200kb() if name == "floor.pass_200kb" else payloads.body_8mb()
        skip = msgspec.json.Decoder(_Nothing).decode

        def run_passes(n: int) -> None:
            for _ in range(n):
                skip(body)

        return run_passes
    if name.startswith("request."):
        body = {
            "request.plain_2kb": payloads.plain_2kb,
            "request.rewrite_2kb": payloads.request_2kb,
            "request.history_200kb": payloads.history_200kb,
            "request.body_8mb": payloads.body_8mb,
        }[name]()

        def run_requests(n: int) -> None:
            for _ in range(n):
                prepare_request(body, route)

        return run_requests
    if name.startswith(("asgi.", "floor.asgi")):
        app = (
            ReplayOnly(bare_app())
            if name.startswith("floor.")
            else ReasoningMiddleware(bare_app(), provider="openrouter")
        )
        body = payloads.request_2kb() if name.endswith("rewrite_2kb") else payloads.plain_2kb()
        scope = _scope(body)

        async def calls(n: int) -> None:
            for _ in range(n):
                await call_asgi(app, scope, body)

        return lambda n: asyncio.run(calls(n))
    recorded = RECORDED.get(name.removeprefix("stream.").removeprefix("floor_"))
    if recorded is not None:
        streams = payloads.fixture_streams()
        if recorded not in streams:
            raise SystemExit(f"{name} needs ../shared/fixtures/openai-chat/{recorded}.sse")
        events = payloads.split_events(streams[recorded])
    elif name == "stream.think_2000":
        events = payloads.local_stream_events(2000, "tags")
    else:
        events = payloads.spec_stream_events(2000)
    if name.startswith("stream.floor_"):
        from benchmarks.inprocess import _floor_stream

        floor = _floor_stream(events)

        def run_floors(n: int) -> None:
            for _ in range(n):
                floor()

        return run_floors

    think = name == "stream.think_2000"
    options = ResponseOptions(think=ThinkTags()) if think else ResponseOptions()

    def run_streams(n: int) -> None:
        for _ in range(n):
            rewriter = SSERewriter(options)
            for event in events:
                rewriter.feed(event)
            rewriter.finish()

    return run_streams


def _count(name: str, n: int) -> int:
    """Instructions of a whole ``python -m benchmarks.instructions --run NAME N`` under callgrind."""
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "callgrind.out")
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable]
        if sys.flags.safe_path:  # run with -P (the compiled core first on PYTHONPATH): so is each count
            command.append("-P")
        result = subprocess.run(
            [*command, "-m", "benchmarks.instructions", "--run", name, str(n)],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},
            timeout=600,
            check=True,
        )
    found = re.search(r"Collected : (\d+)", result.stderr)
    if found is None:
        raise RuntimeError(f"callgrind printed no count for {name}: {result.stderr[-500:]}")
    return int(found.group(1))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.instructions", description=__doc__.split("\n")[0])
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated workload names")
    parser.add_argument("--run", nargs=2, metavar=("NAME", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run:
        _workload(args.run[0])(int(args.run[1]))
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    counts: dict[str, int] = {}
    for name in args.workloads.split(","):
        n = WORKLOADS[name]
        per = counts[name] = (_count(name, 2 * n) - _count(name, n)) // n
        print(f"{name:24s} {per:>12,} instructions per {'stream' if name.startswith('stream') else 'call'}")
    for name, floor, target in FLOOR_RATIOS:
        if name in counts and floor in counts:
            print(f"{name:24s} {counts[name] / counts[floor]:12.2f}x {floor} (target <= {target:g}x)")
    return 0


FLOOR_RATIOS = (
    ("request.history_200kb", "floor.pass_200kb", 2.5),
    ("request.body_8mb", "floor.pass_8mb", 1.5),
    ("stream.spec_2000", "stream.floor_2000", FLOOR_TARGET_SPEC),
    ("stream.deepseek", "stream.floor_deepseek", FLOOR_TARGET_RECORDED),
    ("stream.groq", "stream.floor_groq", FLOOR_TARGET_RECORDED),
    ("stream.claude", "stream.floor_claude", FLOOR_TARGET_RECORDED),
)
"""The targets of the request rows and the stream rows against their floors, in instructions (the timed rows,
whose stream targets these are, are in ``inprocess``)."""


if __name__ == "__main__":
    sys.exit(main())
