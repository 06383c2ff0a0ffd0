"""Provider rules: what each target provider reads and refuses, one row per provider (``docs/providers.md``).

A provider name selects one ``ProviderRules``. The rules are data; ``controls``, ``history``, ``routing`` and the
response side read them, and none of them matches a provider by name. A new provider is one new row of
``PROVIDERS``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

ControlsForm = Literal[
    "object",
    "effort",
    "effort-format",
    "thinking-effort",
    "together",
    "chat-template",
    "gemini",
    "zai-thinking",
    "anthropic-thinking",
]
ReasoningField = Literal["reasoning", "reasoning_content"]
Replay = Literal["none", "text", "details", "preserved-text"]
WireApi = Literal["openai-chat", "openai-responses", "anthropic-messages"]
WIRE_API_NAMES: tuple[WireApi, ...] = ("openai-chat", "openai-responses", "anthropic-messages")


@dataclass(frozen=True, slots=True)
class ProviderRules:
    """The reasoning rules of one target provider.

    Attributes:
        name: provider name (a key of ``PROVIDERS``).
        reasoning_field: the assistant-history field that carries plain reasoning text upstream
            (spec 004 "Preserve reasoning across turns", the reasoning / reasoning_content table); never read
            where ``replay`` is ``none``.
        controls_form: how the canonical reasoning controls are sent upstream (``controls.encode_controls``;
            what each form makes of each control is tabled in ``docs/providers.md``): ``object`` (one
            ``reasoning`` object), ``effort`` (``reasoning_effort``), ``effort-format`` (``reasoning_effort``, and
            ``reasoning_format: "hidden"`` when excluded), ``thinking-effort`` (``reasoning_effort`` for the
            level, ``thinking.type`` to switch), ``together`` (``reasoning_effort`` for the level,
            ``reasoning.enabled`` to switch), ``chat-template`` (``reasoning_effort``, ``chat_template_kwargs``
            to switch, ``thinking_token_budget``), ``gemini`` (``reasoning_effort``, or a
            ``thinking_config`` budget), ``zai-thinking`` (``thinking.type`` plus ``clear_thinking: false``,
            and ``reasoning_effort``), ``anthropic-thinking`` (``thinking.type`` plus ``budget_tokens``).
        replay: the provider's row of spec 000's message preparation filter ("The Message Preparation
            Filter"), for assistant history: ``none`` (reasoning text and details removed: direct ``openai``
            and ``inception`` as the spec says, and the hosts that refuse every reasoning field in history),
            ``text`` (``anthropic``: text kept for thinking blocks, details removed), ``details``
            (``openrouter``: both kept when preserving, else details on tool-call messages only),
            ``preserved-text`` (other reasoning-capable routes: text kept only when preserving, details
            removed).
        routing_fields: the provider reads the request fields that steer routing (``provider``,
            ``session_id``); for other providers a catalog route removes them.
        send_include_reasoning: with the ``effort`` form, send ``include_reasoning: false`` when reasoning is
            excluded (vLLM honours it); otherwise exclusion is enforced on the response only.
        split_think_tags: responses carry reasoning as ``<think>`` tags inside ``content``.
        hosts: API hosts (and their subdomains) that mean this provider when it is not named.
        reasoning_outside_completion: the provider's chat usage counts ``reasoning_tokens`` outside
            ``completion_tokens`` (xAI's chat API reference: ``completion_tokens`` 2 beside
            ``completion_tokens_details.reasoning_tokens`` 340, ``total_tokens`` counting both), where spec 004
            ("Output limits and billing") counts them inside; ``usage.account_usage`` adds them in.
        cost_in_usd_ticks: the provider's usage reports what it charged as ``cost_in_usd_ticks``, 10^10 ticks to
            the US dollar (xAI's "Cost Tracking" guide); ``usage.account_usage`` gives it as ``cost``.
    """

    name: str
    reasoning_field: ReasoningField
    controls_form: ControlsForm
    replay: Replay
    routing_fields: bool = False
    send_include_reasoning: bool = False
    split_think_tags: bool = False
    hosts: tuple[str, ...] = ()
    reasoning_outside_completion: bool = False
    cost_in_usd_ticks: bool = False


PROVIDERS: dict[str, ProviderRules] = {
    rules.name: rules
    for rules in (
        ProviderRules("openrouter", "reasoning", "object", "details", routing_fields=True, hosts=("openrouter.ai",)),
        ProviderRules("ppq", "reasoning", "object", "details", routing_fields=True, hosts=("api.ppq.ai",)),
        ProviderRules("openai", "reasoning_content", "effort", "none", hosts=("api.openai.com",)),
        ProviderRules("inception", "reasoning_content", "effort", "none", hosts=("api.inceptionlabs.ai",)),
        ProviderRules("anthropic", "reasoning_content", "anthropic-thinking", "text", hosts=("api.anthropic.com",)),
        ProviderRules(
            "zai", "reasoning_content", "zai-thinking", "preserved-text", hosts=("api.z.ai", "open.bigmodel.cn")
        ),
        ProviderRules(
            "deepseek", "reasoning_content", "thinking-effort", "preserved-text", hosts=("api.deepseek.com",)
        ),
        ProviderRules(
            "local",
            "reasoning_content",
            "chat-template",
            "preserved-text",
            send_include_reasoning=True,
            split_think_tags=True,
        ),
        # Hosts that answer 400 to a field they do not know, reasoning_content on an assistant message among them.
        ProviderRules(
            "groq",
            "reasoning",
            "effort",
            "preserved-text",
            send_include_reasoning=True,
            split_think_tags=True,
            hosts=("api.groq.com",),
        ),
        ProviderRules(
            "cerebras",
            "reasoning",
            "effort-format",
            "preserved-text",
            split_think_tags=True,
            hosts=("api.cerebras.ai",),
        ),
        ProviderRules("mistral", "reasoning_content", "effort", "none", hosts=("api.mistral.ai",)),
        ProviderRules("gemini", "reasoning_content", "gemini", "none", hosts=("generativelanguage.googleapis.com",)),
        # Hosts that read reasoning_content (or reasoning) back and ignore what they do not know.
        ProviderRules(
            "xai",
            "reasoning_content",
            "effort",
            "preserved-text",
            hosts=("api.x.ai",),
            reasoning_outside_completion=True,
            cost_in_usd_ticks=True,
        ),
        ProviderRules(
            "together",
            "reasoning",
            "together",
            "preserved-text",
            split_think_tags=True,
            hosts=("api.together.xyz", "api.together.ai"),
        ),
        ProviderRules(
            "fireworks",
            "reasoning_content",
            "effort",
            "preserved-text",
            split_think_tags=True,
            hosts=("api.fireworks.ai",),
        ),
        # An upstream numi_mw knows nothing about is taken for an API of spec 004's kind, which reads reasoning
        # details back ("Return all reasoning details unchanged").
        ProviderRules("generic", "reasoning_content", "object", "details"),
    )
}
"""Every provider's rules by name (the table is ``docs/providers.md``)."""

_LOOPBACK = ("localhost", "127.0.0.1", "::1", "[::1]")


def provider_rules(name: str) -> ProviderRules:
    """The rules of provider ``name``.

    Raises:
        ValueError: ``name`` is not one of ``PROVIDERS``.
    """
    rules = PROVIDERS.get(name) if isinstance(name, str) else None
    if rules is None:
        raise ValueError(f"unknown provider {name!r}; use one of: {', '.join(PROVIDERS)}")
    return rules


def infer_provider(base_url: str) -> str:
    """Infer a provider name from an upstream base URL's host.

    A host of a provider's ``hosts`` (or a subdomain of one) means that provider; loopback hosts
    (``localhost``, ``127.0.0.1``, ``::1``) mean ``local`` (vLLM, llama.cpp, Ollama); anything else ``generic``.
    """
    host = (urlsplit(base_url).hostname or "").lower()
    for rules in PROVIDERS.values():
        if host in rules.hosts:
            return rules.name
    for rules in PROVIDERS.values():
        if any(host.endswith("." + known) for known in rules.hosts):
            return rules.name
    if host in _LOOPBACK or host.startswith("127."):
        return "local"
    return "generic"
