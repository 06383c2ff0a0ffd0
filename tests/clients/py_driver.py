"""Drives real Python client libraries for the client matrix (``tests/test_client_matrix.py``).

Run with the interpreter of the cached client environment (``.ci/build-client-envs``), never imported by the
project's tests. Reads a JSON list of jobs on standard input and writes a JSON list of results, one per job, on
standard output. A job::

    {"id": "...", "client": "openai-raw", "base_url": "http://127.0.0.1:PORT/v1", "api_key": "...",
     "model": "anthropic/claude-sonnet-4.5", "stream": true, "headers": {...}, "timeout": 20,
     "messages": [{"role": "user", "content": "..."}], "tools": [{"name": ..., "description": ..., "parameters": {...}}],
     "next_user": "...", "tool_result": "...", "provider": "openrouter"}

Each client variant answers turn 1 the way that library is used, reports what it shows (the reasoning, the
content, the tool calls) and sends turn 2 with its own history: its assistant message from turn 1, then a tool
result for each tool call (or the next user message). A result is ``{"id", "ok": true, "reasoning", "content",
"tool_calls"}`` or ``{"id", "ok": false, "stage": "turn1"|"turn2", "error_type", "error_mro", "error"}``, where
``error_mro`` lists the qualified names of the exception's classes.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import sys
from collections.abc import Callable
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # LiteLLM: no fetch of its price list at import
os.environ.setdefault("LITELLM_TELEMETRY", "False")

Job = dict[str, Any]
Shown = dict[str, Any]


class TurnTwoError(Exception):
    """Wraps an exception raised while sending turn 2, so the result names the stage."""


def rebuild_reasoning_details(fragments: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Spec 004 "Preserve reasoning across turns", "From a stream": the reference merge of streamed fragments,
    as a client written against the spec performs it (the raw openai-python rows)."""
    merged: list[dict[str, Any]] = []

    def latest_text(unsigned_only: bool) -> dict[str, Any] | None:
        for detail in reversed(merged):
            if detail["type"] == "reasoning.text" and not (unsigned_only and "signature" in detail):
                return detail
        return None

    for fragment in fragments:
        has_text = bool(fragment.get("text"))
        signed = "signature" in fragment
        if fragment["type"] != "reasoning.text" or (has_text and signed):
            merged.append(dict(fragment))
        elif has_text:
            last = merged[-1] if merged else None
            if last and last["type"] == "reasoning.text" and "signature" not in last:
                last["text"] = last.get("text", "") + fragment["text"]
            else:
                merged.append(dict(fragment))
        else:
            target = latest_text(unsigned_only=signed)
            if target is None:
                if signed:
                    merged.append(dict(fragment))
                continue
            for key in ("signature", "id", "format", "index"):
                if key in fragment and key not in target:
                    target[key] = fragment[key]
    return merged


