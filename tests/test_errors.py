"""The error a stream ends with when it breaks off, and the error body a refused request gets (``docs/errors.md``)."""

from __future__ import annotations

import json

import pytest

from numi_mw.core.errors import (
    CUT_SHORT,
    ERROR_CODES,
    ApiError,
    invalid_request,
    upstream_error_body,
    upstream_timeout,
    upstream_unavailable,
)
from numi_mw.core.response import NativeJSONRewriter, ResponseOptions, SSERewriter, choose_rewriter

# the envelope of the recorded DeepSeek stream (openai-chat/deepseek-reasoner-reasoning-content.sse)
DEEPSEEK_CHUNK = (
    b'data: {"id":"33be18fc-3842-486c-8c29-dd8e578f7f20","object":"chat.completion.chunk","created":1752169304,'
    b'"model":"deepseek-reasoner","system_fingerprint":"fp_393bca965e_prod0623_fp8_kvcache","choices":[{"index":0,'
    b'"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n'
)
EARLY = "The upstream stream ended early; the answer is incomplete."


def broken_off(error: ApiError, *events: bytes) -> bytes:
    """What the client receives after ``events`` when the upstream then breaks off with ``error``."""
    rewriter = SSERewriter(ResponseOptions())
    return b"".join(rewriter.feed(event) for event in events) + rewriter.fail(error)


def test_a_broken_off_stream_ends_with_a_chunk_whose_error_code_is_the_http_status() -> None:
    # OpenRouter's mid-stream error carries the HTTP status as a number in error.code (LiteLLM's openrouter route
    # calls int() on it; OpenRouter's SDK, behind langchain-openrouter, validates it as an integer and needs the
    # chunk's id, object, created, model and choices); numi_mw's own code moves to error.type
    assert broken_off(upstream_unavailable(EARLY), DEEPSEEK_CHUNK) == DEEPSEEK_CHUNK + (
        b'data: {"id":"33be18fc-3842-486c-8c29-dd8e578f7f20","object":"chat.completion.chunk","created":1752169304,'
        b'"model":"deepseek-reasoner","error":{"message":"The upstream stream ended early; the answer is incomplete.",'
        b'"type":"upstream_unavailable","code":502,"param":null},"choices":[]}'
        b"\n\n"
    )


def test_a_read_timeout_mid_stream_carries_504() -> None:
    message = "The upstream stopped sending the stream in time; the answer is incomplete."
    sent = broken_off(upstream_timeout(message), DEEPSEEK_CHUNK)
    assert json.loads(sent[len(DEEPSEEK_CHUNK) + len(b"data: ") :])["error"] == {
        "message": message,
        "type": "upstream_timeout",
        "code": 504,
        "param": None,
    }


def test_a_stream_that_breaks_before_its_first_chunk_gets_an_empty_envelope() -> None:
    # nothing told numi_mw the id, time or model: the fields every client's schema requires are there, empty
    assert broken_off(upstream_unavailable("The upstream stream could not be decoded; the answer is incomplete.")) == (
        b'data: {"id":"","object":"chat.completion.chunk","created":0,"model":"","error":{"message":'
        b'"The upstream stream could not be decoded; the answer is incomplete.","type":"upstream_unavailable","code":502,'
        b'"param":null},"choices":[]}\n\n'
    )


def test_the_envelope_comes_from_the_first_chunk_and_keeps_only_fields_of_the_right_type() -> None:
    first = b'data: {"id":7,"created":1.5,"model":"m","choices":[]}\n\n'
    later = b'data: {"id":"later","created":9,"model":"other","choices":[]}\n\n'
    sent = broken_off(CUT_SHORT, first, later)
    error_chunk = json.loads(sent[len(first + later) + len(b"data: ") :])
    assert (error_chunk["id"], error_chunk["created"], error_chunk["model"]) == ("", 0, "m")


def test_a_stream_cut_inside_an_event_ends_with_the_same_error_chunk() -> None:
    rewriter = SSERewriter(ResponseOptions())
    sent = rewriter.feed(DEEPSEEK_CHUNK + b'data: {"id":"33be') + rewriter.finish()
    assert sent == DEEPSEEK_CHUNK + (
        b'data: {"id":"33be18fc-3842-486c-8c29-dd8e578f7f20","object":"chat.completion.chunk","created":1752169304,'
        b'"model":"deepseek-reasoner","error":{"message":"The stream ended inside an event; the answer is incomplete.",'
        b'"type":"upstream_unavailable","code":502,"param":null},"choices":[]}'
        b"\n\n"
    )


@pytest.mark.parametrize("code", sorted(ERROR_CODES))
def test_an_error_body_keeps_openais_string_code(code: str) -> None:
    # the HTTP status carries the number; error.code stays the string OpenAI documents and its SDKs read
    error = ApiError(code, "What was wrong.")
    assert json.loads(error.to_bytes()) == {
        "error": {"message": "What was wrong.", "type": ERROR_CODES[code][1], "code": code, "param": None}
    }


