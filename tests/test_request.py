"""``prepare_request``: bytes in, bytes out; the probe, semantics kept, errors as data."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numi_mw.core.controls import ReasoningControls, fold_controls
from numi_mw.core.errors import ApiError
from numi_mw.core.providers import PROVIDERS, ProviderRules, infer_provider, provider_rules
from numi_mw.core.request import PROBE_MAX_BYTES, Probe, is_chat_completions, prepare_for_route, prepare_request, probe
from numi_mw.core.routing import fixed_route

OPENROUTER = provider_rules("openrouter")
_ANSWERS = {
    Probe.REWRITE: None,
    Probe.CHANGES: None,
    Probe.CONTROLS: None,
    Probe.PLAIN: False,
    Probe.PLAIN_STREAM: True,
}


def probe_plain(raw: bytes, rules: ProviderRules = OPENROUTER) -> bool | None:
    """The probe's answer on an OpenRouter route (preserving): ``None`` to rewrite, else whether it streams."""
    return _ANSWERS[probe(raw, fixed_route(rules))]


def normalize_body(
    data: dict[str, Any], rules: ProviderRules, size: int, notes: list[str] | None = None
) -> tuple[ReasoningControls, bool]:
    """The full path on a decoded body for a single upstream with ``rules``: fold, then the route's pipeline (what
    the controls form left out goes into ``notes``, when given)."""
    controls, changed = fold_controls(data)
    return controls, prepare_for_route(data, controls, fixed_route(rules), size, notes=notes) or changed


def test_body_without_reasoning_is_the_original_bytes_object() -> None:
    raw = b'{"model": "m",  "messages": [{"role": "user", "content": "Hi"}], "temperature": 0.70}'
    assert probe_plain(raw) is False
    prepared = prepare_request(raw, OPENROUTER)
    assert prepared.body is raw
    assert prepared.changed is False
    assert prepared.stream is False


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (
            b'{"stream": true, "messages": [{"role": "assistant", "content": "reasoning is fine here"}]}',
            Probe.PLAIN_STREAM,
        ),
        (b'{"stream": "yes", "messages": []}', Probe.PLAIN),
        (b'{"messages": [{"role": "assistant", "reasoning_details": [{"type": "reasoning.text"}]}]}', Probe.PLAIN),
        (b'{"reasoning": null}', Probe.CONTROLS),
        (b'{"reasoning_effort": "high"}', Probe.CONTROLS),
        (b'{"include_reasoning": false, "messages": [{"role": "user", "content": "Hi"}]}', Probe.CONTROLS),
        (b'{"reasoning_effort": "high", "messages": [{"role": "assistant", "reasoning": "r"}]}', Probe.CHANGES),
        (b'{"messages": [{"role": "user"}, {"role": "assistant", "reasoning": ""}]}', Probe.CHANGES),
        (b'{"messages": [{"role": "assistant", "reasoning_content": "x"}]}', Probe.CHANGES),
        (b'{"messages": [{"role": "assistant", "reasoning_c\\u006fntent": "x"}]}', Probe.CHANGES),
        (b'{"reasoning_effort": "high", "messages": [{"role": "user", "_stored_at": 1}]}', Probe.REWRITE),
        (b'{"messages": {"role": "user"}}', Probe.REWRITE),
        (b'{"messages": [1]}', Probe.REWRITE),
        (b"[1, 2]", Probe.REWRITE),
    ],
)
def test_probe_exact_answers(raw: bytes, expected: Probe) -> None:
    assert probe(raw, fixed_route(OPENROUTER)) is expected


def test_probe_answers_changes_for_details_a_route_drops_beside_a_control() -> None:
    raw = b'{"reasoning_effort": "low", "messages": [{"role": "assistant", "reasoning_details": []}]}'
    assert probe(raw, fixed_route(OPENROUTER)) is Probe.CONTROLS  # a preserving OpenRouter route keeps details
    assert probe(raw, fixed_route(provider_rules("deepseek"))) is Probe.CHANGES  # DeepSeek's row drops them


def test_probe_shapes_it_leaves_to_the_full_path_get_their_errors() -> None:
    for raw, param in ((b'{"messages": {"role": "user"}}', "messages"), (b'{"messages": [1]}', "messages[0]")):
        with pytest.raises(ApiError) as info:
            prepare_request(raw, OPENROUTER)
        assert (info.value.status, info.value.code, info.value.param) == (400, "invalid_request", param)


def test_large_plain_body_skips_the_probe_and_is_still_the_original_bytes() -> None:
    raw = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * PROBE_MAX_BYTES}]}).encode()
    assert len(raw) > PROBE_MAX_BYTES
    prepared = prepare_request(raw, OPENROUTER)
    assert prepared.body is raw
    assert prepared.changed is False


