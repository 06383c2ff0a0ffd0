"""The spliced request path (``core.spliced``) against a straightforward full decode, rules, encode.

The reference is the request pipeline as it runs on a fully decoded body (``codec.decode_object``,
``fold_controls``, ``prepare_for_route``, ``codec.encode``). For every body and route: the same error, or the same
decision (changed or not, controls, notes, stream) and the same JSON with the same key order; a body the rules
leave alone is the original bytes object; and every value of a message the rules leave alone reaches the
upstream as the bytes it came as (signatures and encrypted data among them).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks import payloads
from numi_mw.core import codec, spliced
from numi_mw.core.controls import fold_controls
from numi_mw.core.errors import ApiError
from numi_mw.core.fields import PLAIN_FIELDS
from numi_mw.core.providers import PROVIDERS
from numi_mw.core.request import PROBE_MAX_BYTES, PreparedRequest, prepare_for_route, prepare_request, prepare_spliced
from numi_mw.core.routing import Route, fixed_route

ROUTES = [fixed_route(rules, preserve=preserve) for rules in PROVIDERS.values() for preserve in (True, False)]
ROUTE_IDS = [f"{route.rules.name}-{'preserve' if route.preserve else 'no-preserve'}" for route in ROUTES]


class _Messages(msgspec.Struct):
    messages: list[dict[str, msgspec.Raw]] = []


_messages = msgspec.json.Decoder(_Messages)


def reference(body: bytes, route: Route) -> tuple[bytes, bool, Any, list[str], bool]:
    """The full decode, the rules on builtins, the full encode."""
    data = codec.decode_object(body)
    controls, changed = fold_controls(data)
    notes: list[str] = []
    if prepare_for_route(data, controls, route, len(body), notes=notes):
        changed = True
    return (codec.encode(data) if changed else body), changed, controls, notes, data.get("stream") is True


def canonical(body: bytes) -> bytes:
    """``body`` written the way msgspec writes it (key order kept)."""
    return codec.encode(msgspec.json.decode(body))


def _raw_messages(body: bytes) -> list[dict[str, bytes]]:
    return [
        {key: bytes(memoryview(value)) for key, value in message.items()} for message in _messages.decode(body).messages
    ]


def spliced_or_full(body: bytes, route: Route) -> PreparedRequest:
    """The spliced path whatever the body's size (``prepare_request`` takes it for large bodies only), or the
    full one for a body it does not take."""
    return prepare_spliced(body, route) or prepare_request(body, route)


def check(body: bytes, route: Route) -> None:
    check_with(body, route, spliced_or_full, kept=True)
    check_with(body, route, prepare_request, kept=len(body) > PROBE_MAX_BYTES)


def check_with(body: bytes, route: Route, prepare: Callable[[bytes, Route], PreparedRequest], *, kept: bool) -> None:
    """``prepare`` against the reference; ``kept``: untouched values must keep their bytes (the spliced path)."""
    try:
        expected = reference(body, route)
    except ApiError as error:
        with pytest.raises(ApiError) as caught:
            prepare(body, route)
        assert (caught.value.code, caught.value.message, caught.value.param) == (error.code, error.message, error.param)
        return
    prepared = prepare(body, route)
    out, changed, controls, notes, stream = expected
    assert (prepared.controls, prepared.adjustments, prepared.stream) == (controls, notes, stream)
    if not prepared.changed:  # the rules changed nothing, or their steps gave back the client's very bytes
        assert prepared.body is body
        assert not changed or canonical(body) == out
        return
    assert (changed, prepared.body != body) == (True, True)
    assert canonical(prepared.body) == out
    if not kept:
        return
    before, after = _raw_messages(body), _raw_messages(prepared.body)
    decoded_out = msgspec.json.decode(out).get("messages", [])
    for i, message in enumerate(msgspec.json.decode(body).get("messages", [])):
        if decoded_out[i] == message and list(decoded_out[i]) == list(message):
            assert after[i] == before[i], f"messages[{i}] was left alone by the rules but not kept as its bytes"
        for key, value in message.items():  # a value the rules did not write keeps its bytes in a changed message
            if key not in PLAIN_FIELDS and key in decoded_out[i] and decoded_out[i][key] == value:
                assert after[i][key] == before[i][key], f"messages[{i}].{key} was rewritten"


# --- the spec's examples, the handed cases, the recorded answers as history, the harness's payloads ----------


def _spec_bodies(shared: Path) -> list[bytes]:
    bodies = []
    for path in sorted((shared / "spec").glob("*.txt")):
        for found in re.findall(r"-d '(\{.*?\})'", path.read_text()):
            try:
                value = json.loads(found)
            except ValueError:
                continue
            if isinstance(value, dict) and "messages" in value:
                bodies.append(json.dumps(value).encode())
    return bodies


def _case_bodies(shared: Path) -> list[bytes]:
    cases = json.loads((shared / "cases" / "public-bugs.json").read_text())
    return [
        json.dumps(case["input"]["request"]).encode()
        for case in cases
        if isinstance(case["input"], dict) and isinstance(case["input"].get("request"), dict)
    ]


def _fixture_bodies(shared: Path) -> list[bytes]:
    """Each recorded buffered chat completion's message sent back as the assistant turn of a next request,
    written as recorded (its own spacing) and with both shorthands."""
    bodies = []
    for path in sorted((shared / "fixtures" / "openai-chat").glob("*.buffered.json")):
        raw = path.read_text()
        answer = json.loads(raw)
        message = answer["choices"][0]["message"]
        text = json.dumps(message, indent=2, ensure_ascii=False)
        for controls in ("", '"reasoning_effort": "high", "include_reasoning": true, '):
            bodies.append(
                (
                    '{"model": "m", '
                    + controls
                    + '"messages": [{"role": "user", "content": "Hi \\u00e9"}, '
                    + text
                    + ', {"role": "user", "content": "And?", "n": 1e5, "x": 1.10}]}'
                ).encode()
            )
    return bodies


def test_spec_examples_cases_and_recorded_answers_match_the_full_decode(shared_dir: Path) -> None:
    bodies = _spec_bodies(shared_dir) + _case_bodies(shared_dir) + _fixture_bodies(shared_dir)
    assert len(_spec_bodies(shared_dir)) >= 1
    assert len(_fixture_bodies(shared_dir)) >= 20
    for body in bodies:
        for route in ROUTES:
            check(body, route)


@pytest.mark.parametrize("route", ROUTES, ids=ROUTE_IDS)
def test_harness_payloads_match_the_full_decode(route: Route) -> None:
    for body in (payloads.request_2kb(), payloads.plain_2kb(), payloads.history_200kb(size=20_000, messages=12)):
        check(body, route)


def test_a_large_detail_is_checked_and_a_large_kept_one_is_spliced_back() -> None:
    route = fixed_route(PROVIDERS["openrouter"])
    body = payloads.body_8mb(3 * payloads.MIB, 2 * payloads.MIB)
    check(body, route)
    over = json.dumps(
        {
            "messages": [
                {"role": "assistant", "content": "x", "reasoning_details": [{"signature": "s" * ((1 << 20) + 1)}]}
            ]
        }
    ).encode()
    with pytest.raises(ApiError) as caught:
        prepare_request(over, route)
    assert caught.value.param == "messages[0].reasoning_details[0].signature"
    check(over, route)


def test_untouched_values_keep_their_bytes() -> None:
    body = (
        b'{"model":"m","reasoning_effort":"low","messages":[{"role":"user","content":"caf\\u00e9",'
        b'"n":1e5,"m":1.0,"meta":{"a":1,"a":2}},{"role":"assistant","content":null,"reasoning_content":"t",'
        b'"reasoning_details":[{"type":"reasoning.text","text":"t","signature":"c2ln\\/"}]}]}'
    )
    prepared = spliced_or_full(body, fixed_route(PROVIDERS["openrouter"]))
    assert prepared.body == (
        b'{"model":"m","reasoning":{"effort":"low"},"messages":[{"role":"user","content":"caf\\u00e9",'
        b'"n":1e5,"m":1.0,"meta":{"a":1,"a":2}},{"role":"assistant","content":null,"reasoning":"t",'
        b'"reasoning_details":[{"type":"reasoning.text","text":"t","signature":"c2ln\\/"}]}]}'
    )


def test_a_number_no_float_holds_inside_a_message_goes_as_sent() -> None:
    """The full decode refused it (msgspec reads every number); no rule reads this one, so it goes upstream as
    the client wrote it, as it would talking to the provider directly."""
    body = b'{"reasoning_effort":"low","messages":[{"role":"user","content":"x","seed":1e400}]}'
    prepared = spliced_or_full(body, fixed_route(PROVIDERS["openrouter"]))
    assert prepared.body == b'{"reasoning":{"effort":"low"},"messages":[{"role":"user","content":"x","seed":1e400}]}'


def _large(message: bytes) -> bytes:
    """A body over ``PROBE_MAX_BYTES`` (so that it takes the spliced path) whose last message is ``message``."""
    pad = b"x" * PROBE_MAX_BYTES
    return b'{"model":"m","messages":[{"role":"user","content":"' + pad + b'"},' + message + b"]}"


@pytest.mark.parametrize("provider", ["openrouter", "deepseek"])
def test_a_role_that_is_a_number_no_float_holds_is_no_assistant_and_goes_as_sent(provider: str) -> None:
    """The role is read to find assistant turns; a role that is no string is none, and is not decoded (this one
    would raise msgspec's range error), so the message goes upstream as sent."""
    body = _large(b'{"role":100000000000e400,"content":"c","reasoning":"r"}')
    prepared = prepare_request(body, fixed_route(PROVIDERS[provider]))
    assert (prepared.body, prepared.changed) == (body, False)


@pytest.mark.parametrize(
    ("provider", "message"),
    [
        ("deepseek", b'{"role":"assistant","content":"c","reasoning_details":[{"type":"reasoning.text","x":1e400}]}'),
        ("anthropic", b'{"role":"assistant","content":"c","thinking_blocks":[{"type":"thinking","x":1e400}]}'),
    ],
)
def test_a_value_the_filter_reads_with_a_number_no_float_holds_is_refused_as_the_full_decode_refuses_it(
    provider: str, message: bytes
) -> None:
    """The route's filter reads the turn's details or thinking blocks, so they are decoded: a number no float holds
    in them is the full decode's 400, not an error of msgspec's escaping as a 500."""
    with pytest.raises(ApiError) as caught:
        prepare_request(_large(message), fixed_route(PROVIDERS[provider]))
    assert (caught.value.status, caught.value.code) == (400, "invalid_json")
    assert caught.value.message.startswith("The request body is not valid JSON (Number out of range")


# --- generated histories, written in many ways -----------------------------------------------------------------

NUMBERS = ["1", "1.0", "1e5", "-0.0", "2.50", "1E-3", "12345678901234567890123"]
TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=8)


