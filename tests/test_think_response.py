"""Reasoning markup in ``content`` through the response side: the switch from reasoning fields to tags, harmony
tool calls, and which ``think_start`` a request gets (``response.think_tags_for``, the sidecar)."""

from __future__ import annotations

import copy
import json
from itertools import pairwise
from typing import Any

import httpx
import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from numi_mw.catalog_files import default_catalog
from numi_mw.core.catalog import CatalogError, load_catalog
from numi_mw.core.chunks import ChunkNormalizer
from numi_mw.core.details import rebuild_reasoning_details
from numi_mw.core.providers import provider_rules
from numi_mw.core.request import prepare_request
from numi_mw.core.response import think_tags_for
from numi_mw.core.think import ThinkTags
from numi_mw.proxy.app import create_app
from tests.response_support import client_view, general_path_only, rewrite, rewrite_json, sse_chunks


def data(body: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "chatcmpl-7", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def stream(*deltas: dict[str, Any], finish: str = "stop") -> bytes:
    return b"".join(data(chunk(d)) for d in deltas) + data(chunk({}, finish)) + b"data: [DONE]\n\n"


def every_split(body: bytes, think: ThinkTags) -> bytes:
    whole = rewrite(body, think=think)
    for cut in range(1, len(body)):
        assert rewrite(body, think=think, cuts=(cut,)) == whole, f"split at byte {cut}"
    return whole


# --- from reasoning fields to tagged text ------------------------------------------------------------------------


@pytest.mark.parametrize("start", ["content", "auto", "reasoning"])
def test_the_end_of_the_reasoning_and_its_closing_tag_in_content(start: str) -> None:
    # a server whose parser ends the reasoning late: reasoning_content, then the rest and the tag in content
    tail = " more.</think>\n\nThe answer."
    for i in range(len(tail) + 1):
        body = stream(
            {"role": "assistant", "reasoning_content": "Let me"},
            {"reasoning_content": " think"},
            {"content": tail[:i]},
            {"content": tail[i:]},
        )
        view = client_view(sse_chunks(rewrite(body, think=ThinkTags(start=start))))  # type: ignore[arg-type]
        assert (view.reasoning, view.content) == ("Let me think more.", "The answer."), i
        assert rebuild_reasoning_details(view.entries) == [
            {"type": "reasoning.text", "text": "Let me think more.", "format": "unknown", "index": 0}
        ]
    every_split(body, ThinkTags())


def test_a_parsed_stream_keeps_its_answer_and_holds_it_at_most_the_bound() -> None:
    answer = ["Three", " r's."] + [" More words."] * 10
    body = stream({"reasoning_content": "Spell it out."}, *({"content": piece} for piece in answer))
    out = every_split(body, ThinkTags())
    view = client_view(sse_chunks(out))
    assert (view.reasoning, view.content) == ("Spell it out.", "".join(answer))
    # the held text goes out as soon as it is longer than the bound (64 characters), not at the end
    contents = [c["choices"][0]["delta"].get("content") for c in sse_chunks(out)]
    first = next(i for i, c in enumerate(contents) if c)
    assert contents[first] == "".join(answer[:7]) and len(contents[first]) > 64 >= len("".join(answer[:6]))
    assert contents[first + 1 :] == [*answer[7:], None]


def test_a_buffered_answer_after_reasoning_content_is_split_as_its_stream() -> None:
    body = json.dumps(
        {
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": " more.</think>\n\nThe answer.",
                        "reasoning_content": "Let me think",
                    },
                    "finish_reason": "stop",
                }
            ]
        }
    ).encode()
    message = json.loads(rewrite_json(body, think=ThinkTags()))["choices"][0]["message"]
    assert (message["reasoning"], message["content"]) == ("Let me think more.", "The answer.")
    assert message["reasoning_details"] == [
        {"type": "reasoning.text", "text": "Let me think more.", "format": "unknown"}
    ]