def test_escaped_key_is_not_missed_by_the_probe() -> None:
    raw = b'{"model": "m", "\\u0072easoning_effort": "high"}'
    assert probe_plain(raw) is None
    assert json.loads(prepare_request(raw, OPENROUTER).body) == {"model": "m", "reasoning": {"effort": "high"}}


def test_decoded_but_unchanged_body_is_the_original_bytes() -> None:
    raw = b'{"model": "m", "messages": [{"role": "user", "content": "caf\\u00e9 reasoning"}]}'
    prepared = prepare_request(raw, OPENROUTER)
    assert prepared.body is raw


def test_everything_else_is_semantically_unchanged() -> None:
    body = {
        "model": "vendor/model",
        "temperature": 0.1,
        "top_p": 1.0,
        "seed": 12345678901234,
        "big": 18446744073709551615,
        "tiny": 1e-300,
        "neg": -0.0,
        "unicode": "naïve 日本語 \U0001f600 \u2028",
        "unknown_param": {"nested": [None, True, False, 1.5]},
        "reasoning_effort": "high",
        "messages": [{"role": "user", "content": "x"}],
    }
    out = json.loads(prepare_request(json.dumps(body).encode(), OPENROUTER).body)
    expected = dict(body)
    del expected["reasoning_effort"]
    expected = {k: v for k, v in expected.items() if k != "messages"} | {
        "reasoning": {"effort": "high"},
        "messages": body["messages"],
    }
    assert out == expected
    assert list(out) == [
        "model", "temperature", "top_p", "seed", "big", "tiny", "neg", "unicode", "unknown_param", "reasoning",
        "messages",
    ]  # fmt: skip
    assert repr(out["neg"]) == "-0.0"
    assert isinstance(out["top_p"], float)


def test_not_json_is_400_invalid_json() -> None:
    with pytest.raises(ApiError) as info:
        prepare_request(b'{"model": "m", "reasoning_effort": ', OPENROUTER)
    assert info.value.status == 400
    assert info.value.code == "invalid_json"
    assert info.value.param is None
    assert info.value.type == "invalid_request_error"


def test_body_not_an_object_is_400_invalid_request() -> None:
    with pytest.raises(ApiError) as info:
        prepare_request(b'["reasoning"]', OPENROUTER)
    assert (info.value.status, info.value.code, info.value.param) == (400, "invalid_request", None)


def test_body_over_the_limit_is_413() -> None:
    with pytest.raises(ApiError) as info:
        prepare_request(b'{"model": "m"}', OPENROUTER, max_body_bytes=13)
    assert (info.value.status, info.value.code) == (413, "payload_too_large")
    assert prepare_request(b'{"model": "m"}', OPENROUTER, max_body_bytes=14).changed is False


@pytest.mark.parametrize(
    ("method", "path", "expected"),
    [
        ("POST", "/v1/chat/completions", True),
        ("POST", "/api/v1/chat/completions/", True),
        ("POST", "/chat/completions", True),
        ("GET", "/v1/chat/completions", False),
        ("POST", "/v1/completions", False),
        ("POST", "/v1/chat/completions/abc", False),
    ],
)
def test_chat_completions_paths(method: str, path: str, expected: bool) -> None:
    assert is_chat_completions(method, path) is expected


@pytest.mark.parametrize(
    ("url", "provider"),
    [
        ("https://openrouter.ai/api/v1", "openrouter"),
        ("https://api.openai.com/v1", "openai"),
        ("https://api.anthropic.com/v1", "anthropic"),
        ("https://api.z.ai/api/paas/v4", "zai"),
        ("https://api.deepseek.com", "deepseek"),
        ("https://api.inceptionlabs.ai/v1", "inception"),
        ("https://api.ppq.ai", "ppq"),
        ("http://127.0.0.1:8000/v1", "local"),
        ("http://localhost:11434/v1", "local"),
        ("https://llm.example.com/v1", "generic"),
    ],
)
def test_provider_inferred_from_host(url: str, provider: str) -> None:
    assert infer_provider(url) == provider


def test_unknown_provider_name_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown provider 'nope'; use one of: openrouter, ppq"):
        provider_rules("nope")


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (b"{not json", "invalid_json"),
        (b'{"a": [1,}', "invalid_json"),
        (b"[1, 2]", "invalid_request"),
        (b"", "invalid_json"),
    ],
)
def test_bodies_that_are_not_json_objects_get_400(raw: bytes, code: str) -> None:
    with pytest.raises(ApiError) as info:
        prepare_request(raw, OPENROUTER)
    assert (info.value.status, info.value.code, info.value.param) == (400, code, None)


