"""The sidecar's, the middleware's and the transport's bounds (``docs/security.md``, "Bounds"): request header
count and size, one SSE event, one buffered answer; each refused with its exact status and body."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest

from numi_mw.cli import main
from numi_mw.proxy import create_app
from tests.e2e_support import sidecar

COUNT_431 = {
    "error": {
        "message": "The request headers are over the limit of 256 headers (--max-header-count, max_header_count); "
        "send fewer or smaller headers.",
        "type": "invalid_request_error",
        "code": "request_header_fields_too_large",
        "param": None,
    }
}
SIZE_431 = {
    "error": {
        "message": "The request headers are over the limit of 65536 bytes of header names and values "
        "(--max-header-bytes, max_header_bytes); send fewer or smaller headers.",
        "type": "invalid_request_error",
        "code": "request_header_fields_too_large",
        "param": None,
    }
}


def scope(headers: list[tuple[bytes, bytes]], path: str = "/v1/chat/completions") -> dict[str, Any]:
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
        "headers": headers, "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 2),
    }  # fmt: skip


async def drive(
    app: Any, headers: list[tuple[bytes, bytes]], body: bytes = b'{"model": "m"}'
) -> tuple[int, int, bytes]:
    """One request through the ASGI ``app``: its status, how many times it called ``receive``, and its body."""
    calls = 0

    async def receive() -> dict[str, Any]:
        nonlocal calls
        calls += 1
        if calls == 1:
            return {"type": "http.request", "body": body, "more_body": False}
        return {"type": "http.disconnect"}

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async with app.router.lifespan_context(app):
        await app(scope(headers), receive, send)
    return sent[0]["status"], calls, b"".join(m.get("body", b"") for m in sent[1:])


def small_headers(count: int) -> list[tuple[bytes, bytes]]:
    return [(b"content-type", b"application/json")] + [(f"x-h{i}".encode(), b"v") for i in range(count - 1)]


def upstream_app(seen: list[httpx.Request]) -> Any:
    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"choices": []})

    return create_app("http://127.0.0.1:9/v1", transport=httpx.MockTransport(answer))


async def test_256_headers_pass_and_257_get_431_before_the_body_is_read() -> None:
    seen: list[httpx.Request] = []
    app = upstream_app(seen)
    assert (await drive(app, small_headers(256)))[:2] == (200, 1)
    assert len(seen) == 1
    status, calls, body = await drive(app, small_headers(257))
    assert (status, calls, json.loads(body)) == (431, 0, COUNT_431)
    assert len(seen) == 1


async def test_header_bytes_over_64_kib_get_431_before_the_body_is_read() -> None:
    seen: list[httpx.Request] = []
    app = upstream_app(seen)
    name = b"x-big"
    fits = [(b"content-type", b"application/json"), (name, b"v" * (65536 - 28 - len(name)))]
    assert sum(len(k) + len(v) for k, v in fits) == 65536
    assert (await drive(app, fits))[:2] == (200, 1)
    over = [*fits[:1], (name, fits[1][1] + b"v")]
    status, calls, body = await drive(app, over)
    assert (status, calls, json.loads(body)) == (431, 0, SIZE_431)
    assert len(seen) == 1


async def test_the_header_limits_are_options() -> None:
    app = create_app(
        "http://127.0.0.1:9/v1",
        max_header_count=2,
        max_header_bytes=10**6,
        transport=httpx.MockTransport(lambda request: httpx.Response(200, json={})),
    )
    status, _, body = await drive(app, small_headers(3))
    assert status == 431
    assert json.loads(body)["error"]["message"].startswith("The request headers are over the limit of 2 headers ")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_header_count": 0}, "max_header_count must be a positive whole number of headers, not 0"),
        ({"max_header_count": True}, "max_header_count must be a positive whole number of headers, not True"),
        ({"max_header_bytes": "64k"}, "max_header_bytes must be a positive whole number of bytes, not '64k'"),
        ({"max_header_bytes": -1}, "max_header_bytes must be a positive whole number of bytes, not -1"),
    ],
)
def test_header_limit_options_are_checked(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as raised:
        create_app("http://127.0.0.1:9/v1", **options)
    assert str(raised.value) == message


def test_many_headers_never_go_through_httpxs_cookie_view(monkeypatch: pytest.MonkeyPatch) -> None:
    """httpx's cookie extraction copies the request headers with one scan per name (quadratic in their count); the
    sidecar's client never extracts, so that copy is never made."""

    def refuse(*args: object) -> None:
        raise AssertionError("httpx built its cookie view of the upstream request")

    monkeypatch.setattr(httpx.Cookies, "_CookieCompatRequest", refuse)
    seen: list[httpx.Request] = []
    app = upstream_app(seen)
    status, _, _ = anyio.run(drive, app, small_headers(256))
    assert status == 200
    assert len(seen[0].headers.raw) >= 255


def test_the_serve_flags_set_the_header_limits() -> None:
    flags = ("--max-header-count", "3", "--max-header-bytes", "100000")
    with sidecar("http://127.0.0.1:9/v1", *flags) as base_url, httpx.Client(timeout=10) as http:
        response = http.get(f"{base_url}/models", headers={"x-a": "1", "x-b": "2", "x-c": "3"})
    assert response.status_code == 431
    assert response.json()["error"]["message"] == (
        "The request headers are over the limit of 3 headers (--max-header-count, max_header_count); send fewer "
        "or smaller headers."
    )


@pytest.mark.parametrize("flag", ["--max-header-count", "--max-header-bytes"])
def test_serve_refuses_a_header_limit_that_is_not_positive(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serve", flag, "0"])
    assert exited.value.code == 2
    assert f"argument {flag}: '0' must be greater than 0" in capsys.readouterr().err
