"""Shared msgspec JSON encoder and decoder (reused instances; DESIGN.md decision 2: dicts for rewriting)."""

from __future__ import annotations

import json
import math
from typing import Any

import msgspec

from numi_mw.core.errors import ApiError

encoder = msgspec.json.Encoder()
decoder = msgspec.json.Decoder()


encode = encoder.encode
"""Encode builtins to compact JSON bytes (UTF-8, non-ASCII kept as is); the encoder's own method, no wrapper
(it runs once per rewritten SSE event)."""


def not_json(exc: msgspec.DecodeError, body: bytes | None = None) -> ApiError:
    """The 400 ``invalid_json`` error for a request ``body`` msgspec could not decode (``exc`` says where).

    When the standard library reads the body (``decode_fallback``), the message names what msgspec refused
    instead of its own words ("Input data was truncated" for a lone surrogate): requests must be strict JSON.
    """
    if body is not None and decode_fallback(body) is not UNDECODABLE:
        return ApiError(
            400,
            "invalid_json",
            "The request body holds a lone UTF-16 surrogate escape (\\ud800 to \\udfff without its pair), which "
            "is not a Unicode character, or a NaN or Infinity literal, which is not JSON; send whole characters "
            "and finite numbers.",
            None,
        )
    return ApiError(400, "invalid_json", f"The request body is not valid JSON ({exc}); send a JSON object.", None)


def not_utf8(exc: UnicodeDecodeError) -> ApiError:
    """The 400 ``invalid_json`` error for a request body that is not UTF-8 (RFC 8259 section 8.1)."""
    return ApiError(
        400,
        "invalid_json",
        f"The request body is not valid UTF-8 (byte {exc.start}); send UTF-8 encoded JSON.",
        None,
    )


def check_utf8(body: bytes) -> None:
    """Check that ``body`` is UTF-8, for a path that skipped strings without decoding them.

    Raises:
        ApiError: 400 ``invalid_json`` naming the offset of the first invalid byte.
    """
    if not body.isascii():
        try:
            body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise not_utf8(exc) from None


def too_deep() -> ApiError:
    """The 400 ``invalid_json`` error for a request body nested deeper than the decoder's recursion limit."""
    return ApiError(400, "invalid_json", "The request body is nested too deeply to decode; flatten it.", None)


def decode_lenient(data: bytes) -> Any:
    """Decode JSON ``data`` to builtins for the response side, or ``UNDECODABLE`` (the original bytes then pass
    through): msgspec first, then ``decode_fallback``."""
    try:
        return decoder.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return decode_fallback(data)


def decode_fallback(data: bytes) -> Any:
    """What the standard library's ``json`` reads of ``data`` that msgspec refused, or ``UNDECODABLE``.

    Two things real servers send: a lone UTF-16 surrogate escape (``"\\ud83d"``), from servers written in
    JavaScript that split an emoji between two chunks; and the ``NaN``, ``Infinity`` and ``-Infinity`` literals
    that Python's ``json`` writes by default (vLLM's logprobs hold ``-Infinity``). Encode the result with
    ``encode_fallback``, which writes both back as they came. A number no float holds (``1e400``) stays refused:
    written back it would become ``Infinity``, which is not JSON.
    """
    if b"\\u" not in data and b"NaN" not in data and b"Infinity" not in data:
        return UNDECODABLE
    try:
        return json.loads(data.decode("utf-8"), parse_float=_finite_float)
    except (ValueError, RecursionError):
        return UNDECODABLE


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"{text} does not fit a float")
    return value


def encode_fallback(value: Any) -> bytes:
    """Encode a value from ``decode_fallback``: compact JSON with ASCII escapes (a lone surrogate stays the
    ``\\u`` escape it came as) and ``NaN`` / ``Infinity`` / ``-Infinity`` written as they came."""
    return json.dumps(value, ensure_ascii=True, separators=(",", ":")).encode()


def encode_lenient(value: Any) -> bytes:
    """``encode``, or ``encode_fallback`` for a value msgspec cannot write (one holding a lone surrogate)."""
    try:
        return encoder.encode(value)
    except UnicodeEncodeError:
        return encode_fallback(value)


UNDECODABLE: Any = object()
"""What ``decode_lenient`` returns for bytes that are not decodable JSON."""


def _not_object() -> ApiError:
    return ApiError(400, "invalid_request", "The request body must be a JSON object.", None)


def decode_object(body: bytes) -> dict[str, Any]:
    """Decode a JSON request body that must be an object to builtins.

    Raises:
        ApiError: 400 ``invalid_json`` when ``body`` is not JSON; 400 ``invalid_request`` when it is not an
            object (DESIGN.md error table).
    """
    try:
        data = decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise not_json(exc, body) from None
    except RecursionError:
        raise too_deep() from None
    if not isinstance(data, dict):
        raise _not_object()
    return data
