"""Chunk normalization (spec 004 "Streaming"), exact bytes for the spec's own example and each rule."""

from __future__ import annotations

import copy
import json
from typing import Any

import msgspec
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from numi_mw.core.chunks import MAX_CHOICES, UNCHANGED, ChunkNormalizer
from numi_mw.core.details import rebuild_reasoning_details, visible_text
from numi_mw.core.think import ThinkStart, ThinkTags
from tests.response_support import client_view, general_path_only, rewrite, sse_chunks

ENVELOPE = '"id":"6f1c2b8e-3d4a-4f5b-9c7d-2e8a1b0c9d3f","object":"chat.completion.chunk","created":1790000000,"model":"openai/gpt-6-luna"'


def event(delta: str, finish: str = "null") -> bytes:
    return f'data: {{{ENVELOPE},"choices":[{{"index":0,"delta":{delta},"finish_reason":{finish}}}]}}\n\n'.encode()


def data(body: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}


CLOSE_CHUNKS = [
    chunk({"reasoning_details": [{"type": "reasoning.text", "format": "unknown", "index": 0}]}),
    chunk({"reasoning_details": []}),
]
"""What the end of a stream adds after plain reasoning in one delta that nothing closed (choice 0, no other envelope
field): the detail's format as its last entry, then the end of its details; ``reasoning`` came whole in one delta
and is left as it is (``docs/streaming.md``)."""
CLOSE = b"".join(data(c) for c in CLOSE_CHUNKS)
CLOSE_MANY = data(CLOSE_CHUNKS[0]) + data(chunk({"reasoning": None, "reasoning_details": []}))
"""The same after plain reasoning in more than one delta: ``reasoning`` is cleared too."""


SPEC_STREAM = (
    event(
        '{"role":"assistant","reasoning":"Spell it out: ","reasoning_details":[{"type":"reasoning.text","text":"Spell it out: "}]}'
    )
    + event(
        '{"reasoning":"s, t, r, a, w, b, e, r, r, y.","reasoning_details":[{"type":"reasoning.text","text":"s, t, r, a, w, b, e, r, r, y."}]}'
    )
    + event('{"content":"Three."}')
    + event("{}", '"stop"')
)


def test_spec_example_gets_indices_and_the_end_of_its_reasoning() -> None:
    out = rewrite(SPEC_STREAM + b"data: [DONE]\n\n")
    assert out == (
        event(
            '{"role":"assistant","reasoning":"Spell it out: ","reasoning_details":[{"type":"reasoning.text","text":"Spell it out: ","index":0}]}'
        )
        + event(
            '{"reasoning":"s, t, r, a, w, b, e, r, r, y.","reasoning_details":[{"type":"reasoning.text","text":"s, t, r, a, w, b, e, r, r, y.","index":0}]}'
        )
        # before the first chunk that shows the answer, the end of the reasoning for clients that keep the last
        # delta's value of a field; the answer's chunk leaves as it came
        + event('{"reasoning":null,"reasoning_details":[]}')
        + event('{"content":"Three."}')
        + event("{}", '"stop"')
        + b"data: [DONE]\n\n"
    )
    view = client_view(sse_chunks(out))
    assert view.reasoning == "Spell it out: s, t, r, a, w, b, e, r, r, y."
    assert rebuild_reasoning_details(view.entries) == [
        {"type": "reasoning.text", "text": "Spell it out: s, t, r, a, w, b, e, r, r, y.", "index": 0}
    ]


def test_events_that_need_no_change_leave_as_their_bytes() -> None:
    body = (
        b": OPENROUTER PROCESSING\n\n"
        + event('{"content":"Three."}')
        + b'data: {"usage":{"completion_tokens":3}}\n\nid: 7\ndata: [DONE]\n\n'
    )
    assert rewrite(body) == body


def test_reasoning_content_becomes_reasoning_plus_one_detail() -> None:
    out = rewrite(
        data(chunk({"role": "assistant", "content": None, "reasoning_content": "Hm"}))
        + data(chunk({"content": None, "reasoning_content": "m."}))
    )
    assert sse_chunks(out) == [
        chunk(
            {
                "role": "assistant",
                "content": None,
                "reasoning": "Hm",
                "reasoning_details": [{"type": "reasoning.text", "text": "Hm", "index": 0}],
            }
        ),
        chunk(
            {
                "content": None,
                "reasoning": "m.",
                "reasoning_details": [{"type": "reasoning.text", "text": "m.", "index": 0}],
            }
        ),
        # the end of the stream: the detail's format as its last entry, then the end of the reasoning
        chunk({"reasoning_details": [{"type": "reasoning.text", "format": "unknown", "index": 0}]}),
        chunk({"reasoning": None, "reasoning_details": []}),
    ]


def test_empty_reasoning_content_is_removed_without_a_detail() -> None:
    out = rewrite(data(chunk({"role": "assistant", "content": None, "reasoning_content": ""})))
    assert sse_chunks(out) == [chunk({"role": "assistant", "content": None})]


def test_non_growing_fields_once_per_detail_and_signature_completes_the_text() -> None:
    body = (
        data(
            chunk(
                {
                    "reasoning": "A",
                    "reasoning_details": [
                        {"type": "reasoning.text", "text": "A", "format": "anthropic-claude-v1", "index": 0}
                    ],
                }
            )
        )
        + data(
            chunk(
                {
                    "reasoning": "B",
                    "reasoning_details": [
                        {"type": "reasoning.text", "text": "B", "format": "anthropic-claude-v1", "index": 0}
                    ],
                }
            )
        )
        + data(
            chunk(
                {
                    "reasoning_details": [
                        {"type": "reasoning.encrypted", "data": "ENC==", "id": "rs_1", "format": "openai-responses-v1"}
                    ]
                }
            )
        )
        + data(
            chunk(
                {
                    "reasoning_details": [
                        {"type": "reasoning.text", "signature": "SIG_A", "format": "anthropic-claude-v1", "index": 0}
                    ]
                }
            )
        )
        + data(chunk({"reasoning_details": [{"type": "reasoning.text", "format": "anthropic-claude-v1"}]}))
    )
    chunks = sse_chunks(rewrite(body))
    assert [c["choices"][0]["delta"] for c in chunks] == [
        {"reasoning": "A", "reasoning_details": [{"type": "reasoning.text", "text": "A", "index": 0}]},
        {"reasoning": "B", "reasoning_details": [{"type": "reasoning.text", "text": "B", "index": 0}]},
        {
            "reasoning_details": [
                # the text detail's format, held for its last entry, goes before the next detail starts
                {"type": "reasoning.text", "format": "anthropic-claude-v1", "index": 0},
                {
                    "type": "reasoning.encrypted",
                    "data": "ENC==",
                    "id": "rs_1",
                    "format": "openai-responses-v1",
                    "index": 1,
                },
            ]
        },
        {"reasoning_details": [{"type": "reasoning.text", "signature": "SIG_A", "index": 0}]},
        {"reasoning": None, "reasoning_details": []},
    ]
    view = client_view(chunks)
    expected = [
        {"type": "reasoning.text", "text": "AB", "index": 0, "format": "anthropic-claude-v1", "signature": "SIG_A"},
        {"type": "reasoning.encrypted", "data": "ENC==", "id": "rs_1", "format": "openai-responses-v1", "index": 1},
    ]
    assert rebuild_reasoning_details(view.entries) == expected
    assert view.sdk_message["reasoning_details"] == expected
    assert view.sdk2_message["reasoning_details"] == expected


