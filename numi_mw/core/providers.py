"""Provider rules: what each target provider changes in a request (README "Rules per provider").

A provider name selects one ``ProviderRules``. The rules are data; ``controls`` and ``history`` read them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

ControlsForm = Literal["object", "effort", "zai-thinking", "anthropic-thinking"]
ReasoningField = Literal["reasoning", "reasoning_content"]


@dataclass(frozen=True, slots=True)
class ProviderRules:
    """The reasoning rules of one target provider.

    Attributes:
        name: provider name (``openrouter``, ``ppq``, ``openai``, ``inception``, ``anthropic``, ``zai``,
            ``deepseek``, ``local``, ``generic``).
        reasoning_field: the assistant-history field that carries plain reasoning text upstream
            (spec 004 "Preserve reasoning across turns", the reasoning / reasoning_content table).
        controls_form: how the canonical reasoning controls are sent upstream: ``object`` (one
            ``reasoning`` object), ``effort`` (the ``reasoning_effort`` string where the controls fit in it),
            ``zai-thinking`` (``thinking.type`` plus ``clear_thinking: false``), ``anthropic-thinking``
            (``thinking.type`` plus ``budget_tokens``).
        send_include_reasoning: with the ``effort`` form, send ``include_reasoning: false`` when reasoning is
            excluded (vLLM honours it); otherwise exclusion is enforced on the response only.
        split_think_tags: responses carry reasoning as ``<think>`` tags inside ``content``.
    """

    name: str
    reasoning_field: ReasoningField
    controls_form: ControlsForm
    send_include_reasoning: bool = False
    split_think_tags: bool = False


PROVIDERS: dict[str, ProviderRules] = {
    "openrouter": ProviderRules("openrouter", "reasoning", "object"),
    "ppq": ProviderRules("ppq", "reasoning", "object"),
    "openai": ProviderRules("openai", "reasoning_content", "effort"),
    "inception": ProviderRules("inception", "reasoning_content", "effort"),
    "anthropic": ProviderRules("anthropic", "reasoning_content", "anthropic-thinking"),
    "zai": ProviderRules("zai", "reasoning_content", "zai-thinking"),
    "deepseek": ProviderRules("deepseek", "reasoning_content", "effort"),
    "local": ProviderRules("local", "reasoning_content", "effort", send_include_reasoning=True, split_think_tags=True),
    "generic": ProviderRules("generic", "reasoning_content", "object"),
}

_KNOWN_HOSTS: dict[str, str] = {
    "openrouter.ai": "openrouter",
    "api.ppq.ai": "ppq",
    "api.openai.com": "openai",
    "api.inceptionlabs.ai": "inception",
    "api.anthropic.com": "anthropic",
    "api.z.ai": "zai",
    "open.bigmodel.cn": "zai",
    "api.deepseek.com": "deepseek",
}
_LOOPBACK = ("localhost", "127.0.0.1", "::1", "[::1]")


def get_provider(name: str) -> ProviderRules:
    """The rules of provider ``name``.

    Raises:
        ValueError: ``name`` is not one of ``PROVIDERS``.
    """
    try:
        return PROVIDERS[name]
    except KeyError:
        known = ", ".join(PROVIDERS)
        raise ValueError(f"unknown provider {name!r}; use one of: {known}") from None


def infer_provider(base_url: str) -> str:
    """Infer a provider name from an upstream base URL's host.

    Well-known API hosts map to their provider; loopback hosts (``localhost``, ``127.0.0.1``, ``::1``) to
    ``local`` (vLLM, llama.cpp, Ollama); anything else to ``generic``.
    """
    host = (urlsplit(base_url).hostname or "").lower()
    if host in _KNOWN_HOSTS:
        return _KNOWN_HOSTS[host]
    for known, name in _KNOWN_HOSTS.items():
        if host.endswith("." + known):
            return name
    if host in _LOOPBACK or host.startswith("127."):
        return "local"
    return "generic"
