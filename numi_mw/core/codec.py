"""Shared msgspec JSON encoder and decoder (reused instances; DESIGN.md decision 2: dicts for rewriting)."""

from __future__ import annotations

from typing import Any

import msgspec

from numi_mw.core.errors import ApiError

encoder = msgspec.json.Encoder()
decoder = msgspec.json.Decoder()
_object_checker = msgspec.json.Decoder(dict[str, msgspec.Raw])


encode = encoder.encode
"""Encode builtins to compact JSON bytes (UTF-8, non-ASCII kept as is); the encoder's own method, no wrapper
(it runs once per rewritten SSE event)."""


def _not_json(exc: msgspec.DecodeError) -> ApiError:
    return ApiError(400, "invalid_json", f"The request body is not valid JSON ({exc}); send a JSON object.", None)


def _too_deep() -> ApiError:
    return ApiError(400, "invalid_json", "The request body is nested too deeply to decode; flatten it.", None)


def decode_lenient(data: bytes) -> Any:
    """Decode JSON ``data`` to builtins, or ``UNDECODABLE`` when it is not JSON or nested too deeply (the
    response side then passes the original bytes through)."""
    try:
        return decoder.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return UNDECODABLE


UNDECODABLE: Any = object()
"""What ``decode_lenient`` returns for bytes that are not decodable JSON."""


def _not_object() -> ApiError:
    return ApiError(400, "invalid_request", "The request body must be a JSON object.", None)


def check_object(body: bytes) -> None:
    """Check that ``body`` is one JSON object without building its values (nested values are skipped).

    Raises:
        ApiError: 400 ``invalid_json`` when ``body`` is not JSON; 400 ``invalid_request`` when it is JSON but
            not an object.
    """
    try:
        _object_checker.decode(body)
    except msgspec.ValidationError:
        raise _not_object() from None
    except msgspec.DecodeError as exc:
        raise _not_json(exc) from None
    except RecursionError:
        raise _too_deep() from None


def decode_object(body: bytes) -> dict[str, Any]:
    """Decode a JSON request body that must be an object to builtins.

    Raises:
        ApiError: 400 ``invalid_json`` when ``body`` is not JSON; 400 ``invalid_request`` when it is not an
            object (DESIGN.md error table).
    """
    try:
        data = decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise _not_json(exc) from None
    except RecursionError:
        raise _too_deep() from None
    if not isinstance(data, dict):
        raise _not_object()
    return data
