"""The sidecar's operations paths (``/healthz``, ``/readyz``, ``/metrics``), its access log and what its logs never
carry (``docs/sidecar.md``, "Operations")."""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Mount
from starlette.testclient import TestClient

from numi_mw import create_app, load_catalog
from numi_mw.proxy.ops import (
    _JSON_ESCAPES,
    _LINE_ESCAPES,
    _VALUE_ESCAPES,
    JSONFormatter,
    TextFormatter,
    _AccessLine,
    _TokenCount,
    escape_line,
    escape_value,
    lean_log_records,
    log_config,
)
from numi_mw.upstream import UPSTREAM_TRANSPORTS
from tests.conftest import keep_logging_switches
from tests.e2e_support import free_port, numi_mw_command, stop_process, wait_for_port

UPSTREAM = "http://127.0.0.1:8000/v1"
SECRET_KEY = "sk-SECRET-KEY-0001"
SECRET_PROMPT = "SECRET-PROMPT-0002"
SECRET_REASONING = "SECRET-REASONING-0003"
SECRETS = (SECRET_KEY, SECRET_PROMPT, SECRET_REASONING)
STREAM = (
    b'data: {"id":"c1","choices":[{"index":0,"delta":{"reasoning_content":"SECRET-REASONING-0003"},"finish_reason":null}]}\n\n'
    b'data: {"id":"c1","choices":[{"index":0,"delta":{"content":"Hi."},"finish_reason":"stop"}]}\n\n'
    b'data: {"id":"c1","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":9,"completion_tokens_details":{"reasoning_tokens":7}}}\n\n'
    b"data: [DONE]\n\n"
)
REQUEST = {"model": "m", "stream": True, "messages": [{"role": "user", "content": SECRET_PROMPT}]}
HEADERS = {"authorization": f"Bearer {SECRET_KEY}"}

Handler = Callable[[httpx.Request], httpx.Response]


def answering(calls: list[str] | None = None) -> Handler:
    """An upstream whose ``/models`` answers 401 (no key is sent) and whose chat completions stream ``STREAM``."""

    def handle(request: httpx.Request) -> httpx.Response:
        if calls is not None:
            calls.append(f"{request.method} {request.url}")
        if request.url.path.endswith("/models"):
            return httpx.Response(401, json={"error": {"message": "no key"}})
        return httpx.Response(200, stream=httpx.ByteStream(STREAM), headers={"content-type": "text/event-stream"})

    return handle


def refusing(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("[Errno 111] Connection refused", request=request)


def client_for(handler: Handler, **options: Any) -> TestClient:
    return TestClient(create_app(UPSTREAM, transport=httpx.MockTransport(handler), **options))


# --- health and readiness --------------------------------------------------------------------------------------


def test_healthz_is_answered_by_numi_mw() -> None:
    calls: list[str] = []
    with client_for(answering(calls)) as client:
        response = client.get("/healthz")
        head = client.head("/healthz")
        post = client.post("/healthz")
    assert (response.status_code, response.content) == (200, b'{"status":"ok"}')
    assert response.headers["content-type"] == "application/json"
    assert response.headers["cache-control"] == "no-store"
    assert (head.status_code, head.content, head.headers["content-length"]) == (200, b"", "15")
    assert (post.status_code, post.headers["allow"], post.headers["content-type"]) == (
        405,
        "GET, HEAD",
        "application/json",
    )
    assert post.json() == {
        "error": {
            "message": "Invalid method for URL (POST /healthz); this path takes GET, HEAD.",
            "type": "invalid_request_error",
            "code": "method_not_allowed",
            "param": None,
        }
    }
    assert calls == []


def test_v1_paths_of_the_same_names_still_reach_the_upstream() -> None:
    calls: list[str] = []
    with client_for(answering(calls)) as client:
        for path in ("/v1/healthz", "/v1/readyz", "/v1/metrics"):
            client.get(path)
    assert calls == [
        "GET http://127.0.0.1:8000/v1/healthz",
        "GET http://127.0.0.1:8000/v1/readyz",
        "GET http://127.0.0.1:8000/v1/metrics",
    ]


def test_an_ops_prefix_moves_the_paths() -> None:
    calls: list[str] = []
    with client_for(answering(calls), ops_prefix="/numi-mw") as client:
        assert client.get("/numi-mw/healthz").content == b'{"status":"ok"}'
        assert client.get("/numi-mw/metrics").status_code == 200
        client.get("/healthz")  # no longer numi_mw's: forwarded
    assert calls == ["GET http://127.0.0.1:8000/v1/healthz"]


def test_readyz_is_ready_when_the_upstream_answers_with_any_status() -> None:
    calls: list[str] = []
    with client_for(answering(calls)) as client:
        first = client.get("/readyz", headers=HEADERS)
        second = client.get("/readyz")
    expected = b'{"status":"ready","providers":[{"name":"local","ready":true,"status":401}]}'
    assert (first.status_code, first.content) == (200, expected)
    assert (second.status_code, second.content) == (200, expected)
    assert calls == ["GET http://127.0.0.1:8000/v1/models"]  # once: the answer is reused for READY_TTL seconds


def test_readyz_sends_no_key() -> None:
    seen: list[httpx.Headers] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers)
        return httpx.Response(200, json={"data": []})

    with client_for(handle) as client:
        client.get("/readyz", headers=HEADERS)
    assert "authorization" not in seen[0]


