"""The stream shape of reasoning against each client's merge rule (``tests/client_merges.py``).

Through numi_mw every client shows the recording's reasoning once and sends back whole details (signatures and
encrypted data byte for byte), never worse than the same client talking straight to the recording
(``docs/streaming.md``, "The shape of streamed reasoning"). The exact chunks numi_mw sends for the recorded
OpenRouter and Snowflake Claude streams are checked here too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from numi_mw.core.details import rebuild_reasoning_details
from tests.client_merges import CLIENTS, Replay
from tests.conftest import SHARED, recordings
from tests.response_support import data_events, frame_jsonl, rewrite, sse_chunks

CHAT = SHARED / "fixtures" / "openai-chat"
OPENROUTER = "openrouter-claude-sonnet-4.5-reasoning-details.sse"
SNOWFLAKE = "snowflake-claude-sonnet-4.6-reasoning-details.sse"
ACV1 = "anthropic-claude-v1"
CLAUDE_TEXT = "This is a simple arithmetic question. 2+2 equals 4."
SIGNATURE = (
    "Et0BCkgIChACGAIqQA2s7h7tA7IG35fbwVkou9PM2hANVJNUwcEM4q12fTRDK6y3v6YoEvJ+7bko8wnW/GLsQFXadaJPAEMCpLkhI9ISDLjFkeR1a"
    "VUIvdCtyBoMrUTovh0jwk+wpnZWIjANV3e6VVdgbGSsEyyTHO6KMmVtqqs79f9blnVdJmmMIwMyTi6bEtG59+jTU7v1zlsqQ2IKGZILOlr6adh0Aa"
    "m7zYttvisys+wjyZZXU1y/Srz0nmp1cFgVOJe1BLKQI3SSRrjsqQC0uAEUZy0GX0Rq1AXjvIcYAQ=="
)
CLAUDE_DETAIL = {"type": "reasoning.text", "text": CLAUDE_TEXT, "signature": SIGNATURE, "format": ACV1, "index": 0}
"""The one signed thinking block of the OpenRouter recording, whole: what every client should send back."""
SNOWFLAKE_TEXT = "15 * 27 = 405"
SNOWFLAKE_DETAIL = {
    "type": "reasoning.text",
    "text": SNOWFLAKE_TEXT,
    "id": "reasoning-text-1",
    "format": ACV1,
    "index": 0,
}
"""The thinking block of the Snowflake recording, whole (Snowflake streams it without a signature)."""


def recording(shared_dir: Path, name: str) -> bytes:
    raw = (shared_dir / "fixtures" / "openai-chat" / name).read_bytes()
    return frame_jsonl(raw) if name.endswith(".jsonl") else raw


def choice_deltas(body: bytes) -> list[tuple[dict[str, Any], Any]]:
    """Choice 0's ``(delta, finish_reason)`` of every chunk of an SSE body."""
    return [
        (choice["delta"], choice.get("finish_reason"))
        for chunk in sse_chunks(body)
        for choice in chunk.get("choices") or []
        if choice.get("index", 0) == 0
    ]


# --- the chunks numi_mw sends for the two recorded Claude streams ----------------------------------------------


def test_openrouter_claude_stream_one_index_per_block_no_placeholder_format_with_the_signature(
    shared_dir: Path,
) -> None:
    body = recording(shared_dir, OPENROUTER)
    out = rewrite(body)
    head = {"role": "assistant", "content": ""}
    empty = {**head, "reasoning": None, "reasoning_details": []}
    assert choice_deltas(out) == [
        (empty, None),
        # the placeholder that opens the thinking block (text "" and signature ""): not a detail of its own
        ({**head, "reasoning": None}, None),
        # every fragment of the block has index 0; its format waits for the block's last entry
        (
            {
                **head,
                "reasoning": "This",
                "reasoning_details": [{"type": "reasoning.text", "text": "This", "index": 0}],
            },
            None,
        ),
        (
            {
                **head,
                "reasoning": " is a simple arithmetic question. ",
                "reasoning_details": [
                    {"type": "reasoning.text", "text": " is a simple arithmetic question. ", "index": 0}
                ],
            },
            None,
        ),
        (
            {
                **head,
                "reasoning": "2+2 equals 4.",
                "reasoning_details": [{"type": "reasoning.text", "text": "2+2 equals 4.", "index": 0}],
            },
            None,
        ),
        ({**head, "reasoning": None}, None),  # an empty fragment that only repeats the format
        (
            {
                **head,
                "reasoning": None,
                "reasoning_details": [{"type": "reasoning.text", "signature": SIGNATURE, "format": ACV1, "index": 0}],
            },
            None,
        ),
        (empty, None),
        (empty, None),
        ({**empty, "content": "2 "}, None),
        ({**empty, "content": "+ 2 = 4"}, None),
        (empty, None),
        (empty, "stop"),
        (head, None),
    ]
    # the signature's event and every event after it (already in the shape) leave as their original bytes
    events = data_events(body)
    for event in events[events.index(next(e for e in events if SIGNATURE.encode() in e)) :]:
        assert event in out


