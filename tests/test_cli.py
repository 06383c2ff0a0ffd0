"""``numi-mw request``: the body the sidecar would send upstream, or the error body and exit status 1."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

from numi_mw.cli import main
from numi_mw.core import build as core_build
from tests.e2e_support import free_port, numi_mw_command


def run(args: list[str], stdin: bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*numi_mw_command(), *args], input=stdin, capture_output=True, timeout=60, check=False)


def test_request_writes_the_upstream_body() -> None:
    body = {"model": "m", "reasoning_effort": "high", "include_reasoning": False, "messages": []}
    result = run(["request", "--provider", "openrouter"], json.dumps(body).encode())
    assert result.returncode == 0
    assert result.stdout == b'{"model":"m","reasoning":{"effort":"high","exclude":true},"messages":[]}\n'


def test_request_default_provider_is_generic() -> None:
    body = {"model": "m", "messages": [{"role": "assistant", "content": "x", "reasoning": "R"}]}
    result = run(["request"], json.dumps(body).encode())
    assert json.loads(result.stdout) == {
        "model": "m",
        "messages": [{"role": "assistant", "content": "x", "reasoning_content": "R"}],
    }


def test_request_rejected_writes_the_error_body_and_exits_1() -> None:
    result = run(["request", "--provider", "openai"], b'{"model": "m", "reasoning": "high"}')
    assert result.returncode == 1
    assert json.loads(result.stdout) == {
        "error": {
            "message": "reasoning must be an object, not str.",
            "type": "invalid_request_error",
            "code": "invalid_request",
            "param": "reasoning",
        }
    }


def test_unknown_provider_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["request", "--provider", "nope"])
    assert info.value.code == 2
    assert "invalid choice: 'nope'" in capsys.readouterr().err


def test_response_writes_what_the_client_receives(tmp_path: Path) -> None:
    request = tmp_path / "request.json"
    request.write_text('{"model": "m", "stream": true}')
    upstream = (
        b'data: {"choices":[{"index":0,"delta":{"reasoning_content":"Hm."},"finish_reason":null}]}\n\ndata: [DONE]\n\n'
    )
    result = run(["response", "--request", str(request), "--provider", "deepseek"], upstream)
    assert result.returncode == 0
    assert result.stdout == (
        b'data: {"choices":[{"index":0,"delta":{"reasoning":"Hm.","reasoning_details":'
        b'[{"type":"reasoning.text","text":"Hm.","index":0}]},"finish_reason":null}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{"reasoning_details":[{"type":"reasoning.text","format":"unknown",'
        b'"index":0}]},"finish_reason":null}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{"reasoning_details":[]},"finish_reason":null}]}\n\n'
        b"data: [DONE]\n\n"
    )


def test_response_json_body_with_exclusion_and_think_tags(tmp_path: Path) -> None:
    request = tmp_path / "request.json"
    request.write_text('{"model": "m", "include_reasoning": false}')
    upstream = b'{"choices":[{"index":0,"message":{"role":"assistant","content":"<think>x</think>Hi."},"finish_reason":"stop"}]}'
    result = run(["response", "--request", str(request), "--provider", "local"], upstream)
    assert json.loads(result.stdout) == {
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi."}, "finish_reason": "stop"}]
    }
    kept = run(["response", "--request", str(request), "--provider", "local", "--no-think-tags"], upstream)
    assert json.loads(kept.stdout)["choices"][0]["message"]["content"] == "<think>x</think>Hi."


def test_rebuild_from_a_json_list_and_from_sse() -> None:
    fragments = [
        {"type": "reasoning.text", "text": "The", "format": "unknown", "index": 0},
        {"type": "reasoning.text", "text": " time.", "format": "unknown", "index": 0},
        {"type": "reasoning.text", "signature": "SIG", "index": 0},
    ]
    expected = [{"type": "reasoning.text", "text": "The time.", "format": "unknown", "index": 0, "signature": "SIG"}]
    assert json.loads(run(["rebuild"], json.dumps(fragments).encode()).stdout) == expected
    sse = b"".join(
        b'data: {"choices":[{"index":0,"delta":{"reasoning_details":[' + json.dumps(f).encode() + b"]}}]}\n\n"
        for f in fragments
    )
    result = run(["rebuild"], b": keep-alive\n\n" + sse + b"data: [DONE]\n\n")
    assert json.loads(result.stdout) == expected


def error(message: str, code: str = "invalid_request", param: str | None = None) -> bytes:
    return (
        json.dumps(
            {"error": {"message": message, "type": "invalid_request_error", "code": code, "param": param}},
            separators=(",", ":"),
        ).encode()
        + b"\n"
    )


@pytest.mark.parametrize(
    ("stdin", "expected"),
    [
        (
            b"hello",
            error(
                "The input is neither a JSON array of reasoning_details fragments nor an SSE stream of chat "
                "completion chunks."
            ),
        ),
        (
            b"",
            error(
                "The input is empty; send a JSON array of reasoning_details fragments or an SSE stream of chat "
                "completion chunks.",
                "invalid_json",
            ),
        ),
        (
            b" \n\t",
            error(
                "The input is empty; send a JSON array of reasoning_details fragments or an SSE stream of chat "
                "completion chunks.",
                "invalid_json",
            ),
        ),
        (
            b"[1,2]",
            error(
                "reasoning_details[0] must be a reasoning detail fragment (an object), not int.",
                param="reasoning_details[0]",
            ),
        ),
        (
            b'[{"type":"reasoning.text","text":"a"},{"type":"reasoning.text","text":["b"]}]',
            error("reasoning_details[1].text must be a string or null, not list.", param="reasoning_details[1].text"),
        ),
        (
            b"[1,",
            error(
                "The input opens like a JSON array but is not JSON; send an array of reasoning_details fragments "
                "or an SSE stream of chunks.",
                "invalid_json",
            ),
        ),
    ],
)
def test_rebuild_refuses_input_that_is_not_fragments_with_an_error_body(stdin: bytes, expected: bytes) -> None:
    result = run(["rebuild"], stdin)
    assert (result.returncode, result.stdout, result.stderr) == (1, expected, b"")


PASSED = "the sidecar would pass it to the client as it came"


@pytest.mark.parametrize(
    ("stdin", "expected"),
    [
        (b"", error("The response on stdin is empty; send the upstream's body.", "invalid_json")),
        (b"{bad", error(f"The response on stdin is not JSON; {PASSED}.", "invalid_json")),
        (
            b"[1,2]",
            error(
                f"The response on stdin is not a chat completion (an object with a choices array); {PASSED}.",
                param="choices",
            ),
        ),
        (
            b'{"choices":"x"}',
            error(
                f"The response on stdin is not a chat completion (an object with a choices array); {PASSED}.",
                param="choices",
            ),
        ),
        (
            b"data: hello\n\n",
            error(f"The response on stdin is not an SSE stream of chat completion chunks; {PASSED}."),
        ),
    ],
)
def test_response_refuses_input_that_is_no_answer_with_an_error_body(
    tmp_path: Path, stdin: bytes, expected: bytes
) -> None:
    request = tmp_path / "request.json"
    request.write_text('{"model": "m"}')
    result = run(["response", "--request", str(request)], stdin)
    assert (result.returncode, result.stdout) == (1, expected)


def test_response_passes_an_upstream_error_body_and_exits_1(tmp_path: Path) -> None:
    request = tmp_path / "request.json"
    request.write_text('{"model": "m"}')
    body = b'{"error":{"message":"Rate limit reached.","type":"requests","code":"rate_limit_exceeded","param":null}}'
    result = run(["response", "--request", str(request), "--provider", "openai"], body)
    assert (result.returncode, result.stdout) == (1, body)


def test_response_with_a_choice_index_that_is_an_array_passes_the_choice_through(tmp_path: Path) -> None:
    request = tmp_path / "request.json"
    request.write_text('{"model": "m", "stream": true}')
    odd = b'data: {"choices":[{"index":[0],"delta":{"reasoning_content":"Hm."},"finish_reason":null}]}\n\n'
    result = run(["response", "--request", str(request), "--provider", "deepseek"], odd + b"data: [DONE]\n\n")
    assert (result.returncode, result.stdout) == (0, odd + b"data: [DONE]\n\n")


PACKAGED = str(Path(__file__).resolve().parents[1] / "numi_mw" / "catalog.toml")


def test_request_with_a_catalog_shows_the_route_and_the_body() -> None:
    body = {
        "model": "anthropic/claude-sonnet-4.5",
        "reasoning_effort": "high",
        "messages": [{"role": "assistant", "content": "x", "reasoning_content": "r"}],
    }
    result = run(["request", "--catalog", PACKAGED], json.dumps(body).encode())
    assert result.returncode == 0
    assert json.loads(result.stdout) == {
        "route": {
            "model": "anthropic/claude-sonnet-4.5",
            "endpoint": "anthropic",
            "eligible": ["anthropic"],
            "provider": "openrouter",
            "base_url": "https://openrouter.ai/api/v1",
            "wire_api": "openai-chat",
            "rules": "openrouter",
        },
        "body": {
            "model": "anthropic/claude-sonnet-4.5",
            "reasoning": {"effort": "high"},
            "messages": [{"role": "assistant", "content": "x", "reasoning": "r"}],
        },
    }


def test_request_with_a_catalog_refuses_an_unaccepted_effort() -> None:
    result = run(
        ["request", "--catalog", PACKAGED], b'{"model": "anthropic/claude-sonnet-4.5", "reasoning_effort": "xhigh"}'
    )
    assert result.returncode == 1
    assert json.loads(result.stdout)["error"]["param"] == "reasoning.effort"


def test_catalog_check(tmp_path: Path) -> None:
    ok = run(["catalog", "check", PACKAGED], b"")
    assert ok.returncode == 0
    assert ok.stdout.decode().endswith(": ok: 4 providers, 11 models, 11 endpoints\n")
    bad = tmp_path / "bad.toml"
    bad.write_text('[[providers]]\nname = "x"\nbase_url = "ftp://x"\n')
    result = run(["catalog", "check", str(bad)], b"")
    assert result.returncode == 1
    assert (
        result.stderr.decode()
        == f'{bad}: providers[0] (name "x"): base_url: "ftp://x" must start with http:// or https://\n'
    )


def test_catalog_check_warns_about_unknown_keys(tmp_path: Path) -> None:
    typo = tmp_path / "typo.toml"
    typo.write_text(
        '[[providers]]\nname = "x"\nbase_url = "http://a"\napi_key = "sk"\n[[models]]\nid = "m"\n[[models.endpoints]]\ntag = "t"\nprovider = "x"\nsuported_parameters = ["a"]\nreasoning = {mandatry = true}\n'
    )
    result = run(["catalog", "check", str(typo)], b"")
    assert result.returncode == 0
    assert result.stderr.decode().splitlines() == [
        f'{typo}: warning: providers[0]: unknown key "api_key"; keep keys out of the catalog: name an environment variable with api_key_env (ignored)',
        f'{typo}: warning: models[0].endpoints[0]: unknown key "suported_parameters" (ignored)',
        f'{typo}: warning: models[0].endpoints[0].reasoning: unknown key "mandatry" (ignored)',
    ]


def test_response_translates_a_native_error_body_and_exits_1(tmp_path: Path) -> None:
    request = tmp_path / "request.json"
    request.write_text('{"model":"c","messages":[{"role":"user","content":"W?"}]}')
    args = ["response", "--wire-api", "anthropic-messages", "--request", str(request)]
    overloaded = b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'
    result = run(args, overloaded)
    assert result.returncode == 1
    assert json.loads(result.stdout) == {
        "error": {"message": "Overloaded", "type": "overloaded_error", "code": "overloaded_error", "param": None}
    }
    result = run(args, b"\xef\xbb\xbf" + overloaded)  # after a byte order mark (RFC 8259 section 8.1): the same
    assert (result.returncode, json.loads(result.stdout)["error"]["type"]) == (1, "overloaded_error")
    result = run(args, b'{"x":1}')  # JSON that is not an Anthropic message: the sidecar's 502 body
    assert result.returncode == 1
    assert json.loads(result.stdout)["error"]["code"] == "upstream_unavailable"
    for not_json in (b"<html>\n", b""):  # an answer to a buffered request that is not JSON at all: the same
        result = run(args, not_json)
        assert result.returncode == 1
        assert json.loads(result.stdout)["error"] == {
            "message": "The upstream's answer is not JSON; numi_mw cannot translate it.",
            "type": "api_error",
            "code": "upstream_unavailable",
            "param": None,
        }


def test_request_prints_adjustments_on_stderr_after_the_body() -> None:
    body = b'{"model":"c","temperature":0.2,"reasoning_effort":"low","messages":[{"role":"user","content":"W?"}]}'
    result = run(["request", "--provider", "anthropic", "--wire-api", "anthropic-messages"], body)
    assert result.returncode == 0
    assert json.loads(result.stdout) == {
        "model": "c",
        "messages": [{"role": "user", "content": "W?"}],
        "max_tokens": 4096 + 2048,
        "thinking": {"type": "enabled", "budget_tokens": 2048},
    }
    assert result.stdout.endswith(b"\n")
    assert result.stderr == b"numi-mw request: adjustments: temperature-removed\n"


def test_response_passes_an_openai_error_body_of_the_responses_api_and_exits_1(tmp_path: Path) -> None:
    request = tmp_path / "request.json"
    request.write_text('{"model":"m","messages":[{"role":"user","content":"W?"}]}')
    error = b'{"error":{"message":"Rate limit reached.","type":"requests","code":"rate_limit_exceeded","param":null}}'
    result = run(["response", "--wire-api", "openai-responses", "--request", str(request)], error)
    assert (result.returncode, result.stdout) == (1, error)


@pytest.mark.parametrize(
    "command", [["response", "--request", "r.json"], ["serve", "--upstream", "http://127.0.0.1:9"]]
)
def test_think_start_with_think_tags_off_is_a_usage_error(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*command, "--no-think-tags", "--think-start", "auto"]) == 2
    assert capsys.readouterr().err == f"numi-mw {command[0]}: --think-start has no effect with --no-think-tags\n"


def test_catalog_check_warns_about_effort_names_outside_the_spec(tmp_path: Path) -> None:
    typo = tmp_path / "typo.toml"
    typo.write_text(
        '[[providers]]\nname = "x"\nbase_url = "http://a"\n[[models]]\nid = "m"\n[[models.endpoints]]\ntag = "t"\nprovider = "x"\n'
        'reasoning = { supported_efforts = ["low", "hgih"], default_effort = "Medium" }\n'
    )
    result = run(["catalog", "check", str(typo)], b"")
    assert result.returncode == 0
    assert result.stderr.decode().splitlines() == [
        f'{typo}: warning: models[0] (id "m"): endpoints[0].reasoning.supported_efforts[1]: effort "hgih" is not one of none, minimal, low, medium, high, xhigh, max; requests name the effort exactly',
        f'{typo}: warning: models[0] (id "m"): endpoints[0].reasoning.default_effort: effort "Medium" is not one of none, minimal, low, medium, high, xhigh, max; requests name the effort exactly',
    ]
    assert result.stdout.decode() == f"{typo}: ok: 1 providers, 1 models, 1 endpoints\n"


def test_the_packaged_catalog_has_no_warnings() -> None:
    result = run(["catalog", "check", PACKAGED], b"")
    assert (result.returncode, result.stderr) == (0, b"")


def test_serve_prints_the_catalog_warnings_before_it_starts(tmp_path: Path) -> None:
    typo = tmp_path / "typo.toml"
    typo.write_text(
        '[[providers]]\nname = "x"\nbase_url = "http://a"\nkey = 1\n[[models]]\nid = "m"\n[[models.endpoints]]\ntag = "t"\nprovider = "x"\n'
        'reasoning = { supported_efforts = ["hgih"] }\n'
    )
    # an unusable host makes uvicorn stop right after the warnings and the start-up lines
    result = run(["serve", "--catalog", str(typo), "--host", "256.0.0.1", "--port", "8787"], b"")
    lines = result.stderr.decode().splitlines()
    assert lines[:2] == [
        f'{typo}: warning: providers[0]: unknown key "key" (ignored)',
        f'{typo}: warning: models[0] (id "m"): endpoints[0].reasoning.supported_efforts[0]: effort "hgih" is not one of none, minimal, low, medium, high, xhigh, max; requests name the effort exactly',
    ]
    assert lines[2].endswith(
        f" INFO numi_mw.serve: catalog {typo}: provider x at http://a: rules generic, wire API openai-chat"
    )
    assert lines[3].endswith(" INFO numi_mw.serve: operations: /healthz, /readyz, /metrics")
    assert lines[4].endswith(f" INFO numi_mw.serve: numi_mw core: {core_build()}")


@pytest.mark.parametrize(
    ("upstream", "expected"),
    [
        (
            "http://127.0.0.1:8000/v1",
            "upstream http://127.0.0.1:8000/v1: provider local (inferred from the host; --provider picks another), "
            "wire API openai-chat",
        ),
        (
            "https://user:secret@api.example.com/v1?api-key=sk-1",
            "upstream https://api.example.com/v1: provider generic (inferred from the host; --provider picks "
            "another), wire API openai-chat",
        ),
    ],
)
def test_serve_says_which_provider_and_wire_api_it_chose(upstream: str, expected: str) -> None:
    result = run(["serve", "--upstream", upstream, "--host", "256.0.0.1", "--log-format", "json"], b"")
    first = json.loads(result.stderr.decode().splitlines()[0])
    assert set(first) == {"time", "level", "logger", "message"}
    assert (first["level"], first["logger"], first["message"]) == ("info", "numi_mw.serve", expected)
    assert b"secret" not in result.stderr and b"sk-1" not in result.stderr


def test_serve_with_a_named_provider_says_so() -> None:
    args = ["serve", "--upstream", "http://127.0.0.1:8000/v1", "--provider", "deepseek", "--wire-api", "openai-chat"]
    result = run([*args, "--host", "256.0.0.1", "--ops-prefix", "/ops", "--no-metrics"], b"")
    lines = result.stderr.decode().splitlines()
    assert lines[0].endswith(
        " INFO numi_mw.serve: upstream http://127.0.0.1:8000/v1: provider deepseek (--provider), wire API openai-chat"
    )
    assert lines[1].endswith(" INFO numi_mw.serve: operations: /ops/healthz, /ops/readyz")
    assert lines[2].endswith(f" INFO numi_mw.serve: numi_mw core: {core_build()}")
    assert (result.returncode, lines[3:]) == (
        2,
        ["numi-mw serve: cannot listen on --host '256.0.0.1' --port 8787: the host does not resolve to an address"],
    )


@pytest.mark.parametrize("upstream", ["not-a-url", "ftp://example.com/v1"])
def test_serve_refuses_an_upstream_that_is_not_an_http_url(upstream: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--upstream", upstream]) == 2
    assert capsys.readouterr().err == (
        f"numi-mw serve: the upstream must be an http:// or https:// URL with a host, not {upstream!r}\n"
    )


@pytest.mark.parametrize("upstream", ["http://h:99999/v1", "http://h:abc/v1"])
def test_serve_refuses_an_upstream_port_that_is_not_a_port(upstream: str) -> None:
    result = run(["serve", "--upstream", upstream], b"")
    assert (result.returncode, result.stderr.decode()) == (
        2,
        f"numi-mw serve: the upstream's port must be a number from 1 to 65535, not {upstream!r}\n",
    )


@pytest.mark.parametrize(("option", "value"), [("--timeout", "nan"), ("--timeout", "inf"), ("--replay-ttl", "nan")])
def test_serve_refuses_a_duration_that_is_not_a_finite_number(option: str, value: str) -> None:
    result = run(["serve", "--upstream", "http://127.0.0.1:8000/v1", option, value], b"")
    assert (result.returncode, result.stderr.decode()) == (  # one line, without argparse's usage block
        2,
        f"numi-mw serve: error: argument {option}: {value!r} is not a finite number\n",
    )


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("0", "'0' must be greater than 0"),
        ("-2", "'-2' must be greater than 0"),
        ("two", "'two' is not a whole number"),
        ("1.5", "'1.5' is not a whole number"),
        ("99999", f"'99999' is more than {4 * (os.cpu_count() or 1)} worker processes (4 per core of this machine)"),
    ],
)
def test_serve_refuses_a_worker_count_that_is_not_a_whole_number_from_1(value: str, problem: str) -> None:
    result = run(["serve", "--upstream", "http://127.0.0.1:8000/v1", "--workers", value], b"")
    assert (result.returncode, result.stderr.decode()) == (2, f"numi-mw serve: error: argument --workers: {problem}\n")


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["request", "--bogus"], "numi-mw request: error: unrecognized arguments: --bogus"),
        (["catalog", "check", "--strict", "f.toml"], "numi-mw catalog: error: unrecognized arguments: --strict"),
        (
            ["serve", "--log-level", "trace"],
            "numi-mw serve: error: argument --log-level: invalid choice: 'trace' "
            "(choose from 'critical', 'error', 'warning', 'info', 'debug')",
        ),
        ([], "numi-mw: error: the following arguments are required: COMMAND"),
    ],
)
def test_a_usage_error_is_one_line_naming_the_command(argv: list[str], line: str) -> None:
    result = run(argv, b"")
    assert (result.returncode, result.stderr.decode(), result.stdout) == (2, line + "\n", b"")


def test_serve_that_cannot_listen_exits_2_with_one_line() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = run(["serve", "--upstream", "http://127.0.0.1:8000/v1", "--port", str(port)], b"")
    lines = result.stderr.decode().splitlines()
    assert (result.returncode, lines[-1]) == (
        2,
        f"numi-mw serve: cannot listen on --host '127.0.0.1' --port {port}: address already in use",
    )
    assert [line for line in lines if "numi_mw.serve" not in line] == [lines[-1]]


def test_serve_on_a_host_that_does_not_resolve_exits_2(monkeypatch: pytest.MonkeyPatch) -> None:
    from numi_mw import cli

    def unresolvable(*args: Any, **kwargs: Any) -> Any:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(cli.socket, "getaddrinfo", unresolvable)
    assert cli.listen_problem("nonexistent.invalid", 8787) == (
        "cannot listen on --host 'nonexistent.invalid' --port 8787: the host does not resolve to an address"
    )


def test_response_help_names_no_catalog() -> None:
    result = run(["response", "--help"], b"")
    text = " ".join(result.stdout.decode().split())
    assert "catalog" not in text
    assert "auto (default content)" in text


def test_serve_refuses_an_ops_prefix_under_v1(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--upstream", "http://127.0.0.1:8000/v1", "--ops-prefix", "/v1/ops"]) == 2
    assert capsys.readouterr().err == (
        "numi-mw serve: --ops-prefix must not be under /v1, the path the sidecar forwards, not '/v1/ops'\n"
    )


@pytest.mark.parametrize(
    ("option", "value"), [("--log-level", "loud"), ("--log-level", "trace"), ("--log-format", "xml")]
)
def test_serve_refuses_an_unknown_log_level_or_format(
    option: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["serve", "--upstream", "http://127.0.0.1:8000/v1", option, value])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}: invalid choice: '{value}'" in err
    assert "Traceback" not in err


def test_request_refuses_a_provider_with_a_catalog(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["request", "--provider", "openai", "--catalog", PACKAGED]) == 2
    assert capsys.readouterr().err == (
        "numi-mw request: --provider goes without --catalog; a catalog names each provider\n"
    )


def test_version() -> None:
    result = run(["--version"], b"")
    assert (result.returncode, result.stdout) == (0, b"numi-mw 0.1.0\n")


def _actions(parser: Any) -> list[tuple[str, Any]]:
    import argparse

    found: list[tuple[str, Any]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += [(f"{name} {label}", a) for label, a in _actions(sub)]
        elif not isinstance(action, argparse._HelpAction | argparse._VersionAction) and action.option_strings:
            found.append((action.option_strings[0], action))
    return found


def test_every_option_says_its_default_in_its_help() -> None:
    from numi_mw.cli import _parser

    actions = _actions(_parser())
    assert len(actions) > 20
    missing = [name for name, action in actions if "default" not in action.help and "required" not in action.help]
    assert missing == []


def _record_the_collector(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """What ``numi-mw serve`` does to the cycle collector, in order; the real ``gc`` functions are not called and
    uvicorn configures no logging, so this test process's collector and loggers stay as they are."""
    import gc
    import logging

    from numi_mw import cli
    from tests.conftest import keep_logging_switches

    monkeypatch.setattr(
        cli, "log_config", lambda level, style, **options: None
    )  # this process's logging stays as it is
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi"):  # uvicorn.Config sets their levels
        logger = logging.getLogger(name)
        monkeypatch.setattr(logger, "level", logger.level)
    calls: list[Any] = []
    keep_logging_switches(monkeypatch)  # ops.lean_log_records sets them
    monkeypatch.setattr(gc, "collect", lambda *args: calls.append("collect") or 0)
    monkeypatch.setattr(gc, "freeze", lambda: calls.append("freeze"))
    monkeypatch.setattr(gc, "set_threshold", lambda *thresholds: calls.append(thresholds))
    return calls


