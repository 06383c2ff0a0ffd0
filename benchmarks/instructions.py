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
- ``stream.spec_2000_excluded``: the spec-shaped stream through one ``SSERewriter`` with its reasoning excluded
  (``reasoning.exclude``: reasoning chunks dropped), as the server workloads' request asks (per stream);
- ``stream.openrouter_2000``: the spec-shaped stream with OpenRouter's answer chunks (``"reasoning": null,
  "reasoning_details": []`` beside ``content``), and ``stream.floor_openrouter_2000`` the same through the floor;
- ``stream.upstream_40``: the loopback upstream's 40-event stream (``payloads.upstream_stream_events``)
  with its reasoning excluded, as the server workloads' request asks, one event per ``feed``;
  ``stream.upstream_40_reads``: the same in two reads of 20 events, as aiohttp hands that stream to the
  sidecar on loopback (``SSEDecoder.data_lines``); ``stream.upstream_40_cuts``: the same in eight reads cut at
  seeded places inside events, as a network may cut a stream;
- ``stream.deepseek``, ``stream.groq``, ``stream.claude``, ``stream.snowflake``, ``stream.o3``: the recorded streams
  of ``RECORDED`` (DeepSeek reasoner, groq gpt-oss, OpenRouter Claude, Snowflake Claude, OpenRouter o3 with
  encrypted reasoning; ``../shared/fixtures/openai-chat``), cut into events, each through one ``SSERewriter`` (per
  stream), and ``stream.floor_deepseek``, ``stream.floor_groq``, ``stream.floor_claude``, ``stream.floor_snowflake``,
  ``stream.floor_o3`` the same streams through the floor, as for ``stream.floor_2000``; ``stream.deepseek_segments``
  and the like, and ``stream.floor_deepseek_segments`` and the like: each in reads of ``payloads.SEGMENT`` bytes,
  cut inside events (``SSEDecoder.split_read``), as the ``stream.fixture.*.segments`` rows time them;
- ``stream.anthropic_messages``, ``stream.openai_responses``: the recorded stream of each translated wire API
  (``payloads.NATIVE_STREAMS``), one event per chunk, through one ``NativeSSERewriter`` (per stream), as the
  ``stream.adapter.*`` rows time it; ``stream.anthropic_messages_reads``, ``stream.openai_responses_reads``: the
  same in reads of 10 events (``SSEDecoder.framed_lines``); ``stream.anthropic_messages_segments``,
  ``stream.openai_responses_segments``: the same in reads of ``payloads.SEGMENT`` bytes, cut inside events
  (``SSEDecoder.split_read``).

Server workloads count a whole server process per request instead (``SERVER_WORKLOADS``): the process runs under
callgrind in front of ``benchmarks.upstream``, and a client in this process sends it ``N`` requests and then ``2N``,
one at a time; the counters are zeroed before and dumped after each batch (``callgrind_control``), and the
difference of the two batches over ``N`` is what one request costs the server, uvicorn, the shell, the core and the
upstream client included:

- ``sidecar.buffered.httpcore``, ``sidecar.stream.httpcore``: ``numi-mw serve --provider openrouter
  --upstream-transport httpcore``, the harness's 2 KB request (``include_reasoning: false``: its reasoning is
  excluded), buffered and with ``"stream":true`` (the 40-event stream);
- ``sidecar.buffered.aiohttp``, ``sidecar.stream.aiohttp``: the same on ``aiohttp``, the default transport;
- ``sidecar.buffered_new_connection.aiohttp``: the buffered request on aiohttp, each on a new connection
  (``Connection: close``), as the ``latency`` case's stream client opens one per stream;
- ``sidecar.buffered_new_upstream.aiohttp``, ``sidecar.buffered_new_upstream.httpcore``,
  ``sidecar.stream_new_upstream.aiohttp``: the buffered request (the stream) in front of ``benchmarks.upstream
  --close``, which closes each connection after its answer, so that the sidecar opens a new upstream connection
  for every request, as it does for each stream of a burst;