def test_snowflake_claude_stream_gets_reasoning_and_the_blocks_format_before_the_answer(shared_dir: Path) -> None:
    body = recording(shared_dir, SNOWFLAKE)
    out = rewrite(body)
    rest = {"refusal": "", "role": "assistant", "tool_calls": None}
    source = choice_deltas(body)
    sent = choice_deltas(out)
    assert sent[:6] == [
        (
            {
                "content": "",
                "reasoning_details": [{"id": "reasoning-text-1", "index": 0, "text": "15", "type": "reasoning.text"}],
                **rest,
                "reasoning": "15",
            },
            None,
        ),
        (
            {
                "content": "",
                "reasoning_details": [{"type": "reasoning.text", "text": " * 27 = 405", "index": 0}],
                **rest,
                "reasoning": " * 27 = 405",
            },
            None,
        ),
        ({"content": "", **rest}, None),
        ({"content": "", **rest}, None),
        # before the first chunk of the answer: the block's format as its last entry ...
        ({"reasoning_details": [{"type": "reasoning.text", "format": ACV1, "index": 0}]}, None),
        # ... and the end of the reasoning for clients that keep the last delta's value of a field
        ({"reasoning": None, "reasoning_details": []}, None),
    ]
    assert sent[6:] == source[4:]  # the answer as it came
    assert data_events(out)[6:] == data_events(body)[4:]  # as its original bytes
    assert data_events(out)[4] == (
        b'data: {"choices":[{"index":0,"delta":{"reasoning_details":[{"type":"reasoning.text","format":'
        b'"anthropic-claude-v1","index":0}]},"finish_reason":null}],"created":0,"id":"","model":"claude-sonnet-4-6",'
        b'"object":"chat.completion.chunk","service_tier":"","system_fingerprint":""}\n\n'
    )


# --- what each client sends back, direct and through numi_mw ---------------------------------------------------