def test_details_only_stream_gets_delta_reasoning() -> None:
    body = data(chunk({"reasoning_details": [{"type": "reasoning.text", "text": "Look.", "id": "reasoning-text-1"}]}))
    assert sse_chunks(rewrite(body)) == [
        chunk(
            {
                "reasoning_details": [
                    {"type": "reasoning.text", "text": "Look.", "id": "reasoning-text-1", "index": 0}
                ],
                "reasoning": "Look.",
            }
        )
    ]


def test_exclude_removes_reasoning_and_drops_chunks_left_with_nothing() -> None:
    body = (
        data(chunk({"role": "assistant", "reasoning_content": "Hm"}))
        + data(chunk({"reasoning": "x", "reasoning_details": [{"type": "reasoning.text", "text": "x"}]}))
        + data(chunk({"content": "Three."}))
        + data(chunk({}, "stop"))
        + data({"choices": [], "usage": {"completion_tokens": 9, "completion_tokens_details": {"reasoning_tokens": 7}}})
        + b"data: [DONE]\n\n"
    )
    out = rewrite(body, exclude=True)
    assert sse_chunks(out) == [
        chunk({"role": "assistant"}),
        chunk({"content": "Three."}),
        chunk({}, "stop"),
        {"choices": [], "usage": {"completion_tokens": 9, "completion_tokens_details": {"reasoning_tokens": 7}}},
    ]


def test_think_tags_split_and_held_text_goes_out_before_the_finish_chunk() -> None:
    body = (
        data(chunk({"role": "assistant", "content": "<think>ab</th"})) + data(chunk({}, "stop")) + b"data: [DONE]\n\n"
    )
    chunks = sse_chunks(rewrite(body, think=ThinkTags()))
    assert [c["choices"][0] for c in chunks] == [
        {
            "index": 0,
            "delta": {
                "role": "assistant",
                "reasoning": "ab",
                "reasoning_details": [{"type": "reasoning.text", "text": "ab", "index": 0}],
            },
            "finish_reason": None,
        },
        {
            "index": 0,
            "delta": {
                "reasoning": "</th",
                "reasoning_details": [{"type": "reasoning.text", "text": "</th", "index": 0}],
            },
            "finish_reason": None,
        },
        {
            "index": 0,
            "delta": {"reasoning_details": [{"type": "reasoning.text", "format": "unknown", "index": 0}]},
            "finish_reason": None,
        },
        {"index": 0, "delta": {"reasoning": None, "reasoning_details": []}, "finish_reason": None},
        {"index": 0, "delta": {}, "finish_reason": "stop"},  # the finish chunk keeps its empty delta
    ]


def test_a_finish_that_comes_with_the_last_reasoning_goes_after_the_end_of_the_reasoning() -> None:
    # vLLM sends the last tokens with the finish reason: reasoning ones when the output limit cuts the reasoning
    first = {"index": 0, "delta": {"reasoning_content": "a"}, "logprobs": None, "finish_reason": None}
    last = {"index": 0, "delta": {"reasoning_content": "b"}, "logprobs": None, "finish_reason": "length"}
    body = data({"id": "v", "choices": [first]}) + data({"id": "v", "choices": [last]}) + b"data: [DONE]\n\n"
    assert [c["choices"][0] for c in sse_chunks(rewrite(body))] == [
        {
            "index": 0,
            "delta": {"reasoning": "a", "reasoning_details": [{"type": "reasoning.text", "text": "a", "index": 0}]},
            "logprobs": None,
            "finish_reason": None,
        },
        {
            "index": 0,
            "delta": {"reasoning": "b", "reasoning_details": [{"type": "reasoning.text", "text": "b", "index": 0}]},
            "logprobs": None,
            "finish_reason": None,
        },
        {
            "index": 0,
            "delta": {"reasoning_details": [{"type": "reasoning.text", "format": "unknown", "index": 0}]},
            "finish_reason": None,
        },
        {"index": 0, "delta": {"reasoning": None, "reasoning_details": []}, "finish_reason": None},
        {"index": 0, "delta": {}, "finish_reason": "length"},  # last, without the tokens' logprobs
    ]
    one = data(chunk({"reasoning": "r"}, "length")) + b"data: [DONE]\n\n"  # the stream's only chunk
    assert sse_chunks(rewrite(one)) == [
        chunk({"reasoning": "r", "reasoning_details": [{"type": "reasoning.text", "text": "r", "index": 0}]}),
        *CLOSE_CHUNKS,
        chunk({}, "length"),
    ]


def test_think_tags_reasoning_and_content_in_one_chunk_go_out_in_order() -> None:
    body = data(chunk({"content": "<think>x</think>Answer"}))
    chunks = sse_chunks(rewrite(body, think=ThinkTags()))
    assert [c["choices"][0]["delta"] for c in chunks] == [
        {"reasoning": "x", "reasoning_details": [{"type": "reasoning.text", "text": "x", "index": 0}]},
        {"reasoning_details": [{"type": "reasoning.text", "format": "unknown", "index": 0}]},
        {"reasoning_details": []},  # the reasoning came whole in one delta: only its details are cleared
        {"content": "Answer"},
    ]


def test_stream_without_finish_reason_flushes_at_done() -> None:
    body = data(chunk({"content": "Hi <"})) + b"data: [DONE]\n\n"
    out = rewrite(body, think=ThinkTags())
    assert out == data(chunk({"content": "Hi "})) + data(chunk({"content": "<"})) + b"data: [DONE]\n\n"


def test_template_opened_tag_starts_in_reasoning() -> None:
    body = data(chunk({"content": "Plan.</think>\n\nDone."})) + data(chunk({}, "stop"))
    view = client_view(sse_chunks(rewrite(body, think=ThinkTags(start="reasoning"))))
    assert (view.reasoning, view.content) == ("Plan.", "Done.")  # the "\n\n" after the tag is markup