class Number:
    def __init__(self, text: str) -> None:
        self.text = text


def _value(depth: int = 0) -> st.SearchStrategy[Any]:
    scalars = st.one_of(st.none(), st.booleans(), TEXT, st.sampled_from(NUMBERS).map(Number))
    if depth >= 2:
        return scalars
    return st.one_of(
        scalars,
        st.lists(_value(depth + 1), max_size=3),
        st.lists(st.tuples(st.sampled_from(["a", "b", "type", "text"]), _value(depth + 1)), max_size=3),
    )


ESCAPED = st.sampled_from(['"th\\u0069nk"', '"\\u0074hink"']).map(Number)
"""``"think"`` written with an escape: the same text in other bytes."""
REASONING = st.one_of(
    st.none(), st.just(""), st.just("think"), st.just("other"), ESCAPED, st.sampled_from(NUMBERS).map(Number)
)
DETAILS = st.lists(
    st.lists(
        st.tuples(
            st.sampled_from(["type", "text", "signature", "data", "format", "summary", "extra"]),
            st.one_of(st.sampled_from(["reasoning.text", "reasoning.encrypted", "reasoning.summary"]), TEXT),
        ),
        max_size=4,
    ),
    max_size=2,
)
MESSAGE_KEY = st.sampled_from(
    [
        "role",
        "content",
        "reasoning",
        "reasoning_content",
        "reasoning_details",
        "thinking_blocks",
        "tool_calls",
        "provider_specific_fields",
        "_stored_at",
        "name",
        "x",
    ]
)