def test_readyz_is_503_when_the_upstream_cannot_be_reached() -> None:
    with client_for(refusing) as client:
        response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json() == {
        "status": "unavailable",
        "providers": [{"name": "local", "ready": False, "error": "ConnectError"}],
    }


CATALOG = b"""
[[providers]]
name = "up"
base_url = "http://127.0.0.1:8001/v1?api-version=2"
api_key_env = "NUMI_MW_TEST_NO_SUCH_KEY"
[[providers]]
name = "down"
base_url = "http://127.0.0.1:8002/v1"
[[models]]
id = "a/m"
[[models.endpoints]]
tag = "up/m"
provider = "up"
"""


def test_readyz_names_every_catalog_provider() -> None:
    calls: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        calls.append(str(request.url))
        if request.url.port == 8002:
            raise httpx.ConnectTimeout("timed out", request=request)
        return httpx.Response(200, json={"data": []})

    app = create_app(catalog=load_catalog(CATALOG, "c.toml"), transport=httpx.MockTransport(handle))
    with TestClient(app) as client:
        response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json() == {
        "status": "unavailable",
        "providers": [
            {"name": "up", "ready": True, "status": 200},
            {"name": "down", "ready": False, "error": "ConnectTimeout"},
        ],
    }
    assert sorted(calls) == ["http://127.0.0.1:8001/v1/models?api-version=2", "http://127.0.0.1:8002/v1/models"]


# --- metrics ---------------------------------------------------------------------------------------------------

LABELS = 'provider="local",route="local",wire_api="openai-chat"'


def metric_lines(client: TestClient) -> list[str]:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=")
    return [line for line in response.text.splitlines() if not line.startswith("#")]


def test_metrics_count_requests_streams_and_reasoning_tokens() -> None:
    with client_for(answering()) as client:
        for _ in range(2):
            response = client.post("/v1/chat/completions", json=REQUEST, headers=HEADERS)
            assert response.status_code == 200
        refused = client.post("/v1/chat/completions", content=b"{")
        assert refused.status_code == 400
        client.get("/healthz")  # not counted: the operations paths are numi_mw's own
        lines = metric_lines(client)
    assert 'numi_mw_requests_total{provider="local",route="local",status="200",wire_api="openai-chat"} 2.0' in lines
    assert 'numi_mw_requests_total{provider="",route="numi_mw",status="400",wire_api=""} 1.0' in lines
    assert f"numi_mw_reasoning_tokens_total{{{LABELS}}} 14.0" in lines
    assert f"numi_mw_time_to_first_byte_seconds_count{{{LABELS}}} 2.0" in lines
    assert f"numi_mw_request_duration_seconds_count{{{LABELS}}} 2.0" in lines
    assert f'numi_mw_request_duration_seconds_bucket{{le="+Inf",{LABELS}}} 2.0' in lines
    assert "numi_mw_open_streams 0.0" in lines
    assert not any(line.startswith("numi_mw_upstream_errors_total{") for line in lines)


def test_metrics_count_upstream_errors_by_stage_and_kind() -> None:
    with client_for(refusing) as client:
        response = client.post("/v1/chat/completions", json=REQUEST)
        lines = metric_lines(client)
    assert response.status_code == 502
    assert 'numi_mw_upstream_errors_total{kind="connect",stage="send"} 1.0' in lines
    assert 'numi_mw_requests_total{provider="local",route="local",status="502",wire_api="openai-chat"} 1.0' in lines


def test_each_status_of_a_route_counts_apart_and_its_times_together() -> None:
    """A route's answers count by status; its two histograms, which have no status label, take them all."""
    answers = iter([200, 502, 200])

    def handle(request: httpx.Request) -> httpx.Response:
        status = next(answers)
        if status == 502:
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        return answering()(request)

    with client_for(handle) as client:
        assert [client.post("/v1/chat/completions", json=REQUEST).status_code for _ in range(3)] == [200, 502, 200]
        lines = metric_lines(client)
    assert 'numi_mw_requests_total{provider="local",route="local",status="200",wire_api="openai-chat"} 2.0' in lines
    assert 'numi_mw_requests_total{provider="local",route="local",status="502",wire_api="openai-chat"} 1.0' in lines
    assert f"numi_mw_time_to_first_byte_seconds_count{{{LABELS}}} 3.0" in lines
    assert f"numi_mw_request_duration_seconds_count{{{LABELS}}} 3.0" in lines
    assert f"numi_mw_reasoning_tokens_total{{{LABELS}}} 14.0" in lines  # 7 in each answered stream's usage