def test_several_choices_keep_their_own_state() -> None:
    body = data(
        {
            "choices": [
                {"index": 0, "delta": {"reasoning_content": "a"}, "finish_reason": None},
                {"index": 1, "delta": {"reasoning_content": "b"}, "finish_reason": None},
            ]
        }
    ) + data({"choices": [{"index": 1, "delta": {"reasoning_content": "c"}, "finish_reason": None}]})
    chunks = sse_chunks(rewrite(body))
    assert chunks[0]["choices"][1]["delta"] == {
        "reasoning": "b",
        "reasoning_details": [{"type": "reasoning.text", "text": "b", "index": 0}],
    }
    assert chunks[1]["choices"][0]["delta"] == {
        "reasoning": "c",
        "reasoning_details": [{"type": "reasoning.text", "text": "c", "index": 0}],
    }
    # the end of the stream closes each choice's reasoning
    assert [(c["choices"][0]["index"], c["choices"][0]["delta"]) for c in chunks[2:]] == [
        (0, {"reasoning_details": [{"type": "reasoning.text", "format": "unknown", "index": 0}]}),
        (0, {"reasoning_details": []}),  # choice 0's reasoning came in one delta
        (1, {"reasoning_details": [{"type": "reasoning.text", "format": "unknown", "index": 0}]}),
        (1, {"reasoning": None, "reasoning_details": []}),  # choice 1's in two
    ]


THINK_STREAM = (
    b"".join(
        data(chunk({"content": piece}))
        for piece in [
            "<th",
            "ink>\nSpell it out: ",
            "s, t, r, a, w, b, e, r, r, y.\n</th",
            "ink>",
            "\n\nThree",
            " r's.",
        ]
    )
    + data(chunk({}, "stop"))
    + b"data: [DONE]\n\n"
)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(THINK_STREAM)), max_size=12))
def test_any_chunking_gives_the_same_bytes(cuts: list[int]) -> None:
    whole = rewrite(THINK_STREAM, think=ThinkTags())
    assert rewrite(THINK_STREAM, think=ThinkTags(), cuts=tuple(sorted(cuts))) == whole
    view = client_view(sse_chunks(whole))
    assert (view.reasoning, view.content) == ("Spell it out: s, t, r, a, w, b, e, r, r, y.\n", "Three r's.")


def test_buffered_tagged_reasoning_follows_the_providers_own() -> None:
    from tests.response_support import rewrite_json

    body = b'{"choices":[{"index":0,"message":{"content":"<think>a</think>b","reasoning_content":"pre"}}]}'
    assert json.loads(rewrite_json(body, think=ThinkTags())) == {
        "choices": [
            {
                "index": 0,
                "message": {
                    "content": "b",
                    "reasoning": "prea",
                    "reasoning_details": [{"type": "reasoning.text", "text": "prea", "format": "unknown"}],
                },
            }
        ]
    }
    signed = b'{"choices":[{"index":0,"message":{"content":"<think>a</think>b","reasoning":"pre","reasoning_details":[{"type":"reasoning.text","text":"pre","signature":"S"}]}}]}'
    assert json.loads(rewrite_json(signed, think=ThinkTags()))["choices"][0]["message"] == {
        "content": "b",
        "reasoning": "prea",
        "reasoning_details": [
            {"type": "reasoning.text", "text": "pre", "signature": "S"},
            {"type": "reasoning.text", "text": "a", "format": "unknown"},
        ],
    }


def test_undecodable_or_deeply_nested_events_pass_through() -> None:
    deep = b"data: " + b'{"reasoning":' + b"[" * 5000 + b"]" * 5000 + b"}\n\n"
    broken = b'data: {"reasoning": \n\n'
    assert rewrite(deep + broken) == deep + broken


_TEXTS = st.sampled_from(["", "a", "b c"])
_FRAGMENT = st.fixed_dictionaries(
    {"type": st.sampled_from(["reasoning.text", "reasoning.text", "reasoning.summary", "reasoning.encrypted"])},
    optional={
        "text": _TEXTS,
        "signature": st.sampled_from(["", "sig"]),
        "format": st.just("anthropic-claude-v1"),
        "index": st.integers(0, 2),
        "data": st.just("enc"),
    },
)
_DELTA = st.fixed_dictionaries(
    {},
    optional={
        "role": st.just("assistant"),
        "content": st.one_of(st.none(), _TEXTS),
        "reasoning": st.one_of(st.none(), _TEXTS),
        "reasoning_content": st.one_of(st.none(), _TEXTS),
        "reasoning_details": st.one_of(st.none(), st.lists(_FRAGMENT, max_size=2)),
        "channel": st.just("analysis"),
        "tool_calls": st.one_of(
            st.none(),
            st.just([{"index": 0, "id": "c", "type": "function", "function": {"name": "f", "arguments": ""}}]),
        ),
        "refusal": st.sampled_from(["", "No."]),
    },
)
_CHOICE = st.fixed_dictionaries(
    {"index": st.just(0), "delta": _DELTA, "finish_reason": st.sampled_from([None, None, None, "stop"])},
    optional={"logprobs": st.sampled_from([None, {"content": []}])},
)


_USAGE = st.sampled_from([{}, {"usage": None}, {"usage": {"prompt_tokens": 1, "completion_tokens": 2}}])


@pytest.mark.parametrize("exclude", [False, True], ids=["shown", "excluded"])
@settings(max_examples=400, deadline=None)
@given(choices=st.lists(st.tuples(_CHOICE, _USAGE), min_size=1, max_size=8))
def test_fast_path_gives_what_the_general_path_gives(exclude: bool, choices: list[tuple[dict[str, Any], Any]]) -> None:
    fast, general = ChunkNormalizer(exclude=exclude), general_path_only(exclude=exclude)
    for choice, usage in choices:
        body = {"id": "x", "choices": [choice], **usage}
        # compared as bytes, so that the key order (what the client receives) counts too
        assert msgspec.json.encode(fast.normalize(copy.deepcopy(body))) == msgspec.json.encode(
            general.normalize(copy.deepcopy(body))
        )


@pytest.mark.parametrize("exclude", [False, True], ids=["shown", "excluded"])
def test_the_fast_path_follows_the_choices_the_general_path_follows(exclude: bool) -> None:
    fast, general = ChunkNormalizer(exclude=exclude), general_path_only(exclude=exclude)
    for index in range(MAX_CHOICES + 2):
        body = {"id": "x", "choices": [{"index": index, "delta": {"reasoning": "r"}, "finish_reason": None}]}
        out = fast.normalize(copy.deepcopy(body))
        assert msgspec.json.encode(out) == msgspec.json.encode(general.normalize(copy.deepcopy(body)))
        if exclude:
            assert out == []  # nothing but reasoning: the chunk is dropped, past the bound too
        elif index >= MAX_CHOICES:  # past the bound a choice passes as it came, its reasoning too
            assert out is UNCHANGED


