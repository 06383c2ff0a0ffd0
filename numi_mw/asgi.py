"""What the shells share on the ASGI side: reading a request body under a limit, header lists, the error response.

No reasoning rules here; they are all in ``numi_mw.core``.
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.types import Receive, Send

from numi_mw.core.errors import ApiError, payload_too_large

Headers = list[tuple[bytes, bytes]]

HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"trailers",
        b"transfer-encoding",
        b"upgrade",
    }
)
"""Hop-by-hop headers (RFC 9110 section 7.6.1): never forwarded by the sidecar, in either direction."""


def without_headers(headers: Iterable[tuple[bytes, bytes]], names: frozenset[bytes]) -> Headers:
    """The raw ASGI ``headers`` without the ones in ``names`` (lower case; header names compared lower-cased)."""
    return [(k, v) for k, v in headers if k.lower() not in names]


_CONTENT_LENGTH = frozenset((b"content-length",))


def with_length(
    headers: Iterable[tuple[bytes, bytes]],
    length: int | None,
    drop: frozenset[bytes] = _CONTENT_LENGTH,
    *,
    lowered: bool = False,
) -> Headers:
    """``headers`` for a body whose length changed: without ``content-length`` (and the names in ``drop``, lower
    case), then ``content-length: length`` at the end when ``length`` (bytes) is given; ``None`` for a body of
    no fixed length (a rewritten stream). ``lowered``: the names are lower case already (an ASGI request's), so
    they are compared as they are."""
    names = drop if b"content-length" in drop else drop | _CONTENT_LENGTH
    out = [(k, v) for k, v in headers if k not in names] if lowered else without_headers(headers, names)
    if length is not None:
        out.append((b"content-length", str(length).encode()))
    return out


def connection_tokens(headers: Iterable[tuple[bytes, bytes]]) -> frozenset[bytes]:
    """The header names a ``Connection`` header lists (hop-by-hop too, RFC 9110 section 7.6.1), lower-cased."""
    names: set[bytes] = set()
    for key, value in headers:
        if key.lower() == b"connection":
            names.update(token.strip().lower() for token in value.split(b",") if token.strip())
    return frozenset(names)


async def read_body(receive: Receive, limit: int, declared: bytes | None = None) -> bytes | None:
    """The whole request body from ASGI ``receive``, or ``None`` when the client left before it ended.

    Args:
        receive: the ASGI receive callable of an HTTP request.
        limit: the body limit in bytes.
        declared: the request's ``content-length`` header value, when it has one: a declared length over
            ``limit`` is refused before any byte is read.

    Raises:
        ApiError: 413 ``payload_too_large`` when the body (declared or received) is over ``limit`` bytes.
    """
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise payload_too_large(limit)  # before any byte is read (a client that waits for 100 Continue sends none)
    message = await receive()
    if message["type"] != "http.request":
        return None
    chunk: bytes = message.get("body", b"")
    if not message.get("more_body", False):  # the whole body in one message: nothing more to wait for
        if len(chunk) > limit:
            raise payload_too_large(limit)
        return chunk
    chunks = [chunk]
    size = len(chunk)
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise payload_too_large(limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def send_error(send: Send, error: ApiError) -> None:
    """Send ``error`` as a complete ASGI HTTP response with the OpenAI-style error body."""
    body = error.to_bytes()
    await send(
        {
            "type": "http.response.start",
            "status": error.status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})
