"""``upstream.upstream_request`` builds the request ``httpx.AsyncClient.build_request`` built for the sidecar (a
client whose only default header left is ``Connection: keep-alive``, no cookies kept, no base URL), so an upstream
gets the same bytes now that the sidecar sends through its transport directly (``upstream.send_upstream``); and
``upstream.raw_body`` reads an answer's body as the transport gives it, as httpx's ``aiter_raw`` did."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from numi_mw.upstream import raw_body, send_upstream, upstream_request

TIMEOUT = httpx.Timeout(600.0, connect=10.0)


def _client() -> httpx.AsyncClient:
    """The sidecar's client as it was built: httpx's default headers but ``Connection`` removed."""
    client = httpx.AsyncClient(timeout=TIMEOUT, follow_redirects=False, trust_env=False)
    for name in ("accept", "accept-encoding", "user-agent"):
        del client.headers[name]
    return client


async def _body() -> AsyncIterator[bytes]:
    yield b"{}"


HEADERS = [
    (b"Authorization", b"Bearer sk-1"),
    (b"x-Custom", b"a"),
    (b"x-custom", b"b"),
    (b"accept-encoding", b"identity"),
]


@pytest.mark.parametrize(
    ("method", "url", "content"),
    [
        ("POST", "http://127.0.0.1:9/v1/chat/completions", b'{"model":"m"}'),
        ("POST", "http://127.0.0.1:9/v1/chat/completions", b""),
        ("GET", "http://127.0.0.1:9/v1/models?a=1&b=%2F", b""),
        ("DELETE", "https://example.test/api/v1/keys/abc", b""),
        ("POST", "http://us%40er:p%3Ass@127.0.0.1:9/v1/files", b"x"),  # credentials: Authorization: Basic
        ("POST", "http://user@127.0.0.1:9/v1/files", b"x"),  # a user alone is credentials too
        ("POST", "http://:@127.0.0.1:9/v1/files", b"x"),  # empty ones are not
        ("post", "http://127.0.0.1:9/v1/chat/completions", b""),  # Content-Length: 0, named upper-case
        ("PUT", "http://127.0.0.1:9/v1/files/a", b""),
        ("PATCH", "http://127.0.0.1:9/v1/files/a", b"{}"),
        ("OPTIONS", "http://127.0.0.1:9/v1/models", b""),
        ("POST", "http://[::1]:9/v1/chat/completions", b"{}"),  # Host as httpx writes an IPv6 address
        ("POST", "https://b\u00fccher.example/v1/chat/completions", b"{}"),  # and an IDNA host (punycode)
    ],
)
@pytest.mark.parametrize(
    "extra",
    [
        [],
        [(b"Host", b"elsewhere.test")],  # a framing header of the caller's own: httpx keeps it, adds none
        [(b"content-length", b"2")],
        [(b"Transfer-Encoding", b"chunked")],
    ],
)
async def test_the_request_is_the_one_the_client_built(
    method: str, url: str, content: bytes, extra: list[tuple[bytes, bytes]]
) -> None:
    headers = [*HEADERS, *extra]
    async with _client() as client:
        built = client.build_request(method, httpx.URL(url), headers=headers, content=content)
    ours = upstream_request(method, httpx.URL(url), headers, content, TIMEOUT.as_dict())
    auth = client._build_request_auth(built)  # the client's default auth: Basic from the URL's credentials
    flow = auth.sync_auth_flow(built)
    built = next(flow)
    assert ours.method == built.method
    assert ours.url == built.url
    assert ours.headers.raw == built.headers.raw
    assert (
        ours.extensions
        == built.extensions
        == {"timeout": {"connect": 10.0, "read": 600.0, "write": 600.0, "pool": 600.0}}
    )
    assert ours.read() == built.read() == content
    assert type(ours.stream) is type(built.stream) is httpx.ByteStream  # the transports read a whole body from it


async def test_a_streamed_body_is_framed_as_the_client_framed_it() -> None:
    url = httpx.URL("http://127.0.0.1:9/v1/files")
    async with _client() as client:
        built = client.build_request("POST", url, headers=HEADERS, content=_body())
    ours = upstream_request("POST", url, HEADERS, _body(), TIMEOUT.as_dict())
    assert ours.headers.raw == built.headers.raw
    assert (b"Transfer-Encoding", b"chunked") in ours.headers.raw
    with_length = [*HEADERS, (b"content-length", b"2")]
    assert upstream_request("POST", url, with_length, _body(), {}).headers.raw == [
        (b"Host", b"127.0.0.1:9"),
        (b"Connection", b"keep-alive"),
        *with_length,
    ]


async def test_the_transport_answer_names_its_request_and_holds_no_cycle() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=b"{}")

    request = upstream_request("GET", httpx.URL("http://127.0.0.1:9/v1/models"), [], b"", TIMEOUT.as_dict())
    response = await send_upstream(httpx.MockTransport(answer), request)
    assert seen == [request]
    assert response.request is request
    assert response.status_code == 200
    assert not isinstance(response.stream, httpx._client.BoundAsyncStream)  # nothing of a client's wraps the body


class _Pieces(httpx.AsyncByteStream):
    """A transport's body that gives ``pieces`` one per step, and says whether it was closed."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self.pieces:
            yield piece

    async def aclose(self) -> None:
        self.closed = True


async def test_raw_body_gives_the_transport_pieces_as_they_come_and_refuses_a_second_read() -> None:
    pieces = [b"data: {}\n\n", b"", b"data: [DONE]\n\n"]
    response = httpx.Response(200, stream=_Pieces(pieces))
    assert [piece async for piece in raw_body(response)] == pieces  # no chunker joins, splits or drops a piece
    assert response.is_stream_consumed
    with pytest.raises(httpx.StreamConsumed):
        raw_body(response)
    closed = httpx.Response(200, stream=_Pieces(pieces))
    await closed.aclose()
    assert closed.stream.closed  # type: ignore[attr-defined]
    with pytest.raises(httpx.StreamClosed):
        raw_body(closed)
    with pytest.raises(RuntimeError, match="not an async stream"):
        raw_body(httpx.Response(200, stream=httpx.SyncByteStream()))