def test_history_detail_over_its_limit_is_400_naming_the_field() -> None:
    signature = "s" * (1024 * 1024 + 1)
    body = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "Hi"},
            {
                "role": "assistant",
                "content": "x",
                "reasoning_details": [{"type": "reasoning.text", "text": "t", "signature": signature}],
            },
        ],
    }
    with pytest.raises(ApiError) as info:
        prepare_request(json.dumps(body).encode(), OPENROUTER)
    assert info.value.body()["error"]["param"] == "messages[1].reasoning_details[0].signature"
    assert (info.value.status, info.value.code) == (400, "invalid_request")
    body["messages"][1]["reasoning_details"][0]["signature"] = signature[:-1]
    assert prepare_request(json.dumps(body).encode(), OPENROUTER).changed is False


_VALUES = st.one_of(st.none(), st.booleans(), st.sampled_from(["", "x", "high"]), st.just({}), st.just([]))
_KEYS = st.sampled_from(["role", "content", "reasoning", "reasoning_content", "reasoning_details", "other"])
_MESSAGE = st.one_of(
    st.dictionaries(_KEYS, _VALUES, max_size=4).map(lambda m: {"role": "assistant", **m}), st.integers(0, 1)
)
_BODY = st.fixed_dictionaries(
    {},
    optional={
        "model": st.just("m"),
        "stream": _VALUES,
        "reasoning": _VALUES,
        "reasoning_effort": _VALUES,
        "include_reasoning": _VALUES,
        "messages": st.one_of(st.lists(_MESSAGE, max_size=4), _VALUES),
    },
)


@settings(max_examples=400, deadline=None)
@given(body=_BODY)
def test_probe_never_passes_a_body_the_rules_would_change(body: dict[str, Any]) -> None:
    raw = json.dumps(body).encode()
    for name in ("openrouter", "deepseek", "anthropic", "openai", "generic"):
        rules = provider_rules(name)
        plain = probe_plain(raw, rules)
        if plain is None:
            continue
        data = json.loads(raw)
        controls, changed = normalize_body(data, rules, len(raw))  # raises if the full path would refuse it
        assert (changed, controls.present, plain) == (False, False, body.get("stream") is True), name
        # zai always gets its thinking object (spec 000), so prepare_request never probes for it
        assert normalize_body(json.loads(raw), provider_rules("zai"), len(raw))[1] is True


def _outcome(run: Any) -> tuple[Any, ...]:
    """What a path made of a request: its body as JSON text (key order kept), controls, changed and notes, or the
    error it raised."""
    try:
        body, controls, changed, notes = run()
    except ApiError as error:
        return ("error", error.status, error.code, error.param, error.message)
    return (json.dumps(json.loads(body)), controls, changed, notes)


def _full_path(raw: bytes, name: str) -> tuple[Any, ...]:
    def run() -> tuple[bytes, ReasoningControls, bool, list[str]]:
        data = json.loads(raw)
        notes: list[str] = []
        controls, changed = normalize_body(data, provider_rules(name), len(raw), notes)
        return json.dumps(data).encode(), controls, changed, notes

    return _outcome(run)


_CONTROLS_BODY = _BODY.flatmap(
    lambda body: st.fixed_dictionaries(
        {},
        optional={
            "thinking": _VALUES,
            "chat_template_kwargs": st.one_of(st.none(), st.just({"enable_thinking": True})),
            "max_tokens": st.sampled_from([None, 0, 1500, 1500.0, 99999]),
            "tools": st.just([{"type": "function", "function": {"name": "f", "parameters": {"x": 1.10}}}]),
        },
    ).map(lambda extra: {**body, **extra})
)


@settings(max_examples=400, deadline=None)
@given(body=_CONTROLS_BODY)
def test_a_body_whose_messages_stay_gets_what_the_full_path_gives(body: dict[str, Any]) -> None:
    raw = json.dumps(body).encode()
    for name in PROVIDERS:
        if probe(raw, fixed_route(provider_rules(name))) is not Probe.CONTROLS:
            continue

        def run(name: str = name) -> tuple[bytes, ReasoningControls, bool, list[str]]:
            prepared = prepare_request(raw, provider_rules(name))
            return prepared.body, prepared.controls, prepared.changed, prepared.adjustments

        assert _outcome(run) == _full_path(raw, name), name


def test_a_body_whose_messages_stay_keeps_their_bytes() -> None:
    raw = (
        b'{"model":"m","messages":[{"role":"user", "content":"caf\\u00e9 1.10"}],'
        b'"temperature":1.10,"reasoning_effort":"high","include_reasoning":false}'
    )
    assert probe(raw, fixed_route(OPENROUTER)) is Probe.CONTROLS
    prepared = prepare_request(raw, OPENROUTER)
    assert prepared.body == (
        b'{"model":"m","messages":[{"role":"user", "content":"caf\\u00e9 1.10"}],'
        b'"temperature":1.1,"reasoning":{"effort":"high","exclude":true}}'
    )
    assert (prepared.changed, prepared.controls.effort, prepared.controls.exclude) == (True, "high", True)


