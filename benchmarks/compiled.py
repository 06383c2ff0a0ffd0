"""The optional mypyc build of ``numi_mw/core``, and pure against compiled, side by side.

``python -m benchmarks.compiled build`` (what ``.ci/build-mypyc`` runs) compiles the modules of ``numi_mw/core``
but ``LEFT_OUT`` with mypyc into a folder outside the repository, ``${NUMI_MW_CACHE:-~/.cache/numi_mw}/mypyc-KEY``,
and prints that folder. It holds a copy of the ``numi_mw`` package whose compiled modules are C extensions (the
``.py`` files stay beside them; Python loads an extension first), and mypyc's shared runtime library. KEY hashes
every file of the package (the copy holds them all), the modules left out, the mypy version and the Python version
and ABI, so a change to any of them builds anew and an unchanged tree is reused at once. The pure Python package
stays the default install; this needs mypy (the ``dev`` extra) and a C compiler with the Python headers.

Putting the folder first on the path selects the compiled core (``--import-mode=append`` keeps pytest from putting
the checkout's own ``numi_mw`` before it, and ``python -P`` does the same for ``-m``)::

    PYTHONPATH=DIR .venv/bin/pytest --import-mode=append
    PYTHONPATH=DIR:. .venv/bin/python -P -m benchmarks.instructions

``python -m benchmarks.compiled compare`` builds (or reuses) the folder and compares the two cores on the
in-process workloads: instructions per operation under callgrind for each (``--instructions``), and the time of
interleaved rounds, each round one batch in a worker process running the pure core and one in a worker running the
compiled core, in alternating order (the same rounds as ``benchmarks.timing``, split across two processes since
one process holds one ``numi_mw``).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

from benchmarks.timing import Spread, calibrate

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "numi_mw"

LEFT_OUT = (
    "numi_mw/core/accumulate.py",
    "numi_mw/core/catalog.py",
    "numi_mw/core/controls.py",
    "numi_mw/core/providers.py",
    "numi_mw/core/replay.py",
    "numi_mw/core/request.py",
    "numi_mw/core/routing.py",
    "numi_mw/core/structs.py",
    "numi_mw/core/think.py",
    "numi_mw/core/usage.py",
)
"""Core modules the compiled build leaves as Python, each for what mypyc does to it (mypyc 2.x):

- a module that defines a ``msgspec.Struct`` (catalog, controls, replay, request, structs, usage): mypyc gives
  the class erased annotations (``list`` for ``list[_MessageProbe]``, ``type`` for ``Any``) and drops the
  keywords of its ``class`` line (``frozen``, ``gc``, ``kw_only``, ``forbid_unknown_fields``), so msgspec would
  decode into other types than the rules read (``structs`` holds the Structs of the per-event modules,
  ``response``, ``sse`` and ``chunks``, so that those compile);
- a module whose public functions check the arguments a caller gives and raise ``ValueError`` with a message
  (accumulate's ``Accumulator``, think's ``ThinkTags``, which is why the splitter is a module of its own,
  providers' ``provider_rules``, routing's ``fixed_route``): a compiled function raises mypyc's own
  ``TypeError`` first, for a value of another type than its annotation.
"""


def compiled_modules() -> list[str]:
    """The ``numi_mw/core`` source files mypyc compiles, relative to the repository root."""
    files = sorted(path.relative_to(REPO).as_posix() for path in (PACKAGE / "core").rglob("*.py"))
    return [name for name in files if name not in LEFT_OUT]


def cache_root() -> Path:
    return Path(os.environ.get("NUMI_MW_CACHE") or Path.home() / ".cache" / "numi_mw")


def build_key() -> str:
    """16 hex digits of SHA-256 over the package's files, the modules left out, mypy's and Python's versions."""
    import mypy.version

    digest = hashlib.sha256()
    for path in sorted(PACKAGE.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix not in (".so", ".pyc"):
            digest.update(path.relative_to(REPO).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(repr(LEFT_OUT).encode())
    digest.update(mypy.version.__version__.encode())
    digest.update(sys.version.encode() + str(sysconfig.get_config_var("EXT_SUFFIX")).encode())
    return digest.hexdigest()[:16]


def build(say: Callable[[str], None] = lambda text: print(text, file=sys.stderr)) -> Path:
    """The folder holding the compiled core for this tree: reused when present, otherwise compiled (minutes).

    Raises:
        RuntimeError: mypy or a C compiler is missing, or mypyc failed (its output's tail is in the message).
    """
    try:
        key = build_key()
    except ImportError as exc:
        raise RuntimeError("mypyc comes with mypy: install the dev extra (pip install -e '.[dev]')") from exc
    target = cache_root() / f"mypyc-{key}"
    if (target / "numi_mw" / "core").is_dir():
        return target
    compiler = str(sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        raise RuntimeError(f"no C compiler ({compiler}) to build the compiled core with")
    work = cache_root() / f"mypyc-{key}.build-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(PACKAGE, work / "numi_mw", ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyc"))
    say(f"compiling numi_mw/core with mypyc into {target} (a few minutes)")
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "mypyc", *compiled_modules()],
        cwd=work,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        shutil.rmtree(work, ignore_errors=True)
        raise RuntimeError(f"mypyc failed:\n{(result.stdout + result.stderr)[-3000:]}")
    for scratch in ("build", ".mypy_cache"):
        shutil.rmtree(work / scratch, ignore_errors=True)
    try:
        work.rename(target)
    except OSError:  # another build of the same key finished first: keep that one
        shutil.rmtree(work, ignore_errors=True)
    say(f"compiled in {time.perf_counter() - started:.0f} s")
    return target


