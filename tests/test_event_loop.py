"""CPU work whose cost grows with what a client or an upstream sends runs in a worker thread once its body is large
(``asgi.off_loop``, ``docs/security.md``, "The event loop"): preparing a request, finding the turns a replay store
may restore, rewriting a buffered answer whole and reading its opaque state. No timing here: a large body's work
waits on an event only a concurrent small request can set, so it can only finish if the loop went on meanwhile."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

import numi_mw.core.response
import numi_mw.middleware
import numi_mw.proxy.app
import numi_mw.transport
from numi_mw import NormalizingTransport, ReasoningMiddleware
from numi_mw.asgi import OFF_LOOP_BYTES
from numi_mw.proxy import create_app

WAIT = 10.0
"""The longest a large body's held work waits for the small request, in seconds (a bound, never a measure)."""

ANSWER = {"id": "gen-1", "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}]}


def large_body() -> bytes:
    """A chat completions body just over ``OFF_LOOP_BYTES``."""
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "a" * OFF_LOOP_BYTES}]}).encode()
    assert len(body) > OFF_LOOP_BYTES
    return body


SMALL = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'


def held(real: Callable[..., Any], started: threading.Event, small_done: threading.Event, order: list[str]) -> Any:
    """``real``, but for a large body it waits until the small request has finished (up to ``WAIT`` seconds): run on
    the event loop it would hold the loop, the small request could never finish, and the wait would run out."""

    def prepare(body: bytes, *args: Any, **kwargs: Any) -> Any:
        if len(body) >= OFF_LOOP_BYTES:
            started.set()
            if not small_done.wait(WAIT):
                raise AssertionError("the small request did not finish while the large body was prepared")
            order.append("large prepared")
        return real(body, *args, **kwargs)

    return prepare


async def race(post: Callable[[bytes], Any], started: threading.Event, small_done: threading.Event) -> list[int]:
    """Send the large body, and once its preparation has started the small one; the statuses, large first."""
    statuses = [0, 0]

    async def large() -> None:
        statuses[0] = (await post(large_body())).status_code

    async def small() -> None:
        with anyio.fail_after(WAIT):
            while not started.is_set():
                await anyio.sleep(0.01)
        statuses[1] = (await post(SMALL)).status_code
        small_done.set()

    with anyio.fail_after(3 * WAIT):
        async with anyio.create_task_group() as group:
            group.start_soon(large)
            group.start_soon(small)
    return statuses


def upstream(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json=ANSWER)


async def test_the_sidecar_answers_a_small_request_while_a_large_body_is_prepared(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started, small_done, order = threading.Event(), threading.Event(), []
    prepare = held(numi_mw.proxy.app.prepare_request, started, small_done, order)
    monkeypatch.setattr(numi_mw.proxy.app, "prepare_request", prepare)
    app = create_app("http://127.0.0.1:9/v1", transport=httpx.MockTransport(upstream))
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://sidecar")
    async with app.router.lifespan_context(app), client as http:

        async def post(body: bytes) -> httpx.Response:
            response = await http.post("/v1/chat/completions", content=body)
            order.append("small answered" if body == SMALL else "large answered")
            return response

        assert await race(post, started, small_done) == [200, 200]
    assert order == ["small answered", "large prepared", "large answered"]


async def test_the_middleware_answers_a_small_request_while_a_large_body_is_prepared(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started, small_done, order = threading.Event(), threading.Event(), []
    prepare = held(numi_mw.middleware.prepare_request, started, small_done, order)
    monkeypatch.setattr(numi_mw.middleware, "prepare_request", prepare)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        body = json.dumps(ANSWER).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body, "more_body": False})

    wrapped = ReasoningMiddleware(app, provider="openrouter")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(wrapped), base_url="http://app") as http:

        async def post(body: bytes) -> httpx.Response:
            headers = {"content-type": "application/json"}
            response = await http.post("/v1/chat/completions", content=body, headers=headers)
            order.append("small answered" if body == SMALL else "large answered")
            return response

        assert await race(post, started, small_done) == [200, 200]
    assert order == ["small answered", "large prepared", "large answered"]