def test_a_route_whose_answers_count_no_reasoning_tokens_has_no_reasoning_series() -> None:
    def plain(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"choices": [{"index": 0, "message": {"role": "assistant", "content": "4"}}]})

    with client_for(plain) as client:
        assert client.post("/v1/chat/completions", json=REQUEST).status_code == 200
        lines = metric_lines(client)
    assert 'numi_mw_requests_total{provider="local",route="local",status="200",wire_api="openai-chat"} 1.0' in lines
    assert not any(line.startswith("numi_mw_reasoning_tokens_total{") for line in lines)


def test_catalog_requests_are_counted_by_endpoint() -> None:
    app = create_app(catalog=load_catalog(CATALOG, "c.toml"), transport=httpx.MockTransport(answering()))
    with TestClient(app) as client:
        client.post("/v1/chat/completions", json={**REQUEST, "model": "a/m"})
        client.get("/v1/models")  # served from the catalog
        lines = metric_lines(client)
    assert 'numi_mw_requests_total{provider="up",route="up/m",status="200",wire_api="openai-chat"} 1.0' in lines
    assert 'numi_mw_requests_total{provider="",route="numi_mw",status="200",wire_api=""} 1.0' in lines


def test_two_apps_keep_their_own_metrics() -> None:
    with client_for(answering()) as one, client_for(answering()) as two:
        one.post("/v1/chat/completions", json=REQUEST)
        assert f"numi_mw_reasoning_tokens_total{{{LABELS}}} 7.0" in metric_lines(one)
        assert not any(line.startswith("numi_mw_reasoning_tokens_total{") for line in metric_lines(two))


def test_without_metrics_no_body_is_searched_for_a_reasoning_token_count(monkeypatch: pytest.MonkeyPatch) -> None:
    searched: list[bytes] = []
    monkeypatch.setattr(_TokenCount, "feed", lambda self, body: searched.append(body))
    for metrics in (False, True):
        searched.clear()
        with client_for(answering(), metrics=metrics) as client:
            assert client.post("/v1/chat/completions", json=REQUEST).status_code == 200
        assert (b'"reasoning_tokens":7' in b"".join(searched)) is metrics
        assert bool(searched) is metrics


def test_without_metrics_the_path_goes_upstream() -> None:
    calls: list[str] = []
    with client_for(answering(calls), metrics=False) as client:
        client.get("/metrics")
        client.post("/v1/chat/completions", json=REQUEST)
    assert calls[0] == "GET http://127.0.0.1:8000/v1/metrics"


# --- the access log --------------------------------------------------------------------------------------------