OPENROUTER_REPLAYS: dict[str, tuple[Replay, Replay]] = {
    # client: (straight at the recording, through numi_mw)
    "openai-python raw (spec rebuild)": (
        Replay(
            CLAUDE_TEXT,
            {
                "reasoning": CLAUDE_TEXT,
                "reasoning_details": [
                    {"type": "reasoning.text", "text": "", "signature": "", "format": ACV1, "index": 0},
                    CLAUDE_DETAIL,
                ],
            },
        ),
        Replay(CLAUDE_TEXT, {"reasoning": CLAUDE_TEXT, "reasoning_details": [CLAUDE_DETAIL]}),
    ),
    "openai-python .stream()": (
        Replay(CLAUDE_TEXT, {"reasoning": CLAUDE_TEXT, "reasoning_details": [{**CLAUDE_DETAIL, "format": ACV1 * 6}]}),
        Replay(CLAUDE_TEXT, {"reasoning": CLAUDE_TEXT, "reasoning_details": [CLAUDE_DETAIL]}),
    ),
    "openai-node .stream()": (Replay(CLAUDE_TEXT, {}), Replay(CLAUDE_TEXT, {})),
    "AI SDK openrouter": (
        Replay(CLAUDE_TEXT, {"reasoning": CLAUDE_TEXT, "reasoning_details": [CLAUDE_DETAIL]}),
        Replay(CLAUDE_TEXT, {"reasoning": CLAUDE_TEXT, "reasoning_details": [CLAUDE_DETAIL]}),
    ),
    "AI SDK openai-compatible": (
        Replay(CLAUDE_TEXT, {"reasoning_content": CLAUDE_TEXT}),
        Replay(CLAUDE_TEXT, {"reasoning_content": CLAUDE_TEXT}),
    ),
    "LiteLLM openai/": (
        Replay(CLAUDE_TEXT, {"reasoning_content": CLAUDE_TEXT}),
        Replay(CLAUDE_TEXT, {"reasoning_content": CLAUDE_TEXT}),
    ),
    "LiteLLM openrouter/": (
        Replay(CLAUDE_TEXT, {"reasoning_content": CLAUDE_TEXT}),
        Replay(CLAUDE_TEXT, {"reasoning_content": CLAUDE_TEXT}),
    ),
    "langchain-openai": (Replay(), Replay()),
    "langchain-openrouter": (
        Replay(CLAUDE_TEXT, {"reasoning": CLAUDE_TEXT, "reasoning_details": [{**CLAUDE_DETAIL, "format": ACV1 * 6}]}),
        Replay(CLAUDE_TEXT, {"reasoning": CLAUDE_TEXT, "reasoning_details": [CLAUDE_DETAIL]}),
    ),
    "langchain-deepseek": (Replay(CLAUDE_TEXT), Replay(CLAUDE_TEXT)),
    "pydantic-ai OpenAI": (
        Replay(CLAUDE_TEXT, {"reasoning": CLAUDE_TEXT}),
        Replay(CLAUDE_TEXT, {"reasoning": CLAUDE_TEXT}),
    ),
    "pydantic-ai OpenRouter": (
        Replay(CLAUDE_TEXT, {"reasoning_details": [{"id": None, **CLAUDE_DETAIL}]}),
        Replay(CLAUDE_TEXT, {"reasoning_details": [{"id": None, **CLAUDE_DETAIL}]}),
    ),
}


SNOWFLAKE_REPLAYS: dict[str, tuple[Replay, Replay]] = {
    "openai-python raw (spec rebuild)": (
        Replay("", {"reasoning_details": [SNOWFLAKE_DETAIL]}),
        Replay(SNOWFLAKE_TEXT, {"reasoning": SNOWFLAKE_TEXT, "reasoning_details": [SNOWFLAKE_DETAIL]}),
    ),
    "openai-python .stream()": (
        Replay("", {"reasoning_details": [{**SNOWFLAKE_DETAIL, "format": ACV1 * 2, "id": "reasoning-text-1" * 2}]}),
        Replay(SNOWFLAKE_TEXT, {"reasoning": SNOWFLAKE_TEXT, "reasoning_details": [SNOWFLAKE_DETAIL]}),
    ),
    # direct: the last fragment, as if it were the block; through numi_mw nothing, never a fragment
    "openai-node .stream()": (
        Replay("", {"reasoning_details": [{**SNOWFLAKE_DETAIL, "text": " * 27 = 405"}]}),
        Replay(SNOWFLAKE_TEXT, {}),
    ),
    # the provider drops an Anthropic text detail without a signature when it sends the message back
    "AI SDK openrouter": (Replay(SNOWFLAKE_TEXT, {}), Replay(SNOWFLAKE_TEXT, {})),
    "AI SDK openai-compatible": (Replay(), Replay(SNOWFLAKE_TEXT, {"reasoning_content": SNOWFLAKE_TEXT})),
    "LiteLLM openai/": (Replay(), Replay(SNOWFLAKE_TEXT, {"reasoning_content": SNOWFLAKE_TEXT})),
    "LiteLLM openrouter/": (Replay(), Replay(SNOWFLAKE_TEXT, {"reasoning_content": SNOWFLAKE_TEXT})),
    "langchain-openai": (Replay(), Replay()),
    "langchain-openrouter": (
        Replay("", {"reasoning_details": [{**SNOWFLAKE_DETAIL, "format": ACV1 * 2}]}),
        Replay(SNOWFLAKE_TEXT, {"reasoning": SNOWFLAKE_TEXT, "reasoning_details": [SNOWFLAKE_DETAIL]}),
    ),
    "langchain-deepseek": (Replay(), Replay(SNOWFLAKE_TEXT)),
    "pydantic-ai OpenAI": (Replay(), Replay(SNOWFLAKE_TEXT, {"reasoning": SNOWFLAKE_TEXT})),
    "pydantic-ai OpenRouter": (
        Replay(SNOWFLAKE_TEXT, {"reasoning_details": [{**SNOWFLAKE_DETAIL, "signature": None}]}),
        Replay(SNOWFLAKE_TEXT, {"reasoning_details": [{**SNOWFLAKE_DETAIL, "signature": None}]}),
    ),
}


