"""Cases under load: throughput and p99 with ``wrk``, latency added to paced streams, memory per open stream, workers.

- ``load``: ``wrk`` (one thread, a Lua script for the POST that counts every answer that is not a 200 with a
  complete body) drives, at 1, 4, 16 and 64 connections, the buffered completion and the 40-event stream of
  ``benchmarks.upstream``: the upstream direct, the same-stack pass-through (``benchmarks.passthrough``),
  ``numi-mw serve --provider openrouter``, and the peers when their environment is present
  (``.ci/build-peer-envs``: the LiteLLM proxy from ``NUMI_MW_PEERS_PY``, Portkey's gateway from
  ``NUMI_MW_PEERS_NODE``). Throughput counts valid answers only.
- ``latency``: ``benchmarks.paced`` sends its events 20 ms apart; ``benchmarks.streams`` (its own process) keeps 1,
  50 and 200 streams open and reports the time to the first event and every inter-event gap, p50 and p99, direct
  and through each proxy, the floor of the sidecar's stack among them (``benchmarks.relay``, a side of the p99
  rows); and the time to the first answer byte of a ``<think>``-tagged stream through
  ``numi-mw serve --provider local`` under each ``--think-start``.
- ``scale``: the resident memory (``VmRSS`` of ``/proc/PID/status``) of ``numi-mw serve`` holding 1, 100 and
  1,000 idle-paced streams, and the requests/s it serves meanwhile; throughput of ``--workers 1`` against
  ``--workers 2`` when the command has that option.

Everything listens on 127.0.0.1; every run is bounded in time (and ``wrk`` by its duration); every subprocess is
terminated in a ``finally`` block. A row that cannot run (no ``wrk``, no peer environment, a port taken) is
reported as skipped with its reason, never failed.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import loopback, payloads
from benchmarks.config import Config
from benchmarks.timing import Direction, Measurement, Side, Spread
from numi_mw.upstream import DEFAULT_UPSTREAM_TRANSPORT

REPO = payloads.REPO
PORTKEY_PORT = 8787
"""Portkey's gateway listens here whatever ``--port`` says."""

KINDS = {"json": "buffered completion", "sse": "40-event stream"}

LUA = """
wrk.method = "POST"
local file = io.open(os.getenv("NUMI_MW_WRK_BODY"), "rb")
wrk.body = file:read("*a")
file:close()
local marker = os.getenv("NUMI_MW_WRK_MARKER")
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args) bad = 0 end
function response(status, headers, body)
  if status ~= 200 or not string.find(body, marker, 1, true) then bad = bad + 1 end
end
function done(summary, latency, requests)
  local invalid = 0
  for _, thread in ipairs(threads) do invalid = invalid + thread:get("bad") end
  local e = summary.errors
  io.write(string.format("NUMI_MW_WRK %d %d %d %d %.1f %.1f\\n", summary.requests, summary.duration, invalid,
    e.connect + e.read + e.write + e.timeout, latency:percentile(50), latency:percentile(99)))
end
"""
"""The ``wrk`` script: the POST, a check of every answer, one summary line (microseconds)."""


@dataclass(frozen=True, slots=True)
class WrkResult:
    requests: int
    invalid: int
    socket_errors: int
    seconds: float
    p50_ms: float
    p99_ms: float

    @property
    def rate(self) -> float:
        return (self.requests - self.invalid) / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    url: str
    headers: tuple[str, ...] = ()
    model: str | None = None
    kinds: tuple[str, ...] = ("json", "sse")