@st.composite
def messages(draw: st.DrawFn) -> list[tuple[str, Any]]:
    pairs: list[tuple[str, Any]] = []
    for key in draw(st.lists(MESSAGE_KEY, max_size=6)):
        if key == "role":
            value: Any = draw(st.sampled_from(["assistant", "user", "tool", "system", "Assistant"]))
        elif key in ("reasoning", "reasoning_content"):
            value = draw(REASONING)
        elif key in ("reasoning_details", "thinking_blocks"):
            value = draw(DETAILS)
        elif key == "provider_specific_fields":
            value = draw(st.lists(st.tuples(st.sampled_from(["reasoning_content", "reasoning", "other"]), REASONING)))
        elif key == "tool_calls":
            value = draw(st.sampled_from([[], None, [[("id", "c1"), ("type", "function")]]]))
        else:
            value = draw(_value())
        pairs.append((key, value))
    if draw(st.booleans()):
        pairs.insert(0, ("role", "assistant"))
    return pairs


def dump(value: Any, style: tuple[str, str, bool]) -> str:
    """JSON text of a generated value: objects are lists of pairs (keys may repeat), numbers as written."""
    space, colon, ascii_only = style
    if isinstance(value, Number):
        return value.text
    if isinstance(value, list) and value and all(isinstance(item, tuple) for item in value):
        inner = ("," + space).join(json.dumps(k, ensure_ascii=ascii_only) + colon + dump(v, style) for k, v in value)
        return "{" + space + inner + space + "}"
    if isinstance(value, list):
        return "[" + space + ("," + space).join(dump(item, style) for item in value) + space + "]"
    return json.dumps(value, ensure_ascii=ascii_only)


STYLE = st.tuples(st.sampled_from(["", " ", "\n  "]), st.sampled_from([":", ": ", " : "]), st.booleans())
TOP = st.lists(
    st.one_of(
        st.tuples(st.just("reasoning_effort"), st.sampled_from(["low", "high", None, "max"])),
        st.tuples(st.just("include_reasoning"), st.sampled_from([True, False, None])),
        st.tuples(st.just("reasoning"), st.sampled_from([[("effort", "low")], [("exclude", True)], None])),
        st.tuples(st.just("stream"), st.booleans()),
        st.tuples(st.just("temperature"), st.sampled_from(NUMBERS).map(Number)),
        st.tuples(st.just("tools"), st.just([[("type", "function"), ("function", [("name", "f")])]])),
    ),
    max_size=3,
)


