"""Loopback cases: throughput of the sidecar against a direct call, a plain pass-through proxy and LiteLLM.

A trivial upstream (``benchmarks.upstream``) runs in a subprocess; in front of it, each in its own subprocess,
``numi-mw serve --provider openrouter``, the pass-through proxy of ``benchmarks.passthrough`` (same stack:
Starlette, httpx, uvicorn) and, when ``litellm`` is importable, the LiteLLM proxy. An httpx client loop in this
process (``concurrency`` tasks under anyio, bounded in time and in count) drives each target in turn, rounds
interleaved, for a buffered completion and a stream. Everything listens on 127.0.0.1; every subprocess is
terminated in a ``finally`` block.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx

from benchmarks import payloads
from benchmarks.config import Config
from benchmarks.timing import Measurement, Side, Spread

REPO = payloads.REPO
MAX_REQUESTS_PER_RUN = 1_000_000
"""Count bound of one load run, besides its time bound."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def numi_mw_command() -> list[str]:
    """The installed ``numi-mw`` console script beside this interpreter, else ``python -m numi_mw.cli``."""
    script = Path(sys.executable).parent / "numi-mw"
    if script.exists():
        return [str(script)]
    found = shutil.which("numi-mw")
    return [found] if found else [sys.executable, "-m", "numi_mw.cli"]


def wait_for_port(port: int, process: subprocess.Popen[bytes], name: str = "numi-mw", seconds: float = 20.0) -> None:
    """Wait until ``process`` listens on 127.0.0.1:``port``, at most ``seconds``; raise if it exits or times out."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited early with status {process.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{name} did not listen on 127.0.0.1:{port} within {seconds} s")


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """Terminate ``process`` (if still running), killing it after 10 s."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


@contextlib.contextmanager
def process(
    name: str, command: Sequence[str], port: int, *, start_seconds: float = 30.0, env: Mapping[str, str] | None = None
) -> Iterator[int]:
    """Run ``command`` (which listens on ``port``), with ``env`` added to its environment; yields its process id;
    terminates it on exit. What it printed is quoted when it fails to start. The checkout goes on its
    ``PYTHONPATH`` after what this process's ``PYTHONPATH`` holds (the compiled core's folder, for one)."""
    path = os.pathsep.join(part for part in (os.environ.get("PYTHONPATH"), str(REPO)) if part)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path, **(env or {})}
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(list(command), cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            try:
                wait_for_port(port, proc, name, start_seconds)
            except RuntimeError:
                log.seek(0)
                raise RuntimeError(f"{name} failed to start: {log.read().decode(errors='replace')[-2000:]}") from None
            yield proc.pid
        finally:
            stop_process(proc)


@contextlib.contextmanager
def server(name: str, command: Sequence[str], port: int, *, start_seconds: float = 30.0) -> Iterator[str]:
    """``process``, yielding the server's ``/v1`` base URL."""
    with process(name, command, port, start_seconds=start_seconds):
        yield f"http://127.0.0.1:{port}/v1"


@dataclass(frozen=True, slots=True)
class LoadResult:
    requests: int
    errors: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.requests / self.seconds if self.seconds > 0 else 0.0


def _valid(kind: str, response: httpx.Response) -> bool:
    if response.status_code != 200:
        return False
    if kind == "sse":
        return response.content.endswith(b"data: [DONE]\n\n")
    return response.content.startswith(b"{") and b'"choices"' in response.content


async def _load(
    url: str, kind: str, body: bytes, headers: dict[str, str], concurrency: int, seconds: float
) -> LoadResult:
    """``concurrency`` workers, each with its own one-connection client (one shared pool of many connections
    costs httpx time that grows with the pool, which would make the client the bottleneck)."""
    ok = errors = ready = 0
    go = anyio.Event()
    window = [0.0, 0.0]  # start, deadline

    async def worker() -> None:
        nonlocal ok, errors, ready
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(10.0), trust_env=False) as client:
            warm = await client.post(url, content=body, headers=headers)  # opens the connection, checks the answer
            if not _valid(kind, warm):
                raise RuntimeError(f"{url} ({kind}): unexpected answer {warm.status_code}: {warm.content[:300]!r}")
            ready += 1
            if ready == concurrency:
                window[0] = time.perf_counter()
                window[1] = window[0] + seconds
                go.set()
            await go.wait()
            while time.perf_counter() < window[1] and ok + errors < MAX_REQUESTS_PER_RUN:
                try:
                    response = await client.post(url, content=body, headers=headers)
                except httpx.HTTPError:
                    errors += 1
                    continue
                if _valid(kind, response):
                    ok += 1
                else:
                    errors += 1

    with anyio.move_on_after(seconds + 30):
        async with anyio.create_task_group() as group:
            for _ in range(concurrency):
                group.start_soon(worker)
    elapsed = time.perf_counter() - window[0] if window[0] else 0.0
    return LoadResult(ok, errors, elapsed)


