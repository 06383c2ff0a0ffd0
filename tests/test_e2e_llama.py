"""The sidecar in front of a real llama.cpp server (no mock), driven by the real openai SDK.

llama-server serves a tiny scripted model (``tests/llama_model.py``) that answers ``<think>\\nSpell it out:
s, t, r, a, w, b, e, r, r, y.\\n</think>\\n\\nThree r's.``. By default llama-server returns the reasoning as
``reasoning_content``; with ``"reasoning_format": "none"`` it leaves the raw tags in ``content`` (split across
tokens in the ``split_tags`` model). Through ``numi-mw serve --provider local`` the client gets one shape, and
the raw form gives exactly the strings llama.cpp's own parser gives: for every scripted shape
(``llama_model.SCRIPTS``), streamed and buffered, and for a chat template that opens the tag in the prompt
(``--chat-template-file``), whatever ``think_start`` says.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from numi_mw.core.details import rebuild_reasoning_details
from numi_mw.core.providers import provider_rules
from numi_mw.core.request import prepare_request
from tests.e2e_support import sidecar
from tests.llama_model import (
    CONTENT,
    OPENED_SCRIPT,
    OPENED_TEMPLATE,
    REASONING,
    SCRIPTS,
    SERVER_REASONING,
    llama_server_binary,
    llama_tier,
    run_llama_server,
    write_model,
)

BINARY = llama_server_binary()
pytestmark = [*llama_tier(BINARY), pytest.mark.usefixtures("upstream_transport")]
"""Every test here runs once per upstream transport (httpcore and aiohttp): llama-server closes the connection
after every streamed answer, which each must meet by sending the next request again."""

MESSAGES: Any = [{"role": "user", "content": "How many r's are in strawberry?"}]
RAW = {"reasoning_format": "none"}
PARSED = {"reasoning_format": "deepseek"}


@pytest.fixture(scope="module", params=[False, True], ids=["whole-tags", "split-tags"])
def servers(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, upstream_transport: str
) -> Iterator[tuple[openai.OpenAI, str]]:
    model = tmp_path_factory.mktemp("model") / "scripted.gguf"
    write_model(model, split_tags=request.param)
    with (
        run_llama_server(BINARY, model) as llama_url,
        sidecar(llama_url, "--provider", "local") as base_url,
        openai.OpenAI(base_url=base_url, api_key="none", max_retries=0, timeout=30) as sdk,
    ):
        yield sdk, llama_url


@pytest.fixture
def client(servers: tuple[openai.OpenAI, str]) -> openai.OpenAI:
    return servers[0]


def extra(obj: Any) -> dict[str, Any]:
    return dict(obj.model_extra or {})


@pytest.mark.parametrize(
    ("body", "reasoning", "content"),
    [({}, SERVER_REASONING, CONTENT), (RAW, SERVER_REASONING, CONTENT)],
    ids=["reasoning_content", "raw-tags"],
)
def test_buffered(client: openai.OpenAI, body: dict[str, Any], reasoning: str, content: str) -> None:
    completion = client.chat.completions.create(model="scripted", messages=MESSAGES, extra_body=body)
    message = completion.choices[0].message
    assert message.content == content
    assert extra(message)["reasoning"] == reasoning
    assert extra(message)["reasoning_details"] == [{"type": "reasoning.text", "text": reasoning, "format": "unknown"}]
    assert "reasoning_content" not in extra(message)
    assert completion.choices[0].finish_reason == "stop"


@pytest.mark.parametrize(
    ("body", "reasoning", "content"),
    [({}, SERVER_REASONING, CONTENT), (RAW, SERVER_REASONING, CONTENT)],
    ids=["reasoning_content", "raw-tags"],
)
def test_streamed_raw_iteration(client: openai.OpenAI, body: dict[str, Any], reasoning: str, content: str) -> None:
    stream = client.chat.completions.create(model="scripted", messages=MESSAGES, stream=True, extra_body=body)
    shown = text = ""
    entries: list[Any] = []
    finish = None
    for chunk in stream:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        fields = extra(delta)
        assert "reasoning_content" not in fields
        if fields.get("reasoning"):
            assert [e["text"] for e in fields["reasoning_details"]] == [fields["reasoning"]]
            shown += fields["reasoning"]
        entries.extend(fields.get("reasoning_details") or [])
        text += delta.content or ""
        assert "<" not in (delta.content or "")
        finish = chunk.choices[0].finish_reason or finish
    assert (shown, text, finish) == (reasoning, content, "stop")
    assert rebuild_reasoning_details(entries) == [
        {"type": "reasoning.text", "text": reasoning, "format": "unknown", "index": 0}
    ]


@pytest.mark.parametrize(
    ("body", "reasoning", "content"),
    [({}, SERVER_REASONING, CONTENT), (RAW, SERVER_REASONING, CONTENT)],
    ids=["reasoning_content", "raw-tags"],
)
def test_stream_helper(client: openai.OpenAI, body: dict[str, Any], reasoning: str, content: str) -> None:
    with client.chat.completions.stream(model="scripted", messages=MESSAGES, extra_body=body) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    message = final.choices[0].message
    assert message.content == content
    assert extra(message)["reasoning"] == reasoning
    assert [dict(d) for d in extra(message)["reasoning_details"]] == [
        {"type": "reasoning.text", "text": reasoning, "format": "unknown", "index": 0}
    ]


@pytest.mark.parametrize("body", [{}, RAW], ids=["reasoning_content", "raw-tags"])
def test_excluded_reasoning_never_reaches_the_client(client: openai.OpenAI, body: dict[str, Any]) -> None:
    request = {**body, "include_reasoning": False}
    completion = client.chat.completions.create(model="scripted", messages=MESSAGES, extra_body=request)
    message = completion.choices[0].message
    assert message.content == CONTENT
    assert not {"reasoning", "reasoning_details", "reasoning_content"} & set(extra(message))
    stream = client.chat.completions.create(model="scripted", messages=MESSAGES, stream=True, extra_body=request)
    text = ""
    for chunk in stream:
        for choice in chunk.choices:
            assert not {"reasoning", "reasoning_details", "reasoning_content"} & set(extra(choice.delta))
            text += choice.delta.content or ""
    assert text == message.content


def test_history_reasoning_replays_to_llama_cpp(servers: tuple[openai.OpenAI, str]) -> None:
    """A reply read from numi_mw (``reasoning``) goes back as ``reasoning_content``, which llama.cpp's template
    renders inside ``<think>`` (checked with llama-server's own ``/apply-template``)."""
    client, llama_url = servers
    history: Any = [
        *MESSAGES,
        {"role": "assistant", "content": CONTENT, "reasoning": REASONING},
        {"role": "user", "content": "And in raspberry?"},
    ]
    prepared = prepare_request(json.dumps({"model": "scripted", "messages": history}).encode(), provider_rules("local"))
    assert json.loads(prepared.body)["messages"][1] == {
        "role": "assistant",
        "content": CONTENT,
        "reasoning_content": REASONING,
    }
    rendered = httpx.post(llama_url.removesuffix("/v1") + "/apply-template", content=prepared.body, timeout=30)
    assert f"<|im_start|>assistant\n<think>\n{REASONING}\n</think>\n\n{CONTENT}<|im_end|>" in rendered.json()["prompt"]
    unconverted = httpx.post(llama_url.removesuffix("/v1") + "/apply-template", json={"messages": history}, timeout=30)
    assert REASONING not in unconverted.json()["prompt"]
    completion = client.chat.completions.create(model="scripted", messages=history)
    assert completion.choices[0].message.content == CONTENT
    assert extra(completion.choices[0].message)["reasoning"] == SERVER_REASONING


# --- the raw form split as llama.cpp's own parser splits it --------------------------------------------------


def split_stream(base_url: str, body: dict[str, Any]) -> tuple[str, str]:
    """Reasoning and content of a stream, read from its raw events (``reasoning`` or ``reasoning_content``);
    no content delta may carry a tag."""
    reasoning = content = ""
    payload = {"model": "scripted", "messages": MESSAGES, "stream": True, **body}
    with httpx.stream("POST", f"{base_url}/chat/completions", json=payload, timeout=30) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            for choice in json.loads(line.removeprefix("data: "))["choices"]:
                delta = choice["delta"]
                reasoning += delta.get("reasoning") or delta.get("reasoning_content") or ""
                content += delta.get("content") or ""
    return reasoning, content


def split_body(base_url: str, body: dict[str, Any]) -> tuple[str, str]:
    """Reasoning and content of a buffered answer."""
    payload = {"model": "scripted", "messages": MESSAGES, **body}
    response = httpx.post(f"{base_url}/chat/completions", json=payload, timeout=30)
    assert response.status_code == 200
    message = response.json()["choices"][0]["message"]
    reasoning = message.get("reasoning") or message.get("reasoning_content") or ""
    return reasoning, message.get("content") or ""


@pytest.fixture(scope="module", params=sorted(SCRIPTS))
def scripted(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, upstream_transport: str
) -> Iterator[tuple[str, str, str]]:
    """(script name, llama-server's base URL, the sidecar's base URL) for one scripted shape."""
    model = tmp_path_factory.mktemp("model") / f"{request.param}.gguf"
    write_model(model, script=SCRIPTS[request.param].pieces)
    with run_llama_server(BINARY, model) as llama_url, sidecar(llama_url, "--provider", "local") as base_url:
        yield request.param, llama_url, base_url


@pytest.mark.parametrize("read", [split_body, split_stream], ids=["buffered", "streamed"])
def test_the_raw_form_gives_llama_cpps_own_split(scripted: tuple[str, str, str], read: Any) -> None:
    name, llama_url, base_url = scripted
    script = SCRIPTS[name]
    assert read(llama_url, RAW) == ("", script.text)  # the server's raw form: the tags in content
    parsed = read(llama_url, PARSED)
    assert parsed == (script.reasoning, script.content)  # the server's own parser, as the script records
    assert read(base_url, RAW) == parsed  # the raw form through numi_mw: the same strings
    assert read(base_url, PARSED) == parsed  # and the parsed form keeps them


# --- a chat template that opens the reasoning tag in the prompt ----------------------------------------------

OPENED_CATALOG = """
[[providers]]
name = "llama"
base_url = "{url}"
rules = "local"

[[models]]
id = "vendor/opened"
think_start = "reasoning"

[[models.endpoints]]
tag = "llama/server"
provider = "llama"

[[models]]
id = "vendor/other"

[[models.endpoints]]
tag = "llama/server"
provider = "llama"
"""


@pytest.fixture(scope="module")
def opened(tmp_path_factory: pytest.TempPathFactory, upstream_transport: str) -> Iterator[dict[str, str]]:
    """llama-server with a template whose generation prompt ends in ``<think>\\n``, and sidecars in front of it:
    the default start, ``--think-start reasoning`` and ``auto``, and a catalog whose model says ``think_start =
    "reasoning"``."""
    folder = tmp_path_factory.mktemp("opened")
    model, template, catalog = folder / "opened.gguf", folder / "opened.jinja", folder / "catalog.toml"
    write_model(model, script=OPENED_SCRIPT)
    template.write_text(OPENED_TEMPLATE)
    with run_llama_server(BINARY, model, extra_args=["--chat-template-file", str(template)]) as llama_url:
        catalog.write_text(OPENED_CATALOG.format(url=llama_url))
        with (
            sidecar(llama_url, "--provider", "local") as default,
            sidecar(llama_url, "--provider", "local", "--think-start", "reasoning") as reasoning,
            sidecar(llama_url, "--provider", "local", "--think-start", "auto") as auto,
            sidecar(None, "--catalog", str(catalog)) as routed,
        ):
            yield {"llama": llama_url, "default": default, "reasoning": reasoning, "auto": auto, "catalog": routed}


@pytest.mark.parametrize("read", [split_body, split_stream], ids=["buffered", "streamed"])
@pytest.mark.parametrize("target", ["default", "reasoning", "auto", "catalog"])
def test_a_template_opened_tag_splits_as_llama_cpp_splits_it(opened: dict[str, str], target: str, read: Any) -> None:
    llama_url = opened["llama"]
    # The prompt ends with "<think>\n" and the model writes only the closing tag; with reasoning_format "none"
    # llama-server puts the template's "<think>\n" back in front of the text.
    assert read(llama_url, RAW) == ("", "<think>\n" + "".join(OPENED_SCRIPT))
    parsed = read(llama_url, PARSED)
    assert parsed == (SERVER_REASONING, CONTENT)
    for model in ("vendor/opened", "vendor/other") if target == "catalog" else ("scripted",):
        assert read(opened[target], {**RAW, "model": model}) == parsed, model
        assert read(opened[target], {**PARSED, "model": model}) == parsed, model
