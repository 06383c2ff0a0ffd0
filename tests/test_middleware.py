"""``ReasoningMiddleware`` in Starlette and FastAPI, and a raw ASGI drive proving responses stream."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastapi import FastAPI
from fastapi import Request as FastAPIRequest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.testclient import TestClient
from starlette.types import Message, Receive, Scope, Send
from starlette.websockets import WebSocket

from numi_mw import ReasoningMiddleware

SEEN: list[dict[str, Any]] = []


async def echo(request: Request) -> Response:
    body = await request.body()
    SEEN.append({"body": body, "content-length": request.headers.get("content-length"), "path": request.url.path})
    return Response(body, media_type="application/json")


async def ws(websocket: WebSocket) -> None:
    await websocket.accept()
    await websocket.send_text(await websocket.receive_text())
    await websocket.close()


def starlette_app(provider: str = "openrouter") -> TestClient:
    app = Starlette(
        routes=[
            Route("/v1/chat/completions", echo, methods=["POST"]),
            Route("/v1/embeddings", echo, methods=["POST"]),
            WebSocketRoute("/ws", ws),
        ]
    )
    app.add_middleware(ReasoningMiddleware, provider=provider)
    return TestClient(app)


def fastapi_app() -> TestClient:
    app = FastAPI()

    @app.post("/api/v1/chat/completions")
    async def chat(request: FastAPIRequest) -> dict[str, Any]:
        data: dict[str, Any] = await request.json()
        return data

    app.add_middleware(ReasoningMiddleware, provider="ppq")
    return TestClient(app)


REQUEST = {
    "model": "m",
    "reasoning_effort": "high",
    "messages": [{"role": "assistant", "content": "Hi", "reasoning_content": "Think."}],
}


def test_starlette_app_sees_the_normalized_body_and_content_length() -> None:
    SEEN.clear()
    with starlette_app() as client:
        response = client.post("/v1/chat/completions", content=json.dumps(REQUEST))
    expected = (
        b'{"model":"m","reasoning":{"effort":"high"},'
        b'"messages":[{"role":"assistant","content":"Hi","reasoning":"Think."}]}'
    )
    assert response.status_code == 200
    assert [{"body": expected, "content-length": str(len(expected)), "path": "/v1/chat/completions"}] == SEEN


def test_fastapi_app_sees_the_normalized_body() -> None:
    with fastapi_app() as client:
        response = client.post("/api/v1/chat/completions", json=REQUEST)
    assert response.json() == {
        "model": "m",
        "reasoning": {"effort": "high"},
        "messages": [{"role": "assistant", "content": "Hi", "reasoning": "Think."}],
    }


def test_other_paths_and_non_json_bodies_pass_untouched() -> None:
    SEEN.clear()
    raw = b'{"reasoning_effort": "high"}'
    with starlette_app() as client:
        client.post("/v1/embeddings", content=raw)
        client.post("/v1/chat/completions", content=raw, headers={"content-type": "text/plain"})
    assert [seen["body"] for seen in SEEN] == [raw, raw]


def test_websockets_pass_through() -> None:
    with starlette_app() as client, client.websocket_connect("/ws") as socket:
        socket.send_text('{"reasoning_effort": "high"}')
        assert socket.receive_text() == '{"reasoning_effort": "high"}'


@pytest.mark.parametrize(
    ("body", "status", "code", "param"),
    [
        (b"{not json", 400, "invalid_json", None),
        (b'{"reasoning": 5}', 400, "invalid_request", "reasoning"),
        (b'{"messages": "x", "reasoning_effort": "low"}', 400, "invalid_request", "messages"),
    ],
)
def test_bad_bodies_get_the_error_body_and_never_reach_the_app(
    body: bytes, status: int, code: str, param: str | None
) -> None:
    SEEN.clear()
    with starlette_app() as client:
        response = client.post("/v1/chat/completions", content=body)
    assert response.status_code == status
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert (error["type"], error["code"], error["param"]) == ("invalid_request_error", code, param)
    assert SEEN == []


def test_body_over_the_limit_gets_413() -> None:
    app = Starlette(routes=[Route("/v1/chat/completions", echo, methods=["POST"])])
    app.add_middleware(ReasoningMiddleware, provider="generic", max_body_bytes=10)
    with TestClient(app) as client:
        response = client.post("/v1/chat/completions", content=b'{"model": "long-name"}')
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"


def test_unknown_provider_fails_at_construction() -> None:
    with pytest.raises(ValueError, match="unknown provider"):
        ReasoningMiddleware(Starlette(), provider="nope")


async def test_raw_asgi_drive_streams_event_by_event() -> None:
    """The app's second event is produced only after the client has received the first one."""
    first_received = anyio.Event()

    async def events() -> AsyncIterator[bytes]:
        yield b'data: {"choices":[{"index":0,"delta":{"reasoning":"Spell"}}]}\n\n'
        with anyio.fail_after(5):
            await first_received.wait()
        yield b"data: [DONE]\n\n"

    async def stream(request: Request) -> Response:
        await request.body()
        return StreamingResponse(events(), media_type="text/event-stream")

    app = ReasoningMiddleware(
        Starlette(routes=[Route("/v1/chat/completions", stream, methods=["POST"])]), provider="openrouter"
    )
    body = json.dumps({**REQUEST, "stream": True}).encode()
    sent: list[Message] = []
    request_given = False
    disconnect = anyio.Event()

    async def receive() -> Message:
        nonlocal request_given
        if not request_given:
            request_given = True
            return {"type": "http.request", "body": body, "more_body": False}
        await disconnect.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)
        if message["type"] == "http.response.body" and message.get("body", b"").startswith(b"data: {"):
            first_received.set()

    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 2),
    }
    with anyio.fail_after(10):
        await app(scope, receive, send)
    disconnect.set()
    bodies = [m.get("body", b"") for m in sent if m["type"] == "http.response.body"]
    assert sent[0]["type"] == "http.response.start"
    assert bodies[:2] == [
        b'data: {"choices":[{"index":0,"delta":{"reasoning":"Spell","reasoning_details":'
        b'[{"type":"reasoning.text","text":"Spell","index":0}]}}]}\n\n',
        # the end of the stream closes the reasoning: the detail's format, then its details emptied (the text came
        # whole in one delta), then [DONE]
        b'data: {"choices":[{"index":0,"delta":{"reasoning_details":[{"type":"reasoning.text","format":"unknown",'
        b'"index":0}]},"finish_reason":null}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{"reasoning_details":[]},"finish_reason":null}]}\n\n'
        b"data: [DONE]\n\n",
    ]
    assert all("content-length" not in dict(m).get("headers", {}) for m in sent[:1])
    assert first_received.is_set()