def load(url: str, kind: str, body: bytes, concurrency: int, seconds: float, model: str | None = None) -> LoadResult:
    """Drive ``url`` with ``concurrency`` client tasks for ``seconds``; requests/s of valid answers."""
    headers = {"content-type": "application/json", "authorization": "Bearer sk-bench"}
    if model is not None:  # LiteLLM routes by model name
        body = body.replace(b'"model":"openai/gpt-6-luna"', f'"model":"{model}"'.encode(), 1)
    return anyio.run(_load, url + "/chat/completions", kind, body, headers, concurrency, seconds)


def litellm_python() -> str | None:
    """An interpreter with the LiteLLM proxy: the peer environment's (``NUMI_MW_PEERS_PY``, built by
    ``.ci/build-peer-envs``), else this one when ``litellm`` is importable here, else ``None``."""
    path = os.environ.get("NUMI_MW_PEERS_PY")
    if path and (Path(path) / "bin" / "python").exists():
        return str(Path(path) / "bin" / "python")
    return sys.executable if importlib.util.find_spec("litellm") is not None else None


def litellm_command(python: str, upstream: str, port: int, config_dir: Path) -> list[str]:
    config = config_dir / "litellm.yaml"
    config.write_text(
        "model_list:\n"
        "  - model_name: bench\n"
        "    litellm_params:\n"
        "      model: openai/bench\n"
        f"      api_base: {upstream}\n"
        "      api_key: sk-bench\n"
        "general_settings:\n"
        "  master_key: sk-bench\n"  # the load generator sends "Bearer sk-bench" to every target
    )
    # LiteLLM fetches its model cost map from GitHub at start unless told to use its packaged copy: on loopback
    # the fetch only adds retries and warnings.
    code = (
        "import os, sys; os.environ.setdefault('LITELLM_LOCAL_MODEL_COST_MAP', 'True'); "
        "from litellm.proxy.proxy_cli import run_server; sys.exit(run_server())"
    )
    return [python, "-c", code, "--config", str(config), "--host", "127.0.0.1", "--port", str(port)]


def _rates(results: dict[tuple[str, str], list[LoadResult]], target: str, kind: str) -> list[float]:
    return [r.rate for r in results[(target, kind)]]


def _throughput(
    name: str,
    title: str,
    results: dict[tuple[str, str], list[LoadResult]],
    kind: str,
    numerator: str,
    denominator: str,
    target: float,
    others: Sequence[str],
) -> Measurement:
    values = [
        a / b
        for a, b in zip(_rates(results, numerator, kind), _rates(results, denominator, kind), strict=True)
        if b > 0
    ]
    spread = Spread.of(values) if values else None
    sides = []
    for side in (numerator, denominator, *others):
        if (side, kind) in results:
            s = Spread.of(_rates(results, side, kind))
            sides.append(Side(side, s.median, "req/s", s.q1, s.q3))
    errors = {f"{t}/{k}": sum(r.errors for r in rs) for (t, k), rs in results.items() if k == kind}
    return Measurement(
        name,
        title,
        spread.median if spread is not None else None,
        spread,
        ">=",
        target,
        sides,
        {"errors": errors, "kind": kind},
    )


