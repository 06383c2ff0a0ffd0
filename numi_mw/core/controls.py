"""Reasoning request controls (spec 004 "Request controls" and "Other fields").

Two steps, both on a decoded request body (a ``dict`` numi_mw owns):

1. ``fold_controls`` folds the shorthands into one canonical ``reasoning`` object: ``reasoning_effort`` becomes
   ``reasoning.effort`` and wins over it (``null`` counts as omitted); ``include_reasoning`` (deprecated)
   becomes ``reasoning.exclude = not include_reasoning`` and wins over it. Unfamiliar effort values and
   unknown ``reasoning`` attributes stay as sent.
2. ``encode_controls`` writes that object in the form the route's upstream understands (the provider's
   ``ProviderRules.controls_form``, or a translated wire API's), so the upstream receives one form, never a
   shorthand and the object. Each control reaches the upstream in a field it reads, or is dropped on purpose
   and named in the caller's ``notes`` (the table of what each form makes of each control is in
   ``docs/providers.md``).
"""

from __future__ import annotations

from typing import Any

import msgspec

from numi_mw.core.budget import DEFAULT_EFFORT, EFFORT_BUDGETS, generated_budget, output_limit
from numi_mw.core.errors import invalid_request
from numi_mw.core.fields import CONTROL_FIELDS, splice
from numi_mw.core.providers import ControlsForm


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


def _whole_number(value: object) -> bool:
    """Whether ``value`` is a whole number as JSON writes one (``1500``, ``1500.0``, ``-1``), not a boolean."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def _shown(value: object) -> str:
    """How a refused value is named in a message: a number as written, anything else by its JSON type."""
    if isinstance(value, float) and not isinstance(value, bool):
        return repr(value)
    return type(value).__name__


def fold_controls(body: dict[str, Any]) -> tuple[ReasoningControls, bool]:
    """Fold ``reasoning_effort`` and ``include_reasoning`` into ``body["reasoning"]``, in place.

    The ``reasoning`` key keeps its position; when only shorthands were sent it takes the first shorthand's
    position. ``reasoning: null`` and shorthands set to ``null`` count as omitted and are removed.

    Returns:
        ``(controls, changed)``: the effective controls and whether ``body`` was modified.

    Raises:
        ApiError: 400 ``invalid_request`` naming the field (``param``) when ``reasoning`` is not an object,
            ``reasoning_effort`` or ``reasoning.effort`` is not a string, ``reasoning.max_tokens`` is not a whole
            number, or ``include_reasoning``, ``reasoning.exclude`` or ``reasoning.enabled`` is not a boolean
            (``null`` is omitted for each): every control numi_mw rewrites into another field (``reasoning_effort``,
            a thinking budget, ``include_reasoning``, a switch) is checked before it is rewritten, so numi_mw never
            sends a value it would itself refuse (``docs/errors.md``).
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
    effort = obj.get("effort")
    if effort is not None and not isinstance(effort, str):
        raise invalid_request(
            f"reasoning.effort must be a string or null, not {type(effort).__name__}.", "reasoning.effort"
        )
    budget = obj.get("max_tokens")
    if budget is not None and not _whole_number(budget):
        raise invalid_request(
            f"reasoning.max_tokens must be a whole number of tokens or null, not {_shown(budget)}.",
            "reasoning.max_tokens",
        )
    controls = ReasoningControls(
        present=True,
        effort=effort,
        enabled=enabled,
        exclude=bool(exclude),
        max_tokens=budget,
    )
    return controls, changed


KNOWN_ATTRIBUTES = frozenset(("effort", "enabled", "exclude", "max_tokens"))
"""The ``reasoning`` attributes spec 004 names; any other one is an unknown attribute."""

MERGED_FIELDS = ("chat_template_kwargs", "extra_body")
"""Fields numi_mw writes into an object the client may have sent itself: the client's keys win, ours fill in."""