- ``sidecar.stream_paced.aiohttp``, ``floor.relay_stream_paced``: a stream as the ``latency`` case sends it (its
  raw-socket client, a new connection per stream, ``streams.one_after_another``) in front of ``benchmarks.paced
  --gap-ms 4``, whose 40 events come 4 ms apart, so that each reaches the server in a read of its own and goes to
  the client in a write of its own, as at 200 paced streams (the other stream workloads get the whole stream in a
  few reads): what each event costs the server's shell;
- ``sidecar.buffered_logged.aiohttp``: the buffered request on aiohttp with ``numi-mw serve`` at its default log
  level, ``info``, so that each request writes its access line (every other server workload runs at ``warning``);
  ``sidecar.buffered_logged_json.aiohttp``: the same with ``--log-format json``;
- ``floor.passthrough_buffered``, ``floor.passthrough_stream``: the same requests through the same-stack
  pass-through (``benchmarks.passthrough``: Starlette, httpx and uvicorn without a rule);
- ``floor.relay_buffered``, ``floor.relay_stream``, ``floor.relay_buffered_new_connection``: the same requests
  (the last each on a new connection) through the floor of the sidecar's own stack (``benchmarks.relay``: uvicorn
  with httptools and uvloop, a bare ASGI app, one aiohttp session and the sidecar's header rules, nothing else),
  what a request through the sidecar cannot cost less than.

These count what CPU time per request measures under ``wrk``, without its noise: on a shared machine the CPU time
of one request moved by half between runs, its instruction count by well under a percent.

Needs valgrind (Debian's ``valgrind`` package); each workload takes about a minute.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence

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
    "stream.spec_2000_excluded": 2,
    "stream.openrouter_2000": 2,
    "stream.floor_openrouter_2000": 2,
    "stream.upstream_40": 60,
    "stream.upstream_40_reads": 60,
    "stream.upstream_40_cuts": 60,
    "stream.deepseek": 8,
    "stream.floor_deepseek": 8,
    "stream.groq": 60,
    "stream.floor_groq": 60,
    "stream.claude": 60,
    "stream.floor_claude": 60,
    "stream.snowflake": 60,
    "stream.floor_snowflake": 60,
    "stream.o3": 20,
    "stream.floor_o3": 20,
    "stream.deepseek_segments": 8,
    "stream.floor_deepseek_segments": 8,
    "stream.groq_segments": 60,
    "stream.floor_groq_segments": 60,
    "stream.claude_segments": 60,
    "stream.floor_claude_segments": 60,
    "stream.snowflake_segments": 60,
    "stream.floor_snowflake_segments": 60,
    "stream.o3_segments": 20,
    "stream.floor_o3_segments": 20,
    "stream.anthropic_messages": 20,
    "stream.openai_responses": 4,
    "stream.anthropic_messages_reads": 20,
    "stream.openai_responses_reads": 4,
    "stream.anthropic_messages_segments": 20,
    "stream.openai_responses_segments": 4,
}
"""Each workload with its ``N`` (iterations of the shorter run)."""

NATIVE: dict[str, str] = {
    "stream.anthropic_messages": "anthropic-messages",
    "stream.openai_responses": "openai-responses",
}
"""The translated-stream workloads and their wire APIs (``payloads.native_streams``)."""