def raise_open_files() -> None:
    """Raise this process's open-file limit to its hard limit (the servers it starts inherit it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def wrk(target: Target, kind: str, body: bytes, connections: int, seconds: float, workdir: Path) -> WrkResult:
    """One ``wrk`` run: 1 thread, ``connections`` connections, ``seconds`` long; raises if wrk fails."""
    if target.model is not None:
        body = body.replace(b'"model":"openai/gpt-6-luna"', f'"model":"{target.model}"'.encode(), 1)
    body_path = workdir / f"body-{kind}.json"
    body_path.write_bytes(body)
    script = workdir / "post.lua"
    script.write_text(LUA)
    marker = "data: [DONE]" if kind == "sse" else '"choices"'
    headers = ["Content-Type: application/json", "Authorization: Bearer sk-bench", *target.headers]
    command = ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--timeout", "10s", "-s", str(script)]
    for header in headers:
        command += ["-H", header]
    command.append(target.url + "/chat/completions")
    env = {**os.environ, "NUMI_MW_WRK_BODY": str(body_path), "NUMI_MW_WRK_MARKER": marker}
    out = subprocess.run(command, capture_output=True, timeout=seconds + 30, env=env, check=False)
    for line in out.stdout.decode(errors="replace").splitlines():
        if line.startswith("NUMI_MW_WRK "):
            requests, duration, invalid, socket_errors, p50, p99 = line.split()[1:]
            return WrkResult(
                int(requests), int(invalid), int(socket_errors), int(duration) / 1e6, float(p50) / 1e3, float(p99) / 1e3
            )
    raise RuntimeError(f"wrk failed ({out.returncode}): {out.stderr.decode(errors='replace')[-500:]}")


def cpu_seconds(pid: int) -> float | None:
    """The CPU time (user and system, seconds) of process ``pid`` and of every process under it (workers,
    Node's or LiteLLM's helpers), from ``/proc/PID/stat``; ``None`` when ``pid`` is gone or ``/proc`` is absent."""
    ticks = os.sysconf("SC_CLK_TCK")
    stats: dict[int, tuple[int, float]] = {}  # pid: (parent, seconds)
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        stats[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / ticks)
    if pid not in stats:
        return None
    total, frontier = 0.0, [pid]
    while frontier:
        current = frontier.pop()
        total += stats[current][1]
        frontier += [child for child, (parent, _) in stats.items() if parent == current]
    return total


def _port_free(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def portkey_script() -> str | None:
    """Portkey's gateway's start script in ``NUMI_MW_PEERS_NODE``, when it and ``node`` are present."""
    folder = os.environ.get("NUMI_MW_PEERS_NODE")
    if not folder or shutil.which("node") is None:
        return None
    script = Path(folder) / "node_modules" / "@portkey-ai" / "gateway" / "build" / "start-server.js"
    return str(script) if script.exists() else None


def _harness_upstream(stack: contextlib.ExitStack) -> str:
    """The harness's trivial upstream (``benchmarks.upstream``) on a free loopback port, stopped with ``stack``;
    returns its ``/v1`` base URL."""
    port = loopback.free_port()
    stack.enter_context(
        loopback.process("upstream", [sys.executable, "-m", "benchmarks.upstream", "--port", str(port)], port)
    )
    return f"http://127.0.0.1:{port}/v1"


def numi_mw_serve(
    upstream: str, port: int, *extra: str, transport: str = DEFAULT_UPSTREAM_TRANSPORT, log_level: str = "warning"
) -> list[str]:
    """The ``numi-mw serve`` command line of a harness sidecar: ``warning`` leaves out its access line (its cost is
    the ``scale.access_log`` row's)."""
    return [
        *loopback.numi_mw_command(),
        "serve",
        "--upstream",
        upstream,
        *extra,
        "--upstream-transport",
        transport,
        "--port",
        str(port),
        "--log-level",
        log_level,
    ]


class Peers:
    """Starts the proxies in front of one upstream; the names of the ones that could not start, with why."""

    def __init__(
        self,
        stack: contextlib.ExitStack,
        upstream: str,
        say: Callable[[str], None],
        transport: str = DEFAULT_UPSTREAM_TRANSPORT,
    ) -> None:
        self.stack = stack
        self.transport = transport
        self.upstream = upstream
        self.say = say
        self.skipped: dict[str, str] = {}
        self.pids: dict[str, int] = {}

    def _start(self, name: str, command: Sequence[str], port: int, start_seconds: float = 30.0) -> str:
        self.pids[name] = self.stack.enter_context(loopback.process(name, command, port, start_seconds=start_seconds))
        return f"http://127.0.0.1:{port}/v1"

    def pid(self, target: str) -> int | None:
        """The process id of the proxy behind ``target`` (a ``Target`` name), when the harness started it."""
        return self.pids.get({"numi_mw": "numi-mw serve"}.get(target, target))

    def targets(self, *, passthrough: bool, relay: bool = False, provider: str = "openrouter") -> list[Target]:
        """Direct, the same-stack pass-through (``passthrough``), the floor of the sidecar's stack (``relay``:
        ``benchmarks.relay``), ``numi-mw serve --provider PROVIDER`` and each peer whose environment is present."""
        out = [Target("direct", self.upstream)]
        for wanted, name, module in ((passthrough, "pass-through", "passthrough"), (relay, "relay", "relay")):
            if wanted:
                port = loopback.free_port()
                command = [
                    sys.executable,
                    "-m",
                    f"benchmarks.{module}",
                    "--upstream",
                    self.upstream,
                    "--port",
                    str(port),
                ]
                out.append(Target(name, self._start(name, command, port)))
        port = loopback.free_port()
        out.append(
            Target(
                "numi_mw",
                self._start(
                    "numi-mw serve",
                    numi_mw_serve(self.upstream, port, "--provider", provider, transport=self.transport),
                    port,
                ),
            )
        )
        python = loopback.litellm_python()
        if python is None:
            self.skipped["litellm"] = 'no peer environment (eval "$(.ci/build-peer-envs)")'
        else:
            port = loopback.free_port()
            tmp = Path(self.stack.enter_context(tempfile.TemporaryDirectory(prefix="numi-mw-bench-")))
            command = loopback.litellm_command(python, self.upstream, port, tmp)
            out.append(Target("litellm", self._start("litellm", command, port, 120.0), model="bench"))
        script = portkey_script()
        if script is None:
            self.skipped["portkey"] = 'no peer environment with node (eval "$(.ci/build-peer-envs)")'
        elif not _port_free(PORTKEY_PORT):
            self.skipped["portkey"] = f"port {PORTKEY_PORT} (Portkey's fixed port) is taken"
        else:
            url = self._start("portkey", ["node", script], PORTKEY_PORT, 60.0)
            headers = ("x-portkey-provider: openai", f"x-portkey-custom-host: {self.upstream}")
            kinds: tuple[str, ...] = ("json", "sse")
            failure = _stream_probe(url, headers)
            if failure is not None:
                self.skipped["portkey.sse"] = failure
                kinds = ("json",)
            out.append(Target("portkey", url, headers, kinds=kinds))
        for name, why in self.skipped.items():
            self.say(f"skipped: {name}: {why}")
        return out


def _stream_probe(url: str, headers: Sequence[str]) -> str | None:
    """``None`` when ``url`` streams a complete answer, else what it answered."""
    import httpx

    extra = dict(h.split(": ", 1) for h in headers)
    try:
        response = httpx.post(
            url + "/chat/completions",
            content=payloads.request_2kb(stream=True),
            headers={"content-type": "application/json", "authorization": "Bearer sk-bench", **extra},
            timeout=10.0,
            trust_env=False,
        )
    except httpx.HTTPError as exc:
        return f"a stream failed: {exc!r}"
    if response.status_code == 200 and response.content.endswith(b"data: [DONE]\n\n"):
        return None
    return f"it answers a stream with {response.status_code} {response.content[:120]!r}"


def _row(
    name: str,
    title: str,
    value: float | None,
    direction: Direction,
    target: float,
    sides: list[Side],
    extra: dict[str, Any],
    unit: str = "x",
    skipped: str | None = None,
    spread: Spread | None = None,
) -> Measurement:
    """One row; its ``spread`` is that of ``value`` alone unless given (a row that is the median of rounds)."""
    if spread is None and value is not None:
        spread = Spread.of([value])
    return Measurement(name, title, value, spread, direction, target, sides, extra, skipped, unit)


def _skipped(name: str, title: str, direction: Direction, target: float, why: str, unit: str = "x") -> Measurement:
    return Measurement(name, title, None, None, direction, target, skipped=why, unit=unit)


LOAD_PEERS = (("portkey", True), ("litellm", False))
"""The peers of the load rows, and whether their p99 is a target too."""


def load_rows(config: Config, say: Callable[[str], None]) -> list[Measurement]:
    """The ``load`` case: the no-collapse rows and numi_mw against each peer at each concurrency."""
    connections = config.wrk_connections
    if shutil.which("wrk") is None:
        say("skipped: wrk not installed (apt-get install -y wrk)")
        return _load_skips(connections, "wrk not installed", {})
    raise_open_files()
    bodies = {"json": payloads.request_2kb(), "sse": payloads.request_2kb(stream=True)}
    table: dict[str, dict[str, dict[int, dict[str, float]]]] = {}
    with contextlib.ExitStack() as stack:
        peers = Peers(stack, _harness_upstream(stack), say, config.upstream_transport)
        targets = peers.targets(passthrough=True)
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="numi-mw-wrk-")))
        for kind in KINDS:
            for count in connections:
                order = targets if count % 2 else targets[::-1]
                for target in order:
                    if kind not in target.kinds:
                        continue
                    pid = peers.pid(target.name)
                    cpu = cpu_seconds(pid) if pid is not None else None
                    result = wrk(target, kind, bodies[kind], count, config.wrk_seconds, workdir)
                    after = cpu_seconds(pid) if pid is not None else None
                    cpu_ms = (
                        (after - cpu) * 1e3 / result.requests
                        if cpu is not None and after is not None and result.requests
                        else None
                    )
                    table.setdefault(target.name, {}).setdefault(kind, {})[count] = {
                        "cpu_ms_per_request": cpu_ms,
                        "rate": result.rate,
                        "p50_ms": result.p50_ms,
                        "p99_ms": result.p99_ms,
                        "invalid": result.invalid,
                        "socket_errors": result.socket_errors,
                        "requests": result.requests,
                    }
                    cpu_text = f"  CPU {cpu_ms:5.2f} ms/req" if cpu_ms is not None else ""
                    say(
                        f"  {kind:<4} c={count:<3} {target.name:<12} {result.rate:8.1f} req/s"
                        f"  p99 {result.p99_ms:8.1f} ms{cpu_text}  ({result.invalid} invalid,"
                        f" {result.socket_errors} socket errors)"
                    )
    return _load_measurements(connections, table, peers.skipped)