def test_a_number_no_float_holds_inside_a_message_goes_as_sent_beside_a_control() -> None:
    raw = b'{"messages":[{"role":"user","content":1e400}],"reasoning_effort":"high"}'
    assert prepare_request(raw, provider_rules("openai")).body == raw  # as a body without the control passes
    assert (
        prepare_request(raw, OPENROUTER).body
        == b'{"messages":[{"role":"user","content":1e400}],"reasoning":{"effort":"high"}}'
    )
    with pytest.raises(ApiError) as info:  # a top-level one is decoded, and refused as before
        prepare_request(b'{"temperature":1e400,"reasoning_effort":"high"}', OPENROUTER)
    assert (info.value.status, info.value.code) == (400, "invalid_json")


def test_a_top_level_number_no_float_holds_is_refused_only_where_the_body_is_decoded() -> None:
    raw = b'{"model":"m","temperature":1e400,"messages":[{"role":"user","content":"hi"}]}'
    prepared = prepare_request(raw, OPENROUTER)  # nothing to change: the probe skips the value, the bytes go
    assert (prepared.body is raw, prepared.changed) == (True, False)
    padded = raw[:-2] + b',"x":"' + b"a" * PROBE_MAX_BYTES + b'"}]}'  # over the probe's size: top level decoded
    refused = [padded, b'{"temperature":1e400,"reasoning_effort":"high"}']  # a control to fold: decoded
    for body, route in [*((body, OPENROUTER) for body in refused), (raw, provider_rules("zai"))]:
        with pytest.raises(ApiError) as info:  # zai's thinking control is written on every request: decoded
            prepare_request(body, route)
        assert (info.value.status, info.value.code) == (400, "invalid_json")


@pytest.mark.parametrize(
    "raw",
    [
        b'{"model": "m\xff"}',  # a plain body: the probe skips the string, the UTF-8 check catches it
        b'{"model": "m\xff", "reasoning_effort": "low"}',  # decoded whole
        b'{"model": "\xed\xa0\x80"}',  # an encoded surrogate is not UTF-8 either
    ],
)
def test_invalid_utf8_is_400_on_every_path(raw: bytes) -> None:
    with pytest.raises(ApiError) as info:
        prepare_request(raw, OPENROUTER)
    assert (info.value.status, info.value.code, info.value.param) == (400, "invalid_json", None)


def test_invalid_utf8_message_names_the_byte() -> None:
    with pytest.raises(ApiError) as info:
        prepare_request(b'{"model": "ok \xc3\xa9 \xff"}', OPENROUTER)
    assert info.value.message == "The request body is not valid UTF-8 (byte 17); send UTF-8 encoded JSON."


@pytest.mark.parametrize(
    "raw",
    [
        b'{"model":"m","messages":[{"role":"user","content":"a\\ud83d"}]}',
        b'{"model":"m","temperature":NaN}',
        b'{"model":"m","reasoning_effort":"high","temperature":-Infinity}',
    ],
)
def test_a_lone_surrogate_or_nan_in_a_request_gets_a_400_that_says_so(raw: bytes) -> None:
    with pytest.raises(ApiError) as info:
        prepare_request(raw, provider_rules("deepseek"))
    assert (info.value.status, info.value.code, info.value.message) == (
        400,
        "invalid_json",
        "The request body holds a lone UTF-16 surrogate escape (\\ud800 to \\udfff without its pair), which is not "
        "a Unicode character, or a NaN or Infinity literal, which is not JSON; send whole characters and finite "
        "numbers.",
    )


@pytest.mark.parametrize("provider", ["openai", "deepseek"])
def test_an_effort_in_the_providers_own_form_leaves_the_very_bytes_unchanged(provider: str) -> None:
    raw = b'{"model":"m","reasoning_effort":"high","messages":[]}'  # folded, then written back as it was
    prepared = prepare_request(raw, provider_rules(provider))
    assert (prepared.body is raw, prepared.changed, prepared.controls.effort) == (True, False, "high")


def test_a_message_key_of_its_own_holding_a_number_no_float_holds_goes_as_sent_only_over_the_probes_size() -> None:
    small = b'{"model":"m","messages":[{"role":"user","content":"hi","seed":1e400}]}'
    with pytest.raises(ApiError) as info:  # a message key chat completions does not define: decoded whole
        prepare_request(small, OPENROUTER)
    assert (info.value.status, info.value.code) == (400, "invalid_json")
    large = small[:-3] + b',"x":"' + b"a" * PROBE_MAX_BYTES + b'"}]}'  # spliced: each message value as its bytes
    prepared = prepare_request(large, OPENROUTER)
    assert (prepared.body is large, prepared.changed) == (True, False)