@pytest.mark.parametrize("client", list(CLIENTS))
def test_every_client_sends_back_the_openrouter_claude_block_whole(shared_dir: Path, client: str) -> None:
    body = recording(shared_dir, OPENROUTER)
    direct, through = OPENROUTER_REPLAYS[client]
    assert CLIENTS[client](sse_chunks(body)) == direct
    assert CLIENTS[client](sse_chunks(rewrite(body))) == through


@pytest.mark.parametrize("client", list(CLIENTS))
def test_every_client_sends_back_the_snowflake_claude_block_whole(shared_dir: Path, client: str) -> None:
    body = recording(shared_dir, SNOWFLAKE)
    direct, through = SNOWFLAKE_REPLAYS[client]
    assert CLIENTS[client](sse_chunks(body)) == direct
    assert CLIENTS[client](sse_chunks(rewrite(body))) == through


def test_the_tables_name_every_client() -> None:
    assert set(OPENROUTER_REPLAYS) == set(SNOWFLAKE_REPLAYS) == set(CLIENTS)


# --- every recorded stream, every client -----------------------------------------------------------------------


def _source(chunks: list[dict[str, Any]]) -> tuple[str, list[Any]]:
    """The recording's reasoning text (one representation per delta) and its detail fragments (choice 0)."""
    text = ""
    fragments: list[Any] = []
    for chunk in chunks:
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            details = delta.get("reasoning_details") or []
            fragments.extend(details)
            shown = "".join(d.get("text") or "" for d in details if d.get("type") == "reasoning.text")
            for value in (delta.get("reasoning"), delta.get("reasoning_content"), shown):
                if isinstance(value, str) and value:
                    text += value
                    break
    return text, fragments


def _whole_details(text: str, fragments: list[Any]) -> list[dict[str, Any]]:
    """The details a client should send back for a recording: its detail blocks whole, or, for plain reasoning,
    the one ``reasoning.text`` detail of format ``unknown`` numi_mw gives it (spec 004 "Reasoning detail")."""
    if not fragments:
        return [{"type": "reasoning.text", "text": text, "format": "unknown", "index": 0}] if text else []
    return [
        {k: v for k, v in d.items() if not (k == "signature" and v == "")}
        for d in rebuild_reasoning_details(fragments)
        if d.get("text") or d.get("signature") or d.get("type") != "reasoning.text"  # not the empty placeholder
    ]


def _without_nulls(details: Any) -> Any:
    return [{k: v for k, v in d.items() if v is not None} for d in details]


DETAIL_CLIENTS = {
    "openai-python raw (spec rebuild)",
    "openai-python .stream()",
    "AI SDK openrouter",
    "langchain-openrouter",
    "pydantic-ai OpenRouter",
}
TEXT_FIELDS = {"reasoning", "reasoning_content"}


@pytest.mark.parametrize("name", recordings(CHAT, ".sse", ".jsonl"))
def test_through_numi_mw_every_client_shows_the_reasoning_once_and_sends_back_whole_details(
    shared_dir: Path, name: str
) -> None:
    body = recording(shared_dir, name)
    text, fragments = _source(sse_chunks(body))
    whole = _whole_details(text, fragments)
    chunks = sse_chunks(rewrite(body))
    assert rebuild_reasoning_details(
        [e for d, _ in choice_deltas(rewrite(body)) for e in d.get("reasoning_details") or []]
    ) == [{**d, "index": i} for i, d in enumerate(whole)]
    for client, model in CLIENTS.items():
        replay = model(chunks)
        assert replay.shown == ("" if client == "langchain-openai" else text), client
        for field in TEXT_FIELDS & replay.fields.keys():
            assert replay.fields[field] == text, (client, field)
        details = replay.fields.get("reasoning_details")
        if client in DETAIL_CLIENTS:
            expected = whole
            if client == "AI SDK openrouter":  # it drops unsigned Anthropic text when it sends the message back
                expected = [d for d in whole if d.get("signature") or d.get("format") != ACV1]
            if client == "langchain-openrouter":  # it drops OpenAI Responses item ids (rs_...)
                expected = [{k: v for k, v in d.items() if not (k == "id" and v.startswith("rs_"))} for d in whole]
            assert _without_nulls(details or []) == expected, client
        elif client == "openai-node .stream()":
            # the last delta's value of each field: the whole detail list when one delta carried it, else nothing
            assert details in (None, whole), client
            assert replay.fields.get("reasoning") in (None, text), client