def _load_skips(connections: Sequence[int], why: str, table: dict[str, Any]) -> list[Measurement]:
    return _load_measurements(connections, table, {"numi_mw": why, "portkey": why, "litellm": why})


def _load_measurements(
    connections: Sequence[int], table: dict[str, dict[str, dict[int, dict[str, float]]]], skipped: dict[str, str]
) -> list[Measurement]:
    out: list[Measurement] = []
    low, high = connections[0], connections[-1]
    for kind, label in KINDS.items():
        name = f"load.{kind}.no_collapse"
        title = f"numi_mw req/s at {high} connections / at {low} (wrk, {label})"
        numi = table.get("numi_mw", {}).get(kind)
        if numi is None:
            out.append(_skipped(name, title, ">=", 1.0, skipped.get("numi_mw", "not measured")))
        else:
            sides = [Side(f"numi_mw c={c}", numi[c]["rate"], "req/s") for c in (low, high)]
            passthrough = table.get("pass-through", {}).get(kind, {})
            sides += [
                Side(f"pass-through c={c}", passthrough[c]["rate"], "req/s") for c in (low, high) if c in passthrough
            ]
            extra = {"table": {t: rows.get(kind, {}) for t, rows in table.items()}, "kind": kind}
            out.append(_row(name, title, numi[high]["rate"] / numi[low]["rate"], ">=", 1.0, sides, extra))
        for peer, with_p99 in LOAD_PEERS:
            other = table.get(peer, {}).get(kind)
            why = skipped.get(f"{peer}.{kind}") or skipped.get(peer) or skipped.get("numi_mw") or "not measured"
            for count in connections:
                rate_name = f"load.{kind}.{peer}.c{count}"
                rate_title = f"numi_mw req/s / {peer}'s at {count} connections (wrk, {label})"
                p99_name = f"{rate_name}.p99"
                p99_title = f"numi_mw p99 / {peer}'s at {count} connections (wrk, {label})"
                if numi is None or other is None:
                    out.append(_skipped(rate_name, rate_title, ">=", 1.0, why))
                    if with_p99:
                        out.append(_skipped(p99_name, p99_title, "<=", 1.0, why))
                    continue
                mine, theirs = numi[count], other[count]
                extra = {"invalid": {"numi_mw": mine["invalid"], peer: theirs["invalid"]}}
                rate_sides = [Side("numi_mw", mine["rate"], "req/s"), Side(peer, theirs["rate"], "req/s")]
                ratio = mine["rate"] / theirs["rate"] if theirs["rate"] > 0 else None
                out.append(_row(rate_name, rate_title, ratio, ">=", 1.0, rate_sides, extra))
                if with_p99:
                    p99_sides = [
                        Side("numi_mw", mine["p99_ms"] / 1e3, "s/op"),
                        Side(peer, theirs["p99_ms"] / 1e3, "s/op"),
                    ]
                    p99 = mine["p99_ms"] / theirs["p99_ms"] if theirs["p99_ms"] > 0 else None
                    out.append(_row(p99_name, p99_title, p99, "<=", 1.0, p99_sides, extra))
    return out


