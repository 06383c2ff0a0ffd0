"""End to end: what the real ``numi-mw serve`` forwards, byte for byte, between raw sockets on loopback.

The upstream here is a plain socket server, so that a test sees the exact request line and headers the sidecar
sends, can answer with framing no HTTP library would write (a body cut off mid-chunk, ``content-length`` beside
``transfer-encoding``), and sees when the sidecar closes its connection. Every wait is bounded.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Callable, Iterator

import httpx
import pytest

from numi_mw import SyncNormalizingTransport
from tests.e2e_support import sidecar

pytestmark = pytest.mark.usefixtures("upstream_transport")
"""Every test here runs once per upstream transport (httpcore and aiohttp)."""


WAIT = 10.0
"""Seconds any one step may take before a test fails (the sidecar's own upstream timeout is the default 600)."""

Handler = Callable[[socket.socket, bytes], None]


def read_request(conn: socket.socket) -> bytes:
    """One HTTP/1.1 request as received: the head, then the body by its framing (``content-length``, or
    chunked up to the last chunk)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    fields = {}
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        fields[name.strip().lower()] = value.strip().lower()
    if fields.get(b"transfer-encoding") == b"chunked":
        while not body.endswith(b"0\r\n\r\n"):
            chunk = conn.recv(65536)
            if not chunk:
                break
            body += chunk
    else:
        while len(body) < int(fields.get(b"content-length", b"0")):
            chunk = conn.recv(65536)
            if not chunk:
                break
            body += chunk
    return head + b"\r\n\r\n" + body


class RawUpstream:
    """A socket server on 127.0.0.1 that reads each request whole, records it, and hands the connection to the
    test's ``handler`` (default: answer ``200`` with an empty JSON object and close)."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.port: int = self.listener.getsockname()[1]
        self.requests: list[bytes] = []
        self.received = threading.Event()
        self.closed = threading.Event()
        self.handler: Handler = answer(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._open = 0  # connections being served: not closed yet
        self._served = threading.Condition()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def reset(self, handler: Handler) -> None:
        # the connections served before are closed first (for at most a second): this server closes each after its
        # answer without saying so, and a sidecar that pooled one could otherwise reuse it as it closes, on a
        # loaded machine, and read no answer
        with self._served:
            self._served.wait_for(lambda: self._open == 0, timeout=1.0)
        self.handler = handler
        self.received.clear()
        self.closed.clear()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with self._served:
            self._open += 1
        try:
            with conn:
                conn.settimeout(WAIT)
                request = read_request(conn)
                if not request:
                    return
                self.requests.append(request)
                self.received.set()
                with contextlib.suppress(OSError):
                    self.handler(conn, request)
        finally:
            with self._served:
                self._open -= 1
                self._served.notify_all()

    @contextlib.contextmanager
    def running(self) -> Iterator[RawUpstream]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join(timeout=WAIT)
            self.listener.close()


def answer(data: bytes) -> Handler:
    """Send ``data`` and close the connection (a body it cuts short is a break)."""

    def handler(conn: socket.socket, request: bytes) -> None:
        conn.sendall(data)

    return handler


def hold(data: bytes, upstream_closed: threading.Event) -> Handler:
    """Send ``data`` (maybe nothing), then keep the connection open until the sidecar closes it (at most
    ``WAIT`` seconds); set ``upstream_closed`` when it does."""

    def handler(conn: socket.socket, request: bytes) -> None:
        conn.sendall(data)
        with contextlib.suppress(TimeoutError):
            while conn.recv(65536):
                pass
            upstream_closed.set()

    return handler


@pytest.fixture(scope="module")
def upstream() -> Iterator[RawUpstream]:
    with RawUpstream().running() as raw:
        yield raw


@pytest.fixture(scope="module")
def base_url(upstream: RawUpstream, upstream_transport: str) -> Iterator[str]:
    with sidecar(upstream.base_url, "--provider", "openrouter") as url:
        yield url


def exchange(base_url: str, request: bytes) -> bytes:
    """Send ``request`` (with ``Connection: close``) to the sidecar on a raw socket; the whole answer."""
    url = httpx.URL(base_url)
    with socket.create_connection((url.host, url.port or 80), timeout=WAIT) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return data


def upstream_head(upstream: RawUpstream, path: bytes, method: bytes = b"GET") -> bytes:
    return method + b" " + path + b" HTTP/1.1\r\nHost: 127.0.0.1:" + str(upstream.port).encode() + b"\r\n"


# A request body goes upstream only when the client sent bytes; the sidecar adds no header of its own but
# accept-encoding: identity (the host is the upstream's; Connection is the sidecar's own hop).
NO_BODY = b"accept-encoding: identity\r\n\r\n"


@pytest.mark.parametrize(
    ("sent", "forwarded"),
    [
        (b"GET /v1/files/abc HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", NO_BODY),
        (b"HEAD /v1/files/abc HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", NO_BODY),
        (b"DELETE /v1/files/abc HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", NO_BODY),
        (b"GET /v1/files/abc HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", NO_BODY),
        (
            b"GET /v1/files/abc HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            b"0\r\n\r\n",
            NO_BODY,
        ),
        (
            b"POST /v1/files/abc HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 13\r\n"
            b'Connection: close\r\n\r\n{"input":"x"}',
            b'content-type: application/json\r\ncontent-length: 13\r\naccept-encoding: identity\r\n\r\n{"input":"x"}',
        ),
        (
            b"POST /v1/files/abc HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            b'6\r\n{"inpu\r\n7\r\nt":"x"}\r\n0\r\n\r\n',
            b"content-type: application/json\r\naccept-encoding: identity\r\nTransfer-Encoding: chunked\r\n\r\n"
            b'{"input":"x"}',
        ),
        (
            b"POST /v1/files/abc HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            b"0\r\n\r\n",
            b"accept-encoding: identity\r\n\r\n",
        ),
    ],
    ids=["get", "head", "delete", "get-length-0", "get-chunked-empty", "post", "post-chunked", "post-chunked-empty"],
)
def test_a_body_is_forwarded_only_when_the_client_sent_one(
    upstream: RawUpstream, base_url: str, sent: bytes, forwarded: bytes
) -> None:
    upstream.reset(answer(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"))
    exchange(base_url, sent)
    method = sent.split(b" ", 1)[0]
    head, _, body = upstream.requests[-1].partition(b"\r\n\r\n")
    if b"Transfer-Encoding: chunked" in head:
        body = dechunked(body)  # chunk boundaries are the hop's own; the bytes are the client's
    # a POST with no content says so with content-length: 0 (RFC 9110 section 8.6), as httpx writes it first
    length = b"Content-Length: 0\r\n" if method == b"POST" and forwarded.endswith(b"identity\r\n\r\n") else b""
    assert head + b"\r\n\r\n" + body == upstream_head(upstream, b"/v1/files/abc", method) + (
        length + b"Connection: keep-alive\r\n" + forwarded
    )


def dechunked(body: bytes) -> bytes:
    out = b""
    while True:
        size, _, body = body.partition(b"\r\n")
        if int(size, 16) == 0:
            return out
        out += body[: int(size, 16)]
        body = body[int(size, 16) + 2 :]


OK_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"


def response_head(raw: bytes) -> tuple[bytes, bytes]:
    """The status line and header block of a raw answer, and its body bytes as sent (framing included)."""
    head, _, body = raw.partition(b"\r\n\r\n")
    return head, body


UNREACHABLE = {
    "error": {
        "message": "The upstream could not be reached; try again later.",
        "type": "api_error",
        "code": "upstream_unavailable",
        "param": None,
    }
}
"""The 502 a client gets for an answer the sidecar cannot read (docs/errors.md)."""

CHUNKED_WITH_LENGTH = OK_HEAD + b"content-length: 3\r\ntransfer-encoding: chunked\r\n\r\n5\r\nabcde\r\n0\r\n\r\n"


def test_a_chunked_answer_that_also_has_a_content_length_is_forwarded_chunked_only(
    upstream: RawUpstream, base_url: str, upstream_transport: str
) -> None:
    """RFC 9112 section 6.3: transfer-encoding overrides content-length, which is never forwarded beside it."""
    if upstream_transport == "aiohttp":
        pytest.skip("aiohttp's parser refuses such an answer (the next test)")
    upstream.reset(answer(CHUNKED_WITH_LENGTH))
    raw = exchange(base_url, b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert response_head(raw) == (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\ntransfer-encoding: chunked",
        b"5\r\nabcde\r\n0\r\n\r\n",
    )


def test_on_aiohttp_a_chunked_answer_with_a_content_length_is_a_502(
    upstream: RawUpstream, base_url: str, upstream_transport: str
) -> None:
    """aiohttp refuses an answer framed both ways (RFC 9112 section 6.1 lets a recipient treat it as an error); the
    refusal reads as a broken answer, a 502, and the request is not sent again."""
    if upstream_transport != "aiohttp":
        pytest.skip("httpcore forwards such an answer chunked (the previous test)")
    upstream.reset(answer(CHUNKED_WITH_LENGTH))
    before = len(upstream.requests)
    raw = exchange(base_url, b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    head, body = response_head(raw)
    assert (head.split(b"\r\n")[0], json.loads(body)) == (b"HTTP/1.1 502 Bad Gateway", UNREACHABLE)
    assert len(upstream.requests) - before == 1


def test_a_content_length_answer_keeps_its_length(upstream: RawUpstream, base_url: str) -> None:
    upstream.reset(answer(OK_HEAD + b"content-length: 5\r\n\r\nabcde"))
    raw = exchange(base_url, b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert response_head(raw) == (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 5\r\nconnection: close",
        b"abcde",
    )


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (b"/v1/models", b'{"object":"list","data":[]}'),
        (b"/v1/chat/completions", b'{"id":"gen-1","choices":[]}'),
    ],
    ids=["passed", "rewritten"],
)
def test_headers_the_upstreams_connection_header_names_do_not_reach_the_client(
    upstream: RawUpstream, base_url: str, path: bytes, body: bytes
) -> None:
    """RFC 9110 section 7.6.1: the fields ``Connection`` names are for the one hop."""
    length = str(len(body)).encode()
    upstream.reset(
        answer(
            OK_HEAD + b"Connection: keep-alive, X-Hop\r\nx-hop: secret\r\nx-kept: 1\r\ncontent-length: " + length
            + b"\r\n\r\n" + body
        )
    )  # fmt: skip
    method, request_body = (b"GET", b"") if path.endswith(b"/models") else (b"POST", b'{"model":"m"}')
    raw = exchange(
        base_url,
        method + b" " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Length: " + str(len(request_body)).encode()
        + b"\r\nConnection: close\r\n\r\n" + request_body,
    )  # fmt: skip
    head, _ = response_head(raw)
    fields = [line.split(b":", 1)[0].lower() for line in head.split(b"\r\n")[1:]]
    assert b"x-hop" not in fields
    assert b"x-kept" in fields


# A body the upstream breaks off reaches the client broken off, as it would directly: the sidecar closes the
# connection without the last chunk (or short of the content-length).
BROKEN = [
    (b"GET", b"/v1/models", OK_HEAD + b"transfer-encoding: chunked\r\n\r\n3\r\nabc\r\n"),
    (b"GET", b"/v1/models", OK_HEAD + b"content-length: 10\r\n\r\nabc"),
    (
        b"POST",
        b"/v1/chat/completions",
        b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
        b"3\r\nabc\r\n",
    ),
]


@pytest.mark.parametrize(("method", "path", "sent"), BROKEN, ids=["chunked", "length", "error-answer"])
def test_a_pass_through_body_the_upstream_breaks_off_reaches_the_client_broken_off(
    upstream: RawUpstream, base_url: str, method: bytes, path: bytes, sent: bytes
) -> None:
    upstream.reset(answer(sent))
    kwargs = {"json": {"model": "m"}} if method == b"POST" else {}
    with httpx.Client(timeout=WAIT) as http:
        with pytest.raises(httpx.RemoteProtocolError):
            http.request(method.decode(), upstream.base_url + path.decode().removeprefix("/v1"), **kwargs)
        with pytest.raises(httpx.RemoteProtocolError):
            http.request(method.decode(), base_url + path.decode().removeprefix("/v1"), **kwargs)


def test_the_transport_passes_a_broken_off_error_answer_on_broken_off(upstream: RawUpstream) -> None:
    upstream.reset(answer(BROKEN[2][2]))
    transport = SyncNormalizingTransport(provider="openrouter")
    with httpx.Client(transport=transport, timeout=WAIT) as http, pytest.raises(httpx.RemoteProtocolError):
        http.post(upstream.base_url + "/chat/completions", json={"model": "m"})


def bad_path_body() -> bytes:
    return (
        b'{"error":{"message":"The request path may not contain \'.\' or \'..\' segments.",'
        b'"type":"invalid_request_error","code":"invalid_request","param":null}}'
    )


@pytest.mark.parametrize(
    "path",
    [
        b"/v1/../etc",
        b"/v1/%2e%2e/etc",
        b"/v1/./models",
        b"/v1/..%2fetc",
        b"/v1/..%2Fetc",
        b"/v1/%2e%2e%2fetc",
        b"/v1/%2E%2E%2Fetc",
        b"/v1/..;/etc",
        b"/v1/a/..;jsessionid=1/etc",
        b"/v1/.;x/models",
        b"/v1/..\\etc",
        b"/v1/..%5cetc",
        b"/v1/..%5Cetc",
        b"/v1/%2e%2e%5cetc",
        b"/v1/a%2f..%2fetc",
        b"/v1/%u002e%u002e/etc",
        b"/v1/%U002E%U002E/etc",
        b"/v1/%ef%bc%8e%ef%bc%8e/etc",
        b"/v1/..%ef%bc%8fetc",
        b"/v1/..%ef%bc%bcetc",
        b"/v1/%e2%80%a5/etc",
        b"/v1/..%00/etc",
        b"/v1/..%20/etc",
        b"/v1/..%09/etc",
        b"/v1/%20..%0d%0a/etc",
        b"/v1/..%ef%bc%9bx/etc",
    ],
)
def test_every_form_of_a_dot_segment_is_refused(upstream: RawUpstream, base_url: str, path: bytes) -> None:
    """Decoded once, as the upstream decodes it, with ``/`` and ``\\`` as separators and ``;`` starting a segment's
    parameters: a ``.`` or ``..`` segment is a 400, and nothing is forwarded."""
    before = len(upstream.requests)
    raw = exchange(base_url, b"GET " + path + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    head, body = response_head(raw)
    assert head.split(b"\r\n")[0] == b"HTTP/1.1 400 Bad Request"
    assert body == bad_path_body()
    assert len(upstream.requests) == before


@pytest.mark.parametrize(
    "path",
    [
        b"/v1/a..b/c",
        b"/v1/.../c",
        b"/v1/%252e%252e/c",
        b"/v1/a%2Fb",
        b"/v1/x;y/c",
        b"/v1/..a/c",
        b"/v1/models/caf%C3%A9",
        b"/v1/%25u002e%25u002e/c",
    ],
)
def test_names_with_dots_that_are_no_dot_segment_are_forwarded_as_sent(
    upstream: RawUpstream, base_url: str, path: bytes
) -> None:
    upstream.reset(answer(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"))
    exchange(base_url, b"GET " + path + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert upstream.requests[-1].split(b"\r\n")[0] == b"GET " + path + b" HTTP/1.1"


@pytest.mark.parametrize(
    ("sent", "forwarded"),
    [
        (b'/v1/a{b}`c"d<e>', b"/v1/a%7Bb%7D%60c%22d%3Ce%3E"),
        (b"/v1/models?", b"/v1/models"),
        (b"/v1/a|b^{c}?q={x}`|^%zz", b"/v1/a|b^%7Bc%7D?q={x}`|^%zz"),  # the query as sent
        (b'/v1/m?q="<>', b"/v1/m?q=%22%3C%3E"),  # but for these three
    ],
)
def test_the_bytes_httpx_percent_encodes_in_a_path_arrive_percent_encoded(
    upstream: RawUpstream, base_url: str, sent: bytes, forwarded: bytes
) -> None:
    """The path goes as sent but for what httpx's URL percent-encodes in it, as an httpx client would send it, and an
    empty query; a query's bytes go as sent but for ``"``, ``<`` and ``>`` (docs/sidecar.md, "Paths")."""
    upstream.reset(answer(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"))
    exchange(base_url, b"GET " + sent + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert upstream.requests[-1].split(b"\r\n")[0] == b"GET " + forwarded + b" HTTP/1.1"


@pytest.mark.parametrize(
    ("request_line", "status_line", "message", "kind", "code"),
    [
        (  # a tunnel (RFC 9110 section 9.3.6): aiohttp sent it as CONNECT host:port, httpcore dropped the answer's body
            b"CONNECT /v1/x HTTP/1.1",
            b"HTTP/1.1 501 Not Implemented",
            b"CONNECT asks for a tunnel, which numi_mw does not open; send the request itself.",
            b"api_error",
            b"not_implemented",
        ),
        (  # no path to put under the base URL's (RFC 9112 section 3.2.4): it went upstream as OPTIONS /v1*
            b"OPTIONS * HTTP/1.1",
            b"HTTP/1.1 400 Bad Request",
            b"The request target must be a path that starts with '/'.",
            b"invalid_request_error",
            b"invalid_request",
        ),
    ],
    ids=["connect", "asterisk"],
)
def test_a_request_numi_mw_cannot_forward_is_refused_and_nothing_goes_upstream(
    upstream: RawUpstream,
    base_url: str,
    request_line: bytes,
    status_line: bytes,
    message: bytes,
    kind: bytes,
    code: bytes,
) -> None:
    before = len(upstream.requests)
    head, body = response_head(exchange(base_url, request_line + b"\r\nHost: x\r\nConnection: close\r\n\r\n"))
    assert head.split(b"\r\n")[0] == status_line
    assert body == b'{"error":{"message":"%s","type":"%s","code":"%s","param":null}}' % (message, kind, code)
    assert len(upstream.requests) == before


@pytest.mark.parametrize("method", [b"PROPFIND", b"TRACE", b"QUERY", b"MKCOL", b"LOCK"])
def test_every_method_is_forwarded_as_sent(upstream: RawUpstream, base_url: str, method: bytes) -> None:
    """Methods outside the usual list reach the upstream, as they would talking to it directly (RFC 9110 section
    9.1: the method set is extensible), and the upstream's answer comes back as it came."""
    upstream.reset(answer(b"HTTP/1.1 207 Multi-Status\r\ncontent-type: text/plain\r\ncontent-length: 2\r\n\r\nok"))
    raw = exchange(base_url, method + b" /v1/x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    head, body = response_head(raw)
    assert (head.split(b"\r\n")[0], body) == (b"HTTP/1.1 207 Multi-Status", b"ok")
    assert upstream.requests[-1] == upstream_head(upstream, b"/v1/x", method) + b"Connection: keep-alive\r\n" + NO_BODY


@pytest.mark.parametrize("path", [b"/v1/a%0ab", b"/v1/a%0d%0ab", b"/v1/a%00b", b"/anywhere%0a"])
def test_every_path_is_forwarded_as_sent(upstream: RawUpstream, base_url: str, path: bytes) -> None:
    """A percent-encoded control character in a path is a name like any other: forwarded as sent, not refused by a
    route pattern."""
    upstream.reset(answer(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"))
    raw = exchange(base_url, b"GET " + path + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert response_head(raw)[1] == b"{}"
    forwarded = path if path.startswith(b"/v1/") else b"/v1" + path  # the base URL's path is /v1
    assert upstream.requests[-1] == upstream_head(upstream, forwarded) + b"Connection: keep-alive\r\n" + NO_BODY


@pytest.mark.parametrize(
    ("path", "prepared"),
    [
        (b"/v1/chat/completions", True),
        (b"/v1/chat/completions/", True),
        (b"/v1/chat/completions%09", False),  # a tab at its end: the decoded path does not end in /chat/completions
        (b"/v1/chat/completions%3Fx", False),
        (b"/v1/chat%2Fcompletions", True),  # decoded, it ends in /chat/completions, as the middleware reads it
    ],
)
def test_chat_completions_are_told_by_the_decoded_path(
    upstream: RawUpstream, base_url: str, path: bytes, prepared: bool
) -> None:
    """The sidecar prepares a ``POST`` whose path, as the server decoded it, ends in ``/chat/completions``, as the
    middleware does; any other body goes upstream byte for byte."""
    upstream.reset(answer(OK_HEAD + b"content-length: 27\r\n\r\n" + b'{"id":"gen-1","choices":[]}'))
    body = b'{"model":"m","reasoning_effort":"high","include_reasoning":false,"messages":[]}'
    exchange(base_url, closing(post(path, body)))
    sent = upstream.requests[-1].partition(b"\r\n\r\n")[2]
    expected = b'{"model":"m","reasoning":{"effort":"high","exclude":true},"messages":[]}' if prepared else body
    assert sent == expected


@pytest.mark.parametrize("method", [b"POST", b"PROPFIND", b"DELETE"])
def test_the_operations_paths_answer_other_methods_405(upstream: RawUpstream, base_url: str, method: bytes) -> None:
    before = len(upstream.requests)
    raw = exchange(base_url, method + b" /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    head, body = response_head(raw)
    lines = head.split(b"\r\n")
    message = f"Invalid method for URL ({method.decode()} /healthz); this path takes GET, HEAD."
    assert (lines[0], b"allow: GET, HEAD" in lines) == (b"HTTP/1.1 405 Method Not Allowed", True)
    assert json.loads(body) == {
        "error": {"message": message, "type": "invalid_request_error", "code": "method_not_allowed", "param": None}
    }
    assert len(upstream.requests) == before


@pytest.mark.parametrize(
    "path",
    [
        b"/v1/%c0%ae%c0%ae/etc",
        b"/v1/%c0%2e%c0%2e/etc",
        b"/v1/%e0%80%ae%e0%80%ae/etc",
        b"/v1/..%c0%afetc",
        b"/v1/..%c1%9cetc",
        b"/v1/files/%ff",
        b"/v1/files/%ud800",
    ],
)
def test_a_path_that_is_not_utf8_once_decoded_is_refused(upstream: RawUpstream, base_url: str, path: bytes) -> None:
    """Overlong UTF-8 (``%c0%ae`` for ``.``, ``%c0%af`` for ``/``) reads as a dot or a separator on servers that
    decode it leniently; a path whose once-decoded bytes are not UTF-8 is refused, and nothing is forwarded."""
    before = len(upstream.requests)
    raw = exchange(base_url, b"GET " + path + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    head, body = response_head(raw)
    assert head.split(b"\r\n")[0] == b"HTTP/1.1 400 Bad Request"
    assert body == (
        b'{"error":{"message":"The request path is not UTF-8 text once percent-decoded; encode it as UTF-8.",'
        b'"type":"invalid_request_error","code":"invalid_request","param":null}}'
    )
    assert len(upstream.requests) == before


CATALOG = """
[[providers]]
name = "openrouter"
base_url = "{base}"
api_key_env = "NUMI_E2E_FORWARD_KEY"

[[models]]
id = "vendor/listed"
reasoning_mode = "effort"

[[models.endpoints]]
tag = "alpha/primary"
provider = "openrouter"
"""


@pytest.fixture(scope="module")
def catalog_url(
    upstream: RawUpstream, tmp_path_factory: pytest.TempPathFactory, upstream_transport: str
) -> Iterator[str]:
    path = tmp_path_factory.mktemp("catalog") / "catalog.toml"
    path.write_text(CATALOG.format(base=upstream.base_url))
    with sidecar(None, "--catalog", str(path), env={"NUMI_E2E_FORWARD_KEY": "sk-operator"}) as url:
        yield url


def upstream_authorization(request: bytes) -> bytes | None:
    for line in request.partition(b"\r\n\r\n")[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"authorization":
            return value.strip()
    return None


@pytest.mark.parametrize(
    ("method", "path", "client_key", "forwarded"),
    [
        ("POST", "/chat/completions", None, b"Bearer sk-operator"),
        ("POST", "/chat/completions", "sk-client", b"Bearer sk-operator"),
        ("GET", "/models/vendor/listed", None, b"Bearer sk-operator"),
        ("DELETE", "/keys/abc", None, None),
        ("DELETE", "/keys/abc", "sk-client", b"Bearer sk-client"),
        ("GET", "/credits", None, None),
        ("POST", "/embeddings", None, None),
        ("POST", "/models/vendor/listed", None, None),
    ],
)
def test_the_catalog_key_goes_only_with_the_paths_numi_mw_serves(
    upstream: RawUpstream,
    catalog_url: str,
    method: str,
    path: str,
    client_key: str | None,
    forwarded: bytes | None,
) -> None:
    upstream.reset(answer(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"))
    headers = {"authorization": f"Bearer {client_key}"} if client_key else {}
    body = json.dumps({"model": "vendor/listed", "messages": []}) if method == "POST" else None
    with httpx.Client(timeout=WAIT) as http:
        http.request(method, catalog_url + path, headers=headers, content=body)
    assert upstream.requests[-1].split(b" ", 2)[:2] == [method.encode(), b"/v1" + path.encode()]
    assert upstream_authorization(upstream.requests[-1]) == forwarded


# A client that leaves is noticed at once, wherever the call is: the sidecar closes the upstream connection
# (the sidecar's own upstream timeout is 600 s; the test waits at most WAIT).
STREAM_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
FIRST_EVENT = b'data: {"id":"gen-1","object":"chat.completion.chunk","choices":[]}\n\n'
CHAT = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'
STREAM_CHAT = b'{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}'


def closing(request: bytes) -> bytes:
    """``request`` with ``Connection: close``, so that the sidecar closes the connection after its answer."""
    return request.replace(b"Host: x\r\n", b"Host: x\r\nConnection: close\r\n", 1)


def post(path: bytes, body: bytes) -> bytes:
    return (
        b"POST " + path + b" HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\ncontent-length: "
        + str(len(body)).encode() + b"\r\n\r\n" + body
    )  # fmt: skip


@pytest.mark.parametrize(
    ("request_bytes", "upstream_sends", "client_waits_for"),
    [
        (post(b"/v1/chat/completions", CHAT), b"", b""),
        (
            post(b"/v1/chat/completions", CHAT),
            OK_HEAD + b"content-length: 100\r\n\r\n" + b'{"id":"gen-1"',
            b"",
        ),
        (
            post(b"/v1/chat/completions", STREAM_CHAT),
            STREAM_HEAD + hex(len(FIRST_EVENT))[2:].encode() + b"\r\n" + FIRST_EVENT + b"\r\n",
            b"data: ",
        ),
        (b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", b"", b""),
        (post(b"/v1/embeddings", b'{"input":"x"}'), b"", b""),
        (
            b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n",
            OK_HEAD + b"transfer-encoding: chunked\r\n\r\n3\r\nabc\r\n",
            b"abc",
        ),
    ],
    ids=[
        "chat-before-answer",
        "chat-buffered-body",
        "chat-stream",
        "get-before-answer",
        "post-before-answer",
        "get-body",
    ],
)
def test_a_client_that_leaves_closes_the_upstream_connection(
    upstream: RawUpstream, base_url: str, request_bytes: bytes, upstream_sends: bytes, client_waits_for: bytes
) -> None:
    upstream_closed = threading.Event()
    upstream.reset(hold(upstream_sends, upstream_closed))
    url = httpx.URL(base_url)
    with socket.create_connection((url.host, url.port or 80), timeout=WAIT) as sock:
        sock.sendall(request_bytes)
        assert upstream.received.wait(WAIT)
        seen = b""
        while client_waits_for not in seen:
            seen += sock.recv(65536)
    assert upstream_closed.wait(WAIT)


def test_a_malformed_answer_is_a_502_and_the_request_is_not_sent_again(upstream: RawUpstream, base_url: str) -> None:
    """The upstream answered (a header line without a colon, RFC 9112 section 5): a second generation could be
    billed, so the chat completion is not sent for again."""
    upstream.reset(answer(b"HTTP/1.1 200 OK\r\nthis line has no colon\r\ncontent-length: 2\r\n\r\n{}"))
    before = len(upstream.requests)
    head, body = response_head(exchange(base_url, closing(post(b"/v1/chat/completions", CHAT))))
    assert (head.split(b"\r\n")[0], json.loads(body)) == (b"HTTP/1.1 502 Bad Gateway", UNREACHABLE)
    assert len(upstream.requests) - before == 1


def test_a_connection_closed_before_any_answer_byte_is_sent_once_more(upstream: RawUpstream, base_url: str) -> None:
    """As a kept-alive connection the upstream closed meanwhile ends: nothing was answered, so the request goes
    again, and the second answer reaches the client."""
    calls: list[int] = []
    ok = answer(OK_HEAD + b"content-length: 27\r\n\r\n" + b'{"id":"gen-1","choices":[]}')

    def first_closes(conn: socket.socket, request: bytes) -> None:
        calls.append(1)
        if len(calls) > 1:
            ok(conn, request)

    upstream.reset(first_closes)
    before = len(upstream.requests)
    head, body = response_head(exchange(base_url, closing(post(b"/v1/chat/completions", CHAT))))
    assert (head.split(b"\r\n")[0], body) == (b"HTTP/1.1 200 OK", b'{"id":"gen-1","choices":[]}')
    assert upstream.requests[before:] == [upstream.requests[before]] * 2


@pytest.mark.parametrize(
    ("sent", "expected"),
    [
        pytest.param(
            b"X-Title: Caf\xc3\xa9 app\r\nX-Latin: caf\xe9\r\nX-Spaced:   a  b \t \r\n",
            b"x-title: Caf\xc3\xa9 app\r\nx-latin: caf\xe9\r\nx-spaced: a  b\r\n",
            id="byte for byte without the spaces around them",
        ),
        pytest.param(
            b"X-Forwarded-For: 203.0.113.7, 10.0.0.1\r\nX-Forwarded-Proto: https\r\n",
            b"x-forwarded-for: 203.0.113.7, 10.0.0.1\r\nx-forwarded-proto: https\r\n",
            id="forwarded headers as the client sent them",
        ),
    ],
)
def test_header_values_reach_the_upstream_as_sent(
    upstream: RawUpstream, base_url: str, sent: bytes, expected: bytes
) -> None:
    """UTF-8 (an OpenRouter ``X-Title`` with an accent) and Latin-1 bytes go as they came; the spaces and tabs
    around a value are no part of it (RFC 9110 section 5.5) and are dropped, which h11 needs to send it.
    ``X-Forwarded-For`` and ``X-Forwarded-Proto`` are the upstream's to read: the sidecar neither takes them as its
    client's address nor drops them."""
    upstream.reset(answer(OK_HEAD + b"content-length: 2\r\n\r\n{}"))
    request = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n" + sent + b"Connection: close\r\n\r\n"
    assert response_head(exchange(base_url, request))[1] == b"{}"
    assert upstream.requests[-1] == upstream_head(upstream, b"/v1/models") + (
        b"Connection: keep-alive\r\n" + expected + NO_BODY
    )


def test_expect_100_continue_is_forwarded_and_the_body_follows_at_once(upstream: RawUpstream, base_url: str) -> None:
    """Many servers never answer ``100 Continue``; httpx sends the body without waiting, as RFC 9110 section
    10.1.1 lets a client, and so does the sidecar on either transport."""
    upstream.reset(answer(OK_HEAD + b"content-length: 27\r\n\r\n" + b'{"id":"gen-1","choices":[]}'))
    request = closing(post(b"/v1/chat/completions", CHAT)).replace(
        b"Host: x\r\n", b"Host: x\r\nExpect: 100-continue\r\n"
    )
    interim, _, final = exchange(base_url, request).partition(b"\r\n\r\n")  # the sidecar's server asks for the body
    head, body = response_head(final)
    assert (interim, head.split(b"\r\n")[0], body) == (
        b"HTTP/1.1 100 Continue",
        b"HTTP/1.1 200 OK",
        b'{"id":"gen-1","choices":[]}',
    )
    assert b"\r\nexpect: 100-continue\r\n" in upstream.requests[-1]
    assert upstream.requests[-1].endswith(b"\r\n\r\n" + CHAT)


@pytest.mark.parametrize(
    ("status_line", "expected"),
    [
        (b"HTTP/1.1 200 OK \xe2\x9c\x93", b"HTTP/1.1 200 OK"),  # a reason phrase in UTF-8
        (b"HTTP/1.1 101 Switching Protocols", b"HTTP/1.1 502 Bad Gateway"),  # nothing asked to switch
    ],
)
def test_odd_status_lines(upstream: RawUpstream, base_url: str, status_line: bytes, expected: bytes) -> None:
    upstream.reset(answer(status_line + b"\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"))
    head, _ = response_head(exchange(base_url, b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
    assert head.split(b"\r\n")[0] == expected


def test_a_connection_always_closed_unanswered_gets_the_request_twice_and_a_502(
    upstream: RawUpstream, base_url: str
) -> None:
    """Sent once more, by the sidecar alone (aiohttp would also retry a GET on its own first)."""
    upstream.reset(lambda conn, request: None)
    before = len(upstream.requests)
    head, body = response_head(exchange(base_url, b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
    assert (head.split(b"\r\n")[0], json.loads(body)) == (b"HTTP/1.1 502 Bad Gateway", UNREACHABLE)
    assert len(upstream.requests) - before == 2


def test_credentials_in_the_upstream_url_become_basic_authorization(upstream: RawUpstream) -> None:
    base = upstream.base_url.replace("http://", "http://us%40er:p%3Ass@")
    upstream.reset(answer(OK_HEAD + b"content-length: 2\r\n\r\n{}"))
    with sidecar(base, "--provider", "openrouter") as url:
        head, body = response_head(exchange(url, b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
    assert (head.split(b"\r\n")[0], body) == (b"HTTP/1.1 200 OK", b"{}")
    assert b"\r\nAuthorization: Basic dXNAZXI6cDpzcw==\r\n" in upstream.requests[-1]  # base64 of us@er:p:ss


def test_an_upstream_that_never_takes_the_body_is_a_504_within_the_timeouts() -> None:
    """httpcore times each write (``--timeout``); aiohttp times none, so writing and waiting for the answer are
    bounded together by the write and read timeouts summed: 4 seconds here."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def accept_and_ignore() -> None:
        listener.settimeout(0.2)
        held = []
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                held.append(listener.accept()[0])
        for conn in held:
            conn.close()

    thread = threading.Thread(target=accept_and_ignore, daemon=True)
    thread.start()
    port = listener.getsockname()[1]
    try:
        with sidecar(f"http://127.0.0.1:{port}/v1", "--provider", "openrouter", "--timeout", "2") as url:
            raw = exchange_while_sending(url, b"POST /v1/files", b"x" * (32 * 1024 * 1024))
    finally:
        stop.set()
        thread.join(timeout=WAIT)
        listener.close()
    head, body = response_head(raw)
    assert head.split(b"\r\n")[0] == b"HTTP/1.1 504 Gateway Timeout"
    assert json.loads(body)["error"]["code"] == "upstream_timeout"


def exchange_while_sending(base_url: str, request_line: bytes, body: bytes) -> bytes:
    """Send ``request_line`` with ``body`` (``content-length`` framed) from a thread while reading the answer:
    the sidecar may answer before it has read the body, and a client blocked writing would never see it. The
    answer as ``read_request`` reads a message (its head, then its body by its framing)."""
    url = httpx.URL(base_url)
    head = request_line + b" HTTP/1.1\r\nHost: x\r\ncontent-length: %d\r\nConnection: close\r\n\r\n" % len(body)
    with socket.create_connection((url.host, url.port or 80), timeout=WAIT) as sock:

        def send() -> None:
            with contextlib.suppress(OSError):
                sock.sendall(head + body)

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        data = read_request(sock)
    sender.join(timeout=WAIT)
    return data


RELAYED_AND_REWRITTEN = pytest.mark.parametrize(
    "request_bytes",
    [b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", closing(post(b"/v1/chat/completions", CHAT))],
    ids=["relayed", "rewritten"],
)
"""A request whose answer the sidecar relays as it comes, and one whose answer it rewrites (a chat completion)."""


@RELAYED_AND_REWRITTEN
@pytest.mark.parametrize("status", [b"204 No Content", b"304 Not Modified"])
def test_an_answer_without_a_body_goes_back_without_its_content_length(
    upstream: RawUpstream, base_url: str, status: bytes, request_bytes: bytes
) -> None:
    """A 304 may carry the length of the representation it stands for (RFC 9110 section 8.6), and neither it nor a
    204 has a body: relayed with that length, or with a length of its own for a body the sidecar read whole, the
    sidecar's server would wait for a body that never comes, and a client may refuse the answer."""
    upstream.reset(
        answer(
            b"HTTP/1.1 " + status + b'\r\ncontent-type: application/json\r\netag: "v1"\r\ncontent-length: 10\r\n\r\n'
        )
    )
    raw = exchange(base_url, request_bytes)
    assert response_head(raw) == (
        b"HTTP/1.1 " + status + b'\r\ncontent-type: application/json\r\netag: "v1"\r\nconnection: close',
        b"",
    )


@pytest.mark.parametrize("status", [b"099", b"600", b"999"])
def test_a_status_outside_100_to_599_is_a_502_sent_once(upstream: RawUpstream, base_url: str, status: bytes) -> None:
    """RFC 9110 section 15: the server in front of the sidecar cannot write such a status."""
    upstream.reset(
        answer(b"HTTP/1.1 " + status + b" Weird\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}")
    )
    before = len(upstream.requests)
    head, body = response_head(exchange(base_url, closing(post(b"/v1/chat/completions", CHAT))))
    assert (head.split(b"\r\n")[0], json.loads(body)) == (b"HTTP/1.1 502 Bad Gateway", UNREACHABLE)
    assert len(upstream.requests) - before == 1


@RELAYED_AND_REWRITTEN
def test_an_answer_header_with_a_control_character_is_left_out(
    upstream: RawUpstream, base_url: str, request_bytes: bytes
) -> None:
    """RFC 9110 section 5.5: invalid in a field value; the rest of the answer, relayed or rewritten, goes on."""
    body = b'{"id":"gen-1","choices":[]}'
    upstream.reset(
        answer(OK_HEAD + b"x-odd: a\x01b\r\nx-del: \x7f\r\nx-tab: a\tb\r\ncontent-length: 27\r\n\r\n" + body)
    )
    head, received = response_head(exchange(base_url, request_bytes))
    fields = head.split(b"\r\n")
    assert (fields[0], received) == (b"HTTP/1.1 200 OK", body)
    assert [field for field in fields if field.startswith(b"x-")] == [b"x-tab: a\tb"]


def test_bytes_past_an_answer_do_not_reach_the_next_request(
    upstream: RawUpstream, base_url: str, upstream_transport: str
) -> None:
    """An upstream that sends bytes past a ``Content-Length`` body and keeps the connection: the connection is not
    used again, so the next request, whoever sends it, gets its own answer."""
    body = b'{"id":"gen-1","choices":[]}'
    ok = OK_HEAD + b"content-length: 27\r\n\r\n" + body

    def garbage_then_keep(conn: socket.socket, request: bytes) -> None:
        conn.sendall(ok + b"GARBAGE")
        conn.settimeout(2)
        with contextlib.suppress(OSError):
            if read_request(conn):  # the connection was used again: answer as the upstream would
                conn.sendall(ok)

    upstream.reset(garbage_then_keep)
    first = response_head(exchange(base_url, closing(post(b"/v1/chat/completions", CHAT))))
    upstream.reset(answer(ok))
    second = response_head(exchange(base_url, closing(post(b"/v1/chat/completions", CHAT))))
    assert (second[0].split(b"\r\n")[0], second[1]) == (b"HTTP/1.1 200 OK", body)
    # httpcore takes the first answer whole; aiohttp refuses it (docs/sidecar.md, "Upstream transport")
    expected = b"HTTP/1.1 200 OK" if upstream_transport == "httpcore" else b"HTTP/1.1 502 Bad Gateway"
    assert first[0].split(b"\r\n")[0] == expected


def upstream_error_count(base_url: str) -> float:
    """The sidecar's ``numi_mw_upstream_errors_total``, summed over its labels."""
    metrics = httpx.get(base_url.removesuffix("/v1") + "/metrics", timeout=WAIT).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("numi_mw_upstream_errors_total{")
    )


def test_a_client_that_leaves_mid_upload_ends_the_call_and_is_no_upstream_failure(
    upstream: RawUpstream, base_url: str
) -> None:
    """The body streams upstream as it comes (aiohttp writes it from a task of its own): a client that leaves
    before its body ends is the client's doing, not a failed write to the upstream, and the upstream's connection
    is closed."""
    upstream.reset(answer(OK_HEAD + b"content-length: 2\r\n\r\n{}"))
    before = upstream_error_count(base_url)
    url = httpx.URL(base_url)
    with socket.create_connection((url.host, url.port or 80), timeout=WAIT) as sock:
        sock.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\ntransfer-encoding: chunked\r\n\r\n4\r\nabcd\r\n")
        assert not upstream.received.wait(0.5)  # the upstream is still reading the body while the client is there
    assert upstream.received.wait(WAIT)  # the sidecar closed the upstream's connection: its read of the body ended
    assert upstream.requests[-1].endswith(b"\r\n\r\n4\r\nabcd\r\n")
    assert upstream_error_count(base_url) == before