def usage(folder: Path) -> str:
    return (
        f"compiled core: {folder}\n"
        f"  tests:      PYTHONPATH={folder} .venv/bin/pytest --import-mode=append\n"
        f"  benchmarks: PYTHONPATH={folder}:. .venv/bin/python -P -m benchmarks.instructions\n"
        "  pure against compiled: .venv/bin/python -m benchmarks.compiled compare"
    )


def environment(folder: Path | None) -> tuple[list[str], dict[str, str]]:
    """The interpreter flags and environment of a process running the pure core (``None``) or the compiled one."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    env.pop("PYTHONPATH", None)
    if folder is None:
        return [], env
    return ["-P"], {**env, "PYTHONPATH": os.pathsep.join([str(folder), str(REPO)])}


def _workloads() -> dict[str, tuple[Callable[[], object], int]]:
    """Each in-process workload: one operation, and how many units (events) it counts for its per-unit time."""
    from benchmarks import payloads, think
    from benchmarks.inprocess import _numi_native
    from numi_mw import fixed_route, prepare_request, provider_rules
    from numi_mw.core.think import ThinkTags

    route = fixed_route(provider_rules("openrouter"))
    out: dict[str, tuple[Callable[[], object], int]] = {}
    for name, body in (
        ("request.plain_2kb", payloads.plain_2kb()),
        ("request.rewrite_2kb", payloads.request_2kb()),
        ("request.history_200kb", payloads.history_200kb()),
        ("request.body_8mb", payloads.body_8mb()),
    ):
        out[name] = (partial(prepare_request, body, route), 1)
    spec = payloads.spec_stream_events(2000)
    out["stream.spec_2000"] = (think.rewrite_stream(spec), len(spec))
    local = payloads.local_stream_events(2000, "tags")
    out["stream.think_2000"] = (think.rewrite_stream(local, ThinkTags()), len(local))
    for stem, raw in payloads.fixture_streams().items():
        events = payloads.split_events(raw)
        out[f"stream.fixture.{stem}"] = (think.rewrite_stream(events), len(events))
    for wire, raw in payloads.native_streams().items():
        events = payloads.split_events(raw)
        out[f"stream.native.{wire}"] = (_numi_native(wire, events), len(events))
    return out


def _worker() -> int:
    """Serve ``{"name": ..., "n": ...}`` lines on stdin with ``{"seconds": ...}`` lines: the time of ``n`` runs."""
    import numi_mw.core
    import numi_mw.core.history

    workloads = _workloads()
    outputs = {name: repr(operation()) for name, (operation, _) in workloads.items()}
    hello = {
        "core": numi_mw.core.history.__file__,
        "build": numi_mw.core.build(),
        "units": {k: v[1] for k, v in workloads.items()},
    }
    hello["digest"] = hashlib.sha256(json.dumps(outputs, sort_keys=True).encode()).hexdigest()
    print(json.dumps(hello), flush=True)
    for line in sys.stdin:
        ask = json.loads(line)
        operation = workloads[ask["name"]][0]
        gc.collect()
        started = time.perf_counter()
        for _ in range(ask["n"]):
            operation()
        print(json.dumps({"seconds": time.perf_counter() - started}), flush=True)
    return 0


class _Worker:
    def __init__(self, folder: Path | None) -> None:
        flags, env = environment(folder)
        command = [sys.executable, *flags, "-m", "benchmarks.compiled", "worker"]
        self.process = subprocess.Popen(
            command, cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.hello = self._read()

    def _read(self) -> dict[str, object]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"a benchmark worker exited ({self.process.wait(timeout=10)})")
        answer: dict[str, object] = json.loads(line)
        return answer

    def run(self, name: str, n: int) -> float:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"name": name, "n": n}) + "\n")
        self.process.stdin.flush()
        return float(self._read()["seconds"])  # type: ignore[arg-type]

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def compare_times(folder: Path, rounds: int, batch_seconds: float, only: Sequence[str] = ()) -> list[dict[str, object]]:
    """Interleaved rounds of each workload in a pure and a compiled worker: per-unit medians and the speed-up
    (pure time / compiled time, per round), with its spread. Raises ``RuntimeError`` if the two workers' outputs
    differ, the compiled worker did not load the compiled core, or ``only`` names a workload there is not."""
    pure, compiled = _Worker(None), _Worker(folder)
    try:
        if (pure.hello["build"], compiled.hello["build"]) != ("pure Python", "compiled (mypyc)"):
            raise RuntimeError(f"cores: pure {pure.hello['core']}, compiled {compiled.hello['core']}")
        if pure.hello["digest"] != compiled.hello["digest"]:
            raise RuntimeError("the compiled core gives other output than the pure core on the workloads")
        units: dict[str, int] = pure.hello["units"]  # type: ignore[assignment]
        unknown = [name for name in only if name not in units]
        if unknown:
            raise RuntimeError(f"no such workload: {', '.join(unknown)}; the workloads are: {', '.join(units)}")
        rows = []
        for name in [name for name in units if not only or name in only]:
            n = calibrate(partial(pure.run, name), batch_seconds)
            times: dict[str, list[float]] = {"pure": [], "compiled": []}
            for r in range(rounds):
                sides = [("pure", pure), ("compiled", compiled)]
                for side, worker in sides if r % 2 == 0 else sides[::-1]:
                    times[side].append(worker.run(name, n) / n / units[name])
            speedup = Spread.of([a / b for a, b in zip(times["pure"], times["compiled"], strict=True)])
            rows.append(
                {
                    "name": name,
                    "pure_s": statistics.median(times["pure"]),
                    "compiled_s": statistics.median(times["compiled"]),
                    "speedup": speedup.median,
                    "speedup_min": speedup.min,
                    "speedup_max": speedup.max,
                    "rounds": rounds,
                    "per": "event" if units[name] > 1 else "call",
                }
            )
        return rows
    finally:
        pure.close()
        compiled.close()


def compare_instructions(folder: Path, workloads: str) -> dict[str, tuple[int, int]]:
    """Instructions per operation (``benchmarks.instructions``) with the pure core and with the compiled one."""
    counts: dict[str, list[int]] = {}
    for folder_or_none in (None, folder):
        flags, env = environment(folder_or_none)
        result = subprocess.run(
            [sys.executable, *flags, "-m", "benchmarks.instructions", "--workloads", workloads],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        for line in result.stdout.splitlines():
            name, count = line.split()[:2]
            counts.setdefault(name, []).append(int(count.replace(",", "")))
    return {name: (pair[0], pair[1]) for name, pair in counts.items()}


def _positive(text: str) -> int:
    """An argparse type: a whole number, 1 or more."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return value