def test_serve_freezes_what_start_up_left_and_raises_the_collector_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    import uvicorn

    calls = _record_the_collector(monkeypatch)
    monkeypatch.setattr(uvicorn.Server, "run", lambda server, sockets=None: calls.append("serve"))
    assert main(["serve", "--upstream", "http://127.0.0.1:8000/v1", "--port", str(free_port())]) == 0
    assert calls == ["collect", "freeze", (10_000, 10, 10), "serve"]


def test_serve_leaves_the_forwarded_headers_to_the_upstream(monkeypatch: pytest.MonkeyPatch) -> None:
    """uvicorn's proxy headers middleware is off: nothing in the sidecar reads the client or scheme it would set."""
    import uvicorn

    _record_the_collector(monkeypatch)
    configs: list[uvicorn.Config] = []
    monkeypatch.setattr(uvicorn.Server, "run", lambda server, sockets=None: configs.append(server.config))
    assert main(["serve", "--upstream", "http://127.0.0.1:8000/v1", "--port", str(free_port())]) == 0
    assert [config.proxy_headers for config in configs] == [False]


def test_one_process_runs_on_the_loop_that_accepts_a_burst_of_connections_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """uvicorn's ``loop`` setting names ``numi_mw.serve_loop.new_event_loop`` (uvloop, every pending connection
    accepted at once) for one process; workers, which share the listening socket, keep uvicorn's own (uvloop, one
    connection a round), so that no worker takes a whole burst."""
    import uvicorn
    from uvicorn.supervisors import Multiprocess

    from numi_mw.serve_loop import new_event_loop

    _record_the_collector(monkeypatch)
    configs: list[uvicorn.Config] = []
    monkeypatch.setattr(uvicorn.Server, "run", lambda server, sockets=None: configs.append(server.config))

    def one_worker(supervisor: Multiprocess) -> None:
        for sock in supervisor.sockets:
            sock.close()
        configs.append(supervisor.config)

    monkeypatch.setattr(Multiprocess, "run", one_worker)
    for workers in ("1", "2"):
        port = str(free_port())
        assert main(["serve", "--upstream", "http://127.0.0.1:8000/v1", "--port", port, "--workers", workers]) == 0
    assert [config.loop for config in configs] == ["numi_mw.serve_loop:new_event_loop", "auto"]
    assert configs[0].get_loop_factory() is new_event_loop