def encode_controls(
    body: dict[str, Any],
    controls: ReasoningControls,
    form: ControlsForm,
    *,
    include_reasoning: bool = False,
    notes: list[str] | None = None,
) -> bool:
    """Write the folded ``reasoning`` object in the controls ``form`` of the route, in place.

    The form is the provider's (``ProviderRules.controls_form``), or the wire API's when numi_mw translates to
    one (``WireAdapter.controls_form``). What each form makes of each control (effort, ``none``, ``enabled``,
    ``exclude``, ``max_tokens``, unknown attributes) is the "control x provider" table of
    ``docs/providers.md``; in short:

    - ``object``: the ``reasoning`` object as folded, everything in it.
    - every other form: a named effort goes as ``reasoning_effort``, verbatim (unfamiliar values too: spec 004
      "the upstream validates them"), except on ``anthropic-thinking`` (a generated budget) and beside a budget
      on ``gemini``; off (``effort: "none"`` or ``enabled: false``, which wins over an effort) and
      ``enabled: true`` go as the form's switch; ``exclude`` goes as ``include_reasoning: false`` where
      ``include_reasoning`` is set (``ProviderRules.send_include_reasoning``), as ``reasoning_format: "hidden"``
      on ``effort-format``, else it is enforced on the answer; ``max_tokens`` goes where the form has a budget.

    What a form cannot carry is dropped and named in ``notes`` (when given): ``effort-dropped``,
    ``budget-dropped``, ``thinking-dropped`` (no room for a generated budget below the output limit),
    ``reasoning-attributes-dropped=a+b`` (unknown attributes, as sent). A field the client sent itself
    (``thinking``, ``reasoning_format``, ...) is never replaced (a ``null`` one counts as absent); into
    ``chat_template_kwargs`` and ``extra_body`` the client's own keys win and ours fill in.

    Returns:
        Whether ``body`` changed.
    """
    obj = body.get("reasoning")
    if form == "object" or not isinstance(obj, dict):
        return False
    lost: list[str] = []
    unknown = [key for key in obj if key not in KNOWN_ATTRIBUTES]
    if form == "together":
        fields = _together(controls, {key: obj[key] for key in unknown}, lost)
        unknown = []
    elif form == "anthropic-thinking":
        fields = _anthropic_thinking(body, controls, lost)
    elif form == "zai-thinking":
        fields = _zai_thinking(controls, lost)
    elif form == "gemini":
        fields = _gemini(controls, lost)
    else:
        fields = _level_and_switch(form, controls, lost)
    if controls.exclude:
        if include_reasoning:
            fields["include_reasoning"] = False
        elif form == "effort-format":
            fields["reasoning_format"] = "hidden"
    if unknown:
        lost.append("reasoning-attributes-dropped=" + "+".join(unknown))
    for key in list(fields):
        own = None if key == "reasoning" else body.get(key)  # the reasoning object is what is being replaced
        if own is None:
            continue
        if key in MERGED_FIELDS and isinstance(own, dict) and isinstance(fields[key], dict):
            body[key] = _merge(fields[key], own)
        del fields[key]
    splice(body, ("reasoning",), fields)
    if notes is not None:
        notes.extend(lost)
    return True


def _merge(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, Any]:
    """``ours`` under ``theirs``: the client's keys win; nested objects merge the same way."""
    merged = dict(ours)
    for key, value in theirs.items():
        mine = merged.get(key)
        merged[key] = _merge(mine, value) if isinstance(mine, dict) and isinstance(value, dict) else value
    return merged


def _level_and_switch(form: ControlsForm, controls: ReasoningControls, lost: list[str]) -> dict[str, Any]:
    """The forms whose level is ``reasoning_effort``: ``effort`` and ``effort-format`` (switch: the effort
    itself, ``"none"`` or the default level), ``thinking-effort`` (switch: ``thinking.type``),
    ``chat-template`` (switch: ``chat_template_kwargs``; budget: ``thinking_token_budget``)."""
    fields: dict[str, Any] = {}
    off = controls.off
    if form == "thinking-effort":
        if off:
            fields["thinking"] = {"type": "disabled"}
        else:
            if controls.effort is not None:
                fields["reasoning_effort"] = controls.effort
            if controls.enabled is True:
                fields["thinking"] = {"type": "enabled"}
    elif form == "chat-template":
        if off:
            fields["reasoning_effort"] = "none"
            fields["chat_template_kwargs"] = {"enable_thinking": False, "thinking": False}
        else:
            if controls.effort is not None:
                fields["reasoning_effort"] = controls.effort
            if controls.enabled is True:
                fields["chat_template_kwargs"] = {"enable_thinking": True, "thinking": True}
            if controls.max_tokens is not None:
                fields["thinking_token_budget"] = controls.max_tokens
                return fields
    elif off:
        fields["reasoning_effort"] = "none"
    elif controls.effort is not None:
        fields["reasoning_effort"] = controls.effort
    elif controls.enabled is True:  # on without a level: the spec's common middle level
        fields["reasoning_effort"] = DEFAULT_EFFORT
    if controls.max_tokens is not None:
        lost.append("budget-dropped")
    return fields


def _together(controls: ReasoningControls, unknown: dict[str, Any], lost: list[str]) -> dict[str, Any]:
    """Together: the level as ``reasoning_effort``; ``reasoning.enabled`` switches hybrid models, and the
    ``reasoning`` object carries the unknown attributes for the upstream to validate."""
    fields: dict[str, Any] = {}
    reasoning: dict[str, Any] = {}
    if controls.off:
        reasoning["enabled"] = False
    else:
        if controls.effort is not None:
            fields["reasoning_effort"] = controls.effort
        if controls.enabled is True:
            reasoning["enabled"] = True
    reasoning.update(unknown)
    if controls.max_tokens is not None:
        lost.append("budget-dropped")
    if reasoning:
        fields["reasoning"] = reasoning
    return fields


