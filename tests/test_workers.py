"""End to end: ``numi-mw serve --workers 2``, a real server with two worker processes on loopback, answers buffered
and streamed chat completions exactly as one process does, and lets go of its port when it stops."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e_support import ReplayUpstream, fixture_body, sidecar
from tests.response_support import rewrite, rewrite_json

BUFFERED = "openai-chat/openrouter-claude-4.5-signed-reasoning.buffered.json"
STREAM = "openai-chat/openrouter-claude-sonnet-4.5-reasoning-details.sse"
REQUEST = {"model": "anthropic/claude-sonnet-4.5", "messages": [{"role": "user", "content": "Hi"}]}


@pytest.fixture(scope="module")
def upstream() -> Iterator[ReplayUpstream]:
    with ReplayUpstream().running() as replay:
        yield replay


def test_two_workers_answer_buffered_and_streamed_requests(
    shared_dir: Path, upstream: ReplayUpstream, upstream_transport: str
) -> None:
    with sidecar(upstream.base_url, "--provider", "openrouter", "--workers", "2") as base_url:
        port = httpx.URL(base_url).port
        # a new connection for each request, so that the kernel hands them to either worker
        with httpx.Client(timeout=10, limits=httpx.Limits(max_keepalive_connections=0)) as client:
            for _ in range(6):
                buffered = client.post(
                    f"{base_url}/chat/completions", json=REQUEST, headers={"x-replay-fixture": BUFFERED}
                )
                assert (buffered.status_code, buffered.content) == (200, rewrite_json(fixture_body(BUFFERED)[0]))
                streamed = client.post(
                    f"{base_url}/chat/completions",
                    json={**REQUEST, "stream": True},
                    headers={"x-replay-fixture": STREAM},
                )
                assert (streamed.status_code, streamed.content) == (200, rewrite(fixture_body(STREAM)[0]))
            assert client.get(f"http://127.0.0.1:{port}/healthz").content == b'{"status":"ok"}'
    with socket.create_server(("127.0.0.1", port)):  # every worker has stopped and closed the shared socket
        pass