@settings(max_examples=300, deadline=None)
@given(
    top=TOP,
    history=st.lists(messages(), max_size=5),
    style=STYLE,
    route=st.sampled_from(ROUTES),
)
def test_generated_histories_match_the_full_decode(
    top: list[tuple[str, Any]], history: list[list[tuple[str, Any]]], style: tuple[str, str, bool], route: Route
) -> None:
    check(dump([("model", "m"), *top, ("messages", history)], style).encode(), route)


def test_a_large_detail_list_with_a_number_no_float_holds_is_still_checked() -> None:
    signature = "s" * ((1 << 20) + 1)
    body = (
        b'{"messages":[{"role":"assistant","content":"x","reasoning_details":[1e400,{"signature":"'
        + signature.encode()
        + b'"}]}]}'
    )
    with pytest.raises(ApiError) as caught:
        prepare_request(body, fixed_route(PROVIDERS["openrouter"]))
    assert caught.value.param == "messages[0].reasoning_details[1].signature"


def test_utf8_is_checked_across_chunk_boundaries() -> None:
    """``codec.is_utf8`` reads 64 KiB at a time: a character split by a chunk boundary is still one character,
    and a body cut inside one is still refused (by the full decode's error)."""
    route = fixed_route(PROVIDERS["openrouter"])
    for pad in range(codec.UTF8_CHUNK_BYTES - 20, codec.UTF8_CHUNK_BYTES - 10):
        text = "a" * pad + "€" * 10
        body = json.dumps({"messages": [{"role": "user", "content": text}]}, ensure_ascii=False).encode()
        assert codec.is_utf8(body)
        assert prepare_request(body, route).body is body
        broken = body.replace("€".encode(), "€".encode()[:2], 1)
        assert not codec.is_utf8(broken)
        with pytest.raises(ApiError) as caught:
            prepare_request(broken, route)
        assert caught.value.code == "invalid_json"


# --- the detail size limits' look at the bytes, and the splice of renamed values ------------------------------

SMALL_LIMITS = {b"text": 8, b"summary": 8, b"signature": 3, b"data": 12}
"""Limits small enough for generated details to cross them (``spliced.may_exceed`` takes the limits)."""


def _over(details: Any, limits: dict[bytes, int]) -> bool:
    """The rule of ``details.check_detail_limits``, with ``limits``: a top-level string field of a detail object
    whose UTF-8 size is over its limit."""
    if not isinstance(details, list):
        return False
    return any(
        isinstance(detail, dict)
        and isinstance(value := detail.get(field.decode()), str)
        and len(value.encode()) > limit
        for detail in details
        for field, limit in limits.items()
    )


PLAIN_TEXT = st.text(alphabet=st.sampled_from("ab:,{}[] é€"), max_size=16)
DETAIL_TEXT = st.one_of(
    PLAIN_TEXT,  # no escape: the bytes decide
    PLAIN_TEXT,
    PLAIN_TEXT,
    st.text(alphabet=st.sampled_from('ab:é"\\\n'), max_size=16),  # escapes: the decode decides
)
DETAIL_VALUE = st.recursive(
    st.one_of(DETAIL_TEXT, st.sampled_from(NUMBERS).map(Number), st.none()),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(st.tuples(st.sampled_from(["text", "data", "x", "signature"]), inner), min_size=1, max_size=3),
    ),
    max_leaves=6,
)
DETAIL = st.lists(
    st.tuples(
        st.sampled_from(["text", "summary", "signature", "data", "type", "sign", "texts"]),
        st.one_of(DETAIL_TEXT, DETAIL_TEXT, DETAIL_VALUE),
    ),
    min_size=1,
    max_size=5,
)


def _escape_keys(data: bytes) -> bytes:
    """``data`` with every limited key written with an escape (``"te\\u0078t"`` for ``"text"``): the generated
    strings hold no letter of one, so only keys are rewritten."""
    for key in SMALL_LIMITS:
        data = data.replace(b'"' + key + b'"', b'"' + key[:2] + b"\\u%04x" % key[2] + key[3:] + b'"')
    return data