def _stream_client(url: str, streams: int, seconds: float, model: str, headers: Sequence[str] = ()) -> dict[str, Any]:
    command = [sys.executable, "-m", "benchmarks.streams", "latency", "--url", url + "/chat/completions"]
    command += ["--streams", str(streams), "--seconds", str(seconds), "--model", model]
    for header in headers:
        command += ["--header", header]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(command, cwd=REPO, env=env, capture_output=True, timeout=seconds + 90, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"stream client failed: {out.stderr.decode(errors='replace')[-800:]}")
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def latency_rows(config: Config, say: Callable[[str], None]) -> list[Measurement]:
    """The ``latency`` case: added p99 to the first event and to each gap; think splitting's hold-back."""
    raise_open_files()
    streams = config.latency_streams
    table: dict[str, dict[int, dict[str, Any]]] = {}
    port = loopback.free_port()
    paced = [sys.executable, "-m", "benchmarks.paced", "--port", str(port), "--gap-ms", "20"]
    with contextlib.ExitStack() as stack:
        stack.enter_context(loopback.process("paced upstream", paced, port))
        upstream = f"http://127.0.0.1:{port}/v1"
        peers = Peers(stack, upstream, say, config.upstream_transport)
        targets = peers.targets(passthrough=False, relay=True)
        for count in streams:
            for target in targets:
                if "sse" not in target.kinds:
                    continue
                result = _stream_client(
                    target.url, count, config.latency_seconds, target.model or "paced", target.headers
                )
                table.setdefault(target.name, {})[count] = result
                say(_describe(target.name, count, result))
        think = _think_rounds(stack, upstream, config, say)
    return _latency_measurements(streams, table, think, peers.skipped)


