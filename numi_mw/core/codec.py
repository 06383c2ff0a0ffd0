"""Shared msgspec JSON encoder and decoder (reused instances; DESIGN.md decision 2: dicts for rewriting)."""

from __future__ import annotations

from typing import Any

import msgspec

from numi_mw.core.errors import ApiError

encoder = msgspec.json.Encoder()
decoder = msgspec.json.Decoder()


def encode(value: Any) -> bytes:
    """Encode builtins to compact JSON bytes (UTF-8, non-ASCII kept as is)."""
    return encoder.encode(value)


def decode_body(body: bytes) -> Any:
    """Decode a JSON request body to builtins.

    Raises:
        ApiError: 400 ``invalid_json`` when ``body`` is not JSON (DESIGN.md error table).
    """
    try:
        return decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise ApiError(
            400, "invalid_json", f"The request body is not valid JSON ({exc}); send a JSON object.", None
        ) from None
