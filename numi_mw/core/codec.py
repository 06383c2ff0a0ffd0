"""The JSON codec: reused msgspec encoder and decoder, and the standard-library fallback for what msgspec refuses.

Bodies are decoded to builtins (dicts and lists) for rewriting, never to Structs, which would drop fields they do
not declare (``docs/architecture.md``).
"""

from __future__ import annotations

import codecs
import enum
import json
import math
from collections.abc import Callable
from typing import Any

import msgspec

from numi_mw.core import errors
from numi_mw.core.errors import ApiError

encoder = msgspec.json.Encoder()
decoder = msgspec.json.Decoder()


encode = encoder.encode
"""Encode builtins to compact JSON bytes (UTF-8, non-ASCII kept as is); the encoder's own method, no wrapper
(it runs once per rewritten SSE event)."""


def request_decode_error(exc: msgspec.DecodeError | RecursionError, body: bytes) -> ApiError:
    """The 400 ``invalid_json`` error for a request ``body`` msgspec could not decode (``exc`` says why).

    When the standard library reads the body (``decode_fallback``), the error names what msgspec refused instead
    of its own words ("Input data was truncated" for a lone surrogate): requests must be strict JSON.
    """
    if isinstance(exc, RecursionError):
        return errors.too_deep()
    if not body.strip(b" \t\r\n"):  # JSON's whitespace only: msgspec would say "Input data was truncated"
        return errors.empty_body()
    if decode_fallback(body) is not UNDECODABLE:
        return errors.not_strict_json()
    return errors.invalid_json(str(exc))


def check_utf8(body: bytes) -> None:
    """Check that ``body`` is UTF-8, for a path that skipped strings without decoding them.

    Raises:
        ApiError: 400 ``invalid_json`` naming the offset of the first invalid byte.
    """
    if not is_utf8(body):  # an ASCII body is told apart in is_utf8, where the size decides how
        try:
            body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise errors.not_utf8(exc.start) from None


UTF8_CHUNK_BYTES = 64 * 1024
"""``is_utf8`` decodes this many bytes (64 KiB) at a time. Measured: a few times faster than decoding a large
mostly-ASCII body at once, and what it holds stays small whatever the body's size."""

_utf8_decode = codecs.utf_8_decode


def is_utf8(data: bytes) -> bool:
    """Whether ``data`` is valid UTF-8, nothing kept: a small body at once, a larger one a chunk at a time
    (``utf8_stretches``)."""
    if len(data) <= UTF8_CHUNK_BYTES:
        if data.isascii():
            return True
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return False
        return True
    return utf8_stretches(data)


def utf8_stretches(data: bytes, visit: Callable[[int, int], None] | None = None) -> bool:
    """Whether ``data`` is valid UTF-8, decoded a chunk at a time (``UTF8_CHUNK_BYTES``) and nothing kept.

    Each chunk is decoded straight from a view of ``data`` (no copy); a sequence a chunk boundary cuts is left
    to the next chunk, which starts where the decoder stopped. A large body is not first tested for ASCII:
    that scan reads the whole body again when its first non-ASCII byte comes late, and the decode of an ASCII
    chunk costs little more than the test (callgrind, the harness's 8 MB body).

    Args:
        data: the bytes to check.
        visit: called with the start and end offsets of each stretch of ``data`` once it is found valid, in
            order and together covering ``data`` up to the first invalid stretch: another scan of the same bytes
            reads each stretch while it is still in the CPU's cache, instead of reading the whole body from
            memory once more (``spliced.decode``).
    """
    view = memoryview(data)
    start, size = 0, len(data)
    try:
        while start < size:
            stop = start + UTF8_CHUNK_BYTES
            done = _utf8_decode(view[start:stop], "strict", stop >= size)[1]
            if visit is not None:
                visit(start, start + done)
            start += done
    except UnicodeDecodeError:
        return False
    return True


def decode_lenient(data: bytes) -> Any:
    """Decode JSON ``data`` to builtins for the response side, or ``UNDECODABLE`` (the original bytes then pass
    through): msgspec first, then ``decode_fallback``; a byte order mark before the JSON text is ignored (RFC 8259
    section 8.1 lets a parser ignore one; some servers send it)."""
    try:
        return decoder.decode(data)
    except (msgspec.DecodeError, RecursionError):
        pass
    if data.startswith(codecs.BOM_UTF8):  # one, as RFC 8259 allows: a second is no JSON
        data = data[len(codecs.BOM_UTF8) :]
        try:
            return decoder.decode(data)
        except (msgspec.DecodeError, RecursionError):
            pass
    return decode_fallback(data)


def decode_fallback(data: bytes) -> Any:
    """What the standard library's ``json`` reads of ``data`` that msgspec refused, or ``UNDECODABLE``.

    Two things real servers send: a lone UTF-16 surrogate escape (``"\\ud83d"``), from servers written in
    JavaScript that split an emoji between two chunks; and the ``NaN``, ``Infinity`` and ``-Infinity`` literals
    that Python's ``json`` writes by default (vLLM's logprobs hold ``-Infinity``). Encode the result with
    ``encode_fallback``, which writes both back as they came. A number no float holds (``1e400``) stays refused:
    written back it would become ``Infinity``, which is not JSON.
    """
    if data.find(b"\\u") < 0 and data.find(b"NaN") < 0 and data.find(b"Infinity") < 0:
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


def fallback(data: bytes) -> tuple[Any, Callable[[Any], bytes]]:
    """``(decode_fallback(data), encode_fallback)``: for data msgspec refused, the value the standard library reads
    (or ``UNDECODABLE``) and the encoder that writes it back as it came."""
    return decode_fallback(data), encode_fallback


def decode_with_encoder(data: bytes) -> tuple[Any, Callable[[Any], bytes]]:
    """Decode response bytes for a rewrite: ``(value, encode)``, where ``encode`` writes the rewritten value back
    the way it came (msgspec's compact UTF-8, or ``encode_fallback`` for what only the standard library reads).
    ``value`` is ``UNDECODABLE`` for bytes that are not decodable JSON."""
    try:
        return decoder.decode(data), encoder.encode
    except (msgspec.DecodeError, RecursionError):
        return fallback(data)


def encode_lenient(value: Any) -> bytes:
    """``encode``, or ``encode_fallback`` for a value msgspec cannot write (one holding a lone surrogate)."""
    try:
        return encoder.encode(value)
    except UnicodeEncodeError:
        return encode_fallback(value)


class _Undecodable(enum.Enum):
    UNDECODABLE = "UNDECODABLE"


UNDECODABLE: Any = _Undecodable.UNDECODABLE
"""What ``decode_lenient`` and ``decode_fallback`` return for bytes that are not decodable JSON (compare with
``is``; typed ``Any`` because it stands beside any decoded JSON value)."""


def decode_object(body: bytes) -> dict[str, Any]:
    """Decode a JSON request body that must be an object to builtins.

    Raises:
        ApiError: 400 ``invalid_json`` when ``body`` is not JSON; 400 ``invalid_request`` when it is not an
            object (``docs/errors.md``).
    """
    try:
        data = decoder.decode(body)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise request_decode_error(exc, body) from None
    if not isinstance(data, dict):
        raise errors.not_an_object()
    return data