def test_the_echo_of_tagged_reasoning_beside_its_fields_is_still_one_copy() -> None:
    # llama.cpp's deepseek-legacy format: the first chunk carries both, tag and reasoning_content
    body = stream(
        {"role": "assistant", "content": "<think>Spell", "reasoning_content": "Spell"},
        {"content": " it", "reasoning_content": " it"},
        {"content": "</think>\n\nThree."},
    )
    view = client_view(sse_chunks(every_split(body, ThinkTags())))
    assert (view.reasoning, view.content) == ("Spell it", "Three.")


def buffered(content: str, **message: Any) -> dict[str, Any]:
    """The normalized message of a buffered completion whose message has ``content`` and ``message``."""
    body = {
        "id": "chatcmpl-7",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content, **message}}],
    }
    normalized = json.loads(rewrite_json(json.dumps(body).encode(), think=ThinkTags()))
    return normalized["choices"][0]["message"]  # type: ignore[no-any-return]


CALL = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}
ARGUMENTS = {"index": 0, "function": {"arguments": '{"city":"Lisbon"}'}}
THINK_DETAIL = {"type": "reasoning.text", "text": "think", "index": 0}
THINK_FORMAT = {"type": "reasoning.text", "format": "unknown", "index": 0}  # the detail's last entry
END = {"reasoning_details": []}  # the end of the reasoning before the answer ("think" came whole in one delta)


@pytest.mark.parametrize("start", ["content", "auto", "reasoning"])
def test_text_held_after_reasoning_fields_goes_out_before_the_tool_calls(start: str) -> None:
    body = stream(
        {"reasoning_content": "think"},
        {"content": "Let me check."},
        {"tool_calls": [CALL]},
        {"tool_calls": [ARGUMENTS]},
        finish="tool_calls",
    )
    assert sse_chunks(every_split(body, ThinkTags(start=start))) == [  # type: ignore[arg-type]
        chunk({"reasoning": "think", "reasoning_details": [THINK_DETAIL]}),
        chunk({"reasoning_details": [THINK_FORMAT]}),
        chunk(END),
        chunk({"content": "Let me check."}),
        chunk({"tool_calls": [CALL]}),
        chunk({"tool_calls": [ARGUMENTS]}),
        chunk({}, "tool_calls"),
    ]
    # the buffered body of the same answer agrees
    message = buffered("Let me check.", reasoning_content="think", tool_calls=[CALL])
    assert (message["reasoning"], message["content"], message["tool_calls"]) == ("think", "Let me check.", [CALL])


def test_held_text_goes_out_ahead_of_anything_that_is_not_content_or_reasoning() -> None:
    # the tool call in the same chunk as the held text's end: one delta, the content first
    body = stream({"reasoning_content": "think"}, {"content": "Let me"}, {"content": " check.", "tool_calls": [CALL]})
    assert sse_chunks(every_split(body, ThinkTags())) == [
        chunk({"reasoning": "think", "reasoning_details": [THINK_DETAIL]}),
        chunk({"reasoning_details": [THINK_FORMAT]}),
        chunk(END),
        chunk({"content": "Let me check.", "tool_calls": [CALL]}),
        chunk({}, "stop"),
    ]
    # a refusal
    body = stream({"reasoning_content": "think"}, {"content": "No."}, {"refusal": "I can't help with that."})
    assert sse_chunks(every_split(body, ThinkTags()))[3:5] == [
        chunk({"content": "No."}),
        chunk({"refusal": "I can't help with that."}),
    ]
    # auto start's hold, and a partial tag at the end of content
    body = stream({"content": "Checking"}, {"tool_calls": [CALL]})
    assert sse_chunks(every_split(body, ThinkTags(start="auto")))[:2] == [
        chunk({"content": "Checking"}),
        chunk({"tool_calls": [CALL]}),
    ]
    body = stream({"content": "Checking <th"}, {"tool_calls": [CALL]})
    assert sse_chunks(every_split(body, ThinkTags()))[:3] == [
        chunk({"content": "Checking "}),
        chunk({"content": "<th"}),
        chunk({"tool_calls": [CALL]}),
    ]