COMPLETION = {
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Three.", "reasoning_content": "Spell it out."},
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 5, "completion_tokens": 9, "total_tokens": 14},
}


async def completion(request: Request) -> Response:
    await request.body()
    return JSONResponse(COMPLETION)


def completion_client(provider: str = "deepseek") -> TestClient:
    app = Starlette(routes=[Route("/v1/chat/completions", completion, methods=["POST"])])
    app.add_middleware(ReasoningMiddleware, provider=provider)
    return TestClient(app)


def test_json_response_gets_the_one_reasoning_shape() -> None:
    with completion_client() as client:
        response = client.post("/v1/chat/completions", json={"model": "m", "messages": []})
    assert response.json()["choices"][0]["message"] == {
        "role": "assistant",
        "content": "Three.",
        "reasoning": "Spell it out.",
        "reasoning_details": [{"type": "reasoning.text", "text": "Spell it out.", "format": "unknown"}],
    }
    assert response.headers["content-length"] == str(len(response.content))


def test_json_response_excluded_when_asked() -> None:
    with completion_client() as client:
        response = client.post("/v1/chat/completions", json={"model": "m", "include_reasoning": False})
    assert response.json() == {
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Three."}, "finish_reason": "stop"}],
        "usage": COMPLETION["usage"],
    }