def run_loopback(
    config: Config, *, sidecar: bool, litellm: bool, say: Callable[[str], None] = print
) -> list[Measurement]:
    """The sidecar (and LiteLLM) cases; ``say`` prints progress and skip notices."""
    python = litellm_python() if litellm else None
    litellm_available = python is not None
    transport = ("--upstream-transport", config.upstream_transport)
    out: list[Measurement] = []
    if litellm and not litellm_available:
        say('skipped: litellm not installed (eval "$(.ci/build-peer-envs)")')
        for kind in ("json", "sse"):
            out.append(
                Measurement(
                    f"litellm.{kind}",
                    f"sidecar vs LiteLLM proxy, same upstream ({kind}, throughput)",
                    None,
                    None,
                    ">=",
                    5.0,
                    skipped="litellm not installed",
                )
            )
    if not sidecar and not litellm_available:
        return out
    bodies = {"json": payloads.request_2kb(), "sse": payloads.request_2kb(stream=True)}
    upstream_port = free_port()
    with contextlib.ExitStack() as stack:
        upstream = stack.enter_context(
            server(
                "upstream",
                [sys.executable, "-m", "benchmarks.upstream", "--port", str(upstream_port)],
                upstream_port,
            )
        )
        targets: dict[str, str] = {"direct": upstream}
        if sidecar:
            port = free_port()
            targets["pass-through"] = stack.enter_context(
                server(
                    "pass-through proxy",
                    [sys.executable, "-m", "benchmarks.passthrough", "--upstream", upstream, "--port", str(port)],
                    port,
                )
            )
            port = free_port()
            command = [*numi_mw_command(), "serve", "--upstream", upstream, "--provider", "openrouter", *transport]
            targets["sidecar"] = stack.enter_context(
                server("numi-mw serve", [*command, "--port", str(port), "--log-level", "warning"], port)
            )
        if python is not None:
            port = free_port()
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="numi-mw-bench-")))
            targets["litellm"] = stack.enter_context(
                server("litellm", litellm_command(python, upstream, port, tmp), port, start_seconds=120.0)
            )
            if "sidecar" not in targets:
                port = free_port()
                command = [*numi_mw_command(), "serve", "--upstream", upstream, "--provider", "openrouter", *transport]
                targets["sidecar"] = stack.enter_context(
                    server("numi-mw serve", [*command, "--port", str(port), "--log-level", "warning"], port)
                )
        names = list(targets)
        results: dict[tuple[str, str], list[LoadResult]] = {}
        for r in range(config.load_rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            for target in order:
                for kind in ("json", "sse"):
                    model = "bench" if target == "litellm" else None
                    result = load(targets[target], kind, bodies[kind], config.concurrency, config.load_seconds, model)
                    results.setdefault((target, kind), []).append(result)
                    say(f"  round {r + 1}: {target:<12} {kind:<4} {result.rate:8.1f} req/s ({result.errors} errors)")
    for kind in ("json", "sse"):
        label = "buffered completion" if kind == "json" else "40-event stream"
        if sidecar:
            out.append(
                _throughput(
                    f"sidecar.{kind}",
                    f"sidecar vs pass-through proxy on loopback, {label} (throughput)",
                    results,
                    kind,
                    "sidecar",
                    "pass-through",
                    0.8,
                    ["direct"],
                )
            )
        if litellm_available:
            out.append(
                _throughput(
                    f"litellm.{kind}",
                    f"sidecar vs LiteLLM proxy on loopback, {label} (throughput)",
                    results,
                    kind,
                    "sidecar",
                    "litellm",
                    5.0,
                    ["direct"],
                )
            )
    return out