def _time(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.2f} µs"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compiled", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=("build", "compare", "worker"))
    parser.add_argument("--rounds", type=_positive, default=7, help="interleaved rounds per workload (compare)")
    parser.add_argument("--batch", type=float, default=0.2, metavar="SECONDS", help="time of one batch (compare)")
    parser.add_argument(
        "--only", default="", metavar="NAME,...", help="time these workloads only (compare; a wrong name lists them)"
    )
    parser.add_argument(
        "--instructions",
        nargs="?",
        const="request.plain_2kb,request.rewrite_2kb,request.history_200kb,stream.spec_2000,stream.think_2000",
        metavar="WORKLOAD,...",
        help="also count instructions under callgrind, pure and compiled (compare; needs valgrind; minutes)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per row on stdout (compare)")
    args = parser.parse_args(argv)
    if args.command == "worker":
        return _worker()
    try:
        folder = build()
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.command == "build":
        print(folder)
        print(usage(folder), file=sys.stderr)
        return 0
    only = [name for name in args.only.split(",") if name]
    try:
        rows = compare_times(folder, args.rounds, args.batch, only)
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 2
    print(
        "pure against compiled core: interleaved rounds (speed-up = pure time / compiled time, per round)",
        file=sys.stderr if args.json else sys.stdout,
    )
    for row in rows:
        if args.json:
            print(json.dumps({"kind": "compiled", **row}))
            continue
        print(
            f"{row['name']:44s} pure {_time(row['pure_s']):>10s}  compiled {_time(row['compiled_s']):>10s}"  # type: ignore[arg-type]
            f"  per {row['per']:5s}  speed-up {row['speedup']:.2f}x ({row['speedup_min']:.2f}-{row['speedup_max']:.2f})"
        )
    if args.instructions:
        print(
            "instructions per operation under callgrind (pure, compiled, compiled / pure)",
            file=sys.stderr if args.json else sys.stdout,
        )
        for name, (pure, compiled) in compare_instructions(folder, args.instructions).items():
            if args.json:
                print(json.dumps({"kind": "compiled.instructions", "name": name, "pure": pure, "compiled": compiled}))
                continue
            print(f"{name:44s} {pure:>12,} {compiled:>12,}  {compiled / pure:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