async def _unused(scope: Scope, receive: Receive, send: Send) -> None:  # keeps type imports honest
    await JSONResponse({})(scope, receive, send)


def test_own_tag_families_through_the_middleware() -> None:
    from numi_mw.core.think import ThinkTags

    async def tagged(request: Request) -> Response:
        await request.body()
        return JSONResponse({"choices": [{"index": 0, "message": {"role": "assistant", "content": "[[plan]]Go."}}]})

    app = Starlette(routes=[Route("/v1/chat/completions", tagged, methods=["POST"])])
    app.add_middleware(ReasoningMiddleware, provider="generic", think_tags=ThinkTags(families=(("[[", "]]"),)))
    with TestClient(app) as client:
        message = client.post("/v1/chat/completions", json={"model": "m"}).json()["choices"][0]["message"]
    assert message == {
        "role": "assistant",
        "content": "Go.",
        "reasoning": "plan",
        "reasoning_details": [{"type": "reasoning.text", "text": "plan", "format": "unknown"}],
    }


async def drive(
    app: Any, headers: list[tuple[bytes, bytes]], pieces: list[bytes], extensions: dict[str, Any] | None = None
) -> list[Message]:
    """One raw ASGI request whose body arrives in ``pieces`` (the server offering ``extensions``, when given);
    returns the messages the app sent."""
    incoming = [{"type": "http.request", "body": p, "more_body": i < len(pieces) - 1} for i, p in enumerate(pieces)]
    sent: list[Message] = []

    async def receive() -> Message:
        return incoming.pop(0) if incoming else {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    scope: Scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions", "query_string": b"", "root_path": "",
        "headers": headers, "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 2),
    }  # fmt: skip
    if extensions is not None:
        scope["extensions"] = extensions
    with anyio.fail_after(10):
        await app(scope, receive, send)
    return sent


async def test_a_chunked_request_rewritten_reaches_the_app_with_its_length_only() -> None:
    seen: list[tuple[list[tuple[bytes, bytes]], bytes]] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        message = await receive()
        seen.append((scope["headers"], message["body"]))
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    raw = json.dumps(REQUEST).encode()
    headers = [(b"content-type", b"application/json"), (b"transfer-encoding", b"chunked")]
    await drive(ReasoningMiddleware(app, provider="openrouter"), headers, [raw[:10], raw[10:40], raw[40:]])
    expected = (
        b'{"model":"m","reasoning":{"effort":"high"},'
        b'"messages":[{"role":"assistant","content":"Hi","reasoning":"Think."}]}'
    )
    assert seen == [
        ([(b"content-type", b"application/json"), (b"content-length", str(len(expected)).encode())], expected)
    ]


