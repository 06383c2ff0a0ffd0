"""The assistant message a client sends back on its next turn, as its public source builds it, for history tests."""

from __future__ import annotations

from typing import Any

LITELLM_MESSAGE_FIELDS = frozenset(
    {
        "content",
        "role",
        "refusal",
        "tool_calls",
        "function_call",
        "audio",
        "images",
        "reasoning_content",
        "thinking_blocks",
        "reasoning_items",
        "provider_specific_fields",
        "annotations",
    }
)
"""The fields LiteLLM's ``Message`` declares (``litellm/types/utils.py``)."""


def litellm_assistant(message: dict[str, Any]) -> dict[str, Any]:
    """The assistant message LiteLLM sends back for the chat completion ``message`` it received.

    As ``convert_dict_to_response`` builds its ``Message`` (``litellm/litellm_core_utils/llm_response_utils``):
    every key ``Message`` does not declare (``reasoning``, ``reasoning_details`` among them) goes, as it came, into
    ``provider_specific_fields``; ``reasoning_content`` is the message's ``reasoning_content``, else its
    ``reasoning``; ``thinking_blocks`` stay and are copied into ``provider_specific_fields`` too. LiteLLM sends the
    message back with its null fields left out.
    """
    held: dict[str, Any] = dict(message.get("provider_specific_fields") or {})
    for key, value in message.items():
        if key not in LITELLM_MESSAGE_FIELDS:
            held[key] = value
    if "thinking_blocks" in message:
        held["thinking_blocks"] = message["thinking_blocks"]
    text = message["reasoning_content"] if "reasoning_content" in message else message.get("reasoning")
    out: dict[str, Any] = {"content": message.get("content"), "role": message.get("role") or "assistant"}
    if message.get("tool_calls"):
        out["tool_calls"] = message["tool_calls"]
    if text is not None:
        out["reasoning_content"] = text
    if message.get("thinking_blocks") is not None:
        out["thinking_blocks"] = message["thinking_blocks"]
    if held:
        out["provider_specific_fields"] = held
    return out
