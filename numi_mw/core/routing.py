"""Routing: the one step that yields a request's route, before the request pipeline runs for it.

For a single upstream (``fixed_route``) the route is fixed by configuration. Through a catalog
(``route_request``) it is chosen per request: the model's eligible endpoints (spec 004 "Routing
requirements", default and strict), one of them by session (rendezvous hashing on the session id), and the
model's reasoning mode (spec 000 "Reasoning Modes"). The rules, tabled, are in ``docs/catalog.md``.

A ``Route`` carries what the rest of the pipeline needs: the provider rules, the wire API, where to send the
request, and the facts spec 000's message preparation filter reads (reasoning support, preservation).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from numi_mw.core.adapters import WIRE_APIS
from numi_mw.core.catalog import Catalog, Endpoint, Model, Pricing, Provider, ReasoningCapabilities
from numi_mw.core.controls import ReasoningControls, fold_controls
from numi_mw.core.errors import ApiError, invalid_request, provider_unavailable
from numi_mw.core.fields import CONTROL_FIELDS, drop, splice
from numi_mw.core.history import prepare_messages
from numi_mw.core.providers import PROVIDERS, WIRE_API_NAMES, ControlsForm, ProviderRules, Replay, WireApi
from numi_mw.core.think import ThinkStart


@dataclass(frozen=True, slots=True)
class Route:
    """Where a request goes, and what the request pipeline and the response side need to know of it.

    Attributes:
        rules: the provider rules applied to the request and to its response.
        wire_api: the upstream's wire API (``openai-chat``, ``openai-responses``, ``anthropic-messages``).
        provider: the configured upstream the request goes to (base URL, key variable), or ``None`` where the
            caller sends the request itself (``ReasoningMiddleware``, ``prepare_request`` with bare rules).
        reasoning: the model supports reasoning (a catalog model's ``reasoning_mode`` is not ``none``).
        preserve: preservation is on (a catalog model's ``preserve_reasoning``; on by default for a single
            upstream).
        model: the catalog model id, or ``None`` for a single upstream or a model the catalog does not list.
        endpoint: the chosen endpoint's tag, or ``None`` without a catalog model.
        eligible: the tags of every eligible endpoint, in catalog order.
        adaptive: the catalog marks the model's thinking as adaptive (``Model.adaptive_thinking``).
        think_start: where the model's answer starts for the think-tag splitter (``Model.think_start``), or
            ``None`` (the shell's default; ``response.think_tags_for``).
        pricing: the chosen endpoint's prices (``Endpoint.pricing``, USD per token), or ``None``; the response
            side adds ``cost`` to usage from them (``usage.usage_rules``).
    """

    rules: ProviderRules
    wire_api: WireApi = "openai-chat"
    provider: Provider | None = None
    reasoning: bool = True
    preserve: bool = True
    model: str | None = None
    endpoint: str | None = None
    eligible: tuple[str, ...] = ()
    adaptive: bool = False
    think_start: ThinkStart | None = None
    pricing: Pricing | None = None
    replay: Replay = field(init=False)
    """The route's row of spec 000's message preparation filter: its wire API's, else its provider's."""
    controls_form: ControlsForm = field(init=False)
    """The form of the reasoning controls: its wire API's, else its provider's."""
    keeps_details: bool = field(init=False)
    """The filter keeps every assistant message's ``reasoning_details`` (a preserving ``details`` row)."""
    probes: bool = field(init=False)
    """A small body may be passed as it came when a probe finds nothing to change (``request.probe``): not on a
    wire API numi_mw translates to, nor for the ``zai-thinking`` form, which adds ``thinking`` to every request."""

    def __post_init__(self) -> None:
        adapter = WIRE_APIS.get(self.wire_api)
        replay = self.rules.replay if adapter is None else adapter.replay
        object.__setattr__(self, "replay", replay)
        form = self.rules.controls_form if adapter is None else adapter.controls_form
        object.__setattr__(self, "controls_form", form)
        object.__setattr__(self, "keeps_details", replay == "details" and self.preserve and self.reasoning)
        probes = adapter is None and self.rules.controls_form != "zai-thinking"
        object.__setattr__(self, "probes", probes)

    def describe(self) -> dict[str, Any]:
        """The route as JSON-ready data (``numi-mw request --catalog`` prints it)."""
        return {
            "model": self.model,
            "endpoint": self.endpoint,
            "eligible": list(self.eligible),
            "provider": self.provider.name if self.provider is not None else self.rules.name,
            "base_url": self.provider.base_url if self.provider is not None else None,
            "wire_api": self.wire_api,
            "rules": self.rules.name,
        }


def rules_for(provider: Provider) -> ProviderRules:
    """The rules of a configured upstream: its ``rules`` key, else its name when known, else ``generic``."""
    return PROVIDERS.get(provider.rules or provider.name, PROVIDERS["generic"])


def fixed_route(provider: Provider | ProviderRules, *, preserve: bool = True, wire_api: WireApi | None = None) -> Route:
    """The route of every request to one upstream (the sidecar with ``--upstream``, the middleware): its rules
    (``rules_for``), its wire API (the provider's, unless ``wire_api`` names one), preservation as configured
    (spec 000's filter then applies with it).

    Raises:
        ValueError: ``provider`` is not a ``Provider`` or ``ProviderRules``, or ``wire_api`` is not ``None`` or a
            wire API name.
    """
    if not isinstance(provider, Provider | ProviderRules):
        raise ValueError(f"provider must be a Provider or ProviderRules (numi_mw.provider_rules), not {provider!r}")
    if wire_api is not None and wire_api not in WIRE_API_NAMES:
        raise ValueError(f"wire_api must be one of {', '.join(WIRE_API_NAMES)}, not {wire_api!r}")
    if isinstance(provider, ProviderRules):
        return Route(provider, wire_api or "openai-chat", preserve=preserve)
    return Route(rules_for(provider), wire_api or provider.wire_api, provider, preserve=preserve)


ROUTING_FIELDS = ("provider", "session_id")
"""Request fields that steer routing; forwarded to providers whose rules read them (``routing_fields``)."""


def route_request(
    data: dict[str, Any], controls: ReasoningControls, catalog: Catalog, headers: Mapping[str, str]
) -> tuple[Route, bool]:
    """Choose the route of a decoded request through ``catalog``, in place.

    The order: find the model (a model the catalog does not list goes to the first provider, with that
    provider's rules and preservation on); choose the eligible endpoints (spec 004 "Routing requirements",
    strict with ``provider.require_parameters: true``); pick one, sticky per session id (``x-session-id`` header
    or ``session_id`` field); apply the model's reasoning mode for that endpoint (spec 000 "Reasoning Modes").
    The endpoint's ``model`` name replaces the catalog id when it has one; ``provider`` and ``session_id`` are
    removed for providers whose rules do not read them.

    An effort no endpoint accepts is refused (spec 004 "Routing requirements"), unless the model's
    ``unsupported_effort`` is ``nearest``: then it is first moved to the nearest level some endpoint accepts
    (spec 000 "Reasoning Modes", ``nearest_accepted_effort``) and routed as that level.

    Args:
        data: the decoded request body, controls folded (``controls.fold_controls``).
        controls: its reasoning controls.
        catalog: the model catalog.
        headers: request headers with lower-case names (for ``x-session-id``).

    Returns:
        ``(route, changed)``: the route, and whether ``data`` changed (fold the controls again when it did).

    Raises:
        ApiError: 400 ``invalid_request`` on ``model`` when it is not a string; 400 ``invalid_request`` on
            ``provider.max_price`` (or its ``prompt`` or ``completion``) when it is not a price (``max_price``);
            400 ``invalid_request`` on ``reasoning.effort`` when no endpoint accepts the effort; 503
            ``provider_unavailable`` when strict matching or ``provider.max_price`` leaves no endpoint.
    """
    model_id = data.get("model")
    if not isinstance(model_id, str):
        raise invalid_request("model must be a string naming a catalog model.", "model")
    model = catalog.model(model_id)
    changed = False
    routing = data.get("provider")
    ceilings = max_price(routing)
    if model is None:
        route = fixed_route(catalog.providers[0])
    else:
        strict = isinstance(routing, dict) and routing.get("require_parameters") is True
        if nearest_accepted_effort(data, controls, model, require_parameters=strict):
            changed = True
            controls, _ = fold_controls(data)
        eligible = eligible_endpoints(model, controls, require_parameters=strict, max_price=ceilings)
        endpoint = choose_endpoint(eligible, session_id(headers, data))
        if apply_reasoning_mode(data, controls, model, endpoint):
            changed = True
        provider = catalog.provider(endpoint.provider) or catalog.providers[0]
        route = Route(
            rules_for(provider),
            provider.wire_api,
            provider,
            reasoning=model.reasoning_mode != "none",
            preserve=model.preserve_reasoning,
            model=model.id,
            endpoint=endpoint.tag,
            eligible=tuple(e.tag for e in eligible),
            adaptive=model.adaptive_thinking,
            think_start=model.think_start,
            pricing=endpoint.pricing,
        )
        if endpoint.model is not None and endpoint.model != model_id:
            data["model"] = endpoint.model
            changed = True
    if not route.rules.routing_fields and drop(data, ROUTING_FIELDS):
        changed = True
    return route, changed


EFFORT_SCALE: tuple[str, ...] = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
"""The ordered effort scale used to normalize an effort (spec 004 "reasoning": the common values)."""


def _quote(value: object) -> str:
    return f'"{value}"' if isinstance(value, str) else repr(value)


def _declares_off(reasoning: ReasoningCapabilities | None) -> bool:
    """Whether a published reasoning object says reasoning can be turned off: ``none`` in ``supported_efforts``
    or ``mandatory: false`` (spec 004 "Routing requirements")."""
    if reasoning is None:
        return False
    levels = reasoning.supported_efforts
    return reasoning.mandatory is False or (levels is not None and "none" in levels)


def _effort_failure(endpoint: Endpoint, effort: object, strict: bool) -> str | None:
    """Why ``endpoint`` does not accept ``effort`` (a phrase after "needs"), or ``None`` when it does."""
    reasoning = endpoint.reasoning
    levels = reasoning.supported_efforts if reasoning is not None else None
    if effort == "none":
        if _declares_off(reasoning):
            return None
        if not strict and levels is None:
            return None
        return '"none" in supported_efforts or mandatory: false'
    if reasoning is None:
        return None
    if levels is None:
        return None if not strict else f"effort {_quote(effort)} in supported_efforts"
    return None if effort in levels else f"effort {_quote(effort)} in supported_efforts"


@dataclass(frozen=True, slots=True)
class MaxPrice:
    """A request's ``provider.max_price`` ceilings, in USD per million tokens (OpenRouter's provider routing
    unit); ``None`` where the request sets none.

    Attributes:
        prompt: the most a prompt token may cost, per million.
        completion: the most a completion token may cost, per million; it also caps an endpoint's separate
            reasoning price (spec 004 "Output limits and billing": "a provider.max_price.completion ceiling
            also applies to it").
    """

    prompt: Decimal | None = None
    completion: Decimal | None = None


PER_MILLION = Decimal(1_000_000)


def _ceiling(value: object, param: str) -> Decimal:
    """One ceiling of ``provider.max_price``: a non-negative finite JSON number, or such a number as a string
    (OpenRouter's SDKs send strings)."""
    number: Decimal | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = Decimal(value)
    elif isinstance(value, float) and math.isfinite(value):
        number = Decimal(repr(value))
    elif isinstance(value, str):
        try:
            number = Decimal(value.strip())
        except InvalidOperation:
            number = None
    if number is None or not number.is_finite() or number < 0:
        raise invalid_request(
            f"{param} must be a non-negative number of USD per million tokens (or that number as a string), "
            f"not {_quote(value)}.",
            param,
        )
    return number


def max_price(routing: object) -> MaxPrice | None:
    """The ``provider.max_price`` ceilings of a request whose ``provider`` field is ``routing``.

    Keys other than ``prompt`` and ``completion`` (OpenRouter's ``request``, ``image``, ``audio``) are not
    catalog facts: they pass to providers that read routing fields and narrow nothing here. ``null`` values
    count as absent.

    Returns:
        The ceilings, or ``None`` when the request sets neither.

    Raises:
        ApiError: 400 ``invalid_request`` on ``provider.max_price`` when it is not an object, or on
            ``provider.max_price.prompt`` / ``.completion`` when one is not a non-negative number (or numeric
            string).
    """
    if not isinstance(routing, dict):
        return None
    value = routing.get("max_price")
    if value is None:
        return None
    if not isinstance(value, dict):
        raise invalid_request(
            'provider.max_price must be an object of USD prices per million tokens, such as {"prompt": 1, '
            f'"completion": 4}}, not {_quote(value)}.',
            "provider.max_price",
        )
    prompt, completion = value.get("prompt"), value.get("completion")
    if prompt is None and completion is None:
        return None
    return MaxPrice(
        None if prompt is None else _ceiling(prompt, "provider.max_price.prompt"),
        None if completion is None else _ceiling(completion, "provider.max_price.completion"),
    )


def _plain(number: Decimal) -> str:
    """A decimal without exponent or trailing zeros (``3``, ``0.25``)."""
    text = format(number, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def _price_failures(endpoint: Endpoint, ceilings: MaxPrice, strict: bool) -> list[str]:
    """The ``provider.max_price`` ceilings ``endpoint``'s prices break, as phrases after "needs". A price the
    catalog does not give breaks none, unless ``strict`` (spec 004 "Model capabilities": missing facts exclude
    only with strict matching); an endpoint without a separate reasoning price charges the completion price."""
    failures: list[str] = []
    pricing = endpoint.pricing or Pricing()
    checks: list[tuple[str, Decimal | None, float | None]] = [
        ("prompt", ceilings.prompt, pricing.prompt),
        ("completion", ceilings.completion, pricing.completion),
    ]
    if pricing.reasoning is not None:
        checks.append(("reasoning", ceilings.completion, pricing.reasoning))
    for label, ceiling, price in checks:
        if ceiling is None:
            continue
        if price is None:
            if strict:
                failures.append(f"a published {label} price (provider.require_parameters with provider.max_price)")
            continue
        per_million = Decimal(repr(price)) * PER_MILLION
        if per_million > ceiling:
            failures.append(
                f"a {label} price of at most {_plain(ceiling)} USD per million tokens (it has {_plain(per_million)})"
            )
    return failures


def _strict_failures(endpoint: Endpoint, controls: ReasoningControls, max_tokens_requested: bool) -> list[str]:
    """The strict rows other than the effort row that ``endpoint`` fails, as phrases after "needs"."""
    failures: list[str] = []
    reasoning = endpoint.reasoning
    if controls.present and not controls.off and "reasoning" not in (endpoint.supported_parameters or ()):
        failures.append('"reasoning" in supported_parameters')
    if controls.enabled is False and controls.effort != "none" and not _declares_off(reasoning):
        failures.append('"none" in supported_efforts or mandatory: false (for enabled: false)')
    if (controls.max_tokens is not None or max_tokens_requested) and (
        reasoning is None or reasoning.supports_max_tokens is not True
    ):
        failures.append("supports_max_tokens: true")
    return failures


def accepted_efforts(model: Model) -> list[str]:
    """The efforts some endpoint of ``model`` declares: listed ``supported_efforts`` plus ``none`` where
    ``mandatory: false``; scale order first, unfamiliar levels after in catalog order."""
    seen: list[str] = []
    for endpoint in model.endpoints:
        reasoning = endpoint.reasoning
        if reasoning is None:
            continue
        for level in reasoning.supported_efforts or ():
            if level not in seen:
                seen.append(level)
        if reasoning.mandatory is False and "none" not in seen:
            seen.append("none")
    known = [level for level in EFFORT_SCALE if level in seen]
    return known + [level for level in seen if level not in EFFORT_SCALE]


def _effort_error(model: Model, effort: object) -> ApiError:
    accepted = accepted_efforts(model)
    if accepted:
        advice = "use one of: " + ", ".join(accepted) + ", or omit it to use the model's default"
    else:
        advice = "omit it to use the model's default"
    return invalid_request(
        f'No endpoint of model "{model.id}" accepts reasoning effort {_quote(effort)}; {advice}.',
        "reasoning.effort",
    )


def eligible_endpoints(
    model: Model,
    controls: ReasoningControls,
    *,
    require_parameters: bool,
    max_tokens_requested: bool = False,
    max_price: MaxPrice | None = None,
) -> list[Endpoint]:
    """The endpoints of ``model`` that may serve a request with ``controls``, in catalog order.

    Implements spec 004 "Routing requirements", default and strict (tabled in ``docs/catalog.md``).

    Args:
        model: the catalog model the request names.
        controls: the request's folded reasoning controls (``fold_controls``, after ``apply_reasoning_mode``).
        require_parameters: the request's ``provider.require_parameters`` (strict matching).
        max_tokens_requested: the request asks for a reasoning token budget by a route the caller has mapped
            other than ``reasoning.max_tokens`` (which ``controls.max_tokens`` already covers); the
            ``supports_max_tokens`` row then applies too. The top-level ``max_tokens`` output limit is not a
            reasoning control and never narrows routing.
        max_price: the request's ``provider.max_price`` ceilings (``max_price``): an endpoint whose prompt price,
            completion price or separate reasoning price is over its ceiling is not eligible (spec 004 "Output
            limits and billing"; the completion ceiling caps the reasoning price too); with
            ``require_parameters``, neither is one that does not publish a price a ceiling applies to.

    Returns:
        A non-empty list of endpoints.

    Raises:
        ApiError: 400 ``invalid_request`` on ``reasoning.effort`` when no endpoint accepts the effort (with
            strict matching: when every endpoint fails the effort row); 503 ``provider_unavailable`` with
            ``param`` null when strict matching or ``max_price`` leaves no endpoint for another reason, or the
            model has no endpoint.
    """
    if not model.endpoints:
        raise provider_unavailable(
            f'Model "{model.id}" has no endpoint; add one to the catalog or choose another model.'
        )
    # enabled: false turns reasoning off whatever effort came with it (no effort goes upstream then): the
    # effort rows do not apply, and the strict row for enabled: false does
    effort = None if controls.enabled is False and controls.effort != "none" else controls.effort
    eligible: list[Endpoint] = []
    effort_failures = 0
    controls_failed = priced_out = False
    reasons: list[str] = []
    for endpoint in model.endpoints:
        needs: list[str] = []
        if effort is not None:
            failure = _effort_failure(endpoint, effort, require_parameters)
            if failure is not None:
                effort_failures += 1
                needs.append(failure)
        if require_parameters:
            needs.extend(_strict_failures(endpoint, controls, max_tokens_requested))
        controls_failed = controls_failed or bool(needs)
        if max_price is not None:
            price_failures = _price_failures(endpoint, max_price, require_parameters)
            priced_out = priced_out or bool(price_failures)
            needs.extend(price_failures)
        if needs:
            reasons.append(f'endpoint "{endpoint.tag}" needs ' + " and ".join(needs))
        else:
            eligible.append(endpoint)
    if eligible:
        return eligible
    if effort is not None and effort_failures == len(model.endpoints):
        raise _effort_error(model, effort)
    if priced_out and not controls_failed:
        raise provider_unavailable(
            f'No endpoint of model "{model.id}" is within provider.max_price ({"; ".join(reasons)}); '
            "raise or remove provider.max_price."
        )
    if priced_out:
        raise provider_unavailable(
            f'No endpoint of model "{model.id}" declares the requested reasoning controls within '
            f"provider.max_price ({'; '.join(reasons)}); remove those controls, set provider.require_parameters "
            "to false, or raise provider.max_price."
        )
    raise provider_unavailable(
        f'No endpoint of model "{model.id}" declares the requested reasoning controls ({"; ".join(reasons)}); '
        "remove those controls or set provider.require_parameters to false.",
    )


def normalize_effort(effort: str, levels: Sequence[str]) -> str:
    """The level of ``levels`` nearest to ``effort`` on ``EFFORT_SCALE`` (spec 000 "Reasoning Modes", ``effort``).

    Rule: an effort already in ``levels`` stays; otherwise the nearest listed level on the scale
    none < minimal < low < medium < high < xhigh < max, ties going to the lower level. ``none`` never moves
    and is never a target (a named effort asks for reasoning; turning it off is not "nearest"). An effort off
    the scale, or ``levels`` with no named level on it, leaves ``effort`` unchanged (the upstream validates it).
    """
    if effort in levels or effort == "none" or effort not in EFFORT_SCALE:
        return effort
    position = EFFORT_SCALE.index(effort)
    candidates = [EFFORT_SCALE.index(level) for level in levels if level in EFFORT_SCALE and level != "none"]
    if not candidates:
        return effort
    best = min(candidates, key=lambda index: (abs(index - position), index))
    return EFFORT_SCALE[best]


def nearest_accepted_effort(
    body: dict[str, Any], controls: ReasoningControls, model: Model, *, require_parameters: bool
) -> bool:
    """Move an effort no endpoint of ``model`` accepts to the nearest level one does, in place, for a model with
    ``unsupported_effort = "nearest"`` and ``reasoning_mode = "effort"`` (spec 000 "Reasoning Modes": "normalized
    to the model's supported levels"); every other model keeps spec 004's 400.

    The levels are those the endpoints list in ``supported_efforts``; the rule is ``normalize_effort``'s (ties
    downward; ``none`` never moves and is never a target; an effort off the scale does not move). An effort some
    endpoint accepts (with ``require_parameters``, by the strict rows) is left as it is, and so is an effort
    beside ``enabled: false`` (not routed on). Call it before ``eligible_endpoints``; fold the controls again
    when it returns ``True``.

    Returns:
        Whether ``body`` changed (``reasoning.effort`` now names the nearest level).
    """
    if model.unsupported_effort != "nearest" or model.reasoning_mode != "effort" or controls.enabled is False:
        return False
    effort = controls.effort
    reasoning = body.get("reasoning")
    if not isinstance(effort, str) or not isinstance(reasoning, dict) or reasoning.get("effort") != effort:
        return False
    if any(_effort_failure(endpoint, effort, require_parameters) is None for endpoint in model.endpoints):
        return False
    levels = [
        level
        for endpoint in model.endpoints
        if endpoint.reasoning is not None
        for level in endpoint.reasoning.supported_efforts or ()
    ]
    nearest = normalize_effort(effort, levels)
    if nearest == effort:
        return False
    body["reasoning"] = {**reasoning, "effort": nearest}
    return True


def model_efforts(model: Model) -> list[str] | None:
    """The model's supported levels for normalization: the union of its endpoints' ``supported_efforts``, or
    ``None`` when some endpoint publishes none (that endpoint takes any effort, so nothing is normalized)."""
    levels: list[str] = []
    for endpoint in model.endpoints:
        published = endpoint.reasoning.supported_efforts if endpoint.reasoning is not None else None
        if published is None:
            return None
        levels.extend(level for level in published if level not in levels)
    return levels


def apply_reasoning_mode(
    body: dict[str, Any],
    controls: ReasoningControls,
    model: Model,
    endpoint: Endpoint | None = None,
) -> bool:
    """Apply ``model.reasoning_mode`` to a canonical request body, in place (spec 000 "Reasoning Modes").

    ``body`` is the decoded request after ``fold_controls`` (shorthands folded into ``body["reasoning"]``).

    - ``effort``: a named effort the levels do not list becomes the nearest listed level
      (``normalize_effort``). With ``endpoint``, the levels are that endpoint's ``supported_efforts``; without,
      the model's (``model_efforts``). ``route_request`` calls it after routing, with the chosen endpoint:
      routing has already refused (``unsupported_effort = "refuse"``) or moved (``nearest``,
      ``nearest_accepted_effort``) an effort no endpoint accepts, so this changes only an effort routing did
      not route on (one beside ``enabled: false``). No published levels: unchanged.
    - ``enabled``: ``reasoning.effort`` (and ``reasoning.enabled``) become one ``enabled``: ``false`` when
      reasoning is off (``controls.off``), else ``true``; ``exclude``, ``max_tokens`` and unknown keys stay.
    - ``native``: unchanged; the provider receives the controls as sent.
    - ``none``: the model does not support reasoning: ``reasoning`` (and any leftover shorthand) is removed,
      and ``reasoning``, ``reasoning_content`` and ``reasoning_details`` are removed from every message.

    After a change, fold the controls again before routing. Returns whether ``body`` changed.
    """
    mode = model.reasoning_mode
    if mode == "native":
        return False
    if mode == "none":
        return _strip_reasoning(body)
    reasoning = body.get("reasoning")
    if not controls.present or not isinstance(reasoning, dict):
        return False
    if mode == "enabled":
        return _effort_to_enabled(body, reasoning, controls)
    effort = reasoning.get("effort")
    if not isinstance(effort, str):
        return False
    if endpoint is None:
        levels = model_efforts(model)
    else:
        levels = endpoint.reasoning.supported_efforts if endpoint.reasoning is not None else None
    if levels is None:
        return False
    normalized = normalize_effort(effort, levels)
    if normalized == effort:
        return False
    body["reasoning"] = {**reasoning, "effort": normalized}
    return True


def _effort_to_enabled(body: dict[str, Any], reasoning: dict[str, Any], controls: ReasoningControls) -> bool:
    if reasoning.get("effort") is None:
        return False
    reasoning = dict(reasoning)
    splice(reasoning, ("effort", "enabled"), {"enabled": not controls.off})
    body["reasoning"] = reasoning
    return True


def _strip_reasoning(body: dict[str, Any]) -> bool:
    changed = drop(body, CONTROL_FIELDS)
    messages = body.get("messages")
    if isinstance(messages, list):
        prepared = prepare_messages(messages, "none", reasoning=False)
        if prepared is not messages:
            body["messages"] = prepared
            changed = True
    return changed


def _weight(session_id: str, tag: str) -> int:
    digest = hashlib.blake2b(f"{session_id}\0{tag}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def choose_endpoint(endpoints: Sequence[Endpoint], session_id: str | None) -> Endpoint:
    """The endpoint that serves the request, among the eligible ones (sessions: ``docs/catalog.md``).

    With a session id: rendezvous (highest random weight) hashing, the weight of an endpoint being
    ``blake2b(session_id + "\\0" + tag)`` (8 bytes, big-endian); the highest weight wins, ties (practically
    impossible) to the earlier endpoint. No shared state: every replica picks the same endpoint, a session
    stays on its endpoint while that one stays eligible, and removing an endpoint moves only its own sessions.
    Without a session id: the first eligible endpoint (catalog order). Deterministic.

    Raises:
        ValueError: ``endpoints`` is empty (``eligible_endpoints`` never returns an empty list).
    """
    if not endpoints:
        raise ValueError("choose_endpoint needs at least one endpoint")
    if session_id is None:
        return endpoints[0]
    best = endpoints[0]
    best_weight = _weight(session_id, best.tag)
    for endpoint in endpoints[1:]:
        weight = _weight(session_id, endpoint.tag)
        if weight > best_weight:
            best, best_weight = endpoint, weight
    return best


def session_id(headers: Mapping[str, str], body: Mapping[str, Any]) -> str | None:
    """The request's session id: the ``x-session-id`` header, else a ``session_id``
    string in the body; ``None`` when neither is a non-empty string.

    ``headers`` is expected with lower-cased names (as ASGI gives them); other spellings are found by a
    case-insensitive scan.
    """
    value = headers.get("x-session-id")
    if value is None:
        for name, candidate in headers.items():
            if name.lower() == "x-session-id":
                value = candidate
                break
    if isinstance(value, str) and value:
        return value
    body_value = body.get("session_id")
    if isinstance(body_value, str) and body_value:
        return body_value
    return None