def test_with_exclude_a_whole_message_in_a_stream_chunk_loses_its_reasoning_fields() -> None:
    message = {
        "role": "assistant",
        "content": "answer",
        "reasoning": "secret",
        "reasoning_details": [{"type": "reasoning.encrypted", "data": "opaque", "index": 0}],
    }
    body = {"id": "x", "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
    assert ChunkNormalizer(exclude=True).normalize(copy.deepcopy(body)) == [
        {
            "id": "x",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "answer"}, "finish_reason": "stop"}],
        }
    ]
    assert ChunkNormalizer().normalize(copy.deepcopy(body)) is UNCHANGED  # shown, it passes as it came
    odd = {"choices": [{"index": 0, "delta": "text", "message": {"reasoning_content": "R"}}]}
    assert ChunkNormalizer(exclude=True).normalize(copy.deepcopy(odd)) == [
        {"choices": [{"index": 0, "delta": "text", "message": {}}]}
    ]


@pytest.mark.parametrize("index", [MAX_CHOICES, "a", None, 1.5])
def test_with_exclude_a_choice_without_state_loses_its_reasoning_fields_and_keeps_the_rest(index: Any) -> None:
    normalizer = ChunkNormalizer(exclude=True)
    for followed in range(MAX_CHOICES):
        normalizer.normalize({"choices": [{"index": followed, "delta": {"reasoning": "r"}, "finish_reason": None}]})
    delta = {
        "reasoning_content": "R",
        "reasoning_details": [{"type": "reasoning.text", "text": "R", "signature": "sig", "index": 0}],
        "content": "answer",
    }
    body = {"id": "x", "choices": [{"index": index, "delta": delta, "finish_reason": None, "logprobs": None}]}
    assert normalizer.normalize(body) == [
        {
            "id": "x",
            "choices": [{"index": index, "delta": {"content": "answer"}, "finish_reason": None, "logprobs": None}],
        }
    ]
    role_only = {"choices": [{"index": index, "delta": {"role": "assistant", "reasoning": "R"}, "finish_reason": None}]}
    assert normalizer.normalize(role_only) == [
        {"choices": [{"index": index, "delta": {"role": "assistant"}, "finish_reason": None}]}
    ]
    shown = ChunkNormalizer()
    for followed in range(MAX_CHOICES):
        shown.normalize({"choices": [{"index": followed, "delta": {"reasoning": "r"}, "finish_reason": None}]})
    assert shown.normalize(copy.deepcopy(body)) is UNCHANGED  # shown, it passes as it came


def test_a_key_spelled_with_escapes_is_normalized_too() -> None:
    escaped = b'data: {"choices":[{"index":0,"delta":{"\\u0072easoning_content":"hm"},"finish_reason":null}]}\n\n'
    assert sse_chunks(rewrite(escaped)) == [
        chunk({"reasoning": "hm", "reasoning_details": [{"type": "reasoning.text", "text": "hm", "index": 0}]}),
        *CLOSE_CHUNKS,
    ]
    excluded = (
        b'data: {"choices":[{"index":0,"delta":{"\\u0072easoning":"hm","content":"x"},"finish_reason":null}]}\n\n'
    )
    assert sse_chunks(rewrite(excluded, exclude=True)) == [chunk({"content": "x"})]


def test_a_buffered_key_spelled_with_escapes_is_normalized_too() -> None:
    from tests.response_support import rewrite_json

    body = b'{"choices":[{"index":0,"message":{"content":"b","\\u0072easoning_content":"hm"}}]}'
    assert json.loads(rewrite_json(body)) == {
        "choices": [
            {
                "index": 0,
                "message": {
                    "content": "b",
                    "reasoning": "hm",
                    "reasoning_details": [{"type": "reasoning.text", "text": "hm", "format": "unknown"}],
                },
            }
        ]
    }


def test_a_rewritten_event_keeps_its_comment_retry_and_id_lines() -> None:
    body = (
        b": upstream note\nretry: 3000\nid: 41\n"
        b'data: {"choices":[{"index":0,"delta":{"reasoning_content":"hm"},"finish_reason":null}]}\n\n'
    )
    assert rewrite(body) == (
        b": upstream note\nretry: 3000\nid: 41\n"
        b'data: {"choices":[{"index":0,"delta":{"reasoning":"hm","reasoning_details":'
        b'[{"type":"reasoning.text","text":"hm","index":0}]},"finish_reason":null}]}\n\n' + CLOSE
    )


def test_a_broken_off_stream_ends_with_held_text_then_the_error_event() -> None:
    from numi_mw.core.errors import upstream_unavailable
    from numi_mw.core.response import JSONRewriter, ResponseOptions, SSERewriter, choose_rewriter

    rewriter = SSERewriter(ResponseOptions(think=ThinkTags()))
    sent = rewriter.feed(
        b'data: {"choices":[{"index":0,"delta":{"content":"Hi <thi"},"finish_reason":null}]}\n\ndata: {"choi'
    )
    assert sent == b'data: {"choices":[{"index":0,"delta":{"content":"Hi "},"finish_reason":null}]}\n\n'
    error = upstream_unavailable("gone")
    # the splitter's held "<thi" goes out as the content it turned out to be; the half event is dropped
    assert rewriter.fail(error) == (
        b'data: {"choices":[{"index":0,"delta":{"content":"<thi"},"finish_reason":null}]}\n\n'
        b'data: {"id":"","object":"chat.completion.chunk","created":0,"model":"","error":{"message":"gone",'
        b'"type":"upstream_unavailable","code":502,"param":null},"choices":[]}\n\n'
    )
    assert JSONRewriter(ResponseOptions()).fail(error) == b""
    # a response that passes through has no rewriter, so nothing is ever added to it
    assert choose_rewriter(ResponseOptions(), 200, "text/plain") is None


_EVENT = b'data: {"choices":[{"index":0,"delta":{"reasoning_content":"Hm."},"finish_reason":null}]}'
_NORMALIZED = (
    b'data: {"choices":[{"index":0,"delta":{"reasoning":"Hm.","reasoning_details":'
    b'[{"type":"reasoning.text","text":"Hm.","index":0}]},"finish_reason":null}]}\n\n'
)  # rule 1 extends the same detail with the same entry; its format goes at the end (CLOSE)
_CUT_SHORT = (
    b'data: {"id":"","object":"chat.completion.chunk","created":0,"model":"","error":{"message":'
    b'"The stream ended inside an event; the answer is incomplete.","type":"upstream_unavailable","code":502,'
    b'"param":null},"choices":[]}\n\n'
)


