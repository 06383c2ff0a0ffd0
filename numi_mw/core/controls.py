"""Reasoning request controls (spec 004 "Request controls" and "Other fields").

Two steps, both on a decoded request body (a ``dict`` numi_mw owns):

1. ``fold_controls`` folds the shorthands into one canonical ``reasoning`` object: ``reasoning_effort`` becomes
   ``reasoning.effort`` and wins over it (``null`` counts as omitted); ``include_reasoning`` (deprecated)
   becomes ``reasoning.exclude = not include_reasoning`` and wins over it. Unfamiliar effort values and
   unknown ``reasoning`` attributes stay as sent.
2. ``encode_controls`` writes that object in the form the target provider understands
   (``ProviderRules.controls_form``), so the upstream receives one form, never a shorthand and the object.
"""

from __future__ import annotations

from typing import Any

import msgspec

from numi_mw.core.budget import DEFAULT_EFFORT, EFFORT_BUDGETS, generated_budget, output_limit
from numi_mw.core.errors import invalid_request
from numi_mw.core.fields import CONTROL_FIELDS, splice
from numi_mw.core.providers import ProviderRules

_EFFORT_FORM_KEYS = frozenset(("effort", "enabled", "exclude"))


class ReasoningControls(msgspec.Struct, frozen=True, gc=False):
    """The effective reasoning controls of one request, after the shorthands are folded.

    Attributes:
        present: the request carries a reasoning control (``reasoning`` object or a shorthand with a value).
        effort: the effective effort as sent (usually a ``str``; unfamiliar values kept), ``None`` if not sent.
        enabled: ``reasoning.enabled`` as sent, ``None`` if not sent.
        exclude: reasoning is to be kept out of the response (``reasoning.exclude`` or
            ``include_reasoning: false``).
        max_tokens: ``reasoning.max_tokens`` (a token budget) as sent, ``None`` if not sent.
    """

    present: bool = False
    effort: Any = None
    enabled: bool | None = None
    exclude: bool = False
    max_tokens: Any = None

    @property
    def off(self) -> bool:
        """Reasoning is turned off: ``effort: "none"`` or ``enabled: false`` (spec 004 "reasoning")."""
        return self.effort == "none" or self.enabled is False


NO_CONTROLS = ReasoningControls()


def _check_bool(value: object, param: str) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise invalid_request(f"{param} must be true or false, not {type(value).__name__}.", param)


def fold_controls(body: dict[str, Any]) -> tuple[ReasoningControls, bool]:
    """Fold ``reasoning_effort`` and ``include_reasoning`` into ``body["reasoning"]``, in place.

    The ``reasoning`` key keeps its position; when only shorthands were sent it takes the first shorthand's
    position. ``reasoning: null`` and shorthands set to ``null`` count as omitted and are removed.

    Returns:
        ``(controls, changed)``: the effective controls and whether ``body`` was modified.

    Raises:
        ApiError: 400 ``invalid_request`` when ``reasoning`` is not an object, ``reasoning_effort`` is not a
            string, or ``include_reasoning``, ``reasoning.exclude`` or ``reasoning.enabled`` is not a boolean.
    """
    has_object = "reasoning" in body
    has_shorthand = "reasoning_effort" in body or "include_reasoning" in body
    if not (has_object or has_shorthand):
        return NO_CONTROLS, False
    raw = body.get("reasoning")
    if raw is not None and not isinstance(raw, dict):
        raise invalid_request(f"reasoning must be an object, not {type(raw).__name__}.", "reasoning")
    effort_alias = body.get("reasoning_effort")
    if effort_alias is not None and not isinstance(effort_alias, str):
        raise invalid_request(
            f"reasoning_effort must be a string or null, not {type(effort_alias).__name__}.",
            "reasoning_effort",
        )
    include = _check_bool(body.get("include_reasoning"), "include_reasoning")

    obj: dict[str, Any] | None = raw
    if effort_alias is not None or include is not None:
        obj = dict(raw) if raw is not None else {}
        if effort_alias is not None:
            obj["effort"] = effort_alias
        if include is not None:
            obj["exclude"] = not include
    changed = has_shorthand or (has_object and raw is None)
    if changed:  # the shorthands go; the object stands where the first of them stood
        splice(body, CONTROL_FIELDS, {"reasoning": obj} if obj is not None else {})
    if obj is None:
        return NO_CONTROLS, changed
    exclude = _check_bool(obj.get("exclude"), "reasoning.exclude")
    enabled = _check_bool(obj.get("enabled"), "reasoning.enabled")
    controls = ReasoningControls(
        present=True,
        effort=obj.get("effort"),
        enabled=enabled,
        exclude=bool(exclude),
        max_tokens=obj.get("max_tokens"),
    )
    return controls, changed