@settings(max_examples=1000, deadline=None)
@given(
    details=st.lists(st.one_of(DETAIL, DETAIL, DETAIL_VALUE), min_size=1, max_size=3),
    style=st.tuples(st.sampled_from(["", " ", "\n  "]), st.sampled_from([":", ": ", " : "]), st.just(False)) | STYLE,
    escaped_keys=st.booleans(),
)
def test_the_byte_look_at_a_detail_list_never_misses_a_field_over_its_limit(
    details: list[Any], style: tuple[str, str, bool], escaped_keys: bool
) -> None:
    """``may_exceed`` answers ``False`` only for bytes whose decode holds no field over its limit: whatever the
    spacing, repeated keys, nesting, quotes, colons and braces inside strings, escapes, keys written with
    escapes or non-ASCII text."""
    data = _escape_keys(dump(details, style).encode()) if escaped_keys else dump(details, style).encode()
    if _over(json.loads(data), SMALL_LIMITS):
        assert spliced.may_exceed(data, SMALL_LIMITS)


HANDED_DETAIL_LISTS: list[tuple[bytes, bool]] = [
    (b'[{"type":"reasoning.encrypted","data":"0123456789ab","signature":"abc"}]', False),  # at the limits
    (b'[{"data" :\n "0123456789abc"}]', True),  # one over
    (b'[{"signature":"abcd"}]', True),
    (b'[{"x":{"signature":"abcd"}}]', True),  # nesting is not followed: the decode decides
    (b'[{"sign":"abcdefghijklmnop","text":"a:b,{c}"}]', False),
    (b'[{"sig\\u006eature":"abcd"}]', True),  # a long value of a key written with an escape: the decode decides
    (b'[{"d\\u0061ta":"ab"}]', False),  # a short one: within every limit, however its key is written
    (b'[{"data":"ab\\"cdefghij"}]', False),  # an escaped quote is inside its string: 12 bytes between quotes
    (b'[{"data":"ab\\"cdefghijk"}]', True),  # 13 between them (12 decoded, at the limit): the decode decides
    (b'[{"x":"\\\\","data":"0123456789ab"}]', False),  # an escaped backslash before a quote that closes
    (b'[{"x":"\\\\","data":"0123456789abc"}]', True),
    (b'[{"x":"\\"data\\":\\"0123456789abcdef"}]', False),  # a field written inside a string is no field
    (b'[{"text":"a\\n\\n\\n\\n"}]', True),  # 9 bytes between the quotes (5 decoded): the bytes are an upper bound
    (b'[{"x":"' + b"\\\\" * 31 + b'","data":"0123456789ab"}]', False),  # a run of 62 backslashes is read
    (b'[{"x":"' + b"\\\\" * 32 + b'","data":"0123456789ab"}]', True),  # one of 64 is not: the decode decides
    (b'["abcdefghijklmnop"]', False),  # an array's item is no field
    (b'[{"abcdefghijklmnop":1}]', False),  # a long key is no value
    (b'[{"text":"\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"}]', True),  # 10 bytes of UTF-8: over 8
    (b'[{"text":"\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"}]', False),  # 8 bytes
]
"""Detail lists with ``may_exceed``'s answer under ``SMALL_LIMITS``."""


@pytest.mark.parametrize(("data", "expected"), HANDED_DETAIL_LISTS)
def test_the_byte_look_at_a_detail_list_on_handed_bytes(data: bytes, expected: bool) -> None:
    assert spliced.may_exceed(data, SMALL_LIMITS) is expected


def test_the_8mb_bodys_encrypted_detail_is_read_once() -> None:
    """The harness's 8 MB body: its 6 MB ``data`` string is within its 8 MiB limit, which the bytes show, both the
    detail list's and the whole body's (which holds escaped quotes in a tool call's arguments)."""
    body = payloads.body_8mb()
    details = _raw_messages(body)[2]["reasoning_details"]
    assert len(details) > 6_000_000
    assert b'\\"' in body
    assert not spliced.may_exceed(details, spliced._FIELD_LIMITS)
    assert not spliced.may_exceed(body, spliced._FIELD_LIMITS)


def test_the_limits_of_a_large_body_are_read_from_the_body_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """The 8 MB body on the spliced path: the walk over the body's own quotes, taken while its UTF-8 is checked,
    answers for its 6 MB detail list, which is neither walked again nor copied out to be looked at alone."""
    body = payloads.body_8mb()
    decoded = spliced.decode(body)
    assert decoded is not None
    assert decoded[1] is True  # every limited field within its limit, as the walk in one stretch says
    assert not spliced.may_exceed(body, spliced._FIELD_LIMITS, **spliced._BODY_WALK)
    looked: list[int] = []
    may_exceed = spliced.may_exceed

    def recording(data: bytes, limits: Any, **options: int) -> bool:
        looked.append(len(data))
        return may_exceed(data, limits, **options)

    monkeypatch.setattr(spliced, "may_exceed", recording)
    prepared = prepare_request(body, fixed_route(PROVIDERS["openrouter"]))
    assert prepared.changed
    assert looked == []


