"""Run settings: the default run (about 10 minutes on 2 cores) and ``--quick`` (one to two minutes)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from benchmarks.payloads import KIB, MIB
from numi_mw.upstream import DEFAULT_UPSTREAM_TRANSPORT, UPSTREAM_TRANSPORTS


@dataclass(frozen=True, slots=True)
class Config:
    """How long and how big each case runs.

    Attributes:
        quick: the ``--quick`` settings are in use.
        rounds: interleaved rounds of the in-process cases (ASGI, request, stream).
        batch_seconds: target duration of one contender's batch in one in-process round.
        fixture_rounds: rounds for each recorded fixture stream (they are small and many).
        load_rounds: interleaved rounds of the loopback cases (direct, pass-through, sidecar, LiteLLM).
        load_seconds: duration of one load run (one target, one kind, one round).
        concurrency: concurrent client tasks driving a loopback target.
        body_8mb: size of the large request body in bytes.
        blob_8mb: size of its ``reasoning.encrypted`` blob in bytes.
        memory_events: events fed through ``SSERewriter`` by the stream memory case.
        memory_checkpoint: the event count at which the first memory reading is taken.
        memory_seconds: time limit of the stream memory case (it reports how far it got).
        wrk_connections: the connection counts of the ``load`` case (``wrk``, one thread).
        wrk_seconds: duration of one ``wrk`` run (one target, one kind, one connection count).
        latency_streams: the concurrent paced stream counts of the ``latency`` case.
        latency_seconds: how long the stream client keeps that many streams going, per target.
        think_streams: concurrent streams of the think splitting hold-back rows.
        think_rounds: interleaved rounds of those rows (direct, the sidecar without splitting, each setting).
        memory_streams: the open idle stream counts of the memory per stream row.
        hold_seconds: the longest the idle streams are held open (each count is measured well within it).
        upstream_transport: ``numi-mw serve --upstream-transport`` of every sidecar the harness starts.
    """

    quick: bool = False
    rounds: int = 15
    batch_seconds: float = 0.1
    fixture_rounds: int = 7
    load_rounds: int = 3
    load_seconds: float = 5.0
    concurrency: int = 16
    body_8mb: int = 8 * MIB
    blob_8mb: int = 6 * MIB
    memory_events: int = 100_000
    memory_checkpoint: int = 10_000
    memory_seconds: float = 60.0
    wrk_connections: tuple[int, ...] = (1, 4, 16, 64)
    wrk_seconds: float = 3.0
    latency_streams: tuple[int, ...] = (1, 50, 200)
    latency_seconds: float = 3.0
    think_streams: int = 50
    think_rounds: int = 5
    memory_streams: tuple[int, ...] = (1, 100, 1000)
    hold_seconds: float = 60.0
    upstream_transport: str = DEFAULT_UPSTREAM_TRANSPORT


DEFAULT = Config()

QUICK = Config(
    quick=True,
    rounds=3,
    batch_seconds=0.02,
    fixture_rounds=3,
    load_rounds=1,
    load_seconds=1.0,
    concurrency=8,
    body_8mb=1 * MIB,
    blob_8mb=768 * KIB,
    memory_events=20_000,
    memory_checkpoint=2_000,
    memory_seconds=15.0,
    wrk_connections=(1, 64),
    wrk_seconds=1.0,
    latency_streams=(1, 20),
    latency_seconds=0.5,
    think_streams=2,
    think_rounds=1,
    memory_streams=(1, 20),
    hold_seconds=30.0,
)


def make_config(*, quick: bool, rounds: int | None, upstream_transport: str = DEFAULT_UPSTREAM_TRANSPORT) -> Config:
    """The settings for a run; ``rounds`` overrides the round counts of every case; ``upstream_transport`` is the
    sidecar's (``numi_mw.upstream.UPSTREAM_TRANSPORTS``)."""
    config = QUICK if quick else DEFAULT
    if rounds is not None:
        if rounds < 1:
            raise ValueError("--rounds must be at least 1")
        config = replace(config, rounds=rounds, fixture_rounds=rounds, load_rounds=rounds, think_rounds=rounds)
    if upstream_transport not in UPSTREAM_TRANSPORTS:
        raise ValueError(f"--upstream-transport must be one of {', '.join(UPSTREAM_TRANSPORTS)}")
    return replace(config, upstream_transport=upstream_transport)