SERVER_WORKLOADS: dict[str, int] = {
    "sidecar.buffered.httpcore": 300,
    "sidecar.stream.httpcore": 100,
    "sidecar.buffered.aiohttp": 300,
    "sidecar.stream.aiohttp": 100,
    "sidecar.buffered_new_connection.aiohttp": 300,
    "sidecar.buffered_new_upstream.aiohttp": 300,
    "sidecar.buffered_new_upstream.httpcore": 300,
    "sidecar.stream_new_upstream.aiohttp": 100,
    "sidecar.stream_paced.aiohttp": 20,
    "sidecar.buffered_logged.aiohttp": 300,
    "sidecar.buffered_logged_json.aiohttp": 300,
    "floor.passthrough_buffered": 300,
    "floor.passthrough_stream": 100,
    "floor.relay_buffered": 300,
    "floor.relay_stream": 100,
    "floor.relay_buffered_new_connection": 300,
    "floor.relay_stream_paced": 20,
}
"""The server workloads with their ``N`` (requests of the shorter batch)."""

RECORDED: dict[str, str] = {
    "deepseek": "deepseek-reasoner-reasoning-content",
    "groq": "groq-gpt-oss-120b-reasoning-tool-call",
    "claude": "openrouter-claude-sonnet-4.5-reasoning-details",
    "snowflake": "snowflake-claude-sonnet-4.6-reasoning-details",
    "o3": "openrouter-o3-encrypted-reasoning-details",
}
"""The recorded-stream workloads' short names and their fixtures' stems (``payloads.fixture_streams``)."""


def _workload(name: str) -> Callable[[int], None]:
    import msgspec

    from benchmarks import payloads
    from benchmarks.inprocess import ReplayOnly, _Nothing, bare_app, call_asgi, chat_scope
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
        scope = chat_scope(body)

        async def calls(n: int) -> None:
            for _ in range(n):
                await call_asgi(app, scope, body)

        return lambda n: asyncio.run(calls(n))
    wire = NATIVE.get(name.removesuffix("_reads").removesuffix("_segments"))
    if wire is not None:
        from benchmarks.inprocess import _numi_native

        native = payloads.native_streams()
        if wire not in native:
            raise SystemExit(f"{name} needs ../shared/fixtures/{payloads.NATIVE_STREAMS[wire]}")
        events = payloads.split_events(native[wire])
        if name.endswith("_reads"):
            events = [b"".join(events[at : at + 10]) for at in range(0, len(events), 10)]
        elif name.endswith("_segments"):
            events = payloads.split_segments(native[wire])
        translate = _numi_native(wire, events)
        if not translate().endswith(b"data: [DONE]\n\n"):
            raise RuntimeError(f"{name}: the stream was not translated whole")

        def run_translations(n: int) -> None:
            for _ in range(n):
                translate()

        return run_translations
    recorded = RECORDED.get(name.removeprefix("stream.").removeprefix("floor_").removesuffix("_segments"))
    if recorded is not None:
        streams = payloads.fixture_streams()
        if recorded not in streams:
            raise SystemExit(f"{name} needs ../shared/fixtures/openai-chat/{recorded}.sse")
        split = payloads.split_segments if name.endswith("_segments") else payloads.split_events
        events = split(streams[recorded])
    elif name == "stream.think_2000":
        events = payloads.local_stream_events(2000, "tags")
    elif name.startswith("stream.upstream_40"):
        events = payloads.upstream_stream_events()
        if name.endswith("_reads"):
            events = [b"".join(events[:20]), b"".join(events[20:])]
        elif name.endswith("_cuts"):
            body = b"".join(events)
            cuts = [0, *sorted(random.Random(1).sample(range(1, len(body)), 7)), len(body)]
            events = [body[start:end] for start, end in itertools.pairwise(cuts)]
    elif name.endswith("openrouter_2000"):
        events = payloads.spec_stream_events(2000, empty_fields=True)
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
    if think:
        options = ResponseOptions(think=ThinkTags())
    else:  # a stream shown, or with its reasoning excluded (``reasoning.exclude``)
        options = ResponseOptions(exclude=name.startswith(("stream.spec_2000_excluded", "stream.upstream_40")))

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