def test_the_body_is_walked_only_when_a_detail_list_is_over_the_smallest_limit() -> None:
    """``spliced.decode`` walks a body's quotes only where ``check_limits`` would: a body over 1 MiB with a
    ``reasoning_details`` list over 1 MiB. A signature one byte over its 1 MiB limit is found there, and the body
    is refused with the field's path, as the full decode refuses it."""
    over = "A" * ((1 << 20) + 1)
    detail = {"type": "reasoning.text", "text": "t", "signature": over}
    assistant = {"role": "assistant", "content": "x", "reasoning_details": [detail]}
    large = json.dumps({"model": "m", "messages": [{"role": "user", "content": "q"}, assistant]}).encode()
    decoded = spliced.decode(large)
    assert decoded is not None and decoded[1] is False
    with pytest.raises(ApiError) as refused:
        prepare_request(large, fixed_route(PROVIDERS["openrouter"]))
    with pytest.raises(ApiError) as reference_refused:
        reference(large, fixed_route(PROVIDERS["openrouter"]))
    assert (refused.value.status, refused.value.param) == (400, "messages[1].reasoning_details[0].signature")
    assert (refused.value.status, refused.value.param) == (
        reference_refused.value.status,
        reference_refused.value.param,
    )
    text_only = json.dumps({"model": "m", "messages": [{"role": "user", "content": over}]}).encode()
    small = json.dumps({"model": "m", "messages": [assistant | {"reasoning_details": [{"signature": "s"}]}]}).encode()
    for body in (text_only, small):
        decoded = spliced.decode(body)
        assert decoded is not None and decoded[1] is None


@pytest.mark.parametrize(
    ("provider", "walks"), [("openrouter", True), ("generic", True), ("anthropic", False), ("openai", False)]
)
def test_the_body_is_walked_with_its_utf8_check_only_where_the_route_keeps_every_detail(
    monkeypatch: pytest.MonkeyPatch, provider: str, walks: bool
) -> None:
    """Where the route's filter drops or rewrites the details (``Route.keeps_details`` false), ``check_limits``
    has no list as it came to ask about on the 8 MB body, so ``decode`` takes no walk there either."""
    body = payloads.body_8mb()
    asked: list[bool] = []
    decode = spliced.decode

    def recording(data: bytes, *, walk: bool = True) -> tuple[dict[str, Any], bool | None] | None:
        asked.append(walk)
        return decode(data, walk=walk)

    monkeypatch.setattr(spliced, "decode", recording)
    route = fixed_route(PROVIDERS[provider])
    assert prepare_request(body, route).body == reference(body, route)[0]
    assert asked == [walks]
    decoded = decode(body, walk=walks)
    assert decoded is not None and decoded[1] is (True if walks else None)


@pytest.mark.parametrize("stretch", [1, 2, 3, 7, 64])
def test_a_walk_taken_in_stretches_answers_as_the_walk_whole(stretch: int) -> None:
    """``QuoteWalk`` fed the handed detail lists above a few bytes at a time (as ``codec.utf8_stretches`` hands it the
    stretches it has checked) gives each one's answer: quotes, escapes and runs of backslashes cut at any byte."""
    for data, expected in HANDED_DETAIL_LISTS:
        walk = spliced.QuoteWalk(data)
        for start in range(0, len(data), stretch):
            walk.take(start, min(start + stretch, len(data)))
        assert walk.may_exceed(SMALL_LIMITS) is expected, data


@settings(max_examples=300, deadline=None)
@given(
    details=st.lists(st.one_of(DETAIL, DETAIL, DETAIL_VALUE), min_size=1, max_size=3),
    style=STYLE,
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8),
    max_quotes=st.integers(min_value=0, max_value=40),
    bytes_per_quote=st.sampled_from([0, 1, 8, 64]),
)
def test_a_walk_in_any_stretches_is_may_exceed(
    details: list[Any], style: tuple[str, str, bool], cuts: list[int], max_quotes: int, bytes_per_quote: int
) -> None:
    """Cut anywhere, with any bound on the quotes walked: the same answer as ``may_exceed`` in one walk."""
    data = dump(details, style).encode()
    walk = spliced.QuoteWalk(data, max_quotes=max_quotes, bytes_per_quote=bytes_per_quote)
    start = 0
    for stop in sorted({min(cut, len(data)) for cut in cuts} | {len(data)}):
        walk.take(start, stop)
        start = stop
    whole = spliced.may_exceed(data, SMALL_LIMITS, max_quotes=max_quotes, bytes_per_quote=bytes_per_quote)
    assert walk.may_exceed(SMALL_LIMITS) is whole