def test_a_stream_that_ends_inside_an_undecodable_event_ends_with_an_error_event() -> None:
    # a close-delimited upstream that broke off: the half event is dropped, the client is told
    assert rewrite(_EVENT + b"\n\n" + b'data: {"choices":[{"index":0,"') == _NORMALIZED + CLOSE + _CUT_SHORT
    # ... or inside a line that is not a data line
    for cut in (b"da", b": OPENROUTER PROC", b"event: mess"):
        assert rewrite(_EVENT + b"\n\n" + cut) == _NORMALIZED + CLOSE + _CUT_SHORT, cut
    # an unfinished last event that decodes is finished with the line ends it lacks and sent like any other
    assert rewrite(_EVENT + b"\n\n" + _EVENT) == _NORMALIZED + _NORMALIZED + CLOSE_MANY
    assert rewrite(_EVENT + b"\n") == _NORMALIZED + CLOSE
    content = b'data: {"choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":null}]}'
    assert rewrite(content) == content + b"\n\n"  # unchanged, but finished: parsers drop unfinished events
    assert rewrite(b"id: 7\n" + _EVENT + b"\n") == b"id: 7\n" + _NORMALIZED + CLOSE  # rewritten with its other line
    assert rewrite(b": note\n") == b": note\n\n"  # a whole comment line: nothing was cut
    # after [DONE] the answer was whole: trailing bytes pass as they came
    assert rewrite(_EVENT + b"\n\ndata: [DONE]\n\ndata: {") == _NORMALIZED + CLOSE + b"data: [DONE]\n\ndata: {"


def test_text_a_think_splitter_held_never_joins_an_unfinished_last_event() -> None:
    body = (
        b'data: {"choices":[{"index":0,"delta":{"content":"Hi <thi"}}]}\n\n'
        b'data: {"choices":[],"usage":{"total_tokens":3}}\n'
    )
    assert rewrite(body, think=ThinkTags()) == (
        b'data: {"choices":[{"index":0,"delta":{"content":"Hi "}}]}\n\n'
        b'data: {"choices":[],"usage":{"total_tokens":3}}\n\n'
        b'data: {"choices":[{"index":0,"delta":{"content":"<thi"},"finish_reason":null}]}\n\n'
    )


def test_a_break_keeps_complete_events_and_adds_nothing_after_done() -> None:
    from numi_mw.core.errors import upstream_unavailable
    from numi_mw.core.response import ResponseOptions, SSERewriter

    error = upstream_unavailable("gone")
    gone = (
        b'data: {"id":"","object":"chat.completion.chunk","created":0,"model":"","error":{"message":"gone",'
        b'"type":"upstream_unavailable","code":502,"param":null},"choices":[]}\n\n'
    )
    rewriter = SSERewriter(ResponseOptions())
    assert rewriter.feed(_EVENT + b"\r\r") == b""  # a last \r waits: a \n may follow
    assert rewriter.fail(error) == _NORMALIZED + CLOSE + gone  # the held event was complete
    rewriter = SSERewriter(ResponseOptions())
    assert rewriter.feed(_EVENT + b"\n\ndata: [DONE]\n\n") == _NORMALIZED + CLOSE + b"data: [DONE]\n\n"
    assert rewriter.fail(error) == b""
    rewriter = SSERewriter(ResponseOptions())
    assert rewriter.feed(_EVENT + b"\n\ndata: [DONE]\n") == _NORMALIZED
    assert rewriter.fail(error) == CLOSE + b"data: [DONE]\n\n"  # only its blank line was missing: no error


def test_a_lone_surrogate_is_normalized_and_carried_as_its_escape() -> None:
    # JavaScript servers split an emoji's UTF-16 pair across chunks; msgspec refuses a lone half
    first = b'data: {"choices":[{"index":0,"delta":{"reasoning_content":"a\\ud83d"},"finish_reason":null}]}\n\n'
    second = b'data: {"choices":[{"index":0,"delta":{"reasoning_content":"\\ude00b"},"finish_reason":null}]}\n\n'
    assert rewrite(first + second) == (
        b'data: {"choices":[{"index":0,"delta":{"reasoning":"a\\ud83d","reasoning_details":'
        b'[{"type":"reasoning.text","text":"a\\ud83d","index":0}]},"finish_reason":null}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{"reasoning":"\\ude00b","reasoning_details":'
        b'[{"type":"reasoning.text","text":"\\ude00b","index":0}]},"finish_reason":null}]}\n\n' + CLOSE_MANY
    )
    excluded = b'data: {"choices":[{"index":0,"delta":{"reasoning":"\\ud83d","content":"x"},"finish_reason":null}]}\n\n'
    assert (
        rewrite(excluded, exclude=True)
        == b'data: {"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}\n\n'
    )
    # what neither decoder holds still passes as it came
    huge = b'data: {"choices":[{"index":0,"delta":{"reasoning":"\\u0061","n":1e400},"finish_reason":null}]}\n\n'
    assert rewrite(huge) == huge


def test_a_buffered_completion_with_a_lone_surrogate_is_normalized() -> None:
    from tests.response_support import rewrite_json

    body = b'{"choices":[{"index":0,"message":{"content":"\\u00e9","reasoning_content":"\\ud83d"}}]}'
    assert rewrite_json(body) == (
        b'{"choices":[{"index":0,"message":{"content":"\\u00e9","reasoning":"\\ud83d","reasoning_details":'
        b'[{"type":"reasoning.text","text":"\\ud83d","format":"unknown"}]}}]}'
    )


def _delta_event(delta: bytes) -> bytes:
    return b'data: {"choices":[{"index":0,"delta":' + delta + b',"finish_reason":null}]}\n\n'


def test_tags_that_echo_reasoning_content_are_not_doubled_in_a_stream() -> None:
    # llama.cpp --reasoning-format deepseek-legacy: every thinking token in reasoning_content and, tagged, in content
    body = (
        _delta_event(b'{"content":"<think>","reasoning_content":""}')
        + _delta_event(b'{"content":"Spell","reasoning_content":"Spell"}')
        + _delta_event(b'{"content":" it <","reasoning_content":" it <"}')  # "<" may open </think>: held back
        + _delta_event(b'{"content":"3","reasoning_content":"3"}')
        + _delta_event(b'{"content":"</think>Three.","reasoning_content":""}')
    )
    assert rewrite(body, think=ThinkTags()) == (
        _delta_event(b'{"reasoning":"Spell","reasoning_details":[{"type":"reasoning.text","text":"Spell","index":0}]}')
        + _delta_event(
            b'{"reasoning":" it <","reasoning_details":[{"type":"reasoning.text","text":" it <","index":0}]}'
        )
        + _delta_event(b'{"reasoning":"3","reasoning_details":[{"type":"reasoning.text","text":"3","index":0}]}')
        + _delta_event(b'{"reasoning_details":[{"type":"reasoning.text","format":"unknown","index":0}]}')
        + _delta_event(b'{"reasoning":null,"reasoning_details":[]}')
        + _delta_event(b'{"content":"Three."}')
    )