def _server_command(name: str, upstream: str, port: int) -> list[str]:
    from benchmarks.load import numi_mw_serve

    if name.startswith("floor.passthrough"):
        return [sys.executable, "-m", "benchmarks.passthrough", "--upstream", upstream, "--port", str(port)]
    if name.startswith("floor.relay"):
        return [sys.executable, "-m", "benchmarks.relay", "--upstream", upstream, "--port", str(port)]
    level = "info" if "_logged" in name else "warning"  # info: the default, with an access line per request
    extra = ["--log-format", "json"] if "_logged_json" in name else []
    transport = name.rsplit(".", 1)[1]
    return numi_mw_serve(upstream, port, "--provider", "openrouter", *extra, transport=transport, log_level=level)


async def _send_requests(url: str, body: bytes, marker: bytes, count: int, *, close: bool = False) -> None:
    """``count`` requests to ``url``, one at a time, each on a new connection when ``close``; raises unless each is
    a 200 holding ``marker``."""
    import httpx

    headers = {"content-type": "application/json", "authorization": "Bearer sk-bench"}
    if close:
        headers["connection"] = "close"
    async with httpx.AsyncClient(timeout=120.0, trust_env=False) as client:
        for _ in range(count):
            response = await client.post(url, content=body, headers=headers)
            if response.status_code != 200 or marker not in response.content:
                raise RuntimeError(f"{url} answered {response.status_code}: {response.content[:200]!r}")


