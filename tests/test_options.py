"""Options of the public constructors and factories are checked when given: a wrong value is a ``ValueError``
that names the option and the value, before anything runs."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from numi_mw import (
    CatalogError,
    NormalizingTransport,
    ReasoningMiddleware,
    ResponseOptions,
    SyncNormalizingTransport,
    ThinkTags,
    create_app,
    fixed_route,
    load_catalog,
    provider_rules,
)
from numi_mw.core.adapters import Answer
from numi_mw.core.response import Bounds
from tests.e2e_support import numi_mw_command

PREFIX_RULE = (
    "ops_prefix must be empty or a path such as /numi-mw: a / before each segment, none empty, . or .. "
    "(no trailing /), no ?, #, % or space; not "
)


async def app(scope: Any, receive: Any, send: Any) -> None:
    raise AssertionError("never called")


EVERY_SHELL = [
    pytest.param(lambda **kw: ReasoningMiddleware(app, **kw), id="ReasoningMiddleware"),
    pytest.param(lambda **kw: NormalizingTransport(**kw), id="NormalizingTransport"),
    pytest.param(lambda **kw: SyncNormalizingTransport(**kw), id="SyncNormalizingTransport"),
    pytest.param(lambda **kw: create_app("http://127.0.0.1:8000/v1", **kw), id="create_app"),
]


@pytest.mark.parametrize("make", EVERY_SHELL)
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"think_start": "sometimes"}, "think_start must be one of content, reasoning, auto, not 'sometimes'"),
        ({"max_body_bytes": -5}, "max_body_bytes must be a positive whole number of bytes, not -5"),
        ({"max_body_bytes": 0}, "max_body_bytes must be a positive whole number of bytes, not 0"),
        ({"max_body_bytes": True}, "max_body_bytes must be a positive whole number of bytes, not True"),
        ({"max_body_bytes": 1.5}, "max_body_bytes must be a positive whole number of bytes, not 1.5"),
        ({"think_tags": "yes"}, "think_tags must be None, true, false or a ThinkTags, not 'yes'"),
        ({"preserve_reasoning": "no"}, "preserve_reasoning must be true or false, not 'no'"),
        (
            {"wire_api": "anthropic"},
            "wire_api must be one of openai-chat, openai-responses, anthropic-messages, not 'anthropic'",
        ),
        ({"think_tags": False, "think_start": "auto"}, "think_start has no effect with think_tags=False"),
    ],
)
def test_every_shell_refuses_a_bad_option(make: Any, options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as info:
        make(**options)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"timeout": -1}, "timeout must be a positive number of seconds, not -1"),
        ({"timeout": float("nan")}, "timeout must be a positive number of seconds, not nan"),
        ({"timeout": float("inf")}, "timeout must be a positive number of seconds, not inf"),
        (
            {"timeout": httpx.Timeout(float("inf"))},
            "timeout's values must be positive numbers of seconds or None, not Timeout(timeout=inf)",
        ),
        (
            {"timeout": httpx.Timeout(5.0, connect=-1.0)},
            "timeout's values must be positive numbers of seconds or None, not "
            "Timeout(connect=-1.0, read=5.0, write=5.0, pool=5.0)",
        ),
        ({"transport": 5}, "transport must be an httpx.AsyncBaseTransport, not 5"),
        ({"ops_prefix": "/v1"}, "ops_prefix must not be under /v1, the path the sidecar forwards, not '/v1'"),
        ({"ops_prefix": "/v1/ops"}, "ops_prefix must not be under /v1, the path the sidecar forwards, not '/v1/ops'"),
        (
            {"ops_prefix": "ops"},
            PREFIX_RULE + "'ops'",
        ),
        (
            {"ops_prefix": "/ops/"},
            PREFIX_RULE + "'/ops/'",
        ),
        (
            {"ops_prefix": "/a/../b"},
            PREFIX_RULE + "'/a/../b'",
        ),
        (
            {"ops_prefix": "/a?b"},
            PREFIX_RULE + "'/a?b'",
        ),
        ({"ops_prefix": None}, "ops_prefix must be a string such as '' or '/numi-mw', not None"),
        ({"metrics": "off"}, "metrics must be true or false, not 'off'"),
        (
            {"provider": "nope"},
            "unknown provider 'nope'; use one of: "
            "openrouter, ppq, openai, inception, anthropic, zai, deepseek, local, groq, cerebras, mistral, gemini, xai, together, fireworks, generic",
        ),
    ],
)
def test_create_app_refuses_a_bad_option(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as info:
        create_app("http://127.0.0.1:8000/v1", **options)
    assert str(info.value) == message


@pytest.mark.parametrize(
    "upstream",
    [
        "not-a-url",
        "ftp://example.com/v1",
        "http://",
        "127.0.0.1:8000/v1",
        "http:///v1",
        "http://[::1/v1",
        " http://127.0.0.1:8000/v1",
        "http://127.0.0.1:8000/v1\n",
        "http://a b/v1",
        "http://h/v1\x7f",
    ],
)
def test_create_app_refuses_an_upstream_that_is_not_an_http_url(upstream: str) -> None:
    with pytest.raises(ValueError) as info:
        create_app(upstream)
    assert str(info.value) == f"the upstream must be an http:// or https:// URL with a host, not {upstream!r}"


@pytest.mark.parametrize(
    ("upstream", "reason"),
    [
        ("http://0177.0.0.1:8000/v1", "Invalid IPv4 address: '0177.0.0.1'"),
        ("http://127.0.0.01/v1", "Invalid IPv4 address: '127.0.0.01'"),
        ("http://\uff11\uff12\uff17.\uff11/v1", "Invalid IDNA hostname: '\uff11\uff12\uff17.\uff11'"),
    ],
)
def test_create_app_refuses_an_upstream_httpx_cannot_send_to(upstream: str, reason: str) -> None:
    """Each request would be a 500: httpx, which sends them, refuses the URL."""
    with pytest.raises(ValueError) as info:
        create_app(upstream)
    assert str(info.value) == f"the upstream is no URL httpx can send to ({reason}), not {upstream!r}"


@pytest.mark.parametrize("upstream", ["http://h:99999/v1", "http://h:abc/v1", "http://h:0/v1", "https://h:-1/v1"])
def test_create_app_refuses_an_upstream_whose_port_is_not_a_port(upstream: str) -> None:
    with pytest.raises(ValueError) as info:
        create_app(upstream)
    assert str(info.value) == f"the upstream's port must be a number from 1 to 65535, not {upstream!r}"


def test_create_app_takes_an_ops_prefix_outside_v1() -> None:
    for prefix in ("", "/numi-mw", "/-/ops", "/v10"):
        create_app("http://127.0.0.1:8000/v1", ops_prefix=prefix)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"start": "sometimes"}, "think start 'sometimes' is not one of: content, reasoning, auto"),
        ({"lookahead_chars": -1}, "lookahead_chars must be a whole number of characters, 0 or more, not -1"),
        ({"lookahead_chars": "5"}, "lookahead_chars must be a whole number of characters, 0 or more, not '5'"),
        ({"switch_chars": True}, "switch_chars must be a whole number of characters, 0 or more, not True"),
        ({"harmony": "no"}, "harmony must be true or false, not 'no'"),
        (
            {"families": ()},
            "families must be (opening, closing) pairs of nonempty strings, such as (('<think>', '</think>'),), not ()",
        ),
        (
            {"families": (("<think>",),)},
            "families must be (opening, closing) pairs of nonempty strings, such as (('<think>', '</think>'),), "
            "not (('<think>',),)",
        ),
        (
            {"families": (("<think>", ""),)},
            "families must be (opening, closing) pairs of nonempty strings, such as (('<think>', '</think>'),), "
            "not (('<think>', ''),)",
        ),
        (
            {"families": "<think>"},
            "families must be (opening, closing) pairs of nonempty strings, such as (('<think>', '</think>'),), "
            "not '<think>'",
        ),
    ],
)
def test_think_tags_refuses_a_bad_option(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as info:
        ThinkTags(**options)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: ResponseOptions(exclude="yes"), "exclude must be true or false, not 'yes'"),
        (lambda: ResponseOptions(exclude=1), "exclude must be true or false, not 1"),
        (
            lambda: ResponseOptions(wire_api="anthropic"),
            "wire_api must be one of openai-chat, openai-responses, anthropic-messages, not 'anthropic'",
        ),
        (lambda: ResponseOptions(think="<think>"), "think must be a ThinkTags or None, not '<think>'"),
        (lambda: ResponseOptions(answer={"model": "m"}), "answer must be an Answer or None, not {'model': 'm'}"),
        (lambda: ResponseOptions(usage=True), "usage must be a UsageRules or None, not True"),
        (lambda: ResponseOptions(bounds=None), "bounds must be a Bounds, not None"),
        (lambda: Bounds(max_event_bytes=0), "max_event_bytes must be a positive whole number of bytes, not 0"),
        (lambda: Bounds(max_event_bytes=None), "max_event_bytes must be a positive whole number of bytes, not None"),
        (
            lambda: Bounds(max_response_bytes=1.5),
            "max_response_bytes must be a positive whole number of bytes, not 1.5",
        ),
        (
            lambda: Bounds(max_response_bytes=True),
            "max_response_bytes must be a positive whole number of bytes, not True",
        ),
    ],
)
def test_response_options_and_bounds_refuse_a_bad_value(make: Any, message: str) -> None:
    with pytest.raises(ValueError) as info:
        make()
    assert str(info.value) == message


def test_response_options_take_good_values() -> None:
    options = ResponseOptions(True, ThinkTags(), "anthropic-messages", Answer("claude"), Bounds(1, 2))
    assert (options.exclude, options.wire_api, options.bounds.max_response_bytes) == (True, "anthropic-messages", 2)


def test_think_tags_takes_good_options() -> None:
    tags = ThinkTags(families=(("<t>", "</t>"),), start="auto", lookahead_chars=0, switch_chars=0, harmony=False)
    assert tags.splitter() is not None


def test_think_tags_take_families_as_lists_and_keep_them_as_tuples() -> None:
    """As a JSON or TOML setting gives them; the splitter (compiled in the optional build) gets tuples."""
    tags = ThinkTags(families=[["<t>", "</t>"]])  # type: ignore[list-item]
    assert tags.families == (("<t>", "</t>"),)
    assert tags == ThinkTags(families=(("<t>", "</t>"),))
    assert hash(tags) == hash(ThinkTags(families=(("<t>", "</t>"),)))
    assert tags.split_all("<t>r</t>c") == ("r", "c")
    splitter = tags.splitter()
    assert splitter.feed("<t>r</t>c") + splitter.flush() == [("reasoning", "r"), ("content", "c")]


@pytest.mark.parametrize("name", [5, None, b"openai"])
def test_provider_rules_refuses_what_is_not_a_provider_name(name: Any) -> None:
    with pytest.raises(ValueError) as info:
        provider_rules(name)
    assert str(info.value).startswith(f"unknown provider {name!r}; use one of: ")


def test_load_catalog_refuses_what_is_not_text() -> None:
    with pytest.raises(CatalogError) as info:
        load_catalog(5, "catalog.toml")  # type: ignore[arg-type]
    assert str(info.value) == "catalog.toml: a catalog is TOML text (str or bytes), not int"
    with pytest.raises(ValueError) as value_info:
        load_catalog(b"", 5)  # type: ignore[arg-type]
    assert str(value_info.value) == "source must be the file name (a str), not 5"


def test_fixed_route_refuses_what_is_not_a_provider() -> None:
    with pytest.raises(ValueError) as info:
        fixed_route("openai")  # type: ignore[arg-type]
    assert str(info.value) == "provider must be a Provider or ProviderRules (numi_mw.provider_rules), not 'openai'"
    with pytest.raises(ValueError) as wire_info:
        fixed_route(provider_rules("openai"), wire_api="responses")  # type: ignore[arg-type]
    assert str(wire_info.value) == (
        "wire_api must be one of openai-chat, openai-responses, anthropic-messages, not 'responses'"
    )


KEYED_CATALOG = """
[[providers]]
name = "up"
base_url = "http://127.0.0.1:8000/v1"
api_key_env = "NUMI_TEST_UP_KEY"