def access_fields(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [record.access for record in caplog.records if record.name == "numi_mw.access"]  # type: ignore[attr-defined]


def test_one_access_line_per_request_with_sizes_timings_and_route(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="numi_mw")
    body = json.dumps(REQUEST).encode()
    with client_for(answering()) as client:
        client.post(f"/v1/chat/completions?key={SECRET_KEY}", content=body, headers=HEADERS)
        client.get("/healthz")
    [fields] = access_fields(caplog)
    assert list(fields) == [
        "method",
        "path",
        "status",
        "request_bytes",
        "response_bytes",
        "ttfb_s",
        "total_s",
        "route",
        "provider",
        "wire_api",
    ]
    assert {key: fields[key] for key in ("method", "path", "status", "request_bytes", "route", "provider")} == {
        "method": "POST",
        "path": "/v1/chat/completions",
        "status": 200,
        "request_bytes": len(body),
        "route": "local",
        "provider": "local",
    }
    assert fields["wire_api"] == "openai-chat"
    assert fields["response_bytes"] > len(STREAM)  # normalized: reasoning and reasoning_details
    assert 0 <= fields["ttfb_s"] <= fields["total_s"]
    line = JSONFormatter().format(next(r for r in caplog.records if r.name == "numi_mw.access"))
    parsed = json.loads(line)
    assert list(parsed) == ["time", "level", "logger", *fields]
    assert (parsed["level"], parsed["logger"]) == ("info", "numi_mw.access")


def test_a_text_access_line_escapes_what_could_forge_a_line_or_a_field(caplog: pytest.LogCaptureFixture) -> None:
    """The path is logged percent-decoded: a ``%0a`` in it would start a forged line, a ``%20`` a forged field.
    In text, control characters, backslashes and spaces of a value are escaped; JSON escapes them itself."""
    caplog.set_level(logging.INFO, logger="numi_mw")
    with client_for(answering()) as client:
        client.get("/v1/x%0a2026-12-01%20INFO%20numi_mw.access:%20method=GET%5cpath=/forged%20status=200%1b[0m")
    [record] = [r for r in caplog.records if r.name == "numi_mw.access"]
    line = TextFormatter().format(record)
    assert line.count("\n") == 0
    message = line.partition(" INFO numi_mw.access: ")[2]
    assert message.startswith(
        "method=GET path=/v1/x\\x0a2026-12-01\\x20INFO\\x20numi_mw.access:\\x20method=GET\\\\path=/forged"
        "\\x20status=200\\x1b[0m status=200 request_bytes=0 response_bytes="
    )
    assert json.loads(JSONFormatter().format(record))["path"] == (
        "/v1/x\n2026-12-01 INFO numi_mw.access: method=GET\\path=/forged status=200\x1b[0m"
    )


def test_a_json_log_line_is_one_line_and_sends_no_control_whatever_the_path(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="numi_mw")
    with client_for(answering()) as client:
        client.get("/v1/a%E2%80%A8b%C2%85c%C2%9b31m%7f%E2%80%A9%5c%E2%80%A8d%C3%A9")
    [record] = [r for r in caplog.records if r.name == "numi_mw.access"]
    line = JSONFormatter().format(record)
    assert line.splitlines() == [line]
    assert '"path": "/v1/a\\u2028b\\u0085c\\u009b31m\\u007f\\u2029\\\\\\u2028dé"' in line  # é stays as it is
    assert json.loads(line)["path"] == "/v1/a\u2028b\x85c\x9b31m\x7f\u2029\\\u2028dé"


def test_a_text_log_line_escapes_control_characters_and_backslashes() -> None:
    record = logging.LogRecord(
        "numi_mw.serve", logging.INFO, __file__, 1, "model %s", ("a\nb\\c\x1b\x85\u2028d",), None
    )
    line = TextFormatter().format(record)
    assert line.partition(" INFO ")[2] == "numi_mw.serve: model a\\x0ab\\\\c\\x1b\\x85\\u2028d"
    assert line.splitlines() == [line]


_ESCAPED = "".join(map(chr, _LINE_ESCAPES))


@settings(max_examples=500, deadline=None)
@given(st.text(st.sampled_from(f"{_ESCAPED} a/\u00e9\u00a0\u00ad\u4e2d\U0001f600") | st.characters(), max_size=40))
@example("/v1/chat/completions")
@example("openai/gpt-6-luna")
@example("a b")
@example("\\")
@example("\u2029")
def test_the_escapes_that_skip_clean_text_give_what_translating_gives(text: str) -> None:
    """``escape_line`` and ``escape_value`` return text with nothing to escape as it is, without translating it:
    the same text as translating it every time."""
    assert escape_line(text) == text.translate(_LINE_ESCAPES)
    assert escape_value(text) == text.translate(_VALUE_ESCAPES)


@settings(max_examples=300, deadline=None)
@given(st.text(st.sampled_from(f"{_ESCAPED} a/\u00e9\u4e2d") | st.characters(), max_size=30))
@example("/v1/a\x7fb")  # DEL is ASCII, and escaped
@example("/v1/chat/completions")
def test_a_json_access_line_escapes_exactly_what_it_names(path: str) -> None:
    fields = {"method": "GET", "path": path, "status": 200}
    record = logging.LogRecord("numi_mw.access", logging.INFO, __file__, 1, _AccessLine(fields), None, None)
    record.access = fields
    line = JSONFormatter().format(record)
    time_stamp = json.loads(line)["time"]
    expected = {"time": time_stamp, "level": "info", "logger": "numi_mw.access", **fields}
    assert line == json.dumps(expected, ensure_ascii=False).translate(_JSON_ESCAPES)
    assert json.loads(line) == expected


def test_an_access_line_is_the_format_strings_line() -> None:
    """``TextFormatter`` writes an access line out directly; it is the line its format string makes."""
    fields = {"method": "POST", "path": "/v1/a b", "status": 200, "ttfb_s": 0.000412, "model": "m\n"}
    record = logging.LogRecord("numi_mw.access", logging.INFO, __file__, 1, _AccessLine(fields), None, None)
    record.access = fields
    record.created, record.msecs = 1796342489.259, 259.0
    formatter = TextFormatter()
    line = formatter.format(record)
    assert line == logging.Formatter.format(formatter, record)
    assert line.partition(",259 ")[2] == (
        "INFO numi_mw.access: method=POST path=/v1/a\\x20b status=200 ttfb_s=0.000412 model=m\\x0a"
    )
    record.exc_text = "Traceback (most recent call last):"  # a record formatted before: it keeps its text
    assert formatter.format(record) == logging.Formatter.format(formatter, record) == f"{line}\n{record.exc_text}"


def test_log_config_refuses_trace_whose_lines_carry_headers_and_queries() -> None:
    """uvicorn's ``trace`` level logs every ASGI message whole: the scope's headers (``Authorization``) and
    query string (``?key=…``)."""
    with pytest.raises(ValueError) as info:
        log_config("trace", "text")
    assert str(info.value) == "level must be one of critical, error, warning, info, debug, not 'trace'"
    assert log_config("debug", "json")["loggers"]["uvicorn"]["level"] == "DEBUG"


def test_a_catalog_route_logs_its_model_and_an_upstream_failure_its_kind(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="numi_mw")
    app = create_app(catalog=load_catalog(CATALOG, "c.toml"), transport=httpx.MockTransport(refusing))
    with TestClient(app) as client:
        client.post("/v1/chat/completions", json={**REQUEST, "model": "a/m"})
    [fields] = access_fields(caplog)
    assert {k: v for k, v in fields.items() if k not in ("request_bytes", "response_bytes", "ttfb_s", "total_s")} == {
        "method": "POST",
        "path": "/v1/chat/completions",
        "status": 502,
        "route": "up/m",
        "provider": "up",
        "model": "a/m",
        "wire_api": "openai-chat",
        "upstream_error": "send:connect",
    }


def test_the_access_line_of_a_request_numi_mw_fails_on_counts_the_500_it_sent(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="numi_mw")

    def faulty(request: httpx.Request) -> httpx.Response:  # a transport that breaks its contract
        raise RuntimeError("a fault of the transport")

    app = create_app(UPSTREAM, transport=httpx.MockTransport(faulty))
    with TestClient(app, raise_server_exceptions=False) as client:
        response = client.post("/v1/chat/completions", json=REQUEST)
    assert (response.status_code, response.json()["error"]["code"]) == (500, "internal_error")
    assert response.headers["connection"] == "close"  # the server closes it after the exception
    [fields] = access_fields(caplog)
    assert (fields["status"], fields["response_bytes"]) == (500, len(response.content))


INTERNAL_ERROR = {
    "error": {
        "message": "numi_mw failed on this request; the server's log has the details.",
        "type": "api_error",
        "code": "internal_error",
        "param": None,
    }
}


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics"])
def test_an_operations_path_that_fails_answers_the_openai_style_500_and_raises_on(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object) -> Any:
        raise RuntimeError("a fault of the operations layer")

    app = create_app(UPSTREAM, transport=httpx.MockTransport(answering()))
    monkeypatch.setattr("numi_mw.proxy.ops._Readiness.answer", broken)
    monkeypatch.setattr("numi_mw.proxy.ops.generate_latest", broken)
    monkeypatch.setattr("numi_mw.proxy.ops._answer", broken)  # the health answer's one step
    with TestClient(app, raise_server_exceptions=False) as client:
        response = client.get(path)
    assert (response.status_code, response.headers["connection"]) == (500, "close")
    assert response.json() == INTERNAL_ERROR
    with TestClient(app) as client, pytest.raises(RuntimeError, match="a fault of the operations layer"):
        client.get(path)


def test_the_operations_layer_is_the_sidecars_whole_middleware_stack() -> None:
    app = create_app(UPSTREAM, transport=httpx.MockTransport(answering()))
    with TestClient(app) as client:
        assert client.post("/v1/chat/completions", json=REQUEST).status_code == 200
    assert type(app.middleware_stack).__name__ == "Operations"
    assert app.middleware_stack.app is app.router  # type: ignore[attr-defined]


def test_middleware_added_to_the_sidecar_runs_in_starlettes_own_stack() -> None:
    seen: list[str] = []

    class Tagging:
        def __init__(self, app: Any) -> None:
            self.app = app

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                seen.append(scope["path"])
            await self.app(scope, receive, send)

    def faulty(request: httpx.Request) -> httpx.Response:
        raise RuntimeError("a fault of the transport")

    app = create_app(UPSTREAM, transport=httpx.MockTransport(faulty))
    app.add_middleware(Tagging)
    with TestClient(app, raise_server_exceptions=False) as client:
        response = client.post("/v1/chat/completions", json=REQUEST)
        health = client.get("/healthz")
    assert (response.status_code, response.json()) == (500, INTERNAL_ERROR)
    assert (health.status_code, seen) == (200, ["/v1/chat/completions", "/healthz"])
    assert type(app.middleware_stack).__name__ == "ServerErrorMiddleware"


def test_with_its_own_exception_handler_the_app_answers_an_operations_fault_with_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def own(request: Any, exc: Exception) -> Response:
        return PlainTextResponse("my 500 page", status_code=500)

    def broken(*args: object) -> Any:
        raise RuntimeError("a fault of the operations layer")

    app = create_app(UPSTREAM, transport=httpx.MockTransport(answering()))
    app.add_exception_handler(Exception, own)
    monkeypatch.setattr("numi_mw.proxy.ops._Readiness.answer", broken)
    with TestClient(app, raise_server_exceptions=False) as client:
        response = client.get("/readyz")
    assert (response.status_code, response.text) == (500, "my 500 page")


def test_routes_added_to_the_sidecar_get_starlettes_answers_to_their_http_errors() -> None:
    async def mine(request: Any) -> Response:
        raise HTTPException(404, "no such thing")

    app = create_app(UPSTREAM, transport=httpx.MockTransport(answering()))
    app.add_route("/mine", mine, methods=["GET"])
    with TestClient(app) as client:  # (it raises what reaches the server)
        missing = client.get("/mine")
        wrong_method = client.post("/mine")
        chat = client.post("/v1/chat/completions", json=REQUEST)
    assert (missing.status_code, missing.text) == (404, "no such thing")
    assert (wrong_method.status_code, set(wrong_method.headers["allow"].split(", "))) == (405, {"GET", "HEAD"})
    assert chat.status_code == 200
    assert type(app.middleware_stack).__name__ == "ServerErrorMiddleware"  # Starlette's own, for its routes


@pytest.mark.parametrize("chunked", [False, True])
def test_an_outer_apps_body_limit_is_answered_as_starlette_answers_it(
    chunked: bool, caplog: pytest.LogCaptureFixture
) -> None:
    if "max_body_size" not in inspect.signature(Starlette).parameters:
        pytest.skip("this Starlette has no max_body_size (Starlette 1.0 added it)")
    caplog.set_level(logging.INFO, logger="numi_mw")
    inner = create_app(UPSTREAM, transport=httpx.MockTransport(answering()))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with inner.router.lifespan_context(inner):
            yield

    outer = Starlette(routes=[Mount("/", app=inner)], max_body_size=100, lifespan=lifespan)
    body = json.dumps(REQUEST).encode() + b" " * 100

    def pieces() -> Iterator[bytes]:
        yield body

    with TestClient(outer) as client:  # (it raises what reaches the server)
        response = client.post("/v1/chat/completions", content=pieces() if chunked else body)
    assert response.status_code == 413
    [fields] = access_fields(caplog)
    assert fields["status"] == 413


def test_a_memoryview_body_is_counted_as_its_bytes() -> None:
    usage = b'{"usage":{"completion_tokens_details":{"reasoning_tokens":5}}}'

    async def mine(request: Any) -> Response:
        async def pieces() -> AsyncIterator[memoryview]:
            yield memoryview(usage)

        return StreamingResponse(pieces(), media_type="application/json")

    app = create_app(UPSTREAM, transport=httpx.MockTransport(answering()))
    app.add_route("/mine", mine, methods=["GET"])
    with TestClient(app) as client:
        response = client.get("/mine")
        lines = metric_lines(client)
    assert response.content == usage
    assert 'numi_mw_reasoning_tokens_total{provider="",route="numi_mw",wire_api=""} 5.0' in lines


# --- what logs never carry -------------------------------------------------------------------------------------


def broken_stream(request: httpx.Request) -> httpx.Response:
    """A stream whose second read fails with an error quoting the line it could not read, as h11 does."""

    class Broken(httpx.AsyncByteStream):
        async def __aiter__(self) -> Any:
            yield STREAM[:120]
            raise httpx.RemoteProtocolError(f"illegal chunk header: bytearray(b'{SECRET_REASONING}')")

    return httpx.Response(200, stream=Broken(), headers={"content-type": "text/event-stream"})


def formatted(records: list[logging.LogRecord]) -> str:
    text, json_lines = TextFormatter(), JSONFormatter()
    return "\n".join(f"{text.format(r)}\n{json_lines.format(r)}" for r in records)


def test_no_body_key_or_reasoning_byte_reaches_a_log(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with client_for(broken_stream) as client:
        response = client.post(f"/v1/chat/completions?api-key={SECRET_KEY}", json=REQUEST, headers=HEADERS)
    assert response.status_code == 200
    assert b'"type":"upstream_unavailable","code":502' in response.content
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records if r.name == "numi_mw.upstream"] == [
        ("numi_mw.upstream", "WARNING", "upstream stream failed: RemoteProtocolError")
    ]
    logged = formatted([r for r in caplog.records if r.name.startswith(("numi_mw", "uvicorn"))])
    assert logged
    for secret in SECRETS:
        assert secret not in logged


def test_an_exception_is_logged_without_its_text() -> None:
    try:
        try:
            raise ValueError(f"bad line {SECRET_REASONING}")
        except ValueError as inner:
            raise RuntimeError(f"while reading {SECRET_PROMPT}") from inner
    except RuntimeError:
        record = logging.LogRecord(
            "uvicorn.error", logging.ERROR, __file__, 1, "Exception in ASGI application", (), None
        )
        record.exc_info = sys.exc_info()
    text = TextFormatter().format(record)
    assert "builtins.ValueError (message withheld)" in text
    assert "builtins.RuntimeError (message withheld)" in text
    assert "Traceback (most recent call last):" in text
    parsed = json.loads(JSONFormatter().format(record))
    assert parsed["message"] == "Exception in ASGI application"
    assert parsed["exception"].endswith("builtins.RuntimeError (message withheld)")
    for secret in SECRETS:
        assert secret not in text
        assert secret not in parsed["exception"]


def test_the_library_logger_has_a_null_handler() -> None:
    assert any(isinstance(h, logging.NullHandler) for h in logging.getLogger("numi_mw").handlers)


def test_time_stamps_are_the_standard_ones_whatever_the_second() -> None:
    """Both formatters format the date and time once per second; every stamp is still the one written for that
    record alone: ``logging.Formatter``'s in text (``2026-12-04 04:01:29,259``, local time), ISO 8601 in UTC in
    JSON (``2025-12-04T04:01:29.259Z``), on the same second, the next and one before."""
    text, standard, as_json = TextFormatter(), logging.Formatter("%(asctime)s"), JSONFormatter()
    record = logging.LogRecord("numi_mw.access", logging.INFO, __file__, 1, "m", None, None)
    for created in (1764820889.259, 1764820889.9995, 1764820890.0004, 1764820890.5, 1764820889.001, 1764820889.0):
        record.created, record.msecs = created, float(int((created - int(created)) * 1000))
        assert text.formatTime(record) == standard.formatTime(record), created
        utc = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
        assert json.loads(as_json.format(record))["time"] == f"{utc}.{int(record.msecs):03d}Z", created
    assert text.formatTime(record).endswith(":29,000")
    assert json.loads(as_json.format(record))["time"] == "2025-12-04T04:01:29.000Z"


def test_log_records_left_lean_format_to_the_same_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    """``lean_log_records`` (each ``numi-mw serve`` process) drops the caller, thread and process from every record;
    neither formatter writes them, so a line reads the same before and after (but for its time stamp)."""
    keep_logging_switches(monkeypatch)
    records: list[logging.LogRecord] = []
    logger = logging.getLogger("numi_mw.test_lean")
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    monkeypatch.setattr(logger, "handlers", [handler])
    monkeypatch.setattr(logger, "propagate", False)
    logger.setLevel(logging.INFO)
    fields = {"method": "POST", "status": 200, "ttfb_s": 0.000512, "route": "openrouter"}
    logger.info("%s", "method=POST status=200 ttfb_s=0.000512 route=openrouter", extra={"access": fields})
    lean_log_records()
    logger.info("%s", "method=POST status=200 ttfb_s=0.000512 route=openrouter", extra={"access": fields})
    full, lean = records
    assert (full.funcName, full.process is not None, full.thread is not None) == (
        "test_log_records_left_lean_format_to_the_same_lines",
        True,
        True,
    )
    assert (lean.pathname, lean.lineno, lean.funcName, lean.thread, lean.threadName, lean.process) == (
        "(unknown file)",
        0,
        "(unknown function)",
        None,
        None,
        None,
    )
    for formatter in (TextFormatter(), JSONFormatter()):
        lean.created, lean.msecs = full.created, full.msecs
        assert formatter.format(lean) == formatter.format(full)


def test_no_access_log_leaves_the_access_line_out_at_every_level() -> None:
    for level in ("info", "debug"):
        assert "numi_mw.access" not in log_config(level, "text")["loggers"]
        assert log_config(level, "text", access_log=False)["loggers"]["numi_mw.access"] == {"level": "WARNING"}
    with pytest.raises(ValueError) as info:
        log_config("info", "text", access_log="no")  # type: ignore[arg-type]
    assert str(info.value) == "access_log must be true or false, not 'no'"


def test_serve_quiets_the_loggers_that_print_whole_urls() -> None:
    config = log_config("info", "json")
    assert config["loggers"]["httpx"] == {"level": "WARNING"}
    assert config["loggers"]["httpcore"] == {"level": "WARNING"}
    assert config["loggers"]["uvicorn.access"]["handlers"] == []


# --- a real numi-mw serve process ------------------------------------------------------------------------------


@pytest.fixture
def broken_chunked_upstream() -> Iterator[int]:
    """A raw upstream that answers every request with a chunked stream whose second chunk header is a
    reasoning line (not hex), so the HTTP parser fails on it and quotes it."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(20)
    port = listener.getsockname()[1]

    def serve() -> None:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(10)
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, _, rest = data.partition(b"\r\n\r\n")
            length = next(
                int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
            )
            while len(rest) < length:
                rest += conn.recv(65536)
            event = b'data: {"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}\n\n'
            conn.sendall(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                + f"{len(event):x}\r\n".encode()
                + event
                + b"\r\n"
                + f"data: {SECRET_REASONING}\r\n".encode()
            )
            conn.recv(1)  # until the sidecar gives up on the connection

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield port
    finally:
        listener.close()
        thread.join(timeout=15)


BROKEN_ANSWER = {
    # httpcore hands over the head and the first event before it meets the bad chunk header: the stream has begun
    # (200) and ends with its error event
    "httpcore": (
        200,
        "stream:protocol",
        "upstream stream failed: RemoteProtocolError",
        b'"type":"upstream_unavailable","code":502',
    ),
    # aiohttp parses the whole read that brought the head, bad chunk header included, before it hands over the head
    # (docs/sidecar.md, "Upstream transport"): the answer is a 502 before any byte
    "aiohttp": (
        502,
        "send:protocol",
        "upstream send failed: RemoteProtocolError",
        b'{"error":{"message":"The upstream could not be reached; try again later.","type":"api_error",'
        b'"code":"upstream_unavailable","param":null}}',
    ),
}


def one_logged_request(upstream_port: int, *options: str, query: str = "") -> tuple[httpx.Response, str]:
    """One chat completions request (plus ``query``) through a real ``numi-mw serve --upstream`` at
    ``upstream_port`` with ``options``; its response, and everything the process logged."""
    port = free_port()
    command = [*numi_mw_command(), "serve", "--upstream", f"http://127.0.0.1:{upstream_port}/v1", "--port", str(port)]
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen([*command, *options], stdout=log, stderr=log)
        try:
            wait_for_port(port, process)
            with httpx.Client(timeout=20) as client:
                url = f"http://127.0.0.1:{port}/v1/chat/completions{query}"
                response = client.post(url, json=REQUEST, headers=HEADERS)
        finally:
            stop_process(process)
        log.seek(0)
        return response, log.read().decode()


@pytest.mark.parametrize("transport", UPSTREAM_TRANSPORTS)
@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_real_sidecar_logs_no_body_byte_of_a_broken_upstream(
    broken_chunked_upstream: int, log_format: str, transport: str
) -> None:
    response, logged = one_logged_request(
        broken_chunked_upstream,
        "--log-format",
        log_format,
        "--upstream-transport",
        transport,
        query=f"?key={SECRET_KEY}",
    )
    status, upstream_error, message, error = BROKEN_ANSWER[transport]
    assert response.status_code == status
    assert response.content == error if status == 502 else error in response.content  # the body, or its error event
    for secret in SECRETS:
        assert secret not in logged
    lines = logged.splitlines()
    if log_format == "json":
        records = [json.loads(line) for line in lines]
        access = [r for r in records if r["logger"] == "numi_mw.access"]
        assert len(access) == 1
        assert {k: access[0][k] for k in ("method", "path", "status", "route", "upstream_error")} == {
            "method": "POST",
            "path": "/v1/chat/completions",
            "status": status,
            "route": "local",
            "upstream_error": upstream_error,
        }
        assert [r["message"] for r in records if r["logger"] == "numi_mw.upstream"] == [message]
    else:
        assert any(
            f" INFO numi_mw.access: method=POST path=/v1/chat/completions status={status} " in line for line in lines
        )


def test_a_real_sidecar_without_its_access_log_still_logs_start_up_and_failures(broken_chunked_upstream: int) -> None:
    response, logged = one_logged_request(broken_chunked_upstream, "--no-access-log", "--upstream-transport", "aiohttp")
    lines = logged.splitlines()
    assert response.status_code == 502
    assert not [line for line in lines if " numi_mw.access: " in line]
    assert [line.partition(" WARNING ")[2] for line in lines if " numi_mw.upstream: " in line] == [
        "numi_mw.upstream: upstream send failed: RemoteProtocolError"
    ]
    assert any(" INFO numi_mw.serve: upstream http://127.0.0.1:" in line for line in lines)


def test_a_reasoning_token_count_split_across_body_messages_is_read_whole() -> None:
    body = b'{"choices":[],"usage":{"completion_tokens":200,"completion_tokens_details":{"reasoning_tokens":123}}}'
    for cut in range(len(body) + 1):
        count = _TokenCount()
        count.feed(body[:cut])
        count.feed(body[cut:])
        assert count.value == 123, cut
    quoted = _TokenCount()
    quoted.feed(b'{"content":"say \\"reasoning_tokens\\": 9"}')
    assert quoted.value is None


def test_an_event_streams_count_is_read_whole_wherever_its_messages_are_cut() -> None:
    """In an event stream a message that ends with a blank line ends an event, and the next one is searched alone;
    a count cut anywhere else, into three messages of any size (an empty one, one byte), is still read whole."""
    usage = b'data: {"choices":[],"usage":{"completion_tokens_details":{"reasoning_tokens":123}}}\n\n'
    stream = b'data: {"choices":[{"index":0,"delta":{"content":"4"}}]}\n\n' + usage + b"data: [DONE]\n\n"
    for events in (True, False):  # a body that is not an event stream is always read across each cut
        for cut in range(len(stream) + 1):
            for second in range(cut, len(stream) + 1):
                count = _TokenCount()
                count.events = events
                for piece in (stream[:cut], stream[cut:second], stream[second:]):
                    count.feed(piece)
                assert count.value == 123, (events, cut, second)
    count = _TokenCount()
    count.events = True
    count.feed(b'data: {"usage":{"reasoning_tokens":7}}\n\n')
    count.feed(b'data: {"usage":{"reasoning_tokens":8}}\n\n')
    assert count.value == 8  # the last count wins