def test_tagged_reasoning_that_differs_from_the_fields_beside_it_is_added_as_in_a_buffered_body() -> None:
    # compared, not assumed an echo: the buffered body of the same message gives "owntagged" too
    body = _delta_event(b'{"content":"<think>tagged</think>answer","reasoning_content":"own"}')
    view = client_view(sse_chunks(rewrite(body, think=ThinkTags())))
    assert (view.reasoning, view.content) == ("owntagged", "answer")


@pytest.mark.parametrize(
    ("start", "deltas", "reasoning", "content"),
    [
        # auto start: "Hm" is held until the closing tag decides, then released in a chunk of its own
        ("auto", [b'{"content":"Hm","reasoning_content":"Hm"}', b'{"content":"</think>ok"}'], "Hm", "ok"),
        # a "<" that may open </think> is held back into the next chunk
        (
            "content",
            [
                b'{"content":"<think>1 <","reasoning_content":"1 <"}',
                b'{"content":" 2</think>ok","reasoning_content":" 2"}',
            ],
            "1 < 2",
            "ok",
        ),
        (
            "reasoning",
            [b'{"content":"a <","reasoning_content":"a <"}', b'{"content":"b</think>","reasoning_content":"b"}'],
            "a <b",
            "",
        ),
        # content beside reasoning fields is held as after them: with no closing tag it is content, as in the
        # buffered body of the same message
        (
            "reasoning",
            [b'{"content":"a <","reasoning_content":"a <"}', b'{"content":"b","reasoning_content":"b"}'],
            "a <b",
            "a <b",
        ),
    ],
)
def test_echoed_tags_are_not_doubled_whatever_the_start_and_held_text(
    start: ThinkStart, deltas: list[bytes], reasoning: str, content: str
) -> None:
    body = b"".join(_delta_event(delta) for delta in deltas)
    view = client_view(sse_chunks(rewrite(body, think=ThinkTags(start=start))))
    assert (view.reasoning, view.content) == (reasoning, content)


def test_tags_with_other_text_than_reasoning_content_add_to_it_in_a_buffered_body() -> None:
    from tests.response_support import rewrite_json

    body = b'{"choices":[{"index":0,"message":{"content":"<think>tagged</think>answer","reasoning_content":"own"}}]}'
    assert json.loads(rewrite_json(body, think=ThinkTags()))["choices"][0]["message"]["reasoning"] == "owntagged"


def test_tags_that_echo_reasoning_content_are_not_doubled_in_a_buffered_completion() -> None:
    from tests.response_support import rewrite_json

    body = (
        b'{"choices":[{"index":0,"message":{"role":"assistant","content":"<think>\\nSpell it out.\\n</think>'
        b'\\n\\nThree.","reasoning_content":"Spell it out."},"finish_reason":"stop"}]}'
    )
    assert rewrite_json(body, think=ThinkTags()) == (
        b'{"choices":[{"index":0,"message":{"role":"assistant","content":"Three.","reasoning":"Spell it out.",'
        b'"reasoning_details":[{"type":"reasoning.text","text":"Spell it out.","format":"unknown"}]},'
        b'"finish_reason":"stop"}]}'
    )


def test_two_entries_of_one_detail_never_share_a_delta() -> None:
    # openai-python 2.x keeps the first list of entries as it is: a signature in the same delta as its text
    # would stay a detail of its own, and the next detail would be merged into it
    body = data(
        chunk(
            {
                "role": "assistant",
                "reasoning": "Let me think.",
                "reasoning_details": [
                    {"type": "reasoning.text", "text": "Let me think."},
                    {"type": "reasoning.text", "signature": "SIG_A", "format": "anthropic-claude-v1"},
                ],
            }
        )
    ) + data(chunk({"reasoning_details": [{"type": "reasoning.encrypted", "data": "ENC_B"}]}))
    chunks = sse_chunks(rewrite(body))
    assert chunks == [
        chunk(
            {
                "role": "assistant",
                "reasoning": "Let me think.",
                "reasoning_details": [{"type": "reasoning.text", "text": "Let me think.", "index": 0}],
            }
        ),
        chunk(
            {
                "reasoning_details": [
                    {"type": "reasoning.text", "signature": "SIG_A", "format": "anthropic-claude-v1", "index": 0}
                ]
            }
        ),
        chunk({"reasoning_details": [{"type": "reasoning.encrypted", "data": "ENC_B", "index": 1}]}),
        chunk({"reasoning_details": []}),  # one delta carried text: reasoning is whole and stays
    ]
    expected = [
        {
            "type": "reasoning.text",
            "text": "Let me think.",
            "index": 0,
            "signature": "SIG_A",
            "format": "anthropic-claude-v1",
        },
        {"type": "reasoning.encrypted", "data": "ENC_B", "index": 1},
    ]
    view = client_view(chunks)
    assert rebuild_reasoning_details(view.entries) == expected
    assert view.sdk_message["reasoning_details"] == expected
    assert view.sdk2_message["reasoning_details"] == expected


_TEXT_A: dict[str, Any] = {"type": "reasoning.text", "text": "a"}
_TEXT_B: dict[str, Any] = {"type": "reasoning.text", "text": "b"}
_TEXT_C: dict[str, Any] = {"type": "reasoning.text", "text": "c"}
_ENC: dict[str, Any] = {"type": "reasoning.encrypted", "data": "ENC_1"}


def test_each_split_delta_carries_the_reasoning_of_its_own_entries() -> None:
    # one upstream delta with two text fragments: rule 1 makes them one detail, so they go out in two deltas
    # (one entry per detail per delta), each with its own text as delta.reasoning, never the whole text on the
    # first and again in the second's entry
    body = data(chunk({"reasoning_details": [_TEXT_A, _TEXT_B]})) + data(chunk({"content": "x"}, "stop"))
    chunks = sse_chunks(rewrite(body))
    assert chunks == [
        chunk({"reasoning_details": [{"type": "reasoning.text", "text": "a", "index": 0}], "reasoning": "a"}),
        chunk({"reasoning": "b", "reasoning_details": [{"type": "reasoning.text", "text": "b", "index": 0}]}),
        chunk({"reasoning": None, "reasoning_details": []}),
        chunk({"content": "x"}, "stop"),
    ]
    view = client_view(chunks)
    assert view.reasoning == "ab"
    assert rebuild_reasoning_details(view.entries) == [{"type": "reasoning.text", "text": "ab", "index": 0}]