def test_empty_fields_and_metadata_do_not_end_the_hold() -> None:
    body = stream(
        {"reasoning_content": "Let me", "channel": "analysis"},
        {"content": " think", "refusal": "", "tool_calls": None},
        {"content": "", "tool_calls": [], "channel": "final"},
        {"content": ".</think>\n\nThe answer."},
    )
    view = client_view(sse_chunks(every_split(body, ThinkTags())))
    assert (view.reasoning, view.content) == ("Let me think.", "The answer.")


# --- tagged reasoning that repeats the reasoning fields --------------------------------------------------------


def test_a_streamed_echo_after_the_fields_is_dropped_as_in_the_buffered_body() -> None:
    body = (
        b'data: {"choices":[{"index":0,"delta":{"reasoning_content":"R"},"finish_reason":null}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{"content":"<think>R</think>Answer"},"finish_reason":null}]}\n\n'
    )
    assert every_split(body, ThinkTags()) == (
        b'data: {"choices":[{"index":0,"delta":{"reasoning":"R","reasoning_details":[{"type":"reasoning.text",'
        b'"text":"R","index":0}]},"finish_reason":null}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{"reasoning_details":[{"type":"reasoning.text","format":"unknown",'
        b'"index":0}]},"finish_reason":null}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{"reasoning_details":[]},"finish_reason":null}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{"content":"Answer"},"finish_reason":null}]}\n\n'
    )
    message = buffered("<think>R</think>Answer", reasoning_content="R")
    assert (message["reasoning"], message["content"]) == ("R", "Answer")


@pytest.mark.parametrize(
    ("fields", "content", "reasoning", "answer"),
    [
        (["Spell", " it out."], ["<think>\nSpell it", " out.\n</think>\n\nThree."], "Spell it out.", "Three."),
        (["Spell it out."], ["<think>Spell it", " now.</think>Three."], "Spell it out.Spell it now.", "Three."),
        (["Spell it out."], ["<think>Spell</think>", "Three."], "Spell it out.Spell", "Three."),  # shorter
        (["R"], ["<think>R2</think>Answer"], "RR2", "Answer"),  # runs past the fields
        (["R"], ["<think>R</think>A<think>R</think>B"], "RR", "AB"),  # a new phase after the content
    ],
)
def test_tagged_reasoning_after_the_fields_gives_the_buffered_strings(
    fields: list[str], content: list[str], reasoning: str, answer: str
) -> None:
    body = stream(*({"reasoning_content": f} for f in fields), *({"content": c} for c in content))
    view = client_view(sse_chunks(every_split(body, ThinkTags())))
    assert (view.reasoning, view.content) == (reasoning, answer)
    message = buffered("".join(content), reasoning_content="".join(fields))
    assert (message["reasoning"], message["content"]) == (reasoning, answer)


_FIELD_TEXT = st.text(alphabet="ab <\n", min_size=1, max_size=12)
_ANSWER = st.text(alphabet="xy <\n", max_size=8)
_WS = st.sampled_from(["", "\n", "\n\n", " "])


