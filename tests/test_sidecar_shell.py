"""The sidecar's shell in-process: it runs under any ASGI server's event loop (asyncio or trio), and what it keeps
per upstream URL is bounded whatever clients send."""

from __future__ import annotations

import json

import anyio
import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from numi_mw.asgi import HOP_BY_HOP, forwarded_headers, is_json
from numi_mw.proxy import create_app
from numi_mw.upstream import URL_CACHE, URL_CACHE_BYTES, _kept_url, answer_headers, header_values, target_url

ANSWER = {"id": "gen-1", "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi", "reasoning": "R"}}]}


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_sidecar_app_answers_on_asyncio_and_on_trio(backend: str) -> None:
    pytest.importorskip(backend)
    seen: list[bytes] = []

    def upstream(request: httpx.Request) -> httpx.Response:
        seen.append(request.content)
        return httpx.Response(200, json=ANSWER)

    app = create_app("http://127.0.0.1:9/v1", provider="openrouter", transport=httpx.MockTransport(upstream))
    body = b'{"model":"m","reasoning_effort":"high","messages":[{"role":"user","content":"hi"}]}'

    async def main() -> tuple[int, bytes]:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://sidecar") as client:
                response = await client.post("/v1/chat/completions", content=body)
                return response.status_code, response.content

    status, answer = anyio.run(main, backend=backend)
    assert status == 200
    assert json.loads(answer)["choices"][0]["message"]["reasoning"] == "R"
    assert seen == [b'{"model":"m","reasoning":{"effort":"high"},"messages":[{"role":"user","content":"hi"}]}']


def test_a_request_numi_mw_fails_on_gets_the_openai_style_500() -> None:
    # an exception numi_mw does not expect (here from a transport that breaks its contract) is answered with the
    # error body every client reads, not Starlette's plain text, and raised again for the server to log
    def upstream(request: httpx.Request) -> httpx.Response:
        raise RuntimeError("a fault of the transport")

    app = create_app("http://127.0.0.1:9/v1", provider="openrouter", transport=httpx.MockTransport(upstream))

    async def main() -> httpx.Response:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
            async with httpx.AsyncClient(transport=transport, base_url="http://sidecar") as client:
                return await client.post("/v1/chat/completions", content=b'{"model":"m","messages":[]}')

    response = anyio.run(main)
    assert (response.status_code, response.headers["content-type"]) == (500, "application/json")

    async def raised() -> None:  # and the exception goes on to the server, which logs it
        transport = httpx.ASGITransport(app=app)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://s") as client,
        ):
            await client.post("/v1/chat/completions", content=b'{"model":"m","messages":[]}')

    with pytest.raises(RuntimeError, match="a fault of the transport"):
        anyio.run(raised)
    assert response.json() == {
        "error": {
            "message": "numi_mw failed on this request; the server's log has the details.",
            "type": "api_error",
            "code": "internal_error",
            "param": None,
        }
    }


def test_only_short_paths_and_queries_have_their_upstream_url_kept() -> None:
    base = "http://127.0.0.1:9/v1"
    _kept_url.cache_clear()
    short = b"q=" + b"a" * (URL_CACHE_BYTES - len(b"/v1/models") - 2)
    assert str(target_url(base, b"/v1/models", short)) == "http://127.0.0.1:9/v1/models?" + short.decode()
    assert _kept_url.cache_info().currsize == 1
    long = short + b"a"  # one byte past the bound: built each time, never kept
    assert str(target_url(base, b"/v1/models", long)) == "http://127.0.0.1:9/v1/models?" + long.decode()
    assert _kept_url.cache_info().currsize == 1
    for i in range(URL_CACHE + 10):
        target_url(base, f"/v1/models/{i}".encode(), b"")
    assert _kept_url.cache_info().currsize == URL_CACHE


