"""Where the tests look for the llama-server binary: the same place ``.ci/build-llama-server`` builds it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.llama_model import LLAMA_SERVER_VERSION, llama_server_binary

ROOT = Path(__file__).resolve().parents[1]


def test_the_binary_is_found_in_numi_mw_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("NUMI_MW_LLAMA_SERVER", raising=False)
    monkeypatch.setenv("NUMI_MW_CACHE", str(tmp_path))
    assert llama_server_binary() == tmp_path / "llama-server-0.3.36"


def test_without_numi_mw_cache_the_binary_is_in_the_home_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NUMI_MW_LLAMA_SERVER", raising=False)
    monkeypatch.setenv("NUMI_MW_CACHE", "")  # empty counts as unset, as in the script's ${NUMI_MW_CACHE:-...}
    assert llama_server_binary() == Path.home() / ".cache" / "numi_mw" / "llama-server-0.3.36"


def test_numi_mw_llama_server_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("NUMI_MW_CACHE", str(tmp_path))
    monkeypatch.setenv("NUMI_MW_LLAMA_SERVER", "/opt/llama-server")
    assert llama_server_binary() == Path("/opt/llama-server")


def test_the_version_is_the_one_the_build_script_builds() -> None:
    script = (ROOT / ".ci" / "build-llama-server").read_text()
    assert f'version="{LLAMA_SERVER_VERSION}"' in script.splitlines()