def _describe(name: str, count: int, result: dict[str, Any]) -> str:
    def p(key: str) -> str:
        value = result.get(key)
        return "-" if not value else f"{value['p50']:.1f}/{value['p99']:.1f}"

    return (
        f"  {name:<18} {count:>4} streams: first event {p('first_event_ms')} ms, gap {p('gap_ms')} ms (p50/p99),"
        f" answer {p('answer_ms')} ms; {result['completed']} streams, {result['errors']} errors"
    )


def _p99(table: dict[str, dict[int, dict[str, Any]]], name: str, count: int, key: str) -> float | None:
    value = table.get(name, {}).get(count, {}).get(key)
    return None if not value else float(value["p99"])


def _latency_measurements(
    streams: Sequence[int],
    table: dict[str, dict[int, dict[str, Any]]],
    think: dict[str, list[dict[str, Any]]],
    skipped: dict[str, str],
) -> list[Measurement]:
    out: list[Measurement] = []
    top = streams[-1]
    for key, label in (("first_event_ms", "time to the first event"), ("gap_ms", "each inter-event gap")):
        short = "first_event" if key == "first_event_ms" else "gap"
        direct = _p99(table, "direct", top, key)
        mine = _p99(table, "numi_mw", top, key)
        name = f"latency.{short}.p99_added"
        title = f"p99 numi_mw adds to {label} at {top} paced streams (ms over direct)"
        extra = {"table": table, "key": key}
        if direct is None or mine is None:
            out.append(_skipped(name, title, "<=", 1.0, "not measured", " ms"))
            continue
        sides = [Side("numi_mw p99", mine / 1e3, "s/op"), Side("direct p99", direct / 1e3, "s/op")]
        floor = _p99(table, "relay", top, key)
        if floor is not None:  # what the stack adds with no reasoning rules and no shell (``benchmarks.relay``)
            sides.append(Side("relay floor p99", floor / 1e3, "s/op"))
        out.append(_row(name, title, mine - direct, "<=", 1.0, sides, extra, " ms"))
        for peer in ("litellm", "portkey"):
            peer_name = f"latency.{short}.p99_added.vs_{peer}"
            peer_title = f"p99 numi_mw adds to {label} at {top} streams minus what {peer} adds (ms)"
            theirs = _p99(table, peer, top, key)
            if theirs is None:
                why = skipped.get(f"{peer}.sse") or skipped.get(peer) or "not measured"
                out.append(_skipped(peer_name, peer_title, "<=", 0.0, why, " ms"))
                continue
            peer_sides = [
                Side("numi_mw added", (mine - direct) / 1e3, "s/op"),
                Side(f"{peer} added", (theirs - direct) / 1e3, "s/op"),
            ]
            out.append(_row(peer_name, peer_title, mine - theirs, "<=", 0.0, peer_sides, {}, " ms"))
    out += _think_measurements(think)
    return out