def test_forwarded_headers_drop_what_a_connection_header_lists_before_or_after_it() -> None:
    raw = [
        (b"X-Trace", b"  abc\t"),
        (b"Connection", b"keep-alive, X-Trace ,Upgrade"),
        (b"Host", b"sidecar"),
        (b"Keep-Alive", b"timeout=5"),
        (b"x-title", b"\tCaf\xc3\xa9 app "),
        (b"authorization", b"Bearer sk-1"),
    ]
    assert forwarded_headers(raw, HOP_BY_HOP | {b"host"}) == [
        (b"x-title", b"Caf\xc3\xa9 app"),
        (b"authorization", b"Bearer sk-1"),
    ]


def _listed(raw: list[tuple[bytes, bytes]]) -> set[bytes]:
    """The reference reading of RFC 9110 section 7.6.1: every non-empty token of every ``Connection`` header,
    trimmed and lower-cased, one token at a time."""
    return {
        token.strip().lower()
        for name, value in raw
        if name.lower() == b"connection"
        for token in value.split(b",")
        if token.strip()
    }


_NAMES = st.sampled_from([b"connection", b"Connection", b"host", b"x-a", b"X-A", b"x-b", b"te", b"keep-alive"])
_VALUES = st.lists(st.sampled_from([b"x-a", b"X-B ", b" te", b"", b"close", b"\t1", b"2 "]), max_size=3)


@given(st.lists(st.tuples(_NAMES, _VALUES.map(b",".join)), max_size=8))
def test_forwarded_headers_are_the_headers_less_the_dropped_and_listed_names_values_trimmed(
    raw: list[tuple[bytes, bytes]],
) -> None:
    """RFC 9110 sections 7.6.1 (a Connection header's tokens name hop-by-hop headers) and 5.5 (the spaces and tabs
    around a value are no part of it)."""
    drop = HOP_BY_HOP | {b"host"}
    expected = [(name, value.strip(b" \t")) for name, value in raw if name.lower() not in drop | _listed(raw)]
    assert forwarded_headers(raw, drop) == expected


_ANSWER = [
    (b"X-Hop", b"1"),
    (b"Content-Length", b"27"),
    (b"Connection", b"keep-alive, X-Hop"),
    (b"x-odd", b"a\x01b"),
    (b"Transfer-Encoding", b"chunked"),
    (b"Content-Type", b"application/json"),
    (b"x-tab", b"a\tb"),
]


def test_a_relayed_answer_loses_the_listed_the_unwritable_and_a_length_beside_the_chunks() -> None:
    """RFC 9110 sections 7.6.1 and 5.5, RFC 9112 section 6.3; the names as the upstream wrote them, in order."""
    assert answer_headers(_ANSWER, HOP_BY_HOP, 200) == [(b"Content-Type", b"application/json"), (b"x-tab", b"a\tb")]


def test_a_whole_answer_gets_its_own_length_and_content_type_at_the_end() -> None:
    assert answer_headers(_ANSWER, HOP_BY_HOP, length=12, content_type=b"application/json; charset=utf-8") == [
        (b"x-tab", b"a\tb"),
        (b"content-type", b"application/json; charset=utf-8"),
        (b"content-length", b"12"),
    ]


@pytest.mark.parametrize("status", [204, 304])
def test_a_whole_answer_without_a_body_gets_no_length(status: int) -> None:
    """RFC 9110 sections 8.6, 15.3.5 and 15.4.5: neither has a body."""
    assert answer_headers(_ANSWER, HOP_BY_HOP, status, length=0) == [
        (b"Content-Type", b"application/json"),
        (b"x-tab", b"a\tb"),
    ]


def test_an_httpx_transport_keeps_what_a_connection_header_lists() -> None:
    drop = frozenset((b"content-length", b"content-encoding", b"transfer-encoding"))
    assert answer_headers(_ANSWER, drop, length=12, listed=False) == [
        (b"X-Hop", b"1"),
        (b"Connection", b"keep-alive, X-Hop"),
        (b"Content-Type", b"application/json"),
        (b"x-tab", b"a\tb"),
        (b"content-length", b"12"),
    ]


