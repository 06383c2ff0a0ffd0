"""The request side of the core: one pipeline, bytes in, bytes out.

``prepare_request`` is the one entry point every shell calls for a chat completions request body:

1. decode (or, for a small body with nothing to normalize on a fixed route, ``probe`` and pass it as it came;
   when only its top-level controls change, decode its top level alone, ``prepare_controls_only``);
2. fold the reasoning controls (``controls.fold_controls``);
3. route: a fixed route, or one chosen through a catalog (``routing.route_request``);
4. the pipeline for that route (``prepare_for_route``): controls in the provider's form, Z.AI's ``thinking``,
   spec 000's message preparation filter, spec 004's reasoning / reasoning_content table, the detail size
   limits; before it, the opaque state a replay store kept is put back on the turns that lack it
   (``replay.restore``, when the shell passes ``restored``);
5. for a route whose wire API is not chat completions, the translation by its adapter (``core.adapters``);
   then encode (the original bytes when nothing changed).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import msgspec

from numi_mw.core import codec, spliced
from numi_mw.core.adapters import WIRE_APIS, RequestFacts, Translation
from numi_mw.core.budget import output_limit, positive_tokens
from numi_mw.core.catalog import Catalog
from numi_mw.core.controls import (
    NO_CONTROLS,
    ReasoningControls,
    add_zai_thinking,
    encode_controls,
    fold_controls,
    wanted_budget,
)
from numi_mw.core.details import MAX_SIGNATURE_BYTES, check_detail_limits
from numi_mw.core.errors import invalid_request, payload_too_large, too_deep
from numi_mw.core.history import normalize_messages, prepare_messages
from numi_mw.core.providers import ProviderRules
from numi_mw.core.replay import restore
from numi_mw.core.routing import Route, fixed_route, route_request

DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
"""Default request body limit in bytes (64 MiB); larger bodies get 413 ``payload_too_large``."""

MIN_DETAIL_LIMIT = MAX_SIGNATURE_BYTES
"""A body no larger than the smallest detail limit (bytes) cannot hold a field over its limit: a JSON string's
UTF-8 size never exceeds its encoded length, so the detail walk is skipped."""

PROBE_MAX_BYTES = 64 * 1024
"""Bodies up to this size (bytes) are probed first (``probe``) and, when it finds changes, decoded at the top level
alone when only the controls change (``prepare_controls_only``), else whole; larger ones on a fixed chat
completions route are decoded only as far as the rules read (``prepare_spliced``).
Measured: for a 2 KiB body the probe costs a third of a full decode plus the walk, and the spliced path costs
more than the full one (98.7 k instructions against 90.9 k on the harness's 2 KB rewrite); for bodies with
thousands of tiny messages the probe costs more than decoding, and such bodies are large; on the 200 KB
history and the 8 MB body the spliced path costs less than the full one, and half the memory on the 8 MB body
(``docs/performance.md``, "How a request is decoded")."""


class _MessageProbe(msgspec.Struct, gc=False, forbid_unknown_fields=True):
    """A message of the keys chat completions defines, skipped without being built but for the fields the history
    rules read. Any other key (internal metadata such as ``_stored_at`` among them) fails the probe: such a
    message takes the full path, where spec 000's filter looks at every key."""

    reasoning: msgspec.Raw = msgspec.Raw()
    reasoning_content: msgspec.Raw = msgspec.Raw()
    reasoning_details: msgspec.Raw = msgspec.Raw()
    role: msgspec.Raw = msgspec.Raw()
    content: msgspec.Raw = msgspec.Raw()
    name: msgspec.Raw = msgspec.Raw()
    tool_calls: msgspec.Raw = msgspec.Raw()
    tool_call_id: msgspec.Raw = msgspec.Raw()
    function_call: msgspec.Raw = msgspec.Raw()
    refusal: msgspec.Raw = msgspec.Raw()
    audio: msgspec.Raw = msgspec.Raw()
    annotations: msgspec.Raw = msgspec.Raw()


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
    """The shape is unusual (not an object, ``messages`` not an array of objects, a message key chat completions
    does not define): decode it, and look at every key."""
    CHANGES = "changes"
    """The rules may change a message: decode it. Every message key is one chat completions defines, so none is
    internal metadata."""
    CONTROLS = "controls"
    """Only the top-level reasoning controls may change it (``reasoning``, ``reasoning_effort``,
    ``include_reasoning``): no message has a reasoning field the route's history rules change (``reasoning_details``
    pass where the route keeps them), and every message key is one chat completions defines. The body is UTF-8
    (checked)."""
    PLAIN = "plain"
    """Nothing to normalize; the body does not ask for a stream."""
    PLAIN_STREAM = "plain-stream"
    """Nothing to normalize; the body has ``"stream": true``."""


_REWRITE, _CHANGES, _CONTROLS = Probe.REWRITE, Probe.CHANGES, Probe.CONTROLS
_PLAIN, _PLAIN_STREAM = Probe.PLAIN, Probe.PLAIN_STREAM


def probe(body: bytes, route: Route) -> Probe:
    """Decide without building the body whether the rules of ``route`` leave it as it is.

    One msgspec pass that skips every field the rules do not read (so the body is also checked to be JSON and
    UTF-8). Assistant history with ``reasoning_details`` passes only where the route keeps every detail
    (preserving ``openrouter``, ``ppq`` and ``generic`` routes); a message with a key chat completions does not
    define (internal metadata among them) never does.

    Returns:
        ``Probe.REWRITE`` when the shape is unusual (not an object, ``messages`` not an array of objects, a
        message key of its own); ``Probe.CHANGES`` when the rules may change a message (one with ``reasoning``
        or ``reasoning_content``, details the route drops); ``Probe.CONTROLS`` when only a reasoning control at
        the top level may change it; else ``Probe.PLAIN`` or ``Probe.PLAIN_STREAM`` by ``"stream": true``.

    Raises:
        ApiError: 400 ``invalid_json`` when ``body`` is not JSON or not UTF-8.
    """
    try:
        found = _probe_decoder.decode(body)
    except msgspec.ValidationError:
        return _REWRITE
    except (msgspec.DecodeError, RecursionError) as exc:
        raise codec.request_decode_error(exc, body) from None
    keeps_details = route.keeps_details
    for message in found.messages:
        if message.reasoning or message.reasoning_content or (message.reasoning_details and not keeps_details):
            return _CHANGES
    codec.check_utf8(body)  # msgspec does not validate the strings it skips
    if found.reasoning or found.reasoning_effort or found.include_reasoning:
        return _CONTROLS
    return _PLAIN_STREAM if found.stream is True else _PLAIN


class PreparedRequest(msgspec.Struct, frozen=True, gc=False):
    """A chat completions request ready for the upstream.

    Attributes:
        body: the bytes to send upstream: the original bytes when nothing changed (``changed`` is False).
        changed: whether ``body`` differs from the client's bytes.
        controls: the effective reasoning controls (the response side reads ``exclude`` from them).
        stream: the request asked for a stream (``"stream": true``).
        route: the route the request takes.
        translation: for a route whose wire API is not chat completions, what the adapter made of the request
            (what the answer's translation needs); ``None`` on chat completions routes.
        adjustments: what numi_mw changed or left out so that the provider accepts the request, each ``name`` or
            ``name=value`` (``effort-dropped``, ``unsigned-reasoning-dropped=2``; ``docs/wire-apis.md``,
            ``docs/providers.md``); the shells send them in the ``x-numi-mw-adjustments`` response header.
        restored: how many assistant turns got their opaque state back from a replay store (``replay.restore``);
            the shells send it in the ``x-numi-mw-restored`` response header when it is not 0.
    """

    body: bytes
    changed: bool
    controls: ReasoningControls
    stream: bool
    route: Route
    translation: Translation | None = None
    adjustments: list[str] = []
    restored: int = 0


def prepare_request(
    body: bytes,
    target: ProviderRules | Route | Catalog,
    *,
    headers: Mapping[str, str] | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    restored: Mapping[str, bytes] | None = None,
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
        restored: opaque state a replay store holds for assistant turns of the body, by turn key
            (``replay.missing_in_body`` gives the keys); put back on the turns that lack it before the route's
            filter runs (``replay.restore``), so that spec 000's table still decides what the provider receives.

    Raises:
        ApiError: 413 ``payload_too_large`` over ``max_body_bytes``; 400 ``invalid_json`` when ``body`` is not
            JSON; 400 ``invalid_request`` (with the field path as ``param``) for a body of the wrong shape or a
            reasoning detail over its size limit (spec 004 "Reasoning detail": text 4 MiB, signature 1 MiB,
            data 8 MiB); through a catalog, the routing errors of ``routing.route_request``; on a translated wire
            API, what its adapter refuses (``core.adapters``).
    """
    if len(body) > max_body_bytes:
        raise payload_too_large(max_body_bytes, len(body))
    route = fixed_route(target) if isinstance(target, ProviderRules) else target
    found = _REWRITE
    if isinstance(route, Route) and not restored:
        if route.probes and len(body) <= PROBE_MAX_BYTES:
            found = probe(body, route)
            if found is _PLAIN or found is _PLAIN_STREAM:
                return PreparedRequest(body, False, NO_CONTROLS, found is _PLAIN_STREAM, route)
            if found is _CONTROLS:
                prepared = prepare_controls_only(body, route)
                if prepared is not None:
                    return prepared
        if len(body) > PROBE_MAX_BYTES and route.wire_api not in WIRE_APIS:
            prepared = prepare_spliced(body, route)
            if prepared is not None:
                return prepared
    data = codec.decode_object(body)
    controls, changed = fold_controls(data)
    if isinstance(route, Catalog):
        route, routed = route_request(data, controls, route, headers or {})
        if routed:
            changed = True
            controls, _ = fold_controls(data)
    adapter = WIRE_APIS.get(route.wire_api)
    own_thinking = None  # the client's own ``thinking`` object: it goes upstream as it is (``controls``)
    if adapter is not None:
        check_output_limits(data)
        own_thinking = data.get("thinking")
        if adapter.default_max_tokens is not None and output_limit(data) is None:
            data["max_tokens"] = default_max_tokens(adapter.default_max_tokens, controls, own_thinking)
    count = restore(data.get("messages"), restored) if restored else 0
    if count:
        changed = True
    notes: list[str] = []
    metadata = found is not _CHANGES and found is not _CONTROLS  # else the probe read every message key
    if prepare_for_route(data, controls, route, len(body), metadata=metadata, notes=notes):
        changed = True
    stream = data.get("stream") is True
    if adapter is None:
        encoded, changed = _written(codec.encode(data), body) if changed else (body, False)
        return PreparedRequest(encoded, changed, controls, stream, route, None, notes, count)
    # an adaptive model's generated budget becomes adaptive thinking; the client's own thinking object stays
    translation = adapter.translate(data, controls, RequestFacts(adaptive=route.adaptive and own_thinking is None))
    notes += translation.adjustments
    try:
        encoded = codec.encode(translation.body)
    except RecursionError:  # a value the translation moved deeper than the client's body had it
        raise too_deep() from None
    return PreparedRequest(encoded, True, controls, stream, route, translation, notes, count)


def prepare_controls_only(body: bytes, route: Route) -> PreparedRequest | None:
    """``prepare_request`` for a body ``probe`` answered ``Probe.CONTROLS`` on a fixed chat completions route,
    decoded at the top level only (``spliced.decode_top``): the controls rules run on it and every message goes
    upstream as its original bytes, since none is one the history rules change. ``None`` when the body is not
    one ``spliced.decode_top`` takes; the full decode then decides.

    Inside the items of top-level arrays nothing is decoded, so a value there that the full decode refuses (a
    number no float holds, ``1e400``) goes upstream as sent, as it does in a body that passes as it came.

    Raises:
        ApiError: what ``prepare_request`` raises for a control of the wrong type (``controls.fold_controls``). A
            top-level value msgspec refuses (a number no float holds) makes ``decode_top`` answer ``None``, and
            the full decode refuses it as before.
    """
    data = spliced.decode_top(body)
    return None if data is None else _prepare_partly(body, data, route, messages=False)


def prepare_spliced(body: bytes, route: Route) -> PreparedRequest | None:
    """``prepare_request`` for a fixed chat completions route, on a body decoded only as far as the rules read it
    (``spliced``): what they do not touch goes upstream as its original bytes. ``None`` when the body is not one
    ``spliced.decode`` takes, or when a value the rules read cannot be decoded (a number no float holds inside a
    ``tool_calls``, ``reasoning_details`` or ``thinking_blocks`` the route's filter reads): the full decode then
    decides, and refuses it as it refuses any such number.

    Raises:
        ApiError: what ``prepare_request`` raises for the same body on the same route.
    """
    decoded = spliced.decode(body, walk=route.keeps_details)
    if decoded is None:
        return None
    data, body_shows = decoded
    try:
        return _prepare_partly(body, data, route, messages=True, body_shows=body_shows)
    except msgspec.DecodeError:  # a value the rules read that the first pass only skipped: a number no float holds
        return None


def _prepare_partly(
    body: bytes, data: dict[str, Any], route: Route, *, messages: bool, body_shows: bool | None = None
) -> PreparedRequest:
    """The pipeline on a body ``spliced`` decoded partly: the controls, then (``messages``) the history rules
    through ``spliced.prepare_messages`` (``body_shows``: ``spliced.decode``'s answer for the detail limits);
    encoded with every ``Raw`` as its bytes, or ``body`` when unchanged."""
    controls, changed = fold_controls(data)
    notes: list[str] = []
    if prepare_controls(data, controls, route, notes):
        changed = True
    if messages and "messages" in data and spliced.prepare_messages(data["messages"], route, body, body_shows):
        changed = True
    stream = data.get("stream") is True
    encoded, changed = _written(spliced.encode(data), body) if changed else (body, False)
    return PreparedRequest(encoded, changed, controls, stream, route, None, notes)


def _written(encoded: bytes, body: bytes) -> tuple[bytes, bool]:
    """The body to send once the rules changed something, ``encoded``, and whether it differs from the client's
    ``body``: steps that give back the same bytes (an effort folded into ``reasoning`` and written back in the
    provider's own form, ``reasoning_effort``) leave ``body`` itself, unchanged (``PreparedRequest.changed``)."""
    return (body, False) if encoded == body else (encoded, True)


DEFAULT_MAX_TOKENS_CAP = 32_000
"""The most ``default_max_tokens`` sends when a generated budget is added: the smallest output limit of
Anthropic's thinking models (Claude Opus 4 and 4.1, in Anthropic's models overview)."""


def default_max_tokens(answer: int, controls: ReasoningControls, thinking: Any = None) -> int:
    """The ``max_tokens`` numi_mw sends to a wire API that requires one when the client sent none: ``answer``
    tokens for the answer above the thinking budget the request asks for (spec 004 "Output limits and billing":
    keep the budget below ``max_tokens`` so the answer has room). The request's own Anthropic ``thinking`` object
    (``{"type": "enabled", "budget_tokens": N}``), which goes upstream as it is whatever the controls say, has its
    budget added whole, as has an explicit ``reasoning.max_tokens`` (both are preserved for upstream validation);
    a budget generated from an effort is added up to a total of ``DEFAULT_MAX_TOKENS_CAP``, where the generated
    budget is then capped one below it."""
    if isinstance(thinking, dict) and thinking.get("type") == "enabled":
        own = positive_tokens(thinking.get("budget_tokens"))  # (``8000.0`` too)
        if own is not None:
            return answer + own
    budget = wanted_budget(controls)
    if controls.max_tokens is not None:
        return answer + budget
    return max(answer, min(answer + budget, DEFAULT_MAX_TOKENS_CAP))


def check_output_limits(data: dict[str, Any]) -> None:
    """Refuse an output limit a translated wire API cannot carry: ``max_tokens`` and ``max_completion_tokens``,
    when present and not ``null``, must be positive whole numbers of tokens (``1500`` or ``1500.0``).

    Raises:
        ApiError: 400 ``invalid_request`` naming the field.
    """
    for key in ("max_tokens", "max_completion_tokens"):
        value = data.get(key)
        if value is not None and positive_tokens(value) is None:
            raise invalid_request(f"{key} must be a positive whole number of tokens.", key)


def prepare_for_route(
    data: dict[str, Any],
    controls: ReasoningControls,
    route: Route,
    body_size: int,
    *,
    metadata: bool = True,
    notes: list[str] | None = None,
) -> bool:
    """The request pipeline after routing, on a decoded body of ``body_size`` bytes, in place.

    Writes the controls in the provider's form (``controls.encode_controls``), or gives a Z.AI request with no
    controls its ``thinking`` (spec 000 "Provider-Specific Handling"); runs spec 000's message preparation
    filter for the route (``history.prepare_messages``) and spec 004's reasoning / reasoning_content table
    (``history.normalize_messages``); checks the reasoning detail size limits.

    ``metadata`` is ``False`` when the probe has shown that no message key is internal metadata
    (``history.prepare_messages``); ``notes`` collects what the controls form left out on purpose
    (``controls.encode_controls``).

    Returns:
        Whether ``data`` changed.

    Raises:
        ApiError: 400 ``invalid_request`` for ``messages`` of the wrong shape or a detail over its size limit.
    """
    rules = route.rules
    changed = prepare_controls(data, controls, route, notes)
    if "messages" in data:
        messages = data["messages"]
        if metadata or not route.keeps_details:  # else the filter keeps every message as it is
            filtered = prepare_messages(
                messages, route.replay, reasoning=route.reasoning, preserve=route.preserve, metadata=metadata
            )
            if filtered is not messages:
                data["messages"] = messages = filtered
                changed = True
        if normalize_messages(messages, rules.reasoning_field):
            changed = True
        if body_size > MIN_DETAIL_LIMIT:
            check_detail_limits(messages)
    return changed


def prepare_controls(
    data: dict[str, Any], controls: ReasoningControls, route: Route, notes: list[str] | None = None
) -> bool:
    """The controls in the route's form (``controls.encode_controls``), or a Z.AI request with no controls given
    its ``thinking`` (spec 000 "Provider-Specific Handling"), in place; returns whether ``data`` changed."""
    if controls.present:
        form = route.controls_form
        include = route.rules.send_include_reasoning
        return encode_controls(data, controls, form, include_reasoning=include, notes=notes)
    return route.reasoning and add_zai_thinking(data, route.controls_form)


def is_chat_completions(method: str, path: str) -> bool:
    """Whether a request is one numi_mw normalizes: ``POST`` to any path ending in ``/chat/completions``."""
    return method == "POST" and path.rstrip("/").endswith("/chat/completions")