def test_the_error_chunk_of_a_refusal_names_its_param() -> None:
    chunk = invalid_request("Bad.", "messages[1]").stream_chunk()
    assert chunk == {
        "id": "",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "",
        "error": {
            "message": "Bad.",
            "type": "invalid_request",
            "code": 400,
            "param": "messages[1]",
        },
        "choices": [],
    }


# --- an upstream's error answer on a translated wire API that is no error body a client reads ----------------

LB_PAGE = b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n</body>\r\n</html>\r\n"


@pytest.mark.parametrize(
    ("status", "body", "message", "kind"),
    [
        (
            502,
            LB_PAGE,
            "The upstream answered 502: <html> <head><title>502 Bad Gateway</title></head> <body> "
            "<center><h1>502 Bad Gateway</h1></center> </body> </html>",
            "api_error",
        ),
        (
            503,
            b"upstream connect error or disconnect/reset before headers. reset reason: overflow",
            "The upstream answered 503: upstream connect error or disconnect/reset before headers. reset reason: "
            "overflow",
            "api_error",
        ),
        (404, b'{"detail":"Not Found"}', 'The upstream answered 404: {"detail":"Not Found"}', "invalid_request_error"),
        (429, b" \n\t ", "The upstream answered 429 with an empty body.", "invalid_request_error"),
        (500, b"", "The upstream answered 500 with an empty body.", "api_error"),
        (500, b"caf\xe9 \xff", "The upstream answered 500: caf\ufffd \ufffd", "api_error"),
    ],
)
def test_an_upstream_error_that_is_no_error_body_becomes_the_openai_style_body(
    status: int, body: bytes, message: str, kind: str
) -> None:
    assert upstream_error_body(status, body) == {
        "error": {"message": message, "type": kind, "code": None, "param": None}
    }


def test_an_upstream_errors_text_is_kept_to_a_thousand_characters() -> None:
    prefix = "The upstream answered 500: "
    assert upstream_error_body(500, b"x" * 1000)["error"]["message"] == prefix + "x" * 1000
    assert upstream_error_body(500, b"x" * 1001)["error"]["message"] == prefix + "x" * 1000 + "\u2026"
    # white space never takes the text's room: runs of it are one space, and none leads
    assert (
        upstream_error_body(502, b" " * 5000 + b"real text")["error"]["message"]
        == "The upstream answered 502: real text"
    )
    assert upstream_error_body(500, b"x" * (64 << 20))["error"]["message"] == prefix + "x" * 1000 + "\u2026"
    assert upstream_error_body(500, "\u00e9".encode() * 1200)["error"]["message"] == prefix + "\u00e9" * 1000 + "\u2026"


@pytest.mark.parametrize("wire_api", ["anthropic-messages", "openai-responses"])
@pytest.mark.parametrize(
    ("status", "media", "body"),
    [
        (502, "text/html", LB_PAGE),
        (503, "text/plain; charset=utf-8", b"upstream connect error or disconnect/reset before headers."),
        (401, None, b"Unauthorized"),
        (404, "application/json", b'{"detail":"Not Found"}'),
        (500, "application/json", b'{"error":"boom"}'),  # an error that is a string is no error object
        (529, "text/event-stream", b""),
        (502, "application/json", b"\xef\xbb\xbf" * 5000 + b"{}"),  # one byte order mark is ignored, no more
    ],
)
def test_a_translated_wire_apis_error_answer_reaches_the_client_as_the_openai_style_body(
    wire_api: str, status: int, media: str | None, body: bytes
) -> None:
    rewriter = choose_rewriter(ResponseOptions(wire_api=wire_api), status, media)  # type: ignore[arg-type]
    assert isinstance(rewriter, NativeJSONRewriter)
    out = rewriter.feed(body) + rewriter.finish()
    assert (rewriter.changed, rewriter.status) == (True, None)  # the upstream's status stays
    assert json.loads(out) == upstream_error_body(status, body)


@pytest.mark.parametrize("wire_api", ["anthropic-messages", "openai-responses"])
def test_an_openai_style_error_and_a_redirects_body_pass_unchanged_on_a_translated_wire_api(wire_api: str) -> None:
    options = ResponseOptions(wire_api=wire_api)  # type: ignore[arg-type]
    openai_style = b'{"error":{"message":"Incorrect API key provided.","type":"invalid_request_error","code":null}}'
    passed = [
        (401, "application/json", openai_style),
        (429, "application/json", b"\xef\xbb\xbf" + openai_style),  # a byte order mark first (RFC 8259 8.1)
        (302, "application/json", b'{"to":"x"}'),
    ]
    for status, media, body in passed:
        rewriter = choose_rewriter(options, status, media)
        assert isinstance(rewriter, NativeJSONRewriter)
        assert (rewriter.feed(body) + rewriter.finish(), rewriter.changed, rewriter.status) == (body, False, None)
    assert choose_rewriter(options, 301, "text/html") is None
    assert choose_rewriter(options, 304, None) is None


def test_a_chat_completions_upstreams_error_page_passes_as_it_came() -> None:
    # the client talks to its own provider's API: what it would get directly
    assert choose_rewriter(ResponseOptions(), 502, "text/html") is None
    assert choose_rewriter(ResponseOptions(), 502, None) is None