def test_openai_node_keeps_no_fragment_of_plain_reasoning(shared_dir: Path) -> None:
    node = CLIENTS["openai-node .stream()"]
    # DeepSeek's answer chunks carry "reasoning_content": null, so straight at it openai-node's stream() helper
    # keeps nothing; numi_mw used to drop that null and leave the last fragment, "." (sent back as
    # reasoning_content on a DeepSeek route); the end of the reasoning now clears it
    deepseek = recording(shared_dir, "deepseek-reasoner-reasoning-content.sse")
    assert node(sse_chunks(deepseek)).fields == {}
    assert node(sse_chunks(rewrite(deepseek))).fields == {}
    # Groq's and xAI's answer chunks carry no reasoning field: straight at them the helper keeps the last
    # fragment; through numi_mw nothing
    groq = recording(shared_dir, "groq-gpt-oss-120b-reasoning-tool-call.sse")
    assert node(sse_chunks(groq)).fields == {"reasoning": '".', "channel": "analysis"}
    assert node(sse_chunks(rewrite(groq))).fields == {"channel": "analysis"}
    xai = recording(shared_dir, "xai-grok-3-mini-reasoning-content.stream.jsonl")
    assert node(sse_chunks(xai)).fields == {"reasoning_content": "k"}
    assert node(sse_chunks(rewrite(xai))).fields == {}
    # clients that concatenate see the null fields as nothing: the reasoning is shown once
    text, _ = _source(sse_chunks(xai))
    assert CLIENTS["openai-python .stream()"](sse_chunks(rewrite(xai))).fields == {
        "reasoning": text,
        "reasoning_details": [{"type": "reasoning.text", "text": text, "index": 0, "format": "unknown"}],
    }


def test_openai_node_keeps_a_detail_sent_whole_in_one_delta(shared_dir: Path) -> None:
    # OpenRouter's o3 sends its encrypted detail in one delta and no field after it: no end is added
    body = recording(shared_dir, "openrouter-o3-encrypted-reasoning-details.sse")
    assert rewrite(body) == body
    (detail,) = _source(sse_chunks(body))[1]
    assert CLIENTS["openai-node .stream()"](sse_chunks(body)).fields == {"reasoning_details": [detail]}


def test_openai_node_keeps_reasoning_text_that_came_in_one_delta() -> None:
    # vLLM and llama.cpp send a short reasoning in one delta, and their answer chunks carry no reasoning field:
    # straight at them openai-node's helper keeps the whole text; through numi_mw it keeps it too (only the
    # details, whose format followed in a later delta, are emptied)
    node = CLIENTS["openai-node .stream()"]
    text = "Two plus two is four."
    for finish in (_data({"content": "4"}) + _data({}, "stop"), _data({}, "length")):
        body = _data({"role": "assistant", "reasoning_content": text}) + finish
        assert node(sse_chunks(body)).fields == {"reasoning_content": text}
        assert node(sse_chunks(rewrite(body))) == Replay(text, {"reasoning": text})
    # a signed block whose text came in one delta and its signature in the next: the text stays, the details
    # (the signature's entry alone) are emptied
    body = _data({"reasoning_details": [{"type": "reasoning.text", "text": text, "format": ACV1}]}) + _data(
        {"reasoning_details": [{"type": "reasoning.text", "signature": "SIG", "format": ACV1}]}
    )
    assert [d for d, _ in choice_deltas(rewrite(body))][1:] == [
        {"reasoning_details": [{"type": "reasoning.text", "signature": "SIG", "format": ACV1, "index": 0}]},
        {"reasoning_details": []},
    ]
    assert node(sse_chunks(rewrite(body))) == Replay(text, {"reasoning": text})


