"""DESIGN.md "Layers and rooms": ``numi_mw/core`` imports msgspec and the standard library only."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

CORE = Path(__file__).resolve().parents[1] / "numi_mw" / "core"
FORBIDDEN_STDLIB = {"socket", "asyncio", "logging", "subprocess", "threading", "time", "os", "io", "pathlib"}


def imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_core_imports_only_msgspec_and_pure_stdlib() -> None:
    files = sorted(CORE.rglob("*.py"))
    assert files
    for path in files:
        roots = imported_roots(path)
        outside = {r for r in roots if r not in sys.stdlib_module_names and r not in {"msgspec", "numi_mw"}}
        assert outside == set(), f"{path.name} imports {outside}"
        assert roots & FORBIDDEN_STDLIB == set(), f"{path.name} does I/O or keeps time: {roots & FORBIDDEN_STDLIB}"


def test_core_imports_no_shell_module() -> None:
    for path in sorted(CORE.rglob("*.py")):
        text = path.read_text()
        for shell in (
            "numi_mw.proxy",
            "numi_mw.middleware",
            "numi_mw.cli",
            "numi_mw.asgi",
            "numi_mw.transport",
            "numi_mw.upstream",
        ):
            assert shell not in text, f"{path.name} imports the shell {shell}"