@st.composite
def _mixed_streams(draw: st.DrawFn) -> tuple[str, str, list[tuple[str, str]]]:
    """A message (field reasoning, content) and its stream as (field text, content text) chunks: the fields
    first and then the content (tags echoing them, differing, shorter, longer, the switch's tail, none, twice),
    or each chunk carrying both (llama.cpp's deepseek-legacy), the tagged text never ahead of its fields."""
    fields, other, answer = draw(_FIELD_TEXT), draw(_FIELD_TEXT), draw(_ANSWER)
    w1, w2, w3 = draw(_WS), draw(_WS), draw(_WS)
    echo = f"<think>{w1}{fields}{w2}</think>{w3}{answer}"

    def cut(text: str) -> list[str]:
        bounds = [0, *sorted(draw(st.lists(st.integers(0, len(text)), max_size=4))), len(text)]
        return [text[a:b] for a, b in pairwise(bounds)]

    if draw(st.booleans()):  # deepseek-legacy: each chunk its field text and the content up to the same point
        chunks: list[tuple[str, str]] = []
        f0 = c0 = 0
        for f in [*sorted(draw(st.lists(st.integers(0, len(fields)), max_size=5))), len(fields)]:
            c = draw(st.integers(c0, len("<think>") + len(w1) + f))
            chunks.append((fields[f0:f], echo[c0:c]))
            f0, c0 = f, c
        chunks.append(("", echo[c0:]))
        return fields, echo, chunks
    content = draw(
        st.sampled_from(
            [
                echo,
                f"<think>{fields}{other}</think>{answer}",
                f"<think>{fields[: len(fields) // 2]}</think>{w3}{answer}",
                f"<think>{other}</think>{w3}{answer}",
                f"{other}</think>{w3}{answer}",
                f"{fields}{w2}</think>{w3}{answer}",
                answer,
                f"<think>{fields}</think>{answer}<think>{w1}{fields}</think>{answer}",
                f"{answer}<think>{fields}</think>{answer}",
            ]
        )
    )
    return fields, content, [(f, "") for f in cut(fields)] + [("", c) for c in cut(content)]