THINK_STARTS = ("content", "reasoning", "auto")
"""The ``--think-start`` settings of the think splitting rows."""

_THINK_SIDES = ("direct", "no splitting", *THINK_STARTS)
"""What the think splitting rows drive in each round: the paced upstream, ``numi-mw serve --provider local
--no-think-tags`` (the same sidecar, the same stream, content passed as it comes), and one sidecar per setting."""


WARM_UP_SECONDS = 0.5
"""How long each sidecar of the think splitting rows serves the paced streams before the timed rounds, so that no
side's first round pays for its first connections."""


def _think_rounds(
    stack: contextlib.ExitStack, upstream: str, config: Config, say: Callable[[str], None]
) -> dict[str, list[dict[str, Any]]]:
    """``config.think_rounds`` interleaved rounds of ``config.think_streams`` paced ``<think>``-tagged streams
    through each of ``_THINK_SIDES`` (the order rotates from round to round; each sidecar warmed up first,
    ``WARM_UP_SECONDS``); each side's stream client results, one per round."""
    urls = {"direct": upstream}
    for name in _THINK_SIDES[1:]:
        port = loopback.free_port()
        options = ("--no-think-tags",) if name == "no splitting" else ("--think-start", name)
        command = numi_mw_serve(upstream, port, "--provider", "local", *options, transport=config.upstream_transport)
        stack.enter_context(loopback.process(f"numi-mw serve {' '.join(options)}", command, port))
        urls[name] = f"http://127.0.0.1:{port}/v1"
        # its first requests (its first upstream connections) before timing
        _stream_client(urls[name], config.think_streams, WARM_UP_SECONDS, "paced-think")
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in _THINK_SIDES}
    for round_ in range(config.think_rounds):
        shift = round_ % len(_THINK_SIDES)
        for name in _THINK_SIDES[shift:] + _THINK_SIDES[:shift]:
            result = _stream_client(urls[name], config.think_streams, config.latency_seconds, "paced-think")
            runs[name].append(result)
            say(_describe(f"think {name}", config.think_streams, result))
    return runs


def _think_measurements(think: dict[str, list[dict[str, Any]]]) -> list[Measurement]:
    """Per setting: the p50 time to the first answer byte through the sidecar minus direct
    (``latency.think_start.<setting>``: all the sidecar adds, its first event's latency among it) and minus the same
    sidecar without think splitting (``….hold_back``: what the splitter's hold-back adds); each the median of the
    per-round differences."""
    out: list[Measurement] = []
    for setting in THINK_STARTS:
        mine = think.get(setting, [])
        for base, suffix, template in (
            (
                "direct",
                "",
                "added time to the first answer byte, <think>-tagged paced stream, --think-start {s}"
                " (ms, p50; the median of per-round differences)",
            ),
            (
                "no splitting",
                ".hold_back",
                "time think splitting adds to the first answer byte, <think>-tagged paced stream, --think-start {s},"
                " over the same sidecar with --no-think-tags (ms, p50; the median of per-round differences)",
            ),
        ):
            name = f"latency.think_start.{setting}{suffix}"
            title = template.format(s=setting)
            pairs = [
                (run["answer_ms"]["p50"], other["answer_ms"]["p50"])
                for run, other in zip(mine, think.get(base, []), strict=False)
                if run.get("answer_ms") and other.get("answer_ms")
            ]
            if not pairs:
                out.append(_skipped(name, title, "<=", 1.0, "not measured", " ms"))
                continue
            differences = [a - b for a, b in pairs]
            sides = [
                Side(f"--think-start {setting} p50", statistics.median(a for a, _ in pairs) / 1e3, "s/op"),
                Side(f"{base} p50", statistics.median(b for _, b in pairs) / 1e3, "s/op"),
            ]
            extra = {"differences_ms": differences, "think": think}
            spread = Spread.of(differences)
            out.append(_row(name, title, spread.median, "<=", 1.0, sides, extra, " ms", spread=spread))
    return out