# --- the shape's rules on small streams ------------------------------------------------------------------------


def _data(delta: dict[str, Any], finish: str | None = None) -> bytes:
    chunk = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def test_a_placeholder_opens_the_next_block_with_its_fields() -> None:
    # two thinking blocks; the second opens with a placeholder that carries an id its text fragments lack
    body = b"".join(
        _data({"reasoning_details": [d]})
        for d in [
            {"type": "reasoning.text", "text": "", "signature": "", "format": ACV1, "index": 0},
            {"type": "reasoning.text", "text": "One.", "format": ACV1, "index": 0},
            {"type": "reasoning.text", "signature": "SIG_1", "format": ACV1, "index": 0},
            {"type": "reasoning.text", "text": "", "signature": "", "format": ACV1, "id": "block-2", "index": 1},
            {"type": "reasoning.text", "text": "Two.", "format": ACV1, "index": 1},
            {"type": "reasoning.text", "signature": "SIG_2", "format": ACV1, "index": 1},
        ]
    ) + _data({"content": "Done."})
    chunks = sse_chunks(rewrite(body))
    assert [e for d, _ in choice_deltas(rewrite(body)) for e in d.get("reasoning_details") or []] == [
        {"type": "reasoning.text", "text": "One.", "index": 0},
        {"type": "reasoning.text", "signature": "SIG_1", "format": ACV1, "index": 0},
        {"type": "reasoning.text", "text": "Two.", "id": "block-2", "index": 1},
        {"type": "reasoning.text", "signature": "SIG_2", "format": ACV1, "index": 1},
    ]
    expected = [
        {"type": "reasoning.text", "text": "One.", "signature": "SIG_1", "format": ACV1, "index": 0},
        {"type": "reasoning.text", "text": "Two.", "id": "block-2", "signature": "SIG_2", "format": ACV1, "index": 1},
    ]
    for client in DETAIL_CLIENTS - {"AI SDK openrouter"}:  # it merges consecutive text details whatever their index
        assert _without_nulls(CLIENTS[client](chunks).fields["reasoning_details"]) == expected, client


def test_a_detail_that_is_never_signed_gets_its_format_before_the_next_detail() -> None:
    body = b"".join(
        _data({"reasoning_details": [d]})
        for d in [
            {"type": "reasoning.text", "text": "Plan", "format": "google-gemini-v1", "index": 0},
            {"type": "reasoning.text", "text": " it.", "format": "google-gemini-v1", "index": 0},
            {"type": "reasoning.encrypted", "data": "ENC", "format": "google-gemini-v1", "index": 0},
        ]
    ) + _data({"content": "Done."})
    assert [d for d, _ in choice_deltas(rewrite(body))] == [
        {"reasoning_details": [{"type": "reasoning.text", "text": "Plan", "index": 0}], "reasoning": "Plan"},
        {"reasoning_details": [{"type": "reasoning.text", "text": " it.", "index": 0}], "reasoning": " it."},
        {
            "reasoning_details": [
                {"type": "reasoning.text", "format": "google-gemini-v1", "index": 0},
                {"type": "reasoning.encrypted", "data": "ENC", "format": "google-gemini-v1", "index": 1},
            ]
        },
        {"reasoning": None, "reasoning_details": []},
        {"content": "Done."},
    ]
    expected = [
        {"type": "reasoning.text", "text": "Plan it.", "format": "google-gemini-v1", "index": 0},
        {"type": "reasoning.encrypted", "data": "ENC", "format": "google-gemini-v1", "index": 1},
    ]
    chunks = sse_chunks(rewrite(body))
    for client in ("openai-python raw (spec rebuild)", "openai-python .stream()", "langchain-openrouter"):
        assert CLIENTS[client](chunks).fields["reasoning_details"] == expected, client
    pydantic = CLIENTS["pydantic-ai OpenRouter"](chunks).fields["reasoning_details"]
    assert _without_nulls(pydantic) == expected