@settings(max_examples=300, deadline=None)
@given(
    drawn=_mixed_streams(),
    start=st.sampled_from(["content", "auto", "reasoning"]),
    cuts=st.lists(st.integers(1, 2000), min_size=1, max_size=3),
)
def test_any_split_of_a_stream_mixing_fields_and_tags_gives_the_buffered_strings(
    drawn: tuple[str, str, list[tuple[str, str]]], start: str, cuts: list[int]
) -> None:
    fields, content, chunks = drawn
    deltas = [{**({"reasoning_content": f} if f else {}), **({"content": c} if c else {})} for f, c in chunks]
    body = stream(*(d for d in deltas if d))
    think = ThinkTags(start=start)  # type: ignore[arg-type]
    whole = rewrite(body, think=think)
    assert rewrite(body, think=think, cuts=tuple(sorted({min(c, len(body) - 1) for c in cuts}))) == whole
    view = client_view(sse_chunks(whole))
    message = {"role": "assistant", "content": content, "reasoning_content": fields}
    completion = {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
    split = json.loads(rewrite_json(json.dumps(completion).encode(), think=think))["choices"][0]["message"]
    assert (view.reasoning, view.content) == (split.get("reasoning", ""), split["content"])


# --- gpt-oss harmony tool calls ----------------------------------------------------------------------------------

HARMONY_CALL = (
    "<|channel|>analysis<|message|>Need the weather.<|end|>"
    '<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Lisbon"}'
    "<|call|>"
)


def test_a_harmony_tool_call_goes_out_as_tool_calls() -> None:
    pieces = [HARMONY_CALL[i : i + 9] for i in range(0, len(HARMONY_CALL), 9)]
    body = stream({"role": "assistant", "content": ""}, *({"content": p} for p in pieces))
    out = every_split(body, ThinkTags())
    view = client_view(sse_chunks(out))
    assert (view.reasoning, view.content, view.finish_reason) == ("Need the weather.", "", "tool_calls")
    call = {"index": 0, "id": "call_chatcmpl-7_0", "type": "function"}
    expected = [{**call, "function": {"name": "get_weather", "arguments": '{"city":"Lisbon"}'}}]
    assert view.sdk_message["tool_calls"] == expected
    assert view.sdk2_message["tool_calls"] == expected
    for c in sse_chunks(out):
        assert "<|" not in (c["choices"][0]["delta"].get("content") or "")
    # with reasoning excluded the tool call stays
    excluded = client_view(sse_chunks(rewrite(body, think=ThinkTags(), exclude=True)))
    assert (excluded.reasoning, excluded.sdk_message["tool_calls"]) == ("", expected)


def test_a_buffered_harmony_tool_call() -> None:
    message = {"role": "assistant", "content": HARMONY_CALL}
    body = json.dumps({"id": "chatcmpl-9", "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})
    choice = json.loads(rewrite_json(body.encode(), think=ThinkTags()))["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_chatcmpl-9_0",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Lisbon"}'},
            }
        ],
        "reasoning": "Need the weather.",
        "reasoning_details": [{"type": "reasoning.text", "text": "Need the weather.", "format": "unknown"}],
    }


# --- which start a request gets -------------------------------------------------------------------------------


def test_think_tags_for_an_explicit_start_wins_over_the_route_and_the_route_over_the_default() -> None:
    local = provider_rules("local")
    assert think_tags_for(local) == ThinkTags()
    assert think_tags_for(local, route_start="reasoning") == ThinkTags(start="reasoning")
    assert think_tags_for(local, None, "content", route_start="reasoning") == ThinkTags(start="content")
    assert think_tags_for(local, None, "auto") == ThinkTags(start="auto")
    own = ThinkTags(families=(("[[", "]]"),))
    assert think_tags_for(local, own, "auto", route_start="reasoning") is own
    assert think_tags_for(provider_rules("openrouter"), route_start="reasoning") is None
    assert think_tags_for(provider_rules("openrouter"), True, route_start="reasoning") == ThinkTags(start="reasoning")


CATALOG = """
[[providers]]
name = "gpu-box"
base_url = "http://gpu-box.test/v1"
rules = "local"

[[models]]
id = "Qwen/QwQ-32B"
think_start = "reasoning"

[[models.endpoints]]
tag = "gpu-box/vllm"
provider = "gpu-box"

[[models]]
id = "vendor/other"

[[models.endpoints]]
tag = "gpu-box/vllm"
provider = "gpu-box"
"""


@pytest.mark.parametrize(
    ("model", "think_start", "expected"),
    [
        ("Qwen/QwQ-32B", None, ("Plan.", "Done.")),  # the catalog model's think_start
        ("vendor/other", None, ("", "Plan.Done.")),  # a model without one: content, the tag (and its newlines) dropped
        ("Qwen/QwQ-32B", "content", ("", "Plan.Done.")),  # an explicit --think-start wins
        ("vendor/other", "auto", ("Plan.", "Done.")),
    ],
)
def test_the_sidecar_takes_the_catalog_models_think_start(
    model: str, think_start: Any, expected: tuple[str, str]
) -> None:
    body = stream({"role": "assistant", "content": "Plan."}, {"content": "</think>\n\nDone."})

    def upstream(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=httpx.ByteStream(body), headers={"content-type": "text/event-stream"})

    catalog = load_catalog(CATALOG, "catalog.toml")
    app = create_app(catalog=catalog, transport=httpx.MockTransport(upstream), think_start=think_start)
    with TestClient(app) as client:
        response = client.post("/v1/chat/completions", json={"model": model, "stream": True, "messages": []})
    view = client_view(sse_chunks(response.content))
    assert (view.reasoning, view.content) == expected


# --- the think fast path gives what the general path gives ------------------------------------------------------


_CONTENT = st.sampled_from(
    [
        "",
        "a",
        "b c",
        "\n",
        "\n\n",
        "<think>",
        "</think>",
        "<th",
        "ink>",
        "<think>\nx",
        "y</think>\n\nz",
        "<|channel|>",
        "analysis<|message|>r",
        "<|end|>",
        "<|start|>assistant<|channel|>final<|message|>f",
        "to=functions.g",
        "r",
        "<think>r</think>",
    ]
)
_THINK_DELTA = st.fixed_dictionaries(
    {},
    optional={
        "role": st.just("assistant"),
        "content": st.one_of(st.none(), _CONTENT),
        "reasoning_content": st.sampled_from(["", "r"]),
        "tool_calls": st.sampled_from([[], None, [{"index": 0, "function": {"arguments": "{}"}}]]),
        "refusal": st.sampled_from(["", "No."]),
    },
)
_THINK_CHOICE = st.fixed_dictionaries(
    {"index": st.just(0), "delta": _THINK_DELTA, "finish_reason": st.sampled_from([None, None, None, None, "stop"])}
)


@settings(max_examples=400, deadline=None)
@given(
    choices=st.lists(_THINK_CHOICE, min_size=1, max_size=10),
    start=st.sampled_from(["content", "reasoning", "auto"]),
    exclude=st.booleans(),
)
def test_the_think_fast_path_gives_what_the_general_path_gives(
    choices: list[dict[str, Any]], start: str, exclude: bool
) -> None:
    think = ThinkTags(start=start)  # type: ignore[arg-type]
    fast, general = ChunkNormalizer(exclude=exclude, think=think), general_path_only(exclude=exclude, think=think)
    for choice in choices:
        body = {"id": "x", "choices": [choice], "usage": None}
        # compared as bytes, so that the key order (what the client receives) counts too
        assert msgspec.json.encode(fast.normalize(copy.deepcopy(body))) == msgspec.json.encode(
            general.normalize(copy.deepcopy(body))
        )
    assert msgspec.json.encode(fast.finish()) == msgspec.json.encode(general.finish())


# --- the catalog field ------------------------------------------------------------------------------------------


def test_a_catalog_model_carries_its_think_start_to_the_route() -> None:
    catalog = load_catalog(CATALOG, "catalog.toml")
    for model, start in (("Qwen/QwQ-32B", "reasoning"), ("vendor/other", None), ("vendor/unlisted", None)):
        prepared = prepare_request(json.dumps({"model": model, "messages": []}).encode(), catalog)
        assert prepared.route.think_start == start, model
    packaged = default_catalog()
    prepared = prepare_request(b'{"model": "Qwen/QwQ-32B", "messages": []}', packaged)
    assert (prepared.route.rules.name, prepared.route.think_start) == ("local", "reasoning")
    assert think_tags_for(prepared.route.rules, route_start=prepared.route.think_start) == ThinkTags(start="reasoning")


def test_a_think_start_the_splitter_does_not_know_is_refused_at_load() -> None:
    with pytest.raises(CatalogError) as caught:
        load_catalog(CATALOG.replace('think_start = "reasoning"', 'think_start = "maybe"'), "catalog.toml")
    assert str(caught.value) == (
        "catalog.toml: models[0] (id \"Qwen/QwQ-32B\"): think_start: invalid enum value 'maybe'; "
        "use one of: content, reasoning, auto"
    )


def test_a_late_closing_tag_in_the_chunk_that_carries_the_fields_ends_that_reasoning() -> None:
    one = stream({"reasoning_content": "think", "content": " more</think>ans"})
    two = stream({"reasoning_content": "think"}, {"content": " more</think>ans"})
    for body in (one, two):
        view = client_view(sse_chunks(every_split(body, ThinkTags())))
        assert (view.reasoning, view.content) == ("think more", "ans")
    message = buffered(" more</think>ans", reasoning_content="think")
    assert (message["reasoning"], message["content"]) == ("think more", "ans")


def test_harmony_tool_calls_and_the_upstreams_own_never_share_an_index() -> None:
    body = stream(
        {"content": '<|channel|>commentary to=functions.a<|message|>{"x":1}<|call|>'},
        {"tool_calls": [{"index": 0, "id": "c2", "type": "function", "function": {"name": "b", "arguments": ""}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"y":2}'}}]},
        {"tool_calls": [{"index": 1, "id": "c3", "type": "function", "function": {"name": "c", "arguments": "{}"}}]},
        finish="tool_calls",
    )
    calls: dict[int, dict[str, str]] = {}
    for chunk_ in sse_chunks(every_split(body, ThinkTags())):
        for choice in chunk_.get("choices", []):
            for call in choice["delta"].get("tool_calls", []):
                merged = calls.setdefault(call["index"], {"name": "", "arguments": ""})
                merged["name"] += call.get("function", {}).get("name", "")
                merged["arguments"] += call.get("function", {}).get("arguments", "")
    assert calls == {
        0: {"name": "a", "arguments": '{"x":1}'},
        1: {"name": "b", "arguments": '{"y":2}'},
        2: {"name": "c", "arguments": "{}"},
    }
