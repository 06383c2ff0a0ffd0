"""``python -m benchmarks.relay``, the floor of the sidecar's stack: it answers what the upstream answers."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import httpx
import pytest

from benchmarks import loopback, payloads
from tests.test_e2e_forwarding import OK_HEAD, RawUpstream, answer

HEADERS = {"content-type": "application/json", "authorization": "Bearer sk-bench"}


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[str, str]]:
    """The harness's upstream and a relay in front of it: their ``/v1`` base URLs."""
    upstream_port, relay_port = loopback.free_port(), loopback.free_port()
    upstream_command = [sys.executable, "-m", "benchmarks.upstream", "--port", str(upstream_port)]
    with loopback.server("upstream", upstream_command, upstream_port) as upstream:
        relay_command = [sys.executable, "-m", "benchmarks.relay", "--upstream", upstream, "--port", str(relay_port)]
        with loopback.server("relay", relay_command, relay_port) as relay:
            yield upstream, relay


@pytest.mark.parametrize("stream", [False, True])
def test_the_relay_answers_the_upstreams_bytes(servers: tuple[str, str], stream: bool) -> None:
    upstream, relay = servers
    body = payloads.request_2kb(stream=stream)
    with httpx.Client(timeout=30.0, trust_env=False) as client:
        direct = client.post(upstream + "/chat/completions", content=body, headers=HEADERS)
        relayed = client.post(relay + "/chat/completions", content=body, headers=HEADERS)
    assert (relayed.status_code, relayed.headers["content-type"]) == (200, direct.headers["content-type"])
    assert relayed.headers.get("content-length") == direct.headers.get("content-length")  # a stream: none
    assert relayed.content == direct.content
    assert relayed.content.endswith(b"data: [DONE]\n\n") if stream else relayed.content == payloads.completion_body()


def test_an_upstream_that_cannot_be_reached_is_a_502() -> None:
    port, closed = loopback.free_port(), loopback.free_port()
    command = [sys.executable, "-m", "benchmarks.relay", "--upstream", f"http://127.0.0.1:{closed}/v1", "--port"]
    with loopback.server("relay", [*command, str(port)], port) as relay:
        answered = httpx.post(relay + "/chat/completions", content=b"{}", headers=HEADERS, timeout=30.0)
    assert answered.status_code == 502
    assert answered.json() == {
        "error": {"message": "upstream unavailable", "type": "upstream_error", "code": "upstream_unavailable"}
    }


def test_the_relay_sends_the_path_as_sent_without_what_the_connection_header_lists() -> None:
    """As the sidecar does (RFC 9110 section 7.6.1): the headers a ``Connection`` header names stay on the client's
    hop, and the path and query keep their percent-encoding."""
    port = loopback.free_port()
    with RawUpstream().running() as upstream:
        upstream.reset(answer(OK_HEAD + b"content-length: 2\r\n\r\n{}"))
        command = [sys.executable, "-m", "benchmarks.relay", "--upstream", upstream.base_url, "--port", str(port)]
        with loopback.server("relay", command, port) as relay:
            headers = {"x-foo": "1", "connection": "x-foo, close", "x-title": "app"}
            answered = httpx.get(relay + "/models/a%2Fb%20c?z=%2F", headers=headers, timeout=30.0)
    assert (answered.status_code, answered.content, answered.headers["content-length"]) == (200, b"{}", "2")
    head = upstream.requests[-1].partition(b"\r\n\r\n")[0].split(b"\r\n")
    assert head[0] == b"GET /v1/models/a%2Fb%20c?z=%2F HTTP/1.1"
    assert [line.split(b":")[0].lower() for line in head[1:] if line.lower().startswith(b"x-")] == [b"x-title"]