def test_three_fragments_of_one_detail_give_three_deltas_of_their_own_text() -> None:
    body = data(chunk({"reasoning": "abc", "reasoning_details": [_TEXT_A, _TEXT_B, _TEXT_C]}))
    chunks = sse_chunks(rewrite(body + b"data: [DONE]\n\n"))
    assert chunks == [
        chunk({"reasoning": "a", "reasoning_details": [{"type": "reasoning.text", "text": "a", "index": 0}]}),
        chunk({"reasoning": "b", "reasoning_details": [{"type": "reasoning.text", "text": "b", "index": 0}]}),
        chunk({"reasoning": "c", "reasoning_details": [{"type": "reasoning.text", "text": "c", "index": 0}]}),
        chunk({"reasoning": None, "reasoning_details": []}),
    ]
    assert client_view(chunks).reasoning == "abc"


def test_a_split_delta_with_an_encrypted_detail_between_texts_shows_each_text_once() -> None:
    # a, b: one text detail (two deltas); the encrypted detail and c, a new text detail after it, share the
    # second delta with b; its reasoning is the text of its entries, "bc"; the encrypted data goes byte for byte
    body = data(chunk({"reasoning_details": [_TEXT_A, _TEXT_B, _ENC, _TEXT_C]})) + data(chunk({"content": "x"}))
    chunks = sse_chunks(rewrite(body))
    assert chunks == [
        chunk({"reasoning_details": [{"type": "reasoning.text", "text": "a", "index": 0}], "reasoning": "a"}),
        chunk(
            {
                "reasoning": "bc",
                "reasoning_details": [
                    {"type": "reasoning.text", "text": "b", "index": 0},
                    {"type": "reasoning.encrypted", "data": "ENC_1", "index": 1},
                    {"type": "reasoning.text", "text": "c", "index": 2},
                ],
            }
        ),
        chunk({"reasoning": None, "reasoning_details": []}),
        chunk({"content": "x"}),
    ]
    view = client_view(chunks)
    assert view.reasoning == "abc"
    assert rebuild_reasoning_details(view.entries) == [
        {"type": "reasoning.text", "text": "ab", "index": 0},
        {"type": "reasoning.encrypted", "data": "ENC_1", "index": 1},
        {"type": "reasoning.text", "text": "c", "index": 2},
    ]


def test_a_delta_whose_entries_show_no_text_carries_no_reasoning() -> None:
    # text a with a format, then an encrypted detail, then text b: the held format of a goes out before the
    # encrypted detail, in the second delta, which shows only b's text
    fmt = {"format": "anthropic-claude-v1"}
    body = data(chunk({"reasoning_details": [{**_TEXT_A, **fmt}, _ENC, {**_TEXT_B, **fmt}]}))
    body += data(chunk({"reasoning_details": [_TEXT_A, {"type": "reasoning.text", "signature": "SIG"}]}))
    chunks = sse_chunks(rewrite(body + b"data: [DONE]\n\n"))
    assert chunks == [
        chunk({"reasoning_details": [{"type": "reasoning.text", "text": "a", "index": 0}], "reasoning": "a"}),
        chunk(
            {
                "reasoning": "b",
                "reasoning_details": [
                    {"type": "reasoning.text", "format": "anthropic-claude-v1", "index": 0},
                    {"type": "reasoning.encrypted", "data": "ENC_1", "index": 1},
                    {"type": "reasoning.text", "text": "b", "index": 2},
                ],
            }
        ),
        chunk({"reasoning_details": [{"type": "reasoning.text", "text": "a", "index": 2}], "reasoning": "a"}),
        chunk(
            {
                "reasoning_details": [
                    {"type": "reasoning.text", "signature": "SIG", "format": "anthropic-claude-v1", "index": 2}
                ]
            }
        ),
        chunk({"reasoning": None, "reasoning_details": []}),
    ]
    view = client_view(chunks)
    assert view.reasoning == "aba"
    assert rebuild_reasoning_details(view.entries) == [
        {"type": "reasoning.text", "text": "a", "index": 0, "format": "anthropic-claude-v1"},
        {"type": "reasoning.encrypted", "data": "ENC_1", "index": 1},
        {"type": "reasoning.text", "text": "ba", "index": 2, "signature": "SIG", "format": "anthropic-claude-v1"},
    ]


@settings(max_examples=400, deadline=None)
@given(st.lists(_CHOICE, min_size=1, max_size=8))
@example(  # one delta, two text fragments of one detail (the case test_each_split_delta_... spells out)
    [
        {"index": 0, "delta": {"reasoning_details": [_TEXT_A, _TEXT_B]}, "finish_reason": None},
        {"index": 0, "delta": {"content": "x"}, "finish_reason": "stop"},
    ]
)
def test_every_sdk_merge_arrives_at_the_spec_rebuild(choices: list[dict[str, Any]]) -> None:
    body = b"".join(data({"id": "x", "choices": [choice]}) for choice in choices)
    chunks = sse_chunks(rewrite(body))
    for sent in chunks:
        for choice in sent["choices"]:
            indexes = [e["index"] for e in choice["delta"].get("reasoning_details") or [] if isinstance(e, dict)]
            assert len(indexes) == len(set(indexes)), choice  # one entry per detail per delta
            delta = choice["delta"]
            if isinstance(delta.get("reasoning"), str):  # the fragment's text, once (docs/streaming.md, "Streams")
                assert delta["reasoning"] == visible_text(delta.get("reasoning_details") or []), choice
    view = client_view(chunks)
    assert view.reasoning == visible_text(view.entries)
    rebuilt = rebuild_reasoning_details(view.entries)
    assert view.sdk_message.get("reasoning_details", []) == rebuilt
    assert view.sdk2_message.get("reasoning_details", []) == rebuilt


@settings(max_examples=300, deadline=None)
@given(st.lists(_CHOICE, min_size=1, max_size=8))
def test_the_rewriters_shortcut_past_chunks_without_reasoning_gives_what_normalizing_every_chunk_gives(
    choices: list[dict[str, Any]],
) -> None:
    # SSERewriter passes a chunk whose bytes hold no reasoning field as it came while no reasoning is open, and
    # decodes it while some is (it may end it); normalizing every chunk must give the same deltas
    body = b"".join(data({"id": "x", "choices": [choice]}) for choice in choices)
    normalizer = ChunkNormalizer()
    every: list[dict[str, Any]] = []
    for choice in choices:
        chunk = copy.deepcopy({"id": "x", "choices": [choice]})
        result = normalizer.normalize(chunk)
        every.extend([chunk] if result is None else result)
    every.extend(normalizer.finish())
    assert sse_chunks(rewrite(body)) == json.loads(json.dumps(every))