[[models]]
id = "a/m"
reasoning_mode = "effort"

[[models.endpoints]]
tag = "up/m"
provider = "up"
"""


@pytest.mark.parametrize("value", ["sk-abc\n", "sk-abc\r\n", "sk-abc  \t\n"])
def test_a_key_with_trailing_whitespace_is_sent_without_it(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A key read from a mounted secret file ends with a newline; the upstream gets the key without it."""
    monkeypatch.setenv("NUMI_TEST_UP_KEY", value)
    sent: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request.headers.get("authorization"))
        return httpx.Response(200, json={"choices": []})

    app = create_app(catalog=load_catalog(KEYED_CATALOG, "c.toml"), transport=httpx.MockTransport(handler))
    with TestClient(app) as client:
        response = client.post("/v1/chat/completions", json={"model": "a/m", "messages": []})
    assert (response.status_code, sent) == (200, ["Bearer sk-abc"])


@pytest.mark.parametrize(
    ("value", "position"),
    [("sk-ключ", 4), ("sk-a\nb", 5), (" sk-abc", 1), ("sk-a b", 5), ("sk-\x1b[0m", 4), ("sk-é", 4), ("sk-\x7f", 4)],
)
def test_a_key_an_http_header_cannot_carry_is_refused_at_start_up(
    value: str, position: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NUMI_TEST_UP_KEY", value)
    with pytest.raises(ValueError) as info:
        create_app(catalog=load_catalog(KEYED_CATALOG, "c.toml"))
    assert str(info.value) == (
        f"the environment variable NUMI_TEST_UP_KEY (api_key_env of provider 'up') holds a character at position "
        f"{position} that is not visible ASCII; an API key is visible ASCII (the key is not shown)"
    )
    assert value.strip() not in str(info.value)


def test_serve_refuses_a_key_it_cannot_send_in_one_line(tmp_path: Path) -> None:
    catalog = tmp_path / "c.toml"
    catalog.write_text(KEYED_CATALOG)
    env = {**os.environ, "NUMI_TEST_UP_KEY": "sk-ключ-SECRET"}
    result = subprocess.run(
        [*numi_mw_command(), "serve", "--catalog", str(catalog), "--port", "9"],
        capture_output=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert (result.returncode, result.stderr.decode()) == (
        2,
        "numi-mw serve: the environment variable NUMI_TEST_UP_KEY (api_key_env of provider 'up') holds a character "
        "at position 4 that is not visible ASCII; an API key is visible ASCII (the key is not shown)\n",
    )


def test_bounds_take_an_int_of_a_subclass_as_the_shells_do() -> None:
    class Size(int):
        pass

    assert Bounds(max_event_bytes=Size(4096)).max_event_bytes == 4096
    assert ReasoningMiddleware(lambda *_: None, max_event_bytes=Size(4096)).bounds.max_event_bytes == 4096
