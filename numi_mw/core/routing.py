"""Routing: which endpoints of a model may serve a request, which one does, and the model's reasoning mode.

Spec 004 "Routing requirements" (every rule), spec 000 "Reasoning Modes", and session stickiness (issue 4).

Default routing (``require_parameters`` false) forwards reasoning controls as hints and narrows on one fact only,
the effort:

=====================================  ==========================================================================
You send                               The endpoint is eligible when
=====================================  ==========================================================================
an effort other than ``none``          it lists that effort in ``supported_efforts``, or publishes no
                                       ``supported_efforts`` (no reasoning object, or one without the list)
``effort: "none"``                     it lists ``none``, publishes no ``supported_efforts``, or has
                                       ``mandatory: false``
anything else                          always (missing facts never exclude)
=====================================  ==========================================================================

When no endpoint accepts the effort: 400 ``invalid_request`` on ``reasoning.effort``, listing the accepted
efforts. ``enabled: false`` is not an effort and does not narrow default routing; an effort sent beside it is
not routed on either (reasoning is off whatever the effort).

Strict routing (``provider.require_parameters: true``): every applicable row of spec 004's table must hold, and
a fact the endpoint does not publish counts as not declared:

=========================================================  ======================================================
You send                                                   The endpoint must declare
=========================================================  ======================================================
any reasoning control that does not disable reasoning      ``reasoning`` in ``supported_parameters``
(``controls.present and not controls.off``: ``exclude``
or ``include_reasoning`` alone count)
an effort other than ``none``                              that level in ``supported_efforts``, or no reasoning
                                                           object at all (the effort then goes as a hint); a
                                                           reasoning object without ``supported_efforts``
                                                           accepts no effort
``effort: "none"`` or ``enabled: false``                   a reasoning object with ``none`` in
                                                           ``supported_efforts`` or ``mandatory: false``
``reasoning.max_tokens``                                   a reasoning object with ``supports_max_tokens: true``
=========================================================  ======================================================

When nothing qualifies: 400 ``invalid_request`` on ``reasoning.effort`` when *the effort alone rules out every
endpoint*, read here as: the request has an effort and every endpoint fails the effort row (the named-effort row,
or for ``effort: "none"`` the none row); then no change but the effort can succeed, and the 400 names the
accepted efforts, as in default routing. Otherwise 503 ``provider_unavailable`` (``param`` null), naming what
each endpoint lacks. ``enabled: false`` without ``effort: "none"`` is not an effort: its failures give 503.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from numi_mw.core.catalog import Endpoint, Model
from numi_mw.core.controls import ReasoningControls
from numi_mw.core.errors import ApiError, invalid_request
from numi_mw.core.history import Route, prepare_messages

EFFORT_SCALE: tuple[str, ...] = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
"""The ordered effort scale used to normalize an effort (spec 004 "reasoning": the common values)."""

_CONTROL_FIELDS = ("reasoning", "reasoning_effort", "include_reasoning")


def _quote(value: object) -> str:
    return f'"{value}"' if isinstance(value, str) else repr(value)


def _named_effort(controls: ReasoningControls) -> bool:
    return controls.effort is not None and controls.effort != "none"


def _effort_failure(endpoint: Endpoint, effort: object, strict: bool) -> str | None:
    """Why ``endpoint`` does not accept ``effort`` (a phrase after "needs"), or ``None`` when it does."""
    reasoning = endpoint.reasoning
    levels = reasoning.supported_efforts if reasoning is not None else None
    if effort == "none":
        if reasoning is not None and (reasoning.mandatory is False or (levels is not None and "none" in levels)):
            return None
        if not strict and levels is None:
            return None
        return '"none" in supported_efforts or mandatory: false'
    if reasoning is None:
        return None
    if levels is None:
        return None if not strict else f"effort {_quote(effort)} in supported_efforts"
    return None if effort in levels else f"effort {_quote(effort)} in supported_efforts"


def _strict_failures(endpoint: Endpoint, controls: ReasoningControls, max_tokens_requested: bool) -> list[str]:
    """The strict rows other than the effort row that ``endpoint`` fails, as phrases after "needs"."""
    failures: list[str] = []
    reasoning = endpoint.reasoning
    if controls.present and not controls.off and "reasoning" not in (endpoint.supported_parameters or ()):
        failures.append('"reasoning" in supported_parameters')
    if controls.enabled is False and controls.effort != "none":
        levels = reasoning.supported_efforts if reasoning is not None else None
        if reasoning is None or not (reasoning.mandatory is False or (levels is not None and "none" in levels)):
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
) -> list[Endpoint]:
    """The endpoints of ``model`` that may serve a request with ``controls``, in catalog order.

    Implements spec 004 "Routing requirements" as tabled in this module's docstring (default and strict).

    Args:
        model: the catalog model the request names.
        controls: the request's folded reasoning controls (``fold_controls``, after ``apply_reasoning_mode``).
        require_parameters: the request's ``provider.require_parameters`` (strict matching).
        max_tokens_requested: the request asks for a reasoning token budget by a route the caller has mapped
            other than ``reasoning.max_tokens`` (which ``controls.max_tokens`` already covers); the
            ``supports_max_tokens`` row then applies too. The top-level ``max_tokens`` output limit is not a
            reasoning control and never narrows routing.

    Returns:
        A non-empty list of endpoints.

    Raises:
        ApiError: 400 ``invalid_request`` on ``reasoning.effort`` when no endpoint accepts the effort (with
            strict matching: when every endpoint fails the effort row); 503 ``provider_unavailable`` with
            ``param`` null when strict matching leaves no endpoint for another reason, or the model has no
            endpoint.
    """
    if not model.endpoints:
        raise ApiError(
            503,
            "provider_unavailable",
            f'Model "{model.id}" has no endpoint; add one to the catalog or choose another model.',
        )
    # enabled: false turns reasoning off whatever effort came with it (no effort goes upstream then): the
    # effort rows do not apply, and the strict row for enabled: false does
    effort = None if controls.enabled is False and controls.effort != "none" else controls.effort
    eligible: list[Endpoint] = []
    effort_failures = 0
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
        if needs:
            reasons.append(f'endpoint "{endpoint.tag}" needs ' + " and ".join(needs))
        else:
            eligible.append(endpoint)
    if eligible:
        return eligible
    if effort is not None and effort_failures == len(model.endpoints):
        raise _effort_error(model, effort)
    raise ApiError(
        503,
        "provider_unavailable",
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
      the model's (``model_efforts``), which is how a caller normalizes *before* routing. Routing rejects an
      effort no endpoint lists, so normalizing after routing never changes an effort routing accepted: call
      this before ``eligible_endpoints`` (endpoint ``None``) to normalize, after it to keep spec 004's 400
      (handed case PB-20). No published levels: unchanged.
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
    items: list[tuple[str, Any]] = []
    placed = False
    for key, value in reasoning.items():
        if key in ("effort", "enabled"):
            if not placed:
                items.append(("enabled", not controls.off))
                placed = True
            continue
        items.append((key, value))
    body["reasoning"] = dict(items)
    return True


def _strip_reasoning(body: dict[str, Any]) -> bool:
    changed = False
    for key in _CONTROL_FIELDS:
        if key in body:
            del body[key]
            changed = True
    messages = body.get("messages")
    if isinstance(messages, list):
        prepared = prepare_messages(messages, Route("generic", reasoning=False))
        if any(new is not old for new, old in zip(prepared, messages, strict=True)):
            body["messages"] = prepared
            changed = True
    return changed


def _weight(session_id: str, tag: str) -> int:
    digest = hashlib.blake2b(f"{session_id}\0{tag}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def choose_endpoint(endpoints: Sequence[Endpoint], session_id: str | None) -> Endpoint:
    """The endpoint that serves the request, among the eligible ones (issue 4 "Sessions").

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
    """The request's session id (issue 4 "Sessions"): the ``x-session-id`` header, else a ``session_id``
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