def _zai_thinking(controls: ReasoningControls, lost: list[str]) -> dict[str, Any]:
    if controls.off:
        fields: dict[str, Any] = {"thinking": {"type": "disabled"}}
    else:
        fields = {"thinking": dict(ZAI_THINKING)}
        if controls.effort is not None:  # GLM-5.2 and later read it
            fields["reasoning_effort"] = controls.effort
    if controls.max_tokens is not None:
        lost.append("budget-dropped")
    return fields


GEMINI_DYNAMIC_BUDGET = -1
"""Gemini's ``thinking_budget`` for "the model decides how much to think" (dynamic thinking)."""


def _gemini(controls: ReasoningControls, lost: list[str]) -> dict[str, Any]:
    """Gemini's OpenAI endpoint: ``reasoning_effort``, or a ``thinking_config`` budget under
    ``extra_body.google``; it refuses the two together, so an explicit budget wins over an effort."""
    if controls.off:
        if controls.max_tokens is not None:
            lost.append("budget-dropped")
        return {"reasoning_effort": "none"}
    budget = controls.max_tokens
    if budget is None:
        if controls.effort is not None:
            return {"reasoning_effort": controls.effort}
        if controls.enabled is not True:
            return {}
        budget = GEMINI_DYNAMIC_BUDGET
    elif controls.effort is not None:
        lost.append("effort-dropped")
    return {"extra_body": {"google": {"thinking_config": {"thinking_budget": budget}}}}


ZAI_THINKING = {"type": "enabled", "clear_thinking": False}
"""What the ``zai-thinking`` form sends for reasoning that is on (spec 000 "Provider-Specific Handling"):
``clear_thinking: false`` keeps the reasoning replayed in the history instead of clearing it."""


def add_zai_thinking(body: dict[str, Any], form: ControlsForm) -> bool:
    """Give a request with no reasoning controls the Z.AI ``thinking`` object, in place (``ZAI_THINKING``).

    Spec 000 "Provider-Specific Handling": "The Z.AI provider adds thinking.type: enabled and clear_thinking:
    false to the request." A request with controls gets its ``thinking`` from ``encode_controls``; one that
    carries its own ``thinking`` keeps it (a ``null`` one counts as absent). The object goes last. Returns
    whether ``body`` changed (only for the ``zai-thinking`` form).
    """
    if form != "zai-thinking" or body.get("thinking") is not None:
        return False
    body["thinking"] = dict(ZAI_THINKING)  # a null one is replaced where it stands
    return True


def wanted_budget(controls: ReasoningControls) -> int:
    """The thinking budget in tokens that ``controls`` ask for in the ``anthropic-thinking`` form, before any cap:
    an explicit positive ``reasoning.max_tokens``, else the budget table's entry for the effort (an effort with no
    entry, and ``enabled: true`` alone, count as ``medium``); 0 when they ask for no thinking."""
    if controls.off:
        return 0
    budget = controls.max_tokens
    if budget is not None:
        return budget if isinstance(budget, int) and not isinstance(budget, bool) and budget > 0 else 0
    effort = controls.effort
    if effort is None and controls.enabled is not True:
        return 0
    return (
        EFFORT_BUDGETS.get(effort, EFFORT_BUDGETS[DEFAULT_EFFORT])
        if isinstance(effort, str)
        else (EFFORT_BUDGETS[DEFAULT_EFFORT])
    )


def _anthropic_thinking(body: dict[str, Any], controls: ReasoningControls, lost: list[str]) -> dict[str, Any]:
    """``thinking`` with a budget: an explicit ``reasoning.max_tokens`` as is (it wins over an effort), else a
    budget generated from the effort (an effort with no budget, and ``enabled: true``, count as ``medium``)
    capped below the output limit, or no ``thinking`` when that leaves no room. Controls that ask for no
    reasoning (``exclude`` alone, unknown attributes alone) send no ``thinking``: Anthropic's default, off."""
    if controls.off:
        if controls.max_tokens is not None:
            lost.append("budget-dropped")
        return {"thinking": {"type": "disabled"}}
    if controls.max_tokens is not None:
        if controls.effort is not None:
            lost.append("effort-dropped")
        return {"thinking": {"type": "enabled", "budget_tokens": controls.max_tokens}}
    effort = controls.effort
    if effort is None:
        if controls.enabled is not True:
            return {}
        effort = DEFAULT_EFFORT
    elif not isinstance(effort, str) or effort not in EFFORT_BUDGETS:
        lost.append("effort-dropped")
        effort = DEFAULT_EFFORT
    budget = generated_budget(effort, output_limit(body))
    if budget is None:
        lost.append("thinking-dropped")
        return {}
    return {"thinking": {"type": "enabled", "budget_tokens": budget}}