def test_each_worker_settles_its_own_collector_once_its_app_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    from starlette.applications import Starlette
    from uvicorn.supervisors import Multiprocess

    calls = _record_the_collector(monkeypatch)

    def one_worker(supervisor: Multiprocess) -> None:  # what a worker process does first: build its app
        for sock in supervisor.sockets:
            sock.close()
        calls.append("build")
        calls.append(isinstance(supervisor.config.app(), Starlette))  # the sidecar app, a Starlette app

    monkeypatch.setattr(Multiprocess, "run", one_worker)
    port = str(free_port())
    assert main(["serve", "--upstream", "http://127.0.0.1:8000/v1", "--port", port, "--workers", "2"]) == 0
    assert calls == ["build", "collect", "freeze", (10_000, 10, 10), True]


def test_ctrl_c_stops_one_worker_cleanly_and_sigterm_ends_it_by_its_signal() -> None:
    """As ``uvicorn.run`` does: Ctrl-C (SIGINT) exits 0 with no traceback once the server has shut down; SIGTERM
    shuts down the same way and then ends the process by that signal, so a supervisor sees it."""
    import signal

    from tests.e2e_support import wait_for_port

    for sent, status in ((signal.SIGINT, 0), (signal.SIGTERM, -signal.SIGTERM)):
        port = free_port()
        command = [*numi_mw_command(), "serve", "--upstream", "http://127.0.0.1:8000/v1", "--port", str(port)]
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            wait_for_port(port, process)
            process.send_signal(sent)
            _, stderr = process.communicate(timeout=30)
        finally:
            process.kill()
            process.wait(timeout=10)
        assert process.returncode == status, stderr.decode()
        assert b"Traceback" not in stderr and b"Finished server process" in stderr


@pytest.mark.parametrize(
    ("options", "line"),
    [
        (["--replay-ttl", "10"], "--replay-ttl, --replay-max-bytes and --replay-key-env go with a --replay-store URL"),
        (
            ["--ops-prefix", "/v1/ops"],
            "--ops-prefix must not be under /v1, the path the sidecar forwards, not '/v1/ops'",
        ),
    ],
)
def test_serve_names_its_flags_in_an_option_error(options: list[str], line: str) -> None:
    result = run(["serve", "--upstream", "http://127.0.0.1:8000/v1", *options], b"")
    assert (result.returncode, result.stderr.decode()) == (2, f"numi-mw serve: {line}\n")