def _dumped_total(folder: str, pid: int, before: set[str]) -> int:
    """The instruction total of the dump ``callgrind_control --dump`` has just asked process ``pid`` for: the one
    file in ``folder`` that was not in ``before``, once callgrind has written it whole (its ``totals:`` line)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for file in set(os.listdir(folder)) - before:
            with open(os.path.join(folder, file)) as dump:
                found = re.search(r"^(?:totals|summary): (\d+)", dump.read(), re.MULTILINE)
            if found is not None:
                before.add(file)
                return int(found.group(1))
        time.sleep(0.2)
    raise RuntimeError(f"callgrind wrote no dump for process {pid} within 120 s")


def _new_connections(name: str) -> bool:
    """Whether server workload ``name`` sends each request on a new connection."""
    return "new_connection" in name


def _request(name: str) -> tuple[bytes, bytes]:
    """The body a server workload sends, and the bytes each answer must hold."""
    from benchmarks import payloads

    stream = "stream" in name.split(".")[1].split("_")  # (``upstream`` is not one)
    return payloads.request_2kb(stream=stream), b"data: [DONE]" if stream else b'"choices"'


@contextlib.contextmanager
def _serving(name: str, callgrind_out: str | None) -> Iterator[tuple[int, str]]:
    """The server of workload ``name`` in front of ``benchmarks.upstream``, under callgrind writing to
    ``callgrind_out`` (``None``: not under callgrind); yields its process id and its chat completions URL."""
    from benchmarks import loopback

    with contextlib.ExitStack() as stack:
        upstream_port, port = loopback.free_port(), loopback.free_port()
        upstream_command = [sys.executable, "-m", "benchmarks.upstream", "--port", str(upstream_port)]
        if "new_upstream" in name:  # each answer closes its connection: a new upstream connection per request
            upstream_command.append("--close")
        if "paced" in name:  # each event in a read of its own
            upstream_command = [sys.executable, "-m", "benchmarks.paced", "--port", str(upstream_port), "--gap-ms", "4"]
        stack.enter_context(loopback.process("upstream", upstream_command, upstream_port))
        command = _server_command(name, f"http://127.0.0.1:{upstream_port}/v1", port)
        if callgrind_out is not None:
            command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={callgrind_out}", *command]
        server = loopback.process(name, command, port, start_seconds=300.0, env={"PYTHONHASHSEED": "0"})
        yield stack.enter_context(server), f"http://127.0.0.1:{port}/v1/chat/completions"


def send(name: str, url: str, count: int) -> None:
    """``count`` requests of server workload ``name`` to ``url``, one at a time; raises unless each is answered
    whole (``_send_requests``; a paced workload's streams, ``streams.one_after_another``)."""
    from benchmarks.streams import one_after_another

    if "paced" in name:
        asyncio.run(one_after_another(url, count))
        return
    body, marker = _request(name)
    asyncio.run(_send_requests(url, body, marker, count, close=_new_connections(name)))


def _count_server(name: str, n: int) -> int:
    """Instructions one request costs the server of workload ``name`` (``SERVER_WORKLOADS``): its counters over
    ``2N`` requests less those over ``N``, divided by ``N``."""
    with tempfile.TemporaryDirectory() as folder, _serving(name, f"{folder}/callgrind.out.%p") as (pid, url):
        seen: set[str] = set(os.listdir(folder))
        totals = []
        for count in (max(1, n // 4), n, 2 * n):  # the first batch warms the process up and is not counted
            subprocess.run(["callgrind_control", "--zero", str(pid)], capture_output=True, timeout=120, check=True)
            send(name, url, count)
            subprocess.run(["callgrind_control", "--dump", str(pid)], capture_output=True, timeout=120, check=True)
            totals.append(_dumped_total(folder, pid, seen))
        return (totals[2] - totals[1]) // n


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.instructions", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--workloads",
        default=",".join(WORKLOADS),
        help=f"comma-separated workload names (default: all but the server workloads, {', '.join(SERVER_WORKLOADS)})",
    )
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
        if name in SERVER_WORKLOADS:
            per = counts[name] = _count_server(name, SERVER_WORKLOADS[name])
            print(f"{name:28s} {per:>12,} instructions per request")
            continue
        n = WORKLOADS[name]
        per = counts[name] = (_count(name, 2 * n) - _count(name, n)) // n
        print(f"{name:28s} {per:>12,} instructions per {'stream' if name.startswith('stream') else 'call'}")
    for name, floor, target in FLOOR_RATIOS:
        if name in counts and floor in counts:
            print(f"{name:28s} {counts[name] / counts[floor]:12.2f}x {floor} (target <= {target:g}x)")
    for name, floor in SERVER_RATIOS:
        if name in counts and floor in counts:
            print(f"{name:28s} {counts[name] / counts[floor]:12.2f}x {floor}")
    return 0


FLOOR_RATIOS = (
    ("request.history_200kb", "floor.pass_200kb", 2.5),
    ("request.body_8mb", "floor.pass_8mb", 1.5),
    ("stream.spec_2000", "stream.floor_2000", FLOOR_TARGET_SPEC),
    ("stream.openrouter_2000", "stream.floor_openrouter_2000", FLOOR_TARGET_SPEC),
    *(
        (f"stream.{name}{cut}", f"stream.floor_{name}{cut}", FLOOR_TARGET_RECORDED)
        for cut in ("", "_segments")
        for name in RECORDED
    ),
)
"""The targets of the request rows and the stream rows against their floors, in instructions (the timed rows,
whose stream targets these are, are in ``inprocess``)."""

SERVER_RATIOS = (
    ("sidecar.buffered.httpcore", "floor.passthrough_buffered"),
    ("sidecar.stream.httpcore", "floor.passthrough_stream"),
    ("sidecar.buffered.aiohttp", "floor.passthrough_buffered"),
    ("sidecar.stream.aiohttp", "floor.passthrough_stream"),
    ("sidecar.buffered.aiohttp", "floor.relay_buffered"),
    ("sidecar.stream.aiohttp", "floor.relay_stream"),
    ("sidecar.buffered_new_connection.aiohttp", "floor.relay_buffered_new_connection"),
    ("sidecar.stream_paced.aiohttp", "floor.relay_stream_paced"),
)
"""The server workloads against the same-stack pass-through and the floor of the sidecar's stack (no target:
neither normalizes anything)."""


if __name__ == "__main__":
    sys.exit(main())
