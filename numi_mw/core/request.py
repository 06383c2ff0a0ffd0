"""The request side of the core: bytes in, bytes out (DESIGN.md "request: decode → controls → history").

``prepare_request`` is the one entry point every shell calls for a chat completions request body.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from numi_mw.core import codec
from numi_mw.core.controls import NO_CONTROLS, ReasoningControls, encode_controls, fold_controls
from numi_mw.core.details import check_detail_limits
from numi_mw.core.errors import ApiError
from numi_mw.core.history import normalize_messages
from numi_mw.core.providers import ProviderRules

DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
"""Default request body limit in bytes (64 MiB); larger bodies get 413 ``payload_too_large``."""

_NEEDLES = (b"reasoning", b"\\u")
"""The byte prefilter: a body holding none of these has nothing to normalize (every field the rules read
contains ``reasoning``; ``\\u`` catches a key spelled with JSON escapes)."""


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """A chat completions request ready for the upstream.

    Attributes:
        body: the bytes to send upstream: the original bytes when nothing changed (``changed`` is False).
        changed: whether ``body`` differs from the client's bytes.
        controls: the effective reasoning controls (the response side reads ``exclude`` from them).
        stream: the request asked for a stream (``"stream": true``); ``None`` when not decoded.
    """

    body: bytes
    changed: bool
    controls: ReasoningControls
    stream: bool | None = None


def needs_decoding(body: bytes) -> bool:
    """The byte prefilter: ``False`` when ``body`` certainly has nothing to normalize."""
    return any(needle in body for needle in _NEEDLES)


def prepare_request(
    body: bytes, rules: ProviderRules, *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
) -> PreparedRequest:
    """Normalize a chat completions request body for ``rules``'s provider.

    Folds the reasoning controls (``controls.fold_controls``), writes them in the provider's form
    (``controls.encode_controls``) and applies the reasoning / reasoning_content table to the assistant history
    (``history.normalize_messages``). Everything else is semantically unchanged; a body with nothing to
    normalize is returned as the original bytes, decided by a byte prefilter without decoding (such a body is
    only checked to be one JSON object, without building its values).

    Args:
        body: the client's request body (UTF-8 JSON bytes).
        rules: the target provider's rules.
        max_body_bytes: the body limit in bytes.

    Raises:
        ApiError: 413 ``payload_too_large`` over ``max_body_bytes``; 400 ``invalid_json`` when ``body`` is not
            JSON; 400 ``invalid_request`` (with the field path as ``param``) for a body of the wrong shape or a
            reasoning detail over its size limit (spec 004 "Reasoning detail": text 4 MiB, signature 1 MiB,
            data 8 MiB).
    """
    if len(body) > max_body_bytes:
        raise ApiError(
            413,
            "payload_too_large",
            f"The request body is {len(body)} bytes, over the limit of {max_body_bytes} bytes; send less history.",
        )
    if not needs_decoding(body):
        codec.check_object(body)
        return PreparedRequest(body, False, NO_CONTROLS)
    data = codec.decode_object(body)
    controls, changed = normalize_body(data, rules)
    stream = data.get("stream") is True
    if not changed:
        return PreparedRequest(body, False, controls, stream)
    return PreparedRequest(codec.encode(data), True, controls, stream)


def normalize_body(data: dict[str, Any], rules: ProviderRules) -> tuple[ReasoningControls, bool]:
    """Normalize a decoded request body in place (see ``prepare_request``).

    Returns:
        ``(controls, changed)``: the effective reasoning controls and whether ``data`` changed.
    """
    controls, changed = fold_controls(data)
    if controls.present and encode_controls(data, controls, rules):
        changed = True
    if "messages" in data:
        if normalize_messages(data["messages"], rules.reasoning_field):
            changed = True
        check_detail_limits(data["messages"])
    return controls, changed


def is_chat_completions(method: str, path: str) -> bool:
    """Whether a request is one numi_mw normalizes: ``POST`` to any path ending in ``/chat/completions``."""
    return method == "POST" and path.rstrip("/").endswith("/chat/completions")