async def test_the_async_transport_sends_a_small_request_while_a_large_body_is_prepared(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started, small_done, order = threading.Event(), threading.Event(), []
    prepare = held(numi_mw.transport.prepare_request, started, small_done, order)
    monkeypatch.setattr(numi_mw.transport, "prepare_request", prepare)
    transport = NormalizingTransport(httpx.MockTransport(upstream), provider="openrouter")
    async with httpx.AsyncClient(transport=transport, base_url="http://up.test") as http:

        async def post(body: bytes) -> httpx.Response:
            headers = {"content-type": "application/json"}
            response = await http.post("/v1/chat/completions", content=body, headers=headers)
            order.append("small answered" if body == SMALL else "large answered")
            return response

        assert await race(post, started, small_done) == [200, 200]
    assert order == ["small answered", "large prepared", "large answered"]


def recording(module: Any, name: str, seen: list[tuple[str, bool]], monkeypatch: pytest.MonkeyPatch) -> None:
    """Replace ``module.name`` with a wrapper that notes, per call, whether it ran on the test's (the loop's)
    thread."""
    real = getattr(module, name)
    loop_thread = threading.get_ident()

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        seen.append((name, threading.get_ident() == loop_thread))
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapper)


def big_answer() -> bytes:
    """A buffered chat completion just over ``OFF_LOOP_BYTES``, with reasoning details for the replay store."""
    details = [{"type": "reasoning.encrypted", "data": "e" * 64, "id": "r1", "format": "openai-responses-v1"}]
    message = {"role": "assistant", "content": "a" * OFF_LOOP_BYTES, "reasoning_details": details}
    return json.dumps({"id": "gen-1", "choices": [{"index": 0, "message": message}]}).encode()


@pytest.mark.parametrize("large", [False, True])
async def test_the_sidecar_runs_work_on_a_large_body_in_a_thread_and_a_small_one_inline(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, large: bool
) -> None:
    seen: list[tuple[str, bool]] = []
    for name in ("prepare_request", "missing_in_body", "whole_answer", "answer_states"):
        recording(numi_mw.proxy.app, name, seen, monkeypatch)
    answer = big_answer() if large else json.dumps(ANSWER).encode()

    def replying(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=answer, headers={"content-type": "application/json"})

    app = create_app(
        "http://127.0.0.1:9/v1",
        provider="openrouter",
        transport=httpx.MockTransport(replying),
        replay_store=f"sqlite:///{tmp_path / 'replay.db'}",
    )
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://sidecar")
    async with app.router.lifespan_context(app), client as http:
        response = await http.post(
            "/v1/chat/completions", content=large_body() if large else SMALL, headers={"authorization": "Bearer k"}
        )
    assert response.status_code == 200
    assert response.content == answer
    inline = not large
    assert seen == [
        ("missing_in_body", inline),
        ("prepare_request", inline),
        ("whole_answer", inline),
        ("answer_states", inline),
    ]


@pytest.mark.parametrize("large", [False, True])
async def test_the_middleware_runs_work_on_a_large_body_in_a_thread_and_a_small_one_inline(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, large: bool
) -> None:
    seen: list[tuple[str, bool]] = []
    for name in ("prepare_request", "missing_in_body", "answer_states"):
        recording(numi_mw.middleware, name, seen, monkeypatch)
    answer = big_answer() if large else json.dumps(ANSWER).encode()
    finished: list[bool] = []
    loop_thread = threading.get_ident()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": answer, "more_body": False})

    wrapped = ReasoningMiddleware(app, provider="openrouter", replay_store=f"sqlite:///{tmp_path / 'replay.db'}")
    real_finish = numi_mw.core.response.JSONRewriter.finish

    def finish(self: Any) -> bytes:
        finished.append(threading.get_ident() == loop_thread)
        return real_finish(self)

    monkeypatch.setattr(numi_mw.core.response.JSONRewriter, "finish", finish)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(wrapped), base_url="http://app") as http:
        response = await http.post(
            "/v1/chat/completions",
            content=large_body() if large else SMALL,
            headers={"content-type": "application/json", "authorization": "Bearer k"},
        )
    assert response.status_code == 200
    assert response.content == answer
    inline = not large
    assert seen == [("missing_in_body", inline), ("prepare_request", inline), ("answer_states", inline)]
    assert finished == [inline]
