"""Wire-API adapters: one room per wire API numi_mw translates chat completions to, and one row of data each.

Clients always speak chat completions to numi_mw. A route whose wire API is ``anthropic-messages`` or
``openai-responses`` goes through that wire API's adapter: its request is prepared as a chat completions request
first (controls, spec 000's filter, spec 004's table), then translated (``WireAdapter.translate``) into the
native body; the native answer (a buffered body or an SSE stream) is translated back into chat completions
(``WireAdapter.completion``, ``WireAdapter.stream``) and then normalized by the same response rules as any chat
answer. Each adapter is pure (plain data in, plain data out); ``docs/wire-apis.md`` describes both.

A new wire API is a new module here plus one row of ``WIRE_APIS``.
"""

from __future__ import annotations

from numi_mw.core.adapters import anthropic_messages, openai_responses
from numi_mw.core.adapters.base import Answer, RequestFacts, StreamTranslator, Translation, WireAdapter
from numi_mw.core.providers import WireApi

__all__ = ["WIRE_APIS", "Answer", "RequestFacts", "StreamTranslator", "Translation", "WireAdapter"]

WIRE_APIS: dict[WireApi, WireAdapter] = {
    adapter.wire_api: adapter for adapter in (anthropic_messages.ADAPTER, openai_responses.ADAPTER)
}
"""The adapter of each wire API numi_mw translates to (``openai-chat`` needs none)."""
