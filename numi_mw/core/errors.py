"""Errors as data: ``ApiError`` and the OpenAI-style error body (DESIGN.md "Errors, one table")."""

from __future__ import annotations

from typing import Any

import msgspec

_encoder = msgspec.json.Encoder()


class ApiError(Exception):
    """A request numi_mw refuses, rendered by every shell as the OpenAI-style error body.

    Args:
        status: HTTP status (400, 413, 502, 503, 504).
        code: ``error.code``, e.g. ``invalid_json``, ``invalid_request``, ``payload_too_large``.
        message: one sentence saying what was wrong and what to do.
        param: the field path at fault (``messages[3].reasoning_details[0].text``), or ``None``.
    """

    def __init__(self, status: int, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.param = param

    @property
    def type(self) -> str:
        """``invalid_request_error`` for 4xx statuses, ``api_error`` for 5xx."""
        return "invalid_request_error" if self.status < 500 else "api_error"

    def body(self) -> dict[str, Any]:
        """The error body: ``{"error": {"message", "type", "code", "param"}}``."""
        return {"error": {"message": self.message, "type": self.type, "code": self.code, "param": self.param}}

    def to_bytes(self) -> bytes:
        """The error body as JSON bytes (UTF-8)."""
        return _encoder.encode(self.body())

    def __repr__(self) -> str:
        return f"ApiError({self.status}, {self.code!r}, {self.message!r}, param={self.param!r})"


def invalid_request(message: str, param: str | None) -> ApiError:
    """A 400 ``invalid_request`` error on ``param``."""
    return ApiError(400, "invalid_request", message, param)


def payload_too_large(limit: int, size: int | None = None) -> ApiError:
    """A 413 ``payload_too_large`` error for a body over ``limit`` bytes (``size`` bytes, when known)."""
    measured = f"is {size} bytes, " if size is not None else "is "
    return ApiError(
        413, "payload_too_large", f"The request body {measured}over the limit of {limit} bytes; send less history."
    )
