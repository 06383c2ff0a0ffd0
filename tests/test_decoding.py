"""Reading a rewritten gzip or deflate upstream body step by step (``upstream.Inflater``, ``docs/security.md``,
"Bounds"): no piece fed to a rewriter is ever larger than ``DECODE_STEP``, so a small body that decodes to a huge
one (a gzip bomb) is stopped by the event or answer bound before more of it is decoded; the client's answer is
the same exact error event or 502 as for a plain body over the bound."""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

import numi_mw.core.response
from numi_mw import NormalizingTransport, SyncNormalizingTransport
from numi_mw.proxy import create_app
from numi_mw.upstream import DECODE_STEP, Inflater
from tests.test_bounds import CHUNK, LIMIT, answer_502, drive, event_error, gzipped_answer

BOMB_BYTES = 32 * 2**20
"""What the SSE bomb decodes to: one data line of 32 MiB that never ends."""

UNDECODABLE_502 = {
    "error": {
        "message": "The upstream response ended early or could not be decoded.",
        "type": "api_error",
        "code": "upstream_unavailable",
        "param": None,
    }
}


def sse_bomb() -> bytes:
    """A first chunk, then a 32 MiB data line that never ends, gzip-compressed (about 32 KiB)."""
    return gzip.compress(CHUNK + b"data: " + b"z" * BOMB_BYTES, 9)


def pieces(data: bytes, size: int = 4096) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


class RawStream(httpx.AsyncByteStream, httpx.SyncByteStream):
    """An upstream body that arrives in ``parts`` (as network reads do), counting how many were pulled."""

    def __init__(self, parts: list[bytes]) -> None:
        self.parts = parts
        self.pulled = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for part in self.parts:
            self.pulled += 1
            yield part

    def __iter__(self) -> Iterator[bytes]:
        for part in self.parts:
            self.pulled += 1
            yield part


def spy_on_feed(monkeypatch: pytest.MonkeyPatch, cls: Any) -> list[int]:
    """The size of every piece ``cls.feed`` (a rewriter's) is given."""
    fed: list[int] = []
    real = cls.feed

    def feed(self: Any, chunk: bytes) -> bytes:
        fed.append(len(chunk))
        return real(self, chunk)  # type: ignore[no-any-return]

    monkeypatch.setattr(cls, "feed", feed)
    return fed


def test_each_decoded_piece_of_a_gzip_bomb_is_at_most_the_step() -> None:
    data = b"a" * (8 * 2**20)
    compressed = gzip.compress(data, 9)
    assert len(compressed) < 16384
    inflater = Inflater("gzip")
    out = [piece for chunk in pieces(compressed, 1024) for piece in inflater.decode(chunk)]
    out.append(inflater.flush())
    assert max(len(piece) for piece in out) == DECODE_STEP == 65536
    assert all(piece for piece in out[:-1])
    assert b"".join(out) == data


def test_a_step_is_decoded_only_when_asked_for() -> None:
    inflater = Inflater("gzip", step=1000)
    steps = inflater.decode(gzip.compress(b"b" * 10**6))
    assert next(steps) == b"b" * 1000  # one step out of a million bytes; the rest waits in the decoder
    assert len(b"".join(steps)) == 10**6 - 1000


@pytest.mark.parametrize(
    ("encoding", "compress"),
    [
        ("gzip", lambda data: gzip.compress(data)),
        ("deflate", lambda data: zlib.compress(data)),  # the zlib wrapper, RFC 1950
        ("deflate", lambda data: raw_deflate(data)),
    ],
    ids=["gzip", "deflate-zlib", "deflate-raw"],
)
def test_gzip_and_both_forms_of_deflate_are_decoded_as_httpx_decodes_them(encoding: str, compress: Any) -> None:
    data = json.dumps({"choices": [{"index": 0, "message": {"content": "x" * 300000}}]}).encode()
    inflater = Inflater(encoding, step=4096)
    out = [piece for chunk in pieces(compress(data), 100) for piece in inflater.decode(chunk)]
    assert b"".join(out) + inflater.flush() == data
    assert max(len(piece) for piece in out) == 4096


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_bytes_that_are_not_the_encoding_raise_httpx_decoding_error(encoding: str) -> None:
    with pytest.raises(httpx.DecodingError):
        list(Inflater(encoding).decode(b"this is not gzip"))


def test_only_gzip_and_deflate_are_decoded() -> None:
    with pytest.raises(ValueError) as raised:
        Inflater("br")
    assert str(raised.value) == "only gzip and deflate are decoded here, not 'br'"