def test_the_utf8_check_hands_each_stretch_it_checked() -> None:
    """``codec.utf8_stretches``'s ``visit``: each 64 KiB stretch once it is valid, the one a two-byte character crosses
    ending before that character; a small body in one stretch; none after an invalid byte."""
    chunk = codec.UTF8_CHUNK_BYTES
    data = b"a" * (chunk - 1) + "\u00e9".encode() + b"b" * 100
    seen: list[tuple[int, int]] = []
    assert codec.utf8_stretches(data, lambda start, stop: seen.append((start, stop)))
    assert seen == [(0, chunk - 1), (chunk - 1, chunk + 101)]
    seen.clear()
    assert codec.utf8_stretches("caf\u00e9".encode(), lambda start, stop: seen.append((start, stop)))
    assert seen == [(0, 5)]
    seen.clear()
    assert not codec.utf8_stretches(
        b"a" * chunk + b"\xff" + b"a" * chunk, lambda start, stop: seen.append((start, stop))
    )
    assert seen == [(0, chunk)]
    seen.clear()
    assert not codec.utf8_stretches(b"caf\xe9", lambda start, stop: seen.append((start, stop)))
    assert seen == []


def test_escaped_quotes_count_against_the_walk() -> None:
    """Each quote the walk finds costs it a step, escaped or not: 2,000 escaped quotes in one string are past
    1,024 and leave the answer to the decode, as 2,000 strings would."""
    many = b'[{"x":"' + b'\\"' * 2000 + b'"}]'
    assert spliced.may_exceed(many, SMALL_LIMITS)
    assert not spliced.may_exceed(many, SMALL_LIMITS, max_quotes=4096)  # walked whole: no field over its limit


def test_a_large_detail_held_as_an_object_goes_on_as_the_full_decode_sends_it() -> None:
    """``reasoning_details`` that is not a list is not the size limits' business (``details.check_detail_limits``):
    an object with a signature over 1 MiB goes upstream as sent, on both paths, not a 500."""
    signature = "A" * ((1 << 20) + 1)
    body = json.dumps(
        {
            "model": "m",
            "messages": [{"role": "assistant", "content": "x", "reasoning_details": {"signature": signature}}],
        }
    ).encode()
    route = fixed_route(PROVIDERS["openrouter"])
    check(body, route)
    prepared = prepare_request(body, route)
    assert (prepared.changed, prepared.body) == (False, body)


def _large_detail_body(field: str, size: int, *, user_text: int = 0, strings: int = 0, quotes: int = 0) -> bytes:
    """A body whose assistant turn holds one detail with a ``size``-byte ``field``, after a user turn whose text
    part is ``user_text`` bytes long, ``strings`` short strings in a list and a tool result of ``quotes`` quotes
    (each written escaped)."""
    user = {
        "role": "user",
        "content": [{"type": "text", "text": "u" * user_text}],
        "tags": ["t"] * strings,
        "result": '"' * quotes,
    }
    detail = {"type": "reasoning.text", "text": "ok", field: "s" * size}
    assistant = {"role": "assistant", "content": "x", "reasoning_details": [detail]}
    return json.dumps({"model": "m", "messages": [user, assistant]}).encode()


@pytest.mark.parametrize(
    ("user_text", "strings", "quotes"),
    [(0, 0, 0), (5 << 20, 0, 0), (0, 2000, 0), (0, 0, 200_000)],
    ids=["the-body-shows-it", "a-long-text-elsewhere", "too-many-strings-to-walk", "too-many-escaped-quotes"],
)
def test_a_large_detail_list_is_checked_whatever_the_rest_of_the_body_holds(
    user_text: int, strings: int, quotes: int
) -> None:
    """When the whole body cannot show the limits (a user's 5 MiB text part, longer than the text limit, or more
    strings or escaped quotes than are walked), the detail list is looked at alone: a signature one byte over 1 MiB
    is refused, one at it goes upstream as sent."""
    route = fixed_route(PROVIDERS["openrouter"])
    over = _large_detail_body("signature", (1 << 20) + 1, user_text=user_text, strings=strings, quotes=quotes)
    with pytest.raises(ApiError) as caught:
        prepare_request(over, route)
    assert (caught.value.status, caught.value.code, caught.value.param) == (
        400,
        "invalid_request",
        "messages[1].reasoning_details[0].signature",
    )
    at = _large_detail_body("signature", 1 << 20, user_text=user_text, strings=strings, quotes=quotes)
    prepared = prepare_request(at, route)
    assert (prepared.changed, prepared.body) == (False, at)


@settings(max_examples=300, deadline=None)
@given(
    details=st.lists(st.one_of(DETAIL, DETAIL, DETAIL_VALUE), min_size=1, max_size=3),
    around=st.lists(DETAIL_VALUE, max_size=3),
    style=STYLE,
    escaped_keys=st.booleans(),
)
def test_the_byte_look_at_a_whole_body_never_misses_a_detail_field_over_its_limit(
    details: list[Any], around: list[Any], style: tuple[str, str, bool], escaped_keys: bool
) -> None:
    """``may_exceed`` on a whole body (what ``check_limits`` asks first) answers ``False`` only when no detail of
    it holds a field over its limit, whatever the messages around the details hold."""
    body = dump(
        [
            ("messages", [[("role", "user"), ("content", value)] for value in around]),
            ("tail", [[("role", "assistant"), ("reasoning_details", details)]]),
        ],
        style,
    ).encode()
    if escaped_keys:
        body = _escape_keys(body)
    if _over(json.loads(body)["tail"][0]["reasoning_details"], SMALL_LIMITS):
        assert spliced.may_exceed(body, SMALL_LIMITS)


