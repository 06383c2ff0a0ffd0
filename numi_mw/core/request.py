"""The request side of the core: bytes in, bytes out (DESIGN.md "request: decode → controls → history").

``prepare_request`` is the one entry point every shell calls for a chat completions request body.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from numi_mw.core import codec
from numi_mw.core.catalog import Catalog, Provider
from numi_mw.core.controls import NO_CONTROLS, ReasoningControls, add_zai_thinking, encode_controls, fold_controls
from numi_mw.core.details import MAX_SIGNATURE_BYTES, check_detail_limits
from numi_mw.core.errors import ApiError, payload_too_large
from numi_mw.core.history import Route, normalize_messages, prepare_messages
from numi_mw.core.providers import PROVIDERS, ProviderRules
from numi_mw.core.routing import apply_reasoning_mode, choose_endpoint, eligible_endpoints, session_id

DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
"""Default request body limit in bytes (64 MiB); larger bodies get 413 ``payload_too_large``."""

MIN_DETAIL_LIMIT = MAX_SIGNATURE_BYTES
"""A body no larger than the smallest detail limit (bytes) cannot hold a field over its limit: a JSON string's
UTF-8 size never exceeds its encoded length, so the detail walk is skipped."""

PROBE_MAX_BYTES = 64 * 1024
"""Bodies up to this size (bytes) are probed first (``probe_plain``); larger ones are decoded straight away.
Measured: for a 2 KiB body the probe costs a third of a full decode plus the walk; for bodies with thousands
of tiny messages it costs more than decoding, and such bodies are large."""


class _MessageProbe(msgspec.Struct, gc=False):
    """The fields of a message the history rules read; all else is skipped without being built."""

    reasoning: msgspec.Raw = msgspec.Raw()
    reasoning_content: msgspec.Raw = msgspec.Raw()


class _BodyProbe(msgspec.Struct, gc=False):
    """The fields of a request body the request rules read (``fold_controls``, ``normalize_messages``)."""

    reasoning: msgspec.Raw = msgspec.Raw()
    reasoning_effort: msgspec.Raw = msgspec.Raw()
    include_reasoning: msgspec.Raw = msgspec.Raw()
    stream: Any = None
    messages: list[_MessageProbe] = []


_probe_decoder = msgspec.json.Decoder(_BodyProbe)


def probe_plain(body: bytes) -> bool | None:
    """Decide without building the body whether it has nothing to normalize.

    One msgspec pass that skips every field the rules do not read (so the body is also checked to be JSON).

    Returns:
        ``None`` when the rules may change something (a reasoning control, a message with ``reasoning`` or
        ``reasoning_content``) or the shape is unusual (not an object, ``messages`` not an array of objects):
        decode it. Otherwise the value of ``"stream": true`` (``True``, or ``False`` for anything else).

    Raises:
        ApiError: 400 ``invalid_json`` when ``body`` is not JSON or not UTF-8.
    """
    try:
        probe = _probe_decoder.decode(body)
    except msgspec.ValidationError:
        return None
    except msgspec.DecodeError as exc:
        raise codec.not_json(exc, body) from None
    except RecursionError:
        raise codec.too_deep() from None
    if probe.reasoning or probe.reasoning_effort or probe.include_reasoning:
        return None
    for message in probe.messages:
        if message.reasoning or message.reasoning_content:
            return None
    codec.check_utf8(body)  # msgspec does not validate the strings it skips
    return probe.stream is True


class PreparedRequest(msgspec.Struct, frozen=True, gc=False):
    """A chat completions request ready for the upstream.

    Attributes:
        body: the bytes to send upstream: the original bytes when nothing changed (``changed`` is False).
        changed: whether ``body`` differs from the client's bytes.
        controls: the effective reasoning controls (the response side reads ``exclude`` from them).
        stream: the request asked for a stream (``"stream": true``).
    """

    body: bytes
    changed: bool
    controls: ReasoningControls
    stream: bool = False


def prepare_request(
    body: bytes, rules: ProviderRules, *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
) -> PreparedRequest:
    """Normalize a chat completions request body for ``rules``'s provider.

    Folds the reasoning controls (``controls.fold_controls``), writes them in the provider's form
    (``controls.encode_controls``) and applies the reasoning / reasoning_content table to the assistant history
    (``history.normalize_messages``). Everything else is semantically unchanged; a body with nothing to
    normalize is returned as the original bytes, decided for small bodies without building them
    (``probe_plain``).

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
        raise payload_too_large(max_body_bytes, len(body))
    if len(body) <= PROBE_MAX_BYTES and rules.controls_form != "zai-thinking":  # zai always gets thinking
        plain = probe_plain(body)
        if plain is not None:
            return PreparedRequest(body, False, NO_CONTROLS, plain)
    data = codec.decode_object(body)
    controls, changed = normalize_body(data, rules, len(body))
    stream = data.get("stream") is True
    if not changed:
        return PreparedRequest(body, False, controls, stream)
    return PreparedRequest(codec.encode(data), True, controls, stream)