def replying(*messages: Message) -> Any:
    """An ASGI app that reads the request, then sends ``messages`` (the very objects) in order."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        for message in messages:
            await send(message)

    return app


async def test_an_unchanged_json_response_keeps_its_messages() -> None:
    start = {
        "type": "http.response.start",
        "status": 200,
        "headers": [(b"content-type", b"application/json"), (b"content-length", b"11"), (b"etag", b'"v1"')],
    }
    body = {"type": "http.response.body", "body": b'{"ok":true}'}
    raw = b'{"model":"m","messages":[]}'
    sent = await drive(ReasoningMiddleware(replying(start, body)), [(b"content-type", b"application/json")], [raw])
    assert sent == [start, {"type": "http.response.body", "body": b'{"ok":true}'}]
    assert sent[0] is start
    assert sent[1] is body


JSON_START: Message = {
    "type": "http.response.start",
    "status": 200,
    "headers": [(b"content-type", b"application/json")],
}
REASONING_ANSWER = b'{"choices":[{"index":0,"message":{"role":"assistant","content":"Hi","reasoning_content":"Hm."}}]}'
NORMALIZED_ANSWER = (
    b'{"choices":[{"index":0,"message":{"role":"assistant","content":"Hi","reasoning":"Hm.",'
    b'"reasoning_details":[{"type":"reasoning.text","text":"Hm.","format":"unknown"}]}}]}'
)  # spec 004 "Response fields": the plain field renamed, with its detail


async def test_a_pathsend_answer_goes_out_after_its_start_as_the_app_sent_them() -> None:
    # http.response.pathsend (an ASGI extension; Starlette's FileResponse uses it where the server offers it)
    # carries the body itself: numi_mw cannot read it, so the held start goes first and both pass unchanged
    pathsend = {"type": "http.response.pathsend", "path": "/srv/answer.json"}
    raw = b'{"model":"m","messages":[]}'
    app = ReasoningMiddleware(replying(JSON_START, pathsend), provider="openrouter")
    sent = await drive(app, [(b"content-type", b"application/json")], [raw])
    assert sent == [JSON_START, pathsend]


async def test_a_file_answer_comes_in_body_messages_and_is_normalized_where_the_server_offers_pathsend(
    tmp_path: Path,
) -> None:
    answer = tmp_path / "answer.json"
    answer.write_bytes(REASONING_ANSWER)
    offered: list[dict[str, Any]] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        offered.append(scope["extensions"])
        await receive()  # the request's body

        async def connected() -> Message:  # the client stays: FileResponse's wait for a disconnect never ends
            await anyio.sleep_forever()
            raise AssertionError

        await FileResponse(answer, media_type="application/json")(scope, connected, send)

    extensions = {"http.response.pathsend": {}, "http.response.trailers": {}}
    raw = b'{"model":"m","messages":[]}'
    sent = await drive(ReasoningMiddleware(app, provider="openrouter"), [], [raw], extensions)
    assert offered == [{"http.response.trailers": {}}]  # the others the server offers stay
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert sent[1]["body"] == NORMALIZED_ANSWER
    assert (b"content-length", str(len(NORMALIZED_ANSWER)).encode()) in sent[0]["headers"]
    assert extensions == {"http.response.pathsend": {}, "http.response.trailers": {}}  # the server's own, untouched


async def test_a_message_inside_a_json_body_releases_what_was_held_in_the_apps_order() -> None:
    trailers = {"type": "http.response.trailers", "headers": [(b"x-t", b"1")], "more_trailers": False}
    first = {"type": "http.response.body", "body": REASONING_ANSWER[:20], "more_body": True}
    last = {"type": "http.response.body", "body": REASONING_ANSWER[20:], "more_body": False}
    raw = b'{"model":"m","messages":[]}'
    app = ReasoningMiddleware(replying(JSON_START, first, trailers, last), provider="openrouter")
    sent = await drive(app, [(b"content-type", b"application/json")], [raw])
    held = {"type": "http.response.body", "body": REASONING_ANSWER[:20], "more_body": True}
    assert sent == [JSON_START, held, trailers, last]  # unread from there on, as the app sent them


async def test_a_message_after_a_whole_json_answer_reaches_the_server_as_sent() -> None:
    # no second start: the server sees what the app sent after its answer, and refuses it as it would directly
    extra = {"type": "http.response.body", "body": b"EXTRA", "more_body": False}
    last = {"type": "http.response.body", "body": REASONING_ANSWER, "more_body": False}
    raw = b'{"model":"m","messages":[]}'
    app = ReasoningMiddleware(replying(JSON_START, last, extra), provider="openrouter")
    sent = await drive(app, [(b"content-type", b"application/json")], [raw])
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body", "http.response.body"]
    assert (sent[1]["body"], sent[2]) == (NORMALIZED_ANSWER, extra)


async def test_nothing_the_app_sends_after_a_json_error_answer_goes_out() -> None:
    trailers = {"type": "http.response.trailers", "headers": [], "more_trailers": False}
    body = {"type": "http.response.body", "body": b'{"choices":[]}' * 10, "more_body": False}
    raw = b'{"model":"m","messages":[]}'
    app = ReasoningMiddleware(replying(JSON_START, body, trailers), provider="openrouter", max_response_bytes=64)
    sent = await drive(app, [(b"content-type", b"application/json")], [raw])
    assert [(m["type"], m.get("status")) for m in sent] == [("http.response.start", 502), ("http.response.body", None)]


def test_a_compression_middleware_inside_leaves_the_answer_readable() -> None:
    from starlette.middleware.gzip import GZipMiddleware

    async def answer(request: Request) -> Response:
        message = {"role": "assistant", "content": "Hi", "reasoning_content": "Think." * 40}
        return JSONResponse({"choices": [{"index": 0, "message": message}], "headers": dict(request.headers)})

    app = Starlette(routes=[Route("/v1/chat/completions", answer, methods=["POST"])])
    app.add_middleware(GZipMiddleware, minimum_size=10)
    app.add_middleware(ReasoningMiddleware, provider="openrouter")  # added last: the outermost
    body = json.dumps({"model": "m", "messages": [], "reasoning": {"exclude": True}})
    with TestClient(app) as client:
        response = client.post("/v1/chat/completions", content=body, headers={"accept-encoding": "gzip"})
    assert "content-encoding" not in response.headers
    data = response.json()
    assert data["choices"] == [{"index": 0, "message": {"role": "assistant", "content": "Hi"}}]
    assert "accept-encoding" not in data["headers"]


async def test_a_response_the_app_compressed_itself_passes_untouched() -> None:
    start = {
        "type": "http.response.start",
        "status": 200,
        "headers": [(b"content-type", b"application/json"), (b"content-encoding", b"gzip")],
    }
    body = {"type": "http.response.body", "body": b"\x1f\x8b compressed bytes"}
    raw = b'{"model":"m","messages":[],"reasoning":{"exclude":true}}'
    sent = await drive(ReasoningMiddleware(replying(start, body)), [(b"content-type", b"application/json")], [raw])
    assert sent == [start, body]


def test_the_app_sees_history_without_internal_metadata_and_filtered_for_its_provider() -> None:
    # spec 000's filter on the middleware's one route: metadata removed, details DeepSeek does not read removed
    SEEN.clear()
    history = [
        {"role": "user", "content": "Q", "_client_id": "c-7"},
        {
            "role": "assistant",
            "content": "A",
            "reasoning": "Plan.",
            "reasoning_details": [{"type": "reasoning.text", "text": "Plan.", "signature": "SIG"}],
            "_stored_at": "2026-11-30",
        },
    ]
    with starlette_app("deepseek") as client:
        client.post("/v1/chat/completions", content=json.dumps({"model": "m", "messages": history}))
    assert json.loads(SEEN[0]["body"])["messages"] == [
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": "A", "reasoning_content": "Plan."},
    ]


def test_preserve_reasoning_false_filters_as_spec_000_says_for_preservation_off() -> None:
    SEEN.clear()
    app = Starlette(routes=[Route("/v1/chat/completions", echo, methods=["POST"])])
    app.add_middleware(ReasoningMiddleware, provider="deepseek", preserve_reasoning=False)
    body = {"model": "m", "messages": [{"role": "assistant", "content": "A", "reasoning_content": "Plan."}]}
    with TestClient(app) as client:
        client.post("/v1/chat/completions", content=json.dumps(body))
    assert json.loads(SEEN[0]["body"])["messages"] == [{"role": "assistant", "content": "A"}]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"provider": "nope"}, "unknown provider 'nope'"),
        ({"max_body_bytes": -5}, "max_body_bytes must be a positive whole number of bytes, not -5"),
        ({"max_body_bytes": True}, "max_body_bytes must be a positive whole number of bytes, not True"),
        ({"think_start": "sometimes"}, "think_start must be one of content, reasoning, auto, not 'sometimes'"),
        ({"think_start": "auto", "think_tags": False}, "think_start has no effect with think_tags=False"),
    ],
)
def test_options_are_checked_when_given(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ReasoningMiddleware(Starlette(), **options)


def test_with_a_native_wire_api_the_app_gets_the_native_body_and_the_client_a_chat_completion() -> None:
    seen: list[dict[str, Any]] = []

    async def messages(request: Request) -> Response:  # an app that forwards to Anthropic, here answering itself
        seen.append(json.loads(await request.body()))
        answer = {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-x",
            "content": [
                {"type": "thinking", "thinking": "Plan.", "signature": "SIG"},
                {"type": "text", "text": "Done."},
            ],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 3, "output_tokens": 5},
        }
        return JSONResponse(answer)

    app = Starlette(routes=[Route("/v1/chat/completions", messages, methods=["POST"])])
    app.add_middleware(ReasoningMiddleware, provider="anthropic", wire_api="anthropic-messages")
    with TestClient(app) as client:
        response = client.post(
            "/v1/chat/completions", json={"model": "claude-x", "messages": [{"role": "user", "content": "Q"}]}
        )
    assert seen == [{"model": "claude-x", "messages": [{"role": "user", "content": "Q"}], "max_tokens": 4096}]
    body = response.json()
    assert body["choices"][0]["message"] == {
        "role": "assistant",
        "content": "Done.",
        "reasoning": "Plan.",
        "reasoning_details": [
            {"type": "reasoning.text", "text": "Plan.", "signature": "SIG", "format": "anthropic-claude-v1", "index": 0}
        ],
    }
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}
    assert response.headers["content-length"] == str(len(response.content))


def test_an_unknown_wire_api_is_refused_when_the_middleware_is_built() -> None:
    with pytest.raises(ValueError, match="wire_api must be one of openai-chat, openai-responses, anthropic-messages"):
        ReasoningMiddleware(Starlette(), wire_api="grpc")  # type: ignore[arg-type]


def test_with_a_native_wire_api_an_answer_that_is_not_native_is_a_502_labelled_json() -> None:
    async def messages(request: Request) -> Response:  # a handler whose upstream answered with a proxy's page
        return Response(b"<html>hi</html>", media_type="text/html")

    app = Starlette(routes=[Route("/v1/chat/completions", messages, methods=["POST"])])
    app.add_middleware(ReasoningMiddleware, provider="anthropic", wire_api="anthropic-messages")
    with TestClient(app) as client:
        response = client.post("/v1/chat/completions", json={"model": "c", "messages": []})
    assert response.status_code == 502
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"]["code"] == "upstream_unavailable"


def test_with_a_native_wire_api_a_body_not_labelled_json_is_still_translated() -> None:
    seen: list[bytes] = []
    labels: list[str | None] = []

    async def messages(request: Request) -> Response:
        seen.append(await request.body())
        labels.append(request.headers.get("content-type"))
        return JSONResponse({"type": "message", "role": "assistant", "content": [], "stop_reason": "end_turn"})

    app = Starlette(routes=[Route("/v1/chat/completions", messages, methods=["POST"])])
    app.add_middleware(ReasoningMiddleware, provider="anthropic", wire_api="anthropic-messages")
    form = {"content-type": "application/x-www-form-urlencoded"}  # what curl -d sends
    with TestClient(app) as client:
        response = client.post("/v1/chat/completions", content=b'{"model":"c","messages":[]}', headers=form)
        refused = client.post("/v1/chat/completions", content=b"model=c", headers=form)
    assert json.loads(seen[0]) == {"model": "c", "messages": [], "max_tokens": 4096}
    assert labels == ["application/json"]  # the handler gets the JSON numi_mw wrote, labelled as such
    assert response.json()["object"] == "chat.completion"
    assert (refused.status_code, refused.json()["error"]["code"]) == (400, "invalid_json")
    assert len(seen) == 1


async def test_a_choice_index_that_is_an_array_passes_and_the_stream_ends_with_done() -> None:
    start = {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]}
    odd = b'data: {"choices":[{"index":[0],"delta":{"reasoning_content":"Hm."},"finish_reason":null}]}\n\n'
    events = [
        {"type": "http.response.body", "body": odd, "more_body": True},
        {"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False},
    ]
    app = ReasoningMiddleware(replying(start, *events), provider="deepseek")
    sent = await drive(app, [(b"content-type", b"application/json")], [b'{"model":"m","stream":true}'])
    assert b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body") == (
        odd + b"data: [DONE]\n\n"
    )
