"""Errors as data: the one table of error codes, ``ApiError``, and a constructor per code.

Every error numi_mw answers with is an ``ApiError`` made here, from a code of ``ERROR_CODES``, and rendered by
every shell as the OpenAI-style error body ``{"error": {"message", "type", "code", "param"}}``, or, once a stream
has started, as the error chunk of ``ApiError.stream_chunk``. The situations each code covers are tabled in
``docs/errors.md``; a test checks that table against ``ERROR_CODES``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final, Literal

import msgspec

_encoder = msgspec.json.Encoder()

ErrorType = Literal["invalid_request_error", "api_error"]

ERROR_CODES: Final[dict[str, tuple[int, ErrorType]]] = {
    "invalid_json": (400, "invalid_request_error"),
    "invalid_request": (400, "invalid_request_error"),
    "model_not_found": (404, "invalid_request_error"),
    "method_not_allowed": (405, "invalid_request_error"),
    "payload_too_large": (413, "invalid_request_error"),
    "request_header_fields_too_large": (431, "invalid_request_error"),
    "internal_error": (500, "api_error"),
    "not_implemented": (501, "api_error"),
    "upstream_unavailable": (502, "api_error"),
    "provider_unavailable": (503, "api_error"),
    "upstream_timeout": (504, "api_error"),
}
"""Each ``error.code`` with its HTTP status and ``error.type`` (``invalid_request_error`` for 4xx, ``api_error``
for 5xx, as OpenAI's API answers). An upstream's own error response is passed through and is not in here."""


class ApiError(Exception):
    """A request numi_mw refuses, rendered by every shell as the OpenAI-style error body (``body``), or as the
    chunk that ends a stream (``stream_chunk``).

    Made by the constructors of this module (``invalid_request``, ``payload_too_large``, ...), one per code.

    Args:
        code: ``error.code``, a key of ``ERROR_CODES``; it decides ``status`` and ``type``.
        message: one sentence saying what was wrong and what to do.
        param: the field path at fault (``messages[3].reasoning_details[0].text``), or ``None``.

    Raises:
        KeyError: ``code`` is not in ``ERROR_CODES``.
    """

    def __init__(self, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.type = ERROR_CODES[code]
        self.code = code
        self.message = message
        self.param = param

    def body(self) -> dict[str, Any]:
        """The error body: ``{"error": {"message", "type", "code", "param"}}``."""
        return {"error": {"message": self.message, "type": self.type, "code": self.code, "param": self.param}}

    def to_bytes(self) -> bytes:
        """The error body as JSON bytes (UTF-8)."""
        return _encoder.encode(self.body())

    def stream_chunk(self, head: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The error as the chat completion chunk that ends a stream after its 200 was sent (``docs/errors.md``).

        ``{"id", "object": "chat.completion.chunk", "created", "model", "error": {"message", "type", "code",
        "param"}, "choices": []}``. As OpenRouter reports an error mid-stream (its API reference, "Errors" and
        "Streaming"), ``error.code`` is the HTTP status, an integer; this error's code of ``ERROR_CODES`` moves to
        ``error.type``, a string in every client. ``choices`` is empty, without OpenRouter's choice with
        ``finish_reason: "error"``, which some clients take for an ordinary last chunk. ``docs/errors.md`` has
        how each client reads it.

        Args:
            head: a chunk of the stream, whose ``id`` (string), ``created`` (integer seconds) and ``model``
                (string) the error chunk repeats; a field missing or of another type, or no ``head`` (the stream
                broke before its first chunk), gives ``""``, ``0`` and ``""``.
        """
        head = head or {}
        chunk_id, created, model = head.get("id"), head.get("created"), head.get("model")
        return {
            "id": chunk_id if isinstance(chunk_id, str) else "",
            "object": "chat.completion.chunk",
            "created": created if isinstance(created, int) and not isinstance(created, bool) else 0,
            "model": model if isinstance(model, str) else "",
            "error": {"message": self.message, "type": self.code, "code": self.status, "param": self.param},
            "choices": [],
        }

    def __repr__(self) -> str:
        return f"ApiError({self.code!r}, {self.message!r}, param={self.param!r})"


def is_error_body(value: Any) -> bool:
    """Whether the decoded JSON ``value`` is an OpenAI-style error body: an object whose ``error`` is an object
    (OpenAI's API reference, "Error codes"; OpenRouter's and llama-server's have this shape too)."""
    return isinstance(value, dict) and isinstance(value.get("error"), dict)


UPSTREAM_TEXT_CHARACTERS: Final = 1000
"""The most characters of an upstream's error body that ``upstream_error_body`` keeps in its message."""
_WORD: Final = re.compile(rb"\S{1,%d}" % (4 * UPSTREAM_TEXT_CHARACTERS))
"""A run of bytes that are not white space, no longer than the message reads (four bytes a character at most)."""


def upstream_error_body(status: int, body: bytes) -> dict[str, Any]:
    """An upstream's error answer that is no error body a client reads (an HTML page of a load balancer, a
    ``text/plain`` line, JSON of another shape) as the OpenAI-style error body, for a translated wire API, whose
    client reads only that shape (``docs/errors.md``).

    Args:
        status: the upstream's HTTP status, 400 or more, which the answer keeps.
        body: the upstream's body (bytes, decoded of its ``content-encoding``), read as UTF-8 with replacement
            characters.

    Returns:
        ``{"error": {"message", "type", "code": None, "param": None}}``: ``message`` is "The upstream answered
        {status}: {text}" with the body's text, its runs of white space made one space, up to
        ``UPSTREAM_TEXT_CHARACTERS`` characters (then "…"), or "The upstream answered {status} with an
        empty body."; ``type`` is ``invalid_request_error`` for 4xx and ``api_error`` otherwise, as for numi_mw's own
        errors; ``code`` is ``null``, as OpenAI sends it when it has none, since the upstream named none.
    """
    limit = UPSTREAM_TEXT_CHARACTERS
    words: list[bytes] = []
    size = 0
    cut = False
    for word in _WORD.finditer(body):  # runs of white space made one space, read no further than the message
        if size > 4 * limit:
            cut = True
            break
        words.append(word.group())
        size += len(words[-1]) + 1
    text = " ".join(b" ".join(words).decode("utf-8", "replace").split())
    if len(text) > limit or cut:
        text = text[:limit] + "…"
    message = (
        f"The upstream answered {status}: {text}" if text else f"The upstream answered {status} with an empty body."
    )
    kind: ErrorType = "invalid_request_error" if 400 <= status < 500 else "api_error"
    return {"error": {"message": message, "type": kind, "code": None, "param": None}}


def invalid_request(message: str, param: str | None = None) -> ApiError:
    """400 ``invalid_request``: a body of the wrong shape or a value the rules refuse, on ``param``."""
    return ApiError("invalid_request", message, param)


def invalid_json(detail: str) -> ApiError:
    """400 ``invalid_json``: the request body is not JSON; ``detail`` says where the decoder stopped."""
    return ApiError("invalid_json", f"The request body is not valid JSON ({detail}); send a JSON object.")


def empty_body() -> ApiError:
    """400 ``invalid_json`` for a request body that is empty or only whitespace."""
    return ApiError("invalid_json", "The request body is empty; send a JSON object.")


def not_strict_json() -> ApiError:
    """400 ``invalid_json`` for a body only the standard library reads: a lone UTF-16 surrogate escape or a
    ``NaN`` / ``Infinity`` literal (requests must be strict JSON, RFC 8259)."""
    return ApiError(
        "invalid_json",
        "The request body holds a lone UTF-16 surrogate escape (\\ud800 to \\udfff without its pair), which is not "
        "a Unicode character, or a NaN or Infinity literal, which is not JSON; send whole characters and finite "
        "numbers.",
    )


def not_utf8(offset: int) -> ApiError:
    """400 ``invalid_json`` for a request body that is not UTF-8 at byte ``offset`` (RFC 8259 section 8.1)."""
    return ApiError("invalid_json", f"The request body is not valid UTF-8 (byte {offset}); send UTF-8 encoded JSON.")


def too_deep() -> ApiError:
    """400 ``invalid_json`` for a request body nested deeper than the decoder's recursion limit."""
    return ApiError("invalid_json", "The request body is nested too deeply to decode; flatten it.")


def not_an_object() -> ApiError:
    """400 ``invalid_request`` for a request body that is JSON but not an object."""
    return invalid_request("The request body must be a JSON object.")


def bad_path() -> ApiError:
    """400 ``invalid_request`` for a request path with a dot segment (``.``, ``..``, in any form
    the shells' ``has_dot_segment`` finds: percent-encoded, ``%uXXXX``, full-width or other compatibility forms,
    ``\\`` as separator, ``;`` parameters, padded with whitespace or NUL)."""
    return invalid_request("The request path may not contain '.' or '..' segments.")


def not_a_path() -> ApiError:
    """400 ``invalid_request`` for a request target that is not a path (``OPTIONS *``, the asterisk form of RFC 9112
    section 3.2.4): the sidecar forwards a path under the upstream's base URL, and has none to forward."""
    return invalid_request("The request target must be a path that starts with '/'.")


def unreadable_path() -> ApiError:
    """400 ``invalid_request`` for a request path whose percent-decoded bytes are not UTF-8 (RFC 3986 section 2.5:
    a URI's characters are UTF-8 encoded): overlong forms such as ``%c0%ae`` read as ``.`` on a server that decodes
    them leniently."""
    return invalid_request("The request path is not UTF-8 text once percent-decoded; encode it as UTF-8.")


def model_not_found(model: str) -> ApiError:
    """404 ``model_not_found``: ``GET …/models/{model}/endpoints`` for a model the catalog lacks."""
    return ApiError("model_not_found", f'No model "{model}" in the catalog.')


def method_not_allowed(method: str, path: str, allowed: str) -> ApiError:
    """405 ``method_not_allowed``: ``method`` on a ``path`` numi_mw answers itself that takes only ``allowed``
    (``GET, HEAD`` for the sidecar's operations paths); OpenAI's API answers a method a URL does not take with 405
    and an ``invalid_request_error`` likewise. The shell sends ``allowed`` in the ``allow`` header (RFC 9110
    section 15.5.6)."""
    return ApiError("method_not_allowed", f"Invalid method for URL ({method} {path}); this path takes {allowed}.")


def no_tunnel() -> ApiError:
    """501 ``not_implemented`` for ``CONNECT``, which asks a proxy for a tunnel to a host (RFC 9110 section 9.3.6):
    the sidecar forwards requests and opens no tunnel, for any path (RFC 9110 section 15.6.2)."""
    return ApiError(
        "not_implemented", "CONNECT asks for a tunnel, which numi_mw does not open; send the request itself."
    )


def payload_too_large(limit: int, size: int | None = None) -> ApiError:
    """413 ``payload_too_large`` for a body over ``limit`` bytes (``size`` bytes, when known)."""
    measured = f"is {size} bytes, " if size is not None else "is "
    return ApiError(
        "payload_too_large", f"The request body {measured}over the limit of {limit} bytes; send less history."
    )


def header_fields_too_large(what: Literal["count", "size"], limit: int) -> ApiError:
    """431 ``request_header_fields_too_large`` (RFC 6585 section 5) for request headers over a limit: ``what`` is
    ``"count"`` (more than ``limit`` headers; ``--max-header-count``) or ``"size"`` (more than ``limit`` bytes of
    names and values; ``--max-header-bytes``)."""
    if what == "count":
        measure = f"{limit} headers (--max-header-count, max_header_count)"
    else:
        measure = f"{limit} bytes of header names and values (--max-header-bytes, max_header_bytes)"
    return ApiError(
        "request_header_fields_too_large",
        f"The request headers are over the limit of {measure}; send fewer or smaller headers.",
    )


def event_too_large(limit: int) -> ApiError:
    """502 ``upstream_unavailable`` for an upstream SSE event over ``limit`` bytes (``--max-event-bytes``,
    ``max_event_bytes``): numi_mw does not hold more of one event."""
    return upstream_unavailable(
        f"The upstream sent an SSE event over the limit of {limit} bytes (--max-event-bytes, max_event_bytes); "
        "the answer is incomplete."
    )


def response_too_large(limit: int) -> ApiError:
    """502 ``upstream_unavailable`` for a buffered upstream answer over ``limit`` bytes once decoded
    (``--max-response-bytes``, ``max_response_bytes``): numi_mw does not hold more of one answer."""
    return upstream_unavailable(
        f"The upstream's answer is over the limit of {limit} bytes once decoded (--max-response-bytes, "
        "max_response_bytes); numi_mw does not buffer more of it."
    )


def provider_unavailable(message: str) -> ApiError:
    """503 ``provider_unavailable``: no endpoint may serve the request (spec 004 "Routing requirements")."""
    return ApiError("provider_unavailable", message)


def internal_error() -> ApiError:
    """500 ``internal_error``: numi_mw itself failed on the request (a fault of numi_mw, whose traceback the
    server logs); the sidecar answers it in place of a plain-text 500."""
    return ApiError("internal_error", "numi_mw failed on this request; the server's log has the details.")


def upstream_unavailable(message: str) -> ApiError:
    """502 ``upstream_unavailable``: the upstream could not be reached, or its answer broke off."""
    return ApiError("upstream_unavailable", message)


def upstream_timeout(message: str) -> ApiError:
    """504 ``upstream_timeout``: the upstream did not answer, or stopped answering, in time."""
    return ApiError("upstream_timeout", message)


CUT_SHORT = upstream_unavailable("The stream ended inside an event; the answer is incomplete.")
"""The error of a stream that ends inside an unfinished, undecodable event (``response.SSERewriter.finish``)."""