def encode_controls(body: dict[str, Any], controls: ReasoningControls, rules: ProviderRules) -> bool:
    """Write the folded ``reasoning`` object in ``rules.controls_form``, in place.

    - ``object``: the ``reasoning`` object as folded.
    - ``effort``: ``reasoning_effort`` (``enabled: false`` becomes ``"none"``, even beside an effort;
      ``enabled: true`` or ``{}``
      send nothing, the model's default), plus ``include_reasoning: false`` when excluded and the provider
      honours it. An object with other attributes (``max_tokens``, unknown ones) is kept as the object.
    - ``zai-thinking``: ``thinking: {"type": "disabled"}`` when off, else
      ``{"type": "enabled", "clear_thinking": false}`` (spec 000 "Provider-Specific Handling").
    - ``anthropic-thinking``: ``thinking: {"type": "enabled", "budget_tokens": N}``: an explicit
      ``reasoning.max_tokens`` is sent as is; an effort (or the default, ``medium``) becomes a generated budget
      capped below ``max_tokens`` (spec 004 "Output limits and billing"); off sends ``{"type": "disabled"}``.

    A ``thinking`` object the client sent itself is never replaced. Returns whether ``body`` changed.

    Raises:
        ApiError: 400 ``invalid_request`` on ``reasoning.effort`` for an effort that has no thinking budget
            on the ``anthropic-thinking`` form.
    """
    obj = body.get("reasoning")
    if rules.controls_form == "object" or not isinstance(obj, dict):
        return False
    if rules.controls_form == "effort":
        if not _EFFORT_FORM_KEYS.issuperset(obj):
            return False
        replacement: dict[str, Any] = {}
        if controls.enabled is False:  # "false turns it off", whatever effort came with it (spec 004)
            replacement["reasoning_effort"] = "none"
        elif controls.effort is not None:
            replacement["reasoning_effort"] = controls.effort
        if controls.exclude and rules.send_include_reasoning:
            replacement["include_reasoning"] = False
        splice(body, ("reasoning",), replacement)
        return True
    thinking: dict[str, Any] | None
    if rules.controls_form == "zai-thinking":
        thinking = {"type": "disabled"} if controls.off else dict(ZAI_THINKING)
    else:
        thinking = _anthropic_thinking(body, controls)
    if body.get("thinking") is not None or thinking is None:  # a null thinking counts as absent
        splice(body, ("reasoning",), {})
    else:
        splice(body, ("reasoning",), {"thinking": thinking})
    return True


ZAI_THINKING = {"type": "enabled", "clear_thinking": False}
"""What the ``zai-thinking`` form sends for reasoning that is on (spec 000 "Provider-Specific Handling"):
``clear_thinking: false`` keeps the reasoning replayed in the history instead of clearing it."""


def add_zai_thinking(body: dict[str, Any], rules: ProviderRules) -> bool:
    """Give a request with no reasoning controls the Z.AI ``thinking`` object, in place (``ZAI_THINKING``).

    Spec 000 "Provider-Specific Handling": "The Z.AI provider adds thinking.type: enabled and clear_thinking:
    false to the request." A request with controls gets its ``thinking`` from ``encode_controls``; one that
    carries its own ``thinking`` keeps it (a ``null`` one counts as absent). The object goes last. Returns
    whether ``body`` changed (only for the ``zai-thinking`` form).
    """
    if rules.controls_form != "zai-thinking" or body.get("thinking") is not None:
        return False
    body["thinking"] = dict(ZAI_THINKING)  # a null one is replaced where it stands
    return True


def _anthropic_thinking(body: dict[str, Any], controls: ReasoningControls) -> dict[str, Any] | None:
    if controls.off:
        return {"type": "disabled"}
    if controls.max_tokens is not None:
        return {"type": "enabled", "budget_tokens": controls.max_tokens}
    effort = DEFAULT_EFFORT if controls.effort is None else controls.effort
    if not isinstance(effort, str) or effort not in EFFORT_BUDGETS:
        known = ", ".join(EFFORT_BUDGETS)
        raise invalid_request(
            f"Effort {effort!r} has no thinking budget on this provider; use one of {known}, "
            "or set reasoning.max_tokens.",
            "reasoning.effort",
        )
    budget = generated_budget(effort, output_limit(body))
    return None if budget is None else {"type": "enabled", "budget_tokens": budget}