def normalize_body(data: dict[str, Any], rules: ProviderRules, body_size: int) -> tuple[ReasoningControls, bool]:
    """Normalize a decoded request body of ``body_size`` bytes in place (see ``prepare_request``).

    Returns:
        ``(controls, changed)``: the effective reasoning controls and whether ``data`` changed.
    """
    controls, changed = fold_controls(data)
    if controls.present:
        if encode_controls(data, controls, rules):
            changed = True
    elif add_zai_thinking(data, rules):
        changed = True
    if "messages" in data:
        if normalize_messages(data["messages"], rules.reasoning_field):
            changed = True
        if body_size > MIN_DETAIL_LIMIT:
            check_detail_limits(data["messages"])
    return controls, changed


def is_chat_completions(method: str, path: str) -> bool:
    """Whether a request is one numi_mw normalizes: ``POST`` to any path ending in ``/chat/completions``."""
    return method == "POST" and path.rstrip("/").endswith("/chat/completions")


@dataclass(frozen=True, slots=True)
class RouteDecision:
    """Where a catalog-routed request goes (issue "A model catalog decides routes").

    Attributes:
        provider: the catalog provider that serves the request (its ``base_url``, ``wire_api`` and key).
        rules: the provider rules applied to the request and response.
        model: the catalog model id, or ``None`` when the model is not in the catalog (then the catalog's first
            provider serves it, with no capability facts and no history filter).
        endpoint: the chosen endpoint's tag, or ``None`` with no catalog model.
        eligible: the tags of every eligible endpoint, in catalog order.
    """

    provider: Provider
    rules: ProviderRules
    model: str | None = None
    endpoint: str | None = None
    eligible: tuple[str, ...] = ()

    def describe(self) -> dict[str, Any]:
        """The decision as JSON-ready data (``numi-mw request --catalog`` prints it)."""
        return {
            "model": self.model,
            "endpoint": self.endpoint,
            "eligible": list(self.eligible),
            "provider": self.provider.name,
            "base_url": self.provider.base_url,
            "wire_api": self.provider.wire_api,
            "rules": self.rules.name,
        }


_ROUTING_FIELDS = ("provider", "session_id")
"""Request fields that steer routing; forwarded to OpenRouter and PPQ (which read them), removed for others."""


def rules_for(provider: Provider) -> ProviderRules:
    """The rules of a catalog provider: its ``rules`` key, else its name when known, else ``generic``."""
    name = provider.rules or provider.name
    return PROVIDERS.get(name, PROVIDERS["generic"])