def test_the_chunk_that_ends_the_reasoning_leaves_as_its_bytes() -> None:
    # spaced JSON and an escape that msgspec would write otherwise: the answer's chunk goes as it came, after the
    # chunks that end the reasoning, whether its bytes name a reasoning field or not
    for answer, cleared in (
        # the answer's own "reasoning": null clears that field: only the details are cleared before it
        (b'data: {"choices": [{"index": 0, "delta": {"content": "caf\\u00e9", "reasoning": null}}]}\n\n', b""),
        (b'data: {"choices": [{"index": 0, "delta": {"content": "caf\\u00e9"}}]}\n\n', b'"reasoning":null,'),
    ):
        body = _delta_event(b'{"reasoning":"a"}') + _delta_event(b'{"reasoning":"b"}') + answer
        out = rewrite(body)
        assert out.endswith(
            _delta_event(b'{"reasoning_details":[{"type":"reasoning.text","format":"unknown","index":0}]}')
            + _delta_event(b"{" + cleared + b'"reasoning_details":[]}')
            + answer
        )


def test_nan_and_infinity_literals_do_not_stop_normalization() -> None:
    # Python's json (vLLM's logprobs) writes -Infinity and NaN, which msgspec refuses as not JSON
    logprobs = b'"logprobs":{"content":[{"token":"x","logprob":-Infinity},{"token":"y","logprob":NaN}]}'
    event = b'data: {"choices":[{"index":0,"delta":{"reasoning_content":"SECRET","content":"x"},' + logprobs
    event += b',"finish_reason":null}]}\n\n'
    assert rewrite(event, exclude=True) == (
        b'data: {"choices":[{"index":0,"delta":{"content":"x"},' + logprobs + b',"finish_reason":null}]}\n\n'
    )
    assert rewrite(event) == (
        b'data: {"choices":[{"index":0,"delta":{"reasoning":"SECRET","content":"x","reasoning_details":'
        b'[{"type":"reasoning.text","text":"SECRET","index":0}]},' + logprobs + b',"finish_reason":null}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{"reasoning_details":[{"type":"reasoning.text","format":"unknown",'
        b'"index":0}]},"finish_reason":null}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{"reasoning_details":[]},"finish_reason":null}]}\n\n'
    )


def test_a_buffered_completion_with_nan_is_normalized_and_keeps_it() -> None:
    from tests.response_support import rewrite_json

    body = b'{"choices":[{"index":0,"message":{"content":"a","reasoning_content":"r"},"logprob":NaN}]}'
    assert rewrite_json(body, exclude=True) == b'{"choices":[{"index":0,"message":{"content":"a"},"logprob":NaN}]}'


def test_held_text_with_a_lone_surrogate_is_written_with_its_escape_later() -> None:
    # auto start holds "\ud83d" (read by the fallback) until the next event, which msgspec reads
    body = _delta_event(b'{"content":"\\ud83d"}') + _delta_event(b'{"content":"hm</think>ok"}')
    assert rewrite(body, think=ThinkTags(start="auto")) == (
        _delta_event(
            b'{"reasoning":"\\ud83dhm","reasoning_details":[{"type":"reasoning.text","text":"\\ud83dhm","index":0}]}'
        )
        + _delta_event(b'{"reasoning_details":[{"type":"reasoning.text","format":"unknown","index":0}]}')
        + _delta_event(b'{"reasoning_details":[]}')  # the reasoning went out in one delta
        + _delta_event(b'{"content":"ok"}')
    )


def _claude_chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    # a thinking block through OpenRouter, as it streams one (OpenRouter's reasoning tokens guide, Anthropic's
    # "reasoning.text" details with their "anthropic-claude-v1" format)
    choice = {"index": 0, "delta": {"role": "assistant", "content": "", **delta}, "finish_reason": finish}
    return {"id": "gen-1", "object": "chat.completion.chunk", "choices": [{**choice, "logprobs": None}]}


_CLAUDE_FORMAT = {"format": "anthropic-claude-v1", "index": 0}
_CLAUDE_BLOCK = [
    {
        "reasoning": None,
        "reasoning_details": [{"type": "reasoning.text", "text": "", "signature": "", **_CLAUDE_FORMAT}],
    },
    {"reasoning": "Two", "reasoning_details": [{"type": "reasoning.text", "text": "Two", **_CLAUDE_FORMAT}]},
    {"reasoning": None, "reasoning_details": [{"type": "reasoning.text", "text": "", **_CLAUDE_FORMAT}]},
    {"reasoning": None, "reasoning_details": [{"type": "reasoning.text", "signature": "EtAB==", **_CLAUDE_FORMAT}]},
    {"reasoning": None, "reasoning_details": [], "content": "4"},
]


def test_a_thinking_block_through_openrouter_takes_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    # the placeholder that opens the block, its text, the chunk of its format, its signature, the answer, the
    # finish: each as the general path sends it, and none by the general path
    finish = _claude_chunk({"reasoning": None, "reasoning_details": []}, "stop")
    chunks = [*(_claude_chunk(delta) for delta in _CLAUDE_BLOCK), finish]
    general = general_path_only()
    expected = [general.normalize(copy.deepcopy(chunk)) for chunk in chunks]

    def general_path(*args: Any) -> Any:
        raise AssertionError("the general path")

    monkeypatch.setattr(ChunkNormalizer, "_normalize_choice", general_path)
    fast = ChunkNormalizer()
    out = [fast.normalize(copy.deepcopy(chunk)) for chunk in chunks]
    assert msgspec.json.encode(out) == msgspec.json.encode(expected)
    deltas = [None if chunk is UNCHANGED else chunk[0]["choices"][0]["delta"] for chunk in out]
    assert deltas == [
        {"role": "assistant", "content": "", "reasoning": None},  # the placeholder's fields wait for the text
        {
            "role": "assistant",
            "content": "",
            "reasoning": "Two",
            "reasoning_details": [{"type": "reasoning.text", "text": "Two", "index": 0}],  # its format held
        },
        {"role": "assistant", "content": "", "reasoning": None},  # the format, held for the signature
        None,  # the signature with the format, as it came
        None,  # the answer, with both fields: it closes the reasoning as it came
        None,  # the finish
    ]