@pytest.mark.parametrize("key", ["signature", "sig\\u006eature"])
def test_a_large_signature_over_its_limit_is_refused_however_its_key_is_written(key: str) -> None:
    body = (
        b'{"messages":[{"role":"assistant","content":"x","reasoning_details":[{"type":"reasoning.text","'
        + key.encode()
        + b'":"'
        + b"s" * ((1 << 20) + 1)
        + b'"}]}]}'
    )
    with pytest.raises(ApiError) as caught:
        prepare_request(body, fixed_route(PROVIDERS["openrouter"]))
    assert caught.value.param == "messages[0].reasoning_details[0].signature"


def test_a_renamed_reasoning_field_keeps_its_bytes() -> None:
    """OpenRouter takes ``reasoning``: the client's ``reasoning_content`` goes under that name as the bytes it
    came as (escapes kept), not decoded and written again."""
    body = b'{"messages":[{"role":"assistant","content":"x","reasoning_content":"caf\\u00e9 \\"q\\"","n":1e5}]}'
    prepared = spliced_or_full(body, fixed_route(PROVIDERS["openrouter"]))
    assert (
        prepared.body == b'{"messages":[{"role":"assistant","content":"x","reasoning":"caf\\u00e9 \\"q\\"","n":1e5}]}'
    )


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (  # the same text in other bytes: the doubled field goes, the other takes OpenRouter's name and keeps its bytes
            b'{"role":"assistant","reasoning":"th\\u0069nk","content":"x","reasoning_content":"think"}',
            b'{"role":"assistant","content":"x","reasoning":"think"}',
        ),
        (
            b'{"role":"assistant","reasoning":"think","content":"x","reasoning_content":"\\u0074hink"}',
            b'{"role":"assistant","content":"x","reasoning":"\\u0074hink"}',
        ),
        (
            b'{"role":"assistant","reasoning_content":null,"reasoning":"think"}',
            b'{"role":"assistant","reasoning":"think"}',
        ),
        (b'{"role":"assistant","reasoning":"","reasoning_content":""}', b'{"role":"assistant","reasoning_content":""}'),
        (b'{"role":"assistant","reasoning":null,"reasoning_content":null}', b'{"role":"assistant"}'),
    ],
)
def test_the_table_reads_the_plain_fields_from_their_bytes(message: bytes, expected: bytes) -> None:
    """Spec 004's reasoning / reasoning_content table on a body with no internal metadata, for OpenRouter (whose
    filter keeps every message), decided from the fields' bytes: each output is the table's row for its input."""
    prepared = spliced_or_full(b'{"messages":[' + message + b"]}", fixed_route(PROVIDERS["openrouter"]))
    assert prepared.body == b'{"messages":[' + expected + b"]}"


@pytest.mark.parametrize(
    "message",
    [
        b'{"role":"assistant","reasoning":"think","reasoning_content":"other"}',  # two texts: neither is dropped
        b'{"role":"assistant","reasoning":"think","reasoning_content":"th\\u0069nk "}',
        b'{"role":"assistant","reasoning":1,"reasoning_content":"think"}',  # not a string: left as it is
        b'{"role":"assistant","reasoning":"think"}',  # already OpenRouter's name
    ],
)
def test_a_message_the_table_leaves_alone_is_the_original_body(message: bytes) -> None:
    body = b'{"messages":[' + message + b"]}"
    assert spliced_or_full(body, fixed_route(PROVIDERS["openrouter"])).body is body


@pytest.mark.parametrize("route", ROUTES, ids=ROUTE_IDS)
@pytest.mark.parametrize(
    "message",
    [
        b'{"role":"assistant","\\u005fstored_at":1,"content":"x"}',  # internal metadata, its key escaped
        b'{"role":"assistant","content":"x","reasoning\\u005fcontent":"think"}',
        b'{"role":"\\u0061ssistant","content":"x","reasoning":"think","reasoning_details":[]}',
        b'{"role":"user","content":"mentions \\"reasoning\\": and \\"_x\\" and _y"}',
        b'{"role":"assistant","content":[{"type":"text","text":"_"}],"tool_calls":[{"_id":"1"}]}',
        b'{"role":"assistant","content":"x","provider_specific_fields":{"reasoning_content":"think"}}',
        b'{"role":"assistant","content":"x","thinking_blocks":[{"type":"thinking","thinking":"t","signature":"s"}]}',
    ],
)
def test_messages_with_escaped_keys_and_lookalike_values_match_the_full_decode(message: bytes, route: Route) -> None:
    check(b'{"model":"m","reasoning_effort":"low","messages":[' + message + b"]}", route)
    check(b'{"model":"m","messages":[' + message + b"]}", route)