_ANSWER_NAMES = st.sampled_from(
    [b"connection", b"Connection", b"content-length", b"Content-Length", b"transfer-encoding", b"content-type",
     b"Content-Type", b"x-a", b"X-A", b"keep-alive", b"content-encoding"]
)  # fmt: skip
_ANSWER_VALUES = st.lists(
    st.sampled_from([b"x-a", b"Content-Type ", b" content-length", b"", b"close", b"\t1", b"2\x00", b"\x7f"]),
    max_size=3,
)


@given(
    st.lists(st.tuples(_ANSWER_NAMES, _ANSWER_VALUES.map(b",".join)), max_size=8),
    st.sampled_from([200, 204, 304, 500]),
    st.none() | st.integers(0, 99),
    st.none() | st.just(b"application/json"),
    st.booleans(),
)
def test_answer_headers_are_the_rules_applied_one_after_another(
    raw: list[tuple[bytes, bytes]], status: int, length: int | None, content_type: bytes | None, listed: bool
) -> None:
    """The same rules as ``answer_headers`` states them, applied one at a time, each over every header."""
    drop = HOP_BY_HOP | {b"content-encoding"}
    names = {name.lower() for name, _ in raw}
    gone = set(drop)
    if listed:
        gone |= _listed(raw)
    if length is not None or status in (204, 304) or b"transfer-encoding" in names:
        gone.add(b"content-length")
    if content_type is not None:
        gone.add(b"content-type")
    controls = set(range(9)) | set(range(10, 32)) | {127}
    expected = [(n, v) for n, v in raw if n.lower() not in gone and not controls & set(v)]
    expected += [(b"content-type", content_type)] if content_type is not None else []
    expected += [(b"content-length", str(length).encode())] if length is not None and status not in (204, 304) else []
    assert answer_headers(raw, drop, status, length=length, content_type=content_type, listed=listed) == expected


@pytest.mark.parametrize(
    "raw",
    [
        [(b"Content-Type", b"application/json"), (b"x-a", b"1")],
        [(b"content-encoding", b"gzip"), (b"Content-Encoding", b"br")],
        [(b"x-title", b"Caf\xc3\xa9"), (b"content-type", b"text/plain; charset=\xc3\xa9")],
        [(b"x-latin", b"caf\xe9"), (b"content-type", b"text/plain; x=\xe9")],
        [],
    ],
)
@pytest.mark.parametrize(
    "names", [(b"content-type",), (b"content-encoding",), (b"content-type", b"content-encoding")], ids=str
)
def test_header_values_are_what_httpx_headers_get_gives(
    raw: list[tuple[bytes, bytes]], names: tuple[bytes, ...]
) -> None:
    headers = httpx.Headers(raw)
    assert header_values(headers, *names) == [headers.get(name.decode()) for name in names]


def test_a_repeated_header_is_its_values_joined() -> None:
    headers = httpx.Headers([(b"Content-Encoding", b"gzip"), (b"content-encoding", b"br")])
    assert header_values(headers, b"content-encoding", b"content-type") == ["gzip, br", None]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, True),  # no content-type: read as JSON
        (b"application/json", True),
        (b"application/json; charset=utf-8", True),
        (b"Application/JSON; Charset=UTF-8", True),
        (b"application/vnd.api+json", True),
        (b"text/plain", False),
        (b"application/x-www-form-urlencoded", False),  # what curl -d sends
        (b"", False),
    ],
)
def test_is_json_is_a_mention_of_json_in_any_case(value: bytes | None, expected: bool) -> None:
    assert is_json(value) is expected


@given(st.one_of(st.sampled_from([b"application/json", b"application/json; charset=utf-8", b"text/json"]), st.binary()))
def test_is_json_looks_up_common_spellings_without_changing_the_answer(value: bytes) -> None:
    assert is_json(value) is (b"json" in value.lower())
