"""What the shells share: reading an ASGI request body under a limit, header lists, the options check, the ASGI
error response.

No reasoning rules here; they are all in ``numi_mw.core``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from functools import partial
from typing import TypeVar

import anyio.to_thread
import httpx
from starlette.types import Receive, Send

from numi_mw.core.catalog import Catalog, base_url_problem
from numi_mw.core.errors import ApiError, header_fields_too_large, payload_too_large
from numi_mw.core.providers import WIRE_API_NAMES
from numi_mw.core.structs import check_limits
from numi_mw.core.think import THINK_STARTS, ThinkTags

Headers = list[tuple[bytes, bytes]]

DEFAULT_MAX_HEADER_COUNT = 256
"""Request headers the sidecar takes, by count (``--max-header-count``): 431 above it. Node's HTTP server takes
2,000 by default and Go's ``net/http`` has no count limit; real clients send a few dozen, so 256 leaves room for
any proxy chain while bounding the per-request work on them (``docs/security.md``)."""

DEFAULT_MAX_HEADER_BYTES = 64 * 1024
"""Request header bytes the sidecar takes, names and values summed (``--max-header-bytes``): 431 above it.
nginx answers 400 past four 8 KiB buffers, Node 431 past 16 KiB, Go's ``net/http`` past 1 MiB; 64 KiB lets
large tokens and cookie headers through (``docs/security.md``)."""

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


_OWS = b" \t"


def forwarded_headers(headers: Iterable[tuple[bytes, bytes]], drop: frozenset[bytes]) -> Headers:
    """The raw ASGI request ``headers`` as the sidecar sends them on: without the names in ``drop`` (lower case) and
    those a ``Connection`` header lists (hop-by-hop too, RFC 9110 section 7.6.1), and each value without the spaces
    and tabs around it. Those are no part of the field value (RFC 9110 section 5.5), a server such as uvicorn hands
    them on, and h11 refuses to send a value that has them. One pass over the headers, and a second only when a
    ``Connection`` header lists a name outside ``drop``."""
    out: Headers = []
    listing: list[bytes] = []  # the Connection headers' values
    for name, value in headers:
        lowered = name.lower()
        if lowered == b"connection":
            listing.append(value)
        if lowered in drop:
            continue
        if value and (value[0] in _OWS or value[-1] in _OWS):
            value = value.strip(_OWS)
        out.append((name, value))
    if listing:
        named = listed_names(listing, drop)
        if named:  # a Connection header lists a header of the request's own
            out = [(name, value) for name, value in out if name.lower() not in named]
    return out


def listed_names(values: Iterable[bytes], drop: frozenset[bytes]) -> set[bytes]:
    """The header names that ``Connection`` header ``values`` list (hop-by-hop too, RFC 9110 section 7.6.1), lower
    case, without the names in ``drop`` (lower case) and without an empty list item (RFC 9110 section 5.6.1)."""
    named = {token.strip() for value in values for token in value.lower().split(b",")} - drop
    named.discard(b"")
    return named


_CONTENT_LENGTH = frozenset((b"content-length",))

ADJUSTMENTS = b"x-numi-mw-adjustments"
"""The response header that lists what numi_mw changed so that the provider accepts a request
(``PreparedRequest.adjustments``; ``docs/wire-apis.md``)."""

_UNSAFE = re.compile(r"[^A-Za-z0-9_.+=\-]")


def adjustments_header(adjustments: list[str]) -> list[tuple[bytes, bytes]]:
    """The ``x-numi-mw-adjustments`` header for ``adjustments`` (none when empty): the entries joined with ``, ``,
    any character outside letters, digits and ``_ . + = -`` (a client's attribute name can hold anything) as
    ``?``."""
    if not adjustments:
        return []
    return [(ADJUSTMENTS, ", ".join(_UNSAFE.sub("?", entry) for entry in adjustments).encode())]


def with_length(
    headers: Iterable[tuple[bytes, bytes]],
    length: int | None,
    drop: frozenset[bytes] = _CONTENT_LENGTH,
    *,
    lowered: bool = False,
    content_type: bytes | None = None,
) -> Headers:
    """``headers`` for a body whose length changed: without ``content-length`` (and the names in ``drop``, lower
    case), then ``content-length: length`` at the end when ``length`` (bytes) is given; ``None`` for a body of
    no fixed length (a rewritten stream). ``lowered``: the names are lower case already (an ASGI request's), so
    they are compared as they are. ``content_type``, when given, replaces the ``content-type`` header (a body
    rewriter's ``content_type``)."""
    names = drop if b"content-length" in drop else drop | _CONTENT_LENGTH
    if content_type is not None:
        names = names | {b"content-type"}
    out = [(k, v) for k, v in headers if k not in names] if lowered else without_headers(headers, names)
    if content_type is not None:
        out.append((b"content-type", content_type))
    if length is not None:
        out.append((b"content-length", str(length).encode()))
    return out


def is_json(content_type: bytes | None) -> bool:
    """Whether a request body with this ``content-type`` value (``None``: no such header) is read as JSON on a route
    that is not translated: the value mentions ``json`` (any case), or there is none. The common spellings are
    looked up before the value is lowered and searched (about 2 k instructions less a request, callgrind)."""
    return content_type is None or content_type in _JSON_TYPES or content_type.lower().find(b"json") >= 0


_JSON_TYPES = frozenset((b"application/json", b"application/json; charset=utf-8"))
"""The ``content-type`` values most JSON requests carry, as clients send them."""


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


def check_headers(headers: Headers, max_count: int, max_bytes: int) -> None:
    """Check the raw request ``headers`` against the header limits, in one pass (before any body byte is read).

    Args:
        headers: the raw ASGI request headers.
        max_count: the most headers taken (``--max-header-count``).
        max_bytes: the most bytes of header names and values taken, summed (``--max-header-bytes``).

    Raises:
        ApiError: 431 ``request_header_fields_too_large`` (RFC 6585 section 5) over either limit.
    """
    if len(headers) > max_count:
        raise header_fields_too_large("count", max_count)
    if sum(len(name) + len(value) for name, value in headers) > max_bytes:
        raise header_fields_too_large("size", max_bytes)


def check_options(
    *,
    max_body_bytes: object,
    think_tags: object,
    think_start: object,
    preserve_reasoning: object,
    wire_api: object = None,
    catalog: object = None,
) -> None:
    """Check the options the shells take, when they are given.

    Raises:
        ValueError: ``max_body_bytes`` is not a positive whole number (bytes); ``think_tags`` is not ``None``, a
            boolean or a ``ThinkTags``; ``think_start`` is not ``None`` (not set) or one of ``content``,
            ``reasoning``, ``auto``, or is given with ``think_tags=False`` (as the command line's
            ``--think-start`` with ``--no-think-tags``); ``preserve_reasoning`` is not a boolean; ``wire_api`` is
            not ``None`` (not set) or one of ``openai-chat``, ``openai-responses``, ``anthropic-messages``;
            ``catalog`` is not
            ``None`` (not set) or a ``Catalog`` (``load_catalog``), or is given with a ``wire_api``, which a
            catalog says per provider.
    """
    if wire_api is not None and wire_api not in WIRE_API_NAMES:
        raise ValueError(f"wire_api must be one of {', '.join(WIRE_API_NAMES)}, not {wire_api!r}")
    if catalog is not None:
        if not isinstance(catalog, Catalog):
            raise ValueError(f"catalog must be a Catalog (numi_mw.load_catalog), not {catalog!r}")
        if wire_api is not None:
            raise ValueError("wire_api goes with an upstream; a catalog says it per provider")
    check_limits(max_body_bytes=max_body_bytes)
    if think_tags is not None and not isinstance(think_tags, bool | ThinkTags):
        raise ValueError(f"think_tags must be None, true, false or a ThinkTags, not {think_tags!r}")
    if think_start is not None and think_start not in THINK_STARTS:
        raise ValueError(f"think_start must be one of {', '.join(THINK_STARTS)}, not {think_start!r}")
    if think_start is not None and think_tags is False:
        raise ValueError("think_start has no effect with think_tags=False")
    if not isinstance(preserve_reasoning, bool):
        raise ValueError(f"preserve_reasoning must be true or false, not {preserve_reasoning!r}")


def check_upstream(url: str) -> None:
    """Check an upstream base URL when it is given (``core.catalog.base_url_problem``, the rule a catalog's
    ``base_url`` follows too).

    Raises:
        ValueError: ``url`` is not an ``http://`` or ``https://`` URL with a host, or its port is not a number from
            1 to 65535 (``http://h:99999/v1``, ``http://h:abc/v1``), or httpx, which sends every request, refuses it
            (``httpx.InvalidURL``: ``http://0177.0.0.1/v1``, an IPv4 address with a leading zero).
    """
    problem = base_url_problem(url) if isinstance(url, str) else "scheme"
    if problem == "port":
        raise ValueError(f"the upstream's port must be a number from 1 to 65535, not {url!r}")
    if problem is not None:
        raise ValueError(f"the upstream must be an http:// or https:// URL with a host, not {url!r}")
    try:
        httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise ValueError(f"the upstream is no URL httpx can send to ({exc}), not {url!r}") from None


async def send_error(send: Send, error: ApiError, headers: Iterable[tuple[bytes, bytes]] = ()) -> None:
    """Send ``error`` as a complete ASGI HTTP response with the OpenAI-style error body, and ``headers`` (lower-case
    names, none of them ``content-type`` or ``content-length``) besides."""
    body = error.to_bytes()
    await send(
        {
            "type": "http.response.start",
            "status": error.status,
            "headers": [
                (b"content-type", b"application/json"),
                *headers,
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


OFF_LOOP_BYTES = 256 * 1024
"""The body size in bytes from which ``off_loop`` runs the core's work in a worker thread. Measured on a
development machine (``docs/security.md``, "The event loop"): a hop to a thread and back costs about 150 µs;
preparing a request costs about 3 ns a byte for long messages and up to about 50 ns a byte for a history of tiny
ones. At 256 KiB the work left inline holds the event loop for at most about 10 ms, and a typical body just past it
pays a hop of a fifth of its own cost."""

_T = TypeVar("_T")


async def off_loop(size: int, work: Callable[..., _T], *args: object) -> _T:
    """``work(*args)``, run in a worker thread (``anyio.to_thread.run_sync``) when ``size`` (the bytes of the body
    it reads, client's or upstream's) is at least ``OFF_LOOP_BYTES``, else inline: CPU work whose cost grows with
    what a client or an upstream sends never holds the event loop (and every other request on it) for long.
    ``work`` must touch nothing another task uses meanwhile (the core's functions, a rewriter of one response).

    Raises:
        Exception: whatever ``work`` raises, unchanged.
    """
    if size < OFF_LOOP_BYTES:
        return work(*args)
    return await anyio.to_thread.run_sync(partial(work, *args))
