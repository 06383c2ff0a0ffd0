"""``numi-mw request``: the body the sidecar would send upstream, or the error body and exit status 1."""

from __future__ import annotations

import json
import subprocess

import pytest

from numi_mw.cli import main
from tests.e2e_support import numi_mw_command


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