def gzip_sse(stream: RawStream) -> Any:
    def answer(request: httpx.Request) -> httpx.Response:
        headers = {"content-type": "text/event-stream", "content-encoding": "gzip"}
        return httpx.Response(200, headers=headers, stream=stream)

    return answer


async def test_a_sidecar_gzip_bomb_stream_ends_with_the_event_error_before_more_is_decoded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fed = spy_on_feed(monkeypatch, numi_mw.core.response.SSERewriter)
    stream = RawStream(pieces(sse_bomb()))
    app = create_app("http://127.0.0.1:9/v1", max_event_bytes=LIMIT, transport=httpx.MockTransport(gzip_sse(stream)))
    status, _, body = await drive(app, [(b"content-type", b"application/json")], b'{"model": "m", "stream": true}')
    assert status == 200
    assert body == CHUNK + event_error()
    assert max(fed) <= DECODE_STEP
    assert sum(fed) <= LIMIT + len(CHUNK) + 2 * DECODE_STEP  # decoding stopped at the bound, not at 32 MiB
    assert stream.pulled == 1  # of the eight network reads of the compressed body


def test_the_sync_transport_ends_a_gzip_bomb_stream_with_the_event_error(monkeypatch: pytest.MonkeyPatch) -> None:
    fed = spy_on_feed(monkeypatch, numi_mw.core.response.SSERewriter)
    stream = RawStream(pieces(sse_bomb()))
    transport = SyncNormalizingTransport(
        httpx.MockTransport(gzip_sse(stream)), provider="openrouter", max_event_bytes=LIMIT
    )
    with httpx.Client(transport=transport) as http:
        response = http.post("http://up.test/v1/chat/completions", json={"model": "m", "stream": True})
    assert response.status_code == 200
    assert response.content == CHUNK + event_error()
    assert max(fed) <= DECODE_STEP
    assert stream.pulled == 1


def gzip_json(stream: RawStream, encoding: str = "gzip") -> Any:
    def answer(request: httpx.Request) -> httpx.Response:
        headers = {"content-type": "application/json", "content-encoding": encoding}
        return httpx.Response(200, headers=headers, stream=stream)

    return answer


@pytest.mark.parametrize(("size", "status"), [(2**20, 200), (2**20 + 1, 502)])
async def test_a_sidecar_gzip_answer_streamed_in_is_bounded_decoded_step_by_step(
    monkeypatch: pytest.MonkeyPatch, size: int, status: int
) -> None:
    fed = spy_on_feed(monkeypatch, numi_mw.core.response.JSONRewriter)
    stream = RawStream(pieces(gzipped_answer(size), 256))
    app = create_app(
        "http://127.0.0.1:9/v1", max_response_bytes=2**20, transport=httpx.MockTransport(gzip_json(stream))
    )
    got, _, body = await drive(app, [(b"content-type", b"application/json")])
    assert got == status
    if status == 502:
        assert json.loads(body) == answer_502(2**20)
    else:
        assert body == gzip.decompress(gzipped_answer(size))
    assert max(fed) <= DECODE_STEP


def raw_deflate(data: bytes) -> bytes:
    """``data`` as raw deflate (RFC 1951, no zlib wrapper), which some servers send as ``deflate``."""
    compressor = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


PLAIN_ANSWER = b'{"id":"gen-1","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"}}]}'


@pytest.mark.parametrize("packed", [zlib.compress(PLAIN_ANSWER), raw_deflate(PLAIN_ANSWER)], ids=["zlib", "raw"])
async def test_the_async_transport_reads_both_forms_of_deflate(packed: bytes) -> None:
    stream = RawStream(pieces(packed, 7))
    transport = NormalizingTransport(httpx.MockTransport(gzip_json(stream, "deflate")), provider="openrouter")
    async with httpx.AsyncClient(transport=transport) as http:
        response = await http.post("http://up.test/v1/chat/completions", json={"model": "m"})
    assert response.status_code == 200
    assert response.content == PLAIN_ANSWER


async def test_a_sidecar_answer_that_is_not_gzip_is_the_same_502_as_before() -> None:
    stream = RawStream([b"this is not gzip"])
    app = create_app("http://127.0.0.1:9/v1", transport=httpx.MockTransport(gzip_json(stream)))
    status, _, body = await drive(app, [(b"content-type", b"application/json")])
    assert status == 502
    assert json.loads(body) == UNDECODABLE_502