def _rss(pid: int) -> int | None:
    """Resident memory of process ``pid`` in bytes (``VmRSS`` of ``/proc/PID/status``), or ``None``."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _has_workers_option() -> bool:
    out = subprocess.run([*loopback.numi_mw_command(), "serve", "--help"], capture_output=True, timeout=60, check=False)
    return b"--workers" in out.stdout


def scale_rows(config: Config, say: Callable[[str], None]) -> list[Measurement]:
    """The ``scale`` case: memory per open idle stream (and req/s meanwhile, over the mean of two runs with the fewest
    streams, one before the other counts and one after them); ``--workers 2`` over ``1``; the access log's cost."""
    raise_open_files()
    have_wrk = shutil.which("wrk") is not None
    if not have_wrk:
        say("skipped: wrk not installed (apt-get install -y wrk): no req/s beside the memory rows, no workers row")
    out: list[Measurement] = []
    counts = config.memory_streams
    rss: dict[int, int] = {}
    ready: dict[int, int] = {}
    rates: dict[int, float] = {}
    again: list[float] = []  # the rate with the fewest streams, measured again once the others were
    body = payloads.request_2kb()
    port = loopback.free_port()
    paced = [sys.executable, "-m", "benchmarks.paced", "--port", str(port), "--idle-gap-s", "3"]
    with contextlib.ExitStack() as stack:
        stack.enter_context(loopback.process("paced upstream", paced, port))
        upstream = f"http://127.0.0.1:{port}/v1"
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="numi-mw-wrk-")))
        sidecar_port = loopback.free_port()
        pid = stack.enter_context(
            loopback.process(
                "numi-mw serve",
                numi_mw_serve(upstream, sidecar_port, "--provider", "openrouter", transport=config.upstream_transport),
                sidecar_port,
            )
        )
        url = f"http://127.0.0.1:{sidecar_port}/v1"
        target = Target("numi_mw", url)
        if have_wrk:
            wrk(target, "json", body, 4, 1, workdir)  # warm up
        # the rate with the fewest streams is measured again after the others, and the row compares the most streams'
        # rate with the mean of the two, so that a drift of the machine's load over the case cancels: with one run
        # of each count, in order, the row read 0.75, 0.87, 0.92 and 1.07 in four runs of the same code, the rate with
        # one stream open 1,550 to 2,697 requests a second
        for visit, count in enumerate([*counts, *counts[:1]] if have_wrk else counts):
            holder = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "benchmarks.streams",
                    "hold",
                    "--url",
                    url + "/chat/completions",
                    "--streams",
                    str(count),
                    "--seconds",
                    str(config.hold_seconds),
                    "--model",
                    "idle",
                ],
                cwd=REPO,
                env={**os.environ, "PYTHONPATH": str(REPO)},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
            try:
                assert holder.stdout is not None
                line = holder.stdout.readline().decode()
                opened = int(line.split()[1]) if line.startswith("ready ") else 0
                time.sleep(0.5)
                resident = _rss(pid) or 0
                if visit < len(counts):
                    ready[count], rss[count] = opened, resident
                rate = 0.0
                if have_wrk:
                    rate = wrk(target, "json", body, 4, config.wrk_seconds, workdir).rate
                    if visit < len(counts):
                        rates[count] = rate
                    else:
                        again.append(rate)
            finally:
                if holder.stdin is not None:
                    holder.stdin.close()
                loopback.stop_process(holder)
            say(f"  {count:>5} idle streams ({opened} open): RSS {resident / 2**20:.1f} MiB, {rate:.0f} req/s")
    first, last = counts[0], counts[-1]
    extra = {"rss": rss, "open": ready, "rate": rates}
    name = "scale.memory_per_stream"
    title = (
        f"numi-mw serve RSS growth per open idle stream, (RSS at {last} - at {first}) / {last - first} streams (bytes)"
    )
    opened = ready[last] - ready[first]
    if opened <= 0:
        out.append(_skipped(name, title, "<=", 65536.0, "the streams did not open", " bytes"))
    else:
        per_stream = (rss[last] - rss[first]) / opened
        sides = [Side(f"RSS at {c}", rss[c], "bytes") for c in counts]
        out.append(_row(name, title, per_stream, "<=", 65536.0, sides, extra, " bytes"))
    name = "scale.rate_with_streams"
    title = (
        f"numi-mw serve req/s (wrk, 4 connections, buffered) while {last} idle streams are open / with {first}"
        f" (the mean of its runs before and after the others)"
    )
    if have_wrk and rates:
        extra["rate_again"] = again
        base = statistics.mean([rates[first], *again])
        sides = [Side(f"{first} streams", base, "req/s")]
        sides += [Side(f"{c} streams", rates[c], "req/s") for c in counts[1:]]
        out.append(_row(name, title, rates[last] / base if base else None, ">=", 0.8, sides, extra))
    else:
        out.append(_skipped(name, title, ">=", 0.8, "wrk not installed"))
    out.append(_workers_row(config, say, have_wrk))
    out.append(_access_log_row(config, say, have_wrk))
    return out