def prepare_routed_request(
    body: bytes,
    catalog: Catalog,
    *,
    headers: Mapping[str, str] | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> tuple[PreparedRequest, RouteDecision]:
    """Route a chat completions request through ``catalog`` and prepare it for the chosen endpoint.

    The order: fold the reasoning controls; find the model; choose the eligible endpoints (spec 004 "Routing
    requirements", strict with ``provider.require_parameters: true``); pick one, sticky per session id
    (``x-session-id`` header or ``session_id`` field); apply the model's reasoning mode (spec 000 "Reasoning
    Modes") for that endpoint; filter the history for the route (spec 000 "The Message Preparation Filter");
    then the provider's controls form and reasoning / reasoning_content table, as ``prepare_request`` does.
    The endpoint's ``model`` name replaces the catalog id when it has one; ``provider`` and ``session_id`` are
    removed for providers other than OpenRouter and PPQ.

    Routing happens on the client's effort before any normalization, so an effort no endpoint accepts is
    refused (spec 004; handed case PB-20) rather than moved to a nearby level.

    Args:
        body: the client's request body (UTF-8 JSON bytes).
        catalog: the model catalog.
        headers: request headers with lower-case names (for ``x-session-id``).
        max_body_bytes: the body limit in bytes.

    Raises:
        ApiError: as ``prepare_request``; 400 ``invalid_request`` on ``model`` when it is not a string; 400
            ``invalid_request`` on ``reasoning.effort`` when no endpoint accepts the effort; 503
            ``provider_unavailable`` when strict matching leaves no endpoint; 400 ``unsupported_capability`` on
            ``model`` when the chosen provider's wire API is not ``openai-chat`` (no adapter yet).
    """
    if len(body) > max_body_bytes:
        raise payload_too_large(max_body_bytes, len(body))
    data = codec.decode_object(body)
    model_id = data.get("model")
    if not isinstance(model_id, str):
        raise ApiError(400, "invalid_request", "model must be a string naming a catalog model.", "model")
    controls, changed = fold_controls(data)
    model = catalog.model(model_id)
    if model is None:
        provider = catalog.providers[0]
        decision = RouteDecision(provider, rules_for(provider))
        route: Route | None = None
    else:
        routing = data.get("provider")
        strict = isinstance(routing, dict) and routing.get("require_parameters") is True
        eligible = eligible_endpoints(model, controls, require_parameters=strict)
        endpoint = choose_endpoint(eligible, session_id(headers or {}, data))
        if apply_reasoning_mode(data, controls, model, endpoint):
            changed = True
            controls, _ = fold_controls(data)
        provider = catalog.provider(endpoint.provider) or catalog.providers[0]
        rules = rules_for(provider)
        decision = RouteDecision(provider, rules, model.id, endpoint.tag, tuple(e.tag for e in eligible))
        route = Route(
            "anthropic_compat"
            if provider.wire_api == "anthropic-messages" and rules.name != "anthropic"
            else rules.name,
            reasoning=model.reasoning_mode != "none",
            preserve=model.preserve_reasoning,
        )
        if endpoint.model is not None and endpoint.model != model_id:
            data["model"] = endpoint.model
            changed = True
    if decision.provider.wire_api != "openai-chat":
        raise ApiError(
            400,
            "unsupported_capability",
            f'Provider "{decision.provider.name}" speaks {decision.provider.wire_api}, which numi_mw cannot '
            "translate to yet; route this model to an openai-chat provider.",
            "model",
        )
    rules = decision.rules
    if rules.name not in ("openrouter", "ppq"):
        for key in _ROUTING_FIELDS:
            if key in data:
                del data[key]
                changed = True
    if controls.present:
        if encode_controls(data, controls, rules):
            changed = True
    elif (route is None or route.reasoning) and add_zai_thinking(data, rules):
        changed = True
    if "messages" in data:
        if route is not None:
            messages = data["messages"]
            filtered = prepare_messages(messages, route)
            if any(new is not old for new, old in zip(filtered, messages, strict=True)):
                data["messages"] = filtered
                changed = True
        if normalize_messages(data["messages"], rules.reasoning_field):
            changed = True
        if len(body) > MIN_DETAIL_LIMIT:
            check_detail_limits(data["messages"])
    stream = data.get("stream") is True
    prepared = PreparedRequest(codec.encode(data) if changed else body, changed, controls, stream)
    return prepared, decision
