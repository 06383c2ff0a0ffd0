"""The request side of the core: one pipeline, bytes in, bytes out.

``prepare_request`` is the one entry point every shell calls for a chat completions request body:

1. decode (or, for a small body with nothing to normalize on a fixed route, ``probe`` and pass it as it came);
2. fold the reasoning controls (``controls.fold_controls``);
3. route: a fixed route, or one chosen through a catalog (``routing.route_request``);
4. the pipeline for that route (``prepare_for_route``): controls in the provider's form, Z.AI's ``thinking``,
   spec 000's message preparation filter, spec 004's reasoning / reasoning_content table, the detail size
   limits;
5. the wire API (``routing.check_wire_api``), then encode (the original bytes when nothing changed).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import msgspec

from numi_mw.core import codec
from numi_mw.core.catalog import Catalog
from numi_mw.core.controls import NO_CONTROLS, ReasoningControls, add_zai_thinking, encode_controls, fold_controls
from numi_mw.core.details import MAX_SIGNATURE_BYTES, check_detail_limits
from numi_mw.core.errors import payload_too_large
from numi_mw.core.history import normalize_messages, prepare_messages
from numi_mw.core.providers import ProviderRules
from numi_mw.core.routing import Route, check_wire_api, fixed_route, route_request

DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
"""Default request body limit in bytes (64 MiB); larger bodies get 413 ``payload_too_large``."""

MIN_DETAIL_LIMIT = MAX_SIGNATURE_BYTES
"""A body no larger than the smallest detail limit (bytes) cannot hold a field over its limit: a JSON string's
UTF-8 size never exceeds its encoded length, so the detail walk is skipped."""

PROBE_MAX_BYTES = 64 * 1024
"""Bodies up to this size (bytes) are probed first (``probe``); larger ones are decoded straight away.
Measured: for a 2 KiB body the probe costs a third of a full decode plus the walk; for bodies with thousands
of tiny messages it costs more than decoding, and such bodies are large."""


class _MessageProbe(msgspec.Struct, gc=False):
    """The fields of a message the history rules read; all else is skipped without being built."""

    reasoning: msgspec.Raw = msgspec.Raw()
    reasoning_content: msgspec.Raw = msgspec.Raw()
    reasoning_details: msgspec.Raw = msgspec.Raw()


class _BodyProbe(msgspec.Struct, gc=False):
    """The fields of a request body the request rules read (``fold_controls``, the history rules)."""

    reasoning: msgspec.Raw = msgspec.Raw()
    reasoning_effort: msgspec.Raw = msgspec.Raw()
    include_reasoning: msgspec.Raw = msgspec.Raw()
    stream: Any = None
    messages: list[_MessageProbe] = []


_probe_decoder = msgspec.json.Decoder(_BodyProbe)


class Probe(enum.Enum):
    """What ``probe`` decided about a body."""

    REWRITE = "rewrite"
    """The rules may change something, or the shape is unusual: decode it."""
    PLAIN = "plain"
    """Nothing to normalize; the body does not ask for a stream."""
    PLAIN_STREAM = "plain-stream"
    """Nothing to normalize; the body has ``"stream": true``."""


def _may_hold_metadata(body: bytes) -> bool:
    """Whether ``body`` may hold a key starting with ``_`` (internal metadata, spec 000's filter removes it):
    a ``"_`` in the bytes, or the escape a key could spell ``_`` with."""
    return body.find(b'"_') >= 0 or body.find(b"\\u005") >= 0


def probe(body: bytes, route: Route) -> Probe:
    """Decide without building the body whether the rules of ``route`` leave it as it is.

    One msgspec pass that skips every field the rules do not read (so the body is also checked to be JSON and
    UTF-8). Assistant history with ``reasoning_details`` passes only where the route keeps every detail
    (preserving ``openrouter``, ``ppq`` and ``generic`` routes); a possible ``_`` key never does.

    Returns:
        ``Probe.REWRITE`` when the rules may change something (a reasoning control, a message with
        ``reasoning`` or ``reasoning_content``, details the route drops, internal metadata) or the shape is
        unusual (not an object, ``messages`` not an array of objects); else ``Probe.PLAIN`` or
        ``Probe.PLAIN_STREAM`` by ``"stream": true``.

    Raises:
        ApiError: 400 ``invalid_json`` when ``body`` is not JSON or not UTF-8.
    """
    try:
        found = _probe_decoder.decode(body)
    except msgspec.ValidationError:
        return Probe.REWRITE
    except (msgspec.DecodeError, RecursionError) as exc:
        raise codec.request_decode_error(exc, body) from None
    if found.reasoning or found.reasoning_effort or found.include_reasoning:
        return Probe.REWRITE
    keeps_details = route.replay == "details" and route.preserve and route.reasoning
    for message in found.messages:
        if message.reasoning or message.reasoning_content or (message.reasoning_details and not keeps_details):
            return Probe.REWRITE
    if _may_hold_metadata(body):
        return Probe.REWRITE
    codec.check_utf8(body)  # msgspec does not validate the strings it skips
    return Probe.PLAIN_STREAM if found.stream is True else Probe.PLAIN


class PreparedRequest(msgspec.Struct, frozen=True, gc=False):
    """A chat completions request ready for the upstream.

    Attributes:
        body: the bytes to send upstream: the original bytes when nothing changed (``changed`` is False).
        changed: whether ``body`` differs from the client's bytes.
        controls: the effective reasoning controls (the response side reads ``exclude`` from them).
        stream: the request asked for a stream (``"stream": true``).
        route: the route the request takes.
    """

    body: bytes
    changed: bool
    controls: ReasoningControls
    stream: bool
    route: Route


def prepare_request(
    body: bytes,
    target: ProviderRules | Route | Catalog,
    *,
    headers: Mapping[str, str] | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> PreparedRequest:
    """Prepare a chat completions request body for its upstream (the steps are this module's docstring).

    Everything the rules do not name is semantically unchanged (unknown fields, numbers, key order); a body with
    nothing to normalize is returned as the original bytes, decided for small bodies on a fixed route without
    building them (``probe``).

    Args:
        body: the client's request body (UTF-8 JSON bytes).
        target: where it goes: a provider's rules (a fixed route with preservation on), a ``Route`` (from
            ``routing.fixed_route``), or a ``Catalog`` to route through.
        headers: request headers with lower-case names (a catalog reads ``x-session-id``).
        max_body_bytes: the body limit in bytes.

    Raises:
        ApiError: 413 ``payload_too_large`` over ``max_body_bytes``; 400 ``invalid_json`` when ``body`` is not
            JSON; 400 ``invalid_request`` (with the field path as ``param``) for a body of the wrong shape or a
            reasoning detail over its size limit (spec 004 "Reasoning detail": text 4 MiB, signature 1 MiB,
            data 8 MiB); through a catalog, the routing errors of ``routing.route_request``; 400
            ``unsupported_capability`` for a route whose wire API numi_mw cannot translate to.
    """
    if len(body) > max_body_bytes:
        raise payload_too_large(max_body_bytes, len(body))
    route = fixed_route(target) if isinstance(target, ProviderRules) else target
    if (
        isinstance(route, Route)
        and len(body) <= PROBE_MAX_BYTES
        and route.wire_api == "openai-chat"
        and route.rules.controls_form != "zai-thinking"  # zai always gets thinking
    ):
        plain = probe(body, route)
        if plain is not Probe.REWRITE:
            return PreparedRequest(body, False, NO_CONTROLS, plain is Probe.PLAIN_STREAM, route)
    data = codec.decode_object(body)
    controls, changed = fold_controls(data)
    if isinstance(route, Catalog):
        route, routed = route_request(data, controls, route, headers or {})
        if routed:
            changed = True
            controls, _ = fold_controls(data)
    if prepare_for_route(data, controls, route, len(body)):
        changed = True
    check_wire_api(route)
    stream = data.get("stream") is True
    return PreparedRequest(codec.encode(data) if changed else body, changed, controls, stream, route)


def prepare_for_route(data: dict[str, Any], controls: ReasoningControls, route: Route, body_size: int) -> bool:
    """The request pipeline after routing, on a decoded body of ``body_size`` bytes, in place.

    Writes the controls in the provider's form (``controls.encode_controls``), or gives a Z.AI request with no
    controls its ``thinking`` (spec 000 "Provider-Specific Handling"); runs spec 000's message preparation
    filter for the route (``history.prepare_messages``) and spec 004's reasoning / reasoning_content table
    (``history.normalize_messages``); checks the reasoning detail size limits.

    Returns:
        Whether ``data`` changed.

    Raises:
        ApiError: 400 ``invalid_request`` for ``messages`` of the wrong shape, a detail over its size limit, or
            an effort with no thinking budget on the ``anthropic-thinking`` form.
    """
    rules = route.rules
    changed = False
    if controls.present:
        if encode_controls(data, controls, rules):
            changed = True
    elif route.reasoning and add_zai_thinking(data, rules):
        changed = True
    if "messages" in data:
        messages = data["messages"]
        filtered = prepare_messages(messages, route.replay, reasoning=route.reasoning, preserve=route.preserve)
        if any(new is not old for new, old in zip(filtered, messages, strict=True)):
            data["messages"] = filtered
            changed = True
        if normalize_messages(filtered, rules.reasoning_field):
            changed = True
        if body_size > MIN_DETAIL_LIMIT:
            check_detail_limits(filtered)
    return changed


def is_chat_completions(method: str, path: str) -> bool:
    """Whether a request is one numi_mw normalizes: ``POST`` to any path ending in ``/chat/completions``."""
    return method == "POST" and path.rstrip("/").endswith("/chat/completions")