def followup(job: Job, tool_calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Turn 2's new messages in chat completions form: a tool result per tool call, else the next user message."""
    if tool_calls:
        return [{"role": "tool", "tool_call_id": call["id"], "content": job["tool_result"]} for call in tool_calls]
    return [{"role": "user", "content": job["next_user"]}]


def openai_tools(job: Job) -> dict[str, Any]:
    if not job["tools"]:
        return {}
    return {"tools": [{"type": "function", "function": tool} for tool in job["tools"]]}


def reasoning_of(fields: dict[str, Any]) -> tuple[str | None, str]:
    """The reasoning a client reading one field shows: ``reasoning`` when it is a string, else
    ``reasoning_content`` (spec 004 "Streaming": read one of the two, never both); and the field it came in."""
    for name in ("reasoning", "reasoning_content"):
        value = fields.get(name)
        if isinstance(value, str):
            return value, name
    return None, ""


# openai-python ----------------------------------------------------------------------------------------------


def openai_client(job: Job, transport: Any = None) -> Any:
    import httpx
    from openai import OpenAI

    http_client = httpx.Client(transport=transport, timeout=job["timeout"]) if transport is not None else None
    return OpenAI(
        base_url=job["base_url"],
        api_key=job["api_key"],
        default_headers=job["headers"],
        max_retries=0,
        timeout=job["timeout"],
        http_client=http_client,
    )


def openai_turn_two(client: Any, job: Job, assistant: Any, tool_calls: list[dict[str, Any]]) -> None:
    messages = [*job["messages"], assistant, *followup(job, tool_calls)]
    try:
        if job["stream"]:
            for _ in client.chat.completions.create(
                model=job["model"], messages=messages, stream=True, **openai_tools(job)
            ):
                pass
        else:
            client.chat.completions.create(model=job["model"], messages=messages, **openai_tools(job))
    except Exception as exc:
        raise TurnTwoError(exc) from exc


def openai_raw(job: Job, transport: Any = None) -> Shown:
    """openai-python as its README shows: ``create(stream=True)`` read chunk by chunk, or a buffered ``create``.
    Streamed, the assistant message is built as spec 004 says (the shown text in the field it came in, details
    rebuilt from the fragments); buffered, the returned message object is appended as it is."""
    client = openai_client(job, transport)
    kwargs = {"model": job["model"], "messages": job["messages"], **openai_tools(job)}
    if not job["stream"]:
        message = client.chat.completions.create(**kwargs).choices[0].message
        shown, _ = reasoning_of(message.model_extra or {})
        calls = [
            {"id": c.id, "name": c.function.name, "arguments": c.function.arguments} for c in message.tool_calls or []
        ]
        openai_turn_two(client, job, message, calls)
        return {"reasoning": shown, "content": message.content, "tool_calls": calls}
    reasoning: list[str] = []
    field = ""
    content: list[str] = []
    fragments: list[dict[str, Any]] = []
    calls_by_index: dict[int, dict[str, Any]] = {}
    for chunk in client.chat.completions.create(stream=True, **kwargs):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        extra = delta.model_extra or {}
        text, name = reasoning_of(extra)
        if text:
            reasoning.append(text)
            field = field or name
        fragments.extend(extra.get("reasoning_details") or [])
        if delta.content:
            content.append(delta.content)
        for call in delta.tool_calls or []:
            entry = calls_by_index.setdefault(call.index, {"id": None, "name": "", "arguments": ""})
            entry["id"] = entry["id"] or call.id
            if call.function is not None:
                entry["name"] += call.function.name or ""
                entry["arguments"] += call.function.arguments or ""
    calls = [calls_by_index[i] for i in sorted(calls_by_index)]
    assistant: dict[str, Any] = {"role": "assistant", "content": "".join(content) or None}
    if reasoning:
        assistant[field] = "".join(reasoning)
    if fragments:
        assistant["reasoning_details"] = rebuild_reasoning_details(fragments)
    if calls:
        assistant["tool_calls"] = [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in calls
        ]
    openai_turn_two(client, job, assistant, calls)
    return {"reasoning": "".join(reasoning) if reasoning else None, "content": "".join(content), "tool_calls": calls}


def openai_helper(job: Job) -> Shown:
    """openai-python's ``client.chat.completions.stream()`` helper; the final completion's message is appended as
    it is (the helper merges streamed fields by their ``index`` and concatenates strings)."""
    client = openai_client(job)
    reasoning: list[str] = []
    with client.chat.completions.stream(model=job["model"], messages=job["messages"], **openai_tools(job)) as stream:
        for event in stream:
            if event.type == "chunk" and event.chunk.choices:
                text, _ = reasoning_of(event.chunk.choices[0].delta.model_extra or {})
                if text:
                    reasoning.append(text)
        message = stream.get_final_completion().choices[0].message
    calls = [{"id": c.id, "name": c.function.name, "arguments": c.function.arguments} for c in message.tool_calls or []]
    openai_turn_two(client, job, message, calls)
    return {"reasoning": "".join(reasoning) if reasoning else None, "content": message.content, "tool_calls": calls}


def openai_transport(job: Job) -> Shown:
    """openai-python (as ``openai_raw``, a sync client) with numi_mw's httpx transport (``SyncNormalizingTransport``,
    the sync twin of ``NormalizingTransport``) in its httpx client; direct rows run without it. Needs numi_mw
    importable (the project's interpreter runs these rows)."""
    if not job["through"]:
        return openai_raw(job)
    import numi_mw

    return openai_raw(job, numi_mw.SyncNormalizingTransport(provider=job["provider"]))


# LiteLLM ----------------------------------------------------------------------------------------------------


def litellm_route(route: str) -> Callable[[Job], Shown]:
    def run(job: Job) -> Shown:
        """LiteLLM's ``completion`` on the ``openai/`` or ``openrouter/`` route with ``api_base`` at the server;
        a stream is rebuilt with ``litellm.stream_chunk_builder``; the response message is appended as it is."""
        import litellm

        litellm.telemetry = False
        kwargs = {
            "model": f"{route}/{job['model']}",
            "api_base": job["base_url"],
            "api_key": job["api_key"],
            "extra_headers": job["headers"],
            "timeout": job["timeout"],
            "num_retries": 0,
            **openai_tools(job),
        }
        reasoning: list[str] = []
        if job["stream"]:
            chunks = []
            for chunk in litellm.completion(messages=job["messages"], stream=True, **kwargs):
                chunks.append(chunk)
                if chunk.choices:
                    text = getattr(chunk.choices[0].delta, "reasoning_content", None)
                    if text:
                        reasoning.append(text)
            message = litellm.stream_chunk_builder(chunks, messages=job["messages"]).choices[0].message
            shown = "".join(reasoning) if reasoning else None
        else:
            message = litellm.completion(messages=job["messages"], **kwargs).choices[0].message
            shown = getattr(message, "reasoning_content", None)
        calls = [
            {"id": c.id, "name": c.function.name, "arguments": c.function.arguments} for c in message.tool_calls or []
        ]
        messages = [*job["messages"], message, *followup(job, calls)]
        try:
            answer = litellm.completion(messages=messages, stream=job["stream"], **kwargs)
            if job["stream"]:
                for _ in answer:
                    pass
        except Exception as exc:
            raise TurnTwoError(exc) from exc
        return {"reasoning": shown, "content": message.content, "tool_calls": calls}

    return run


# LangChain --------------------------------------------------------------------------------------------------


def langchain_model(kind: str) -> Callable[[Job], Shown]:
    def run(job: Job) -> Shown:
        """A LangChain chat model: ``invoke``, or ``stream`` with the chunks added up; the resulting AI message goes
        into the history as it is, then a ``ToolMessage`` per tool call or a ``HumanMessage``."""
        from langchain_core.messages import HumanMessage, ToolMessage

        common: dict[str, Any] = {"model": job["model"], "api_key": job["api_key"], "max_retries": 0}
        # ChatOpenRouter's timeout is in milliseconds (its SDK's timeout_ms); the others' in seconds. With too short a
        # timeout the openrouter SDK's default retry, which max_retries=0 leaves on, sends turn 1 again.
        common["timeout"] = job["timeout"] * 1000 if kind == "openrouter" else job["timeout"]
        if kind == "openai":
            from langchain_openai import ChatOpenAI

            llm: Any = ChatOpenAI(base_url=job["base_url"], default_headers=job["headers"], **common)
        elif kind == "deepseek":
            from langchain_deepseek import ChatDeepSeek

            llm = ChatDeepSeek(api_base=job["base_url"], default_headers=job["headers"], **common)
        else:
            from langchain_openrouter import ChatOpenRouter

            llm = ChatOpenRouter(base_url=job["base_url"], default_headers=job["headers"], **common)
        if job["tools"]:
            llm = llm.bind_tools([{"type": "function", "function": tool} for tool in job["tools"]])
        history: list[Any] = [HumanMessage(job["messages"][0]["content"])]

        def answer(messages: list[Any]) -> Any:
            if not job["stream"]:
                return llm.invoke(messages)
            total = None
            for chunk in llm.stream(messages):
                total = chunk if total is None else total + chunk
            return total

        ai = answer(history)
        kwargs = ai.additional_kwargs
        shown = kwargs.get("reasoning_content") if "reasoning_content" in kwargs else kwargs.get("reasoning")
        calls = [{"id": c["id"], "name": c["name"], "arguments": json.dumps(c["args"])} for c in ai.tool_calls]
        if calls:
            nexts: list[Any] = [ToolMessage(job["tool_result"], tool_call_id=c["id"]) for c in calls]
        else:
            nexts = [HumanMessage(job["next_user"])]
        try:
            answer([*history, ai, *nexts])
        except Exception as exc:
            raise TurnTwoError(exc) from exc
        content = ai.content if isinstance(ai.content, str) else ai.text
        return {"reasoning": shown, "content": content, "tool_calls": calls}

    return run


# pydantic-ai ------------------------------------------------------------------------------------------------


def pydantic_ai_model(kind: str) -> Callable[[Job], Shown]:
    def run(job: Job) -> Shown:
        """A pydantic-ai ``Agent`` on ``OpenAIChatModel`` or ``OpenRouterModel`` (an ``AsyncOpenAI`` client at the
        server). Streamed rows pass an ``event_stream_handler``, which makes the agent stream each model request.
        A tool call is answered by the agent's own tool (turn 2 follows by itself); otherwise turn 2 is a second
        ``run`` with ``message_history`` from the first."""
        from openai import AsyncOpenAI
        from pydantic_ai import Agent, Tool
        from pydantic_ai.messages import ModelResponse, TextPart, ThinkingPart, ToolCallPart

        async def go() -> Shown:
            client = AsyncOpenAI(
                base_url=job["base_url"],
                api_key=job["api_key"],
                default_headers=job["headers"],
                max_retries=0,
                timeout=job["timeout"],
            )
            if kind == "openai":
                from pydantic_ai.models.openai import OpenAIChatModel
                from pydantic_ai.providers.openai import OpenAIProvider

                model: Any = OpenAIChatModel(job["model"], provider=OpenAIProvider(openai_client=client))
            else:
                from pydantic_ai.models.openrouter import OpenRouterModel
                from pydantic_ai.providers.openrouter import OpenRouterProvider

                model = OpenRouterModel(job["model"], provider=OpenRouterProvider(openai_client=client))
            tools = [
                Tool.from_schema(lambda **_: job["tool_result"], t["name"], t["description"], t["parameters"])
                for t in job["tools"]
            ]
            agent = Agent(model, tools=tools)

            async def drain(_ctx: Any, events: Any) -> None:
                async for _ in events:
                    pass

            handler = drain if job["stream"] else None
            result = await agent.run(job["messages"][0]["content"], event_stream_handler=handler)
            first = next(m for m in result.all_messages() if isinstance(m, ModelResponse))
            thinking = [p.content for p in first.parts if isinstance(p, ThinkingPart)]
            calls = [
                {"id": p.tool_call_id, "name": p.tool_name, "arguments": p.args_as_json_str()}
                for p in first.parts
                if isinstance(p, ToolCallPart)
            ]
            if not calls:
                try:
                    await agent.run(
                        job["next_user"], message_history=result.all_messages(), event_stream_handler=handler
                    )
                except Exception as exc:
                    raise TurnTwoError(exc) from exc
            return {
                "reasoning": "".join(thinking) if thinking else None,
                "content": "".join(p.content for p in first.parts if isinstance(p, TextPart)),
                "tool_calls": calls,
            }

        return asyncio.run(go())

    return run


CLIENTS: dict[str, Callable[[Job], Shown]] = {
    "openai-raw": openai_raw,
    "openai-helper": openai_helper,
    "openai-transport": openai_transport,
    "litellm-openai": litellm_route("openai"),
    "litellm-openrouter": litellm_route("openrouter"),
    "langchain-openai": langchain_model("openai"),
    "langchain-openrouter": langchain_model("openrouter"),
    "langchain-deepseek": langchain_model("deepseek"),
    "pydantic-ai-openai": pydantic_ai_model("openai"),
    "pydantic-ai-openrouter": pydantic_ai_model("openrouter"),
}


def qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def run_job(job: Job) -> dict[str, Any]:
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # a library's prints must not mix with the JSON answer
            shown = CLIENTS[job["client"]](job)
    except Exception as exc:
        stage = "turn2" if isinstance(exc, TurnTwoError) else "turn1"
        error = exc.__cause__ if isinstance(exc, TurnTwoError) and exc.__cause__ is not None else exc
        return {
            "id": job["id"],
            "ok": False,
            "stage": stage,
            "error_type": qualified(type(error)),
            "error_mro": [qualified(cls) for cls in type(error).__mro__],
            "error": str(error)[:2000],
        }
    return {"id": job["id"], "ok": True, **shown}


def main() -> None:
    jobs: list[Job] = json.load(sys.stdin)
    json.dump([run_job(job) for job in jobs], sys.stdout)


if __name__ == "__main__":
    main()