ACCESS_LOG_ROUNDS = 2
"""Interleaved rounds of the ``scale.access_log`` row, each one sidecar with its access log and one without."""


def _access_log_row(config: Config, say: Callable[[str], None], have_wrk: bool) -> Measurement:
    """``numi-mw serve`` at its default log level (``info``: an access line per request, to a file) over the same
    with ``--no-access-log``, buffered, 4 connections; the median of ``ACCESS_LOG_ROUNDS`` interleaved rounds."""
    name = "scale.access_log"
    title = (
        "numi-mw serve req/s with its access log (the default) / with --no-access-log (wrk, 4 connections, buffered)"
    )
    if not have_wrk:
        return _skipped(name, title, ">=", ACCESS_LOG_TARGET, "wrk not installed")
    body = payloads.request_2kb()
    rates: dict[str, list[float]] = {"access log": [], "--no-access-log": []}
    with contextlib.ExitStack() as stack:
        upstream = _harness_upstream(stack)
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="numi-mw-wrk-")))
        for round_ in range(ACCESS_LOG_ROUNDS):
            sides = list(rates) if round_ % 2 == 0 else list(rates)[::-1]
            for side in sides:
                port = loopback.free_port()
                extra = ["--provider", "openrouter", *(["--no-access-log"] if side == "--no-access-log" else [])]
                serve = numi_mw_serve(upstream, port, *extra, transport=config.upstream_transport, log_level="info")
                with loopback.process(f"numi-mw serve ({side})", serve, port):
                    target = Target(side, f"http://127.0.0.1:{port}/v1")
                    wrk(target, "json", body, 4, 1, workdir)  # warm up
                    rates[side].append(wrk(target, "json", body, 4, config.wrk_seconds, workdir).rate)
                say(f"  {side}: {rates[side][-1]:.0f} req/s")
    on, off = statistics.median(rates["access log"]), statistics.median(rates["--no-access-log"])
    sides_out = [Side("access log", on, "req/s"), Side("--no-access-log", off, "req/s")]
    return _row(name, title, on / off if off else None, ">=", ACCESS_LOG_TARGET, sides_out, {"rates": rates})


ACCESS_LOG_TARGET = 0.85
"""The access log may cost the sidecar at most 15 % of its buffered requests per second (our target)."""


def _workers_row(config: Config, say: Callable[[str], None], have_wrk: bool) -> Measurement:
    name = "scale.workers_2_vs_1"
    title = "numi-mw serve --workers 2 req/s / --workers 1 (wrk, 64 connections, buffered)"
    if not have_wrk:
        return _skipped(name, title, ">=", 1.0, "wrk not installed")
    if not _has_workers_option():
        say("skipped: numi-mw serve has no --workers option")
        return _skipped(name, title, ">=", 1.0, "numi-mw serve has no --workers option")
    body = payloads.request_2kb()
    rates: dict[int, float] = {}
    with contextlib.ExitStack() as stack:
        upstream = _harness_upstream(stack)
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="numi-mw-wrk-")))
        for workers in (1, 2):
            port = loopback.free_port()
            serve = numi_mw_serve(
                upstream,
                port,
                "--provider",
                "openrouter",
                "--workers",
                str(workers),
                transport=config.upstream_transport,
            )
            with loopback.process(f"numi-mw serve --workers {workers}", serve, port):
                target = Target(f"workers {workers}", f"http://127.0.0.1:{port}/v1")
                wrk(target, "json", body, 64, 1, workdir)  # warm up every worker
                rates[workers] = wrk(target, "json", body, 64, config.wrk_seconds, workdir).rate
            say(f"  --workers {workers}: {rates[workers]:.0f} req/s")
    sides = [Side(f"--workers {w}", rates[w], "req/s") for w in (1, 2)]
    return _row(name, title, rates[2] / rates[1] if rates[1] else None, ">=", 1.0, sides, {"rates": rates})
