"""Helpers the shells share: the error response and header filtering (no reasoning rules here)."""

from __future__ import annotations

from collections.abc import Iterable

from starlette.types import Send

from numi_mw.core.errors import ApiError

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


def without_headers(headers: Iterable[tuple[bytes, bytes]], names: frozenset[bytes]) -> list[tuple[bytes, bytes]]:
    """The raw ASGI ``headers`` (lower-case names) without the ones in ``names``."""
    return [(k, v) for k, v in headers if k.lower() not in names]


def connection_tokens(headers: Iterable[tuple[bytes, bytes]]) -> frozenset[bytes]:
    """The header names a ``Connection`` header lists (hop-by-hop too, RFC 9110 section 7.6.1), lower-cased."""
    names: set[bytes] = set()
    for key, value in headers:
        if key.lower() == b"connection":
            names.update(token.strip().lower() for token in value.split(b",") if token.strip())
    return frozenset(names)


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
